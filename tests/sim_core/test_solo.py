"""Batch-of-one runs (sim_core/solo.py): whole services per step, identical to tick-by-tick stepping.

Every case runs with `limits.coalesce_ticks` on (solo path, coalesced runs) and off (the tick-by-tick
reference) and compares every output (tests/sim_core/test_equivalence.py's `assert_same_result`).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as hst

from sim_core import solo
from sim_core.bench import engine_config
from sim_core.budget import BudgetMeter, RunBudget
from sim_core.engine import Engine
from sim_core.sweep import with_value
from sim_core.types import Phase, Status
from tests.conftest import trace_config
from tests.sim_core.test_equivalence import _with_kv_room, assert_same_result, run_both

BATCH_OF_ONE = ["exclusive", "article-dynamic-batch"]


def _with(cfg, **values):
    for path, value in values.items():
        cfg = with_value(cfg, path.replace("__", "."), value)
    return cfg


def _engine_with(engine: str, overrides: dict):
    """The engine preset's bench scenario with these changes; "kv_room" (if given): KV for that many of its longest
    requests (`_with_kv_room`)."""
    overrides = dict(overrides)
    room = overrides.pop("kv_room", None)
    cfg = _with(engine_config(engine)[0], **overrides)
    return cfg if room is None else _with_kv_room(cfg, room)


def _steps(cfg) -> tuple[int, Engine]:
    engine = Engine(cfg)
    steps = 1
    while engine.step():
        steps += 1
    return steps, engine


@pytest.mark.parametrize("engine", BATCH_OF_ONE)
def test_benchmark_scenario_equals_tick_by_tick_in_a_few_steps(engine):
    """The 70B TP2 scenario of the benchmark: one request at a time (dynamic batch: its cap falls to 1
    on the slow ticks), identical results, and whole services per step."""
    cfg, _ = engine_config(engine)
    on, off = run_both(cfg)
    assert_same_result(on, off)
    assert int(on.timeline.batch_cap[-1]) == 1 and int(on.timeline.num_running.max()) == 1
    steps, eng = _steps(cfg)
    assert eng.rec.num_ticks > 60_000 and steps <= 20


@pytest.mark.parametrize("engine", BATCH_OF_ONE)
@pytest.mark.parametrize(
    "overrides",
    [
        # many prompts exceed the token budget: prefilled in chunks by the general loop
        {"scheduler__enable_chunked_prefill": True, "scheduler__max_num_batched_tokens": 400},
        {"limits__max_ticks": 1_000},
        {"limits__max_ticks": 7_301},
        {"limits__max_sim_time_s": 123.4},
        {"limits__num_recorded_batches": 300},
        {"limits__num_recorded_batches": 0},
        {"workload__arrival__rate_per_s": 0.05},  # light load: idle rows between services
        {"workload__arrival__process": "offline"},  # all at t = 0
        {"workload__output_tokens": {"dist": "uniform", "mean": 3, "min": 1, "max": 5}},  # one-token outputs finish at prefill
        {"scheduler__admission": "reserve"},
        {"kv_cache__layout": "contiguous"},
        {"kv_room": 1.2},  # KV for about one long request: the longest are pre-empted or wait
    ],
)
def test_variants_equal_tick_by_tick(engine, overrides):
    base = {"workload__num_requests": 120,
            "workload__prompt_tokens": {"dist": "lognormal", "mean": 300, "min": 1, "max": 1500, "sigma": 0.8},
            "workload__output_tokens": {"dist": "lognormal", "mean": 60, "min": 1, "max": 300, "sigma": 0.8}}  # fmt: skip
    cfg = _engine_with(engine, base | overrides)
    on, off = run_both(cfg)
    assert_same_result(on, off)


# n samples per request and closed loops (issue 11: both ran on the general loop, ~7x this path's cost per tick)
STRATEGIES = {
    "n = 2": {"workload__num_samples": 2},
    "n = 4": {"workload__num_samples": 4},
    "closed loop, think 0": {"workload__arrival__process": "closed_loop", "workload__arrival__num_clients": 4,
                             "workload__arrival__think_time_s": 0.0},
    "closed loop, think 5 s": {"workload__arrival__process": "closed_loop", "workload__arrival__num_clients": 2,
                               "workload__arrival__think_time_s": 5.0},  # idle rows until a client sends again
    "closed loop of 16, n = 3": {"workload__arrival__process": "closed_loop", "workload__arrival__num_clients": 16,
                                 "workload__num_samples": 3},
}  # fmt: skip
STRATEGY_VARIANTS = {
    "as it is": {},
    "KV for about one long request": {"kv_room": 1.2},
    "reserved admission": {"scheduler__admission": "reserve"},
    "contiguous KV": {"kv_cache__layout": "contiguous"},
    "tick limit mid-service": {"limits__max_ticks": 3_301},
    "prompts above the token budget": {"scheduler__enable_chunked_prefill": True, "scheduler__max_num_batched_tokens": 400},
}


@pytest.mark.parametrize("engine", BATCH_OF_ONE)
@pytest.mark.parametrize("strategy", list(STRATEGIES))
@pytest.mark.parametrize("variant", list(STRATEGY_VARIANTS))
def test_samples_and_closed_loops_equal_tick_by_tick(engine, strategy, variant):
    """Each sample's KV in the copy-on-write layout, n tokens per decode tick; a closed loop's next request sent at a
    service's end (think time 0: it may be the next service) or later (an idle row): identical results, and as it is
    whole services per step (a few steps for 80 requests, where the general loop takes two or more each)."""
    base = {"workload__num_requests": 80,
            "workload__prompt_tokens": {"dist": "lognormal", "mean": 300, "min": 1, "max": 1500, "sigma": 0.8},
            "workload__output_tokens": {"dist": "lognormal", "mean": 60, "min": 1, "max": 300, "sigma": 0.8}}  # fmt: skip
    overrides = base | STRATEGIES[strategy] | STRATEGY_VARIANTS[variant]
    cfg = _engine_with(engine, overrides)
    on, off = run_both(cfg)
    assert_same_result(on, off)
    if variant == "as it is":
        steps, eng = _steps(cfg)
        assert eng.st.num_finished == 80 and steps <= 20


def test_priority_queue_order_equals_tick_by_tick():
    """Exclusive batching with priority order: the head is the smallest key among those arrived when
    the previous service ends (later arrivals overtake earlier ones)."""
    cfg, _ = engine_config("exclusive")
    cfg = _with(cfg, workload__num_requests=200, scheduler__queue_order="priority",
                workload__classes=[{"name": "a", "share": 0.3, "priority": 0}, {"name": "b", "share": 0.7, "priority": 2}])  # fmt: skip
    on, off = run_both(cfg)
    assert_same_result(on, off)
    order = np.argsort(on.requests.first_scheduled_s)
    assert np.any(np.diff(order) < 0)  # served out of arrival order
    steps, eng = _steps(cfg)
    assert steps < 0.01 * eng.rec.num_ticks


def test_shortest_prompt_first_equals_tick_by_tick():
    cfg, _ = engine_config("exclusive")
    cfg = _with(cfg, workload__num_requests=150, scheduler__queue_order="shortest_prompt_first",
                workload__prompt_tokens={"dist": "uniform", "mean": 500, "min": 10, "max": 1000})  # fmt: skip
    on, off = run_both(cfg)
    assert_same_result(on, off)


def test_whole_services_stop_before_the_budget_meters_next_check():
    """A server's budget is checked between steps: a call never runs past `ticks_until_check`."""
    cfg, _ = engine_config("exclusive")
    eng = Engine(cfg)
    eng.meter = BudgetMeter(RunBudget(max_ticks=5_000, max_wall_s=600.0, check_every_ticks=3_000))
    eng.meter.next_check_tick = 3_000
    eng.st.now_s = 300.0
    eng.st.admit_arrivals()
    assert solo.advance(eng)[0] > 0
    assert 3_000 - 128 < eng.rec.num_ticks <= 3_000
    eng.meter.next_check_tick = 10_000
    assert solo.advance(eng)[0] > 0
    assert 5_000 - 128 < eng.rec.num_ticks <= 5_000


