"""xPyD: coalesced runs (fast path, pure-decode runs) against the tick-by-tick deployment (`limits.coalesce_ticks` off).

Review 22 (pre-existing, not from that session's changes): with hand-offs waiting for decode room (back-pressure) a
dispatch is retried after every decode step, so a decode instance's run of several ticks retried only at its end: the
transfers, and finish times of a third of the requests, came later than tick by tick (in 12 of 67 generated xPyD
configs). A decode instance's horizon is now its next tick while hand-offs wait (`Deployment._horizon`)."""

from __future__ import annotations

import numpy as np
import pytest

from sim_core.cluster import Deployment
from sim_core.cluster.result import build_result
from sim_core.sweep import with_value
from tests.conftest import make_config
from tests.sim_core.cluster.test_deployment import assert_same_routing_and_busy_ticks


def _run(cfg):
    dep = Deployment(cfg, check_invariants=True)
    dep.run()
    return build_result(dep)


def _one_prefill_two_decode(decode_gib: float, layerwise: bool = False, router: str = "round_robin"):
    cfg = make_config(seed=30, workload__num_requests=38, workload__arrival__rate_per_s=5.0,
                      workload__prompt_tokens={"dist": "lognormal", "mean": 1500, "min": 1, "max": 3000},
                      workload__output_tokens={"dist": "lognormal", "mean": 300, "min": 1, "max": 600})  # fmt: skip
    hw = cfg.hardware.model_dump()
    return with_value(cfg, "deployment", {"router": router, "disaggregation": {
        "prefill": {"replicas": 1}, "decode": {"replicas": 2, "hardware": hw | {"memory_gib": decode_gib}},
        "link": {"layerwise_pipelining": layerwise}}})  # fmt: skip


# (18.8 GiB: hand-offs wait and decodes are pre-empted on every router here; at 19.0 GiB vllm-v1's session-75 refit left
# round robin's decode side without a pre-emption)
@pytest.mark.parametrize("decode_gib, layerwise, router", [(80.0, False, "round_robin"), (18.8, False, "round_robin"),
                                                           (18.8, True, "round_robin"), (18.8, False, "least_outstanding")])  # fmt: skip
def test_coalesced_runs_equal_tick_by_tick_with_and_without_decode_back_pressure(decode_gib, layerwise, router):
    cfg = _one_prefill_two_decode(decode_gib, layerwise, router)
    a, b = _run(cfg), _run(with_value(cfg, "limits.coalesce_ticks", False))
    assert_same_routing_and_busy_ticks(a, b)
    if decode_gib < 20:  # (what these are for: hand-offs wait for decode room, pre-emptions on the decode side)
        assert np.nansum(a.kv_transfer_start_s - a.kv_wait_start_s) > 0 and int(a.requests.num_preemptions.sum()) > 0
