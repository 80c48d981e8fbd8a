"""A ceiling on what one run may cost, set by whoever hosts the simulator (never by the config).

`limits.*` in a config belong to the config's author (and travel in links); a `RunBudget` belongs to
the server: the Streamlit app reads it from its own settings file and passes it to
`run_simulation(cfg, budget=...)`. The CLI and the Python API run without one unless asked.

A run over budget stops like a run over `limits.max_ticks`: with the partial results so far and a
`stopped_reason` that names the budget. Checking is cheap: the tick and row counts every loop iteration,
wall time and memory every `check_every_ticks` ticks.
"""

from __future__ import annotations

import os
import resource
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sim_core.presets import PresetError
from sim_core.words import counted

if TYPE_CHECKING:
    from sim_core.config import SimConfig
    from sim_core.engine import Engine

MIB = 1 << 20
# The tick loop stops early enough to leave time for assembling the result: 10 % of the budget plus
# ~2 us per recorded tick (0.6-1.9 us/tick measured on a 400k-tick run, /tmp/i10asm.py in the report).
LOOP_SHARE = 0.9
ASSEMBLY_S_PER_TICK = 2e-6
# ... and memory for it: a deployment's result (every instance's arrays, then their merged copies) took ~490-500 bytes
# per recorded tick of all its instances over what its loop held (64 replicas x 10k requests: 470 -> 1,416 MiB for 2.03M
# ticks; 16P16D: 326 -> 1,067 MiB for 1.54M; /tmp/asm.py in session 72's note), a single engine's ~275 (100k requests:
# 60 -> 135 MiB for 285k). Without it a deployment within the budget in its loop passed it threefold in the assembly,
# where the worker's memory limit killed it and the page lost the result.
ASSEMBLY_BYTES_PER_TICK = 512
CHECK_EVERY_CALLS = 32
CHECK_INTERVAL_S = 0.05  # aim for a check every 50 ms of work
FIRST_CHUNK_TICKS = 16  # before the tick rate is known  # loop iterations between checks too (a slow general tick can take ms)
# Every engine of a deployment keeps state for every request of the workload, set up before the first tick (where no
# check runs): 150-350 bytes per instance per request measured (16 instances x 100k requests: plain 149, prefix caching
# 303, multi-turn sessions 345). The set-up may take half the memory budget; the run needs the rest.
SETUP_BYTES_PER_INSTANCE_REQUEST = 400
SETUP_SHARE = 0.5


class OverBudget(PresetError):
    """A run the server's budget refuses before it starts (its set-up alone would pass the budget): a message for the
    visitor, shown wherever a bad input's is (a PresetError: the app's runner and workers, sweeps and the planner)."""