def test_replicas_of_exclusive_engines_equal_tick_by_tick():
    """In a cluster each instance stops before the router's horizon (the next arrival it may get)."""
    cfg, _ = engine_config("exclusive")
    cfg = _with(cfg, workload__num_requests=150, workload__arrival__rate_per_s=0.5,
                deployment={"replicas": 2, "router": "round_robin"})  # fmt: skip
    on, off = run_both(cfg)
    assert_same_result(on, off)


def test_only_the_batch_of_one_case_runs_here():
    """Not eligible with a batch cap above 1 (dynamic batch before it has fallen) or batching > 1;
    eligible engines serve whole requests from an empty engine."""
    eng = Engine(engine_config("article-dynamic-batch")[0])
    eng.st.admit_arrivals(np.inf)
    assert solo.eligible(eng) and eng.sched.batch_cap == 16 and solo.advance(eng) == (0, solo.NONE)
    assert not solo.eligible(Engine(engine_config("vllm-v1")[0]))
    eng = Engine(engine_config("exclusive")[0])
    eng.st.now_s = 30.0
    eng.st.admit_arrivals()
    assert solo.advance(eng)[0] > 0
    tl = eng.result().timeline
    assert eng.st.num_finished > 1 and tl.num_ticks > 500 and set(np.unique(tl.phase)) == {Phase.PREFILL, Phase.DECODE}


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    engine=hst.sampled_from(["engine-exclusive", "engine-article-dynamic-batch"]),
    requests=hst.lists(hst.tuples(hst.integers(1, 3000), hst.integers(1, 400), hst.floats(0.0, 60.0), hst.integers(0, 3)),
                       min_size=1, max_size=25),
    queue_order=hst.sampled_from(["fcfs", "priority", "shortest_prompt_first"]),
    max_ticks=hst.integers(1, 4000),
)  # fmt: skip
def test_generated_traces_equal_tick_by_tick(engine, requests, queue_order, max_ticks):
    """Hostile traces: prompts above the token budget, one-token outputs, ties in arrival time,
    priorities, and a tick limit anywhere in a service."""
    prompts, outputs, arrivals, priorities = zip(*requests)
    cfg = trace_config(prompts, outputs, sorted(arrivals), priorities, base=engine,
                       scheduler__queue_order=queue_order, limits__max_ticks=max_ticks)  # fmt: skip
    on, off = run_both(cfg)
    assert_same_result(on, off)


