"""The server's budget (sim_core/budget.py) on one engine: where its checks fall never changes a result.

The meter checks wall time and memory every `chunk_ticks` ticks, a number it adapts to the measured tick rate (so to
how loaded the machine is), and every coalesced run, scalar-core call and batch-of-one service stops at the next
check. A run the budget does not stop, or stops at its tick cap or its recorded rows, must be the same at any interval:
the same link gives the same result on a quiet server and a busy one (the deployment's counterpart:
cluster/test_budget_xpyd.py)."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim_core.budget import BudgetMeter, RunBudget
from sim_core.engine import run_simulation
from tests.sim_core.cluster.test_deployment import assert_same_run
from tests.sim_core.test_engine import random_config


def with_check_interval(monkeypatch, ticks: int) -> None:
    """Budget checks every `ticks` ticks, fixed (the meter adapts the interval to the measured tick rate)."""
    def adapt(self, now_s, num_ticks):  # (a fixed interval instead of the wall-clock-adapted one)
        self._last, self.chunk_ticks, self.next_check_tick = (now_s, num_ticks), ticks, num_ticks + ticks

    monkeypatch.setattr(BudgetMeter, "_adapt", adapt)


def same_at_every_check_interval(monkeypatch, cfg, budget: RunBudget) -> list:
    """`cfg` run under `budget` with checks every 1, 3 and 4,096 ticks, asserted the same; the three results."""
    results = []
    for ticks in (1, 3, 4096):
        with_check_interval(monkeypatch, ticks)
        results.append(run_simulation(cfg, budget=budget))
    for other in results[1:]:
        assert_same_run(results[0], other)
    return results


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10_000), max_ticks=st.one_of(st.none(), st.integers(1, 400)))
def test_an_engine_run_is_the_same_at_any_check_interval(monkeypatch, seed, max_ticks):
    cfg = random_config(seed)  # (every engine preset in turn, every arrival process, swap, samples, admissions)
    budget = RunBudget(max_wall_s=600.0) if max_ticks is None else RunBudget(max_ticks=max_ticks, max_wall_s=600.0)
    results = same_at_every_check_interval(monkeypatch, cfg, budget)
    if max_ticks is not None and results[0].summary.stopped_reason:  # stopped at the cap, not past it
        assert results[0].timeline.num_ticks <= max_ticks
    if max_ticks is None:  # a budget that never stops the run leaves it as it is without one
        assert_same_run(results[0], run_simulation(cfg))


def first_tick_over(res, max_rows: int) -> int | None:
    """The first tick count k whose rows (k timeline rows plus the step-through rows of ticks before k) pass
    `max_rows`, from the result's own log; None if none does."""
    per_tick = np.bincount(res.batches.tick, minlength=res.timeline.num_ticks)[: res.timeline.num_ticks]
    rows = np.arange(1, per_tick.size + 1) + np.cumsum(per_tick)  # rows once tick k - 1 has run, k = 1..n
    over = np.flatnonzero(rows > max_rows)
    return int(over[0]) + 1 if over.size else None


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10_000), max_rows=st.integers(20, 4000), num_logged=st.sampled_from([0, 7, 100_000]),
       max_seqs=st.sampled_from([None, 2, 8]))
def test_the_recorded_rows_budget_stops_a_run_right_after_the_tick_that_passes_it(monkeypatch, seed, max_rows, num_logged,
                                                                                  max_seqs):  # fmt: skip
    # Rows were counted at checks only, so a run stopped wherever the wall-clock-adapted interval put the check past
    # the limit: a link gave a different result on a quiet server and a busy one. Every advance now stops within the
    # rows left (each tick records one timeline row and at most one step-through row per request)
    cfg = random_config(seed)
    cfg = cfg.model_copy(update={"limits": cfg.limits.model_copy(update={"num_recorded_batches": num_logged})})
    if max_seqs is not None:  # (fewer than the requests: the bound on a tick's step-through rows is the batch's)
        cfg = cfg.model_copy(update={"scheduler": cfg.scheduler.model_copy(update={"max_num_seqs": max_seqs})})
    res = same_at_every_check_interval(monkeypatch, cfg, RunBudget(max_recorded_rows=max_rows, max_wall_s=600.0))[0]
    first_over = first_tick_over(res, max_rows)
    if res.summary.stopped_reason and "recorded rows" in res.summary.stopped_reason:
        assert res.timeline.num_ticks == first_over  # right after the tick that passed it
    else:  # not stopped by it: no tick passed it but perhaps the last (the run ended there on its own, or at a limit)
        assert first_over is None or first_over == res.timeline.num_ticks


def test_a_one_tick_budget_says_tick_not_ticks():
    # a server budget of one tick read "stopped after 1 ticks, the server's budget of 1 ticks per run"
    from tests.conftest import make_config

    budget = RunBudget(max_ticks=1, max_wall_s=600.0)
    reason = run_simulation(make_config(), budget=budget).summary.stopped_reason
    assert reason.startswith("stopped after 1 tick, the server's budget of 1 tick per run"), reason
    assert "1 tick," in budget.describe() and "1 ticks" not in budget.describe()


def test_a_wall_clock_stop_says_the_rest_of_the_budget_builds_the_result():
    # "stopped after 4.4 s of server time, the server's budget per run is 5 s" read as a contradiction in a browser
    # review: the loop stops at LOOP_SHARE of the budget, less the result's assembly, and keeps the rest for that
    from sim_core.budget import is_load_dependent_stop
    from tests.conftest import make_config

    budget = RunBudget(max_wall_s=1e-9)  # (past it at the first check)
    reason = run_simulation(make_config(), budget=budget).summary.stopped_reason
    assert reason.startswith("stopped after 0.0 s of server time, the server's budget per run is 1e-09 s, the rest kept "
                             "to build the result ("), reason  # fmt: skip
    assert is_load_dependent_stop(reason)
