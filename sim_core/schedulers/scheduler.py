"""The scheduler: composes the rule families of the config into one StepPlan per tick.

  batching        continuous (join/leave every tick) | static (a batch runs to completion) | exclusive
  prefill mode    phase.py: prefill_first | decode_first | time_slice | quota
  queue order     state.order_key: fcfs | priority | shortest_prompt_first
  admission       watermark | reserve (GUARANTEED_NO_EVICT) | greedy (MAX_UTILIZATION) | new_token_ratio (SGLang's
                  KV token budget, rules.TokenBudget; its ratio is state here: decays per decode-only tick)
  pre-emption     recompute | swap; victims in `_victim_order`: the last admitted (vLLM; priority order: lowest
                  priority, latest arrival), the fewest tokens written (SGLang) or the latest arrival (TensorRT-LLM)
  short chunk     a running prefill's chunk short of blocks pre-empts victims (vLLM) or shrinks (SGLang; under its
                  token budget, to the budget's room whenever that is smaller: `_cut_to_room`)
  requeue         a recompute victim waits by its key (vLLM) or at its class's end (SGLang): SimState.push_waiting
  batch cap       max_num_seqs, lowered by dynamic batch sizing (article §5.2)
  smart pre-empt  suspend a long prefill while the decode queue is over a limit (article §5.3)

The scheduler asks the BlockManager and tells it what to allocate; it never touches time.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from sim_core.arrays import isin
from sim_core.config import SimConfig
from sim_core.kvcache import BlockManager
from sim_core.schedulers import compose, rules
from sim_core.schedulers.phase import PHASE_CONTROLLERS, TickKind
from sim_core.schedulers.plan import StepPlan
from sim_core.state import SimState
from sim_core.types import IntArray, Status

_EMPTY = np.empty(0, dtype=np.int64)
_PREFILL_KINDS = (TickKind.PREFILL, TickKind.PREFILL_MIXED)  # (a constant: tick_kind runs every tick)
_RUNNING = int(Status.RUNNING)
# Up to this many requests, a per-tick update writes them element by element (a NumPy call on a tiny array costs
# ~0.5-1 us, an element write ~0.1 us); the general step's helpers and Engine._advance_tick use it.
FEW_REQUESTS = 8


def _total(tokens: IntArray) -> int:
    """The sum of a plan's token counts as a Python int. (A few, most ticks: summed as Python ints, ~1 us less than
    the NumPy reduction; the same exact integer sum.)"""
    return sum(tokens.tolist()) if tokens.size <= FEW_REQUESTS else int(tokens.sum())


class Scheduler:
    def __init__(self, cfg: SimConfig, kv: BlockManager):
        sch = cfg.scheduler
        self.cfg = sch
        self.kv = kv
        self.phase = PHASE_CONTROLLERS[sch.prefill_mode](sch)
        self.is_static = sch.batching in ("static", "exclusive")
        self.max_seqs = 1 if sch.batching == "exclusive" else sch.max_num_seqs
        self.batch_cap = self.max_seqs  # lowered by dynamic batch sizing
        self.is_chunked = sch.enable_chunked_prefill or sch.prefill_mode == "decode_first"
        self.watermark_blocks = int(cfg.kv_cache.watermark * kv.num_blocks) if sch.admission == "watermark" else 0
        # vLLM V0's block manager, and Sarathi-Serve's (built on it): a request is admitted when its whole prompt's
        # blocks fit with the watermark kept free, and takes them all at admission (`can_allocate` counts
        # `len(seq.logical_token_blocks)`, `allocate` allocates them, chunked prefill or not), so its later chunks
        # need no blocks (`admission_blocks`). Unchunked, the first chunk is the whole prompt already.
        self.allocates_prompt = sch.admission == "watermark" and self.is_chunked
        self.use_swap = sch.preemption == "swap"
        self.chunk_preempts = sch.chunk_short_of_blocks == "preempt"
        self._n = cfg.workload.num_samples
        # issue 12: a speculating decode verifies k+1 positions (what it takes from the token budget)
        spec = sch.speculative
        self.decode_width = 1 + spec.num_draft_tokens if spec.enabled else 1
        # ... and a running request holds KV slots for k more, the draft's lookahead (both drafts, an EAGLE/MTP head
        # and a draft model, keep KV in the cache: vLLM V1's Scheduler sets num_lookahead_tokens = k for them and
        # schedule() calls KVCacheManager.allocate_slots(request, num_new_tokens, num_lookahead_tokens=k) for every
        # running request, which allocates up to num_computed + num_new + num_lookahead tokens; a request admitted from
        # the queue gets none). The KV a decode needs past its computed tokens: `decode_slots`.
        self.kv_lookahead = spec.num_draft_tokens if spec.enabled else 0
        self.decode_slots = self.decode_width + self.kv_lookahead
        # The drafts are cut when the decodes would pass the token budget (`verify_width`; None: never cut).
        self._verify_width = self.verify_width if spec.enabled else None
        self.prefix_cache = cfg.kv_cache.enable_prefix_caching
        self.is_fcfs = sch.queue_order == "fcfs"
        self._victim_rule = sch.preemption_victim  # (`_victim_order`)
        self._victims_by_key = sch.queue_order == "priority" and sch.preemption_victim == "last_admitted"
        self._headroom_steps = sch.preemption_headroom_steps  # (`_grow_decodes`)
        # With a stateless phase controller and a fixed cap, a repeated all-decode plan needs no
        # tick-by-tick consultation (see repeat_decodes).
        # SGLang's admission (new_token_ratio): its ratio is scheduler state (`new_token_ratio`), advanced by `observe`,
        # `decode_run` and a retract; the running requests' reservation shrinks as they write, so admission may pass
        # in a later tick with nothing else changed: a run of decode ticks stops while a request could join
        self._by_ratio = sch.admission == "new_token_ratio"
        # ... with shrink, a running prefill's chunk is cut to the token budget's room (`_cut_to_room`; both executors)
        self.chunk_to_room = self._by_ratio and not self.chunk_preempts
        ntr = sch.new_token_ratio
        self._ratio_init, self._ratio_min, self._ratio_decay = ntr.init_new_token_ratio, ntr.min_new_token_ratio, ntr.decay_per_step
        self._ratio_base, self._ratio_steps = self._ratio_init, 0  # the ratio: its base, decode-only ticks since
        self._retracted = False  # the tick being planned retracted (pre-empted decodes): its `observe` does not decay
        # SGLang's running_batch.batch_is_full after a refusal by the token test (get_new_batch_prefill: NO_TOKEN): no
        # admission is tried again until the running batch is smaller (update_running_batch: `batch_size() <
        # initial_bs`, a request finished or was retracted; get_next_batch_to_run: a prefill batch's request finished)
        # or empty; not as the running requests write and the ratio decays. A prefill-pool instance (`resets_token_full`,
        # set by the deployment) clears it every step, as SGLang's disaggregated prefill loop does.
        self._token_full = False
        self._num_planned = 0  # running requests as the last plan left them (fewer at the next plan: some finished)
        self.resets_token_full = False
        self._pool_tokens = kv.num_blocks * kv.block_size
        # (the phase controller, the batch cap and the suspension rule keep no state; with the ratio's, the policy)
        self._phase_is_fixed = self.phase.is_stateless and not sch.dynamic_batch.enabled and not sch.smart_preemption.enabled
        self._repeat_is_fixed = self._phase_is_fixed and not self._by_ratio
        # (the config is frozen: flags read every tick by tick_kind and observe, looked up once)
        self._may_suspend = sch.smart_preemption.enabled
        self._has_dynamic_cap = sch.dynamic_batch.enabled
        self._choose, self._phase_observe = self.phase.choose, self.phase.observe
        # `tick_kind` is the phase controller's choice alone without a static batch or the suspension
        # rule: a per-tick caller (fastpath) may call this, (now_s, num_decodes, has_prefill_work) ->
        # TickKind, instead (one call per tick fewer); None when the batching rules may change the kind.
        self.kind_by_choice = self._choose if not self.is_static and not self._may_suspend else None
        # ... and when the phase controller's choice is one kind whatever the tick (DecodeFirst: `fixed_kind`), that
        # kind (None: call kind_by_choice or tick_kind)
        self.fixed_kind = self.phase.fixed_kind if self.kind_by_choice is not None else None
        if not self._has_dynamic_cap and not self._by_ratio:  # `observe` is the phase controller's alone: bound directly
            self.observe = self._phase_observe  # (a call fewer per tick)
        self.num_decodes = 0  # running requests that decode, at the last plan
        self._kind = TickKind.DECODE  # of the last plan, and whether it saw prefill work
        self._has_prefill_work = False
        self._idle_plan = StepPlan()  # (an idle step's plan: empty, never written to; the engine only reads a plan)

    def verify_width(self, num_decodes: int) -> int:
        """Positions each of `num_decodes` running decodes verifies in a tick: 1 + k with speculative decoding, but
        never past the token budget (max_num_batched_tokens; decodes take it first in every tick kind). When
        num_decodes x (1 + k) would pass it, every decoder's drafts are cut alike, to floor(budget / num_decodes) - 1
        (0 when the budget is below 1 per decoder: a running decode always advances); the budget's remainder is left
        unused. vLLM V1 (Scheduler.schedule) instead cuts each running request's 1 + k tokens to the budget left, in
        running order, trims its spec tokens to what fits and schedules no later running request once the budget is
        spent: its first requests keep all k drafts and its last may not decode that step. The KV slots a decode
        holds stay those of 1 + k positions plus the k lookahead (`decode_slots`, as vLLM's allocate_slots keeps
        num_lookahead_tokens = k): a cut tick holds up to k - drafts slots more than vLLM, whose cut request
        allocates only the positions it verifies."""
        width = self.decode_width
        if width == 1 or not num_decodes:
            return width
        # max(1, min(width, budget // num_decodes)) in comparisons: the builtins' argument handling costs ~1.5k
        # instructions a call, and the scalar core asks once per speculative tick (issue 11, session 51)
        fits = self.cfg.max_num_batched_tokens // num_decodes
        return width if fits >= width else fits if fits > 1 else 1

    # ------------------------------------------------------------------ main entry
    def schedule(self, st: SimState) -> StepPlan:
        plan = self._plan(st)
        preempted = plan.preempted_idx.size
        while plan.is_empty and preempted:
            # Its pre-emptions alone left nothing to run (a chunk short of blocks whose victim was its own request,
            # the last running one; no admission after a pre-emption): vLLM runs no forward pass for such a step and
            # its engine loop schedules the next one at once (V1: Scheduler.schedule breaks its running loop at
            # `preempted_req == request` and skips the waiting queue `if not preempted_reqs`;
            # GPUModelRunner.execute_model returns EMPTY_MODEL_RUNNER_OUTPUT when total_num_scheduled_tokens is 0;
            # EngineCoreProc.run_busy_loop steps again while the scheduler has requests). So the next step is planned
            # now, at the same instant, and may admit the victim again. (An empty plan would have the engine idle to
            # its next input: in a deployment, a horizon that depends on where the loop stepped it.) Each pass
            # pre-empts a running request or ends, so the loop ends.
            nxt = self._plan(st)
            preempted = nxt.preempted_idx.size
            plan = self._then(plan, nxt)
        if plan.is_empty and st.running.size:
            # Every running request is mid-prefill and no block is free for the next chunk: evict the first
            # victim (`_victim_order`, recompute) so the others can finish (vLLM V1 does the same).
            victim = self._last_in_order(st)[None]
            stuck = StepPlan()
            self._preempt(st, victim, stuck)
            plan = self._then(stuck, self._plan(st))
        return plan

    @staticmethod
    def _then(first: StepPlan, plan: StepPlan) -> StepPlan:
        """`plan` with the pre-emptions (and swaps out) of `first`, planned before it at the same instant."""
        if first.preempted_idx.size:
            plan.preempted_idx = np.concatenate([first.preempted_idx, plan.preempted_idx])
        if first.swapped_out_idx.size:
            plan.swapped_out_idx = np.concatenate([first.swapped_out_idx, plan.swapped_out_idx])
        plan.swap_blocks += first.swap_blocks
        return plan

    def _plan(self, st: SimState) -> StepPlan:
        running = st.running
        if not running.size and not st.waiting_keys.size and not st.swapped_keys.size:
            # Nothing to run (an idle step: a cluster's prefill instance between requests, most of its steps). The
            # steps below would only ask the phase controller (which may keep state) and plan nothing: that, in a few calls.
            has_prefill_work = self.prefill_work(0, 0, 0, 0)[1]
            self._kind = self.tick_kind(st, st.now_s, 0, 0, has_prefill_work, _EMPTY)
            if self._by_ratio:  # SGLang's loop with no batch to run: new_token_ratio = init_new_token_ratio
                self.reset_ratio()
            self._has_prefill_work, self.num_decodes, self._num_planned = has_prefill_work, 0, 0
            return self._idle_plan
        self.batch_may_have_shrunk(running.size)  # (admission is tried again after a refusal once it shrank)
        if running.size:
            is_dec = st.computed[running] >= st.prefill_target[running]  # (B,)
            num_dec = int(is_dec.sum())
            decodes, prefills = running[is_dec], running[~is_dec]
        else:  # (requests wait, none runs: the same empty arrays without the calls)
            num_dec, decodes, prefills = 0, running, running
        can_admit, has_prefill_work = self.prefill_work(len(running), num_dec, st.waiting_keys.size, st.swapped_keys.size)
        kind = self.tick_kind(st, st.now_s, num_dec, len(running), has_prefill_work, prefills)
        self._kind, self._has_prefill_work, self.num_decodes = kind, has_prefill_work, num_dec

        plan = StepPlan()
        run_decodes = _EMPTY
        pre_idx, pre_tok = _EMPTY, _EMPTY

        # The steps of compose.compose_tick, applied to the arrays; it decides which run, in which order.
        def grow() -> tuple[int, bool, bool]:
            nonlocal run_decodes, prefills
            run_decodes, prefills = self._grow_decodes(st, decodes, prefills, plan)
            return run_decodes.size, bool(plan.preempted_idx.size), bool(plan.swapped_out_idx.size)

        chunk_preempted = False  # a chunk short of blocks pre-empted a request (chunk_short_of_blocks = preempt)

        def chunks(budget: int) -> int:
            nonlocal pre_idx, pre_tok, run_decodes, decodes, chunk_preempted
            if not prefills.size:  # (no running prefill: no chunk, pre_idx and pre_tok stay empty)
                return 0
            num_running = st.running.size
            pre_idx, pre_tok = self._prefill_chunks(st, prefills, budget, plan)
            if st.running.size != num_running:  # victims leave the tick's decodes (their blocks, this tick's too, are freed)
                chunk_preempted = True
                run_decodes, decodes = run_decodes[isin(run_decodes, st.running)], decodes[isin(decodes, st.running)]
            return self._budget_tokens(st, pre_idx, pre_tok)

        def admit(budget: int) -> tuple[int, int]:
            nonlocal pre_idx, pre_tok
            if chunk_preempted:  # as after a decode's pre-emption: no admission in this tick (vLLM V1: `if not preempted_reqs`)
                return 0, 0
            a_idx, a_tok = self._admit(st, budget, self.batch_cap - len(st.running), pre_idx, pre_tok)
            plan.admitted_idx = a_idx
            if a_idx.size and pre_idx.size:
                pre_idx, pre_tok = np.concatenate([pre_idx, a_idx]), np.concatenate([pre_tok, a_tok])
            elif a_idx.size:
                pre_idx, pre_tok = a_idx, a_tok
            return a_idx.size, self._budget_tokens(st, a_idx, a_tok)

        compose.compose_tick(kind, decodes.size, self.cfg.max_num_batched_tokens, self._n * self.decode_width,
                     can_admit and st.waiting_keys.size > 0, st.swapped_keys.size > 0, grow, chunks, admit,
                     lambda: None if chunk_preempted else self._swap_in(st, plan), self._verify_width)  # fmt: skip
        # A chunk of 0 tokens does not run. (A few chunks, most ticks: their smallest as a Python int, ~1 us less than
        # the mask and its `all`; the same test.)
        if pre_idx.size and (min(pre_tok.tolist()) <= 0 if pre_idx.size <= FEW_REQUESTS else not (pre_tok > 0).all()):
            keep = pre_tok > 0
            pre_idx, pre_tok = pre_idx[keep], pre_tok[keep]
        # Decodes first, then prefill chunks: the engine relies on this order (plan.num_decodes).
        D = run_decodes.size
        if not D and pre_idx.size:  # (prefill chunks only: the arrays below without the concatenations)
            plan.req_idx, plan.num_new_tokens, plan.is_decode = pre_idx, pre_tok, np.zeros(pre_idx.size, dtype=bool)
        elif D or pre_idx.size:
            plan.req_idx = np.concatenate([run_decodes, pre_idx]) if pre_idx.size else run_decodes
            plan.num_new_tokens = np.concatenate([np.ones(D, dtype=np.int64), pre_tok])
            plan.is_decode = np.arange(D + pre_idx.size) < D
            plan.num_decodes = D
        self._num_planned = st.running.size
        return plan

    def repeat_decodes(self, st: SimState, planned: bool, starts_s, ends_s, durations_s, decode_tokens, num_decodes,
                       num_waiting, caps) -> int:  # fmt: skip
        """How many of these ticks (a run of an all-decode plan, priced ahead) the scheduler would plan
        identically, tick by tick. Running requests that are not in the plan are prefills left idle
        (no blocks or budget for a chunk, a decode phase, or suspended). Calls `choose` before and
        `observe` after each tick exactly as the single-tick path does, so the phase and batch-cap
        state end where tick-by-tick stepping leaves them; writes the batch cap in force at each tick
        into `caps`. `planned`: tick 0's plan came from `schedule` (which already chose its kind).

        The plan of tick j equals tick 0's while the tick kind, the prefill-work flag and the batch
        cap are unchanged (membership, queues and free blocks are fixed within a run, or change only
        in ways the engine has ruled out). When the run stops because `choose` changed its answer,
        the next `schedule` calls it again for the same tick: the phase contract (phase.py) makes
        that second call a no-op.
        """
        k = len(starts_s)
        if self._repeat_is_fixed:
            if not planned:  # every controller plans all decodes when there is no prefill work
                self.phase.choose(float(starts_s[0]), int(num_decodes[0]), False)
            return k
        cap0 = self.batch_cap
        num_swapped = st.swapped_keys.size
        idle = st.running[st.computed[st.running] < st.prefill_target[st.running]]  # prefills left out of the plan
        starts, ends, durs = starts_s.tolist(), ends_s.tolist(), durations_s.tolist()
        toks, decs = decode_tokens.tolist(), num_decodes.tolist()
        waits = np.broadcast_to(num_waiting, (k,)).tolist()
        if self.phase.is_stateless and not self.cfg.smart_preemption.enabled and not self._by_ratio:
            # Only the batch cap has state (dynamic batch): the kind follows the prefill-work flag.
            return self._repeat_with_cap_rule(st, planned, k, starts, durations_s, decs, waits, num_swapped, idle, caps)
        for j in range(k):
            if j or not planned:
                cap, nd = self.batch_cap, decs[j]
                if j and cap != cap0 and (waits[j] or num_swapped):
                    return j  # a new cap may admit or swap in
                nr = nd + idle.size
                can_admit, hpw = self.prefill_work(nr, nd, waits[j], num_swapped)
                if j and hpw != self._has_prefill_work:
                    return j  # decided before `choose`, which is then called once, by the next plan
                if j and self._by_ratio and can_admit and waits[j] and not self._token_full:
                    return j  # the head may fit now (outputs written, the ratio decayed): the next plan tries it
                kind = self.tick_kind(st, starts[j], nd, nr, hpw, idle)
                if not j:
                    self._kind, self._has_prefill_work = kind, hpw
                elif kind != self._kind:
                    return j  # `choose` changed its answer: a second call (the next plan's) repeats it
            caps[j] = self.batch_cap
            self.observe(ends[j], durs[j], 0, toks[j])
        return k

    def _repeat_with_cap_rule(self, st: SimState, planned: bool, k: int, starts: list, durations_s, decs: list,
                              waits: list, num_swapped: int, idle: IntArray, caps) -> int:  # fmt: skip
        """`repeat_decodes` for a stateless phase controller with dynamic batch sizing: the same stops
        as its tick loop (a changed cap while requests wait, a changed prefill-work flag; a stateless
        `choose` answers the same while that flag is unchanged), with the cap of every tick from
        `rules.batch_cap_trajectory` (the `observe` rule applied tick by tick) instead of k calls."""
        if not planned:  # tick 0 was not planned: choose its kind as the tick loop does
            nr = decs[0] + idle.size
            hpw = self.prefill_work(nr, decs[0], waits[0], num_swapped)[1]
            self._kind = self.tick_kind(st, starts[0], decs[0], nr, hpw, idle)
            self._has_prefill_work = hpw
        cap0 = self.batch_cap
        slow = durations_s * 1e3 > self.cfg.dynamic_batch.target_tick_ms
        traj = rules.batch_cap_trajectory(cap0, slow, self.max_seqs)  # (k + 1,) cap in force at tick j
        cap = traj[:k]
        waiting = np.asarray(waits) > 0
        nr = np.asarray(decs) + idle.size
        can_admit = (nr < cap) & ((nr == 0) if self.is_static else True)
        hpw = (idle.size > 0 or num_swapped > 0) | (waiting & can_admit)
        stop = ((cap != cap0) & (waiting | (num_swapped > 0))) | (hpw != self._has_prefill_work)
        first = np.flatnonzero(stop[1:])
        kk = int(first[0]) + 1 if first.size else k
        caps[:kk] = cap[:kk]
        self.batch_cap = int(traj[kk])
        return kk

    def observe(self, end_s: float, duration_s: float, prefill_tokens: int, decode_tokens: int) -> None:
        self._phase_observe(end_s, duration_s, prefill_tokens, decode_tokens)
        if self._has_dynamic_cap and (prefill_tokens or decode_tokens):
            dyn = self.cfg.dynamic_batch
            self.batch_cap = rules.next_batch_cap(self.batch_cap, duration_s * 1e3 > dyn.target_tick_ms, self.max_seqs)
        if self._by_ratio:
            # SGLang decays its ratio after each decode batch (a step that prefills nothing), except one that retracted
            # (`update_running_batch`: the retract sets it instead)
            if self._retracted:
                self._retracted = False
            elif decode_tokens and not prefill_tokens:
                self._ratio_steps += 1

    @property
    def new_token_ratio(self) -> float:
        """SGLang's new_token_ratio now (admission new_token_ratio; `rules.new_token_ratio` of the state)."""
        return rules.new_token_ratio(self._ratio_base, self._ratio_steps, self._ratio_min, self._ratio_decay)

    def reset_ratio(self) -> None:
        """The engine idles (nothing runs, nothing to admit): the ratio starts again at init_new_token_ratio (and no
        batch is full)."""
        self._ratio_base, self._ratio_steps = self._ratio_init, 0
        self._token_full = False

    def decode_run(self, start_s: float, durations_s: list[float], decode_tokens: list[int]) -> None:
        """`tick_kind` then `observe` for each tick of a run of all-decode ticks in which nothing could
        prefill and decodes run (every tick starting where the last ended), as the tick-by-tick loop
        calls them: the phase controller advances its state over the run in one call (its
        `decode_run`, next to its `choose` and `observe`). With no prefill work the kind is a decode
        kind, so the suspension rule (prefill kinds only) does not apply."""
        if self._has_dynamic_cap:  # the cap's rule after each tick: tick by tick
            now_s = start_s
            for dur, tokens in zip(durations_s, decode_tokens):
                self._choose(now_s, 1, False)
                self.observe(now_s + dur, dur, 0, tokens)
                now_s += dur
        else:
            self.phase.decode_run(start_s, durations_s, decode_tokens)
            if self._by_ratio:  # `observe`'s decay for each of these decode-only ticks (none retracts: no pre-emption)
                self.decode_ticks(sum(1 for tokens in decode_tokens if tokens))

    def decode_ticks(self, n: int) -> None:
        """`observe` of n decode-only ticks that pre-empt nothing, for the new-token ratio alone (what `decode_run`
        does when the phase controller, the batch cap and the suspension rule keep no state)."""
        self._retracted = False
        self._ratio_steps += n

    # ------------------------------------------------------------------ rule families
    def join_cap(self) -> int:
        """Running requests below which a waiting one may join (`prefill_work`'s can_admit: a free batch slot; a
        static batch only when empty; the cap is at least 1). A caller whose cap is fixed (fastpath) reads it once."""
        return 1 if self.is_static else self.batch_cap

    def prefill_work(self, num_running: int, num_decodes: int, num_waiting: int, num_swapped: int) -> tuple[bool, bool]:
        """(can admit, has prefill work): a request may join (a free batch slot; a static batch only
        when empty), and something could prefill (a running prefill, a swapped request, or a waiting
        one that may join). What the phase controller is told before each tick."""
        can_admit = num_running < self.join_cap()
        return can_admit, num_decodes < num_running or num_swapped > 0 or (num_waiting > 0 and can_admit)

    def tick_kind(self, st: SimState, now_s: float, num_dec: int, num_running: int, has_prefill_work: bool,
                   prefills: IntArray) -> TickKind:  # fmt: skip
        """Which kind of tick runs next: the phase controller's choice, then the batching rules."""
        kind = self._choose(now_s, num_dec, has_prefill_work)
        if self.is_static and num_dec < num_running:
            kind = TickKind.PREFILL  # a static batch is prefilled before it decodes
        # (_suspend_prefill is False without smart pre-emption: its first test, made here without the call)
        if self._may_suspend and kind in _PREFILL_KINDS and self._suspend_prefill(st, now_s, prefills, num_dec):
            kind = TickKind.DECODE
        return kind

    def _suspend_prefill(self, st: SimState, now_s: float, prefills: IntArray, num_dec: int) -> bool:
        """Article §5.3 check_preemption: a prefill that has run past the threshold yields while the
        decode queue is over the limit."""
        sp = self.cfg.smart_preemption
        if not sp.enabled or num_dec <= sp.decode_queue_limit or prefills.size == 0:
            return False
        started = st.prefill_start_s[prefills]
        return bool(np.nanmax(now_s - started) * 1e3 > sp.threshold_ms)

    def _grow_decodes(self, st: SimState, decodes: IntArray, prefills: IntArray, plan: StepPlan):
        """Give each decode the blocks for one more token; pre-empt victims while blocks run short."""
        kv = self.kv
        prompt = st.prompt[decodes] if self._n > 1 else None  # only the n > 1 layout depends on it
        need = np.maximum(kv.blocks_for(st.computed[decodes] + self.decode_slots, prompt) - kv.held[decodes], 0)
        total = int(need.sum())
        deficit = total - kv.num_free
        while deficit > 0:
            # Pre-empt until the decodes' blocks fit (vLLM: pre-empt, then check again; SGLang's retract_decode since
            # PR #9989: retract at least one, then until check_decode_mem(selected_indices) holds for those left).
            # One round covers the deficit when a victim frees every block it holds; with prefix caching, blocks it
            # shares with other running requests stay in use, so a round may free fewer than it counted and another
            # one follows.
            victims = self._choose_victims(st, decodes, need, deficit)
            if self._headroom_steps > 1:
                # SGLang before PR #9989 (`retract_decode`: `while available_size() < get_required_tokens(len(
                # sorted_indices)) or first_iter`, retract_decode_steps x the requests left; `if len(sorted_indices)
                # == 1: break`): decodes until those left have blocks for that many steps each, never the last one
                # (it goes only when its own step does not fit: the rule above)
                steps = self.decode_slots + (self._headroom_steps - 1) * self.decode_width
                prompt = st.prompt[decodes] if self._n > 1 else None
                ahead = np.maximum(kv.blocks_for(st.computed[decodes] + steps, prompt) - kv.held[decodes], 0)
                more = self._choose_victims(st, decodes, ahead, int(ahead.sum()) - kv.num_free, decodes_only=True)
                if more.size > victims.size:  # (both are heads of `_victim_order`: the longer holds the other)
                    victims = more
            self._preempt(st, victims, plan)
            alive = ~isin(decodes, victims)
            decodes, need = decodes[alive], need[alive]
            prefills = prefills[~isin(prefills, victims)]
            total = None
            deficit = int(need.sum()) - kv.num_free
            if self._by_ratio:
                self.retract(st.emitted[decodes].tolist(), st.output[decodes].tolist())
        if total != 0:
            kv.allocate(decodes, need, total)
        return decodes, prefills

    def retract(self, emitted: list[int], outputs: list[int]) -> None:
        """Admission new_token_ratio, after decodes were pre-empted: the ratio from the decodes left, which have written
        `emitted` of their `outputs` (`ScheduleBatch.retract_decode`: `rules.retract_ratio`), and this tick's `observe`
        does not decay it. (`_grow_decodes`; the scalar core's pre-emption, `fastpath._Steps.run_decodes`.)"""
        ratio = rules.retract_ratio(emitted, outputs)
        if ratio is not None:
            self._ratio_base, self._ratio_steps = ratio, 0
        self._retracted = True

    def _victim_order(self, st: SimState, running: IntArray | None = None, decoders=None) -> IntArray:
        """The running requests in the order they are pre-empted, the first victim first: the one rule for every
        pre-emption (a decode short of blocks, a chunk short of blocks, every running prefill stuck), by
        scheduler.preemption_victim. st.running is in admission order, swap-ins and hand-offs included.

        last_admitted (vLLM): V1 Scheduler.schedule, when allocate_slots returns None: the priority policy pre-empts
        max(self.running, key=(priority, arrival_time)), here the largest queue key; every other policy
        `self.running.pop()`, the request admitted last (self.running is in admission order: a re-admitted victim,
        which waited at the queue's head, joins its end and is the next one). V0 (0.6 `_schedule_running`:
        running_queue.pop(), its running deque kept in admission order, swap-ins appended) does the same.
        shortest_prompt_first (no vLLM policy) only orders the waiting queue: it pops as FCFS. (Under FCFS on one
        engine with recompute, admission order is arrival order: a victim waits at the queue's head, re-admitted
        before any later arrival. They differ where admission does not follow arrival: shortest_prompt_first, a
        decode instance taking hand-offs as their KV arrives, and with swap a tick that swapped a request out and
        still admits (compose_tick: only a recompute stops admission; later ticks swap in before they admit).)

        fewest_written (SGLang): ScheduleBatch.retract_decode sorts the running batch by (len(output_ids),
        -len(origin_input_ids)), reverse, and pops from its end: the fewest output tokens written first, ties the
        longest prompt, then the later in the batch (a stable sort keeps the batch order of equal keys; the batch
        is in the order requests joined it). A retracted request keeps its output_ids, so once re-admitted it is
        not the next victim, as it is under vLLM's rule. Only requests that finished their prefill are in SGLang's
        running batch (the chunked request is kept apart: filter_batch(chunked_req_to_exclude)), and it never
        retracts the last of them (`if len(sorted_indices) == 1: break`; its admission keeps that case away). Here running
        prefills come after every decode but the one with the most written, the last admitted first, and that decode
        comes last (a pool held by prefills still frees blocks for the last decode's token). SGLang's
        `--retraction-policy priority` (PR #30573) is not modelled: under queue_order priority this rule still orders
        by tokens written, SGLang's default `length`.

        latest_arrival (TensorRT-LLM): MaxUtilizationScheduler (cpp/tensorrt_llm/batch_manager/capacityScheduler.cpp)
        walks its active request list and, when a request does not fit, pauses the last started request of the list
        (`lastStartedReqIt`, searched from the end); a paused request keeps its place (LlmRequest::pause), and the
        list is in the order requests reached the engine: arrival order (`SimState.arrival_rank`; on a decode
        instance its slots, the order hand-offs were dispatched to it). Running requests here have all started. No
        priority: queue_order priority does not change it.

        A caller whose running requests are not in the arrays (the scalar core, mid-run) gives them: `running` in
        admission order, and `decoders`, called only by the rule that reads them (fewest_written): which of them decode
        and what each emitted, aligned with `running` (the other rules read neither: a caller builds them only here)."""
        rule = self._victim_rule
        if rule == "fewest_written":
            if running is None:
                running = st.running
                is_dec = st.computed[running] >= st.prefill_target[running]
                emitted = st.emitted[running]
            else:
                is_dec, emitted = decoders()
            dec = running[is_dec]
            dec = dec[np.lexsort((-np.flatnonzero(is_dec), -st.prompt[dec], emitted[is_dec]))]  # (last key first)
            return np.concatenate([dec[:-1], running[~is_dec][::-1], dec[-1:]])
        if running is None:
            running = st.running
        if rule == "latest_arrival":
            return running[np.argsort(-st.arrival_rank(running), kind="stable")]
        if self._victims_by_key:
            return running[np.argsort(-st.order_key[running], kind="stable")]
        return running[::-1]

    def _last_in_order(self, st: SimState) -> np.int64:
        """The running request pre-empted first (`_victim_order`)."""
        return self._victim_order(st)[0]

    def _choose_victims(self, st: SimState, decodes: IntArray, need: IntArray, deficit: int, decodes_only: bool = False,
                        order: IntArray | None = None, held: IntArray | None = None) -> IntArray:  # fmt: skip
        """Victims in `_victim_order` until the deficit is covered: a victim frees its blocks and no longer needs
        its new one. `decodes_only`: of the decodes alone, never the last of them in that order (SGLang's retract).
        A caller whose state is not in the arrays (the scalar core) gives the order and the blocks each holds in it."""
        if order is None:
            order = self._victim_order(st)  # (B,) victims first
        if decodes_only:
            order = order[isin(order, decodes)]
        need_of = np.zeros(order.size, dtype=np.int64)  # (B,) new blocks each would have needed
        sorter = np.argsort(order)
        need_of[sorter[np.searchsorted(order, decodes, sorter=sorter)]] = need
        gain = np.cumsum((self.kv.held[order] if held is None else held) + need_of)
        k = int(np.searchsorted(gain, deficit)) + 1
        return order[: min(k, order.size - 1 if decodes_only else order.size)]

    def swaps_out(self, held: list[int], host_free: int) -> list[bool]:
        """Which of these victims (pre-emption order, each holding `held` blocks) swap out, with `host_free` host blocks
        free: under swap each whose blocks fit in what the victims before it left (`BlockManager.fits`, as
        `can_swap_out` asks it), the others are recomputed. (`_preempt`; the scalar core asks it before it applies
        `_preempt` in its run, for compose_tick's flags: `fastpath._Steps._preempt_for_decodes`.)"""
        out, fits = [], self.kv.fits
        for blocks in held:
            swaps = self.use_swap and fits(blocks, 0, host_free)
            if swaps:
                host_free -= blocks
            out.append(swaps)
        return out

    def _preempt(self, st: SimState, victims: IntArray, plan: StepPlan, queues: tuple[list, int, list] | None = None) -> None:
        """Pre-empt these victims (in this order): each swaps out (`swaps_out`) or is recomputed, and joins the swapped
        or the waiting queue. `queues`: (waiting, head, swapped), the queues held as lists of keys (`waiting[head:]`:
        the scalar core's run's, `fastpath._preempt_in_run`), which the victims join in place
        (`SimState.push_waiting_into`, `push_swapped_into`) instead of the state's arrays."""
        # (The per-victim writes go element by element on Python ints: a pre-emption has one victim or a few, and a
        # fancy-indexed read-modify-write or a list made an array costs ~10x an element's write; session 51, pre51b.)
        kv = self.kv
        swapped, dropped = [], []
        rs = victims.tolist()
        for r, swaps in zip(rs, self.swaps_out(kv.held[victims].tolist(), kv.num_host_free)):
            if swaps:
                plan.swap_blocks += kv.swap_out(r)
                swapped.append(r)
            else:
                dropped.append(r)
        st.running = st.running[~isin(st.running, victims)]
        count = st.num_preemptions
        for r in rs:
            count[r] = count.item(r) + 1
        self._token_full = False  # (a smaller batch: SGLang's retract clears batch_is_full)
        if swapped:
            out = np.array(swapped, dtype=np.int64)
            if queues is None:
                st.push_swapped(out)
            else:
                st.push_swapped_into(queues[2], swapped)
            plan.swapped_out_idx = np.concatenate([plan.swapped_out_idx, out]) if plan.swapped_out_idx.size else out
        if dropped:
            d = np.array(dropped, dtype=np.int64)
            # Recompute: prompt plus every token emitted so far is prefilled again (vLLM V0 RECOMPUTE), but for the
            # full blocks the prefix cache still holds at re-admission (kv.preempt leaves them cached; a re-admission
            # takes back from num_recomputed what it finds, _admit_with_prefix_cache).
            computed, prompt, emitted, target = st.computed, st.prompt, st.emitted, st.prefill_target
            kv.preempt(d, computed[d])
            n, recomputed = self._n, st.num_recomputed
            for r in dropped:  # (dropped KV: the prompt once, past it every sample's tokens)
                c, p = computed.item(r), prompt.item(r)
                recomputed[r] = recomputed.item(r) + rules.chunk_tokens(n, 0, c, p)
                target[r] = p + emitted.item(r)
                computed[r] = 0
            plan.preempted_idx = np.concatenate([plan.preempted_idx, d]) if plan.preempted_idx.size else d
            if queues is None:
                st.push_waiting(d)
            else:  # (the core's queue, ~135 keys under hard pressure, to an array and back: 71-85k instructions, session 52)
                st.push_waiting_into(queues[0], queues[1], dropped)

    def _budget_tokens(self, st: SimState, idx: IntArray, chunks: IntArray) -> int:
        """Budget tokens of these prefill chunks (before they run): their positions; with n > 1 samples a recompute
        chunk's positions past the prompt count once per sample (rules.chunk_tokens)."""
        if self._n == 1:
            return _total(chunks)
        n = self._n
        return sum(rules.chunk_tokens(n, *x) for x in zip(st.computed[idx].tolist(), chunks.tolist(), st.prompt[idx].tolist()))

    def _prefill_chunks(self, st: SimState, prefills: IntArray, budget: int, plan: StepPlan):
        """Next chunk of each running prefill, in admission order, within the budget and free blocks (a chunk short of
        blocks: `_preempt_for_chunks`, or shrunk to the free blocks)."""
        if prefills.size == 0 or budget <= 0:
            return _EMPTY, _EMPTY
        ctx = st.computed[prefills]
        remaining = (st.prefill_target[prefills] - ctx).tolist()
        if self._n > 1:
            chunk = np.array(self.chunk_positions(ctx.tolist(), remaining, st.prompt[prefills].tolist(), budget), dtype=np.int64)
        else:
            chunk = np.array(rules.prefill_chunks(remaining, budget, self.is_chunked), dtype=np.int64)
        if self.chunk_to_room:
            self._cut_to_room(st, prefills, ctx, chunk)
        ahead = self.kv_lookahead  # (a running prefill's chunk has the draft's lookahead slots too; a chunk of 0 does not run)
        need = np.maximum(self.kv.blocks_for(ctx + chunk + (np.where(chunk > 0, ahead, 0) if ahead else 0), st.prompt[prefills])
                          - self.kv.held[prefills], 0)  # fmt: skip
        short = int(need.sum()) > self.kv.num_free  # rare: the chunks' blocks are not all free
        if short and self.chunk_preempts:  # pre-empt for them (vLLM, TensorRT-LLM)
            return self._preempt_for_chunks(st, prefills, chunk, need, plan)
        if short:  # shrink the chunks to the blocks that are free (SGLang)
            free = self.kv.num_free
            bs = self.kv.block_size
            for i in range(prefills.size):
                r, c, held = int(prefills[i]), int(ctx[i]), int(self.kv.held[prefills[i]])
                grow = lambda m: max(int(self.kv.blocks_for(c + m + (ahead if m else 0), st.prompt[r])) - held, 0)
                if self.is_chunked:
                    # Largest chunk whose blocks fit (blocks grow monotonically with the chunk; with
                    # n > 1 samples past the prompt each block holds fewer than block_size new tokens).
                    lo, hi = 0, min(int(chunk[i]), max((held + free) * bs - c, 0))
                    while lo < hi:
                        mid = (lo + hi + 1) // 2
                        lo, hi = (mid, hi) if grow(mid) <= free else (lo, mid - 1)
                    chunk[i] = lo
                elif need[i] > free:
                    chunk[i] = 0
                need[i] = grow(int(chunk[i]))
                free -= int(need[i])
        self.kv.allocate(prefills, need)
        return prefills, chunk

    def chunk_positions(self, computed: list[int], remaining: list[int], prompts: list[int], budget: int) -> list[int]:
        """The next chunk of each running prefill (admission order), in positions, under one token budget with n > 1
        samples: the budget counts tokens, and a recompute chunk's positions past the prompt count once per sample
        (`rules.chunk_tokens`). `_prefill_chunks` and the scalar core's recompute prefills (`fastpath._Steps`) take their
        chunks here."""
        n = self._n
        tokens = rules.prefill_chunks([rules.chunk_tokens(n, *x) for x in zip(computed, remaining, prompts)], budget,
                                      self.is_chunked)  # fmt: skip
        return [rules.chunk_positions(n, *x) for x in zip(computed, tokens, prompts)]

    def admit_samples(self, ids, target_of, prompt_of, budget: int, free_blocks: int, need_of,
                      tokens: rules.TokenBudget | None = None) -> list[tuple[int, int]]:  # fmt: skip
        """`rules.admit_in_order` with n > 1 samples, no prefix cache: the candidates `ids` (queue order, read lazily:
        the rule stops at the first that does not fit) with their prefill targets and prompts (`target_of`,
        `prompt_of`), each from position 0; the budget counts tokens (a recompute victim's positions past its prompt
        once per sample, `rules.chunk_tokens`), the blocks and the chunks are positions (`need_of(i, positions)`).
        Returns (positions, blocks) of each admitted. `_admit` and the scalar core's admission of recompute victims
        (`fastpath._Steps`) both take it from here."""
        n = self._n
        taken = rules.admit_in_order((rules.chunk_tokens(n, 0, target_of(r), prompt_of(r)) for r in ids), budget,
                                     free_blocks, self.watermark_blocks,
                                     lambda i, t: need_of(i, rules.chunk_positions(n, 0, t, prompt_of(ids[i]))),
                                     self.is_chunked, self.is_static, None, tokens)  # fmt: skip
        return [(rules.chunk_positions(n, 0, t, prompt_of(r)), need) for r, (t, need) in zip(ids, taken)]

    def _cut_to_room(self, st: SimState, prefills: IntArray, ctx: IntArray, chunk: IntArray) -> None:
        """chunk_short_of_blocks shrink under admission new_token_ratio: SGLang's `PrefillAdder.add_chunked_req` cuts
        the continuing chunk to rem_total_tokens, the free KV tokens less the running requests' reservation, whatever
        blocks are free (`rules.cut_to_room`; when that is not positive the chunk runs whole, bounded by the free blocks
        as under shrink). SGLang has one chunked request; here each running prefill in turn gets the room the chunks
        before it left: their blocks, and the output of one its chunk completes (promised unscaled, as the admission
        round's `TokenBudget` does). In place; the decodes took their blocks. (fastpath's `_Steps.run_chunks` calls
        the same rule with its state.)"""
        tokens = self.token_budget(st, [])  # (the running decoders' reservation)
        free = self.kv.num_free
        for i in range(prefills.size):
            chunk[i] = c = rules.cut_to_room(int(chunk[i]), rules.rem_total_tokens(free, tokens.block_size, tokens.reserved))
            if i + 1 < prefills.size:  # (what the chunks after it read)
                r, start = int(prefills[i]), int(ctx[i])
                free -= max(int(self.kv.blocks_for(start + c, st.prompt[r])) - int(self.kv.held[r]), 0)
                if start + c >= st.prefill_target.item(r):
                    tokens.reserved += self.output_reservation(st, r)

    def _preempt_for_chunks(self, st: SimState, prefills: IntArray, chunk: IntArray, need: IntArray, plan: StepPlan):
        """chunk_short_of_blocks = preempt: each running prefill in turn takes the blocks of its whole chunk; while they
        are not free, the running request pre-empted first (`_last_in_order`, as for a decode) is pre-empted, and when
        that is the chunk's own request, neither it nor a later chunk runs this tick. vLLM V1 Scheduler.schedule: when
        allocate_slots returns None, pre-empt self.running.pop() (the priority policy: max by (priority, arrival)) and
        retry; `if preempted_req == request: break`, which ends its running loop. A victim may be a decode already given
        its block this tick: it leaves the tick (its budget tokens are not handed back to later chunks)."""
        kv = self.kv
        chunk = chunk.copy()
        for i in range(prefills.size):
            r = int(prefills[i])
            if not (st.running == r).any():  # pre-empted for an earlier chunk
                chunk[i] = 0
                continue
            while int(need[i]) > kv.num_free:
                victim = self._last_in_order(st)
                self._preempt(st, np.array([victim], dtype=np.int64), plan)
                if victim == r:
                    chunk[i:] = 0
                    break
            else:
                kv.allocate(prefills[i : i + 1], need[i : i + 1])
                continue
            break
        chunk[~isin(prefills, st.running)] = 0  # (under priority order a victim may be an earlier chunk's request)
        return prefills, chunk

    def swap_in_count(self, num_running: int, host_blocks, free: int) -> int:
        """How many swapped requests come back, oldest key first (`host_blocks`: the blocks each holds in host memory,
        in that order, read lazily), to `num_running` running requests with `free` GPU blocks free: while the batch cap
        holds and the blocks stay above the watermark. (`_swap_in`; the scalar core's swap-in step,
        `fastpath._Steps.swap_in`.)"""
        taken, fits = 0, self.kv.fits
        for blocks in host_blocks:  # (`BlockManager.fits`: the rule `can_allocate` applies, on these counts)
            if num_running + taken >= self.batch_cap or not fits(blocks, self.watermark_blocks, free):
                break
            free -= blocks
            taken += 1
        return taken

    def _swap_in(self, st: SimState, plan: StepPlan) -> None:
        """Bring swapped requests back (`swap_in_count`)."""
        kv = self.kv
        ids = st.key_to_id(st.swapped_keys).tolist()
        taken = ids[: self.swap_in_count(len(st.running), map(kv.host_held.item, ids), kv.num_free)]
        for r in taken:
            plan.swap_blocks += kv.swap_in(r)
        if taken:
            plan.swapped_in_idx = np.array(taken, dtype=np.int64)
            st.swapped_keys = st.swapped_keys[len(taken):]
            st.status[plan.swapped_in_idx] = Status.RUNNING
            st.running = np.concatenate([st.running, plan.swapped_in_idx])

    def _admit_with_prefix_cache(self, st: SimState, ids: list[int], budget: int,
                                 tokens: rules.TokenBudget | None = None) -> list[tuple[int, int]]:  # fmt: skip
        """issue 12: the same admission rule, each request's prefill starting after its longest cached
        prefix. Looked up one by one as the rule reads them (an admission's allocation may evict what
        the next would hit); the cached blocks are referenced before the rest is allocated. A request pre-empted
        by recompute looks up its prompt and emitted tokens (its prefill target) and recomputes only what it
        does not find of the KV it dropped. (Each candidate's steps are methods, `prefix_lookup`,
        `prefix_admission_blocks` and `admit_cached`: the batch-of-one chain, solo.py, admits through them too.)"""
        looked: list[tuple] = []

        def remaining():
            for r in ids:
                lookup, rest = self.prefix_lookup(st, r)
                looked.append(lookup)
                yield rest

        def blocks(i: int, chunk: int) -> int:
            return self.prefix_admission_blocks(st, ids[i], looked[i], chunk)

        def admit(i: int, chunk: int, need: int) -> None:
            self.admit_cached(st, ids[i], looked[i], need)

        taken = rules.admit_in_order(remaining(), budget, self.kv.num_free, self.watermark_blocks, blocks, self.is_chunked,
                                     self.is_static, admit, tokens)  # fmt: skip
        if self._n == 1:
            return taken
        return [(self.prefix_positions(st, ids[i], looked[i], chunk), need) for i, (chunk, need) in enumerate(taken)]

    def prefix_lookup(self, st: SimState, r: int) -> tuple[tuple, int]:
        """Request r's longest cached prefix (`kv.lookup` of its prefill target: (handle, hit blocks, evictable among
        them)) and the prefill tokens after it, as the admission rule counts them (n > 1: `rules.chunk_tokens`)."""
        t = int(st.prefill_target[r])
        looked = self.kv.lookup(r, t)
        start = looked[1] * self.kv.block_size
        return looked, t - start if self._n == 1 else rules.chunk_tokens(self._n, start, t - start, int(st.prompt[r]))

    def prefix_positions(self, st: SimState, r: int, looked: tuple, chunk: int) -> int:
        """Positions of r's first chunk of `chunk` budget tokens after its cached prefix (n > 1: the rule's chunks are
        budget tokens, see _prefill_chunks)."""
        if self._n == 1:
            return chunk
        return rules.chunk_positions(self._n, looked[1] * self.kv.block_size, chunk, int(st.prompt[r]))

    def prefix_admission_blocks(self, st: SimState, r: int, looked: tuple, chunk: int) -> int:
        """Blocks r's admission with this first chunk takes: its new blocks, plus the evictable hits it takes from the
        free ones (`looked`: `prefix_lookup`'s)."""
        _, hit, evictable = looked
        chunk = self.prefix_positions(st, r, looked, chunk)
        if self.cfg.admission != "reserve":
            full = int(self.admission_blocks(st, r, max(chunk, 1) + hit * self.kv.block_size))
        else:
            full = int(self.admission_blocks(st, r, chunk))
        return full - hit + evictable

    def admit_cached(self, st: SimState, r: int, looked: tuple, need: int) -> None:
        """Admit r after its cached prefix (`looked`: `prefix_lookup`'s; `need`: `prefix_admission_blocks`'): the hit
        blocks referenced first (`kv.acquire`), then the rest allocated; its prefill starts after the hit."""
        kv = self.kv
        handle, hit, evictable = looked
        kept = kv.acquire(r, handle, hit, int(st.prefill_target[r]))
        if kept:  # dropped KV found again: not recomputed
            st.num_recomputed[r] -= kept
        kv.held[r] += need - evictable
        kv.num_free -= need - evictable
        st.computed[r] = hit * kv.block_size

    def admission_blocks(self, st: SimState, ids, chunks):
        """KV blocks the admission rule allocates to requests admitted with these first chunks (ids and
        chunks: ints or arrays). GUARANTEED_NO_EVICT (reserve): the whole request, so it never needs
        more; watermark (`allocates_prompt`): the whole prompt (its prefill target), so its chunks need none;
        otherwise the first chunk's (at least one block)."""
        # (One request as a Python int, the admission test of a cluster's prefill instance each tick: its prompt and
        # output as Python ints, `max` for np.maximum; the same arithmetic without NumPy scalars, ~1 us less.)
        one = type(ids) is int
        prompt = st.prompt.item(ids) if one else st.prompt[ids]
        if self.cfg.admission == "reserve":
            if one:
                return self.kv.blocks_for(prompt + st.output.item(ids), prompt)
            return self.kv.blocks_for(prompt + st.output[ids], prompt)
        if self.allocates_prompt:
            return self.kv.blocks_for(st.prefill_target.item(ids) if one else st.prefill_target[ids], prompt)
        return self.kv.blocks_for(max(chunks, 1) if one else np.maximum(chunks, 1), prompt)

    def cap_trajectory(self, durations_s: np.ndarray) -> np.ndarray:
        """The batch cap in force at each of these ticks (each computing tokens) and after the last
        ((k + 1,)), as `observe` leaves it tick by tick: the dynamic batch rule, or the fixed cap."""
        dyn = self.cfg.dynamic_batch
        if not dyn.enabled:
            return np.full(durations_s.size + 1, self.batch_cap, dtype=np.int64)
        return rules.batch_cap_trajectory(self.batch_cap, durations_s * 1e3 > dyn.target_tick_ms, self.max_seqs)

    def token_budget(self, st: SimState, ids: list[int], chunk_idx: IntArray = _EMPTY, chunk_tok: IntArray = _EMPTY
                     ) -> rules.TokenBudget:  # fmt: skip
        """Admission new_token_ratio: SGLang's KV token budget for admitting `ids` (queue order) this tick, after the
        decodes' blocks and the running prefills' chunks (`chunk_idx`, `chunk_tok`) were taken: the running decoders'
        outputs still to write x the ratio, plus the output of each running prefill this chunk completes (unscaled,
        as `add_chunked_req` on a last chunk). (fastpath's `_Steps.admit_waiting` builds the same from its state.)"""
        running = st.running
        dec = running[st.computed[running] >= st.prefill_target[running]]
        reserved = rules.running_reservation((st.output[dec] - st.emitted[dec]).tolist(), self.new_token_ratio)
        done = chunk_idx[st.computed[chunk_idx] + chunk_tok >= st.prefill_target[chunk_idx]].tolist() if chunk_idx.size else ()
        return self.token_budget_from(st, reserved, done, ids.__getitem__)

    def token_budget_from(self, st: SimState, running_reserved: float, completing, candidate: Callable[[int], int]
                          ) -> rules.TokenBudget:  # fmt: skip
        """The `rules.TokenBudget` of an admission round (both executors build it here): the running decoders'
        reservation, plus the output of each running prefill in `completing` (this tick's chunk completes its prompt:
        unscaled, as `add_chunked_req` on a last chunk); `candidate(i)`: the request at queue index i."""
        reserved = running_reserved
        if completing:
            reserved += sum(self.output_reservation(st, r) for r in completing)
        return rules.TokenBudget(self.kv.block_size, reserved, lambda i: self.output_reservation(st, candidate(i)))

    def batch_may_have_shrunk(self, num_running: int) -> None:
        """SGLang's batch_is_full after a refusal is cleared when the running batch is smaller than the last plan left
        it, or empty (`update_running_batch`, `get_next_batch_to_run`): called as each plan starts."""
        if self._token_full and (num_running < self._num_planned or not num_running):
            self._token_full = False

    def note_token_test(self, tokens: rules.TokenBudget) -> None:
        """After an admission round's token test: a refusal (NO_TOKEN) sets batch_is_full, except on a prefill-pool
        instance (`resets_token_full`: SGLang's disaggregated prefill loop clears it every step)."""
        if tokens.refused and not self.resets_token_full:
            self._token_full = True

    def output_reservation(self, st: SimState, r: int) -> int:
        """`rules.output_reservation` of request r: its output still to write (a pre-empted one wrote some)."""
        return rules.output_reservation(st.output.item(r) - st.emitted.item(r), st.prompt.item(r), self._pool_tokens)

    def _admit(self, st: SimState, budget: int, seqs_left: int, chunk_idx: IntArray = _EMPTY, chunk_tok: IntArray = _EMPTY):
        """Admit waiting requests in queue order; stop at the first that does not fit (no skipping,
        as in vLLM: head-of-line order is part of the policy being shown). `chunk_idx`, `chunk_tok`: the running
        prefills' chunks of this tick (admission new_token_ratio reserves the output of those they complete)."""
        kv = self.kv
        if seqs_left <= 0 or self._token_full:
            return _EMPTY, _EMPTY
        ids = st.key_to_id(st.waiting_keys[: seqs_left]).tolist()
        need_of = lambda i, chunk: int(self.admission_blocks(st, ids[i], chunk))
        tokens = self.token_budget(st, ids, chunk_idx, chunk_tok) if self._by_ratio else None
        if self.prefix_cache:
            taken = self._admit_with_prefix_cache(st, ids, budget, tokens)
        else:
            if self._n > 1:  # the budget counts tokens (see _prefill_chunks); the blocks and the chunk are positions
                taken = self.admit_samples(ids, st.prefill_target.item, st.prompt.item, budget, kv.num_free, need_of, tokens)
            elif len(ids) == 1 and tokens is None:  # (one waits: a cluster's prefill instance, most ticks) admit_in_order's test of one candidate
                one = rules.admit_next(0, st.prefill_target.item(ids[0]), budget, kv.num_free, self.watermark_blocks,
                                       need_of, self.is_chunked, self.is_static)  # fmt: skip
                taken = [] if one is None else [one]
            else:
                taken = rules.admit_in_order((int(st.prefill_target[r]) for r in ids), budget, kv.num_free,
                                             self.watermark_blocks, need_of, self.is_chunked, self.is_static, None, tokens)  # fmt: skip
            for r, (_, need) in zip(ids, taken):
                kv.held[r] += need
                kv.num_free -= need
        if tokens is not None:
            self.note_token_test(tokens)
        admitted = ids[: len(taken)]
        chunks = [chunk for chunk, _ in taken]
        if not admitted:
            return _EMPTY, _EMPTY
        a = np.array(admitted, dtype=np.int64)
        st.waiting_keys = st.waiting_keys[len(admitted):]
        st.running = np.concatenate([st.running, a])
        if len(admitted) <= FEW_REQUESTS:  # (the same writes element by element: cheaper than the array calls)
            now_s, status, scheduled_s, start_s, running = st.now_s, st.status, st.first_scheduled_s, st.prefill_start_s, _RUNNING
            for r in admitted:
                status[r] = running
                if scheduled_s[r] != scheduled_s[r]:  # NaN: first admission
                    scheduled_s[r] = now_s
                start_s[r] = now_s
        else:
            st.status[a] = Status.RUNNING
            first = np.isnan(st.first_scheduled_s[a])
            st.first_scheduled_s[a[first]] = st.now_s
            st.prefill_start_s[a] = st.now_s
        return a, np.array(chunks, dtype=np.int64)
