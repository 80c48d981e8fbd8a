"""A server's tick budget (sim_core/budget.py) over a deployment (xPyD or replicas): the same config gives the same result.

The budget's meter is shared by every instance and cuts fast-path runs every `chunk_ticks` (adapted to the measured
wall-clock tick rate), so the loop's order of steps depends on wall-clock timing. Review 22 found that when the budget's
tick cap stopped one instance, the whole deployment stopped with the others wherever that order had taken them: 8 of
164 generated xPyD configs changed with the check interval (2 vs 4,096 ticks). Each instance now stops at its own cap
and the others run on to theirs (`Deployment.run`), so a tick-capped run is the same whatever the interval."""

from __future__ import annotations

import itertools
from types import SimpleNamespace

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim_core import budget as budget_module
from sim_core.budget import RunBudget, is_budget_stop
from sim_core.engine import run_simulation
from sim_core.sweep import with_value
from sim_core.types import Phase
from tests.conftest import make_config
from tests.sim_core.test_budget import first_tick_over, with_check_interval


def test_a_tick_budget_stop_does_not_depend_on_the_check_interval(monkeypatch):
    cfg = make_config(seed=136, workload__num_requests=53, workload__arrival__rate_per_s=5.0,
                      workload__prompt_tokens={"dist": "lognormal", "mean": 800, "min": 1, "max": 3000},
                      workload__output_tokens={"dist": "lognormal", "mean": 150, "min": 1, "max": 600},
                      kv_cache__enable_prefix_caching=True)  # fmt: skip
    decode_scheduler = cfg.scheduler.model_dump() | {"max_num_seqs": 8}
    cfg = with_value(cfg, "deployment", {"router": "least_outstanding", "state_refresh_s": 0.05, "disaggregation": {
        "prefill": {"replicas": 1}, "decode": {"replicas": 2, "scheduler": decode_scheduler}}})  # fmt: skip
    results = []
    for ticks in (2, 4096):
        with_check_interval(monkeypatch, ticks)
        results.append(run_simulation(cfg, budget=RunBudget(max_ticks=1000, max_wall_s=600.0)))
    a, b = results
    assert a.summary.stopped_reason and "budget" in a.summary.stopped_reason
    assert np.array_equal(a.requests.finish_s, b.requests.finish_s, equal_nan=True)  # (fails: finished or not)
    assert a.timeline.num_ticks == b.timeline.num_ticks
    assert a.summary.stopped_reason == b.summary.stopped_reason


def test_a_deployments_instances_share_the_runs_tick_budget():
    # (session 80's audit: each instance had the whole budget, so 8 replicas under 2,000 ticks recorded 9,297 and the
    # stop named "the server's budget of 2,000 ticks per run")
    cfg = make_config(seed=3, workload__num_requests=400, workload__arrival__rate_per_s=50.0)
    cfg = with_value(cfg, "deployment", {"router": "round_robin", "replicas": 8})
    res = run_simulation(cfg, budget=RunBudget(max_ticks=2000, max_wall_s=600.0))
    assert sum(x.result.timeline.num_ticks for x in res.instances) <= 2000
    assert "the server's budget of 2,000 ticks per run, 250 for each of its 8 instances" in res.summary.stopped_reason
    # each stops at its part as at its own limits.max_ticks
    capped = run_simulation(with_value(cfg, "limits.max_ticks", 250))
    assert np.array_equal(res.requests.finish_s, capped.requests.finish_s, equal_nan=True)
    assert [x.result.timeline.num_ticks for x in res.instances] == [x.result.timeline.num_ticks for x in capped.instances]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10_000), num_requests=st.integers(5, 80), rate=st.sampled_from([5.0, 40.0]),
       num_prefill=st.integers(1, 2), num_decode=st.integers(1, 3),
       router=st.sampled_from(["round_robin", "least_outstanding", "least_kv", "cache_aware", "prefix_affinity"]),
       refresh_s=st.sampled_from([0.0, 0.05]), prefix_caching=st.booleans(),
       max_ticks=st.integers(5, 300), decode_seqs=st.sampled_from([4, 256]), replicas_only=st.booleans(),
       by_rows=st.booleans())  # fmt: skip
