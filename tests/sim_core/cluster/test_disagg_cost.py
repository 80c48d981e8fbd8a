"""xPyD cost (README, Beyond one engine: Cost): a prefill instance whose idle jump ends at its next arrival, before
its horizon, runs that arrival's tick in the same step (`Engine.tick_after_idle`, set by the deployment). Each run is
compared, array by array (requests, timeline with its idle rows, events, gaps, batch log, summary, per instance, and
the deployment's per-request arrays), with the same deployment stepping one idle jump or tick per call."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from sim_core.cluster import Deployment
from sim_core.cluster.result import build_result
from tests.conftest import make_config
from tests.sim_core.cluster.support import open_loop_config
from tests.sim_core.cluster.test_deployment import deploy

DEPLOYMENT_ARRAYS = ("instance_of", "decode_instance_of", "kv_wait_start_s", "kv_transfer_start_s", "kv_transfer_end_s",
                     "kv_transfer_bytes")  # fmt: skip


def _arrays(res) -> dict[str, np.ndarray]:
    """Every array of a result (events ordered: events at one instant may be recorded in another order)."""
    out = {f"requests.{f}": getattr(res.requests, f) for f in vars(res.requests)}
    out |= {f"timeline.{name}": col for name, col in res.timeline.columns.items()}
    ev = res.events
    order = np.lexsort((ev.kind, ev.req, ev.time_s))
    out |= {"events.time_s": ev.time_s[order], "events.req": ev.req[order], "events.kind": ev.kind[order]}
    out["itl_s"] = np.asarray(res.itl_s)
    out |= {f"batches.{f.name}": getattr(res.batches, f.name) for f in dataclasses.fields(res.batches)
            if isinstance(getattr(res.batches, f.name), np.ndarray)}  # fmt: skip
    return out


def _run(cfg, merged: bool, check_invariants: bool = True):
    """The deployment's result and the number of front-instance steps; `merged` False: every idle jump is a step."""
    dep = Deployment(cfg, check_invariants=check_invariants)
    if not merged:
        for x in dep.front:
            x.engine.tick_after_idle = False
    steps = [0]
    for x in dep.front:  # (the loop's calls: a merged step's continuation calls `step` from inside the call)
        def counted(step=x.engine.step, engine=x.engine):
            steps[0] += not engine._continuing
            return step()

        x.engine.step = counted
    dep.run()
    return dep, build_result(dep), steps[0]


def assert_same_result(cfg) -> tuple[int, int]:
    """Same numbers with and without the merged steps; returns the front instances' steps (merged, unmerged)."""
    dep, res, merged_steps = _run(cfg, merged=True)
    ref_dep, ref, ref_steps = _run(cfg, merged=False)
    assert dep.stopped_reason == ref_dep.stopped_reason
    pairs = [(res, ref)] + [(a.result, b.result) for a, b in zip(res.instances, ref.instances)]
    for a, b in pairs:
        x, y = _arrays(a), _arrays(b)
        assert x.keys() == y.keys()
        for name in x:
            assert np.array_equal(x[name], y[name], equal_nan=x[name].dtype.kind == "f"), name
        assert a.summary.model_dump_json() == b.summary.model_dump_json()  # (NaN fields: the JSON, not ==)
    for name in DEPLOYMENT_ARRAYS:
        assert np.array_equal(getattr(res, name), getattr(ref, name), equal_nan=True), name
    return merged_steps, ref_steps


def _chat(num_requests=300, rate=24.0, seed=0, **overrides):
    return make_config("chat-h100-llama8b", seed=seed, workload__num_requests=num_requests,
                       workload__arrival__rate_per_s=rate, **overrides)  # fmt: skip


@pytest.mark.parametrize("router", ["round_robin", "least_outstanding", "least_kv", "prefix_affinity"])
def test_a_prefill_instance_runs_an_arrival_in_the_step_that_idles_up_to_it(router):
    cfg = deploy(_chat(), {"router": router, "disaggregation": {"prefill": {"replicas": 2}, "decode": {"replicas": 2}}})
    merged, unmerged = assert_same_result(cfg)
    assert merged < 0.8 * unmerged  # what it is for: most arrivals reach an idle prefill instance


@pytest.mark.parametrize("seed", range(8))
def test_merged_idle_steps_on_random_configs(seed):
    # the engine tests' random configs (policies, chunking, static batches, swap, prefix caching, speculative ...)
    routers = ["round_robin", "least_outstanding", "least_kv", "cache_aware"]
    cfg = deploy(open_loop_config(seed, "gamma"), {"router": routers[seed % 4], "state_refresh_s": [0.0, 0.05][seed % 2],
                                                    "disaggregation": {"prefill": {"replicas": 1 + seed % 3},
                                                                       "decode": {"replicas": 1 + seed % 2}}})  # fmt: skip
    assert_same_result(cfg)


@pytest.mark.parametrize("limit", [{"limits__max_ticks": 150}, {"limits__max_sim_time_s": 2.0}])
def test_a_limit_stops_the_run_where_it_stops_without_merged_steps(limit):
    # (the continuation runs only where the next step's guards pass: a stop ends the loop at the same pass)
    cfg = deploy(_chat(**limit), {"disaggregation": {"prefill": {"replicas": 2}, "decode": {"replicas": 1}}})
    assert_same_result(cfg)


def test_back_pressure_leaves_the_prefill_instance_nothing_to_run_after_its_idle_jump():
    # small KV on both pools: handed-off requests hold their prefill blocks while they wait for a decode slot, so an
    # arrival after an idle jump may not be admitted (the continuation plans nothing; the next step idles)
    cfg = make_config(workload__num_requests=80, workload__arrival__rate_per_s=10.0,
                      workload__prompt_tokens={"dist": "fixed", "mean": 2000, "min": 1, "max": 2000},
                      workload__output_tokens={"dist": "fixed", "mean": 400, "min": 1, "max": 400})  # fmt: skip
    hw = cfg.hardware.model_dump()
    cfg = deploy(cfg, {"disaggregation": {"prefill": {"replicas": 1, "hardware": hw | {"memory_gib": 19.0}},
                                          "decode": {"replicas": 2, "hardware": hw | {"memory_gib": 19.5}}}})  # fmt: skip
    dep = Deployment(cfg)
    empty = [0]
    for x in dep.front:  # plans made in a continuation that leave nothing to run
        def schedule(st, plan_of=x.engine.sched.schedule, engine=x.engine):
            plan = plan_of(st)
            empty[0] += engine._continuing and plan.is_empty
            return plan

        x.engine.sched.schedule = schedule
    dep.run()
    res = build_result(dep)
    assert np.nanmax(res.kv_transfer_start_s - res.kv_wait_start_s) > 1.0  # back-pressure happened
    assert empty[0] >= 1
    assert_same_result(cfg)