def test_the_window_grows_while_all_of_it_is_served_and_shrinks_when_a_service_is_left():
    """The candidates priced per call: doubled while a call serves them all, cut back when one of
    them must go to the general loop (here: a prompt above the token budget)."""
    cfg, _ = engine_config("exclusive")
    cfg = _with(cfg, workload__num_requests=400, scheduler__enable_chunked_prefill=True,
                scheduler__max_num_batched_tokens=1024,
                workload__prompt_tokens={"dist": "uniform", "mean": 520, "min": 1, "max": 1040})  # fmt: skip
    eng = Engine(cfg)
    eng.st.now_s = 150.0
    eng.st.admit_arrivals()
    path = solo.SoloPath(eng)
    windows = []
    while len(windows) < 12 and eng.step():
        if not eng.st.running.size:
            served = eng.st.num_finished
            path.advance()
            windows.append((path.window, eng.st.num_finished - served))
    sizes = [w for w, _ in windows]
    assert max(sizes) > solo.MIN_SOLO_SERVICES and any(b < a for a, b in zip(sizes, sizes[1:]))


def test_backs_off_where_services_alternate_with_batched_ones():
    """A cap target just above a lone decode tick at short contexts: short prompts raise the cap
    (the general loop batches them), long ones keep it at 1. Same results; the path backs off."""
    cfg, _ = engine_config("article-dynamic-batch")
    cfg = _with(cfg, workload__num_requests=200, scheduler__dynamic_batch={"enabled": True, "target_tick_ms": 54.4},
                workload__prompt_tokens={"dist": "uniform", "mean": 1500, "min": 1, "max": 3000})  # fmt: skip
    on, off = run_both(cfg)
    assert_same_result(on, off)
    assert int(on.timeline.batch_cap.max()) > 1 and int((on.timeline.batch_cap == 1).sum()) > 1_000
    eng = Engine(cfg)
    backoff = 0
    while eng.step():
        backoff = max(backoff, eng._solo.backoff)
    assert backoff >= 2


