"""The scheduler: composes the rule families of the config into one StepPlan per tick.

  batching        continuous (join/leave every tick) | static (a batch runs to completion) | exclusive
  prefill mode    phase.py: prefill_first | decode_first | time_slice | quota
  queue order     state.order_key: fcfs | priority | shortest_prompt_first
  admission       watermark | reserve (GUARANTEED_NO_EVICT) | greedy (MAX_UTILIZATION)
  pre-emption     recompute | swap; victim = lowest priority, latest arrival (largest order key)
  batch cap       max_num_seqs, lowered by dynamic batch sizing (article §5.2)
  smart pre-empt  suspend a long prefill while the decode queue is over a limit (article §5.3)

The scheduler asks the BlockManager and tells it what to allocate; it never touches time.
"""

from __future__ import annotations

import numpy as np

from sim_core.config import SimConfig
from sim_core.kvcache import BlockManager
from sim_core.schedulers.phase import PHASE_CONTROLLERS, TickKind
from sim_core.schedulers.plan import StepPlan
from sim_core.state import SimState
from sim_core.types import IntArray, Status

_EMPTY = np.empty(0, dtype=np.int64)


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
        self.use_swap = sch.preemption == "swap"
        self._n = cfg.workload.num_samples
        # issue 12: a speculating decode verifies k+1 positions (token budget and KV lookahead slots)
        spec = sch.speculative
        self.decode_width = 1 + spec.num_draft_tokens if spec.enabled else 1
        self.prefix_cache = cfg.kv_cache.enable_prefix_caching
        # Ticks can be coalesced only when nothing but the batch itself decides the next plan.
        self.is_stateless = (
            self.phase.is_stateless and not sch.dynamic_batch.enabled and not sch.smart_preemption.enabled
        )

    # ------------------------------------------------------------------ main entry
    def schedule(self, st: SimState) -> StepPlan:
        plan = self._plan(st)
        if plan.is_empty and st.running.size:
            # Every running request is mid-prefill and no block is free for the next chunk: evict the
            # lowest-priority, latest arrival (recompute) so the others can finish (vLLM V1 does the same).
            victim = st.running[np.argmax(st.order_key[st.running])][None]
            stuck = StepPlan()
            self._preempt(st, victim, stuck)
            plan = self._plan(st)
            plan.preempted_idx = np.concatenate([stuck.preempted_idx, plan.preempted_idx])
            plan.swapped_out_idx = np.concatenate([stuck.swapped_out_idx, plan.swapped_out_idx])
            plan.swap_blocks += stuck.swap_blocks
        return plan

    def _plan(self, st: SimState) -> StepPlan:
        running = st.running
        is_dec = st.computed[running] >= st.prefill_target[running]  # (B,)
        num_dec = int(is_dec.sum())
        can_admit = len(running) < self.batch_cap and (not self.is_static or len(running) == 0)
        has_prefill_work = (num_dec < len(running)) or st.swapped_keys.size > 0 or (st.waiting_keys.size > 0 and can_admit)
        kind = self.phase.choose(st.now_s, num_dec, has_prefill_work)
        if self.is_static and num_dec < len(running):
            kind = TickKind.PREFILL  # a static batch is prefilled before it decodes
        if kind in (TickKind.PREFILL, TickKind.PREFILL_MIXED) and self._suspend_prefill(st, running[~is_dec], num_dec):
            kind = TickKind.DECODE

        plan = StepPlan()
        parts_idx: list[IntArray] = []
        parts_tok: list[IntArray] = []
        parts_dec: list[np.ndarray] = []
        budget = self.cfg.max_num_batched_tokens
        decodes = running[is_dec]
        prefills = running[~is_dec]
        if kind != TickKind.PREFILL and decodes.size:
            decodes, prefills = self._grow_decodes(st, decodes, prefills, plan)
            parts_idx.append(decodes)
            parts_tok.append(np.ones(decodes.size, dtype=np.int64))
            parts_dec.append(np.ones(decodes.size, dtype=bool))
            if kind == TickKind.DECODE_FIRST:
                budget -= self._n * decodes.size * self.decode_width
        if kind != TickKind.DECODE:
            idx, tok = self._prefill_chunks(st, prefills, budget)
            budget -= int(tok.sum())
            if st.swapped_keys.size and not plan.swapped_out_idx.size:
                self._swap_in(st, plan)
            elif st.waiting_keys.size and can_admit and not plan.preempted_idx.size:
                a_idx, a_tok = self._admit(st, budget, self.batch_cap - len(st.running))
                plan.admitted_idx = a_idx
                idx, tok = np.concatenate([idx, a_idx]), np.concatenate([tok, a_tok])
            keep = tok > 0
            parts_idx.append(idx[keep])
            parts_tok.append(tok[keep])
            parts_dec.append(np.zeros(int(keep.sum()), dtype=bool))
            if not keep.any() and kind == TickKind.PREFILL and decodes.size and not plan.admitted_idx.size:
                # nothing could be prefilled (KV full): fall back to a decode tick rather than idle
                decodes, _ = self._grow_decodes(st, decodes, prefills, plan)
                parts_idx.append(decodes)
                parts_tok.append(np.ones(decodes.size, dtype=np.int64))
                parts_dec.append(np.ones(decodes.size, dtype=bool))
        if parts_idx:
            plan.req_idx = np.concatenate(parts_idx)
            plan.num_new_tokens = np.concatenate(parts_tok)
            plan.is_decode = np.concatenate(parts_dec)
        return plan

    def observe(self, end_s: float, duration_s: float, prefill_tokens: int, decode_tokens: int) -> None:
        self.phase.observe(end_s, duration_s, prefill_tokens, decode_tokens)
        dyn = self.cfg.dynamic_batch
        if dyn.enabled and (prefill_tokens or decode_tokens):
            # Article §5.2 dynamic_batch_size: halve on a slow step, +1 otherwise.
            if duration_s * 1e3 > dyn.target_tick_ms:
                self.batch_cap = max(1, self.batch_cap // 2)
            else:
                self.batch_cap = min(self.max_seqs, self.batch_cap + 1)

    # ------------------------------------------------------------------ rule families
    def _suspend_prefill(self, st: SimState, prefills: IntArray, num_dec: int) -> bool:
        """Article §5.3 check_preemption: a prefill that has run past the threshold yields while the
        decode queue is over the limit."""
        sp = self.cfg.smart_preemption
        if not sp.enabled or num_dec <= sp.decode_queue_limit or prefills.size == 0:
            return False
        started = st.prefill_start_s[prefills]
        return bool(np.nanmax(st.now_s - started) * 1e3 > sp.threshold_ms)

    def _grow_decodes(self, st: SimState, decodes: IntArray, prefills: IntArray, plan: StepPlan):
        """Give each decode the blocks for one more token; pre-empt victims while blocks run short."""
        kv = self.kv
        need = np.maximum(kv.blocks_for(st.computed[decodes] + self.decode_width, st.prompt[decodes]) - kv.held[decodes], 0)
        deficit = int(need.sum()) - kv.num_free
        if deficit > 0:
            victims = self._choose_victims(st, decodes, need, deficit)
            self._preempt(st, victims, plan)
            alive = ~np.isin(decodes, victims)
            decodes, need = decodes[alive], need[alive]
            prefills = prefills[~np.isin(prefills, victims)]
        kv.grow_to(decodes, kv.held[decodes] + need)
        return decodes, prefills

    def _choose_victims(self, st: SimState, decodes: IntArray, need: IntArray, deficit: int) -> IntArray:
        """Lowest priority, latest arrival first (largest queue key), until the deficit is covered:
        a victim frees its blocks and no longer needs its new one."""
        running = st.running
        order = running[np.argsort(-st.order_key[running], kind="stable")]  # (B,) victims first
        need_of = np.zeros(order.size, dtype=np.int64)  # (B,) new blocks each would have needed
        sorter = np.argsort(order)
        need_of[sorter[np.searchsorted(order, decodes, sorter=sorter)]] = need
        gain = np.cumsum(self.kv.held[order] + need_of)
        k = int(np.searchsorted(gain, deficit)) + 1
        return order[: min(k, order.size)]

    def _preempt(self, st: SimState, victims: IntArray, plan: StepPlan) -> None:
        kv = self.kv
        swapped, dropped = [], []
        for r in victims.tolist():
            if self.use_swap and kv.can_swap_out(r):
                plan.swap_blocks += kv.swap_out(r)
                swapped.append(r)
            else:
                dropped.append(r)
        st.running = st.running[~np.isin(st.running, victims)]
        st.num_preemptions[victims] += 1
        if swapped:
            plan.swapped_out_idx = np.array(swapped, dtype=np.int64)
            st.push_swapped(plan.swapped_out_idx)
        if dropped:
            d = np.array(dropped, dtype=np.int64)
            kv.free(d)
            # Recompute: prompt plus every token emitted so far is prefilled again (vLLM V0 RECOMPUTE).
            st.num_recomputed[d] += st.computed[d]
            st.prefill_target[d] = st.prompt[d] + st.emitted[d]
            st.computed[d] = 0
            plan.preempted_idx = d
            st.push_waiting(d)

    def _prefill_chunks(self, st: SimState, prefills: IntArray, budget: int):
        """Next chunk of each running prefill, in admission order, within the budget and free blocks."""
        if prefills.size == 0 or budget <= 0:
            return _EMPTY, _EMPTY
        remaining = st.prefill_target[prefills] - st.computed[prefills]
        if self.is_chunked:
            before = np.cumsum(remaining) - remaining
            chunk = np.clip(budget - before, 0, remaining)
        else:
            chunk = np.where(np.cumsum(remaining) <= budget, remaining, 0)
        ctx = st.computed[prefills]
        need = np.maximum(self.kv.blocks_for(ctx + chunk, st.prompt[prefills]) - self.kv.held[prefills], 0)
        if int(need.sum()) > self.kv.num_free:  # rare: shrink chunks to the blocks that are free
            free = self.kv.num_free
            bs = self.kv.block_size
            for i in range(prefills.size):
                fit = (int(self.kv.held[prefills[i]]) + free) * bs - int(ctx[i])
                chunk[i] = min(int(chunk[i]), max(fit, 0)) if self.is_chunked else (chunk[i] if need[i] <= free else 0)
                need[i] = max(int(self.kv.blocks_for(ctx[i] + chunk[i], st.prompt[prefills[i]])) - int(self.kv.held[prefills[i]]), 0)
                free -= int(need[i])
        self.kv.grow_to(prefills, self.kv.held[prefills] + need)
        return prefills, chunk

    def _swap_in(self, st: SimState, plan: StepPlan) -> None:
        """Bring swapped requests back, oldest key first, while blocks stay above the watermark."""
        kv = self.kv
        ids = st.key_to_id(st.swapped_keys)
        taken = []
        for r in ids.tolist():
            if len(st.running) + len(taken) >= self.batch_cap or not kv.can_allocate(int(kv.host_held[r]), self.watermark_blocks):
                break
            plan.swap_blocks += kv.swap_in(r)
            taken.append(r)
        if taken:
            plan.swapped_in_idx = np.array(taken, dtype=np.int64)
            st.swapped_keys = st.swapped_keys[len(taken):]
            st.status[plan.swapped_in_idx] = Status.RUNNING
            st.running = np.concatenate([st.running, plan.swapped_in_idx])

    def _admit(self, st: SimState, budget: int, seqs_left: int):
        """Admit waiting requests in queue order; stop at the first that does not fit (no skipping,
        as in vLLM: head-of-line order is part of the policy being shown)."""
        kv, cfg = self.kv, self.cfg
        if seqs_left <= 0:
            return _EMPTY, _EMPTY
        ids = st.key_to_id(st.waiting_keys[: seqs_left]).tolist()
        admitted, chunks = [], []
        for r in ids:
            rem = int(st.prefill_target[r])
            hit_tokens = hit = evictable = 0
            if self.prefix_cache:  # issue 12: skip the longest cached prefix of the prompt
                keys, hit, evictable = kv.lookup(r, int(st.prompt[r]))
                hit_tokens = hit * kv.block_size
                rem -= hit_tokens
            if self.is_chunked:
                chunk = min(rem, budget)
            else:
                chunk = rem if rem <= budget else 0
            if chunk <= 0 and not self.is_static:
                break
            if cfg.admission == "reserve":
                # GUARANTEED_NO_EVICT: blocks for the whole request, so it never needs more.
                need = int(kv.blocks_for(int(st.prompt[r] + st.output[r]), st.prompt[r])) - hit
            else:
                need = int(kv.blocks_for(hit_tokens + max(chunk, 1), st.prompt[r])) - hit
            if not kv.can_allocate(need + evictable, self.watermark_blocks):
                break
            if self.prefix_cache:  # reference the cached blocks first, so allocating the rest cannot evict them
                kv.acquire(r, keys, hit, int(st.prompt[r]))
                st.computed[r] = hit_tokens
            kv.held[r] += need
            kv.num_free -= need
            admitted.append(r)
            chunks.append(chunk)
            budget -= chunk
        if not admitted:
            return _EMPTY, _EMPTY
        a = np.array(admitted, dtype=np.int64)
        st.waiting_keys = st.waiting_keys[len(admitted):]
        st.status[a] = Status.RUNNING
        st.running = np.concatenate([st.running, a])
        first = np.isnan(st.first_scheduled_s[a])
        st.first_scheduled_s[a[first]] = st.now_s
        st.prefill_start_s[a] = st.now_s
        return a, np.array(chunks, dtype=np.int64)
