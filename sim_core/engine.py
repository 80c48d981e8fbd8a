"""The tick loop: owns time and state transitions. `run_simulation(cfg)` is a pure function.

Each tick: arrivals join the waiting queue; the scheduler plans the batch; the cost model prices
it; the clock advances; progress, tokens, blocks and finished requests are updated; one row is
recorded. When nothing can run the clock jumps to the next arrival (an IDLE row).

Where ticks are many and events few, a run of decode ticks whose batch cannot change (no arrival,
completion, block shortage or policy state before the run ends) is advanced in one vectorised step
that records the same rows (`_advance_run`); tests require identical results with it on and off.
"""

from __future__ import annotations

import numpy as np

from sim_core import fastpath
from sim_core.budget import BudgetMeter, RunBudget
from sim_core.config import SimConfig
from sim_core.costmodel import CostModel, plan_memory
from sim_core.kvcache import BlockManager
from sim_core.metrics import summarize
from sim_core.recorder import Recorder
from sim_core.result import RequestTable, SimResult
from sim_core.schedulers.plan import StepPlan
from sim_core.schedulers.scheduler import Scheduler
from sim_core.state import SimState
from sim_core.types import Event, Phase, Status
from sim_core.workload import generate_workload

MAX_RUN_CELLS = 1 << 16  # bound on (batch × ticks) evaluated per coalesced run: keeps memory flat
MAX_ITL_STORED = 2_000_000  # gaps kept in the result (16 MB); larger runs keep an evenly strided sample
RUN_CHUNK = 128  # ticks priced per coalesced step; a longer run continues in the next step


