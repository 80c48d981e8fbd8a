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
from sim_core.cluster.result import build_result
from sim_core.config import DeploymentConfig
from sim_core.sweep import with_value
from sim_core.types import Phase
from tests.conftest import make_config, trace_config
from tests.sim_core.cluster.support import count_steps, open_loop_config
from tests.sim_core.cluster.test_deployment import assert_same_routing_and_busy_ticks, assert_same_run, deploy
from tests.sim_core.cluster.test_prefix_affinity import shared_prompts


def _tick_by_tick(cfg):
    return cfg.model_copy(update={"limits": cfg.limits.model_copy(update={"coalesce_ticks": False})})


def _arrivals_config(seed: int):
    cfg = open_loop_config(seed)
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
    # the cost the knob buys back: engine steps (each ends or pauses a run) fall with the interval (same requests,
    # same replicas)
    cfg = deploy(make_config("chat-h100-llama8b", workload__num_requests=300, workload__arrival__rate_per_s=40.0),
                 {"replicas": 3, "router": "least_kv"})
    steps = {}
    for refresh_s in (0.0, 0.5):
        dep = Deployment(with_value(cfg, "deployment.state_refresh_s", refresh_s))
        calls = count_steps((inst.engine for inst in dep.instances), ended_only=False)
        dep.run()
        steps[refresh_s] = calls[0]
    assert steps[0.5] < 0.8 * steps[0.0]


@given(st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-10, 1000), st.text(max_size=5)))
def test_the_knob_refuses_what_is_not_a_time_in_range(value):
    ok = (isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
          and (value == 0 or 1e-6 <= value <= 60))  # (0 is exact; below 1e-6 s the refresh instants overflow)
    try:
        got = DeploymentConfig(state_refresh_s=value).state_refresh_s
    except ValidationError as err:
        assert not ok and "state_refresh_s" in str(err)
    else:
        assert ok and got == value


# ------------------------------------------------------------------ closed-loop sessions (turns.py)
def _closed_loop(router, refresh_s, think_s=2.0, n=90, rate=30.0):
    sessions = {"turns": 3, "think_time_s": think_s, "closed_loop": True}
    return make_config(workload__num_requests=n, workload__sessions=sessions, workload__arrival__rate_per_s=rate,
                       kv_cache__enable_prefix_caching=True,
                       deployment={"replicas": 3, "router": router, "state_refresh_s": refresh_s})  # fmt: skip


def test_closed_loop_turns_are_routed_on_the_state_of_their_interval():
    # Every turn (first or later, released by a reply) arriving within the first 60 s is routed from the engines as
    # they were at t = 0 (no KV in use, nothing finished), plus the requests sent since: least_kv deals them out in
    # turn in arrival order, as in the open-loop test above. Exact state steers by KV in use.
    stale = run_simulation(_closed_loop("least_kv", 60.0, think_s=0.5, n=30, rate=5.0))
    assert float(np.nanmax(stale.requests.arrival_s)) < 60.0 and stale.summary.num_finished == 30
    rank = np.argsort(np.argsort(stale.requests.arrival_s, kind="stable"), kind="stable")  # routing order: by time
    assert np.array_equal(stale.instance_of, rank % 3)
    exact = run_simulation(_closed_loop("least_kv", 0.0, think_s=0.5, n=30, rate=5.0))
    assert not np.array_equal(exact.instance_of, stale.instance_of)


@pytest.mark.parametrize("refresh_s", [0.05, 0.5])
@pytest.mark.parametrize("disaggregated", [False, True])
def test_closed_loop_views_are_each_instance_at_the_refresh_instant(refresh_s, disaggregated):
    # What the router read for each arrival, against each instance's own record: at the refresh instant k*dt at or
    # before the arrival, its KV in use after the last tick that started before k*dt, and the requests it
    # finished by then.
    cfg = _closed_loop("least_kv", refresh_s)
    if disaggregated:
        cfg = with_value(cfg, "deployment", {"router": "least_kv", "state_refresh_s": refresh_s,
                                             "disaggregation": {"prefill": {"replicas": 3}, "decode": {"replicas": 1}}})
    dep = Deployment(cfg, check_invariants=True)
    seen, at = [], dep.views.at

    def recording(t_s):
        views = at(t_s)
        seen.append((t_s, [(v.usage, getattr(e, "num_added", 0) - v.num_outstanding) for v, e in zip(views, dep.views.engines)]))
        return views

    dep.views.at = recording
    dep.run()
    res = build_result(dep)
    assert res.summary.num_finished == cfg.workload.num_requests and len(seen) == cfg.workload.num_requests
    bs = cfg.kv_cache.block_size
    for i, inst in enumerate(res.instances[: len(dep.front)]):
        tl, finish = inst.result.timeline, inst.result.requests.finish_s  # (a prefill instance: its hand-offs)
        ids = np.array(dep.ids_of[i], dtype=np.int64)
        released = res.kv_transfer_end_s[ids]  # a prefill instance frees a request's prompt blocks then
        blocks = -(-res.requests.prompt_tokens[ids] // bs)
        kv_blocks = dep.front[i].engine.kv.num_blocks
        for t_s, views in seen:
            instant = np.floor(t_s / refresh_s) * refresh_s
            before = np.flatnonzero((tl.t_start_s < instant) & (tl.phase != Phase.IDLE))  # (idle rows change nothing)
            start = tl.t_start_s[before[-1]] if before.size else -np.inf
            end = start + tl.duration_s[before[-1]] if before.size else -np.inf
            used = tl.kv_blocks_used[before[-1]] if before.size else 0
            used -= blocks[(released > start) & (released <= instant)].sum()  # (rows record KV at their tick's end)
            assert views[i] == (used / kv_blocks, int(np.count_nonzero(finish <= end)))


def test_closed_loop_least_kv_with_refresh_keeps_turn_times_and_routes_on_stale_state():
    exact, stale = run_simulation(_closed_loop("least_kv", 0.0)), run_simulation(_closed_loop("least_kv", 0.5))
    assert not np.array_equal(exact.instance_of, stale.instance_of)
    dep = Deployment(_closed_loop("least_kv", 0.5))
    dep.run()
    wl, res = dep.workload, build_result(dep)  # every later turn still leaves its think time after the previous reply
    prev = np.flatnonzero(wl.next_turn >= 0)
    assert np.array_equal(res.requests.arrival_s[wl.next_turn[prev]], res.requests.finish_s[prev] + wl.think_s[prev])


def test_closed_loop_prefix_affinity_routes_on_exact_state_whatever_the_refresh():
    # its view at a refresh instant would be each engine's whole prefix cache (docs/cluster.md: why it is not kept)
    a, b = run_simulation(_closed_loop("prefix_affinity", 0.5)), run_simulation(_closed_loop("prefix_affinity", 0.0))
    assert np.array_equal(a.instance_of, b.instance_of)
    for x, y in zip(a.instances, b.instances):
        assert_same_run(x.result, y.result)


@pytest.mark.parametrize("refresh_s", [0.05, 0.7])
def test_closed_loop_routing_with_refresh_does_not_depend_on_coalescing(refresh_s):
    _assert_coalescing_free(_closed_loop("least_kv", refresh_s))


@pytest.mark.parametrize("router", ["least_kv", "prefix_affinity", "weighted_score"])
def test_one_replica_closed_loop_with_refresh_is_the_single_engine(router):
    cfg = _closed_loop(router, 0.3)
    single = run_simulation(cfg.model_copy(update={"deployment": None}))
    assert_same_run(single, run_simulation(with_value(cfg, "deployment.replicas", 1)))