# Closed-loop multi-turn sessions (issue 11: 8-12x this path's cost per tick on the general loop): arrivals taken from
# SessionState in send order, a turn released at its previous turn's end (think time 0: it may be the next service)
SESSIONS = {
    "sessions, think 2 s": {"workload__sessions": {"turns": 4, "think_time_s": 2.0}},
    "sessions, think 0": {"workload__sessions": {"turns": 4, "think_time_s": 0.0}},
    "sessions of 3, n = 2": {"workload__sessions": {"turns": 3, "think_time_s": 1.0}, "workload__num_samples": 2},
    "sessions, light load": {"workload__sessions": {"turns": 4, "think_time_s": 3.0}, "workload__arrival__rate_per_s": 0.05},
    "sessions, priority order": {"workload__sessions": {"turns": 4, "think_time_s": 0.5}, "scheduler__queue_order": "priority",
                                 "workload__classes": [{"name": "a", "share": 0.4, "priority": 0},
                                                       {"name": "b", "share": 0.6, "priority": 2}]},
    "open-loop sessions": {"workload__sessions": {"turns": 4, "think_time_s": 2.0, "closed_loop": False}},
    # every first turn waiting at t = 0, more than a call's first window: the head after it is a waiting request
    "sessions sent at once, long think": {"workload__sessions": {"turns": 3, "think_time_s": 100.0},
                                          "workload__arrival__process": "offline"},
}  # fmt: skip


USER_TOKENS = {"dist": "lognormal", "mean": 80, "min": 1, "max": 500, "sigma": 0.8}


def _solo_share(cfg, monkeypatch) -> tuple[float, Engine]:
    """The share of a run's ticks recorded by the batch-of-one path (`solo.advance`, as `SoloPath.advance` calls it)."""
    solo_ticks = 0
    advance = solo.advance

    def counted(engine, *args):
        nonlocal solo_ticks
        before = engine.rec.num_ticks
        out = advance(engine, *args)
        solo_ticks += engine.rec.num_ticks - before
        return out

    monkeypatch.setattr(solo, "advance", counted)
    _, engine = _steps(cfg)
    monkeypatch.undo()
    return solo_ticks / max(engine.rec.num_ticks, 1), engine