def test_tick_budget_stops_are_the_same_at_any_check_interval(monkeypatch, seed, num_requests, rate, num_prefill,
                                                              num_decode, router, refresh_s, prefix_caching, max_ticks,
                                                              decode_seqs, replicas_only, by_rows):  # fmt: skip
    # (replicas_only: num_prefill + num_decode replicas behind the router, no disaggregation; by_rows: the budget is on
    # each instance's recorded rows, 4 x max_ticks with every tick's batch logged, instead of its ticks)
    cfg = make_config(seed=seed, workload__num_requests=num_requests, workload__arrival__rate_per_s=rate,
                      workload__prompt_tokens={"dist": "lognormal", "mean": 800, "min": 1, "max": 3000},
                      workload__output_tokens={"dist": "lognormal", "mean": 150, "min": 1, "max": 600},
                      kv_cache__enable_prefix_caching=prefix_caching)  # fmt: skip
    decode_scheduler = cfg.scheduler.model_dump() | {"max_num_seqs": decode_seqs}
    cfg = with_value(cfg, "deployment", {"router": router, "replicas": num_prefill + num_decode, "state_refresh_s": refresh_s}
                     if replicas_only else {"router": router, "state_refresh_s": refresh_s, "disaggregation": {"prefill": {"replicas": num_prefill},
                                             "decode": {"replicas": num_decode, "scheduler": decode_scheduler}}})  # fmt: skip
    budget = RunBudget(max_ticks=max_ticks, max_wall_s=600.0)
    if by_rows:
        cfg = with_value(cfg, "limits.num_recorded_batches", 100_000)
        budget = RunBudget(max_recorded_rows=4 * max_ticks, max_wall_s=600.0)
    results = []
    for ticks in (1, 3, 4096):
        with_check_interval(monkeypatch, ticks)
        results.append(run_simulation(cfg, budget=budget))
    for b in results[1:]:
        a = results[0]
        assert a.summary.stopped_reason == b.summary.stopped_reason
        for f in ("finish_s", "first_token_s", "num_emitted"):
            assert np.array_equal(getattr(a.requests, f), getattr(b.requests, f), equal_nan=True), f
        for f in ("instance_of", "decode_instance_of", "kv_transfer_end_s"):
            assert np.array_equal(getattr(a, f), getattr(b, f), equal_nan=True), f
        assert a.timeline.num_ticks == b.timeline.num_ticks
    num_instances = len(results[0].instances)  # each gets an equal part of the run's budget
    if by_rows:  # each instance stops right after its tick whose rows pass its part, the others run on
        for x in results[0].instances:
            first_over = first_tick_over(x.result, max(4 * max_ticks // num_instances, 1))
            if "recorded rows" in (x.result.summary.stopped_reason or ""):
                assert x.result.timeline.num_ticks == first_over
            else:
                assert first_over is None or first_over == x.result.timeline.num_ticks
        return
    # the cap is each instance's part: none ran past it, and a run that stopped there names the budget and the part
    part = max(max_ticks // num_instances, 1)
    assert all(x.result.timeline.num_ticks <= part for x in results[0].instances)
    capped = [x for x in results[0].instances if "the server's budget of" in (x.result.summary.stopped_reason or "")]
    assert all(x.result.timeline.num_ticks == part for x in capped)
    assert all(f"{part:,} for each of its {num_instances} instances" in x.result.summary.stopped_reason for x in capped)
    assert ("the server's budget of" in (results[0].summary.stopped_reason or "")) == bool(capped)


def _replicas_least_kv(seed=2):
    cfg = make_config(seed=seed, workload__num_requests=12, workload__arrival__rate_per_s=5.0,
                      workload__prompt_tokens={"dist": "lognormal", "mean": 800, "min": 1, "max": 3000},
                      workload__output_tokens={"dist": "lognormal", "mean": 150, "min": 1, "max": 600})  # fmt: skip
    return with_value(cfg, "deployment", {"router": "least_kv", "replicas": 3})


def test_replica_request_results_are_the_same_at_any_check_interval(monkeypatch):
    cfg = _replicas_least_kv()
    results = []
    for ticks in (1, 4096):
        with_check_interval(monkeypatch, ticks)
        results.append(run_simulation(cfg, budget=RunBudget(max_wall_s=600.0)))
    a, b = results
    assert a.summary.stopped_reason is None and b.summary.stopped_reason is None
    for f in ("finish_s", "first_token_s", "num_emitted", "ttft_s", "tpot_s"):
        assert np.array_equal(getattr(a.requests, f), getattr(b.requests, f), equal_nan=True), f
    assert np.array_equal(a.instance_of, b.instance_of)


def test_replica_idle_rows_are_the_same_at_any_check_interval(monkeypatch):
    # An idle replica that stepped before the router had placed the next arrival ended its idle row at that routing
    # instant (the arrival might be its own); one that stepped after it ran its idle row on to its own next arrival.
    # Which came first depended on where the budget's checks cut fast-path runs: replica 1 recorded 594 rows at a 1-tick
    # interval and 593 at 4,096 (its idle gap from 2.808 s one row or two). A replica's idle row now ends only at its own
    # next arrival (`Engine.idle_end_s`): one row per idle gap.
    cfg = _replicas_least_kv()
    rows = []
    for ticks in (1, 4096):
        with_check_interval(monkeypatch, ticks)
        timelines = [x.result.timeline for x in run_simulation(cfg, budget=RunBudget(max_wall_s=600.0)).instances]
        rows.append([t.num_ticks for t in timelines])
        idle = [t.phase == Phase.IDLE for t in timelines]
        assert not any(np.any(i[1:] & i[:-1]) for i in idle)  # never two idle rows in a row
    assert rows[0] == rows[1] == [357, 600, 277]


def test_routing_after_every_replica_stopped_is_metered(monkeypatch):
    # Replicas that all stopped at their time limit still route every later arrival (the same in every order of steps);
    # that work makes no engine step, so the budget is asked between routings and its stop names the routing. The
    # meter reads a clock that advances 1 ms each time it is read (a real 0.5 s budget was also spent drawing 200k
    # requests and stepping the replicas, which on a loaded machine stopped the run before the routing: a flaky test)
    clock = itertools.count()
    monkeypatch.setattr(budget_module, "time", SimpleNamespace(perf_counter=lambda: next(clock) * 1e-3))
    cfg = make_config(seed=0, workload__num_requests=200_000, workload__arrival__rate_per_s=50.0, limits__max_sim_time_s=1.0)
    cfg = with_value(cfg, "deployment", {"replicas": 3, "router": "least_outstanding"})
    res = run_simulation(cfg, budget=RunBudget(max_wall_s=0.5))
    assert is_budget_stop(res.summary.stopped_reason) and res.summary.stopped_reason.startswith("routing: stopped after")
    assert 50 < np.count_nonzero(res.instance_of >= 0) < 200_000  # partway through the routing (~50 arrive before 1 s)


def test_a_deployment_stops_leaving_its_budgets_memory_for_building_the_result():
    # 64 replicas x 10k requests stayed within 512 MiB in the loop (470 MiB) and reached 1,416 MiB building the result
    # from every instance's 2.03M ticks: the worker's memory limit killed it and the page lost its result. The meter
    # keeps ASSEMBLY_BYTES_PER_TICK for each recorded tick of all the instances.
    cfg = with_value(make_config(workload__num_requests=3000), "deployment", {"replicas": 4})
    max_bytes = 48 << 20
    res = run_simulation(cfg, budget=RunBudget(max_bytes=max_bytes, max_wall_s=600))
    reason = res.summary.stopped_reason
    assert reason is not None and is_budget_stop(reason) and "building its result needs about" in reason, reason
    ticks = sum(int(inst.result.timeline.num_ticks) for inst in res.instances)
    # it stopped at the first check where the reserve passed what was left: the ticks it ran are about that many
    assert budget_module.ASSEMBLY_BYTES_PER_TICK * ticks <= 1.2 * max_bytes
    free = run_simulation(cfg, budget=RunBudget(max_bytes=1 << 40, max_wall_s=600))  # (room for it: runs to the end)
    # (the stopped run ran fewer ticks than the whole run, whose result would need more than the budget; the stop may
    # pass max_bytes / ASSEMBLY_BYTES_PER_TICK by a check interval: 103,324 ticks against 98,304 since session 75)
    free_ticks = sum(int(i.result.timeline.num_ticks) for i in free.instances)
    assert free.summary.stopped_reason is None and ticks < free_ticks
    assert max_bytes < budget_module.ASSEMBLY_BYTES_PER_TICK * free_ticks
    one = run_simulation(make_config(workload__num_requests=3000), budget=RunBudget(max_bytes=max_bytes, max_wall_s=600))
    assert one.summary.stopped_reason is None  # (one engine: no such reserve, its result is small)
