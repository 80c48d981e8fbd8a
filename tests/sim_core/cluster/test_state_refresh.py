"""deployment.state_refresh_s: least_kv and prefix_affinity route on engine state as of the last refresh
instant (router.py, deployment.py), whatever the engines' coalescing."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from sim_core import run_simulation
from sim_core.cluster import Deployment
from sim_core.config import DeploymentConfig
from sim_core.sweep import with_value
from tests.conftest import make_config, trace_config
from tests.sim_core.cluster.test_deployment import assert_same_routing_and_busy_ticks, assert_same_run, deploy
from tests.sim_core.cluster.test_prefix_affinity import shared_prompts
from tests.sim_core.test_engine import random_config


def _tick_by_tick(cfg):
    return cfg.model_copy(update={"limits": cfg.limits.model_copy(update={"coalesce_ticks": False})})


def _arrivals_config(seed: int):
    cfg = random_config(seed)
    if cfg.workload.arrival.process == "closed_loop":
        cfg = with_value(cfg, "workload.arrival.process", "poisson")
    return cfg


def _assert_coalescing_free(cfg):
    # (least_kv settles choices from bounds, so where an idle instance pauses depends on how the others ran:
    # idle gaps may be cut into other rows; prefix_affinity reaches every routing instant: the same rows)
    fast, slow = run_simulation(cfg, check_invariants=True), run_simulation(_tick_by_tick(cfg))
    assert_same_routing_and_busy_ticks(fast, slow)
    if cfg.deployment.router == "prefix_affinity":
        for a, b in zip(fast.instances, slow.instances):
            assert_same_run(a.result, b.result)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("refresh_s", [0.0, 0.05, 0.7])
def test_least_kv_routing_and_runs_do_not_depend_on_coalescing(seed, refresh_s):
    _assert_coalescing_free(deploy(_arrivals_config(seed), {"replicas": 2 + seed % 3, "router": "least_kv",
                                                            "state_refresh_s": refresh_s}))  # fmt: skip


@pytest.mark.parametrize("refresh_s", [0.0, 0.05, 0.7])
def test_prefix_affinity_routing_and_runs_do_not_depend_on_coalescing(refresh_s):
    cfg = shared_prompts(num_prompts=8, num_requests=150, rate=40.0)
    _assert_coalescing_free(deploy(cfg, {"replicas": 3, "router": "prefix_affinity", "state_refresh_s": refresh_s}))


@pytest.mark.parametrize("seed", range(4))
def test_one_replica_is_the_single_engine_whatever_the_refresh(seed):
    cfg = _arrivals_config(seed)
    for refresh_s in (0.01, 0.3, 5.0):
        assert_same_run(run_simulation(cfg), run_simulation(deploy(cfg, {"replicas": 1, "router": "least_kv",
                                                                         "state_refresh_s": refresh_s})))  # fmt: skip


def test_within_one_refresh_interval_only_the_requests_sent_count():
    # Every arrival falls in the first interval: the router sees the engines as they were at t = 0 (no KV in
    # use), plus the requests it has sent since, so least_kv deals them out in turn whatever their size;
    # with exact state it sees the long prompts' KV and steers around them.
    n = 12
    cfg = trace_config([3000 if i % 3 == 0 else 100 for i in range(n)], [200] * n, [0.2 * i for i in range(n)])
    stale = run_simulation(deploy(cfg, {"replicas": 3, "router": "least_kv", "state_refresh_s": 60.0}))
    assert stale.instance_of.tolist() == [i % 3 for i in range(n)]
    exact = run_simulation(deploy(cfg, {"replicas": 3, "router": "least_kv", "state_refresh_s": 0.0}))
    assert exact.instance_of.tolist() != stale.instance_of.tolist()


def test_replicas_pause_once_per_interval_not_per_arrival():
    # the cost the knob buys back: engine steps fall with the interval (same requests, same replicas)
    cfg = deploy(make_config("chat-h100-llama8b", workload__num_requests=300, workload__arrival__rate_per_s=40.0),
                 {"replicas": 3, "router": "least_kv"})
    steps = {}
    for refresh_s in (0.0, 0.5):
        dep = Deployment(with_value(cfg, "deployment.state_refresh_s", refresh_s))
        calls = [0]
        for inst in dep.instances:
            step = inst.engine.step

            def counted(step=step):
                calls[0] += 1
                return step()

            inst.engine.step = counted
        dep.run()
        steps[refresh_s] = calls[0]
    assert steps[0.5] < 0.8 * steps[0.0]


@given(st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-10, 1000), st.text(max_size=5)))
def test_the_knob_refuses_what_is_not_a_time_in_range(value):
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and 0 <= value <= 60
    try:
        got = DeploymentConfig(state_refresh_s=value).state_refresh_s
    except ValidationError as err:
        assert not ok and "state_refresh_s" in str(err)
    else:
        assert ok and got == value