class Engine:
    def __init__(self, cfg: SimConfig):
        self.cfg = cfg
        self.memory = plan_memory(cfg)  # raises MemoryPlanError with the numbers
        self.workload = generate_workload(cfg.workload, np.random.default_rng(cfg.seed))
        wl = self.workload
        self.n = wl.num_samples
        contiguous = cfg.model.max_model_len if cfg.kv_cache.layout == "contiguous" else None
        self.kv = BlockManager(
            self.memory.num_blocks, self.memory.num_host_blocks, cfg.kv_cache.block_size, wl.num_requests, self.n, contiguous
        )
        self.st = SimState(wl, cfg.scheduler.queue_order)
        self.sched = Scheduler(cfg, self.kv)
        self.cost = CostModel(cfg)
        self.rec = Recorder(cfg.limits.num_recorded_batches)
        self.num_swap_outs = 0
        self.stopped_reason: str | None = None
        self.check_invariants = False
        self.meter: BudgetMeter | None = None  # set by run_simulation when a RunBudget is given

    # ------------------------------------------------------------------ loop
    def run(self) -> SimResult:
        st, lim = self.st, self.cfg.limits
        coalesce = lim.coalesce_ticks and self.sched.is_stateless
        fast = coalesce and fastpath.eligible(self)
        while not st.is_done:
            if self.rec.num_ticks >= lim.max_ticks:
                self.stopped_reason = f"stopped after {lim.max_ticks:,} ticks (limits.max_ticks)"
                break
            if st.now_s >= lim.max_sim_time_s:
                self.stopped_reason = f"stopped at {lim.max_sim_time_s:g} s of simulated time (limits.max_sim_time_s)"
                break
            if self.meter is not None and (over := self.meter.over(self)):  # the server's budget (sim_core/budget.py)
                self.stopped_reason = over
                break
            st.admit_arrivals()
            if not (fast and fastpath.advance(self)) and not (coalesce and self._advance_pure_decode()):
                plan = self.sched.schedule(st)
                if plan.is_empty:
                    if not self._idle():
                        break
                elif coalesce and self._is_repeatable(plan):
                    self._advance_run(plan)
                else:
                    self._advance_tick(plan)
            if self.check_invariants:
                self._check()
        if self.stopped_reason and not st.is_done:
            left = st.num_requests - st.num_finished
            self.stopped_reason += f"; {left:,} of {st.num_requests:,} requests unfinished (the load exceeds capacity or the limit is too low)"
        return self._result()

    def _idle(self) -> bool:
        """Jump the clock to the next arrival. False when nothing will ever arrive (run ends)."""
        st = self.st
        nxt = st.next_arrival_s()
        if not np.isfinite(nxt):
            if st.waiting_keys.size or st.swapped_keys.size:
                self.stopped_reason = "stopped: waiting requests can never be admitted (KV cache or limits too small)"
            return False
        gap = nxt - st.now_s
        self.rec.tick((st.now_s, gap, Phase.IDLE, 0, 0, 0, 0, 0, st.waiting_keys.size, st.swapped_keys.size,
                       self.kv.num_used, 0.0, 0.0, 0, 0, 0, self.sched.batch_cap))  # fmt: skip
        st.now_s = nxt
        return True

    # ------------------------------------------------------------------ one tick
    def _advance_tick(self, plan: StepPlan) -> None:
        st, kv, n = self.st, self.kv, self.n
        idx, new, dec = plan.req_idx, plan.num_new_tokens, plan.is_decode
        ctx = st.computed[idx]  # (B,) before this tick
        pre = ~dec
        m, c = new[pre], ctx[pre]
        num_dec = int(dec.sum())
        dec_ctx = int(ctx[dec].sum())
        completes = pre & (ctx + new >= st.prefill_target[idx])  # (B,) prefill done this tick
        prefill_tokens = int(m.sum())
        decode_tokens = n * num_dec
        pairs = int((m * c + m * (m + 1) // 2).sum()) + n * (dec_ctx + num_dec)
        kv_read = int(c.sum()) + n * dec_ctx
        samples = decode_tokens + int(completes.sum())
        seqs = int(pre.sum()) + decode_tokens
        swap_bytes = plan.swap_blocks * self.memory.block_bytes
        dur, flops, nbytes, is_comp = self.cost.tick(prefill_tokens + decode_tokens, samples, pairs, kv_read, seqs, swap_bytes)
        dur = float(dur)
        t0 = st.now_s
        t_end = t0 + dur

        rec = self.rec
        rec.event(plan.admitted_idx, t0, Event.SCHEDULED)
        rec.event(plan.preempted_idx, t0, Event.PREEMPTED)
        rec.event(plan.swapped_out_idx, t0, Event.SWAPPED_OUT)
        rec.event(plan.swapped_in_idx, t0, Event.SWAPPED_IN)
        self.num_swap_outs += plan.swapped_out_idx.size

        if rec.wants_batches:  # blocks held during the tick (before completions free them)
            rec.batch(rec.num_ticks, idx, new, dec, kv.held[idx])
        st.computed[idx] += new
        emits = dec | completes
        emit = idx[emits]
        if emit.size:
            last = st.last_token_s[emit]
            has_last = ~np.isnan(last)
            gaps = t_end - last[has_last]
            rec.itl(gaps)
            st.max_itl_s[emit[has_last]] = np.maximum(st.max_itl_s[emit[has_last]], gaps)
            st.emitted[emit] += 1
            is_first = np.isnan(st.first_token_s[emit])
            first = emit[is_first]
            st.first_token_s[first] = t_end
            rec.event(first, t_end, Event.FIRST_TOKEN)
            rec.event(emit[~is_first & completes[emits]], t_end, Event.PREFILL_DONE)
            st.last_token_s[emit] = t_end
            self._finish(emit[st.emitted[emit] >= st.output[emit]], t_end)

        phase = Phase.SWAP
        if prefill_tokens and decode_tokens:
            phase = Phase.MIXED
        elif prefill_tokens:
            phase = Phase.PREFILL
        elif decode_tokens:
            phase = Phase.DECODE
        rec.tick((t0, dur, phase, prefill_tokens, decode_tokens, int(pre.sum()), num_dec, st.running.size,
                  st.waiting_keys.size, st.swapped_keys.size, kv.num_used, float(flops), float(nbytes),
                  int(is_comp), plan.preempted_idx.size + plan.swapped_out_idx.size, plan.swap_blocks,
                  self.sched.batch_cap))  # fmt: skip
        self.sched.observe(t_end, dur, prefill_tokens, decode_tokens)
        st.now_s = t_end

    def _finish(self, done: np.ndarray, t_end) -> None:
        if not done.size:
            return
        st = self.st
        st.status[done] = Status.FINISHED
        st.finish_s[done] = t_end
        self.kv.free(done)
        st.running = st.running[st.status[st.running] != Status.FINISHED]
        st.num_finished += done.size
        self.rec.event(done, t_end, Event.FINISHED)
        if self.workload.closed_loop_think_s is not None:
            st.release_closed_loop(float(np.max(t_end)), done.size, self.workload.closed_loop_think_s)

    # ------------------------------------------------------------------ coalesced runs
    def _is_repeatable(self, plan: StepPlan) -> bool:
        return (
            plan.req_idx.size > 0
            and not plan.changes_membership
            and plan.swap_blocks == 0
            and bool(plan.is_decode.all())
            and plan.req_idx.size == self.st.running.size
        )

    def _advance_pure_decode(self) -> bool:
        """Fast path: with nothing waiting or swapped and every running request decoding, the
        scheduler's plan is "all running decode" in running order, so skip planning and run.
        Returns False (nothing done) when the run cannot take even two ticks."""
        st = self.st
        running = st.running
        if st.waiting_keys.size or st.swapped_keys.size or not running.size:
            return False
        if np.any(st.computed[running] < st.prefill_target[running]):
            return False
        plan = StepPlan(req_idx=running, num_new_tokens=np.ones(running.size, dtype=np.int64),
                        is_decode=np.ones(running.size, dtype=bool))  # fmt: skip
        return self._advance_run(plan, fallback=False)

    def _advance_run(self, plan: StepPlan, fallback: bool = True) -> bool:
        """Advance up to RUN_CHUNK decode ticks at once. Bit-identical to calling `_advance_tick` for
        each: the cost model gets the same integer aggregates and times accumulate in the same order.

        The run stops before the next arrival, before a block shortage, and at the first completion
        unless a completion cannot change the next plan (nothing waiting or swapped, or a static
        batch), in which case finished requests simply leave the batch.
        """
        st, kv, n, lim = self.st, self.kv, self.n, self.cfg.limits
        idx = plan.req_idx
        B = idx.size
        ctx0 = st.computed[idx]  # (B,)
        remaining = st.output[idx] - st.emitted[idx]  # (B,) ticks until each finishes (>= 1)
        shrink_ok = self.workload.closed_loop_think_s is None and (
            self.sched.is_static or (st.waiting_keys.size == 0 and st.swapped_keys.size == 0)
        )
        k_max = int(remaining.max() if shrink_ok else remaining.min())
        k_max = min(k_max, lim.max_ticks - self.rec.num_ticks, RUN_CHUNK, max(MAX_RUN_CELLS // B, 2))
        nxt = min(st.next_arrival_s(), lim.max_sim_time_s)
        if np.isfinite(nxt):  # price only about as many ticks as fit before the next arrival
            first_s = self.cost.tick(n * B, n * B, int(n * (ctx0.sum() + B)), int(n * ctx0.sum()), n * B)[0]
            k_max = min(k_max, int((nxt - st.now_s) / (0.8 * first_s)) + 2)
        if k_max <= 1:
            return self._fallback(plan, fallback)
        j = np.arange(k_max)  # (k,)
        alive = remaining[:, None] > j[None, :]  # (B, k) still decoding at tick j
        num_alive = alive.sum(axis=0)  # (k,)
        ctx_alive = (np.where(alive, ctx0[:, None], 0)).sum(axis=0) + j * num_alive  # (k,) exact integers
        tokens = n * num_alive
        dur, flops, nbytes, is_comp = self.cost.tick(tokens, tokens, n * (ctx_alive + num_alive), n * ctx_alive, tokens)
        times = np.add.accumulate(np.concatenate(([st.now_s], dur)))  # sequential: same rounding as tick by tick
        starts, ends = times[:-1], times[1:]
        k = min(k_max, int(np.searchsorted(starts[1:], nxt, side="left")) + 1)  # ticks starting before the next event
        # Blocks held after tick j by the requests still running; stop before the cache would overflow.
        held = kv.held[idx]
        blocks = np.maximum(kv.blocks_for(ctx0[:, None] + 1 + j[None, :k], st.prompt[idx][:, None]), held[:, None])  # (B, k)
        other = kv.num_used - int(held.sum())
        need = other + np.where(alive[:, :k], blocks, 0).sum(axis=0)  # (k,) blocks in use during tick j
        k = min(k, int(np.searchsorted(need, kv.num_blocks, side="right")))
        if k <= 1:
            return self._fallback(plan, fallback)
        alive, num_alive, blocks = alive[:, :k], num_alive[:k], blocks[:, :k]
        starts, ends, dur = starts[:k], ends[:k], dur[:k]
        steps = np.minimum(remaining, k)  # (B,) ticks each request runs in this run
        last_end = ends[steps - 1]  # (B,) time of each request's last token in the run

        # Inter-token gaps: the first tick against each request's previous token, then tick to tick.
        gap0 = ends[0] - st.last_token_s[idx]
        step_gaps = np.diff(ends)  # (k-1,)
        self.rec.itl(np.concatenate([gap0, np.repeat(step_gaps, num_alive[1:])]))
        prefix_max = np.concatenate(([-np.inf], np.maximum.accumulate(step_gaps)))  # (k,) max gap up to tick j
        st.max_itl_s[idx] = np.maximum(st.max_itl_s[idx], np.maximum(gap0, prefix_max[steps - 1]))
        if self.rec.wants_batches:
            m = min(k, lim.num_recorded_batches - self.rec.num_ticks)
            t_idx, b_idx = np.nonzero(alive[:, :m].T)  # (entries,) tick-major, batch order within a tick
            self.rec.batch(self.rec.num_ticks + t_idx, idx[b_idx], np.ones(t_idx.size, dtype=np.int64),
                           np.ones(t_idx.size, dtype=bool), blocks[b_idx, t_idx])  # fmt: skip
        st.computed[idx] += steps
        st.emitted[idx] += steps
        st.last_token_s[idx] = last_end
        kv.grow_to(idx, blocks[np.arange(B), steps - 1])
        done = remaining <= k
        # Rows are recorded after each tick's completions, as single ticks are.
        after = np.concatenate((num_alive[1:], [B - int(done.sum())]))  # (k,) running after tick j
        used = other + np.concatenate((np.where(alive[:, 1:], blocks[:, :-1], 0).sum(axis=0), [0]))
        self._finish(idx[done], last_end[done])
        used[-1] = kv.num_used
        self.rec.ticks(
            {
                "t_start_s": starts, "duration_s": dur, "phase": Phase.DECODE, "num_prefill_tokens": 0,
                "num_decode_tokens": n * num_alive, "num_prefill_seqs": 0, "num_decode_seqs": num_alive,
                "num_running": after, "num_waiting": st.waiting_keys.size, "num_swapped": st.swapped_keys.size,
                "kv_blocks_used": used, "flops": flops[:k], "bytes": nbytes[:k], "is_compute_bound": is_comp[:k],
                "num_preempted": 0, "swap_blocks": 0, "batch_cap": self.sched.batch_cap,
            },
            k,
        )  # fmt: skip
        st.now_s = float(ends[-1])
        return True

    def _fallback(self, plan: StepPlan, fallback: bool) -> bool:
        if fallback:  # the plan came from the scheduler (blocks for tick 0 allocated): run it alone
            self._advance_tick(plan)
        return fallback

    # ------------------------------------------------------------------ result
    def _check(self) -> None:
        st = self.st
        self.kv.check_invariants()
        if np.any(st.computed > st.prefill_target + st.output):
            raise RuntimeError("computed tokens exceed the request length")
        running = st.running
        if np.any(self.kv.held[running] < self.kv.blocks_for(st.computed[running], st.prompt[running])):
            raise RuntimeError("a running request holds fewer blocks than its context needs")
        if np.any(st.arrival_s[running] > st.now_s):
            raise RuntimeError("a request runs before it arrives")
        if np.any(st.emitted > st.output):
            raise RuntimeError("a request emitted more tokens than its output length")

    def _result(self) -> SimResult:
        st = self.st
        timeline, events, itl, batches = self.rec.finish()
        wl = self.workload
        req = RequestTable(
            arrival_s=st.arrival_s, prompt_tokens=st.prompt, output_tokens=st.output, num_emitted=st.emitted,
            priority=st.priority, class_idx=wl.class_idx, status=st.status, first_scheduled_s=st.first_scheduled_s,
            first_token_s=st.first_token_s, finish_s=st.finish_s, num_preemptions=st.num_preemptions,
            num_recomputed_tokens=st.num_recomputed, max_itl_s=st.max_itl_s,
        )  # fmt: skip
        kept = itl
        if itl.size > MAX_ITL_STORED:  # percentiles use every gap; the result keeps an even stride for drawing
            kept = itl[np.linspace(0, itl.size - 1, MAX_ITL_STORED).astype(np.int64)]
        summary = summarize(self.cfg, req, timeline, itl, self.memory, self.num_swap_outs, self.stopped_reason,
                            itl_is_scratch=kept is not itl)  # fmt: skip
        itl = kept
        return SimResult(self.cfg, self.memory, req, timeline, events, itl, batches, summary)


def run_simulation(cfg: SimConfig, check_invariants: bool = False, budget: RunBudget | None = None) -> SimResult:
    """Simulate one config. Same config (seed included) → identical result.

    `budget` (a server's ceiling, see sim_core/budget.py) stops the run early, with partial results
    and a `stopped_reason`; without one only the config's own `limits` apply.

    Raises:
        MemoryPlanError: the model, workspace and KV cache do not fit (the message says what to change).
    """
    meter = BudgetMeter(budget) if budget is not None else None  # the clock starts before the workload is drawn
    engine = Engine(cfg)
    engine.check_invariants = check_invariants
    engine.meter = meter
    return engine.run()
