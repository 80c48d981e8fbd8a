"""The tick loop: owns time and state transitions. `run_simulation(cfg)` is a pure function.

Each tick: arrivals join the waiting queue; the scheduler plans the batch; the cost model prices
it; the clock advances; progress, tokens, blocks and finished requests are updated; one row is
recorded. When nothing can run the clock jumps to the next arrival (an IDLE row).

`Engine.step()` is one iteration of that loop (guards first, then arrivals, then a tick, a coalesced
run or an idle jump), so callers can step several engines on one clock; `run()` loops over it.

Where ticks are many and events few, the scheduler's all-decode plan is repeated for every tick at
which the scheduler would plan it again (`_advance_run`, for every policy: see its docstring), in
one vectorised step that records the same rows; FCFS continuous batching on a paged cache runs on a
scalar per-tick core that asks the same phase controller and rules (fastpath.py). Tests require
identical results with both on and off.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from sim_core import fastpath, solo
from sim_core.arrays import isin
from sim_core.budget import BudgetMeter, RunBudget
from sim_core.config import SimConfig
from sim_core.costmodel import CostModel, plan_memory
from sim_core.count_curve import CountCurve, LiveKvCurve
from sim_core.kvcache import BlockManager
from sim_core.metrics import summarize, unfinished_reason
from sim_core.presets import config_from_dict
from sim_core.prefix_cache import PrefixCachingBlockManager
from sim_core.recorder import Recorder
from sim_core.result import RequestTable, SimResult, Timeline
from sim_core.schedulers.plan import StepPlan
from sim_core.schedulers.rules import positions_past_prompt
from sim_core.schedulers.scheduler import FEW_REQUESTS, Scheduler
from sim_core.sessions import SessionState
from sim_core.speculative import Speculator, tokens_emitted, verify_aggregates
from sim_core.state import SimState
from sim_core.types import Event, Phase, Status
from sim_core.words import counted
from sim_core.workload import Workload, generate_workload

MAX_RUN_CELLS = 1 << 16  # bound on (batch × ticks) evaluated per coalesced run: keeps memory flat
MAX_ITL_STORED = 2_000_000  # gaps kept in the result (16 MB); larger runs keep an evenly strided sample
SCALAR_PRICING_TICKS = 24  # runs up to this long are priced tick by tick in Python floats (same IEEE operations)
SCALAR_WALK_CELLS = 512  # speculative runs of up to this many (decoders x ticks) are walked tick by tick in Python
MAX_RUN_TICKS = 4096  # ticks priced per coalesced step; a longer run continues in the next step
RUN_PRICE_CACHE_BYTES = 4 << 20  # prices of repeated runs kept per engine (Engine._memo_run_prices)


class Engine:
    def __init__(self, cfg: SimConfig, workload: Workload | None = None):
        """`workload`: the one `generate_workload(cfg.workload, default_rng(cfg.seed))` gives, already drawn (a
        deployment draws it once and gives each engine a copy); the engine owns it (writes its arrays)."""
        self.cfg = cfg
        self.memory = plan_memory(cfg)  # raises MemoryPlanError with the numbers
        self.workload = workload if workload is not None else generate_workload(cfg.workload, np.random.default_rng(cfg.seed))
        wl = self.workload
        self.n = wl.num_samples
        contiguous = cfg.model.max_model_len if cfg.kv_cache.layout == "contiguous" else None
        if cfg.kv_cache.enable_prefix_caching:  # issue 12: a block manager whose free blocks may hold cached prefixes
            spec = cfg.scheduler.speculative  # (an EAGLE/MTP head recomputes a hit's last block: PrefixCache.lookup)
            self.kv = PrefixCachingBlockManager(self.memory.num_blocks, self.memory.num_host_blocks, cfg.kv_cache.block_size, wl,
                                                cfg.kv_cache.eviction_policy, spec.enabled and spec.draft == "head")  # fmt: skip
        else:
            self.kv = BlockManager(
                self.memory.num_blocks, self.memory.num_host_blocks, cfg.kv_cache.block_size, wl.num_requests, self.n, contiguous
            )
        # issue 12: closed-loop sessions release each later turn when the previous one finishes (sim_core/sessions.py)
        self.st = (SessionState if wl.next_turn is not None else SimState)(wl, cfg.scheduler.queue_order, cfg.scheduler.preemption_requeue)
        self.sched = Scheduler(cfg, self.kv)
        self.cost = CostModel(cfg)
        self.rec = Recorder(cfg.limits.num_recorded_batches)
        self.all_itl_gaps = None  # every gap when the result keeps a sample, for a deployment (result(keep_all_gaps))
        # The most KV blocks in use during a tick: a row records them after its finishing requests free theirs (what
        # the KV panel and the prefix cache's cached-free count read), so the peak is kept here, on every path
        self.kv_peak_in_tick_blocks = 0
        # issue 12: speculative decoding (a rule and a cost term) and the prefix cache's per-tick marks
        self.spec = Speculator(cfg, self.cost) if cfg.scheduler.speculative.enabled else None
        self.prefix = getattr(self.kv, "prefix", None)
        if self.prefix is not None:
            self.prefix.recorder = self.rec
        self.num_swap_outs = 0
        self.stopped_reason: str | None = None
        self.check_invariants = False
        # Cluster hooks (sim_core/cluster steps several engines on one clock). Inert for a single engine.
        self.horizon_s = math.inf  # external input may arrive then: runs stop before it, idle jumps to it
        self.on_horizon = None  # (engine, now_s, num_outstanding, kv usage, num_waiting) -> new horizon_s: `horizon_reached`
        self.may_pause = False  # a fast-path run that reaches its horizon pauses there instead of ending (`_run_fast`)
        self._paused = None  # that run (fastpath.run_ticks), resumed by the next `step`
        self._live: tuple | None = None  # what it yielded at the pause (its counts: `num_outstanding`, bounds)
        self._joined: list[int] = []  # decoders injected into the paused run, and blocks reserved there since the pause
        self._live_left: fastpath.LiveLeft | None = None  # tokens left in the paused run (outstanding_bounds)
        # A decode instance's run that may not pause (the cluster's unpaused reference, `pause_runs=False`) and ended at
        # its horizon with requests running or queued, where one that may pauses: whether a paused run there would take joins (`joinable`
        # in `fastpath.run_ticks`); None otherwise. Until the next step, or what would end that paused run (`settle`):
        # `num_in_run` counts the run's queued requests, as a paused run's count does
        self._ended_in_run: bool | None = None
        self.run_ended = False  # its last step only ended such a run (nothing to run): no row, no clock moved (the cluster's
        # loop reads it, and resets it, at a step that moved neither)
        self._reserved = 0
        # Decode-pool instance under first_token_from = decode (`inject_prefilled` without a first token): decoders that
        # joined with the prompt's KV and no token yet, until their first decode tick emits the user's first token
        # (`_decode_first_tokens`); and every request whose first token a decode tick emitted (its summary's steady
        # state counts that token among the decode tokens, not again as a first token)
        self.tokenless: set[int] = set()
        self.first_by_decode: list[int] = []
        self._bounds_memo: tuple | None = None  # outstanding_bounds: (state key, its CountCurve)
        self._kv_memo: tuple | None = None  # kv_usage_bounds: (state key, per-request arrays, {ticks: bounds})
        self._kv_live: tuple | None = None  # kv_used_bounds of a paused run: (requests added, its LiveKvCurve or None)
        self.hand_off_prefilled = False  # prefill-pool instance: requests leave at their first token, KV kept
        self.joins_prefilled = False  # decode-pool instance: requests join only with their KV (`take_arrivals_externally`)
        self.idle_to_own_input = False  # a cluster's replica: an idle row ends at its own next arrival (`idle_end_s`)
        # A cluster's prefill instance: an idle row that goes on from the last one, nothing run or changed between, extends
        # it (`_record_idle`), so its idle rows end where its own state changes, not at the horizons the loop gives it
        self.merge_idle_rows = False
        self._idle_row: tuple | None = None  # its last idle row: (rows recorded then, start, end, `_idle_state` then)
        # A cluster's prefill instance whose horizon no release can precede (it holds no handed-off KV: `Deployment._horizon`,
        # set before each step): its fast-path run goes on across rows to the horizon, or to the earliest release of KV it
        # hands off meanwhile, `release_bound_s(first token time, context tokens)` (issue 13: cost; `fastpath.run_ticks`)
        self.runs_to_horizon = False
        self.release_bound_s = None
        self.handed_off: list[tuple[np.ndarray, float]] = []  # (ids, first-token time) not yet collected
        self._over = False  # a guard stopped the run, or nothing can ever run
        self.idle_stopped = False  # ... the latter: requests wait that it cannot admit, and nothing is to come (`reopen`)
        self._coalesce = cfg.limits.coalesce_ticks
        self._fast: bool | None = None  # decided at the first step (a cluster sets hand_off_prefilled after __init__)
        self._solo: solo.SoloPath | None = None  # batch-of-one services run whole (solo.py), decided with _fast
        self.meter: BudgetMeter | None = None  # set by run_simulation when a RunBudget is given
        self._run_prices: dict[tuple[int, int], tuple] = {}  # (batch size, total context) -> run prices
        self._run_prices_bytes = 0

    # ------------------------------------------------------------------ loop
    def run(self) -> SimResult:
        while self.step():
            pass
        return self.result()

    def step(self) -> bool:
        """One loop iteration: guards, arrivals, then a planned tick (or a coalesced run of ticks)
        or an idle jump to the next arrival. Returns False when the run is over (all finished, a
        guard stopped it, or nothing can ever run); `stopped_reason` then says why, if not done."""
        resumes = self._ended_in_run is not None  # (a run that ended where it would pause goes on from here)
        if resumes:
            self._ended_in_run = None
        if self._paused is not None:  # cluster hook: a paused fast-path run goes on to the new horizon (`_run_fast`)
            return self._run_fast(self._paused)
        st, lim = self.st, self.cfg.limits
        if st.is_done or self._over:
            return False
        if self._fast is None:
            self._fast = self._coalesce and fastpath.eligible(self) and (
                not self.hand_off_prefilled or fastpath.hands_off(self))  # fmt: skip
            self._solo = solo.SoloPath(self) if self._coalesce and solo.eligible(self) else None
        # Guards: every limit on a run is checked here, before anything of the next tick happens.
        if self.rec.num_ticks >= lim.max_ticks and not self._idle_row_goes_on():
            return self._stop(f"stopped after {counted(lim.max_ticks, 'tick')} (limits.max_ticks)")
        if st.now_s >= lim.max_sim_time_s:
            # (a tick that started before the limit ends past it: a 0.001 GB/s link's one tick ran to 32,161 s, and the
            # run said it stopped at 3,600 s beside a Finished card of 32,161 s)
            past = f"; its last tick, begun before it, ended at {st.now_s:,.6g} s" if st.now_s > lim.max_sim_time_s else ""
            return self._stop(f"stopped at {lim.max_sim_time_s:g} s of simulated time (limits.max_sim_time_s){past}")
        if self.meter is not None and (over := self.meter.over(self)):  # the server's budget (sim_core/budget.py)
            return self._stop(over)
        st.admit_arrivals()
        coalesce = self._coalesce
        if self._solo is not None and self._solo.advance():  # one request at a time: whole services, many per step
            pass
        # (`_advance_pure_decode` runs nothing with nothing running: not called then, a cluster's idle prefill steps)
        elif not (self._fast and (self._run_fast() if self.may_pause else fastpath.advance(self))) and not (
                coalesce and st.running.size and self._advance_pure_decode()):  # fmt: skip
            plan = self.sched.schedule(st)
            if plan.is_empty:
                if resumes and not plan.preempted_idx.size:  # (the run it goes on from finds nothing to run: it ends
                    # there, as a paused run resumed does, `fastpath.run_ticks`, and its idle row is the next step's, from
                    # its horizon then; the cluster's loop counts the step as the paused run's end, a step that moved. A
                    # plan that pre-empts is the step after a paused run's end, which hands the pre-emption back)
                    self.run_ended = True
                    return True
                if not self._idle():
                    self._over = self.idle_stopped = True
                    return False
            elif coalesce and self._is_repeatable(plan):
                self._advance_run(plan)
            else:
                self._advance_tick(plan)
        if self.check_invariants and self._paused is None:  # (a paused run's state is in the run: checked at its end)
            self._check()
        # True after any progress, even the step that finished the last request: a cluster
        # instance whose requests are all done may still receive more (the next call says False).
        return True

    def ticks_left(self) -> int:
        """Ticks a coalesced run may take before a tick ceiling: the config's `limits.max_ticks` and the
        server's budget (which the loop checks before each step: a run must not step over it either)."""
        ceiling = self.cfg.limits.max_ticks
        if self.meter is None:
            return ceiling - self.rec.num_ticks
        # (and its recorded rows: a run that passes the budget's stops right after the tick that does)
        return min(min(ceiling, self.meter.max_ticks) - self.rec.num_ticks, self.meter.ticks_before_rows_limit(self))

    def _note_kv_peak(self, blocks: int) -> None:
        """Blocks in use during a tick (`kv_peak_in_tick_blocks`)."""
        if blocks > self.kv_peak_in_tick_blocks:
            self.kv_peak_in_tick_blocks = blocks

    def reopen(self) -> None:
        """Step again after a step that found requests it cannot admit and no input to come (`idle_stopped`): a cluster
        instance's horizon says what it can see now, and another instance's hand-off may yet reach it (its stopped_reason
        stays until it moves)."""
        self._over = self.idle_stopped = False

    def _stop(self, reason: str) -> bool:
        self.stopped_reason = reason
        self._over = True
        return False

    def _idle(self) -> bool:
        """Jump the clock to the next arrival. False when nothing will ever arrive (run ends)."""
        st = self.st
        until = self.idle_end_s(st.next_arrival_s())
        if until is None:
            if st.waiting_keys.size or st.swapped_keys.size:
                self.stopped_reason = "stopped: waiting requests can never be admitted (KV cache or limits too small)"
            return False
        self._record_idle(until)
        return True

    def idle_end_s(self, next_arrival_s: float) -> float | None:
        """Where an idle row that starts now ends: the next input (`next_arrival_s` or the cluster's horizon), or None
        when nothing will ever arrive. Read by `_idle` and by a fast-path run idling between requests (`fastpath`)."""
        nxt = min(next_arrival_s, self.horizon_s)
        if not math.isfinite(nxt):  # (a Python float: the clock's next input; math, not a NumPy call, every idle step)
            return None
        # (never past limits.max_sim_time_s: the next step's guard stops the run there, as a tick would; an idle
        # row up to a later arrival would report more simulated time than the limit the run says it stopped at)
        limit_s = self.cfg.limits.max_sim_time_s
        end_s = min(nxt, limit_s)
        if self.idle_to_own_input and end_s < min(next_arrival_s, limit_s):
            # A replica's idle row ends at its own next arrival, not at the horizon (a routing instant): one row per idle
            # gap, wherever the loop's order of steps has the router place the next arrival (before or after this step).
            # Nothing else reaches a replica, so its state is its state at the horizon already: it waits there (no row)
            return self.st.now_s
        return end_s

    def _record_idle(self, until_s: float) -> None:
        st = self.st
        gap = until_s - st.now_s
        if gap <= 0:  # only in a cluster: the horizon is now (another engine must move first)
            return
        if self.merge_idle_rows:
            state = self._idle_state()
            row = self.open_idle_row()
            if row is not None and row[3] == state:  # the same idle state since the last row: it goes on to until_s
                self.extend_idle_row(until_s)
                return
            self._idle_row = (self.rec.num_ticks + 1, st.now_s, until_s, state)
        self.rec.tick((st.now_s, gap, Phase.IDLE, 0, 0, 0, 0, 0, st.waiting_keys.size, st.swapped_keys.size,
                       self.kv.num_used, 0.0, 0.0, 0, 0, 0, self.sched.batch_cap))  # fmt: skip
        st.now_s = until_s

    def extend_idle_row(self, until_s: float) -> None:
        """The open idle row (`open_idle_row`) goes on to `until_s`, and the clock with it."""
        row = self._idle_row
        self.rec.set_last_duration(until_s - row[1])  # (its end minus its start, as a row's own: not a sum of gaps)
        self._idle_row = (row[0], row[1], until_s, row[3])
        self.st.now_s = until_s

    def _idle_row_goes_on(self) -> bool:
        """At limits.max_ticks: the step only extends the open idle row (`open_idle_row`, a cluster's prefill instance),
        so the guard lets it run. The rule for where an instance's last idle row ends under a tick limit: the limit
        counts rows, and extending one records none, so the instance stops at the step that would record another row
        (a tick, or an idle row in another state) and its last idle row ends where its state changes, at its next input
        (an arrival, a release of its blocks), where it would end without the limit, as its other idle rows do. Not at
        the horizon the loop gave the step that reached the limit, which depends on where the executor stepped (the
        fast path's run stops at the limit with the row ending at a bound on the next release: `fastpath.run_ticks`
        leaves the rest to this guard). Only between requests (nothing queued, running or swapped out, no arrival
        due): the plan is then certainly empty (`Scheduler._plan`); with requests queued only planning could tell,
        and planning admits."""
        row = self.open_idle_row()
        if row is None:
            return False
        st = self.st
        if st.running.size or st.waiting_keys.size or st.swapped_keys.size:
            return False
        return st.next_arrival_s() > st.now_s and row[3] == self._idle_state()

    def _idle_state(self) -> tuple[int, int, int, int]:
        """What an idle row records of the engine besides its time: requests queued and swapped out, blocks in use, batch cap."""
        st = self.st
        return st.waiting_keys.size, st.swapped_keys.size, self.kv.num_used, self.sched.batch_cap

    def open_idle_row(self) -> tuple | None:
        """(`merge_idle_rows`) The last idle row while it is the last row recorded and ends at the clock: an idle row
        from the clock in the same state (`_idle_state`; the fast path's `run_ticks` too) extends it, else None."""
        row = self._idle_row
        if row is not None and row[0] == self.rec.num_ticks and row[2] == self.st.now_s:
            return row
        return None

    # ------------------------------------------------------------------ cluster hooks (sim_core/cluster)
    @property
    def has_work(self) -> bool:
        """Requests queued, running, swapped out or still to arrive: stepping makes progress without new input
        (never after a guard stopped the run: a deployment runs its other instances to their limits)."""
        live = self._live
        if live is not None:  # a paused run: its batch, queue and next arrival (`is_busy`, `next_arrival_s`, inlined:
            if live[1] and not self._over:  # the cluster's loop asks every instance, every pass; most paused runs hold
                return True  # requests: answered in two lines, 18 times per request in 2P2D)
            st, k = self.st, live[2]
            return not self._over and (bool(self._joined) or k < st.num_requests and st.arrival_s.item(k) < math.inf)
        st = self.st
        return not self._over and (bool(st.running.size or st.waiting_keys.size or st.swapped_keys.size)
                                   or st.next_arrival_s() < math.inf)

    @property
    def is_busy(self) -> bool:
        """Requests running, queued or swapped out, of the paused run's state while one is paused (a cluster reads
        a paused prefill instance between requests: `Deployment._horizon`)."""
        if self._live is not None:
            return self._live[1] + len(self._joined) > 0
        st = self.st
        return bool(st.running.size or st.waiting_keys.size or st.swapped_keys.size)

    def next_arrival_s(self) -> float:
        """`st.next_arrival_s()`, of the paused run's state while one is paused (its next slot to arrive)."""
        st = self.st
        k = st.next_arrival if self._live is None else self._live[2]
        return st.arrival_s.item(k) if k < st.num_requests else math.inf

    @property
    def num_outstanding(self) -> int:
        """Requests in this engine (waiting, running, swapped, or added and not yet arrived): what a
        least-outstanding router reads (it counts what it sent until it finishes, as routers do)."""
        if self._live is not None:  # a paused run: its queue and batch, and the requests added but not arrived
            return self._live[1] + len(self._joined) + max(self.num_added - self._live[2], 0)
        st = self.st
        pending = max(getattr(self, "num_added", 0) - st.next_arrival, 0)  # (decode pool: never arrive by themselves)
        return int(st.running.size + st.waiting_keys.size + st.swapped_keys.size + pending)

    @property
    def num_waiting(self) -> int:
        """Requests in this engine that are not running: queued, swapped out (vLLM V1 puts a pre-empted request back
        in its waiting queue) or added and not yet arrived (those the router sent since it last read the engine, which
        a router counts): what llm-d's queue scorer reads, vLLM's num_requests_waiting (`Router.choose`,
        weighted_score)."""
        live = self._live
        if live is not None:  # a paused run (none swapped on the fast path): its queue, and the requests added since
            return len(live[8]) - live[9] + max(self.num_added - live[2], 0)
        st = self.st
        pending = max(getattr(self, "num_added", 0) - st.next_arrival, 0)
        return int(st.waiting_keys.size + st.swapped_keys.size + pending)

    def start_empty(self) -> None:
        """Start with no requests of its own (capacity for the workload's count); the cluster adds each
        request routed here with `add_request`: slot k is the k-th added, so slots follow arrival order."""
        wl = self.workload
        R = wl.num_requests
        self.workload = dataclasses.replace(
            wl, arrival_s=np.full(R, np.inf), prompt_tokens=np.ones(R, dtype=np.int64),
            output_tokens=np.ones(R, dtype=np.int64), priority=np.zeros(R, dtype=np.int64),
            class_idx=np.full(R, -1, dtype=np.int64),
        )  # fmt: skip
        self.st = SimState(self.workload, self.cfg.scheduler.queue_order, self.cfg.scheduler.preemption_requeue)
        self.num_added = 0

    def add_request(self, arrival_s: float, prompt: int, output: int, priority: int, class_idx: int,
                    source: tuple[Workload, int] | None = None) -> int:
        """Add a request in the next slot (returns it); it arrives at `arrival_s` like any request of a
        single engine (arrival times must not decrease). `source` (workload, request): where its prefix
        identity comes from, for a prefix cache (issue 13: prefix caching per replica)."""
        k = self.num_added
        self.num_added += 1
        self.st.add_request(k, arrival_s, prompt, output, priority)
        self.workload.class_idx[k] = class_idx
        if self.prefix is not None and source is not None:
            self.prefix.bind_slot(k, *source)
        return k

    def outstanding_bounds(self, t_s: float, min_tick_s: float) -> tuple[int, int]:
        """(low, high) bounds on `num_outstanding` once every tick that starts before `t_s` has run, for an
        engine whose clock is at most `t_s` and that gets no request but those already added (issue 13: a
        least-outstanding router decides without ending coalesced runs). Added requests only arrive (all by
        `t_s`) and finishes only lower the count; a request cannot finish in fewer ticks than its remaining
        tokens (per tick: one, or one plus the draft tokens with speculative decoding), and no tick in which a
        request emits is shorter than `min_tick_s`."""
        key = self._state_key()
        memo = self._bounds_memo
        if memo is None or memo[0] != key:  # a router asks several times between steps
            memo = self._bounds_memo = (key, self.outstanding_curve())
        return memo[1].bounds(t_s, min_tick_s)

    def outstanding_curve(self) -> CountCurve:
        """`outstanding_bounds` at every instant at once, for the state now (a new object: a deployment keeps it until
        the engine steps, and adds the requests it sends meanwhile, `CountCurve.add`)."""
        st = self.st
        limit_s, per_tick = self._last_tick_by_s(), self._max_tokens_per_tick()
        live = self._live
        if live is not None:  # a paused run: the tokens left are in the run (fastpath.LiveLeft, made once per pause)
            left = self._live_left
            if left is None:
                left = self._live_left = fastpath.LiveLeft(self, live)
            # (added since the pause: all tokens left; mostly none, and no decoder joined: no comprehension for nothing)
            lefts = st.output[live[2] : self.num_added].tolist() if self.num_added > live[2] else []
            if self._joined:  # (decoders that joined it since)
                joined = self._joined
                lefts += (st.output[joined] - st.emitted[joined]).tolist()
            return CountCurve(st.now_s, limit_s, per_tick, left, live[1], lefts)
        ids = self._outstanding_ids()
        return CountCurve(st.now_s, limit_s, per_tick, None, 0, (st.output[ids] - st.emitted[ids]).tolist())

    def _last_tick_by_s(self) -> float:
        """No tick of this engine starts after this time, so its bounds there hold at any later instant:
        limits.max_sim_time_s, or its clock once a limit (max_ticks, the time limit) stopped it for good (a cluster
        never steps it again: `Deployment.run`; one that found requests it cannot admit, `idle_stopped`, may go on).
        (A replica stopped at max_ticks kept open bounds, and a router deciding on bounds fell back to every replica
        reaching every arrival for the rest of the run.)"""
        if self._over and not self.idle_stopped:
            return self.st.now_s
        return self.cfg.limits.max_sim_time_s

    def _state_key(self) -> tuple:
        """What the bounds below depend on between steps (the state changes only with these, or through
        `release` / `reserve` / `inject_prefilled`, which drop the memos)."""
        st = self.st
        return st.now_s, self.rec.num_ticks, getattr(self, "num_added", st.next_arrival), st.next_arrival

    def _outstanding_ids(self) -> np.ndarray:
        """Requests running, waiting, swapped, or added and not yet arrived."""
        st = self.st
        R = st.num_requests
        pending = np.arange(st.next_arrival, getattr(self, "num_added", st.next_arrival), dtype=np.int64)
        return np.concatenate([st.running, st.waiting_keys % R, st.swapped_keys % R, pending])

    def _max_tokens_per_tick(self) -> int:
        """Most tokens a request emits in one tick: one, or one plus the draft tokens with speculative decoding."""
        return 1 if self.spec is None else 1 + self.cfg.scheduler.speculative.num_draft_tokens

    def kv_usage_bounds(self, t_s: float, min_tick_s: float) -> tuple[float, float] | None:
        """(low, high) bounds on `kv.usage` once every tick that starts before `t_s` has run, under the assumptions
        of `outstanding_bounds` (issue 13: least_kv decides without ending coalesced runs); None where no cheap
        bound holds (`kv_used_bounds`)."""
        used = self.kv_used_bounds(t_s, min_tick_s)
        return None if used is None else (used[0] / self.kv.num_blocks, used[1] / self.kv.num_blocks)

    def kv_used_bounds(self, t_s: float, min_tick_s: float) -> tuple[int, int] | None:
        """(low, high) bounds on `kv.num_used` (blocks) once every tick that starts before `t_s` has run, under the
        assumptions of `outstanding_bounds`; None where no cheap bound holds (prefix caching, n > 1 samples, swapped
        requests, or KV that might run short before `t_s`).

        While every request's largest possible context by `t_s` fits in the free blocks, no decode is ever short of
        a block, so nothing is pre-empted or swapped out: blocks are only taken (each request ends up holding at
        most the blocks for its prompt plus the tokens it can emit by then, plus the scheduler's decode lookahead;
        all its blocks at once under reserved admission) and freed by finishes (at most the blocks held now by the
        requests that can finish, as in `outstanding_bounds`)."""
        st, kv = self.st, self.kv
        t_s = min(t_s, self._last_tick_by_s())  # (as in outstanding_bounds: no tick starts after the limit)
        if self._live is not None:  # a paused run: exact at its clock; past it, from the run's state (live_kv_curve)
            if t_s <= st.now_s:
                used = kv.num_blocks - self.live_counts()[1]
                return used, used
            memo = self._kv_live
            if memo is None or memo[0] != self.num_added:
                memo = self._kv_live = (self.num_added, self.live_kv_curve())
            return memo[1].bounds(t_s, min_tick_s) if memo[1] is not None else None
        if t_s <= st.now_s or not self.is_busy and self.next_arrival_s() >= t_s:
            # (idle until an arrival at or after t_s: nothing runs before t_s, so its KV then is its KV now; a replica
            # waits idle there without a row, `idle_end_s`, and the router reads it exactly)
            return kv.num_used, kv.num_used
        if self.prefix is not None or self.n != 1 or st.swapped_keys.size:
            return None
        key = self._state_key()
        if self._kv_memo is None or self._kv_memo[0] != key:
            ids = self._outstanding_ids()  # (none swapped here)
            left = st.output[ids] - st.emitted[ids]  # tokens still to emit
            order = np.argsort(left, kind="stable")
            held = kv.held[ids]
            final = st.prompt[ids] + st.output[ids]
            self._kv_memo = (key, left[order], np.cumsum(held[order]), held, final, final - left, {})
        _, left, held_cum, held, final, done, seen = self._kv_memo
        ticks = int((t_s - st.now_s) // min_tick_s) + 1
        if ticks in seen:  # a router asks again for the same instant (a refresh interval's arrivals)
            return seen[ticks]
        per_tick = self._max_tokens_per_tick()
        reach = final if self.cfg.scheduler.admission == "reserve" else np.minimum(final, done + ticks * per_tick)
        grow = int(np.maximum(kv.blocks_for(reach + self.sched.decode_slots, None) - held, 0).sum()) if held.size else 0
        if grow > kv.num_free:
            out = None
        else:
            k = int(np.searchsorted(left, ticks * per_tick, side="right"))
            freed = int(held_cum[k - 1]) if k else 0
            out = (kv.num_used - freed, kv.num_used + grow)
        if len(seen) < 64:
            seen[ticks] = out
        return out

    def live_kv_curve(self) -> LiveKvCurve | None:
        """`kv_used_bounds` past the clock of a paused fast-path run, for every instant at once (count_curve.LiveKvCurve),
        from the run's state (`fastpath.run_ticks`' yield): issue 13: least_kv, whose replicas all had to reach every
        arrival while a paused run had no bound past its clock. The arrays' rule made coarser where the run keeps no
        per-request context: a decoder holds ceil(context / bs) blocks and takes at most one token per tick (times
        `per_tick`), so by t at most ceil((most + 1 + decode_slots) / bs) more (ceil((a + x) / bs) - ceil(a / bs) <=
        ceil(x / bs); the arrays' prompt + emitted is its context + 1), and may free at most its whole context's
        blocks if it may finish (`LiveLeft.blocks_within`); a prefilling request holds what its admission took or
        ceil(computed / bs) if more, a queued or added one none; a recompute victim among them recomputes its prompt and
        what it emitted (its prefill target) and has its output less that left. Paged KV without a prefix cache only (`joinable`), with nothing joined or reserved since
        the pause (a decode pool's), else None. A new object (a deployment keeps it, `LiveKvCurve.add`)."""
        live = self._live
        if live is None or not live[10] or self._joined or self._reserved or self.n != 1:
            return None
        st, kv = self.st, self.kv
        _, num_in_run, first_new, num_free, _, _, _, prefilling, waiting, head, _, _ = live
        left = self._live_left
        if left is None:
            left = self._live_left = fastpath.LiveLeft(self, live)
        prompt, output, R, bs = st.prompt, st.output, st.num_requests, kv.block_size
        # A prefilling request holds the blocks of what it computed, or what admission took up front if more (the whole
        # prompt under watermark admission, the whole request under reserve: `Scheduler.admission_blocks`; a first
        # chunk's own blocks otherwise). Its computed tokens' alone undercounted what a finish frees under those rules,
        # and the lower bound sat above the exact usage (least_kv then routed otherwise than with runs ended)
        admission = self.sched.admission_blocks
        # (a recompute victim pre-empted before the run, or in it by the scheduler: its prefill target is its prompt and
        # the tokens it emitted, and only its output less those is left; its prompt and whole output undercounted what
        # it may free and take, as the others' "emitted nothing yet" in `LiveKvCurve`. The state's: unchanged meanwhile)
        target, left_of = st.prefill_target, lambda r: output.item(r) - st.emitted.item(r)
        others = [(target.item(r), left_of(r), max(-(-c // bs), int(admission(st, r, 1)))) for r, c in prefilling.items()]
        if head < len(waiting):
            others += [(target.item(w % R), left_of(w % R), 0) for w in waiting[head:]]
        others += [(prompt.item(k), output.item(k), 0) for k in range(first_new, self.num_added)]  # (added since)
        num_decoders = num_in_run - len(prefilling) - (len(waiting) - head)
        return LiveKvCurve(st.now_s, self.cfg.limits.max_sim_time_s, self._max_tokens_per_tick(), kv.num_blocks - num_free,
                           num_free, num_decoders, left, others, prompt, output, bs, self.sched.decode_slots)  # fmt: skip

    def horizon_reached(self, now_s: float, num_running_or_waiting: int, next_arrival: int, num_free: int,
                        num_queued: int) -> float:
        """Fast path (fastpath.advance), mid-call: every tick that starts before `now_s` has run and the next
        would start at `now_s` >= `horizon_s`; `num_running_or_waiting` requests are in the batch, the queue or
        swapped out (none swapped in a run that may pause), `num_queued` of them queued or swapped out, slots from
        `next_arrival` on have not arrived, and `num_free` KV blocks are free. The cluster
        (`on_horizon`) may add requests here (arriving by `now_s` at the latest: they join before the next tick,
        as at the start of a step) and returns the new horizon; the run goes on while it is past `now_s`, so a
        router's choice does not end the run of the replica that settled it (issue 13: cost)."""
        if self.on_horizon is not None:
            not_arrived = getattr(self, "num_added", next_arrival) - next_arrival
            self.horizon_s = self.on_horizon(self, now_s, num_running_or_waiting + not_arrived,
                                             (self.kv.num_blocks - num_free) / self.kv.num_blocks, num_queued + not_arrived)
        return self.horizon_s

    def _run_fast(self, run=None) -> bool:
        """fastpath.advance for a cluster instance that may pause (`may_pause`): a run that reaches its horizon after
        a tick at least, with requests running or queued, and that the cluster does not let go on (`horizon_reached`),
        pauses there and keeps its state in the run, not in the arrays (issue 13: cost; a write-back and the next
        call's set-up cost O(running) each); the next `step` resumes it (`run`) with the horizon then. While paused,
        the clock `st.now_s` and `has_work` are the run's, `num_outstanding`, `live_kv_usage` and the bounds read the
        run's counts, and `settle` ends it before anything else reads or changes the state."""
        sent = None if run is None else self._resumed(self.horizon_s)
        if run is None:
            run = fastpath.run_ticks(self)
        try:  # (the run asks `horizon_reached` at its horizons itself, and yields only where it pauses)
            at = run.send(sent)
        except StopIteration as stop:
            return stop.value
        self._paused, self._live, self._live_left = run, at, None
        self.st.now_s = at[0]
        self._bounds_memo = self._kv_live = None
        return True

    def _resumed(self, horizon_s: float) -> tuple:
        """What a paused run is sent when it goes on: the horizon, and what joined it meanwhile (it is not paused
        from then on)."""
        sent = (horizon_s, self._joined, self._reserved)
        self._paused = self._live = None
        self._joined, self._reserved = [], 0
        self._bounds_memo = self._kv_memo = self._kv_live = None
        return sent

    def settle(self) -> None:
        """End a paused fast-path run (its state written back to the arrays); nothing when none is paused."""
        run = self._paused
        if run is not None:
            try:
                run.send(self._resumed(-math.inf))
            except StopIteration:
                pass
            else:  # (a run that is sent a horizon at or before its clock ends)
                raise RuntimeError("a paused fast-path run went on past a horizon behind it")

    @property
    def live_kv_usage(self) -> float:
        """`kv.usage`, of the paused run's state while one is paused."""
        return (self.kv.num_blocks - self.live_counts()[1]) / self.kv.num_blocks

    def num_in_run(self) -> int:
        """Requests running; in a run stopped at its horizon with requests in it, those running or queued in the run: a
        paused run's count (`live_counts`), or, the same count, one that may not pause and ended there (`_ended_in_run`:
        the cluster's unpaused reference), until the next step. What `Deployment._horizon` reads as ticks to come: the
        run admits its queued requests when it goes on (a decode instance's pre-empted requests, recomputed)."""
        if self._live is not None:
            return self._live[1] + len(self._joined)
        st = self.st
        if self._ended_in_run is not None:
            return st.running.size + st.waiting_keys.size
        return st.running.size

    def live_counts(self) -> tuple[int, int]:
        """(requests running, free KV blocks), of the paused run's state while one is paused: its requests running or
        queued (`fastpath.run_ticks`' count), and its free blocks less those reserved since it paused (plus those released)."""
        if self._live is not None:
            return self._live[1] + len(self._joined), self._live[3] - self._reserved
        return self.st.running.size, self.kv.num_free

    def cached_prefix_blocks(self, source: Workload, r: int) -> int:
        """Leading prompt blocks of request r of `source` cached here (0 without prefix caching): the
        score of a cache-aware router (issue 13)."""
        return self.prefix.cached_prefix_blocks(source, r) if self.prefix is not None else 0

    def take_arrivals_externally(self) -> None:
        """Added requests never arrive by themselves: they join only through `inject_prefilled`."""
        self.st.next_arrival = self.st.num_requests
        self.joins_prefilled = True

    def _hand_off(self, ids: np.ndarray, t_end: float) -> None:
        """Prefill pool: requests whose first token was just emitted leave this engine (status FINISHED
        here, finish = first token) but keep their KV blocks until `release` (after the KV transfer)."""
        if not ids.size:
            return
        st = self.st
        self._record_hand_off(ids, t_end)
        if ids.size == 1:  # (alone in the batch, mostly: the empty rest without a comparison)
            r = ids.item(0)
            st.running = st.running[:0] if st.running.size == 1 and st.running.item(0) == r else st.running[st.running != r]
        else:
            st.running = st.running[~isin(st.running, ids)]

    def _record_hand_off(self, ids: np.ndarray, t_end: float) -> None:
        """What a hand-off records of its requests, whether a general step or a fast-path run (`fastpath._hand_off`)
        hands them off: FINISHED here at `t_end`, counted, and listed for the cluster's transfers."""
        st = self.st
        if ids.size == 1:  # (one request at a time, mostly: element writes; same arrays)
            r = ids.item(0)
            st.status[r] = Status.FINISHED
            st.finish_s[r] = t_end
        else:
            st.status[ids] = Status.FINISHED
            st.finish_s[ids] = t_end
        st.num_finished += ids.size
        self.handed_off.append((ids, t_end))

    def _before_cluster_input(self) -> None:
        """What `release`, `reserve` and `inject_prefilled` do first: a paused run that would not take the change ends
        here (`settle`), and so does the unpaused reference's mark of a run ended where it would pause
        (`_ended_in_run`), unless that run would have taken it."""
        if not self._ended_in_run:
            self._ended_in_run = None
        if self._live is not None and not self._live[10]:
            self.settle()

    def release(self, ids: np.ndarray | int) -> None:
        """Free the KV blocks of handed-off requests (their transfer is done; one as an int: the cluster's case). A
        paused run (`fastpath.hands_off`) counts them into its free blocks when it goes on, as `reserve`'s."""
        self._before_cluster_input()
        free = self.kv.num_free
        self.kv.free(ids)
        if self._live is not None:
            self._reserved -= self.kv.num_free - free
        self._bounds_memo = self._kv_memo = self._kv_live = None  # (the state changed without a tick: bounds are recomputed)

    def reserve(self, ids: np.ndarray | int, num_blocks: np.ndarray | int) -> None:
        """Decode pool: hold blocks for incoming KV before the transfer starts (caller checked they are free; one
        request as ints: the cluster's case). (A
        paused run that takes them, `fastpath.run_ticks`' `joinable`, counts them as its free blocks go; else it ends.)"""
        self._before_cluster_input()
        free = self.kv.num_free
        self.kv.grow_to(ids, num_blocks)  # (its held blocks; the free count is the paused run's, written back at its end)
        if self._live is not None:
            self._reserved += free - self.kv.num_free
        self._bounds_memo = self._kv_memo = self._kv_live = None

    def inject_prefilled(self, ids: np.ndarray | int, t_s: float, first_token_s: np.ndarray | float) -> None:
        """Decode pool: requests whose prompt KV has arrived (blocks reserved) join the running batch as
        decodes. `first_token_s` is the user's first token, the prefill side's (first_token_from = prefill): their next
        token's gap counts from it. NaN (first_token_from = decode): none yet; as vLLM's decode instance takes the KV
        (`Scheduler._update_waiting_for_remote_kv`: num_computed_tokens = prompt - 1, the last prompt token computed
        again), each joins as a decoder over its prompt but its last token, nothing emitted, and its first decode tick
        (priced as any decoder's) emits the first token (`_decode_first_tokens`): the decode side emits every output
        token. (One request as an int and a float: the cluster's case.)"""
        st = self.st
        self._before_cluster_input()
        # (the idle row up to t_s is a step's: not once the run stopped or reached a tick cap, where its next step stops
        # it; a stopped instance's clock stays at its stop; and never past limits.max_sim_time_s, as `idle_end_s`: a
        # transfer started before the limit may end after it, and the row then reported simulated time past the limit)
        if not self.has_work and st.now_s < t_s and not self._over and self.ticks_left() > 0:
            self._record_idle(min(t_s, self.cfg.limits.max_sim_time_s))
        if type(ids) is int:  # (element writes of the same values, ~1 us less than six one-element array writes)
            if first_token_s != first_token_s:  # (NaN: no token yet; its prefill target is its context, so it decodes)
                st.computed[ids] = st.prefill_target[ids] = st.prefill_target.item(ids) - 1
                self.tokenless.add(ids)
            else:
                st.computed[ids] = st.prefill_target.item(ids)
                st.emitted[ids] = 1
            st.first_token_s[ids] = st.last_token_s[ids] = first_token_s
            st.first_scheduled_s[ids] = t_s
            st.status[ids] = Status.RUNNING
            if self._live is not None:
                self._joined.append(ids)
            else:
                st.running = np.concatenate([st.running, np.array([ids], dtype=np.int64)])
            self._bounds_memo = self._kv_memo = None
            return
        if np.isnan(first_token_s).any():  # (all or none: one first_token_from per deployment)
            st.prefill_target[ids] -= 1
            self.tokenless.update(ids.tolist())
            st.computed[ids] = st.prefill_target[ids]
        else:
            st.computed[ids] = st.prefill_target[ids]
            st.emitted[ids] = 1
        st.first_token_s[ids] = first_token_s
        st.last_token_s[ids] = first_token_s
        st.first_scheduled_s[ids] = t_s
        st.status[ids] = Status.RUNNING
        if self._live is not None:  # a paused run takes them as decoders when it goes on (fastpath._join_decoders)
            self._joined += ids.tolist()
        else:
            st.running = np.concatenate([st.running, ids])
        self._bounds_memo = self._kv_memo = self._kv_live = None

    # ------------------------------------------------------------------ one tick
    def _advance_tick(self, plan: StepPlan) -> None:
        """Price and apply one planned tick. Decodes (the plan's first `num_decodes` entries) are
        handled as arrays; the few prefill chunks as Python lists."""
        st, kv, n = self.st, self.kv, self.n
        idx, new, D = plan.req_idx, plan.num_new_tokens, plan.num_decodes
        dec = idx[:D]
        pre_arr = idx[D:]
        pre = pre_arr.tolist()
        m = new[D:].tolist()
        c = st.computed[pre_arr].tolist() if pre else []
        target = st.prefill_target[pre_arr].tolist() if pre else []
        dec_ctx = int(st.computed[dec].sum()) if D else 0
        completes = [r for r, mi, ci, ti in zip(pre, m, c, target) if ci + mi >= ti]  # prefill done this tick
        prefill_tokens = sum(m)
        decode_tokens = n * D
        prompt_pairs, prompt_read = sum(mi * ci + mi * (mi + 1) // 2 for mi, ci in zip(m, c)), sum(c)
        pairs = prompt_pairs + n * (dec_ctx + D)
        kv_read = prompt_read + n * dec_ctx
        samples = decode_tokens + len(completes)
        seqs = len(pre) + decode_tokens
        if n > 1 and pre:  # recompute prefills (context past the prompt): each such position is a token of every sample
            more_tokens, more_pairs, more_read, more_seqs = samples_past_prompt(n, m, c, st.prompt[pre_arr].tolist())
            if more_tokens:
                prefill_tokens += more_tokens
                pairs += more_pairs
                kv_read += more_read
                seqs += more_seqs
                samples += (n - 1) * sum(1 for r in completes if st.prefill_target[r] > st.prompt[r])  # each sample's token
        draft_s, gained = 0.0, None
        if self.spec is not None and D:  # verify k+1 positions per decode (n == 1), plus the draft's k steps
            spec, width = self.spec, self.sched.verify_width(D)  # (k+1, or fewer: drafts cut to the token budget)
            decode_tokens, rows, v_pairs, _ = verify_aggregates(width, D, dec_ctx)
            pairs += v_pairs - (dec_ctx + D)
            samples += rows - D
            draft_s = spec.draft_s(D, dec_ctx)
            gained = tokens_emitted(spec.accepted(D), width - 1, st.output[dec] - st.emitted[dec], np.minimum)  # (D,)
        if self.spec is not None and pre:  # the drafter runs over the chunks' tokens too (`Speculator.tick_draft_s`)
            draft_s = self.spec.tick_draft_s(D, dec_ctx, prefill_tokens, prompt_pairs, prompt_read, len(pre))
        swap_bytes = plan.swap_blocks * self.memory.block_bytes
        dur, flops, nbytes, is_comp = self.cost.tick(prefill_tokens + decode_tokens, samples, pairs, kv_read, seqs, swap_bytes)
        dur = float(dur) + draft_s
        t0 = st.now_s
        t_end = t0 + dur

        rec = self.rec
        rec.event(plan.admitted_idx, t0, Event.SCHEDULED)
        if plan.preempted_idx.size or plan.swapped_out_idx.size or plan.swapped_in_idx.size:  # (rare: three calls on
            rec.event(plan.preempted_idx, t0, Event.PREEMPTED)  # empty arrays skipped, the same events in order)
            rec.event(plan.swapped_out_idx, t0, Event.SWAPPED_OUT)
            rec.event(plan.swapped_in_idx, t0, Event.SWAPPED_IN)
            self.num_swap_outs += plan.swapped_out_idx.size

        if rec.wants_batches:  # blocks held during the tick (before completions free them)
            rec.batch(rec.num_ticks, idx, new, plan.is_decode, kv.held[idx])
        if D or len(pre) > FEW_REQUESTS:
            st.computed[idx] += new
        else:  # (a few prefill chunks only: element by element, the same sums)
            computed = st.computed
            for r, ci, mi in zip(pre, c, m):
                computed[r] = ci + mi
        if gained is not None:  # accepted draft tokens: their KV is kept and they are emitted this tick
            accepted = gained - 1
            st.computed[dec] += accepted
            st.emitted[dec] += accepted
            num_emitted = int(gained.sum())
            self.spec.num_steps += D
            self.spec.num_emitted += num_emitted
            self.spec.log_emitted(rec.num_ticks, num_emitted)  # (this tick's row is recorded below)
        if draft_s:  # (a tick with decodes or chunks while speculating; the scalar core adds it where it prices it)
            self.spec.draft_time_s += draft_s
        if D:  # every decoder has emitted before: one gap each (but those with no token yet: their first token)
            gaps = t_end - st.last_token_s[dec]
            has_gap = self._decode_first_tokens(dec, gaps, t_end) if self.tokenless else None
            if has_gap is None:
                rec.itl(gaps)
                st.max_itl_s[dec] = np.maximum(st.max_itl_s[dec], gaps)
            else:
                rec.itl(gaps[has_gap])
                st.max_itl_s[dec[has_gap]] = np.maximum(st.max_itl_s[dec[has_gap]], gaps[has_gap])
        emit = dec
        self._note_kv_peak(kv.num_used)  # (during the tick: its finishing requests free theirs below)
        if pre and self.prefix is not None:  # the full prompt blocks computed so far become reusable (next tick on)
            kv.register(pre_arr, st.computed[pre_arr])
        if completes and not D and len(completes) <= FEW_REQUESTS and all(math.isnan(st.last_token_s[r]) for r in completes):
            self._first_tokens(completes, t_end)  # (a cluster's prefill instance: nearly every tick)
        elif completes:
            comp = np.array(completes, dtype=np.int64)
            last = st.last_token_s[comp]
            is_first = np.isnan(last)
            again = comp[~is_first]  # a recompute prefill: its token follows the one before pre-emption
            if again.size:
                gaps = t_end - last[~is_first]
                rec.itl(gaps)
                st.max_itl_s[again] = np.maximum(st.max_itl_s[again], gaps)
            first = comp[is_first]
            st.first_token_s[first] = t_end
            rec.event(first, t_end, Event.FIRST_TOKEN)
            rec.event(again, t_end, Event.PREFILL_DONE)
            emit = np.concatenate([dec, comp])
        if emit.size:
            st.emitted[emit] += 1
            st.last_token_s[emit] = t_end
            self._finish(emit[st.emitted[emit] >= st.output[emit]], t_end)
            if self.hand_off_prefilled:
                self._hand_off(first[st.status[first] != Status.FINISHED], t_end)

        phase = Phase.SWAP
        if prefill_tokens and decode_tokens:
            phase = Phase.MIXED
        elif prefill_tokens:
            phase = Phase.PREFILL
        elif decode_tokens:
            phase = Phase.DECODE
        rec.tick((t0, dur, phase, prefill_tokens, decode_tokens, len(pre), D, st.running.size,
                  st.waiting_keys.size, st.swapped_keys.size, kv.num_used, float(flops), float(nbytes),
                  int(is_comp), plan.preempted_idx.size + plan.swapped_out_idx.size, plan.swap_blocks,
                  self.sched.batch_cap))  # fmt: skip
        # (the phase controllers count decode throughput in tokens emitted: a verify pass's, not the positions it priced)
        self.sched.observe(t_end, dur, prefill_tokens, decode_tokens if gained is None else num_emitted)
        st.now_s = t_end

    def _decode_first_tokens(self, dec: np.ndarray, gaps: np.ndarray, t_end: float) -> np.ndarray | None:
        """Decoders of a tick ending at `t_end` that joined with no token (`inject_prefilled`, first_token_from =
        decode: their gaps NaN) emit their first token in it: the user's first token, no gap. Returns which of the
        tick's decoders have a gap (None: all)."""
        st = self.st
        # (one pre-empted before its first decode tick re-enters through a recompute prefill: it has its token there)
        self.tokenless.difference_update([r for r in self.tokenless if st.emitted.item(r)])
        first = np.isnan(gaps)
        if not first.any():
            return None
        self.record_decode_first(dec[first], t_end)
        return ~first

    def record_decode_first(self, req: np.ndarray, t_s) -> None:
        """Decoders that joined with no token (`inject_prefilled`, first_token_from = decode) emit the user's first token
        at `t_s` (a time, or one per request): here, and in a fast-path run's write-back."""
        self.st.first_token_s[req] = t_s
        self.rec.event(req, t_s, Event.FIRST_TOKEN)
        ids = req.tolist()
        self.tokenless.difference_update(ids)
        self.first_by_decode += ids

    def _first_tokens(self, done: list[int], t_end: float) -> None:
        """`_advance_tick`'s completions in a tick without decodes whose finished prefills all emit their first
        token (none is a recompute): its array steps element by element for these few requests, in the same
        order (first token, FIRST_TOKEN events, then the finished and the handed off)."""
        st = self.st
        first = np.array(done, dtype=np.int64)
        first_s, last_s, emitted, output = st.first_token_s, st.last_token_s, st.emitted, st.output
        finished = []
        for r in done:
            first_s[r] = t_end
            last_s[r] = t_end
            emitted[r] += 1
            if emitted[r] >= output[r]:
                finished.append(r)
        self.rec.event(first, t_end, Event.FIRST_TOKEN)
        if finished:
            self._finish(np.array(finished, dtype=np.int64), t_end)
        if self.hand_off_prefilled:
            # (none finished: `first` itself; the recorder and the cluster's hand-off only read it, never write)
            self._hand_off(first[st.status[first] != Status.FINISHED] if finished else first, t_end)

    def _finish(self, done: np.ndarray, t_end) -> None:
        if not done.size:
            return
        st = self.st
        st.status[done] = Status.FINISHED
        st.finish_s[done] = t_end
        self.free_finished(done)
        st.running = st.running[st.status[st.running] != Status.FINISHED]
        st.num_finished += done.size
        self.rec.event(done, t_end, Event.FINISHED)
        if self.workload.closed_loop_think_s is not None:
            st.release_closed_loop(float(np.max(t_end)), done.size, self.workload.closed_loop_think_s)
        elif self.workload.next_turn is not None:
            st.release_next_turns(done, t_end)

    def free_finished(self, done: np.ndarray) -> None:
        """The KV of finished requests goes (`_finish`'s, and the batch-of-one chain's at each service's end)."""
        if self.prefix is not None and self.prefix.cache_replies:  # their replies are cached: KV exists for the
            st = self.st
            self.kv.finish(done, st.prompt[done] + st.output[done] - 1)  # prompt and all but the last output token
        else:
            self.kv.free(done)

    # ------------------------------------------------------------------ coalesced runs
    def _is_repeatable(self, plan: StepPlan) -> bool:
        return (
            plan.req_idx.size > 0
            and plan.swap_blocks == 0
            and plan.req_idx.size == self.sched.num_decodes  # every decoder; prefills (if any) left idle
            and not plan.changes_membership
            and bool(plan.is_decode.all())
        )

    def _advance_pure_decode(self) -> bool:
        """With no prefill work (every running request decodes, nothing is swapped, and nothing waits or
        nothing may join: a full or static batch), every policy's plan is "all running decode" in
        running order (nothing else can be scheduled), so skip planning and run. Returns False
        (nothing done) when the run cannot take even two ticks."""
        st = self.st
        running = st.running
        if st.swapped_keys.size or not running.size:
            return False
        if st.waiting_keys.size and self.sched.prefill_work(running.size, running.size, st.waiting_keys.size, 0)[1]:
            return False
        if np.any(st.computed[running] < st.prefill_target[running]):
            return False
        plan = StepPlan(req_idx=running, num_new_tokens=np.ones(running.size, dtype=np.int64),
                        is_decode=np.ones(running.size, dtype=bool), num_decodes=running.size)  # fmt: skip
        return self._advance_run(plan, planned=False)

    def _run_limits(self, remaining: np.ndarray, num_idle: int, num_waiting: int, num_swapped: int) -> tuple[bool, bool, int, float]:
        """What bounds a run of an all-decode plan whose decoders have `remaining` tokens left (plain or speculative):
        (shrink_ok: a finished decoder just leaves the batch, nothing could take its place; arrivals_matter: an arrival
        could be admitted before the run ends; k_max: most ticks; nxt: the next event, s)."""
        st, sched = self.st, self.sched
        # Prefix caching (issue 12): a run stops at the first completion and before any eviction, so the
        # cache's releases and evictions happen at the ticks they would tick by tick.
        shrink_ok = not self.workload.releases_on_finish and num_idle == 0 and self.prefix is None and (
            sched.is_static or (num_waiting == 0 and num_swapped == 0)
        )
        # The batch is full and cannot shrink during the run: nothing that arrives can be admitted.
        cap_full = not shrink_ok and st.running.size >= sched.batch_cap
        arrivals_matter = not (sched.is_static or cap_full or (sched.is_fcfs and num_waiting > 0))
        k_max = int(remaining.max()) if shrink_ok else int(remaining.min())
        k_max = min(k_max, self.ticks_left(), MAX_RUN_TICKS, max(MAX_RUN_CELLS // remaining.size, 2))
        # the cluster's horizon (hook) always bounds a run: another engine's hand-off may arrive then
        nxt = min(st.next_arrival_s() if arrivals_matter else math.inf, self.horizon_s, self.cfg.limits.max_sim_time_s)
        return shrink_ok, arrivals_matter, k_max, nxt

    def _advance_run(self, plan: StepPlan, planned: bool = True) -> bool:
        """Repeat an all-decode plan for as many ticks as the scheduler would plan it again.
        Bit-identical to calling `_advance_tick` for each: the cost model gets the same integer
        aggregates and times accumulate in the same order.

        NOTE: the batch evolves by rule (one token per decoder per tick, a block when the context
        crosses a block boundary, a finish at a known tick), so only these events can change the next
        plan, and the run stops before each unless it provably cannot:
          * a block shortage (pre-emption is the scheduler's);
          * a completion, unless nothing waits or is swapped (or the batch is static): then the
            finished request just leaves the batch;
          * an arrival, unless it cannot be admitted before the run ends: a static batch, a full
            batch that cannot shrink, or FCFS with a non-empty queue whose head was not admitted by
            this plan (arrivals join the tail);
          * a policy decision: the scheduler's phase controller and batch-cap rule are consulted tick
            by tick (`Scheduler.repeat_decodes`, the same `choose`/`observe` as single ticks);
          * the guards (max_ticks, max_sim_time_s).
        """
        if self.tokenless and np.isnan(self.st.last_token_s[plan.req_idx]).any():
            return self._fallback(plan, planned)  # a decoder's first token (`_decode_first_tokens`): tick by tick
        if self.spec is not None:
            return self._advance_spec_run(plan, planned)
        st, kv, n, sched = self.st, self.kv, self.n, self.sched
        idx = plan.req_idx
        B = idx.size
        ctx0 = st.computed[idx]  # (B,)
        remaining = st.output[idx] - st.emitted[idx]  # (B,) ticks until each finishes (>= 1)
        num_waiting0, num_swapped = st.waiting_keys.size, st.swapped_keys.size
        num_idle = st.running.size - B  # prefills left out of the plan: a freed block could let them run
        shrink_ok, arrivals_matter, k_max, nxt = self._run_limits(remaining, num_idle, num_waiting0, num_swapped)
        rem_min = int(remaining.min())
        tick_scalar = self.cost._tick_scalar
        S0 = int(ctx0.sum())
        memo = self._run_prices.get((B, S0))  # this batch's run was priced before (one request at a time)
        if nxt < math.inf:  # price only about as many ticks as fit before the next event
            # exactly tick 0's price (the array and scalar prices agree bit for bit)
            first_s = float(memo[0][0]) if memo is not None else tick_scalar(n * B, n * B, n * (S0 + B), n * S0, n * B)[0]
            if st.now_s + first_s >= nxt:  # the next event comes before tick 1 would start
                return self._fallback(plan, planned)
            k_max = min(k_max, int((nxt - st.now_s) / (0.8 * first_s)) + 2)
        if k_max <= 1:
            return self._fallback(plan, planned)
        j = np.arange(k_max)  # (k,)
        if k_max <= rem_min:  # nobody finishes before the last priced tick: no (B, k) mask needed
            alive = None
            num_alive = np.full(k_max, B, dtype=np.int64)
            if memo is not None and memo[0].size >= k_max:
                dur, flops, nbytes, is_comp = (col[:k_max] for col in memo)  # read only below
            else:
                dur, flops, nbytes, is_comp = prices = self._price_run(num_alive, S0 + j * B)
                self._memo_run_prices((B, S0), prices)
        else:
            alive = remaining[:, None] > j[None, :]  # (B, k) still decoding at tick j
            num_alive = alive.sum(axis=0)  # (k,)
            dur, flops, nbytes, is_comp = self._price_run(num_alive, ctx0 @ alive + j * num_alive)  # exact integers
        times = np.add.accumulate(np.concatenate(([st.now_s], dur)))  # sequential: same rounding as tick by tick
        starts, ends = times[:-1], times[1:]
        k = min(k_max, int(np.searchsorted(starts[1:], nxt, side="left")) + 1)  # ticks starting before the next event
        # Blocks held during tick j by the requests still running; stop before the cache would overflow.
        held = kv.held[idx]
        prompt = st.prompt[idx][:, None] if n > 1 else None  # (only the n > 1 layout depends on it)
        blocks = np.maximum(kv.blocks_for(ctx0[:, None] + (1 + j[:k]), prompt), held[:, None])  # (B, k)
        other = kv.num_used - int(held.sum())
        need = other + (blocks.sum(axis=0) if alive is None else (blocks * alive[:, :k]).sum(axis=0))  # (k,)
        limit = kv.num_blocks - (self.prefix.num_evictable if self.prefix is not None else 0)
        over = np.flatnonzero(need > limit)  # not monotone: completions free blocks mid-run
        if over.size:
            k = min(k, int(over[0]))
        if k <= 1:
            return self._fallback(plan, planned)
        # Arrivals during the run join the waiting queue at the start of the tick they precede.
        arrived = st.num_arrived_by(starts[:k]) if not arrivals_matter else 0  # (k,) or 0
        caps = np.full(k, sched.batch_cap, dtype=np.int64)
        k = sched.repeat_decodes(st, planned, starts[:k], ends[:k], dur[:k], n * num_alive[:k], num_alive[:k],
                                 num_waiting0 + arrived, caps)  # fmt: skip
        if k == 0:
            return False
        num_alive, blocks = num_alive[:k], blocks[:, :k]
        starts, ends, dur, caps = starts[:k], ends[:k], dur[:k], caps[:k]
        rec = self.rec

        # Inter-token gaps: the first tick against each request's previous token, then tick to tick.
        gap0 = ends[0] - st.last_token_s[idx]
        step_gaps = np.diff(ends)  # (k-1,)
        done = remaining <= k
        if self.prefix is not None:  # completions (and cache releases) belong to the run's last tick
            self.prefix.tick_offset = k - 1
        if alive is None:  # everyone runs all k ticks (some finish in the last)
            rec.itl(np.concatenate([gap0, step_gaps if B == 1 else np.repeat(step_gaps, B)]))
            st.max_itl_s[idx] = np.maximum(st.max_itl_s[idx], np.maximum(gap0, step_gaps.max(initial=-np.inf)))
            st.computed[idx] += k
            st.emitted[idx] += k
            last_end = float(ends[-1])
            st.last_token_s[idx] = last_end
            kv.grow_to(idx, blocks[:, k - 1])
            after = num_idle + np.concatenate((num_alive[1:], [B - int(done.sum())]))  # (k,) running after tick j
            used = other + blocks.sum(axis=0)
            self._note_kv_peak(int(used[-1]))  # (the last tick's, its finishing requests' blocks included)
            self._finish(idx[done], last_end)
        else:
            alive = alive[:, :k]
            steps = np.minimum(remaining, k)  # (B,) ticks each request runs in this run
            last_end = ends[steps - 1]  # (B,) time of each request's last token in the run
            rec.itl(np.concatenate([gap0, np.repeat(step_gaps, num_alive[1:])]))
            prefix_max = np.concatenate(([-np.inf], np.maximum.accumulate(step_gaps)))  # (k,) max gap up to tick j
            st.max_itl_s[idx] = np.maximum(st.max_itl_s[idx], np.maximum(gap0, prefix_max[steps - 1]))
            st.computed[idx] += steps
            st.emitted[idx] += steps
            st.last_token_s[idx] = last_end
            kv.grow_to(idx, blocks[np.arange(B), steps - 1])
            # Rows are recorded after each tick's completions, as single ticks are.
            after = num_idle + np.concatenate((num_alive[1:], [B - int(done.sum())]))  # (k,) running after tick j
            used = other + np.concatenate(((blocks[:, :-1] * alive[:, 1:]).sum(axis=0), [0]))
            self._note_kv_peak(int((other + (blocks * alive).sum(axis=0)).max()))  # (during each tick: finishing ones in)
            self._finish(idx[done], last_end[done])
        self._end_decode_run(k, idx, blocks, alive, starts, ends, num_waiting0, arrived, arrivals_matter, used, {
            "duration_s": dur, "num_decode_tokens": n * num_alive, "num_decode_seqs": num_alive, "num_running": after,
            "num_swapped": num_swapped, "flops": flops[:k], "bytes": nbytes[:k], "is_compute_bound": is_comp[:k],
            "batch_cap": caps})  # fmt: skip
        return True

    def _end_decode_run(self, k, idx, blocks, alive, starts, ends, num_waiting0, arrived, arrivals_matter, used, cols):
        """What a coalesced decode run (plain or speculative) does last: the prefix cache's tick offset back to 0, the
        last row's KV in use as the cache holds it, the batch log and waiting column (`_log_run`), its k rows (`cols`:
        the columns the two runs compute differently) and the clock at its last tick's end."""
        if self.prefix is not None:
            self.prefix.tick_offset = 0
        used[-1] = self.kv.num_used
        num_waiting = self._log_run(k, idx, blocks, alive, starts, num_waiting0, arrived, arrivals_matter)
        self.rec.ticks({"t_start_s": starts, "phase": Phase.DECODE, "num_prefill_tokens": 0, "num_prefill_seqs": 0,
                        "num_waiting": num_waiting, "kv_blocks_used": used, "num_preempted": 0, "swap_blocks": 0,
                        **cols}, k)  # fmt: skip
        self.st.now_s = float(ends[-1])

    def _log_run(self, k, idx, blocks, alive, starts, num_waiting0, arrived, arrivals_matter):
        """A decode run's batch log (request, one token, its blocks; `alive` masks who is still decoding, None: everyone,
        the whole run) and its waiting-queue column; arrivals that could not change the run join the queue."""
        st, rec, B = self.st, self.rec, idx.size
        if rec.wants_batches:
            m = min(k, self.cfg.limits.num_recorded_batches - rec.num_ticks)
            if alive is None:
                t_idx, b_idx = np.repeat(np.arange(m), B), np.tile(np.arange(B), m)
            else:
                t_idx, b_idx = np.nonzero(alive[:, :m].T)  # (entries,) tick-major, batch order within a tick
            rec.batch(rec.num_ticks + t_idx, idx[b_idx], np.ones(t_idx.size, dtype=np.int64),
                      np.ones(t_idx.size, dtype=bool), blocks[b_idx, t_idx])  # fmt: skip
        if arrivals_matter:
            return num_waiting0
        st.admit_arrivals(float(starts[-1]))
        return num_waiting0 + arrived[:k]

    def _price_run(self, num_alive: np.ndarray, ctx_alive: np.ndarray) -> tuple:
        """The cost model's (duration, flops, bytes, compute-bound) of each tick of a decode run."""
        n = self.n
        tokens = n * num_alive
        if num_alive.size <= SCALAR_PRICING_TICKS:  # a few ticks: the scalar cost function is cheaper than arrays
            tick_scalar = self.cost._tick_scalar
            priced = [tick_scalar(t, t, n * (c + a), n * c, t) for t, a, c in
                      zip(tokens.tolist(), num_alive.tolist(), ctx_alive.tolist())]  # fmt: skip
            return tuple(np.array(col) for col in zip(*priced))
        return self.cost.tick(tokens, tokens, n * (ctx_alive + num_alive), n * ctx_alive, tokens)

    def _memo_run_prices(self, key: tuple[int, int], prices: tuple) -> None:
        """Keep the prices of a run in which nobody finishes early, by (batch size, total context):
        they are a pure function of those (tick j prices B decodes over S0 + j·B cached tokens), and
        a batch of one request after another repeats the same run. Bounded in bytes."""
        size = sum(col.nbytes for col in prices)
        old = self._run_prices.pop(key, None)
        if old is not None:
            self._run_prices_bytes -= sum(col.nbytes for col in old)
        if self._run_prices_bytes + size > RUN_PRICE_CACHE_BYTES:
            self._run_prices.clear()
            self._run_prices_bytes = 0
        self._run_prices[key] = prices
        self._run_prices_bytes += size

    def _advance_spec_run(self, plan: StepPlan, planned: bool) -> bool:
        """`_advance_run` with speculative decoding: repeat the all-decode plan while the scheduler
        would plan it again, past completions when a finished request just leaves the batch (the same
        rule as `_advance_run`'s), else up to (and including) the first completion. Bit-identical to
        `_advance_tick` per tick.

        NOTE: tick j of the run uses the acceptance draws tick-by-tick stepping would: the draws are
        one stream of uniforms consumed num_decodes x k per tick, in batch order. The run looks ahead
        at the stream (`Speculator.upcoming`, k_max x B sequence-steps: enough for any k_max ticks),
        walks it tick by tick (`_spec_walk_scalar`, in Python ints, for a small run; else `_spec_walk_arrays`, in
        segments between completions: a segment's decoders take the next B_s steps of each of its ticks), each
        decoder's tokens by the one acceptance rule (`speculative.tokens_emitted`), finds where the run must stop (the
        next event, a block shortage, the scheduler's per-tick rules), then uses exactly the steps of
        the ticks it ran (`Speculator.use`). A decoder's context before tick j is its context before
        the run plus what it emitted in the run's earlier ticks; its blocks are those for that context
        plus the k+1 verified positions and the draft's k lookahead slots (`Scheduler.decode_slots`),
        never fewer than it holds.
        """
        st, kv, n, sched, spec, rec = self.st, self.kv, self.n, self.sched, self.spec, self.rec
        idx = plan.req_idx
        B = idx.size
        ctx0 = st.computed[idx]  # (B,)
        remaining = st.output[idx] - st.emitted[idx]  # (B,) tokens left (>= 1)
        num_waiting0, num_swapped = st.waiting_keys.size, st.swapped_keys.size
        num_idle = st.running.size - B
        # (every tick emits at least a token per decoder: k_max bounds a speculative run's ticks too)
        shrink_ok, arrivals_matter, k_max, nxt = self._run_limits(remaining, num_idle, num_waiting0, num_swapped)
        if nxt < math.inf:  # price only about as many ticks as fit before the next event
            c0 = int(ctx0.sum())
            first_s = self.cost._tick_scalar(n * B, n * B, n * (c0 + B), n * c0, n * B)[0]  # a plain decode tick
            if st.now_s + first_s >= nxt:  # tick 0 verifies more and drafts: tick 1 starts at or after the event
                return self._fallback(plan, planned)
            k_max = min(k_max, int((nxt - st.now_s) / (0.8 * first_s)) + 2)
        if k_max <= 1:
            return self._fallback(plan, planned)
        if B * k_max <= SCALAR_WALK_CELLS:  # a small run: tick by tick in Python ints and floats
            walked = self._spec_walk_scalar(ctx0, remaining, k_max, shrink_ok, nxt)
        else:
            walked = self._spec_walk_arrays(ctx0, remaining, k_max, shrink_ok)
        gained, steps, num_alive, dec_ctx, decode_tokens, dur, flops, nbytes, is_comp, draft = walked
        k_run = num_alive.size
        if k_run <= 1:  # a single tick (the draws it looked at are drawn again there)
            return self._fallback(plan, planned)
        # who decodes in tick j (None: everyone, in every tick), and each decoder's context before it
        alive = None if int(steps.min()) >= k_run else np.arange(k_run)[None, :] < steps[:, None]  # (B, k)
        ctx = ctx0[:, None] + (np.cumsum(gained, axis=1) - gained)  # (B, k)
        times = np.add.accumulate(np.concatenate(([st.now_s], dur)))  # sequential: same rounding as tick by tick
        starts, ends = times[:-1], times[1:]
        k = min(k_run, int(np.searchsorted(starts[1:], nxt, side="left")) + 1)
        held = kv.held[idx]
        blocks = np.maximum(kv.blocks_for(ctx[:, :k] + sched.decode_slots, None), held[:, None])  # (B, k) during tick j
        other = kv.num_used - int(held.sum())
        need = other + (blocks.sum(axis=0) if alive is None else (blocks * alive[:, :k]).sum(axis=0))  # (k,)
        limit = kv.num_blocks - (self.prefix.num_evictable if self.prefix is not None else 0)
        over = np.flatnonzero(need > limit)  # (not monotone once completions free blocks)
        if over.size:
            k = min(k, int(over[0]))
        if k <= 1:
            return self._fallback(plan, planned)
        arrived = st.num_arrived_by(starts[:k]) if not arrivals_matter else 0
        caps = np.full(k, sched.batch_cap, dtype=np.int64)
        emitted_by_tick = gained.sum(axis=0)  # (k,) tokens the decodes of each tick emit
        k = sched.repeat_decodes(st, planned, starts[:k], ends[:k], dur[:k], emitted_by_tick[:k], num_alive[:k],
                                 num_waiting0 + arrived, caps)  # fmt: skip
        if k == 0:
            return False
        num_alive, gained, blocks = num_alive[:k], gained[:, :k], blocks[:, :k]
        starts, ends, dur, caps = starts[:k], ends[:k], dur[:k], caps[:k]
        spec.use(int(num_alive.sum()))  # the sequence-steps of the ticks run
        total = gained.sum(axis=1)  # (B,)
        spec.num_steps += int(num_alive.sum())
        spec.num_emitted += int(total.sum())
        spec.log_emitted(rec.num_ticks, emitted_by_tick[:k])  # (these k ticks' rows are recorded below)
        for d in draft[:k].tolist():  # accumulated tick by tick, as single ticks do
            spec.draft_time_s += d
        gap0 = ends[0] - st.last_token_s[idx]
        step_gaps = np.diff(ends)
        st.computed[idx] += total
        st.emitted[idx] += total
        if self.prefix is not None:  # completions (and cache releases) belong to the run's last tick (no shrinking)
            self.prefix.tick_offset = k - 1
        if alive is None or int(steps.min()) >= k:  # everyone decodes in all k ticks (some finish in the last)
            rec.itl(np.concatenate([gap0, np.repeat(step_gaps, B)]))
            st.max_itl_s[idx] = np.maximum(st.max_itl_s[idx], np.maximum(gap0, step_gaps.max(initial=-np.inf)))
            last_end = float(ends[-1])
            kv.grow_to(idx, blocks[:, k - 1])
            used = other + blocks.sum(axis=0)
            self._note_kv_peak(int(used[-1]))  # (the last tick's, its finishing requests' blocks included)
            after = np.full(k, num_idle + B)
            alive = None
        else:  # finished decoders left the batch: each ran its first `steps` ticks
            alive, steps = alive[:, :k], np.minimum(steps, k)
            rec.itl(np.concatenate([gap0, np.repeat(step_gaps, num_alive[1:])]))  # tick by tick, in batch order
            prefix_max = np.concatenate(([-np.inf], np.maximum.accumulate(step_gaps)))  # (k,) max gap up to tick j
            st.max_itl_s[idx] = np.maximum(st.max_itl_s[idx], np.maximum(gap0, prefix_max[steps - 1]))
            last_end = ends[steps - 1]  # (B,) time of each decoder's last token in the run
            kv.grow_to(idx, blocks[np.arange(B), steps - 1])
            # Rows are recorded after each tick's completions, as single ticks are.
            used = other + np.concatenate(((blocks[:, :-1] * alive[:, 1:]).sum(axis=0), [0]))
            self._note_kv_peak(int((other + (blocks * alive).sum(axis=0)).max()))  # (during each tick: finishing ones in)
            after = num_idle + np.concatenate((num_alive[1:], [0]))
        st.last_token_s[idx] = last_end
        done = st.emitted[idx] >= st.output[idx]
        self._finish(idx[done], last_end if np.ndim(last_end) == 0 else last_end[done])
        after[-1] = st.running.size
        self._end_decode_run(k, idx, blocks, alive, starts, ends, num_waiting0, arrived, arrivals_matter, used, {
            "duration_s": dur, "num_decode_tokens": decode_tokens[:k], "num_decode_seqs": num_alive,
            "num_running": after, "num_swapped": num_swapped, "flops": flops[:k], "bytes": nbytes[:k],
            "is_compute_bound": is_comp[:k], "batch_cap": caps})  # fmt: skip
        return True

    def _spec_price(self, num_alive: np.ndarray, dec_ctx: np.ndarray, width: np.ndarray) -> tuple:
        """A speculative run's ticks priced as `_advance_tick` prices an all-decode tick whose verify pass replaces the
        plain decode (`verify_aggregates`), plus the draft's steps (`Speculator.draft_s`): (decode tokens, durations
        with the draft's, flops, bytes, compute-bound, draft seconds), each (k,), from the decoders (k,), their context
        (k,) and the verify width (k,) of each tick."""
        if num_alive.size <= SCALAR_PRICING_TICKS:  # a few ticks: the scalar cost function is cheaper than arrays
            priced = map(self._spec_tick_price, num_alive.tolist(), dec_ctx.tolist(), width.tolist())
            return tuple(np.array(col) for col in zip(*priced))
        n = self.n
        decode_tokens, rows, v_pairs, _ = verify_aggregates(width, num_alive, dec_ctx)  # (k,) each
        pairs = n * (dec_ctx + num_alive) + v_pairs - (dec_ctx + num_alive)
        samples = n * num_alive + rows - num_alive
        dur, flops, nbytes, is_comp = self.cost.tick(decode_tokens, samples, pairs, n * dec_ctx, n * num_alive, 0.0)
        draft = self.spec.draft_s(num_alive, dec_ctx)  # (k,)
        return decode_tokens, dur + draft, flops, nbytes, is_comp, draft

    def _spec_tick_price(self, num_seqs: int, context_tokens: int, width: int) -> tuple:
        """`_spec_price` of one tick in Python ints and floats (the cost model's scalar path: bit for bit its array
        path)."""
        n = self.n
        decode_tokens, rows, v_pairs, _ = verify_aggregates(width, num_seqs, context_tokens)
        pairs = n * (context_tokens + num_seqs) + v_pairs - (context_tokens + num_seqs)
        dur, flops, nbytes, is_comp = self.cost._tick_scalar(decode_tokens, n * num_seqs + rows - num_seqs, pairs,
                                                             n * context_tokens, n * num_seqs, 0.0)  # fmt: skip
        draft = self.spec.draft_s(num_seqs, context_tokens)
        return decode_tokens, dur + draft, flops, nbytes, is_comp, draft

    def _spec_walk_arrays(self, ctx0: np.ndarray, remaining: np.ndarray, k_max: int, shrink_ok: bool) -> tuple:
        """Tokens each of a run's decoders (`remaining` tokens left each) emits in each of up to `k_max` ticks, from
        the acceptance draws ahead: tick j takes the next num_alive[j] sequence-steps of the stream, one per decoder
        still running, in batch order, each emitting `tokens_emitted` of its step (cut to the tick's verify width and
        to the tokens it has left); it leaves the batch after its last token. The walk goes in segments between
        completions (whole arrays per segment) and stops after the first completion unless `shrink_ok`, or when every
        decoder has finished. Then the ticks are priced (`_spec_price`).

        Returns (gained (B, k), ticks each decoder runs (B,) (its finishing tick + 1, or k), decoders (k,), their
        context (k,), then `_spec_price`'s columns), k <= k_max. The draws are only looked at
        (`Speculator.upcoming`)."""
        B = remaining.size
        lead = self.spec.upcoming(k_max * B)  # enough for k_max ticks of the whole batch
        segments = []  # (decoders: positions in the batch, their gains (ticks, decoders), verify width)
        running, left = np.arange(B), remaining  # the decoders still running, and their tokens left
        t = used = 0  # ticks walked; sequence-steps they took
        while t < k_max and running.size:
            b = running.size
            w = self.sched.verify_width(b)  # (fewer decoders: never narrower)
            span = min(k_max - t, int(left.min()))  # (a tick emits >= 1 token: someone finishes by then)
            a = lead[used : used + span * b].reshape(span, b)  # (span, b) tick-major, batch order
            # each tick's tokens by the rule, cut to the tokens left before the segment: that changes no tick before a
            # decoder's last (a tick then emits fewer than are left), so their running sum says where each finishes;
            # its last tick is cut to what the earlier ones left below, once for the run
            g = tokens_emitted(a, w - 1, left, np.minimum)
            emitted = np.cumsum(g, axis=0)  # (span, b) up to each tick's end
            ticks_before = (emitted < left).sum(axis=0)  # (b,) ticks each runs before its finishing one (or span)
            first = int(ticks_before.min())  # the first completion's tick in the segment (span: none)
            e = min(first + 1, span)
            segments.append((running, g[:e], w, a[:e]))
            t, used = t + e, used + e * b
            if first == span or not shrink_ok:
                break
            going = ticks_before > first
            left, running = (left - emitted[first])[going], running[going]
        gained, accepted = np.zeros((B, t), dtype=np.int64), np.zeros((B, t), dtype=np.int64)
        at = 0
        for dec, g, _, a in segments:
            gained[dec, at : at + g.shape[0]] = g.T
            accepted[dec, at : at + g.shape[0]] = a.T
            at += g.shape[0]
        lengths = [g.shape[0] for _, g, _, _ in segments]
        num_alive = np.repeat([dec.size for dec, _, _, _ in segments], lengths)
        width = np.repeat([w for _, _, w, _ in segments], lengths)
        steps = np.count_nonzero(gained, axis=1)  # (every tick run emits >= 1)
        # each decoder's last tick in the run by the rule with the tokens the earlier ones left (a finishing one's cut)
        on_last, last = np.arange(B), steps - 1
        before = gained.sum(axis=1) - gained[on_last, last]
        gained[on_last, last] = tokens_emitted(accepted[on_last, last], width[last] - 1, remaining - before, np.minimum)
        alive = None if int(steps.min()) >= t else np.arange(t)[None, :] < steps[:, None]  # (B, k)
        ctx = ctx0[:, None] + (np.cumsum(gained, axis=1) - gained)  # (B, k) each decoder's context before tick j
        dec_ctx = ctx.sum(axis=0) if alive is None else (ctx * alive).sum(axis=0)  # (k,)
        return gained, steps, num_alive, dec_ctx, *self._spec_price(num_alive, dec_ctx, width)

    def _spec_walk_scalar(self, ctx0: np.ndarray, remaining: np.ndarray, k_max: int, shrink_ok: bool, nxt: float) -> tuple:
        """`_spec_walk_arrays` tick by tick in Python ints (a small run: `SCALAR_WALK_CELLS`), the same draws in the
        same order and the same rule (`tokens_emitted`), each tick priced as it is walked (`_spec_price` on that tick)
        and the walk stopped before a tick that starts at or after the next event `nxt` (which `_advance_spec_run`
        would cut anyway). Returns `_spec_walk_arrays`' tuple."""
        spec, verify_width, tick_price = self.spec, self.sched.verify_width, self._spec_tick_price
        B = remaining.size
        lead = spec.upcoming(k_max * B)
        ctx, left = ctx0.tolist(), remaining.tolist()
        going = list(range(B))  # the decoders still running: positions in the batch, in batch order
        steps = [0] * B
        gains: list[list[int]] = []  # (k, B) each tick's tokens per decoder (0: not running)
        num_alive, dec_ctx, ticks = [], [], []
        t_s, used = self.st.now_s, 0
        for j in range(k_max):
            b = len(going)
            w = verify_width(b)
            c = 0
            for i in going:
                c += ctx[i]
            priced = tick_price(b, c, w)
            num_alive.append(b)
            dec_ctx.append(c)
            ticks.append(priced)
            row = [0] * B
            finished = False
            for i, a in zip(going, lead[used : used + b].tolist()):
                g = tokens_emitted(a, w - 1, left[i])
                row[i] = g
                ctx[i] += g
                left[i] -= g
                steps[i] = j + 1
                finished = finished or not left[i]
            gains.append(row)
            used += b
            t_s += priced[1]
            if finished:
                if not shrink_ok:
                    break
                going = [i for i in going if left[i]]
                if not going:
                    break
            if t_s >= nxt:  # the next tick would start at or after the next event
                break
        gained = np.array(gains, dtype=np.int64).T
        cols = [np.array(col) for col in zip(*ticks)]
        return (gained, np.array(steps, dtype=np.int64), np.array(num_alive, dtype=np.int64),
                np.array(dec_ctx, dtype=np.int64), *cols)  # fmt: skip

    def _fallback(self, plan: StepPlan, planned: bool) -> bool:
        if planned:  # the plan came from the scheduler (blocks for tick 0 allocated): run it alone
            self._advance_tick(plan)
        return planned

    # ------------------------------------------------------------------ result
    def _check(self) -> None:
        st = self.st
        self.kv.check_invariants()
        if np.any(st.computed > st.prefill_target + st.output):
            raise RuntimeError("computed tokens exceed the request length")
        running = st.running
        if running.size > self.sched.max_seqs:  # (the server's budget on recorded rows relies on it: BudgetMeter)
            raise RuntimeError("more requests run than the batch may hold (scheduler.max_num_seqs)")
        if np.any(self.kv.held[running] < self.kv.blocks_for(st.computed[running], st.prompt[running])):
            raise RuntimeError("a running request holds fewer blocks than its context needs")
        if np.any(st.arrival_s[running] > st.now_s):
            raise RuntimeError("a request runs before it arrives")
        if np.any(st.emitted > st.output):
            raise RuntimeError("a request emitted more tokens than its output length")

    def result(self, keep_all_gaps: bool = False) -> SimResult:
        """The result of the run so far (call once, after `step()` returned False).

        keep_all_gaps: when the result keeps a sample of the inter-token gaps, leave every gap (an array, or `Runs`) in
        `self.all_itl_gaps` (a deployment's ITL percentiles are over all its instances' gaps; it takes them back)."""
        st = self.st
        if self.stopped_reason and not st.is_done:
            self.stopped_reason += unfinished_reason(st.status, st.arrival_s, st.now_s)
        timeline, events, gaps, batches = self.rec.finish(gaps_as_runs=True)
        wl = self.workload
        req = RequestTable(
            arrival_s=st.arrival_s, prompt_tokens=st.prompt, output_tokens=st.output, num_emitted=st.emitted,
            priority=st.priority, class_idx=wl.class_idx, status=st.status, first_scheduled_s=st.first_scheduled_s,
            first_token_s=st.first_token_s, finish_s=st.finish_s, num_preemptions=st.num_preemptions,
            num_recomputed_tokens=st.num_recomputed, max_itl_s=st.max_itl_s,
        )  # fmt: skip
        # Percentiles use every gap; the result keeps them all, or an even stride over them for drawing. Runs of
        # many gaps each (the scalar core's) are never expanded beyond that: a 100k-request run holds 20M gaps.
        itl = gaps.expand() if gaps.is_dense else gaps
        if itl.size <= MAX_ITL_STORED:
            kept = itl if gaps.is_dense else itl.expand()
        elif gaps.is_dense:
            kept = itl[np.linspace(0, itl.size - 1, MAX_ITL_STORED).astype(np.int64)]
        else:
            kept = itl.stride_sample(MAX_ITL_STORED)  # the same gaps, without 32 MB of positions
        if keep_all_gaps and kept is not itl:
            self.all_itl_gaps = itl  # (before summarize, which may reorder it: order does not change a percentile)
        if self.spec is not None:  # what the verify ticks emitted (their decode tokens are the positions verified)
            timeline = Timeline(dict(timeline.columns, num_decode_emitted=self.spec.emitted_column(timeline.num_ticks)))
        summary = summarize(self.cfg, req, timeline, itl, self.memory, self.num_swap_outs, self.stopped_reason,
                            itl_is_scratch=gaps.is_dense and kept is not itl, events=events,
                            kv_peak_blocks=self.kv_peak_in_tick_blocks,
                            first_by_decode=np.array(self.first_by_decode, dtype=np.int64))  # fmt: skip
        summary, timeline = _traffic_extras(self, summary, timeline)
        return SimResult(self.cfg, self.memory, req, timeline, events, kept, batches, summary, itl_gaps_total=int(itl.size))


def samples_past_prompt(n: int, chunks: list[int], computed: list[int], prompts: list[int]) -> tuple[int, int, int, int]:
    """The work a tick's prefill chunks add for the other n - 1 samples of their requests: (tokens, attention pairs,
    KV tokens read, sequences). A chunk's positions past the prompt (`rules.positions_past_prompt`: a recompute
    prefill's) are computed once per sample, each attending over its own context like a decode (the prompt is one
    sequence: its blocks are shared, `BlockManager.blocks_for`); every sample that computes positions in the chunk
    reads the chunk's cached context. (The token budget counts the same tokens: `rules.chunk_tokens`.)"""
    tokens = pairs = kv_read = seqs = 0
    for mi, ci, pi in zip(chunks, computed, prompts):
        past = positions_past_prompt(ci, mi, pi)
        if past:
            hi = ci + mi
            lo = hi - past
            tokens += past
            pairs += hi * (hi + 1) // 2 - lo * (lo + 1) // 2
            kv_read += ci
            seqs += 1
    k = n - 1
    return k * tokens, k * pairs, k * kv_read, k * seqs


def _step_column(marks, num_ticks: int) -> np.ndarray:
    """Per-tick values from change points given flat (a list, or PrefixCache.marks: an int64 array.array)
    as [tick, value from then on, tick, value, ...] with ticks non-decreasing (the last mark of a tick
    wins; 0 before the first mark): each tick's last mark is repeated up to the next one's tick, in
    O(ticks + marks) array operations."""
    out = np.zeros(num_ticks, dtype=np.int64)
    if marks and num_ticks:
        flat = np.array(marks, dtype=np.int64)  # (an array.array's buffer is copied at memcpy speed; a view would pin it)
        ticks, vals = flat[0::2], flat[1::2]
        last = np.flatnonzero(ticks[1:] != ticks[:-1])  # the last mark of every tick but the final one
        ticks = np.append(ticks[last], ticks[-1])
        vals = np.append(vals[last], vals[-1])
        shown = ticks < num_ticks  # (marks past the recorded ticks never show)
        ticks, vals = ticks[shown], vals[shown]
        if ticks.size:
            out[ticks[0]:] = np.repeat(vals, np.diff(ticks, append=num_ticks))
    return out


def _traffic_extras(engine: Engine, summary, timeline):
    """Prefix-cache and speculative-decoding figures (issue 12): summary fields and the KV panel's
    cached-but-free column. Untouched when both features are off."""
    update = {}
    pc = engine.prefix
    if pc is not None:
        update |= {
            "prefix_hit_rate_tokens": pc.num_hit_tokens / pc.num_query_tokens if pc.num_query_tokens else float("nan"),
            "prefix_hit_rate_blocks": pc.num_hit_blocks / pc.num_query_blocks if pc.num_query_blocks else float("nan"),
            "prefill_tokens_saved": int(pc.num_saved_tokens),
            "prefix_blocks_evicted": int(pc.num_evicted),
        }
        cols = dict(timeline.columns)
        cols["kv_blocks_cached"] = _step_column(pc.marks, timeline.num_ticks)
        timeline = Timeline(cols)
    if engine.spec is not None:
        update |= {"spec_tokens_per_step": engine.spec.mean_tokens_per_step, "spec_draft_time_s": engine.spec.draft_time_s}
    return (summary.model_copy(update=update) if update else summary), timeline


def run_simulation(cfg: SimConfig, check_invariants: bool = False, budget: RunBudget | None = None) -> SimResult:
    """Simulate one config. Same config (seed included) → identical result.

    `budget` (a server's ceiling, see sim_core/budget.py) stops the run early, with partial results
    and a `stopped_reason`; without one only the config's own `limits` apply.

    Raises:
        MemoryPlanError: the model, workspace and KV cache do not fit (the message says what to change).
        OverBudget: (a PresetError) the run is too large to set up under `budget` (the message says what fits).
        TypeError: `cfg` is not a SimConfig (a dict or a preset name was "'dict' object has no attribute 'deployment'").
        PresetError: `cfg` is not valid (the message names the field, the value and the range).
    """
    if not isinstance(cfg, SimConfig):
        raise TypeError(f"run_simulation needs a SimConfig, got {type(cfg).__name__}: load_preset(name_or_path) or "
                        "SimConfig.model_validate(data) makes one (validated)")  # fmt: skip
    # Checked again: pydantic's `model_copy(update=...)` and `model_construct` validate nothing, so a copy with
    # max_num_seqs 0 ran and blamed the KV cache, and a seed of -5 ended in numpy's "expected non-negative integer"
    # (~0.1 ms; ~50 ms for a trace of 100,000 requests). `presets.config_with` changes a config with the check.
    cfg = config_from_dict(cfg.model_dump(mode="python"), "config given to run_simulation")
    if budget is not None:
        budget.check_setup(cfg)  # (a deployment's set-up, where no meter looks, must fit the budget)
    meter = BudgetMeter(budget) if budget is not None else None  # the clock starts before the workload is drawn
    if cfg.deployment is not None:  # several engines on one clock (sim_core/cluster)
        from sim_core.cluster import run_deployment

        return run_deployment(cfg, check_invariants, meter)
    engine = Engine(cfg)
    engine.check_invariants = check_invariants
    engine.meter = meter
    return engine.run()