@pytest.mark.parametrize("engine", BATCH_OF_ONE)
@pytest.mark.parametrize("strategy", list(SESSIONS))
@pytest.mark.parametrize("variant", list(STRATEGY_VARIANTS))
def test_sessions_equal_tick_by_tick(engine, strategy, variant, monkeypatch):
    """Identical results; as it is, the batch-of-one path runs nearly every tick (the dynamic cap's first ticks, from
    16 down to 1, are the general loop's; with a tick limit, the last service cut by it)."""
    base = {"workload__num_requests": 80,  # (a later turn's prompt: the first, then each reply and user message)
            "workload__prompt_tokens": {"dist": "lognormal", "mean": 300, "min": 1, "max": 800, "sigma": 0.8},
            "workload__output_tokens": {"dist": "lognormal", "mean": 60, "min": 1, "max": 300, "sigma": 0.8}}  # fmt: skip
    overrides = base | SESSIONS[strategy] | STRATEGY_VARIANTS[variant]
    overrides["workload__sessions"] = overrides["workload__sessions"] | {"user_tokens": USER_TOKENS}
    cfg = _engine_with(engine, overrides)
    on, off = run_both(cfg)
    assert_same_result(on, off)
    if variant in ("as it is", "tick limit mid-service", "contiguous KV"):
        share, eng = _solo_share(cfg, monkeypatch)
        assert share > 0.9, share
        assert eng.rec.num_ticks == on.timeline.num_ticks


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    engine=hst.sampled_from(BATCH_OF_ONE),
    think_s=hst.sampled_from([0.0, 0.3, 4.0]),
    rate=hst.sampled_from([0.1, 1.0, 20.0]),
    queue_order=hst.sampled_from(["fcfs", "priority", "shortest_prompt_first"]),
    max_ticks=hst.integers(1, 3000),
    seed=hst.integers(0, 1_000),
)  # fmt: skip
def test_generated_sessions_equal_tick_by_tick(engine, think_s, rate, queue_order, max_ticks, seed):
    """A tick limit anywhere (mid-service, or at a service's end, where the arrivals the chain took after the last tick's
    start must be given back), turns sent at a service's end, idle rows, every queue order."""
    cfg, _ = engine_config(engine)
    cfg = _with(cfg, seed=seed, workload__num_requests=40, workload__arrival__rate_per_s=rate,
                workload__sessions={"turns": 3, "think_time_s": think_s, "user_tokens": USER_TOKENS}, scheduler__queue_order=queue_order,
                workload__classes=[{"name": "a", "share": 0.5, "priority": 0}, {"name": "b", "share": 0.5, "priority": 1}],
                workload__prompt_tokens={"dist": "uniform", "mean": 200, "min": 1, "max": 400},
                workload__output_tokens={"dist": "lognormal", "mean": 30, "min": 1, "max": 120, "sigma": 0.8},
                limits__max_ticks=max_ticks)  # fmt: skip
    on, off = run_both(cfg)
    assert_same_result(on, off)


def test_untaken_arrivals_leave_the_session_state_as_never_taken():
    """`SessionState.untake` (the chain's look-ahead given back): pointer, released turns, ranks and keys as before, so
    that taking them again gives the same keys."""
    cfg, _ = engine_config("exclusive")
    cfg = _with(cfg, workload__num_requests=60, workload__sessions={"turns": 3, "think_time_s": 0.5},
                scheduler__queue_order="priority",
                workload__classes=[{"name": "a", "share": 0.5, "priority": 0}, {"name": "b", "share": 0.5, "priority": 1}])  # fmt: skip
    st = Engine(cfg).st
    st.release_next_turns(np.array([0, 1]), 4.0)  # two released turns (at 4 s + think time) among the first turns
    before = (st._ptr, sorted(st._released), st._num_arrived, st.order_key.copy())
    keys = []
    while (key := st.take_arrival(np.inf)) >= 0 and len(keys) < 30:
        keys.append(key)
    assert any(k % st.num_requests in (st._next_turn[0], st._next_turn[1]) for k in keys)  # released ones taken too
    st.untake(keys)
    assert (st._ptr, sorted(st._released), st._num_arrived) == before[:3] and np.array_equal(st.order_key, before[3])
    assert [st.take_arrival(np.inf) for _ in keys] == keys


