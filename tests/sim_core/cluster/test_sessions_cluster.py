"""Closed-loop multi-turn sessions in a deployment (sim_core/cluster/turns.py): a turn finishing on any replica
or decode instance sends its session's next turn at finish + think time, which the router then routes."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim_core import run_simulation
from sim_core.budget import RunBudget
from sim_core.cluster import Deployment, run_deployment
from sim_core.cluster.result import build_result
from sim_core.cluster.router import session_instance
from sim_core.sweep import with_value
from sim_core.types import Status
from tests.conftest import make_config
from tests.documents import prose
from tests.sim_core.cluster.test_deployment import FREE_1P1D, assert_cluster_invariants, assert_same_run

ROUTERS = ("round_robin", "least_outstanding", "least_kv", "prefix_affinity", "cache_aware", "session", "weighted_score")
XPYD = {"disaggregation": {"prefill": {"replicas": 2}, "decode": {"replicas": 2}}}


def closed_sessions(deployment=None, n=60, turns=4, think_s=2.0, **over):
    sessions = {"turns": turns, "think_time_s": think_s, "closed_loop": True}
    return make_config(workload__num_requests=n, workload__sessions=sessions, deployment=deployment, **over)


def run_checked(cfg):
    dep = Deployment(cfg, check_invariants=True)
    dep.run()
    return dep, build_result(dep)


@pytest.mark.parametrize("router", ROUTERS)
@pytest.mark.parametrize("over", [{}, {"kv_cache__enable_prefix_caching": True}, {"workload__arrival__rate_per_s": 40.0}])
def test_one_replica_with_closed_loop_sessions_is_the_single_engine(router, over):
    cfg = closed_sessions(**over)
    single = run_simulation(cfg)
    res = run_deployment(closed_sessions({"replicas": 1, "router": router}, **over))
    assert single.summary.num_finished == 60 and cfg.workload.sessions.closed_loop
    assert_same_run(single, res)


@pytest.mark.parametrize("deployment", [{"replicas": 3, "router": r} for r in ROUTERS] + [FREE_1P1D, XPYD],
                         ids=[*ROUTERS, "1p1d", "2p2d"])  # fmt: skip
@pytest.mark.parametrize("think_s", [0.0, 2.0])
def test_a_later_turn_is_sent_its_think_time_after_the_previous_reply_on_any_instance(deployment, think_s):
    dep, res = run_checked(closed_sessions(deployment, think_s=think_s, workload__arrival__rate_per_s=20.0,
                                           kv_cache__enable_prefix_caching=True))  # fmt: skip
    wl, req = dep.workload, res.requests
    prev = np.flatnonzero(wl.next_turn >= 0)
    nxt = wl.next_turn[prev]
    assert res.summary.num_finished == 60
    assert np.array_equal(req.arrival_s[nxt], req.finish_s[prev] + wl.think_s[prev])  # exactly, across instances
    assert np.all(req.first_scheduled_s[nxt] >= req.arrival_s[nxt])
    assert_cluster_invariants(res)
    for ids in dep.ids_of[: len(dep.front)]:  # each instance is sent its requests in arrival order
        assert np.all(np.diff(req.arrival_s[ids]) >= 0)


def test_prefix_affinity_keeps_a_conversation_on_the_replica_holding_it():
    cfg = closed_sessions({"replicas": 4, "router": "prefix_affinity", "state_refresh_s": 0.0}, n=120,
                          workload__arrival__rate_per_s=4.0, kv_cache__enable_prefix_caching=True)  # fmt: skip
    dep, res = run_checked(cfg)
    wl = dep.workload
    prev = np.flatnonzero(wl.next_turn >= 0)
    same = dep.instance_of[wl.next_turn[prev]] == dep.instance_of[prev]
    rr = run_deployment(cfg.model_copy(update={"deployment": cfg.deployment.model_copy(update={"router": "round_robin"})}))
    assert same.mean() > 0.9  # the previous turn's blocks are cached there, covering most of the next prompt
    assert res.summary.prefix_hit_rate_tokens > rr.summary.prefix_hit_rate_tokens


@pytest.mark.parametrize("router", ROUTERS)
@pytest.mark.parametrize("over", [{}, {"scheduler__speculative": {"enabled": True, "num_draft_tokens": 3}}])
def test_the_remaining_tokens_release_bound_gives_the_one_tick_bound_run(router, over):
    cfg = closed_sessions({"replicas": 3, "router": router}, think_s=0.5, workload__arrival__rate_per_s=20.0,
                          kv_cache__enable_prefix_caching=not over, **over)  # fmt: skip
    ref = Deployment(cfg, route_early=False)  # replicas pause one shortest tick + think ahead of the others
    ref.run()
    assert_same_run(build_result(ref), run_deployment(cfg))


@pytest.mark.parametrize("router", ["round_robin", "session", "least_outstanding", "least_kv"])
@pytest.mark.parametrize("over", [{"think_s": 0.0}, {"kv_cache__enable_prefix_caching": True},
                                  {"scheduler__speculative": {"enabled": True, "num_draft_tokens": 3}},
                                  {"hardware__memory_gib": 20.5, "workload__arrival__rate_per_s": 40.0}])  # fmt: skip
def test_replicas_with_closed_loop_sessions_run_on_the_fast_path_as_general_steps_do(router, over, monkeypatch):
    # A replica's state under closed-loop sessions (SlotState) kept it off the fast path: lesson 14's 4 replicas ran
    # 3.2 s a side in general steps (~61 µs a tick). Its run now ends at the tick that finishes a turn, which then goes
    # to the deployment, as a general step's run ends at a completion: the same run
    from sim_core import fastpath
    from sim_core.sessions import SlotState

    over = dict(over)
    cfg = closed_sessions({"replicas": 3, "router": router}, n=80, think_s=over.pop("think_s", 0.5),
                          **{"workload__arrival__rate_per_s": 20.0, **over})  # fmt: skip
    fast = Deployment(cfg)
    fast.run()
    assert all(x.engine._fast for x in fast.instances)  # (eligible: SlotState, a replica)
    eligible = fastpath.eligible
    monkeypatch.setattr(fastpath, "eligible", lambda e: not isinstance(e.st, SlotState) and eligible(e))
    general = Deployment(cfg)
    general.run()
    assert not any(x.engine._fast for x in general.instances)
    assert_same_run(build_result(general), build_result(fast))
    assert build_result(fast).summary.num_finished == 80


def core_runs(deployment: Deployment, monkeypatch) -> int:
    """Run `deployment`; how many runs of the scalar core (`fastpath.run_ticks` calls) it made: where its replicas'
    runs were cut."""
    from sim_core import fastpath

    runs = []
    run_ticks = fastpath.run_ticks
    monkeypatch.setattr(fastpath, "run_ticks", lambda e: runs.append(e) or run_ticks(e))
    deployment.run()
    monkeypatch.setattr(fastpath, "run_ticks", run_ticks)
    return len(runs)


@pytest.mark.parametrize("router", ["round_robin", "session"])
def test_a_router_that_reads_no_state_sends_a_turn_before_every_replica_reaches_it(router, monkeypatch):
    # Every arrival under closed-loop sessions waited for every replica to reach it, so each arrival cut every
    # replica's run; a router that reads no state now routes it once no turn still to be released can come before it
    # (`Deployment._release_bounds_s` over every replica): fewer runs, the same run as the reference
    cfg = closed_sessions({"replicas": 4, "router": router}, n=120, think_s=5.0, workload__arrival__rate_per_s=30.0)
    # (runs that end where they are cut: paused ones would hide where, `test_replicas_under_sessions_pause_...`)
    ahead = Deployment(cfg, pause_runs=False)
    num_ahead = core_runs(ahead, monkeypatch)
    ref = Deployment(cfg, route_early=False, pause_runs=False)  # (every replica reaches each arrival; one tick + shortest think bound)
    num_ref = core_runs(ref, monkeypatch)
    assert ahead._turns_ahead and not ref._turns_ahead
    assert num_ahead < 0.6 * num_ref, (num_ahead, num_ref)
    assert_same_run(build_result(ref), build_result(ahead))


@pytest.mark.parametrize("refresh_s", [0.01, 0.05, 0.5])
@pytest.mark.parametrize("think_s", [0.0, 0.5, 5.0])
def test_least_kv_views_stop_a_replica_only_at_instants_an_arrival_can_be_routed_on(refresh_s, think_s, monkeypatch):
    # least_kv routes a turn on the replicas as they were at the refresh instant before it (turns.RefreshedViews), and
    # every replica stopped at every instant (lesson 14 under least_kv: 14,000 runs, 9 s of CPU for 1,000 requests); a
    # replica now runs on to the instant at or before the earliest time any arrival can still come, and an arrival is
    # routed once every replica has reached its instant (not the arrival itself): fewer runs, the same run as the
    # reference
    cfg = closed_sessions({"replicas": 4, "router": "least_kv", "state_refresh_s": refresh_s}, n=120, think_s=think_s,
                          workload__arrival__rate_per_s=30.0)  # fmt: skip
    fewer = Deployment(cfg, pause_runs=False)  # (runs that end where they are cut: paused ones would hide where)
    num_fewer = core_runs(fewer, monkeypatch)
    ref = Deployment(cfg, route_early=False, pause_runs=False)  # (a stop at every refresh instant, and at every arrival)
    num_ref = core_runs(ref, monkeypatch)
    at_arrivals = Deployment(cfg, pause_runs=False)
    at_arrivals._views_ahead = False  # (each arrival routed once every replica has reached it, not its instant)
    num_at_arrivals = core_runs(at_arrivals, monkeypatch)
    assert fewer.views is not None and fewer._views_ahead
    expected = build_result(ref)  # (once: a result takes its deployment's ITL runs)
    assert_same_run(expected, build_result(fewer))
    assert_same_run(expected, build_result(at_arrivals))
    assert num_fewer < 0.3 * num_ref, (num_fewer, num_ref)  # (300-800 against 2,500-13,000)
    # (and 700-1,000 stopping at the instant and the arrival; the least gain, 849 against 966 at a 10 ms refresh and no
    # think time, since vllm-v1's session-75 refit)
    assert num_fewer < 0.9 * num_at_arrivals, (num_fewer, num_at_arrivals)


@pytest.mark.parametrize("think_s", [0.0, 0.5, 5.0])
@pytest.mark.parametrize("router, over", [("least_outstanding", {}), ("cache_aware", {"kv_cache__enable_prefix_caching": True}),
                                          ("least_kv", {}), ("least_outstanding", {"limits__max_sim_time_s": 2.0}),
                                          ("least_outstanding", {"limits__max_ticks": 600}), ("least_kv", {"limits__max_ticks": 600})],
                         ids=["least_outstanding", "cache_aware", "least_kv_exact", "time_limit", "tick_limit", "least_kv_tick_limit"])  # fmt: skip
def test_a_router_that_decides_on_bounds_routes_a_turn_before_every_replica_reaches_it(router, over, think_s, monkeypatch):
    # Under closed-loop sessions every arrival waited for every replica to reach it (lesson 14 under least_outstanding:
    # 4,569 runs for 1,000 requests); a router whose choice bounds can settle (Router.choose_by_bounds) now routes the
    # next turn from them once no turn still to be released can come before it, and only the replicas its choice
    # needs run up to it: fewer runs, the same run as the reference
    deployment = {"replicas": 4, "router": router, "state_refresh_s": 0.0}  # (least_kv on exact state: no views)
    cfg = closed_sessions(deployment, n=120, think_s=think_s, workload__arrival__rate_per_s=30.0, **over)
    early = Deployment(cfg, pause_runs=False)  # (runs that end where they are cut: paused ones would hide where)
    num_early = core_runs(early, monkeypatch)
    ref = Deployment(cfg, route_early=False, pause_runs=False)  # (every replica reaches each arrival)
    num_ref = core_runs(ref, monkeypatch)
    # (still on at the run's end: a replica stopped at a limit has exact bounds, Engine._last_tick_by_s; the choice fell
    # back to every replica reaching every arrival once one stopped at max_ticks)
    assert early._early and early.views is None and not ref._early
    assert_same_run(build_result(ref), build_result(early))
    assert num_early < 0.25 * num_ref, (num_early, num_ref)  # (23-376 against 123-4,023; at most 0.19 of them)


@pytest.mark.parametrize("router", ["prefix_affinity", "weighted_score", "least_kv", "least_outstanding", "round_robin"])
@pytest.mark.parametrize("over", [{"kv_cache__enable_prefix_caching": True},
                                  {"scheduler__preemption": "swap", "hardware__memory_gib": 20.5, "kv_cache__swap_space_gb": 0.5},
                                  {"workload__num_samples": 2}, {"limits__max_ticks": 700}],
                         ids=["prefix_cache", "swap", "two_samples", "tick_limit"])  # fmt: skip
@pytest.mark.parametrize("think_s", [0.0, 0.5])
def test_replicas_under_sessions_pause_where_their_runs_are_cut(router, over, think_s, monkeypatch):
    # A replica's run cut under closed-loop sessions (another replica may release a turn first, or the next turn
    # arrives) ended there: lesson 14's 4 replicas under prefix_affinity wrote back and set up 4,479 runs of ~12 ticks
    # for 1,000 turns. It now pauses there (its release bound read from the paused run, `_first_release_in_run_s`):
    # the same run, a run a finished turn at most (it still ends there) instead of one per cut. least_kv routes on
    # refreshed views (0.05 s), which note a paused run's KV usage
    cfg = closed_sessions({"replicas": 4, "router": router}, n=120, think_s=think_s, workload__arrival__rate_per_s=30.0, **over)
    paused = Deployment(cfg, check_invariants=True)
    num_paused = core_runs(paused, monkeypatch)
    ended = Deployment(cfg, pause_runs=False)
    num_ended = core_runs(ended, monkeypatch)
    assert all(x.engine.may_pause for x in paused.instances) and not any(x.engine.may_pause for x in ended.instances)
    assert_same_run(build_result(ended), build_result(paused))
    assert paused.stopped_reason == ended.stopped_reason
    finished_turns = int(build_result(paused).requests.is_finished.sum())
    assert num_paused <= max(num_ended, 1.2 * finished_turns + 4 * 4), (num_paused, num_ended, finished_turns)
    assert (paused.views is not None) == (router == "least_kv")
    if router in ("prefix_affinity", "weighted_score", "least_kv"):  # (every replica reaches each arrival or instant)
        assert num_paused < 0.6 * num_ended, (num_paused, num_ended)


@pytest.mark.parametrize("closed", [True, False])
def test_the_session_router_keeps_every_turn_of_a_conversation_on_one_replica(closed):
    cfg = closed_sessions({"replicas": 3, "router": "session"}, n=90, workload__arrival__rate_per_s=10.0)
    cfg = with_value(cfg, "workload.sessions.closed_loop", closed)
    dep = Deployment(cfg)
    dep.run()
    wl = dep.workload
    sessions = wl.content_id
    for s in np.unique(sessions):
        assert np.unique(dep.instance_of[sessions == s]).size == 1
    assert np.array_equal(dep.instance_of, session_instance(sessions, 3))  # fixed by the session id alone
    assert np.bincount(dep.instance_of, minlength=3).min() > 0


@pytest.mark.parametrize("shared_prompts", [False, True])
def test_the_session_router_without_sessions_is_least_outstanding(shared_prompts):
    # (shared system prompts alone give every request a content id of its own: single requests, not sessions, which
    # the router hashed at random whatever the load, session 58's review)
    plain = make_config(workload__num_requests=80, workload__arrival__rate_per_s=30.0)
    if shared_prompts:
        plain = with_value(with_value(plain, "kv_cache.enable_prefix_caching", True), "workload.shared_prefix",
                           {"num_system_prompts": 4, "share_ratio": 0.8, "system_prompt_tokens": {"dist": "fixed", "mean": 512}})
        assert np.unique(Deployment(plain).workload.content_id).size == 80  # (one id per request)
    a = run_deployment(with_value(plain, "deployment", {"replicas": 3, "router": "session"}))
    b = run_deployment(with_value(plain, "deployment", {"replicas": 3, "router": "least_outstanding"}))
    assert np.array_equal(a.instance_of, b.instance_of)


@pytest.mark.parametrize("deployment", [{"replicas": 3, "router": "least_outstanding"}, XPYD])
def test_same_seed_same_closed_loop_deployment_run(deployment):
    cfg = closed_sessions(deployment, workload__arrival__rate_per_s=20.0)
    assert_same_run(run_deployment(cfg), run_deployment(cfg))


@pytest.mark.parametrize("limits", [{"limits__max_sim_time_s": 3.0}, {"limits__max_ticks": 300}])
def test_run_limits_bound_a_closed_loop_deployment_and_unsent_turns_stay_unsent(limits):
    res = run_deployment(closed_sessions({"replicas": 2, "router": "least_kv"}, n=200,
                                         workload__arrival__rate_per_s=20.0, **limits))  # fmt: skip
    assert res.summary.stopped_reason is not None
    unsent = ~np.isfinite(res.requests.arrival_s)
    assert unsent.any() and np.all(res.requests.status[unsent] == Status.PENDING)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(think=st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.just(-1.0), st.just(3601.0)),
       turns=st.integers(-5, 200))  # fmt: skip
def test_hostile_session_values_in_a_deployment_are_refused_with_the_field_named(think, turns):
    ok = 0 <= think <= 3600 and 1 <= turns <= 100
    try:
        closed_sessions({"replicas": 2}, turns=turns, think_s=think)
    except ValueError as err:  # the message names each field, its value and the allowed range
        if ok:  # values in range, but many turns can grow a conversation past the model's context
            assert "model.max_model_len" in str(err), str(err)
            return
        if not 1 <= turns <= 100:
            assert f"workload.sessions.turns = {turns}" in str(err) and "allowed" in str(err)
        if not 0 <= think <= 3600:
            assert "workload.sessions.think_time_s" in str(err)
    else:
        assert ok


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(replicas=st.integers(1, 3), router=st.sampled_from(ROUTERS), turns=st.integers(2, 5),
       think=st.sampled_from([0.0, 0.5, 5.0]), seed=st.integers(0, 20))  # fmt: skip
def test_generated_closed_loop_deployments_finish_every_turn_in_order(replicas, router, turns, think, seed):
    dep, res = run_checked(closed_sessions({"replicas": replicas, "router": router}, n=40, turns=turns,
                                           think_s=think, seed=seed, workload__arrival__rate_per_s=10.0))  # fmt: skip
    wl, req = dep.workload, res.requests
    prev = np.flatnonzero(wl.next_turn >= 0)
    assert res.summary.num_finished == 40
    assert np.array_equal(req.arrival_s[wl.next_turn[prev]], req.finish_s[prev] + wl.think_s[prev])


def test_an_old_deployment_link_without_the_field_keeps_its_open_loop_result():
    """Deployment configs that omit sessions.closed_loop (old links made before the field existed) stay open loop
    and reproduce their result (docs/cluster.md: why the default is not changed by a migration)."""
    cfg = make_config(workload__num_requests=60, workload__sessions={"turns": 3, "think_time_s": 1.0},
                      deployment={"replicas": 2, "router": "least_outstanding"})  # no closed_loop field, as old links
    assert cfg.workload.sessions.closed_loop is False
    res = run_deployment(cfg)
    assert_same_run(res, run_deployment(with_value(cfg, "workload.sessions.closed_loop", False)))
    assert np.all(np.isfinite(res.requests.arrival_s))  # every turn at a time fixed in advance
    closed = run_deployment(with_value(cfg, "workload.sessions.closed_loop", True))
    assert not np.array_equal(closed.requests.arrival_s, res.requests.arrival_s)


def test_the_server_budget_stops_a_closed_loop_deployment_with_partial_results():
    cfg = closed_sessions({"replicas": 2, "router": "session"}, n=400, workload__arrival__rate_per_s=20.0)
    res = run_simulation(cfg, budget=RunBudget(max_ticks=200, check_every_ticks=16))
    assert "the server's budget" in res.summary.stopped_reason
    assert 0 < res.summary.num_finished < 400
    assert np.any(~np.isfinite(res.requests.arrival_s))  # turns whose predecessor never finished are never sent


def test_the_readme_quotes_the_cache_aware_row_of_the_multi_turn_router_table_as_it_runs():
    # The router table of "Beyond one engine" (multi-turn-chat-h100-llama8b, 4 replicas, 2,000 requests at 60 req/s,
    # closed loop): session 28's fallback change (the smallest router-side tree, fix28e) moved cache_aware's row
    # (18/59 ms -> 18/68 ms, later turns leaving their replica 7.1 % -> 7.6 %) and no test recomputed it

    from sim_core import load_preset
    from sim_core.workload import generate_workload

    cfg = load_preset("multi-turn-chat-h100-llama8b")
    for path, value in (("workload.num_requests", 2000), ("workload.arrival.rate_per_s", 60.0),
                        ("deployment", {"replicas": 4, "router": "cache_aware"}), ("workload.sessions.closed_loop", True)):
        cfg = with_value(cfg, path, value)
    res = run_simulation(cfg)
    s = res.summary
    session = generate_workload(cfg.workload, np.random.default_rng(cfg.seed)).content_id  # (turns of a session: ids in turn order)
    previous: dict[int, int] = {}
    moved = later = 0
    for rid in np.argsort(session, kind="stable").tolist():
        if session[rid] in previous:
            later += 1
            moved += int(res.instance_of[rid] != res.instance_of[previous[session[rid]]])
        previous[session[rid]] = rid
    text = prose("cluster")
    assert f"| cache_aware | {s.ttft_p50_s * 1e3:.0f} / {s.ttft_p99_s * 1e3:.0f} | {s.prefix_hit_rate_tokens:.2f} |" in text
    assert f"(closed loop: {moved / later:.1%} of later turns leave their previous turn's replica".replace("%", " %") in text
