"""scripts/cluster_cost.py's `--stats`: what a deployment's routing did, counted on a run of its own."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from sim_core.cluster.router import Router
from sim_core.engine import Engine

_SPEC = importlib.util.spec_from_file_location("cluster_cost", Path(__file__).parents[3] / "scripts" / "cluster_cost.py")
cost = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(cost)


def test_counts_name_every_arrivals_settled_choice_and_leave_the_classes_as_they_were():
    before = (Router.choose_by_bounds, Engine.step, Engine.outstanding_curve, Engine.live_kv_curve)
    counts = cost.count_run(cost.deployment_config("least_outstanding", 0.0, False, 300))
    # every arrival is settled once from bounds; each open try sends a rival to catch up (an engine step)
    assert counts["choose_by_bounds"] - counts["open"] == 300
    assert counts["open"] > 0 and counts["step"] >= counts["open"] and counts["outstanding_curve"] > 0
    assert (Router.choose_by_bounds, Engine.step, Engine.outstanding_curve, Engine.live_kv_curve) == before
    rr = cost.count_run(cost.deployment_config("round_robin", 0.0, False, 300))
    assert rr["choose_by_bounds"] == rr["open"] == 0  # round robin routes up front, from no state