@pytest.mark.parametrize("engine", BATCH_OF_ONE)
@pytest.mark.parametrize("think_s", [0.0, 2.0])
def test_a_tick_limit_at_a_service_end_leaves_later_arrivals_to_come(engine, think_s):
    """A run stopped by `limits.max_ticks` right after a service: tick by tick the turns sent during its last tick (think
    time 0: the one its end releases) have not joined the queue (the step that would take them stops first), so the
    chain gives back what it took after the last tick's start. Limits at services' ends, read from the reference."""
    cfg, _ = engine_config(engine)
    cfg = _with(cfg, workload__num_requests=60, workload__sessions={"turns": 4, "think_time_s": think_s, "user_tokens": USER_TOKENS},
                workload__prompt_tokens={"dist": "uniform", "mean": 200, "min": 1, "max": 400},
                workload__output_tokens={"dist": "lognormal", "mean": 30, "min": 1, "max": 120, "sigma": 0.8})  # fmt: skip
    _, ref = run_both(cfg)
    tl = ref.timeline
    at_end = np.flatnonzero(np.isin(tl.t_start_s + tl.duration_s, ref.requests.finish_s)) + 1  # rows to a service's end
    pending = 0
    for limit in at_end[:: max(at_end.size // 6, 1)][1:]:
        on, off = run_both(_with(cfg, limits__max_ticks=int(limit)))
        assert_same_result(on, off)
        pending += int(np.sum((off.requests.status == Status.PENDING) & (off.requests.arrival_s <= off.timeline.t_end_s[-1])))
    assert pending > 0  # turns sent during the last tick, not yet taken


# The prefix cache (issue 11: with it both presets ran on the general loop, 40-80x this path's cost per tick): each service
# makes the cache's calls of tick-by-tick stepping at its ticks (the lookup and admission after the hit, the prefill's
# registration, the growth's evictions, the reply cached and the blocks released at its end)
PREFIX_STRATEGIES = {
    "sessions, think 2 s": {"workload__sessions": {"turns": 4, "think_time_s": 2.0}},
    "sessions, think 0": {"workload__sessions": {"turns": 4, "think_time_s": 0.0}},
    "sessions of 3, n = 2": {"workload__sessions": {"turns": 3, "think_time_s": 1.0}, "workload__num_samples": 2},
    "open-loop sessions": {"workload__sessions": {"turns": 4, "think_time_s": 2.0, "closed_loop": False}},
    # (runs and chains: no per-block entries; a system prompt's blocks shared by most requests)
    "shared system prompts": {"workload__shared_prefix": {"num_system_prompts": 3, "share_ratio": 0.8,
                                                          "system_prompt_tokens": {"dist": "fixed", "mean": 256}}},
    "closed loop, think 0": {"workload__arrival__process": "closed_loop", "workload__arrival__num_clients": 4,
                             "workload__arrival__think_time_s": 0.0},
}  # fmt: skip
PREFIX_VARIANTS = {
    "as it is": {},
    "KV for about three long requests": {"kv_room": 3},  # evictions, at admissions and as contexts grow; hits still
    "KV for about one long request": {"kv_room": 1.2},
    "tick limit mid-service": {"limits__max_ticks": 3_301},
    # (a prompt above it is admitted whole after a hit that leaves less than the budget to compute)
    "prompts above the token budget": {"scheduler__enable_chunked_prefill": True, "scheduler__max_num_batched_tokens": 400},
}


@pytest.mark.parametrize("engine", BATCH_OF_ONE)
@pytest.mark.parametrize("strategy", list(PREFIX_STRATEGIES))
@pytest.mark.parametrize("variant", list(PREFIX_VARIANTS))
def test_prefix_cache_equals_tick_by_tick(engine, strategy, variant, monkeypatch):
    """Identical results (the cache's statistics and its cached-blocks column included), and the batch-of-one path runs
    nearly every tick; the cache found prefixes (sessions, shared prompts) and, with KV for a few requests, evicted."""
    base = {"workload__num_requests": 80, "kv_cache__enable_prefix_caching": True,
            "workload__prompt_tokens": {"dist": "lognormal", "mean": 300, "min": 1, "max": 800, "sigma": 0.8},
            "workload__output_tokens": {"dist": "lognormal", "mean": 60, "min": 1, "max": 300, "sigma": 0.8}}  # fmt: skip
    overrides = base | PREFIX_STRATEGIES[strategy] | PREFIX_VARIANTS[variant]
    if "workload__sessions" in overrides:
        overrides["workload__sessions"] = overrides["workload__sessions"] | {"user_tokens": USER_TOKENS}
    cfg = _engine_with(engine, overrides)
    on, off = run_both(cfg)
    assert_same_result(on, off)
    share, eng = _solo_share(cfg, monkeypatch)
    assert share > (0.75 if variant == "prompts above the token budget" else 0.9), share
    assert eng.rec.num_ticks == on.timeline.num_ticks
    if not strategy.startswith("closed"):
        assert on.summary.prefill_tokens_saved > 0
    if variant.startswith("KV for"):
        assert on.summary.prefix_blocks_evicted > 0 and on.timeline.kv_blocks_cached.max() > 0


@pytest.mark.parametrize("engine", BATCH_OF_ONE)
@pytest.mark.parametrize(
    "overrides",
    [
        {"kv_cache__eviction_policy": "lfu", "kv_room": 3},
        {"scheduler__admission": "reserve", "kv_room": 3},
        {"limits__max_sim_time_s": 123.4},
        {"limits__num_recorded_batches": 300},
        {"scheduler__queue_order": "priority", "workload__classes": [{"name": "a", "share": 0.4, "priority": 0},
                                                                     {"name": "b", "share": 0.6, "priority": 2}]},
        {"workload__arrival__rate_per_s": 0.05},  # light load: idle rows between services
    ],
)  # fmt: skip
def test_prefix_cache_variants_equal_tick_by_tick(engine, overrides):
    """Sessions with the prefix cache under LFU eviction, reserved admission, a time limit, a batch-log limit, priority
    order and light load."""
    base = {"workload__num_requests": 60, "kv_cache__enable_prefix_caching": True,
            "workload__sessions": {"turns": 3, "think_time_s": 0.5, "user_tokens": USER_TOKENS},
            "workload__prompt_tokens": {"dist": "lognormal", "mean": 300, "min": 1, "max": 800, "sigma": 0.8},
            "workload__output_tokens": {"dist": "lognormal", "mean": 60, "min": 1, "max": 300, "sigma": 0.8}}  # fmt: skip
    on, off = run_both(_engine_with(engine, base | overrides))
    assert_same_result(on, off)
    assert on.summary.prefill_tokens_saved > 0


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    engine=hst.sampled_from(BATCH_OF_ONE),
    think_s=hst.sampled_from([0.0, 0.3, 4.0]),
    closed=hst.booleans(),
    shared=hst.booleans(),
    kv_room=hst.sampled_from([None, 1.5, 4.0]),
    queue_order=hst.sampled_from(["fcfs", "priority", "shortest_prompt_first"]),
    max_ticks=hst.integers(1, 3000),
    seed=hst.integers(0, 1_000),
)  # fmt: skip
def test_generated_prefix_cache_sessions_equal_tick_by_tick(engine, think_s, closed, shared, kv_room, queue_order,
                                                            max_ticks, seed):  # fmt: skip
    """Sessions (closed or open loop) with the prefix cache, shared system prompts or not, KV for a few requests or
    plenty, a tick limit anywhere, every queue order."""
    overrides = {"seed": seed, "workload__num_requests": 40, "kv_cache__enable_prefix_caching": True,
                 "workload__sessions": {"turns": 3, "think_time_s": think_s, "closed_loop": closed, "user_tokens": USER_TOKENS},
                 "scheduler__queue_order": queue_order, "limits__max_ticks": max_ticks,
                 "workload__classes": [{"name": "a", "share": 0.5, "priority": 0}, {"name": "b", "share": 0.5, "priority": 1}],
                 "workload__prompt_tokens": {"dist": "uniform", "mean": 200, "min": 1, "max": 400},
                 "workload__output_tokens": {"dist": "lognormal", "mean": 30, "min": 1, "max": 120, "sigma": 0.8}}  # fmt: skip
    if shared:
        overrides["workload__shared_prefix"] = {"num_system_prompts": 2, "share_ratio": 0.7,
                                                "system_prompt_tokens": {"dist": "fixed", "mean": 96}}  # fmt: skip
    if kv_room is not None:
        overrides["kv_room"] = kv_room
    on, off = run_both(_engine_with(engine, overrides))
    assert_same_result(on, off)


def test_a_prefill_after_a_hit_that_would_raise_the_cap_is_left_to_the_general_loop(monkeypatch):
    """Dynamic batch sizing with the prefix cache: a prompt of one token after a cached 1,024-token system prompt
    prefills that token over the cached context, a tick just faster than the decode ticks that follow it (they read one
    more token of context). With the target between the two, every decode tick keeps the cap at 1 and every prefill
    after a hit raises it (tick by tick): the chain must leave those services to the general loop, and serve those
    whose prompts leave two tokens or more to prefill."""
    cfg = _with(engine_config("article-dynamic-batch")[0], workload__num_requests=40, kv_cache__enable_prefix_caching=True,
                workload__shared_prefix={"num_system_prompts": 1, "share_ratio": 1.0,
                                         "system_prompt_tokens": {"dist": "fixed", "mean": 1024}},
                workload__prompt_tokens={"dist": "uniform", "mean": 3, "min": 1, "max": 5},
                workload__output_tokens={"dist": "fixed", "mean": 16, "min": 1, "max": 16})  # fmt: skip
    cost = Engine(cfg).cost
    prefill_s, decode_s = float(cost.prefill_tick(1, 1024)[0]), cost.decode_time_s(1, 1025)
    assert prefill_s < decode_s < float(cost.prefill_tick(2, 1024)[0])  # (two tokens' prefill: slower, the cap stays 1)
    cfg = _with(cfg, scheduler__dynamic_batch={"enabled": True, "target_tick_ms": (prefill_s + decode_s) / 2 * 1e3})
    on, off = run_both(cfg)
    assert_same_result(on, off)
    cap, tokens = on.timeline.batch_cap, on.timeline.num_prefill_tokens
    raised = np.flatnonzero((cap[1:] > 1) & (cap[:-1] == 1)) + 1  # ticks whose cap the tick before raised from 1
    assert raised.size > 5 and (tokens[raised - 1] == 1).all()  # (each after a one-token prefill)
    share, _ = _solo_share(cfg, monkeypatch)
    assert share > 0.5, share


@pytest.mark.parametrize("prefix_cache", [False, True])
def test_a_request_pre_empted_before_its_first_token_keeps_its_first_admission_time(prefix_cache):
    """Dynamic batch sizing admits a closed loop's first requests together under KV for a few requests: one is
    pre-empted by recompute mid-prefill, and once the cap is 1 the chain serves it (fresh again: nothing computed or
    emitted) but keeps its first admission's time, as `Scheduler._admit` does (the chain overwrote it until session 44).
    (Greedy admission: a first chunk's blocks, as the article's presets took under watermark admission until session 56,
    when that admission took to taking the whole prompt, vLLM V0's rule, and no chunk of this run ran short any more.)"""
    cfg = _engine_with("article-dynamic-batch", {
        "seed": 8967, "scheduler__admission": "greedy", "workload__num_requests": 27, "kv_cache__enable_prefix_caching": prefix_cache,
        "workload__arrival__process": "closed_loop", "workload__arrival__num_clients": 7,
        "workload__prompt_tokens": {"dist": "lognormal", "mean": 258, "min": 1, "max": 600, "sigma": 0.8},
        "workload__output_tokens": {"dist": "lognormal", "mean": 46, "min": 1, "max": 200, "sigma": 0.8},
        "kv_cache__gpu_memory_utilization": 0.8197934068076295})  # fmt: skip
    on, off = run_both(cfg)
    assert_same_result(on, off)
    req = on.requests
    again = (req.num_preemptions > 0) & (req.num_emitted > 0) & (req.first_scheduled_s < req.first_token_s - 1.0)
    assert again.any()  # (admitted, pre-empted, re-admitted long after)


@pytest.mark.parametrize("router", ["cache_aware", "prefix_affinity"])
def test_replicas_with_the_prefix_cache_equal_tick_by_tick(router):
    """A deployment's exclusive replicas with their own prefix caches, routed by what each has cached (read between the
    replicas' steps: each stops before the router's horizon, its cache as tick by tick there)."""
    cfg = _with(engine_config("exclusive")[0], workload__num_requests=120, workload__arrival__rate_per_s=1.0,
                kv_cache__enable_prefix_caching=True, deployment={"replicas": 2, "router": router},
                workload__shared_prefix={"num_system_prompts": 3, "share_ratio": 0.8,
                                         "system_prompt_tokens": {"dist": "fixed", "mean": 256}})  # fmt: skip
    on, off = run_both(cfg)
    assert_same_result(on, off)
    assert on.summary.prefill_tokens_saved > 0