@dataclass(frozen=True)
class RunBudget:
    max_wall_s: float = 5.0  # wall-clock time of the tick loop, s
    max_ticks: int = 1_000_000  # timeline rows
    max_recorded_rows: int = 2_000_000  # timeline rows + step-through (batch) rows
    max_bytes: int = 512 * MIB  # growth of the process's resident memory during the run, bytes
    check_every_ticks: int = 4096  # most ticks between wall-time / memory checks (fewer when ticks are slow)

    def __post_init__(self) -> None:
        for name in ("max_wall_s", "max_ticks", "max_recorded_rows", "max_bytes", "check_every_ticks"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0 or value != value:
                raise ValueError(f"RunBudget.{name} must be a positive number, got {value!r}")

    def check_setup(self, cfg: SimConfig) -> None:
        """Raise OverBudget when `cfg`'s deployment would hold more than its share of the memory budget before its first
        tick (instances x requests; a single engine's set-up is small and the meter watches its run). The message names
        the fields, their values and the most requests that fit with that many instances. The same config is refused on
        any server with this budget: not a stop that depends on the load (`is_load_dependent_stop`), so a sweep's point
        cache keeps it."""
        dep = cfg.deployment
        if dep is None:
            return
        dis = dep.disaggregation
        num = dep.replicas if dis is None else dis.prefill.replicas + dis.decode.replicas
        requests = cfg.workload.num_requests
        need = num * requests * SETUP_BYTES_PER_INSTANCE_REQUEST
        allowed = SETUP_SHARE * self.max_bytes
        if need <= allowed:
            return
        what = (f"deployment.replicas = {num}" if dis is None else
                f"{dis.prefill.replicas} prefill + {dis.decode.replicas} decode instances (deployment.disaggregation)")
        most = int(allowed // (num * SETUP_BYTES_PER_INSTANCE_REQUEST))
        raise OverBudget(
            f"Not run: {what} x workload.num_requests = {requests:,} would hold about {need / MIB:,.0f} MiB before the "
            f"first tick (every instance keeps state for every request), over {SETUP_SHARE:.0%} of {BUDGET_MARK} of "
            f"{self.max_bytes / MIB:,.0f} MiB of memory per run; allowed here: at most {most:,} requests with {num} instances, "
            "or fewer instances (the command line has no such limit)"
        )

    def describe(self) -> str:
        return (f"{self.max_wall_s:g} s of server time, {counted(self.max_ticks, 'tick')}, {self.max_recorded_rows:,} "
                f"recorded rows and {self.max_bytes / MIB:,.0f} MiB of memory per run")  # fmt: skip


def resident_bytes() -> int:
    """Resident memory of this process now (Linux /proc; elsewhere the peak, which only overstates)."""
    try:
        with open("/proc/self/statm", "rb") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


BUDGET_MARK = "the server's budget"  # in every stopped_reason a budget writes


def is_budget_stop(stopped_reason: str | None) -> bool:
    """Whether a run was stopped by a server's budget (not by the config's own limits)."""
    return bool(stopped_reason) and BUDGET_MARK in stopped_reason


# in the stops by wall time and by memory (_time_or_memory), not in those by ticks or recorded rows
_WALL_STOP, _MEMORY_STOP = "s of server time, ", " MiB per run"


def is_load_dependent_stop(text: str | None) -> bool:
    """Whether `text` (a stopped_reason, or a payload holding one) tells of a budget stop by wall time or memory: these
    depend on the machine's load at that moment, not only on the config, so the same run may finish next time (a
    stop at the tick or recorded-row limit falls on the same tick anywhere)."""
    return is_budget_stop(text) and (_WALL_STOP in text or _MEMORY_STOP in text)


class BudgetMeter:
    """Measures one run against a budget; the engine asks `over(engine)` between ticks.

    Checks come every ~CHECK_INTERVAL_S of work: the number of ticks between two checks adapts to
    the measured tick rate (a tick costs 5 us on the fast path and milliseconds with a huge queue),
    capped at the budget's `check_every_ticks`.
    """

    def __init__(self, budget: RunBudget):
        self.budget = budget
        self.t0_s = time.perf_counter()
        self.rss0_bytes = resident_bytes()
        self.chunk_ticks = FIRST_CHUNK_TICKS
        self.next_check_tick = FIRST_CHUNK_TICKS
        self._last = (self.t0_s, 0)
        self.peak_bytes = 0
        self.wall_s = 0.0
        self.num_calls = 0
        # the recorded ticks the result will be built from: a deployment's engines share this meter and each asks with
        # its own count, so the deployment sets the count of all of them (`run_deployment`)
        self.count_ticks: Callable[[], int] | None = None
        # A deployment's instances share the run's tick and row budget, an equal part each (`run_deployment` sets their
        # number): each stops at its own part as at its own limits.max_ticks, so where it stops follows from the config,
        # not from the order the loop steps them in. (Each had the whole budget: 64 replicas ran 64 times the ticks a
        # run may have.)
        self.num_instances = 1

    @property
    def max_ticks(self) -> int:
        """The ticks one engine may run: the budget's, or a deployment instance's part of it (at least one tick: a
        budget under the number of instances, which no server sets, gives each one)."""
        return max(self.budget.max_ticks // self.num_instances, 1)

    @property
    def max_recorded_rows(self) -> int:
        """The recorded rows one engine may hold: the budget's, or a deployment instance's part of it."""
        return max(self.budget.max_recorded_rows // self.num_instances, 1)

    def _of_budget(self, total: str, part: int) -> str:
        """The budget as the stop message names it: `total` per run, and the instance's `part` in a deployment."""
        return total if self.num_instances == 1 else f"{total}, {part:,} for each of its {self.num_instances} instances"

    def ticks_until_check(self, engine: Engine) -> int:
        """How many ticks a batched advance (the fast path, a batch-of-one chain) may run before the next check, and
        before its recorded rows could pass the budget's (`ticks_before_rows_limit`) (>= 1)."""
        ticks = engine.rec.num_ticks
        return max(min(self.next_check_tick - ticks, self.max_ticks - ticks, self.ticks_before_rows_limit(engine)), 1)

    def ticks_before_rows_limit(self, engine: Engine) -> int:
        """Ticks `engine` may run with its recorded rows (timeline and step-through) still within `max_recorded_rows`
        whatever they record: each tick records one timeline row and, while the step-through log is kept, one row per
        request in its batch, at most `max_num_seqs` (an invariant `Engine.check_invariants` asserts). Every advance of
        many ticks stops within this (`ticks_until_check`, `Engine.ticks_left`), so the first tick that passes the limit
        ends a step and `over` stops the run right after it, the same tick at any check interval (a check once in a while
        stopped it wherever the wall-clock-adapted interval fell). 0: over."""
        rec = engine.rec
        rows_left = self.max_recorded_rows - rec.num_ticks - rec.num_batch_rows
        if rows_left < 0:
            return 0
        return max(rows_left // (1 + (min(engine.st.num_requests, engine.sched.max_seqs) if rec.wants_batches else 0)), 1)

    def _adapt(self, now_s: float, ticks: int) -> None:
        last_s, last_ticks = self._last
        if now_s > last_s and ticks > last_ticks:
            rate = (ticks - last_ticks) / (now_s - last_s)
            self.chunk_ticks = int(min(max(rate * CHECK_INTERVAL_S, 1), self.budget.check_every_ticks))
        self._last = (now_s, ticks)
        self.next_check_tick = ticks + self.chunk_ticks

    def over(self, engine: Engine) -> str | None:
        """The reason to stop now, or None. O(1) except at a check."""
        b, rec = self.budget, engine.rec
        ticks = rec.num_ticks
        if ticks >= (max_ticks := self.max_ticks):
            return (f"stopped after {counted(ticks, 'tick')}, the server's budget of "
                    f"{self._of_budget(counted(b.max_ticks, 'tick') + ' per run', max_ticks)}")  # fmt: skip
        rows = ticks + rec.num_batch_rows  # (every call, not at checks only: where it stops must not depend on them)
        if rows > (max_rows := self.max_recorded_rows):
            return (f"stopped after {counted(ticks, 'tick')}: {rows:,} recorded rows, over the server's budget of "
                    f"{self._of_budget(f'{b.max_recorded_rows:,}', max_rows)} (lower limits.num_recorded_batches or "
                    "the number of requests)")  # fmt: skip
        self.num_calls += 1
        if ticks < self.next_check_tick and self.num_calls % CHECK_EVERY_CALLS:
            return None
        now_s = time.perf_counter()
        self._adapt(now_s, ticks)
        return self._time_or_memory(now_s, ticks)

    def over_between_steps(self, count_ticks: Callable[[], int]) -> str | None:
        """The reason to stop now, or None, for work a deployment does between engine steps (routing arrivals to
        instances that have all stopped at their time limit makes no step, so `over` is never asked): wall time and
        memory every CHECK_EVERY_CALLS calls. `count_ticks()`: ticks recorded so far (the result's assembly time),
        asked only at a check."""
        self.num_calls += 1
        if self.num_calls % CHECK_EVERY_CALLS:
            return None
        return self._time_or_memory(time.perf_counter(), count_ticks())

    def _time_or_memory(self, now_s: float, ticks: int) -> str | None:
        b = self.budget
        if self.count_ticks is not None:
            ticks = self.count_ticks()
        self.wall_s = now_s - self.t0_s
        if self.wall_s + ASSEMBLY_S_PER_TICK * ticks > LOOP_SHARE * b.max_wall_s:
            # (the time left is kept for building the result: "stopped after 4.4 s ..., the budget per run is 5 s" read
            # as a contradiction in a browser review)
            return (f"stopped after {self.wall_s:.1f} {_WALL_STOP}the server's budget per run is {b.max_wall_s:g} s, "
                    f"the rest kept to build the result ({counted(ticks, 'tick')} simulated)")  # fmt: skip
        self.peak_bytes = max(self.peak_bytes, resident_bytes() - self.rss0_bytes)
        if self.peak_bytes > b.max_bytes:
            return (f"stopped after {counted(ticks, 'tick')}: the run holds {self.peak_bytes / MIB:,.0f} MiB, over the server's "
                    f"budget of {b.max_bytes / MIB:,.0f}{_MEMORY_STOP}")  # fmt: skip
        if (assembly := ASSEMBLY_BYTES_PER_TICK * ticks) > b.max_bytes - self.peak_bytes and self.count_ticks is not None:
            return (f"stopped after {counted(ticks, 'tick')}: the run holds {self.peak_bytes / MIB:,.0f} MiB and building its "
                    f"result needs about {assembly / MIB:,.0f} MiB more, over the server's budget of "
                    f"{b.max_bytes / MIB:,.0f}{_MEMORY_STOP}")  # fmt: skip
        return None
