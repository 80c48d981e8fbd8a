"""Where instances pause changes cost, never results (deployment.py): a replica that reaches an arrival routes it
without ending its run (`Deployment._route_mid_run`, the fast path's `Engine.horizon_reached` hook), and a
prefill instance that holds no handed-off KV runs past cluster events (`Deployment._horizon`). Each is compared
with the deployment that pauses everywhere it used to: same routing, same request times, same busy ticks (idle
gaps may be cut into fewer rows), same KV transfers."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim_core.cluster import Deployment
from sim_core.cluster.result import build_result
from sim_core.engine import Engine
from sim_core.sweep import with_value
from tests.conftest import make_config
from tests.sim_core.cluster.support import count_steps, open_loop_config
from tests.sim_core.cluster.test_deployment import (
    assert_cluster_invariants,
    assert_same_routing_and_busy_ticks,
    deploy,
)
from tests.sim_core.cluster.test_prefix_affinity import shared_prompts
from tests.sim_core.test_engine import random_config


def _run(cfg, ended_only=True, **flags):
    dep = Deployment(cfg, check_invariants=True, **flags)
    steps = count_steps((x.engine for x in dep.instances), ended_only)
    dep.run()
    return build_result(dep), steps[0]


def _chat(num_requests=300, rate=60.0, seed=0):
    return make_config("chat-h100-llama8b", seed=seed, workload__num_requests=num_requests,
                       workload__arrival__rate_per_s=rate)  # fmt: skip


# ------------------------------------------------------------------ routing mid-run
ROUTERS = [("least_outstanding", 0.0), ("cache_aware", 0.0), ("least_kv", 0.0), ("least_kv", 0.05), ("least_kv", 0.4)]


@pytest.mark.parametrize("router, refresh_s", ROUTERS)
@pytest.mark.parametrize("seed", range(3))
def test_routing_inside_a_run_routes_and_runs_as_routing_between_steps(router, refresh_s, seed):
    cfg = deploy(_chat(rate=40.0 + 20 * seed, seed=seed), {"replicas": 2 + seed, "router": router,
                                                           "state_refresh_s": refresh_s})  # fmt: skip
    (mid, mid_steps), (ref, ref_steps) = _run(cfg), _run(cfg, mid_run_routing=False)
    assert_same_routing_and_busy_ticks(mid, ref)
    assert_cluster_invariants(mid)
    assert mid_steps < ref_steps  # what it is for: fewer ended runs


@pytest.mark.parametrize("router, refresh_s", ROUTERS)
def test_settling_choices_from_bounds_routes_as_every_replica_at_each_arrival(router, refresh_s):
    cfg = deploy(_chat(rate=80.0, seed=3), {"replicas": 4, "router": router, "state_refresh_s": refresh_s})
    (early, early_steps), (ref, ref_steps) = _run(cfg), _run(cfg, route_early=False)
    assert_same_routing_and_busy_ticks(early, ref)
    assert early_steps < ref_steps


@pytest.mark.parametrize("seed", range(10))
def test_routing_inside_a_run_on_random_configs(seed):
    cfg = open_loop_config(seed, "gamma")
    router, refresh_s = ROUTERS[seed % len(ROUTERS)]
    cfg = deploy(cfg, {"replicas": 2 + seed % 3, "router": router, "state_refresh_s": refresh_s})
    assert_same_routing_and_busy_ticks(_run(cfg)[0], _run(cfg, mid_run_routing=False)[0])
    assert_same_routing_and_busy_ticks(_run(cfg)[0], _run(cfg, route_early=False)[0])


def test_routing_inside_a_run_with_shared_prompts_and_prefix_caching():
    cfg = deploy(shared_prompts(num_prompts=8, num_requests=200, rate=60.0), {"replicas": 3, "router": "cache_aware"})
    assert_same_routing_and_busy_ticks(_run(cfg)[0], _run(cfg, route_early=False)[0])


def test_the_fast_path_asks_the_cluster_at_its_horizon_and_runs_on():
    # one engine with a horizon inside a busy stretch: with no cluster the call ends there; an `on_horizon` that
    # moves the horizon lets the same call run on, and the ticks are the same as without any horizon
    cfg = make_config("chat-h100-llama8b", workload__num_requests=40, workload__arrival__rate_per_s=20.0,
                      scheduler__max_num_seqs=4)  # (a batch of 4: a queue forms behind it)
    ref = Engine(cfg).run()
    t_mid = float(ref.timeline.t_start_s[ref.timeline.num_decode_seqs > 3][5])
    stopped, extended = Engine(cfg), Engine(cfg)
    stopped.horizon_s = extended.horizon_s = t_mid
    asked = []
    extended.on_horizon = lambda eng, now_s, count, usage, waiting: asked.append((now_s, count, usage, waiting)) or np.inf
    while stopped.st.now_s < t_mid:
        stopped.step()
    while not asked:
        extended.step()
    # its clock, counts and KV where the other stopped
    assert asked == [(stopped.st.now_s, stopped.num_outstanding, stopped.kv.usage, stopped.num_waiting)]
    assert 0 < asked[0][3] < asked[0][1]  # (a queue and a batch: the waiting count is the queue's, not the count)
    assert extended.st.now_s > stopped.st.now_s  # the same call ran on
    while extended.step():
        pass
    again = extended.result()
    assert np.array_equal(again.timeline.duration_s, ref.timeline.duration_s)
    assert np.array_equal(again.requests.finish_s, ref.requests.finish_s)


# ------------------------------------------------------------------ xPyD horizons
@pytest.mark.parametrize("seed", range(4))
def test_prefill_instances_run_past_events_that_cannot_reach_them(seed):
    link = [{}, {"bandwidth_gb_per_s": None}, {"bandwidth_gb_per_s": 5.0, "latency_us": 500.0},
            {"layerwise_pipelining": False}][seed]  # fmt: skip
    cfg = deploy(_chat(num_requests=250, rate=15.0 + 10 * seed, seed=seed),
                 {"disaggregation": {"prefill": {"replicas": 1 + seed % 2}, "decode": {"replicas": 2}, "link": link}})
    # (every step counted: a prefill instance's fast-path run pauses after each row, where a general step ends)
    (tight, tight_steps), (ref, ref_steps) = _run(cfg, False), _run(cfg, False, tight_horizons=False)
    assert_same_routing_and_busy_ticks(tight, ref)
    assert_cluster_invariants(tight)
    assert tight_steps <= ref_steps and (seed % 2 == 0 or tight_steps < ref_steps)  # (2 prefill instances: fewer)


@pytest.mark.parametrize("seed", range(6))
def test_prefill_lookahead_on_random_configs(seed):
    cfg = open_loop_config(seed, "gamma")
    router = ["round_robin", "least_outstanding", "least_kv"][seed % 3]
    cfg = deploy(cfg, {"router": router, "disaggregation": {"prefill": {"replicas": 1 + seed % 2}, "decode": {"replicas": 2}}})
    assert_same_routing_and_busy_ticks(_run(cfg)[0], _run(cfg, tight_horizons=False)[0])


def test_back_pressure_run_is_unchanged_by_the_lookahead():
    # the decode pool's KV is small: requests wait holding their prefill blocks, so the prefill instance keeps
    # stopping at events while it holds any
    cfg = make_config(workload__num_requests=60, workload__arrival__rate_per_s=20.0,
                      workload__prompt_tokens={"dist": "fixed", "mean": 2000, "min": 1, "max": 2000},
                      workload__output_tokens={"dist": "fixed", "mean": 400, "min": 1, "max": 400})  # fmt: skip
    small = cfg.hardware.model_dump() | {"memory_gib": 19.5}  # ~2 GiB of KV: a few requests at a time
    cfg = deploy(cfg, {"disaggregation": {"decode": {"hardware": small}}})
    tight, ref = _run(cfg)[0], _run(cfg, tight_horizons=False)[0]
    assert np.nanmax(tight.kv_transfer_start_s - tight.kv_wait_start_s) > 1.0  # back-pressure happened
    assert_same_routing_and_busy_ticks(tight, ref)


@pytest.mark.parametrize("router", ["prefix_affinity", "weighted_score"])
@pytest.mark.parametrize("refresh_s", [0.0, 0.05, 0.4])
@pytest.mark.parametrize("seed", range(2))
def test_exact_state_routers_route_inside_the_run_of_the_last_replica_to_reach_an_instant(router, refresh_s, seed):
    # they read every replica's prefix cache at the instant (weighted_score also its queue and KV usage): the last to
    # get there routes it, its cache, queue and blocks as its run has them
    cfg = with_value(shared_prompts(num_prompts=8, num_requests=200, rate=60.0 + 30 * seed), "seed", seed)
    cfg = deploy(cfg, {"replicas": 3 + seed, "router": router, "state_refresh_s": refresh_s})
    (mid, mid_steps), (ref, ref_steps) = _run(cfg), _run(cfg, mid_run_routing=False)
    assert_same_routing_and_busy_ticks(mid, ref)
    assert_cluster_invariants(mid)
    assert mid_steps < ref_steps


@pytest.mark.parametrize("seed", range(6))
def test_exact_state_routers_inside_the_run_on_random_configs(seed):
    cfg = random_config(seed + 20)
    if cfg.workload.arrival.process == "closed_loop":
        cfg = with_value(cfg, "workload.arrival.process", "gamma")
    cfg = with_value(with_value(cfg, "kv_cache.layout", "paged"), "kv_cache.enable_prefix_caching", True)
    cfg = with_value(cfg, "workload.shared_prefix", {"num_system_prompts": 3, "share_ratio": 0.7,
                                                     "system_prompt_tokens": {"dist": "fixed", "mean": 128}})  # fmt: skip
    router = ["prefix_affinity", "weighted_score"][seed // 2 % 2]
    cfg = deploy(cfg, {"replicas": 2 + seed % 3, "router": router, "state_refresh_s": [0.0, 0.05][seed % 2]})
    assert_same_routing_and_busy_ticks(_run(cfg)[0], _run(cfg, mid_run_routing=False)[0])


@pytest.mark.parametrize("router", ["least_outstanding", "weighted_score"])
@pytest.mark.parametrize("seed", range(2))
def test_swapped_out_requests_count_at_a_horizon_inside_a_run(router, seed):
    # A run that may pause never swaps (`preempts_here`), but the references that end runs where they wait do: the
    # count and the queue a run passed `Engine.horizon_reached` left its swapped-out requests out, which a run ended
    # there writes back and a router reads (least_outstanding routed otherwise with runs paused and ended under swap;
    # session 58's review)
    cfg = make_config(seed=seed, workload__num_requests=80, workload__arrival__rate_per_s=40.0,
                      workload__prompt_tokens__mean=1500, workload__output_tokens__mean=300, hardware__memory_gib=20.0,
                      scheduler__preemption="swap", kv_cache__swap_space_gb=4.0)  # fmt: skip
    cfg = deploy(cfg, {"replicas": 2, "router": router, "state_refresh_s": 0.0})
    res = _run(cfg)[0]
    assert res.summary.num_swap_outs > 50  # (swaps happen)
    for flags in ({"pause_runs": False}, {"mid_run_routing": False}):
        assert_same_routing_and_busy_ticks(res, _run(cfg, **flags)[0])


# ------------------------------------------------------------------ pausing runs at the horizon
PAUSING = [("least_outstanding", 0.0), ("cache_aware", 0.0), ("least_kv", 0.0), ("least_kv", 0.05),
           ("prefix_affinity", 0.0), ("prefix_affinity", 0.4), ("weighted_score", 0.0), ("weighted_score", 0.05)]  # fmt: skip


def _open_load_test(monkeypatch, router: str) -> None:
    """cache_aware under SGLang's library defaults (0.5 of the prompt, 32 requests, 1.1x) instead of its launcher's
    (0.3, 64, 1.5x): with the launcher's, these loads rarely leave the load test open and shorter matches settle more
    choices, so they settle from the trees alone and few replicas wait for another (the machinery under test is
    hardly reached)."""
    if router == "cache_aware":
        from sim_core.cluster import router as module

        monkeypatch.setattr(module, "CACHE_THRESHOLD", 0.5)
        monkeypatch.setattr(module, "BALANCE_ABS_THRESHOLD", 32)
        monkeypatch.setattr(module, "BALANCE_REL_THRESHOLD", 1.1)


@pytest.mark.parametrize("router, refresh_s", PAUSING)
def test_a_run_that_waits_at_its_horizon_pauses_and_runs_as_one_that_ends_there(monkeypatch, router, refresh_s):
    _open_load_test(monkeypatch, router)
    cfg = deploy(shared_prompts(num_prompts=8, num_requests=250, rate=90.0),
                 {"replicas": 4, "router": router, "state_refresh_s": refresh_s})  # fmt: skip
    (paused, paused_runs), (ref, ref_runs) = _run(cfg), _run(cfg, pause_runs=False)
    assert_same_routing_and_busy_ticks(paused, ref)
    assert_cluster_invariants(paused)
    assert paused_runs < ref_runs / 2  # what it is for: runs that wait for the others go on instead of ending


@pytest.mark.parametrize("seed", range(8))
def test_pausing_runs_on_random_configs(seed):
    cfg = open_loop_config(seed + 40, "gamma")
    router, refresh_s = PAUSING[seed % len(PAUSING)]
    cfg = deploy(cfg, {"replicas": 2 + seed % 3, "router": router, "state_refresh_s": refresh_s})
    assert_same_routing_and_busy_ticks(_run(cfg)[0], _run(cfg, pause_runs=False)[0])


@pytest.mark.parametrize("router", ["least_outstanding", "least_kv", "prefix_affinity", "weighted_score"])
def test_a_paused_run_shows_the_counts_its_write_back_gives(router):
    # at pauses (as it pauses, and when it goes on, after the others routed requests to it): its count, KV usage
    # and bounds from the run; then the run ends (settle) and the same from the arrays
    cfg = deploy(_chat(num_requests=200, rate=90.0, seed=1), {"replicas": 3, "router": router, "state_refresh_s": 0.0})
    dep = Deployment(cfg, check_invariants=True)
    seen = []

    def compare(eng, j):
        later = [eng.st.now_s, eng.st.now_s + 0.01, eng.st.now_s + 0.2]
        live = (eng.st.now_s, eng.has_work, eng.num_outstanding, eng.live_kv_usage,
                [eng.outstanding_bounds(t, dep.min_emit_tick_s[j]) for t in later], eng.kv_used_bounds(later[0], 1e-3),
                eng.num_waiting)  # fmt: skip
        added = eng.num_added - eng._live[2]
        eng.settle()
        assert eng._paused is None and eng.kv_used_bounds(later[0], 1e-3) == live[5]
        assert live[:4] == (eng.st.now_s, eng.has_work, eng.num_outstanding, eng.kv.usage)
        assert live[4] == [eng.outstanding_bounds(t, dep.min_emit_tick_s[j]) for t in later]
        assert live[6] == eng.num_waiting
        seen.append((live[2], added))

    for j, x in enumerate(dep.instances):
        def step(eng=x.engine, step=x.engine.step, j=j):
            if eng._paused is not None and len(seen) % 2:
                compare(eng, j)
            more = step()
            if eng._paused is not None and not len(seen) % 2:
                compare(eng, j)
            return more

        x.engine.step = step
    dep.run()
    assert len(seen) > 20 and max(c for c, _ in seen) > 3  # it paused often, with requests in flight
    assert sum(a > 0 for _, a in seen) > 5  # requests were added to paused runs
    assert_same_routing_and_busy_ticks(build_result(dep), _run(cfg)[0])


def test_a_deployment_that_stops_ends_its_paused_runs():
    # a guard stops replica 0 (as a tick or time limit would) while others wait at an instant, paused: their state
    # goes to the arrays, and the result up to there is the result of runs that end at their horizons
    def stopped(pause_runs):
        cfg = deploy(_chat(num_requests=300, rate=90.0), {"replicas": 3, "router": "least_outstanding"})
        dep = Deployment(cfg, check_invariants=True, pause_runs=pause_runs)
        first, others = dep.instances[0].engine, [x.engine for x in dep.instances[1:]]
        step, paused = first.step, []

        def guarded():
            if first.st.now_s > 1.0:
                paused.extend(e._paused is not None for e in others)
                return first._stop("stopped by the test")
            return step()

        first.step = guarded
        dep.run()
        return dep, paused

    (dep, paused_at_stop), (ref, _) = stopped(True), stopped(False)
    assert dep.stopped_reason == "replica 0: stopped by the test" and any(paused_at_stop)
    assert all(x.engine._paused is None for x in dep.instances)
    assert_same_routing_and_busy_ticks(build_result(dep), build_result(ref))


@pytest.mark.parametrize("router, refresh_s, seed", [("least_outstanding", 0.0, 0), ("least_outstanding", 0.0, 1),
                                                     ("least_outstanding", 0.0, 2), ("least_kv", 0.05, 0),
                                                     ("least_kv", 0.0, 1), ("least_kv", 0.0, 2)])  # fmt: skip
def test_bounds_kept_between_asks_are_the_bounds_of_the_state_then(router, refresh_s, seed):
    # outstanding_bounds keeps its count curve until the state moves, and the deployment keeps each replica's curve
    # (`_curves`) until it steps, taking the requests sent to it meanwhile (`CountCurve.add`): at every choice of a
    # router, each replica's answers (paused or not, with requests added since a pause), from the engine's memo and
    # from the deployment's curve, and those the deployment kept from an earlier try at the same instant (`_bounds_at`,
    # `_count_bounds`, `_usage_bounds`: an open choice's retry), equal the answers it computes afresh
    cfg = deploy(_chat(num_requests=200, rate=90.0, seed=seed), {"replicas": 3, "router": router, "state_refresh_s": refresh_s})
    dep = Deployment(cfg)
    choose, checked, reused, added, highs = dep._choose_by_bounds, [], [], [], {}
    route_mid_run, running = dep._route_mid_run, []

    def mid_run(i, *args):  # (the replica whose run reached the instant)
        running.append(i)
        try:
            return route_mid_run(i, *args)
        finally:
            running.pop()

    def checking(r, t):
        for j, x in enumerate(dep.front):
            eng = x.engine
            if running and j == running[-1]:
                # (mid-run: its arrays are behind its run; the router reads its exact values from the run, kept there)
                counts, usage = dep._count_bounds[j], dep._usage_bounds[j]
                assert dep._bounds_at[j] == t and counts[0] == counts[1] and usage[0] == usage[1]
                continue
            later = [t, t + 0.01, t + 0.3, t + 3.0]
            kept = [eng.outstanding_bounds(u, dep.min_emit_tick_s[j]) for u in later]
            curve = dep._curves[j]
            at = dep._bounds_at[j]  # the deployment's: the instant of its count bounds and usage bounds
            eng._bounds_memo = eng._live_left = eng._kv_memo = None
            fresh = [eng.outstanding_bounds(u, dep.min_emit_tick_s[j]) for u in later]
            assert kept == fresh
            if curve is not None:
                assert [curve.bounds(u, dep.min_emit_tick_s[j]) for u in later] == fresh
                if highs.get(curve, curve.high) < curve.high:  # (a kept curve that took a request since)
                    added.append(j)
                highs[curve] = curve.high
            kv_curve = dep._kv_curves[j]
            if kv_curve:  # (a paused run's KV bounds kept by the deployment, with the requests sent since)
                eng._kv_live = None
                assert [kv_curve.bounds(u, dep.min_emit_tick_s[j]) for u in later] == [
                    eng.kv_used_bounds(u, dep.min_emit_tick_s[j]) for u in later]  # fmt: skip
                if highs.get(kv_curve, len(kv_curve.others)) < len(kv_curve.others):
                    added.append(j)
                highs[kv_curve] = len(kv_curve.others)
            if at == t:
                usage = eng.kv_usage_bounds(t, dep.min_emit_tick_s[j]) if router == "least_kv" else None
                expect = ((0, math.inf), (0.0, math.inf)) if router == "least_kv" and usage is None else (fresh[0], usage)
                if dep._count_bounds[j] is None:  # (least_kv: count bounds not asked for yet, worked out when read: `_CountsAt`)
                    expect = (None, usage)
                assert (dep._count_bounds[j], dep._usage_bounds[j] if router == "least_kv" else None) == expect
                reused.append(eng.num_added)
            checked.append(eng._live is not None and eng.num_added > eng._live[2])
        return choose(r, t)

    dep._choose_by_bounds, dep._route_mid_run = checking, mid_run
    dep.run()
    assert len(checked) > 100 and any(checked)  # asked often, also of paused runs with requests added since
    if refresh_s or router == "least_outstanding":
        assert len(reused) > 10  # and the deployment's bounds from an earlier try were asked again at the same instant
    if not refresh_s:
        assert len(added) > 10  # and its curves were kept between asks, taking the requests sent meanwhile


@pytest.mark.parametrize("router", ["least_outstanding", "cache_aware", "least_kv"])
def test_the_router_reads_the_bounds_the_deployment_keeps_and_paused_runs_count_on_from_their_last_ask(monkeypatch, router):
    # `_choose_by_bounds` gives the router the deployment's kept lists (`_count_bounds`, with least_kv `_usage_bounds`),
    # not lists made at each choice: every entry it reads is the replica's bounds at the choice's instant (the count
    # rules: its count curve's there, or its exact count where its run is at the instant, `_route_mid_run`: checked
    # against fresh bounds by the test above); a paused run's `LiveLeft.num_within` asked at later instants walks on
    # from its last ask; and the results are those of the deployment in which every replica reaches each arrival
    from sim_core.cluster.router import Router
    from sim_core.fastpath import LiveLeft

    _open_load_test(monkeypatch, router)
    cfg = deploy(_chat(rate=90.0, seed=1), {"replicas": 4, "router": router})
    dep = Deployment(cfg)
    choose, reads, walks = Router.choose_by_bounds, [], []

    def reading(self, bounds, request=-1, usage=None):
        if self is dep.router:
            kept = dep._count_bounds if usage is None else usage
            assert (bounds if usage is None else usage) is kept
            for j in range(len(dep.front)):
                assert dep._bounds_at[j] is not None  # (every entry worked out at an instant: the choice's)
            if usage is None:
                exact = [b[0] == b[1] for b in bounds]
                reads.append(sum(exact))
        return choose(self, bounds, request, usage)

    num_within = LiveLeft.num_within

    def walking(self, most):
        walks.append(self.walked_to > self.start and self.d + most >= self.walked_to)
        return num_within(self, most)

    monkeypatch.setattr(Router, "choose_by_bounds", reading)
    monkeypatch.setattr(LiveLeft, "num_within", walking)
    dep.run()
    if router != "least_kv":
        assert len(reads) > 100 and any(n < len(dep.front) for n in reads)  # (choices with inexact bounds too)
        assert sum(walks) > 10  # (asks that went on from an earlier one's walk)
    monkeypatch.undo()
    _open_load_test(monkeypatch, router)  # (the same thresholds for the reference)
    reference = Deployment(cfg, route_early=False)
    reference.run()
    assert_same_routing_and_busy_ticks(build_result(dep), build_result(reference))


@pytest.mark.parametrize("disaggregated", [False, True])
def test_a_paused_run_yields_its_finish_ticks_as_a_heap(monkeypatch, disaggregated):
    # `LiveLeft` takes a paused run's fewest tokens left from the smallest key of `done_ticks` (finish_at's keys as the
    # run keeps them, a heap), not from a `min` over finish_at: at every pause, of replicas under least outstanding and of
    # decode instances whose runs take joining decoders, the heap holds exactly finish_at's keys, its smallest first
    from sim_core import fastpath
    from tests.sim_core.cluster.test_disagg_cost import _xpyd

    run_ticks, pauses = fastpath.run_ticks, []

    def checked(engine):
        run, sent = run_ticks(engine), None
        try:
            while True:
                at = run.send(sent)
                finish_at, heap = at[6], at[11]
                assert sorted(heap) == sorted(finish_at) and (not heap or heap[0] == min(finish_at))
                pauses.append(bool(heap))
                sent = yield at
        except StopIteration as stop:
            return stop.value

    monkeypatch.setattr(fastpath, "run_ticks", checked)
    cfg = _xpyd() if disaggregated else deploy(_chat(rate=80.0), {"replicas": 4, "router": "least_outstanding"})
    Deployment(cfg).run()
    assert sum(pauses) > 50


@pytest.mark.parametrize("disaggregated", [False, True])
def test_a_run_leaves_its_generator_only_where_it_pauses(monkeypatch, disaggregated):
    # issue 13: cost. A replica's run that reaches a routing instant its own choice settles goes on inside
    # `fastpath.run_ticks` (it asks `Engine.horizon_reached` there): every yield is a pause, which the engine keeps
    # until the next step resumes it (`Engine._resumed`), not a round trip to the engine at each instant; and replicas'
    # runs still go on across instants (more instants asked than pauses)
    from sim_core import fastpath
    from tests.sim_core.cluster.test_disagg_cost import _xpyd

    run_ticks, resumed, asked, yields = fastpath.run_ticks, Engine._resumed, [0], {}
    horizon_reached = Engine.horizon_reached

    def counted_resume(engine, horizon_s):
        yields[engine] = yields.get(engine, 0) + 1  # (one resume per pause)
        return resumed(engine, horizon_s)

    def counted_ask(engine, *args):
        asked[0] += 1
        return horizon_reached(engine, *args)

    def checked(engine):
        run, sent = run_ticks(engine), None
        try:
            while True:
                at = run.send(sent)
                before = yields.get(engine, 0)
                sent = yield at
                assert yields[engine] == before + 1  # resumed after a pause (or ended by `Engine.settle`)
        except StopIteration as stop:
            return stop.value

    monkeypatch.setattr(fastpath, "run_ticks", checked)
    monkeypatch.setattr(Engine, "_resumed", counted_resume)
    monkeypatch.setattr(Engine, "horizon_reached", counted_ask)
    cfg = _xpyd() if disaggregated else deploy(_chat(rate=80.0), {"replicas": 4, "router": "least_outstanding"})
    Deployment(cfg).run()
    assert sum(yields.values()) > 50
    if not disaggregated:  # (a prefill instance pauses after every row, a decode instance where it waits for events)
        assert asked[0] > sum(yields.values())


@settings(max_examples=80, deadline=None)
@given(st.dictionaries(st.integers(0, 60), st.lists(st.integers(0, 99), min_size=1, max_size=3), max_size=30),
       st.integers(0, 20), st.lists(st.integers(0, 99), max_size=5, unique=True), st.lists(st.integers(0, 99), max_size=6),
       st.integers(0, 3), st.lists(st.integers(0, 40), max_size=12))  # fmt: skip
def test_a_paused_runs_tokens_left_are_counted_as_a_list_of_them_would_count_them(finish_at, d, prefilling, waiting, head,
                                                                                  asks):
    # decoders finishing in decoding tick f (>= d) have f - d + 1 tokens left; prefilling and queued ones (from `head`
    # on) their output less what a recompute victim emitted before its pre-emption: the count with at most `most`
    # left, by lookups and by sorted keys, is a plain count's, asked in any order (`num_within` walks the finish ticks on
    # from where its last ask left off, and from the first again for an earlier instant: `asks`, from a fresh count)
    from types import SimpleNamespace

    from sim_core.fastpath import LiveLeft

    finish_at = {d + f: rs for f, rs in finish_at.items()}
    R = 100
    output = np.arange(R, dtype=np.int64) % 37 + 1
    emitted = np.minimum(np.arange(R, dtype=np.int64) % 3, output - 1)  # (some recompute victims among them)
    engine = SimpleNamespace(st=SimpleNamespace(output=output, emitted=emitted, num_requests=R))
    waiting_keys = [w + R * k for k, w in enumerate(waiting)]  # (queue keys: key % R is the request)
    left = LiveLeft(engine, (0, 0, 0, 0, 0, d, finish_at, dict.fromkeys(prefilling, 0), waiting_keys, head, False,
                             sorted(finish_at)))  # fmt: skip
    tokens = [f - d + 1 for f, rs in finish_at.items() for _ in rs]
    tokens += [int(output[r] - emitted[r]) for r in prefilling] + [int(output[w] - emitted[w]) for w in waiting[head:]]
    for most in range(0, 3 * LiveLeft.FEW_TICKS):
        assert left.num_within(most) == sum(x <= most for x in tokens)
    fresh = LiveLeft(engine, (0, 0, 0, 0, 0, d, finish_at, dict.fromkeys(prefilling, 0), waiting_keys, head, False,
                              sorted(finish_at)))  # fmt: skip
    for most in asks:
        assert fresh.num_within(most) == sum(x <= most for x in tokens)
    # and the whole-context blocks of the decoders among them (what their finishes can free: LiveKvCurve)
    prompt = np.arange(R, dtype=np.int64) * 7 % 53 + 1
    blocks = {r: -(-(int(prompt[r]) + int(output[r])) // 16) for r in range(R)}
    decoders = [(f - d + 1, r) for f, rs in finish_at.items() for r in rs]
    for most in list(range(0, 3 * LiveLeft.FEW_TICKS, 3)) + [LiveLeft.FEW_TICKS, LiveLeft.FEW_TICKS + 1]:
        assert left.blocks_within(most, prompt, output, 16) == sum(blocks[r] for x, r in decoders if x <= most)


@settings(max_examples=120, deadline=None)
@given(st.dictionaries(st.integers(0, 40), st.lists(st.integers(0, 99), min_size=1, max_size=3), max_size=20),
       st.integers(0, 10), st.lists(st.integers(0, 99), max_size=4, unique=True), st.lists(st.integers(1, 60), max_size=6),
       st.lists(st.integers(1, 60), max_size=4), st.integers(1, 3), st.floats(0.0, 5.0), st.floats(0.5, 2.0),
       st.lists(st.floats(-1.0, 80.0), min_size=1, max_size=8))  # fmt: skip
def test_a_count_curve_bounds_each_instant_as_a_count_of_tokens_left_would(finish_at, d, prefilling, lefts, adds, per_tick,
                                                                           now_s, min_tick_s, offsets):
    # CountCurve: (high - requests with at most `most` tokens left, high), `most` the ticks that can start before t times
    # the tokens per tick, exact (high, high) at or before its clock and held at the time limit; its O(1) answer (no
    # request can finish yet) and the requests added to a kept curve (`add`) give what a plain count gives
    from types import SimpleNamespace

    from sim_core.count_curve import CountCurve
    from sim_core.fastpath import LiveLeft

    finish_at = {d + f: rs for f, rs in finish_at.items()}
    R = 100
    output = np.arange(R, dtype=np.int64) % 37 + 1
    engine = SimpleNamespace(st=SimpleNamespace(output=output, emitted=np.zeros(R, dtype=np.int64), num_requests=R))
    live = LiveLeft(engine, (0, 0, 0, 0, 0, d, finish_at, dict.fromkeys(prefilling, 0), [], 0, False, sorted(finish_at)))
    tokens = [f - d + 1 for f, rs in finish_at.items() for _ in rs] + [int(output[r]) for r in prefilling]
    limit_s = now_s + 50.0
    curve = CountCurve(now_s, limit_s, per_tick, live, len(tokens), list(lefts))
    tokens += lefts
    for k in range(len(adds) + 1):
        for off in offsets:
            t = now_s + off
            u = min(t, limit_s)
            most = (int((u - now_s) // min_tick_s) + 1) * per_tick if u > now_s else -1
            assert curve.bounds(t, min_tick_s) == (len(tokens) - sum(x <= most for x in tokens), len(tokens))
        if k < len(adds):
            curve.add(adds[k])
            tokens.append(adds[k])


def _horizons_checked(cfg, monkeypatch):
    """Run cfg's deployment with every `_horizon` of an instance whose horizon the other pool's next outputs bound (a
    busy decode instance; a prefill instance holding handed-off KV while hand-offs wait for a decode slot) checked
    against every busy instance of the other pool: at most its `_next_output_bound_s`, which is never before its
    clock. (`_horizon` asks only the instances whose clock is before the horizon so far.) Returns how many were checked."""
    checked = [0]
    horizon = Deployment._horizon

    def checking(self, i, t_arr, t_heap):
        h = horizon(self, i, t_arr, t_heap)
        inst = self.instances[i]
        if inst.role == "decode" and inst.engine.is_busy or inst.role == "prefill" and self._pending and not self._free_running(i):
            for j, o in enumerate(self.instances):
                if o.role != inst.role and o.engine.has_work:
                    bound_s = self._next_output_bound_s(j)
                    assert o.engine.st.now_s <= bound_s and h <= bound_s, (i, j, h, bound_s)
            checked[0] += 1
        return h

    monkeypatch.setattr(Deployment, "_horizon", checking)
    _run(cfg)
    return checked[0]


@pytest.mark.parametrize("seed", range(3))
def test_a_horizon_is_bounded_by_every_next_output_of_the_other_pool(monkeypatch, seed):
    """The horizon of a decode instance (or of a prefill instance under back-pressure) is at most every busy
    instance's of the other pool next-output bound, though `_horizon` skips those whose clock has reached it (the
    dispatch at each hand-off: every prefill instance is past its instant), with and without back-pressure."""
    cfg = deploy(_chat(num_requests=150, rate=20.0 + 10 * seed, seed=seed),
                 {"router": ["round_robin", "least_outstanding", "least_kv"][seed],
                  "disaggregation": {"prefill": {"replicas": 1 + seed % 2}, "decode": {"replicas": 2}}})  # fmt: skip
    assert _horizons_checked(cfg, monkeypatch) > 100  # (about one a request: 149 of 150 on seed 0 since session 75)
    small = cfg.hardware.model_dump() | {"memory_gib": 19.5}  # (back-pressure: hand-offs wait for decode blocks)
    tight = with_value(cfg, "deployment.disaggregation.decode.hardware", small)
    assert _horizons_checked(tight, monkeypatch) > 150
