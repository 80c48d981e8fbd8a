"""The scalar per-tick core for continuous batching, for every phase controller (prefill-first
vLLM V0 / SGLang / TensorRT-LLM / Orca, decode-first vLLM V1 / Sarathi-Serve, time slice, quota,
smart pre-emption), queue order, admission rule and KV layout.

NOTE: the policy is not restated here. Every tick asks the scheduler which kind of tick runs
(`sched.prefill_work`, `sched.tick_kind`: the phase controller and the suspension rule; then
`sched.observe` after it, exactly as `Scheduler._plan` and `Engine._advance_tick` do), the order of
a tick's steps is `schedulers/compose.py`'s `compose_tick` (the one `Scheduler._plan` calls; this
module supplies its steps, `_Steps`), and chunking and admission are `schedulers/rules.py`'s
functions. What this module adds is bookkeeping that makes
a tick O(1) in the number of decoders: decoders advance together (every tick that decodes advances
all of them by one token; prefill-only ticks leave them idle), so a decoder's context is `base + d`
with d the count of decoding ticks, it finishes at a decoding tick known when it starts decoding,
and on a paged cache it needs a new KV block exactly when that context is a multiple of the block
size (reserved admission and contiguous KV hold a fixed count from admission). A tick then costs a
few Python operations instead of ~80 NumPy calls. Per-request state is written back to the arrays
when the call ends.

With n > 1 samples per request (`workload.num_samples`) the samples of a decoder decode in lockstep, so the same
bookkeeping holds, with n in a decoder's price and blocks as the general path has them: a decoding tick's aggregates
count n decode tokens and sequences per decoder and n times its context (`Engine._advance_tick`); a decoder takes n
blocks where its context crosses a block boundary (`BlockManager.blocks_per_boundary`), and at its first decode one
more per further sample when its prompt ends in a partial block, which each of them copies
(`BlockManager.blocks_for`: the full prompt blocks are shared); it frees n x ceil(context / bs) less the shared
blocks it counted once per further sample. Prefills and admissions are the prompt's, as with one sample, but for a
recompute victim's, whose positions past the prompt count once per sample in the budget (`rules.chunk_tokens`:
`Scheduler.admit_samples`, `Scheduler.chunk_positions`) and hold a block table each (`BlockManager.blocks_for`).
A decode instance's decoder that joins with its prompt's last token to compute again is handed back; a paused run takes no joining decoders (`joinable`:
`_join_decoders` counts one sample).

Ticks are priced with the same `CostModel` arithmetic and integer aggregates as
`Engine._advance_tick`, so results are bit-identical (tests/sim_core/test_equivalence.py). An
all-decode stretch with 64 or more ticks before its next completion is priced as arrays
(`_price_decode_stretch`: CostModel.tick's array path, ends by np.add.accumulate, which adds in
order), cut where the tick-by-tick loop would stop (an arrival that may join, a decoder short of a
block, a guard), and its rows stay arrays to the write-back. A stateful phase controller is advanced
over an all-decode stretch in one call (`Scheduler.decode_run`, the controller's `decode_run` next to
its `choose` and `observe`: the same calls' arithmetic, tested against them). The core
stops, before changing anything for that tick, whenever the tick would need the general scheduler:
a chunk that must shrink to the free blocks (a chunk cut to SGLang's token room, `rules.cut_to_room`, is cut
here), a decoder short of blocks with the prefix cache or in a run that may pause, a pre-emption in a tick that swapped
a request in, a recompute victim with the prefix cache, a guard limit, nothing to run, or the end of the call.

Swap (issue 11, session 46; `swaps_here`: not with the prefix cache, fixed blocks or SGLang's token test): a victim is
swapped out by `Scheduler._preempt` in the run as a recompute victim is requeued (`_preempt_in_run`; which victims swap,
`Scheduler.swaps_out`, gives compose_tick's flags), the run keeps the swapped queue, compose_tick's swap-in step is
`_Steps.swap_in` (`Scheduler.swap_in_count`), the requests it takes join the run (`_swap_in_joins`), the tick's PCIe
time is `CostModel._tick_scalar`'s `swap_bytes`, and a swap-in that took nothing lets the unrolled all-decode loop run
to the next completion (`swap_blocked`). Swapping in a request the run swapped out goes on (session 48:
`_Again.swapped_in` files its decoding stretch before it apart, and it joins again as a decoder with its KV, its gap
from its last token in the run); admitting a recompute victim of the run under swap still ends it.

Pre-emption episodes (issue 11: "fast for every strategy"): a decoder short of a block, or a running prefill's chunk
short of blocks under chunk_short_of_blocks preempt, pre-empts by recompute here (`_Steps._preempt_for_decodes`,
`_Steps._preempt_for_chunks`): the victims are `Scheduler._victim_order`'s and `Scheduler._choose_victims`' over this
run's running requests, SGLang's retract `Scheduler.retract`'s, and what pre-empting does to the state
`Scheduler._preempt`'s, which the loop calls at the pre-empting tick (`_preempt_in_run`: the arrays given the victims'
state at that tick, the state's queue the run's, which takes the victims back). The run goes on past it (session 45:
a run ended at every pre-emption, ~0.5 ms of set-up and write-back each); it admits its own victims again (`_Again`:
their decoding stretch before filed apart, sessions 47-48, any n; under SGLang's token test too, session 51), but a
recompute victim under swap, whose admission hands that tick back (`_Steps._refuse_requeued`; the next run admits it). The victims wait, are admitted and prefill
again here (their prefill target is the state's: prompt + emitted) and their prefill ends in PREFILL_DONE, a gap from their last token before pre-emption (`Engine._advance_tick`'s).
Configurations it leaves to the scheduler and coalesced runs (`eligible`): static batches, dynamic batch sizing (its
batch-1 stretches run faster as vectorised runs), a deployment instance's closed-loop session turns (SlotState: the
deployment routes each next turn between its steps), and speculative decoding where `speculates_here` says no.

Speculative decoding (issue 11: "fast for every strategy"; `speculates_here`: a paged cache without the prefix cache,
any admission but SGLang's token test, a single engine or a replica that never pauses) runs here with a per-decoder
decode step (`_spec_decode`): a speculating decoder advances by its own 1..k+1 tokens a tick, so its extra tokens go
into its `base` (its context stays `base + d`, S their sum), its tokens still to emit and its blocks are its own
(`spec_left`, `spec_held`: the blocks `Scheduler._grow_decodes` gives it, its context plus `Scheduler.decode_slots`,
`_spec_grow`; a running prefill's chunk holds the draft's lookahead too, `Scheduler.kv_lookahead`), and it finishes when
its tokens run out. Each decoding tick takes the verify width (`Scheduler.verify_width`, which compose_tick also takes
for the token budget), the next B steps of the acceptance stream in batch order (`_SpecDraws`), each decoder's tokens
by the one rule (`speculative.tokens_emitted`), the verify aggregates and the draft's time (`verify_aggregates`,
`Speculator.draft_s`) and moves the Speculator's counters and emitted marks, as `Engine._advance_tick` does. A decoder
short of a block hands the tick back (pre-emption is the scheduler's here), and the batch log is kept tick by tick (a
decoder's blocks are not its context's).

A closed loop of clients (`workload.arrival.process = "closed_loop"`) runs here: its arrivals are not known in
advance, but each is written when a request finishes. At the end of a tick in which requests finish, the loop makes
`Engine._finish`'s own release (`SimState.release_closed_loop`: the tick's end, the count) and reads the next
arrival again (`st.arrival_s`, which it views), so a request sent at that end (think time 0) may join the next tick,
as in a general step. A release writes only arrival times still to come (ids at or past `st.next_release`, none
before the run's next arrival), and the run ends neither at a completion nor at a release (issue 11: the default preset's closed loop of 32 clients,
19 -> 2.4 us of CPU per tick; docs/performance.md). A phase controller whose choice is not idempotent (TimeSlice: a
switch may start a phase still out of credit) has its state put back when a tick it chose is handed back, so that
the scheduler's choice of that tick is the only one (`TimeSlice.state`).

Closed-loop multi-turn sessions (`workload.sessions`, one engine: SessionState) run here too: a finished turn releases
its session's next turn into the state's own queue of arrivals, whose order is not the ids' (first turns and released
turns merged by time), and a turn's queue key is given when it arrives, from its arrival rank. The loop takes each
arrival from the state (`SessionState.take_arrival`, the one statement of that order and key, which `admit_arrivals`
takes them through as well) into its queue by key, makes `Engine._finish`'s release at the end of a tick in which turns
finish (`SessionState.release_next_turns`: the finished turns, the tick's end) and reads the next arrival again from
the state (`next_arrival_s`); an array-priced stretch of a full batch counts the turns sent by each tick's start with
`SessionState.num_arrived_by`, as a coalesced run does (issue 11: vLLM V1's sessions of 4 turns, ~50 -> ~5 us of CPU
per tick; docs/performance.md, Multi-turn sessions).
"""

from __future__ import annotations

import bisect
import functools
import heapq
import itertools
import math
import struct
from typing import TYPE_CHECKING

import numpy as np

from sim_core.arrays import insert_sorted, isin
from sim_core.schedulers import compose, rules
from sim_core.schedulers.phase import TickKind
from sim_core.schedulers.plan import StepPlan
from sim_core.sessions import SessionState, SlotState
from sim_core.speculative import tokens_emitted, verify_aggregates
from sim_core.state import join_queue
from sim_core.types import Event, Phase, Status

if TYPE_CHECKING:
    from sim_core.engine import Engine

_NONE = np.empty(0, dtype=np.int64)
MAX_FAST_TICKS = 4096  # ticks per call: bounds the Python lists a call keeps before writing back
MIN_PRICED_TICKS = 64  # all-decode ticks before the next completion from which they are priced as arrays (measured: below ~50 the array calls cost more)
MAX_PRICED_TICKS = 1024  # ticks priced per array call (bounds the arrays)
RESERVE_WINDOW = 64  # request ids whose fixed block counts one NumPy call computes
# decoders of a speculative tick from which their tokens come from one array call of the acceptance rule (measured:
# ~22k instructions a call and ~0.9k a decoder, against ~1.9k a decoder one by one: `_spec_decode`)
SPEC_RULE_BY_ARRAYS = 32
OWN_GAPS_BY_INDEX = 8  # decoders with their own gap in a tick up to which each is put in place by a search (`_own_gaps`)
_DECODE_KIND, _PREFILL_KIND = TickKind.DECODE, TickKind.PREFILL  # (reading TickKind.X costs ~0.1 us per tick)
DECODE, PREFILL, MIXED, IDLE = int(Phase.DECODE), int(Phase.PREFILL), int(Phase.MIXED), int(Phase.IDLE)  # plain ints convert faster than enums
SWAP = int(Phase.SWAP)  # (a tick that only swaps requests in: no forward pass, `Engine._advance_tick`'s phase)
# What the loop records per tick (the other tick columns follow from these: result.TICK_COLUMNS). Fewer
# values per row: the rows' conversion to float64 costs ~20 ns per value.
_ROW = ("duration_s", "num_decode_tokens", "num_running", "num_waiting", "kv_blocks_used", "flops", "bytes",
        "is_compute_bound")  # (prefill tokens and sequences: only composed ticks have them, kept apart)


class _HandBack(Exception):
    """A step of the tick needs the general scheduler (raised before the step changed anything)."""


class _Steps:
    """The steps of `compose_tick` (schedulers/compose.py) on this module's integers; compose_tick
    decides which run and in which order. A step raises _HandBack, before changing anything, when
    the tick needs the general scheduler. `advance` sets the per-tick fields before each composed tick
    and reads `free` (blocks left as the steps allocate), `chunks` and `admit` back."""

    __slots__ = (
        "B",
        "R",
        "admit",
        "bs",
        "by_ratio",
        "chunks",
        "d",
        "finish_at",
        "fixed",
        "left_total",
        "free",
        "head",
        "held_fixed",
        "host_held",
        "is_chunked",
        "j",
        "kind",
        "kv_blocks",
        "may_preempt",
        "n",
        "need_d",
        "need_of",
        "base",
        "chunk_preempted",
        "chunk_preempts",
        "pc",
        "phase_count",
        "prefilling",
        "prompt_of",
        "requeued",
        "reserve",
        "running",
        "samples_admit",
        "samples_chunks",
        "sched",
        "seqs_left",
        "spec_ahead",
        "spec_chunk_held",
        "spec_held",
        "st",
        "swap_failed",
        "swap_taken",
        "swapped",
        "swapped_apart",
        "target_arr",
        "target_of",
        "target_view",
        "targets",
        "to_room",
        "undo",
        "victim_held",
        "victim_prefills",
        "victims",
        "waiting",
        "whole",
        "wm",
    )  # fmt: skip

    def __init__(self, phase_count, bs, fixed, pc, prefilling, target_arr, is_chunked, waiting, R, reserve, wm,
                 held_fixed, targets):  # fmt: skip
        self.phase_count, self.bs, self.fixed, self.pc = phase_count, bs, fixed, pc
        self.prefilling, self.target_arr, self.is_chunked = prefilling, target_arr, is_chunked
        self.waiting, self.R, self.reserve, self.wm, self.held_fixed = waiting, R, reserve, wm, held_fixed
        self.kind, self.j, self.need_d, self.B, self.head, self.seqs_left, self.free = TickKind.DECODE, 0, 0, 0, 0, 0, 0
        self.chunks: list[tuple[int, int, int]] = []  # (request, computed before, chunk)
        self.admit: list[tuple[int, int, int]] = []  # (request, cached prompt tokens, chunk): as `chunks`
        self.target_of = target_arr.item  # request -> its prefill target as a Python int
        self.target_view = memoryview(target_arr)  # ... by indexing (the common admission; `run_ticks`' views)
        # admission new_token_ratio: SGLang's KV token test (`_token_budget`) reads the decoders' outputs still to write
        # from `finish_at` at decoding tick `d` (set per composed tick), and the ratio and reservations of the scheduler
        self.by_ratio, self.sched, self.st, self.finish_at, self.d = False, None, None, None, 0
        self.to_room = False  # ... and with shrink, a running chunk is cut to its room (`Scheduler.chunk_to_room`)
        self.left_total = -1  # the decoders' outputs still to write, in total, when none is past the 4,096 clip; else -1
        # n > 1 samples with recompute victims (their positions past the prompt count once per sample in the budget, and
        # their samples' blocks there are their own): a victim waits (`samples_admit`: admission by
        # `Scheduler.admit_samples`) or one prefills (`samples_chunks`: chunks by `Scheduler.chunk_positions`), set by
        # the loop as victims are admitted and complete; `n`, `prompt_of` (request -> prompt) and `kv_blocks`
        # (`BlockManager.blocks_for`) for those steps
        self.samples_admit = self.samples_chunks = False
        self.n, self.prompt_of, self.kv_blocks = 1, None, None
        # Pre-emption by recompute of a decoder short of a block (`may_preempt`: `run_ticks` says where it runs here):
        # `running` and `base` are the loop's (running order; decoder -> context before decoding tick d, less d); the
        # tick's victims in pre-emption order, the blocks each held, and the running prefills among them (-> computed),
        # which leave `prefilling` before the chunk step; the loop takes the decoders out after compose_tick
        self.may_preempt, self.running, self.base = False, None, None
        self.chunk_preempts = False  # ... and a running prefill's chunk short of blocks pre-empts (`_preempt_for_chunk`)
        self.victims: list[int] = []
        self.victim_held: list[int] = []
        self.victim_prefills: dict[int, int] = {}
        self.undo = None  # (the running prefills and the ratio's state before a pre-emption: `undo_preempt`)
        # under swap, recompute victims this run pre-empted, waiting in `waiting`: admitting one hands the tick back
        # (`_refuse_requeued`; elsewhere the run admits them again: `run_ticks`' `again_here`)
        self.requeued: set[int] = set()
        self.chunk_preempted = False  # (this tick's chunk step pre-empted: no swap-in, no admission, `Scheduler._plan`'s)
        # Swap (`run_ticks`' `swaps`): the run's swapped queue (keys, oldest first: `st.swapped_keys`), request -> host
        # blocks (`BlockManager.host_held`), the requests this run swapped out whose host blocks are not their context's
        # (swapping one in hands the tick back: `run_ticks`' bookkeeping of a decoder that joins assumes that layout, as
        # `_host_layout_holds` at the call's start), and this tick's swap-ins (applied by the loop once the tick runs)
        self.swapped, self.host_held, self.swapped_apart, self.swap_taken = None, None, set(), ()
        self.swap_failed = False  # (this tick's swap-in took nothing: `run_ticks`' `swap_blocked`)
        # prefill -> its prefill target, read once when admitted (or at the call's start) and then looked up in a dict
        # (~60-100 instructions against ~300 for `ndarray.item`): a Sarathi-Serve prompt is read again in each of its
        # chunk ticks. A request's target does not change while it runs here; the steps write it for each admission.
        self.targets = targets
        # blocks an admission takes: (candidate index, chunk) -> blocks (Scheduler._admit's need_of)
        self.need_of = self._reserved if fixed else (lambda i, chunk: -(-chunk // bs))
        # watermark admission (`Scheduler.allocates_prompt`): an admission takes its whole prompt's blocks, so a running
        # prefill holds them and its chunks take none (set by `run_ticks`, with `need_of` `_reserved`)
        self.whole = False
        # speculative decoding: request -> blocks held (`run_ticks`' spec_held; None: not speculating), the draft's
        # lookahead slots a running prefill's chunk holds too (`Scheduler.kv_lookahead`), and the blocks each of the
        # tick's chunks leaves its request holding, (request, blocks), applied by the loop once the tick runs
        self.spec_held, self.spec_ahead, self.spec_chunk_held = None, 0, ()

    def _spec_chunks_need(self, chunks) -> int:
        """Blocks the (request, computed before, chunk) chunks of a speculative run take: `Scheduler._prefill_chunks`'
        need, the blocks for the context, the chunk and the draft's lookahead less those held (never fewer). Keeps
        what each will hold (`spec_chunk_held`)."""
        bs, ahead, held, need, after = self.bs, self.spec_ahead, self.spec_held, 0, []
        for r, c, chunk in chunks:
            h, x = -(-(c + chunk + ahead) // bs), held[r]
            if h > x:
                need += h - x
                after.append((r, h))
        self.spec_chunk_held = after
        return need

    def _reserved(self, i: int, chunk: int) -> int:
        return self.reserve(self.waiting[self.head + i] % self.R)

    def _prompt_blocks_past(self, w: int, hit: int, i: int, chunk: int) -> int:
        """`need_of` of candidate w under watermark admission with the prefix cache: its whole prompt's blocks past the
        `hit` blocks it finds cached."""
        return self.reserve(w) - hit

    def run_decodes(self) -> tuple[int, bool, bool]:
        free = self.free - self.need_d  # (need_d: the blocks the decoders take this tick, set with the tick's fields)
        if free < 0 or self.victims:  # a decoder is short of a block: pre-emption (the prefix cache: the general
            # scheduler's job); or a PREFILL tick's fallback after a chunk pre-empted; after a swap-in (a PREFILL tick's
            # fallback), the scheduler's too: its victims may be the requests swapped in, not yet in this run's state
            if not self.may_preempt or self.swap_taken:
                raise _HandBack
            return self._preempt_for_decodes()
        self.free = free
        if self.pc is not None and self.kind == _PREFILL_KIND:  # the fallback, after the chunk step's trim
            self.pc.trim(free)
        return self.B, False, False

    def run_chunks(self, left: int) -> int:
        # continuing prefills, in running order (prefilling's insertion order: admitted at the end)
        prefilling = self.prefilling
        if not prefilling:  # no running prefill: no chunk (self.chunks stays the tick's empty list)
            if self.pc is not None:
                self._evict_for_tick()
            return 0
        if self.samples_chunks:
            return self._run_chunks_samples(left)
        if len(prefilling) == 1:  # the common case: one prefill runs, without the lists and loops
            r, = prefilling  # (its key, then its value: ~400 instructions fewer than unpacking `items()`)
            c = prefilling[r]
            # (prefill_chunks of one prompt is its chunk_size, or nothing when that is <= 0)
            ch = rules.chunk_size(self.targets[r] - c, left, self.is_chunked)
            if ch <= 0:
                ch = 0  # (self.chunks stays the tick's empty list)
            else:
                if self.to_room:  # SGLang's add_chunked_req (`Scheduler._cut_to_room`): cut to the token budget's room
                    ch = rules.cut_to_room(ch, rules.rem_total_tokens(self.free, self.bs, self._running_reserved()))
                if not self.fixed and (not self.whole or self.spec_held is not None):  # the chunk's new blocks, ceil((c + ch) / bs) - ceil(c / bs) = (c - 1 + ch) // bs - (c - 1) // bs,
                    # which is ((c - 1) % bs + ch) // bs (c - 1 = k bs + q, 0 <= q < bs: the k cancels; c = 0 too): two integer
                    # operations fewer than the difference (~350 instructions per continuing chunk, one a Sarathi-Serve tick)
                    bs = self.bs
                    need = ((c - 1) % bs + ch) // bs if self.spec_held is None else self._spec_chunks_need(((r, c, ch),))
                    free = self.free - need
                    if free < 0:  # the chunk would have to shrink to the free blocks (the general path's case) or pre-empt
                        if not self.chunk_preempts:
                            raise _HandBack
                        if not self._preempt_for_chunks([(r, c, ch, need)]):
                            return 0  # (its own request went: no chunk runs)
                        free = self.free
                    self.free = free
                self.chunks = [(r, c, ch)]
            if self.pc is not None:
                self._evict_for_tick()
            return ch
        return self._run_chunks_many(left)

    def _run_chunks_many(self, left: int) -> int:
        """`run_chunks` with two or more running prefills. (Apart: its comprehension reads `targets`, which made that a
        cell, created at every call of `run_chunks`: ~600 instructions of each composed tick with one running prefill.)"""
        if self.to_room:
            raise _HandBack  # (several running prefills, each cut to the room the others leave: the general path's)
        pre_items = list(self.prefilling.items())
        targets, fixed, bs = self.targets, self.fixed or self.whole, self.bs  # (fixed: chunks take no new blocks)
        sizes = rules.prefill_chunks([targets[r] - c for r, c in pre_items], left, self.is_chunked)
        chunks = [(r, c, ch) for (r, c), ch in zip(pre_items, sizes) if ch > 0]
        need_p = tokens = 0
        for r, c, chunk in chunks:
            need_p += 0 if fixed else -(-(c + chunk) // bs) - -(-c // bs)
            tokens += chunk
        if self.spec_held is not None:  # (speculating: the draft's lookahead too, past the blocks each holds)
            need_p = self._spec_chunks_need(chunks)
        if need_p > self.free:  # chunks would have to shrink to the free blocks (the general path's case) or pre-empt
            if not self.chunk_preempts:
                raise _HandBack
            items = self._preempt_for_chunks([(r, c, ch, -(-(c + ch) // bs) - -(-c // bs)) for r, c, ch in chunks])
            chunks = [(r, c, ch) for r, c, ch, _ in items]
            tokens = sum(ch for _, _, ch in chunks)
        else:
            self.free -= need_p
        self.chunks = chunks
        if self.pc is not None:
            self._evict_for_tick()
        return tokens

    def _preempt_for_decodes(self) -> tuple[int, bool, bool]:
        """`Scheduler._grow_decodes` when the decodes' blocks are not all free (or, in a PREFILL tick's fallback, after a
        chunk pre-empted), on this run's state: victims in `Scheduler._victim_order` of the running requests (given as
        arrays: running order, which decode, what each emitted), chosen by `Scheduler._choose_victims` with the blocks
        each holds until the decodes' blocks fit (one round: without the prefix cache a victim frees every block it
        holds), SGLang's retract (`Scheduler.retract`). The blocks are `BlockManager.blocks_for`'s: a decoder of context
        x holds blocks_for(x) and needs blocks_for(x + 1) for its token. Running prefills among the victims leave
        `prefilling` now (the chunk step must not see them); the loop takes the decoders out of its state after
        compose_tick and applies `Scheduler._preempt` (what pre-empting does: requeue, recompute target, counts) in the
        run (`_preempt_in_run`). Raises _HandBack, before any change, when no decoder would
        be left (the scheduler then plans again at that instant). Returns compose_tick's (decodes left, pre-empted,
        swapped out)."""
        st, sched, blocks_for = self.st, self.sched, self.kv_blocks
        ids, is_dec, ctx, prompt = self._running_state()
        # (watermark admission: a running prefill holds its whole prompt's blocks, a decoder its context's, which is more)
        held = blocks_for(np.maximum(ctx, st.prefill_target[ids]) if self.whole else ctx, prompt)
        decodes = ids[is_dec]
        need = blocks_for(ctx[is_dec] + 1, prompt[is_dec]) - held[is_dec]  # (Scheduler.decode_slots: 1 on this path)
        deficit = int(need.sum()) - self.free
        if not decodes.size:
            raise _HandBack
        if deficit <= 0:  # (the fallback after a chunk's pre-emption: the decoders left fit)
            self.free = -deficit
            return decodes.size, False, False
        order = sched._victim_order(st, ids, lambda: (is_dec, np.where(is_dec, _emitted(ctx, prompt), 0)))
        at = dict(zip(ids.tolist(), range(ids.size)))
        in_order = np.array([at[r] for r in order.tolist()], dtype=np.int64)
        victims = sched._choose_victims(st, decodes, need, deficit, order=order, held=held[in_order])
        alive = ~isin(decodes, victims)
        if not alive.any():
            raise _HandBack
        self._keep_undo()
        for r, blocks in zip(victims.tolist(), held[in_order[: victims.size]].tolist()):
            self._take_victim(r, blocks)
        self.free -= int(need[alive].sum())
        if sched._by_ratio:
            left = decodes[alive]
            sched.retract(_emitted(ctx[is_dec][alive], prompt[is_dec][alive]).tolist(), st.output[left].tolist())
        if self.swapped is None:
            return int(alive.sum()), True, False
        # swap: which victims `Scheduler._preempt` (applied after the tick's steps, `_preempt_in_run`) swaps out and
        # which it recomputes, by its own rule: compose_tick's (pre-empted, swapped out)
        swaps = sched.swaps_out(self.victim_held, sched.kv.num_host_free)
        return int(alive.sum()), not all(swaps), any(swaps)

    def _running_state(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The running requests not pre-empted this tick, in running order, as `Scheduler._victim_order` reads them:
        (ids, which decode, context before this tick, prompt). A decoder's emitted count is its context less its prompt,
        plus 1 (`_emitted`, as the write-back writes it)."""
        rs = self._running_list()
        ids = np.fromiter(rs, np.int64, len(rs))
        is_dec, ctx = self._decoders_and_context(rs)
        return ids, is_dec, ctx, self.st.prompt[ids]

    def _running_list(self) -> list[int]:
        """The running requests not pre-empted this tick, in running order."""
        gone = self.victims
        return [r for r in self.running if r not in gone] if gone else list(self.running)

    def _context_of(self, r: int) -> int:
        """A running request's context before this tick: a prefill's computed tokens, a decoder's base plus the tick."""
        prefilling = self.prefilling
        return prefilling[r] if r in prefilling else self.base[r] + self.d

    def _decoders_and_context(self, rs: list[int]) -> tuple[np.ndarray, np.ndarray]:
        """Of these running requests: which decode, and the context of each (`_context_of`)."""
        prefilling, context_of = self.prefilling, self._context_of
        is_dec = np.fromiter([r not in prefilling for r in rs], bool, len(rs))
        return is_dec, np.fromiter(map(context_of, rs), np.int64, len(rs))

    def _decoders_of(self, rs: list[int]):
        """`Scheduler._victim_order`'s `decoders` of these running requests: which decode and what each emitted
        (`_emitted` of its context), built only if the rule reads them."""
        def decoders():
            is_dec, ctx = self._decoders_and_context(rs)
            return is_dec, np.where(is_dec, _emitted(ctx, self.st.prompt[rs]), 0)
        return decoders

    def _preempt_for_chunks(self, items: list[tuple[int, int, int, int]]) -> list[tuple[int, int, int, int]]:
        """`Scheduler._preempt_for_chunks` (chunk_short_of_blocks preempt) for the running prefills' chunks `items`
        ((request, computed, chunk, blocks it needs), in running order) whose blocks are not all free: each in turn takes
        its blocks; while they are not free, the running request pre-empted first (`Scheduler._victim_order`, of those
        left) is pre-empted (a decoder with the block this tick's decode step gave it, a prefill with its chunk's if it
        took them), and when that is the chunk's own request neither it nor a later chunk runs. Victims join `victims`
        as in `_preempt_for_decodes` (the loop takes them out after compose_tick and applies `Scheduler._preempt`,
        `_preempt_in_run`). Returns the items that run; `free` is what they leave."""
        st, sched, blocks_for, victims = self.st, self.sched, self.kv_blocks, self.victims
        grew = self.B and self.kind != _PREFILL_KIND  # (the decode step ran: each decoder holds its new block)
        self._keep_undo()
        taken: dict[int, int] = {}  # request -> the blocks its chunk took this tick
        stop = False
        for r, c, ch, need in items:
            if r in victims:  # (pre-empted for an earlier chunk)
                continue
            while need > self.free:
                self.chunk_preempted = True
                rs = self._running_list()
                v = int(sched._victim_order(st, np.fromiter(rs, np.int64, len(rs)), self._decoders_of(rs))[0])
                held = self._context_of(v)  # (Python ints: `BlockManager.blocks_for`'s scalar branch, not its arrays')
                if self.whole and v in self.prefilling:  # (it holds its whole prompt's blocks)
                    held = self.targets[v]
                grown = grew and v not in self.prefilling
                self._take_victim(v, int(blocks_for(held + 1 if grown else held, st.prompt.item(v))) + taken.pop(v, 0))
                if v == r:
                    stop = True
                    break
            if stop:
                break
            self.free -= need
            taken[r] = need
        return [x for x in items if x[0] in taken]

    def _keep_undo(self) -> None:
        """Before this tick's first pre-emption: the running prefills and SGLang's ratio as they are (`undo_preempt`)."""
        if self.undo is None:
            sched = self.sched
            self.undo = (dict(self.prefilling), (sched._ratio_base, sched._ratio_steps, sched._retracted))

    def _take_victim(self, r: int, held: int) -> None:
        """r is pre-empted this tick, freeing the `held` blocks it holds; a running prefill leaves `prefilling` now (the
        chunk step must not see it; the loop takes decoders out after compose_tick)."""
        self.victims.append(r)
        self.victim_held.append(held)
        self.free += held
        if r in self.prefilling:
            self.victim_prefills[r] = self.prefilling.pop(r)
            del self.targets[r]

    def _refuse_requeued(self, ids) -> None:
        """Raise _HandBack when admission would take a request this run pre-empted (`requeued`: its second decoding
        stretch would start in this run, whose write-back holds one per request); called before the admission changes
        anything (SGLang's token test noted included)."""
        requeued = self.requeued
        for w in ids:
            if w in requeued:
                raise _HandBack

    def undo_preempt(self) -> None:
        """A step after the pre-emption handed the tick back: the running prefills (in their order) and the ratio as they
        were, nothing pre-empted (the scheduler plans the tick again)."""
        prefilling, sched = self.prefilling, self.sched
        saved, (sched._ratio_base, sched._ratio_steps, sched._retracted) = self.undo
        for r in self.victim_prefills:
            self.targets[r] = self.target_of(r)
        prefilling.clear()
        prefilling.update(saved)
        self.victims, self.victim_held, self.victim_prefills, self.undo = [], [], {}, None
        self.chunk_preempted = False

    def swap_in(self) -> None:
        """compose_tick's swap-in step: `Scheduler._swap_in`'s rule (`Scheduler.swap_in_count`: oldest key first, within
        the batch cap and the blocks above the watermark) on this run's state, the running requests those left after
        this tick's pre-emptions and the blocks the steps before it left; none after a chunk's pre-emption
        (`Scheduler._plan`). The requests it takes and their blocks are applied by the loop once the tick runs (a request
        this run swapped out starts a second decoding stretch: `_Again.swapped_in`). Hands the tick back, before any
        change, when it would take a request this run swapped out holding other blocks than its context's
        (`swapped_apart`), or a recompute victim's prefill (its re-admission's bookkeeping is the scheduler's while it is
        swapped)."""
        if self.chunk_preempted:
            return
        swapped, R, host_held = self.swapped, self.R, self.host_held
        num = self.sched.swap_in_count(len(self.running) - len(self.victims), (host_held(k % R) for k in swapped),
                                       self.free)  # fmt: skip
        if not num:
            self.swap_failed = True
            return
        taken = [k % R for k in swapped[:num]]
        st, swapped_apart, target_of = self.st, self.swapped_apart, self.target_of
        for r in taken:
            if r in swapped_apart or st.emitted.item(r) and st.computed.item(r) < target_of(r):
                raise _HandBack
        self.swap_taken = taken
        self.free -= sum(map(host_held, taken))

    def _run_chunks_samples(self, left: int) -> int:
        """`run_chunks` with n > 1 samples while a recompute victim prefills (no prefix cache: `run_ticks`' entry): the
        chunks in positions from the token budget (`Scheduler.chunk_positions`, `_prefill_chunks`' own), cut to SGLang's
        room as `Scheduler._cut_to_room` cuts one running prefill; each chunk's new blocks `BlockManager.blocks_for`'s
        (past the prompt every sample has its own); the budget tokens `rules.chunk_tokens`' (`Scheduler._budget_tokens`)."""
        pre_items = list(self.prefilling.items())
        if self.to_room and len(pre_items) > 1:
            raise _HandBack  # (as `_run_chunks_many`: each cut to the room the others leave, the general path's)
        targets, prompt_of, n, blocks_for = self.targets, self.prompt_of, self.n, self.kv_blocks
        fixed = self.fixed or self.whole  # (chunks take no new blocks)
        prompts = [prompt_of(r) for r, _ in pre_items]
        sizes = self.sched.chunk_positions([c for _, c in pre_items], [targets[r] - c for r, c in pre_items], prompts, left)
        if self.to_room:
            sizes[0] = rules.cut_to_room(sizes[0], rules.rem_total_tokens(self.free, self.bs, self._running_reserved()))
        items = []
        need_p = 0
        for (r, c), ch, p in zip(pre_items, sizes, prompts):
            if ch > 0:  # (a running prefill holds blocks_for(c, p): `run_ticks`' entry)
                need = 0 if fixed else int(blocks_for(c + ch, p)) - int(blocks_for(c, p))
                need_p += need
                items.append((r, c, ch, need))
        if need_p > self.free:  # chunks would have to shrink to the free blocks (the general path's case) or pre-empt
            if not self.chunk_preempts:
                raise _HandBack
            items = self._preempt_for_chunks(items)
        else:
            self.free -= need_p
        self.chunks = [(r, c, ch) for r, c, ch, _ in items]
        return sum(rules.chunk_tokens(n, c, ch, prompt_of(r)) for r, c, ch, _ in items)

    def _admit_samples(self, left: int, num: int) -> tuple[int, int]:
        """`admit_waiting` with n > 1 samples while a recompute victim waits (no prefix cache: `run_ticks`' entry): the
        rule over the `num` candidates from the head, `Scheduler.admit_samples` (with SGLang's token test), the blocks
        `Scheduler.admission_blocks`' (`Scheduler._admit`'s need_of); returns (admitted, budget tokens)."""
        waiting, head, R, sched, st, fixed = self.waiting, self.head, self.R, self.sched, self.st, self.fixed
        tokens = None
        if self.by_ratio:
            if sched._token_full:  # (SGLang's batch_is_full: `Scheduler._admit`)
                return 0, 0
            tokens = self._token_budget()
        ids = _QueueIds(waiting, head, num, R)
        need_of = self.need_of if fixed else (lambda i, chunk: int(sched.admission_blocks(st, ids[i], chunk)))
        taken = sched.admit_samples(ids, self.target_of, self.prompt_of, left, self.free, need_of, tokens)
        if self.requeued and taken:
            self._refuse_requeued(ids[i] for i in range(len(taken)))
        if tokens is not None:
            sched.note_token_test(tokens)
        if not taken:
            return 0, 0
        admit = self.admit = []
        targets, target_of, prompt_of, n = self.targets, self.target_of, self.prompt_of, self.n
        free, used = self.free, 0
        for w, (chunk, need) in zip(ids, taken):
            admit.append((w, 0, chunk))
            targets[w] = target_of(w)
            if fixed:
                self.held_fixed[w] = need
            free -= need
            used += rules.chunk_tokens(n, 0, chunk, prompt_of(w))
        self.free = free
        return len(admit), used

    def _evict_for_tick(self) -> None:
        """Prefix cache, after the chunk step: the tick's marks (admissions and completions included) are at this
        tick, and with the decoder and chunk blocks taken, cached blocks evict as the block manager would."""
        pc = self.pc
        pc.tick_offset = self.j
        if pc._num_evictable > self.free:
            pc.trim(self.free)

    def _token_budget(self) -> rules.TokenBudget:
        """`Scheduler.token_budget` from this module's state: the decoders' outputs still to write (a decoder whose
        last token is at decoding tick `last` has last - d + 1 to write before tick d), x the ratio; plus the output
        of each running prefill whose chunk this tick completes its prompt (`Scheduler.output_reservation`: a recompute
        victim's output still to write; the state's emitted count, which a prefill's does not change before it ends)."""
        target_of = self.target_of
        done = [r for r, c, chunk in self.chunks if c + chunk >= target_of(r)]
        waiting, head, R = self.waiting, self.head, self.R
        return self.sched.token_budget_from(self.st, self._running_reserved(), done, lambda i: waiting[head + i] % R)

    def _running_reserved(self) -> float:
        """`rules.running_reservation` of the decoders before decoding tick `d` (`Scheduler.token_budget`'s)."""
        sched, d = self.sched, self.d
        if self.left_total >= 0:  # no output past the clip: its sum, kept by the loop, is the clipped sum
            return rules.scaled_reservation(self.left_total, sched.new_token_ratio)
        items = self.finish_at.items()
        return rules.running_reservation([last - d + 1 for last, _ in items], sched.new_token_ratio, [len(rs) for _, rs in items])

    def admit_waiting(self, left: int) -> tuple[int, int]:
        waiting, head, R = self.waiting, self.head, self.R
        num = len(waiting) - head  # candidates: waiting[head : head + num]
        seqs_left = self.seqs_left
        if self.victims:  # (a chunk pre-empted: no admission, `Scheduler._plan`'s `chunk_preempted`; decoders swapped
            if self.chunk_preempted:  # out, none recomputed: admission, in the slots they left, `Scheduler._admit`'s cap)
                return 0, 0
            seqs_left += len(self.victims)
        if seqs_left < num:
            num = seqs_left
        if num <= 0:
            return 0, 0
        if self.samples_admit:
            return self._admit_samples(left, num)
        if self.by_ratio and self.pc is None:  # SGLang's token test too: the rule over the queue
            sched = self.sched
            if sched._token_full:  # (SGLang's batch_is_full: `Scheduler._admit`)
                return 0, 0
            candidates = range(head, head + num)
            remaining = map(self.target_of, map(R.__rmod__, map(waiting.__getitem__, candidates)))
            tokens = self._token_budget()
            taken = rules.admit_in_order(remaining, left, self.free, self.wm, self.need_of, self.is_chunked, False, None,
                                         tokens)  # fmt: skip
            sched.note_token_test(tokens)  # (a victim of the run is admitted again: swap, which refuses it, is not here)
            admit = self.admit = _admitted(waiting[head : head + len(taken)], taken, R)
            targets, target_of = self.targets, self.target_of
            for w, _, _ in admit:
                targets[w] = target_of(w)
        elif self.pc is None:  # the queue's prompts, read lazily (the rule stops at the first that does not fit)
            # The common cases (one is admitted): admit_in_order's test of each candidate (`rules.admit_next`) on the
            # first, then on the second with what the first left, without the lazy maps and loops. A budget the first
            # spent admits no second (admit_next: chunk_size(_, budget <= 0, _) <= 0 stops admission; test_fastpath_steps).
            w, free, target_view = waiting[head] % R, self.free, self.target_view
            target = target_view[w]
            taken = rules.admit_next(0, target, left, free, self.wm, self.need_of, self.is_chunked, False)
            if taken is None:
                return 0, 0  # (self.admit stays the tick's empty list)
            chunk, need_w = taken
            if self.requeued and w in self.requeued:
                raise _HandBack  # (`_refuse_requeued`)
            if num == 1 or left <= chunk or rules.admit_next(1, target_view[waiting[head + 1] % R], left - chunk, free - need_w,
                                                             self.wm, self.need_of, self.is_chunked, False) is None:  # fmt: skip
                self.admit = [(w, 0, chunk)]
                self.targets[w] = target
                if self.fixed:
                    self.held_fixed[w] = need_w
                self.free = free - need_w
                return 1, chunk
            # two or more are admitted: the rule over the queue (pure without the prefix cache: read again)
            candidates = range(head, head + num)
            target_of = self.target_of
            remaining = map(target_of, map(R.__rmod__, map(waiting.__getitem__, candidates)))
            taken = rules.admit_in_order(remaining, left, free, self.wm, self.need_of, self.is_chunked, False)
            if self.requeued:
                self._refuse_requeued(w % R for w in waiting[head : head + len(taken)])
            admit = self.admit = _admitted(waiting[head : head + len(taken)], taken, R)
            targets = self.targets
            for w, _, _ in admit:
                targets[w] = target_of(w)
        else:
            # Prefix cache: Scheduler._admit_with_prefix_cache on this module's integers, candidate by candidate: the
            # same rule (admit_in_order's test of one candidate, `rules.admit_next`, with the token budget and free
            # blocks the admissions before it left; it stops at the first that does not fit), each prompt starting after
            # its longest cached prefix, looked up after the admissions before it (which may have evicted what it would
            # hit) and referenced (then the rest allocated, evicting as needed) as it is admitted, as the rule's
            # on_admit orders them. The blocks it takes (Scheduler._admit_with_prefix_cache's need_of): its chunk's new
            # blocks (`need_of`: the cached prefix is whole blocks, so ceil((cached + chunk) / bs) - hit =
            # ceil(chunk / bs)) and the evictable blocks it hits, which stop being free. The rule's test, blocks +
            # reserve > free, is the same with those evictable blocks counted in the reserve: no blocks function per
            # candidate. (Inline: a call per candidate cost more than the loop's own lines.) SGLang's token test
            # (admission new_token_ratio) comes first, on the prompt past its cached prefix and the free blocks the
            # admissions before it left, as in the scheduler's rule: `rules.admit_tested`, admit_in_order's test with
            # `tokens` (the evictable hits are in its free blocks, as in `Scheduler._admit_with_prefix_cache`'s).
            test = None
            if self.by_ratio:
                if self.sched._token_full:  # (SGLang's batch_is_full: `Scheduler._admit`)
                    return 0, 0
                test = self._token_budget()
            pc, target_of, targets, bs, wm, is_chunked, need_of = (self.pc, self.target_of, self.targets, self.bs, self.wm,
                                                                   self.is_chunked, self.need_of)  # fmt: skip
            lookup, admit_cached, admit_next = pc.lookup, pc.admit, rules.admit_next
            admit = None
            tokens, free = 0, self.free
            for i in range(head, head + num):
                w = waiting[i] % R
                t = target_of(w)
                handle, hit, evictable = lookup(w, t)
                cached = hit * bs
                if self.whole:  # (its whole prompt's blocks past the cached ones: `Scheduler.prefix_admission_blocks`)
                    need_of = functools.partial(self._prompt_blocks_past, w, hit)
                if test is None:
                    taken = admit_next(0, t - cached, left - tokens, free, wm + evictable, need_of, is_chunked, False)
                else:  # (candidate i - head: the budget's output reservation reads its request)
                    taken = rules.admit_tested(test, i - head, t - cached, left - tokens, free, wm + evictable, need_of,
                                               is_chunked, False)  # fmt: skip
                if taken is None:
                    break
                chunk, need = taken
                admit_cached(w, handle, hit, t)  # (the rule's on_admit, after the rule)
                free -= need + evictable
                if pc._num_evictable > free:  # (trim's own test, without the call)
                    pc.trim(free)
                targets[w] = t
                if admit is None:
                    admit = self.admit = []  # (else it stays the tick's empty list)
                admit.append((w, cached, chunk))
                tokens += chunk
            if test is not None:
                self.sched.note_token_test(test)
            if admit is None:
                return 0, 0
            self.free = free
            return len(admit), tokens
        if self.fixed:  # (two or more admitted: one returned above)
            self.held_fixed.update((w, need_w) for (w, _, _), (_, need_w) in zip(admit, taken))
        tokens, free = 0, self.free
        for chunk, need_w in taken:
            free -= need_w
            tokens += chunk
        self.free = free
        return len(admit), tokens


class _QueueIds:
    """The request ids of the queue keys waiting[head : head + num], each read when asked (admission reads the first
    one or two of up to hundreds)."""

    __slots__ = ("waiting", "head", "num", "R")

    def __init__(self, waiting: list[int], head: int, num: int, R: int):
        self.waiting, self.head, self.num, self.R = waiting, head, num, R

    def __getitem__(self, i: int) -> int:
        return self.waiting[self.head + i] % self.R

    def __iter__(self):
        R = self.R
        return (w % R for w in itertools.islice(self.waiting, self.head, self.head + self.num))


# (Comprehensions of `run_ticks`' rare cases, as functions: a comprehension there that reads a loop variable made it a
# cell of the generator, read and written through its cell on every tick: j, t_end, sync_s, base, prefilling.)
def _emitted(ctx, prompt):
    """A decoder's emitted tokens from its context (ints or arrays): its first token, then one per position past its
    prompt (the write-back writes it; a pre-emption reads it, `_running_state`, `_preempt_in_run`)."""
    return ctx - prompt + 1


def _decoders_last_tokens(running: dict, since, sync_s: float, base: dict, prefilling: dict) -> list[float]:
    """The last token time of each running decoder (`since(r, sync_s)`: its own, or the last decoding tick's end), in
    running order, when prefills run too (a request in `base` and not in `prefilling` decodes)."""
    return [since(r, sync_s) for r in running if r in base and r not in prefilling]


def _gaps_to(t_end: float, last_s: list[float]) -> list[float]:
    """The gaps to a tick that ends at `t_end` from each last token time in `last_s`, in order."""
    return [t_end - s for s in last_s]


def _admitted(keys: list[int], taken: list[tuple[int, int]], R: int) -> list[tuple[int, int, int]]:
    """The admissions `admit_in_order` took (`taken`: (chunk, blocks) each) of the queue keys `keys` (from the head), as
    `_Steps.admit`: (request, 0, chunk). (Its own function: a comprehension over R in `admit_waiting` made R a cell,
    created at every call.)"""
    return [(w % R, 0, chunk) for w, (chunk, _) in zip(keys, taken)]


def _enqueue(waiting: list, r: int, is_fcfs: bool, order_key: np.ndarray, head: int, class_end=None) -> None:
    """Request r arrives and joins the queue `waiting[head:]` (state.py's keys): FCFS appends its id; another queue
    order puts its key where `SimState.push_waiting` does (`state.join_queue`: in place, maybe at the head; with
    requeue append, `class_end`, at its class's end, where a pre-empted request may wait out of key order)."""
    if is_fcfs:
        waiting.append(r)
    else:
        join_queue(waiting, int(order_key[r]), head, class_end)


def _queue_arrivals(now: float, waiting: list, ptr: int, R: int, arrival_at, later_arrival_s, take_turn, is_fcfs: bool,
                    order_key: np.ndarray, head: int, class_end=None) -> tuple[int, float]:
    """The arrivals at or before `now` (at least one) join the queue, where a decode stretch's full batch leaves them: a
    request by its id (`_enqueue`), a session's turn by its key (`join_queue`). Returns (the next request id, the
    next arrival's time)."""
    while True:
        if ptr < R:
            _enqueue(waiting, ptr, is_fcfs, order_key, head, class_end)
            ptr += 1
        else:  # (a session's turn, by its key)
            join_queue(waiting, take_turn(now), head, class_end)
        next_arrival_s = arrival_at[ptr] if ptr < R else later_arrival_s()
        if next_arrival_s > now:
            return ptr, next_arrival_s


def _release_clients(release_closed_loop, think_s: float, finished: list[int], t_end: float) -> None:
    """A closed loop's release as `run_ticks` makes it for sessions (the finished requests, the tick's end):
    `Engine._finish`'s call, `SimState.release_closed_loop` with the end, the count and the think time. (Module level,
    bound with functools.partial: a closure would turn the loop's locals it reads into cells.)"""
    release_closed_loop(t_end, len(finished), think_s)


def _no_later_arrival() -> float:
    """`run_ticks`' next arrival once every request arrived in id order has (without sessions: none)."""
    return math.inf


def eligible(engine: Engine) -> bool:
    """Config-level conditions under which the fast path's rules are the scheduler's rules."""
    cfg = engine.cfg
    s = cfg.scheduler
    return (
        s.batching == "continuous"
        and not s.dynamic_batch.enabled  # a cap of 1 makes long batch-1 runs: the vectorised runs are faster
        # closed-loop session turns are released into SessionState's own queue of arrivals, which this path reads
        # (`run_ticks`' `take_turn`); a deployment's replica (SlotState) hands finished turns to the deployment, which
        # routes their next turns between its steps: its run ends at the tick that finishes one (`hands_turns`). (Not
        # an xPyD instance: there the run's ends at horizons belong to hand-offs and joins, left to the general step.)
        and (engine.workload.next_turn is None or isinstance(engine.st, SessionState) or (
            isinstance(engine.st, SlotState) and not engine.hand_off_prefilled and not engine.joins_prefilled))
        and (engine.spec is None or speculates_here(engine))
    )


def speculates_here(engine: Engine) -> bool:
    """Speculative decoding runs on this path (`run_ticks`' per-decoder decode step, `_spec_decode`) on a paged cache
    without the prefix cache, admitting by any rule but SGLang's token test (which reads every decoder's outputs still
    to write from finish ticks known in advance), in a single engine or a replica that never pauses or hands off. The
    rest (and a decoder short of a block: pre-emption) is the scheduler's, with coalesced speculative runs."""
    return (engine.prefix is None and not holds_fixed_blocks(engine) and not engine.sched._by_ratio
            and not engine.may_pause and not engine.hand_off_prefilled)


def _stretch_columns(rows: list[tuple], rows_from: int, blocks: list[tuple], blocks_from: int, tick_from: int):
    """(durations, decode tokens) of a stretch's ticks in order, from its rows run one by one (`rows`
    from `rows_from`) and its array-priced blocks (`blocks` from `blocks_from`; tick_from: its first tick)."""
    durs: list[float] = []
    tokens: list[int] = []
    at_row, tick = rows_from, tick_from
    for at, k, cols in blocks[blocks_from:]:
        one_by_one = rows[at_row : at_row + at - tick]  # the ticks before this block
        durs += [row[0] for row in one_by_one]
        tokens += [row[1] for row in one_by_one]
        at_row += at - tick
        durs += cols[0].tolist()
        tokens += [cols[1]] * k
        tick = at + k
    one_by_one = rows[at_row:]
    durs += [row[0] for row in one_by_one]
    tokens += [row[1] for row in one_by_one]
    return durs, tokens


def _rows_with_blocks(rows: list[tuple], blocks: list[tuple], n: int) -> np.ndarray:
    """The (n, len(_ROW)) float64 rows of a call: the array-priced stretches' columns (`blocks`) in their
    ticks, the ticks run one by one (`rows`, in tick order) in the others."""
    out = np.empty((n, len(_ROW)))
    one_by_one = np.ones(n, dtype=bool)
    for at, k, cols in blocks:
        seg = out[at : at + k]
        for c, values in enumerate(cols):
            seg[:, c] = values
        one_by_one[at : at + k] = False
    if rows:
        out[one_by_one] = _float64s(itertools.chain.from_iterable(rows), len(rows) * len(_ROW)).reshape(len(rows), len(_ROW))
    return out


def _price_decode_stretch(cost, B: int, ctx0: int, k: int, now: float, free: int, phase_count: list[int] | None, d: int,
                          bs: int):  # fmt: skip
    """k all-decode ticks of B decoders from context total ctx0 (tick i: ctx0 + i·B), priced by the cost
    model's array path (`CostModel.tick`, the same operations as its scalar path), their ends from `now`
    (np.add.accumulate adds in order: the loop's `now + dur`, tick after tick) and, on a paged cache, the
    blocks they take so far (decoders at a block boundary: `phase_count`), cut before the first tick short
    of blocks. Returns (ticks that can run, ends (k + 1,: ends[i] is tick i's start), dur, flops, bytes,
    compute-bound, blocks taken up to each tick (None: fixed))."""
    need = None
    if phase_count is not None:
        need = np.cumsum(np.array(phase_count, dtype=np.int64)[(d + np.arange(k)) % bs])
        short = np.flatnonzero(need > free)
        if short.size:
            k = int(short[0])
    ctx = np.arange(ctx0, ctx0 + k * B, B, dtype=np.int64)[:k]
    dur, flops, nbytes, is_comp = cost.tick(B, B, ctx + B, ctx, B)
    ends = np.empty(k + 1)
    ends[0] = now
    ends[1:] = dur
    np.add.accumulate(ends, out=ends)
    return k, ends, dur, flops, nbytes, is_comp, need


# At most this many (range, tick) pairs: `_range_max` takes each range's maximum over a mask of the ticks, a few NumPy
# calls; above it, a sparse table. A paused or cut run of ~12 ticks (lesson 14's closed-loop sessions under
# prefix_affinity: 4,412 write-backs) spent ~60 us a call building the table level by level in Python.
RANGE_MAX_MASK_CELLS = 4096


def _range_max(values: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """max(values[lo_i : hi_i + 1]) for each i (lo <= hi): over a mask of the ticks when small, else via a sparse
    table, O(T log T + R). Either takes the maximum of the same values: the same result."""
    T = values.size
    if T * lo.size <= RANGE_MAX_MASK_CELLS:
        ticks = np.arange(T)
        inside = (ticks >= lo[:, None]) & (ticks <= hi[:, None])
        return np.where(inside, values, -np.inf).max(axis=1)
    levels = max(int(T).bit_length(), 1)
    table = np.full((levels, T), -np.inf)  # table[k, i] = max(values[i : i + 2**k])
    table[0] = values
    for k in range(1, levels):
        w = 1 << (k - 1)
        table[k, : T - w] = np.maximum(table[k - 1, : T - w], table[k - 1, w:])
    k = np.log2(hi - lo + 1).astype(np.int64)
    return np.maximum(table[k, lo], table[k, hi - (1 << k) + 1])


def advance(engine: Engine) -> bool:
    """Run ticks on the fast path from the current state; False when not a single tick could be. (`run_ticks`
    driven to its end: at a horizon the engine's `horizon_reached` gives the next one; an engine that may not pause,
    `Engine.may_pause`, never pauses.)"""
    try:
        next(run_ticks(engine))
    except StopIteration as stop:
        return stop.value
    raise RuntimeError("a fast-path run paused in an engine that may not pause")


def run_ticks(engine: Engine):
    """`advance` as a generator that pauses at its horizon (issue 13: a cluster instance waits there for the others
    without ending its run). At its horizon it asks `Engine.horizon_reached`, and an engine that `may_pause` pauses
    where that leaves it waiting: it yields `(now, num_running_or_waiting, next_arrival, num_free, num_ticks, d,
    finish_at, prefilling, waiting, head, joinable, done_ticks)`: `Engine.horizon_reached`'s arguments, the ticks run so
    far, the live state `LiveLeft` reads (`done_ticks`: finish_at's keys as a heap), and whether decoders may join the
    paused run (`_join_decoders`); it takes
    `(new horizon, decoders that joined, blocks reserved meanwhile)` (a run at or past the horizon ends, written
    back) and returns `advance`'s value. While it is paused nothing but `Engine.add_request`, and with `joinable`
    `Engine.reserve` and `inject_prefilled` (whose requests it takes as `_join_decoders` says), may change the
    engine."""
    st, kv, cost, rec, lim, sched = engine.st, engine.kv, engine.cost, engine.rec, engine.cfg.limits, engine.sched
    running_arr = st.running
    # swap (`swaps_here`): requests swapped out before the call wait in the run's swapped queue and are swapped in here
    swaps = swaps_here(engine)
    if st.swapped_keys.size and not (swaps and _host_layout_holds(engine)):
        return False
    if engine.prefix is not None and holds_fixed_blocks(engine):
        # The prefix cache with fixed block counts (reserved admission, contiguous KV): the general path's. (Asked
        # first: after the NumPy checks below such a refusal cost every step ~20 us.)
        return False
    whole = engine.sched.allocates_prompt  # (watermark admission: a running prefill holds its whole prompt's blocks)
    ctx_arr = st.computed[running_arr]
    is_dec = ctx_arr >= st.prefill_target[running_arr]
    bs = kv.block_size
    fixed = holds_fixed_blocks(engine)
    if fixed:
        prompt_arr = st.prompt[running_arr]
        expected = kv.blocks_for(prompt_arr + st.output[running_arr], prompt_arr)
    elif engine.n == 1:
        expected = -(-(np.maximum(ctx_arr, st.prefill_target[running_arr]) if whole else ctx_arr) // bs)
    else:
        prompt_arr = st.prompt[running_arr]
        if np.any(ctx_arr[is_dec] < prompt_arr[is_dec]):
            return False  # a decode instance's decoder with its prompt's last token to compute again (general path)
        expected = kv.blocks_for(np.maximum(ctx_arr, st.prefill_target[running_arr]) if whole else ctx_arr, prompt_arr)
    speculating = engine.spec is not None  # (`eligible`: only where `speculates_here`)
    if speculating and engine.tokenless:
        return False  # (decoders injected with no token yet: their first decode's record is the general path's here)
    held_arr = kv.held[running_arr]
    if not speculating and np.any(held_arr != expected):
        # blocks held beyond the context (e.g. a chunk shrunk to the free blocks): general path. (Speculating, a request
        # holds the draft's lookahead past its context, and a decoder its verify positions: `spec_held`, read as held.)
        return False
    pc = engine.prefix  # issue 12: the prefix cache (None when off); its rules are PrefixCachingBlockManager's
    # Recompute victims (pre-empted, their KV dropped: `Scheduler._preempt`), waiting or mid-prefill, run here: their
    # prefill target counts what they emitted (the state's), they are admitted and chunked by the same rules (n > 1:
    # `Scheduler.admit_samples`, `Scheduler.chunk_positions`) and their prefill ends in PREFILL_DONE, their next token
    # after the one before pre-emption (`Engine._advance_tick`'s). Not with the prefix cache (a re-admission takes back
    # what it finds of its dropped KV) nor on a prefill instance (it hands off at first tokens): the general path's.
    victims_running = st.emitted[running_arr[~is_dec]]
    victims_waiting = int(np.count_nonzero(st.emitted[st.key_to_id(st.waiting_keys)])) if st.waiting_keys.size else 0
    if (pc is not None or engine.hand_off_prefilled) and (victims_waiting or victims_running.any()):
        return False
    if pc is not None and pc.dropped:
        return False  # one pre-empted mid-prefill waits: its re-admission takes back what it finds (general path)
    by_ratio = sched._by_ratio

    tick = cost._tick_scalar  # the same arithmetic as CostModel.tick on Python ints
    max_tokens = engine.cfg.scheduler.max_num_batched_tokens
    compose_tick = compose.compose_tick  # looked up per call: the one definition, however it is set
    # speculative decoding: the verify width's rule (None without speculation: compose_tick's `decode_tokens`), the
    # acceptance stream and the draft's price (`_spec_decode`), the KV slots a decoder holds past its context
    verify_width, spec, spec_slots = sched._verify_width, engine.spec, sched.decode_slots
    spec_draws = _SpecDraws(spec) if speculating else None
    spec_order = spec_grown = None
    spec_emitted, draft_s = 0, 0.0
    decode_tokens = sched._n * sched.decode_width  # budget tokens per decoder under DECODE_FIRST (1 on this path)
    tick_kind, observe, decode_run = sched.tick_kind, sched.observe, sched.decode_run
    kind_by_choice = sched.kind_by_choice
    # a phase controller whose `choose` must be made once per tick (TimeSlice.state): its state before a composed
    # tick's choice, put back when the tick is handed back to the scheduler, which then chooses it again
    phase_state = getattr(sched.phase, "state", None)
    saved_phase = None
    # the phase controller's one kind (DecodeFirst: Sarathi-Serve, vLLM V1), read instead of its call each composed tick,
    # as a plain int (compose_tick compares the kind up to four times: an int compares for ~100 instructions less)
    fixed_kind = None if sched.fixed_kind is None else int(sched.fixed_kind)
    policy_is_fixed = sched._repeat_is_fixed  # tick_kind depends on its arguments only, observe does nothing
    phase_is_fixed = sched._phase_is_fixed  # ... but for SGLang's new-token ratio (admission new_token_ratio)
    is_chunked = sched.is_chunked
    wm = sched.watermark_blocks
    arrival, target_arr, output_arr = st.arrival_s, st.prefill_target, st.output
    target_of = target_arr.item  # request -> a Python int
    # request -> its arrival (a Python float) and its output tokens (a Python int) by indexing memoryviews: the value
    # `ndarray.item` gives, for ~480 instructions less (the arrays are written in place, never resized, while a run holds
    # its views)
    arrival_at, output_of = memoryview(arrival), memoryview(output_arr)
    R = st.num_requests
    ptr = st.next_arrival
    num_ticks0 = rec.num_ticks
    tick_budget = lim.max_ticks - num_ticks0  # (an idle row open at the limit goes on in general steps: `Engine._idle_row_goes_on`)
    if engine.meter is not None:  # hand back to the engine loop for the server's budget checks
        tick_budget = min(tick_budget, engine.meter.ticks_until_check(engine))
    max_time = min(lim.max_sim_time_s, engine.horizon_s)  # cluster hook: stop where external input may arrive
    # Closed loop: requests that finish at a tick's end free their clients, who send the next requests after the think
    # time. `Engine._finish`'s own call (`SimState.release_closed_loop`, with the tick's end and the count), made at the
    # same tick's end, writes their arrival times into `st.arrival_s`, which `arrival_at` views: the loop then reads the
    # next arrival again, so a request sent at that end (think time 0) may join the next tick, as in a general step.
    think_s = engine.workload.closed_loop_think_s
    # Closed-loop sessions (SessionState): a finished turn releases its session's next turn into the state's own queue of
    # arrivals (`Engine._finish`'s call, `SessionState.release_next_turns`, made at the same tick's end), whose order is
    # not the ids' (first turns and released turns merged by time). Its pointer stays at R (ptr: no arrival in id order),
    # so the loop reads its next arrival from the state (`later_arrival_s`, SessionState.next_arrival_s) and takes each
    # arrival from it with its queue key (`take_turn`, SessionState.take_arrival, as its admit_arrivals takes them).
    # A deployment's replica under closed-loop sessions (SlotState, the deployment's): its arrivals are the slots routed
    # to it, in id order as any replica's, and a finished turn goes to the deployment (`Engine._finish`'s call,
    # `SlotState.release_next_turns`), which releases the session's next turn and routes it when it arrives. The run
    # ends at the end of the tick that finished it (`turn_out`), as a general step's coalesced run ends at a completion:
    # the deployment's horizons assume it (`Deployment._horizon`: "instance i itself stops its runs at its first
    # completion"), so no tick runs past a turn another replica may be sent (lesson 14's 4 replicas ran 3.2 s per side
    # in general steps, ~61 µs per tick)
    hands_turns = isinstance(st, SlotState)
    sessions = engine.workload.next_turn is not None and not hands_turns
    turn_out = False  # a tick of this run finished a turn (`hands_turns`): the run ends at its end
    # `Engine._finish`'s release, made with a tick's finished requests and its end (None: nothing is sent on a finish);
    # the next arrival is then read again (sessions: ptr stays at R, so from `later_arrival_s`)
    release = None
    if think_s is not None:
        release = functools.partial(_release_clients, st.release_closed_loop, think_s)
    elif sessions or hands_turns:
        release = st.release_next_turns
    take_turn = st.take_arrival if sessions else None
    later_arrival_s = st.next_arrival_s if sessions else _no_later_arrival

    # NOTE: -(-x // bs) is ceil(x / bs) in integers; a request holds exactly ceil(context / bs) blocks.
    # Decoders advance together: every tick that decodes advances all of them by one token, so a
    # decoder's context before the decoding tick numbered d (counting decoding ticks of this call) is
    # base + d. Ticks that only prefill (prefill-first policies) leave d unchanged.
    running0 = running_arr.tolist()
    # admission order, decoders and prefills mixed (as st.running); a dict for O(1) removal in order
    running: dict[int, None] = dict.fromkeys(running0)
    prefilling: dict[int, int] = {}  # request -> tokens computed so far (prompt not finished)
    targets: dict[int, int] = {}  # request -> its prefill target, for the call's prefills (`_Steps.targets`)
    base: dict[int, int] = {}  # decoder -> its context before decoding tick d, minus d
    join: dict[int, int] = {}  # decoder -> the first decoding tick number d at which it decodes (absent: 0)
    # decoder -> first tick whose shared gap is its gap: every decoder has one, in `base`'s order (the call's first
    # decoders 0, set with `base`; later ones as they start decoding), so the write-back reads it as a column
    sync_from: dict[int, int] = {}
    waiting_since: dict[int, float] = {}  # decoder -> its last token's time, when not the last decoding tick's end
    first_gap: dict[int, float] = {}  # decoder -> its gap at its first decoding tick, when it was waiting
    # decoders with no token yet (`Engine.inject_prefilled`, first_token_from = decode; waiting since NaN): their first
    # decoding tick emits their first token, no gap (`_decode_first_tokens`); decode_first: (decoder, that tick)
    tokenless: dict[int, None] = {}
    decode_first: list[tuple[int, int]] = []
    tick_gaps: dict[int, list[float]] = {}  # tick -> every decoder's gap, in running order, when some were their own
    finish_at: dict[int, list[int]] = {}  # decoding tick number -> decoders that emit their last token in it
    # n samples per request decode in lockstep (`workload.num_samples`): a decoding tick computes n tokens per decoder
    # over n contexts, and a decoder takes n blocks (one per sample) where its context crosses a block boundary
    n = engine.n
    copies = n - 1  # samples that copy the prompt's last partial block at their first decode (`kv.blocks_for`)
    # decoder -> blocks of its prompt that its samples share, beyond one copy (n > 1 only): past its prompt it holds
    # n x ceil(context / bs) - shared[r] blocks, kvcache.BlockManager.blocks_for's layout (full prompt blocks shared)
    shared: dict[int, int] = {}
    # blocks the decoders take at decoding ticks d with d % bs == r: n at each block boundary of a decoder's context, and
    # (n > 1) the copies of a partial last prompt block at its first decode, the next decoding tick's: `first_blocks`
    # of them, taken out of phase_count once that tick ran (0: none pending; decoders are in step from their first)
    phase_count = [0] * bs
    first_blocks = 0
    # recompute victims among the running prefills (admitted here or before the call) -> the tokens each emitted before
    # its pre-emption (the state's count, unchanged while it waits and prefills again); `victims_waiting`: those queued
    resumed: dict[int, int] = {}
    if victims_running.any():
        pre_ids = running_arr[~is_dec]
        resumed.update(zip(pre_ids[victims_running != 0].tolist(), victims_running[victims_running != 0].tolist()))
    emitted_of = memoryview(st.emitted)  # (request -> emitted, as `arrival_at`: a queued victim's at its admission)
    again: list[int] = []  # this tick's recompute victims whose prefill ends (PREFILL_DONE: their gap after its price)
    recomputed: list[tuple[int, int, int]] = []  # (request, tick, emitted count after it) of each PREFILL_DONE
    if copies or resumed:
        from sim_core.engine import samples_past_prompt  # (the tick's price of positions past the prompt, n > 1)
        prompt_of, kv_blocks_for = st.prompt.item, kv.blocks_for
    # Speculative decoding (`speculates_here`): a decoder advances by its own 1..k+1 tokens a tick, so its finish tick is
    # not known in advance and its blocks are not those of its context. Its extra tokens (all but one a tick) go into
    # `base`, so `base + d` is still its context and S their sum; `spec_left`: decoder -> tokens it has still to emit;
    # `spec_held`: decoder -> blocks it holds (its context's, its verify positions' and the draft's lookahead:
    # `Scheduler.decode_slots`, grown each decoding tick as `Scheduler._grow_decodes` grows them). `_spec_decode` is the
    # decode step of a tick; finish_at, phase_count and L stay empty.
    spec_left: dict[int, int] = {}
    spec_held: dict[int, int] = dict(zip(running0, held_arr.tolist())) if speculating else {}
    spec_batches: list[tuple] = []  # (tick, decoders' entries, blocks each held) of logged ticks (`_spec_batch_entries`)
    spec_seqs: list[int] = []  # decoders of each tick (its decode tokens are the positions verified)
    S = 0  # the decoders' contexts before decoding tick 0, summed over their samples: n x the sum of their base
    toks = 0  # a decoding tick's decode tokens: n x B
    # sum of decoders' last decoding tick + 1: L - B x d is their outputs still to write before decoding tick d (kept only
    # for SGLang's token test, which alone reads it, when no output reaches the clip: `unclipped`)
    L = 0
    B = 0
    last_token = st.last_token_s
    held_fixed: dict[int, int] = dict(zip(running0, expected.tolist())) if fixed else {}  # request -> its blocks
    smart = sched.cfg.smart_preemption.enabled

    reserved: dict[int, int] = {}
    joined_at: list[tuple[int, int]] = []  # (decoder, tick) of decoders that joined the paused run in a logged tick

    def reserve(w: int) -> int:
        """Blocks an admission that does not depend on its chunk takes (Scheduler._admit's need_of for reserve /
        contiguous: the whole request; watermark under chunked prefill: the whole prompt), `Scheduler.admission_blocks`
        over the next RESERVE_WINDOW request ids at once (arrivals are admitted mostly in id order: one NumPy call per
        window instead of one per request). A recompute victim's prefill target grows when it is pre-empted: the run
        forgets its entry then (`_preempt_in_run`'s caller)."""
        blocks = reserved.get(w)
        if blocks is None:
            # (only requests already known: a cluster instance learns its requests as they are routed,
            # some mid-call through `horizon_reached`; a single engine knows all R from the start)
            ids = np.arange(w, min(w + RESERVE_WINDOW, getattr(engine, "num_added", R)))
            # (chunks of one token: these rules read none, and contiguous KV's count only asks for a positive one)
            reserved.update(zip(ids.tolist(), sched.admission_blocks(st, ids, np.ones(ids.size, np.int64)).tolist()))
            blocks = reserved[w]
        return blocks

    dec_ids = running_arr[is_dec]
    behind = last_token[dec_ids] != st.now_s  # decoders that did not decode in the last tick (a prefill-only tick)
    if behind.any():
        waiting_since.update(zip(dec_ids[behind].tolist(), last_token[dec_ids[behind]].tolist()))
        if engine.tokenless:
            tokenless.update((r, None) for r, last_s in waiting_since.items() if last_s != last_s)
    if copies and not fixed and dec_ids.size:  # (fixed: every block held from admission)
        dec_prompt = st.prompt[dec_ids]
        shared.update(zip(dec_ids.tolist(), (copies * (dec_prompt // bs)).tolist()))
        # (a decoder still at its prompt has not decoded: its first decode copies a partial last block)
        first_blocks = copies * int(np.count_nonzero((ctx_arr[is_dec] == dec_prompt) & (dec_prompt % bs != 0)))
        phase_count[0] += first_blocks  # (at decoding tick 0)
    for r, c, is_d, left_to_emit in zip(running0, ctx_arr.tolist(), is_dec.tolist(),
                                        (output_arr[running_arr] - st.emitted[running_arr]).tolist()):  # fmt: skip
        if not is_d:
            prefilling[r] = c
            targets[r] = target_of(r)
            continue
        base[r], sync_from[r] = c, 0
        if speculating:  # (its finish tick is not known in advance: `_spec_decode`)
            spec_left[r] = left_to_emit
            S += c
            continue
        finish_at.setdefault(left_to_emit - 1, []).append(r)
        phase_count[(-c) % bs] += n
        S += c * n
        L += left_to_emit
    B = len(base)
    toks = B * n
    # finish_at's keys as a heap: its smallest (the next completion) without a scan of every key (issue 11e: a `min`
    # over ~40 keys at each completion and each decode stretch cost ~5% of a Sarathi-Serve run). Keys only leave from
    # the smallest end: the key popped is the decoding tick d, and no key is below d. (A sorted list is a heap.)
    done_ticks = sorted(finish_at)
    waiting = st.waiting_keys.tolist()  # queue keys (state.py: the id under FCFS; key % R is the id)
    head = 0  # waiting[head:] is the queue
    is_fcfs = sched.is_fcfs
    order_key = st.order_key
    class_end = st.class_end if st.requeue_appends else None  # (`_enqueue`)
    free = kv.num_free

    rows: list[tuple] = []  # one row per tick: the values of _ROW (the tick's other columns follow from them)
    row_blocks: list[tuple] = []  # (first tick, ticks, _ROW columns: arrays or constants) of array-priced stretches, not in `rows`
    # tick, prefill tokens, prefill sequences of each composed tick, flat (appended one by one, no tuple kept per tick;
    # a flat list converts at ~2/3 of the per-value cost of chaining tuples)
    prefill_rows: list[int] = []
    scheduled: list[tuple[int, int]] = []  # (request, tick admitted)
    first_token: list[tuple[int, int]] = []  # (request, tick its prompt completed)
    finished: list[tuple[int, int, int]] = []  # (request, tick, decoding tick number)
    # The batch log's decoder entries follow from each decoder's stretch of decoding ticks (write-back);
    # only the prefill entries of a logged tick are kept as it runs.
    batch_extras: dict[int, list[tuple[int, int, int]]] = {}  # logged tick -> its prefill chunks, then admissions: (request, computed before, tokens)
    # watermark admission: a logged prefill holds its whole prompt's blocks, which the write-back reads from its prefill
    # target, except that a recompute victim's grows when the run pre-empts it: (victim, tick, its target before), so
    # its entries before that tick read the old one (recorded per pre-emption: per logged tick it cost ~4.5k instructions)
    retargets: list[tuple[int, int, int]] = []
    want_batches = max(lim.num_recorded_batches - num_ticks0, 0)
    now0 = now = st.now_s
    sync_s = now  # end of the last decoding tick (the last token of every decoder not in waiting_since)
    j = d = 0
    tick_budget = min(tick_budget, MAX_FAST_TICKS)
    next_arrival_s = arrival_at[ptr] if ptr < R else later_arrival_s()
    num_blocks = kv.num_blocks
    # A stateless policy that admitted nothing from a waiting queue admits nothing until a completion
    # frees blocks or a batch slot: the budget, the free blocks (they only shrink) and the queue head
    # are unchanged, arrivals join the tail.
    admission_blocked = False
    # ... and under swap, one whose swap-in took nothing takes nothing until a completion or a pre-emption: the swapped
    # queue's head, its host blocks and the batch are unchanged and the free blocks only shrink (`Scheduler.swap_in_count`'s
    # test). Its ticks then decode every decoder whatever their kind (compose_tick: decodes, no chunk, a swap-in that
    # takes nothing, so the PREFILL tick's fallback), and run in the unrolled loop below, which stops at a completion.
    swap_blocked = False
    steps = _Steps(phase_count, bs, fixed, pc, prefilling, target_arr, is_chunked, waiting, R, reserve, wm, held_fixed,
                   targets)  # fmt: skip
    if fixed_kind is not None:  # (every composed tick's kind: stored once, not per tick)
        steps.kind = fixed_kind
    unclipped = False
    if by_ratio:
        steps.by_ratio, steps.sched, steps.st, steps.finish_at = True, sched, st, finish_at
        steps.to_room = sched.chunk_to_room
        unclipped = int(output_arr.max()) <= rules.CLIP_MAX_NEW_TOKENS  # (no request's output reaches the clip)
    steps.sched, steps.st = sched, st
    if whole:
        steps.whole, steps.need_of = True, steps._reserved
    if speculating:
        steps.spec_held, steps.spec_ahead = spec_held, sched.kv_lookahead
    # A decoder short of a block pre-empts by recompute here (`_Steps._preempt_for_decodes`; the run goes on past that
    # tick); swap, the prefix cache, SGLang's old retract headroom, a cluster's run that may pause and fixed blocks (which
    # never run short) leave it to the scheduler
    # The run's pre-emptions (the run goes on past them): (the victims `Scheduler._preempt` pre-empted, tick) each; each
    # pre-emption's victims and what it left of their computed and emitted counts (`_preempt_in_run`); the decoder
    # victims -> their last decoding tick number (insertion order: the order they were pre-empted in); the victims
    # waiting in `waiting` (admitting one hands the tick back, unless `again_here`: below)
    episodes: list[tuple[np.ndarray, int]] = []
    kept: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    dec_victims: dict[int, int] = {}
    requeued: set[int] = set()
    preempted_now = False  # (this tick pre-empted)
    # A victim of the run admitted again in it (`_Again`: its first decoding stretch filed apart at that admission, so
    # its run-local entries start again; n > 1: admitted by `Scheduler.admit_samples` while one waits, session 48), and
    # under swap one swapped in again (`_Again.swapped_in`, any n: `Scheduler.swap_in_count`'s swap-in, no admission rule
    # asked), which resumes decoding with its KV, a decoder that joins; under SGLang's token test (session 51) admitted
    # by that test, whose output reservation of a victim reads the emitted count `_preempt_in_run` wrote, as for a
    # victim from before the run. Admitting a recompute victim of the run under swap hands that tick back (`requeued`).
    # (`again_here` is None only where the core does not pre-empt.)
    again_here = None
    if preempts_here(engine) and not (sched.use_swap and not swaps):
        steps.may_preempt, steps.running, steps.base, steps.kv_blocks = True, running, base, kv.blocks_for
        steps.chunk_preempts = sched.chunk_preempts and not by_ratio  # (SGLang's chunk is cut to its room: shrink)
        again_here = _Again(requeued, dec_victims)
        if swaps:
            steps.requeued = requeued
    # Swap (`swaps_here`): `Scheduler._preempt` swaps victims out in the run (`_preempt_in_run`, as it recomputes them),
    # compose_tick's swap-in step is `_Steps.swap_in` (the scheduler's rule), and the requests it takes join the run
    # (`_swap_in_joins`). The run's swapped queue (keys, oldest first), the swap-ins' and swap-outs' events (ids, tick,
    # kind), and (tick, requests swapped out after it, blocks moved) of each tick with swapped requests or a swap
    swapped: list[int] = st.swapped_keys.tolist()
    swap_events: list[tuple[np.ndarray, int, Event]] = []
    swap_rows: list[tuple[int, int, int]] = []
    swap_in_step = None
    if swaps:
        steps.swapped, steps.host_held, swap_in_step = swapped, kv.host_held.item, steps.swap_in
    block_bytes = engine.memory.block_bytes
    if copies:
        steps.n, steps.prompt_of, steps.kv_blocks = n, prompt_of, kv_blocks_for
        steps.samples_admit, steps.samples_chunks = victims_waiting > 0, bool(resumed)
    run_decodes, run_chunks, admit_waiting = steps.run_decodes, steps.run_chunks, steps.admit_waiting
    no_steps: list = []  # a tick's chunks and admissions before its steps set them (never appended to)
    prefill_work = sched.prefill_work
    # A stateless policy without the prefix cache may stop trying admission (admission_blocked, above)
    may_block = pc is None and policy_is_fixed
    cap = sched.batch_cap  # fixed on this path (`eligible`: no dynamic batch sizing)
    # prefill_work's can_admit, read once (the cap is fixed): a call fewer per composed tick (~800 instructions)
    join_cap = sched.join_cap()
    # A prefill-pool instance (`hands_off`): prompts that complete leave at their first token (`_hand_off`), between
    # requests it idles inside the run (`Engine.idle_end_s`; idle rows end at `idle_ends`), and the run pauses after every
    # row (or idle step that extends one): where a general step would end. Unless its horizon holds until its own hand-offs
    # (`Engine.runs_to_horizon`: it holds no handed-off KV, so only arrivals still to be routed can reach it, and the
    # horizon is the next of them): then it goes on to the horizon, or to the earliest release of KV handed off in the run
    # (`release_s`), where the cluster must have taken the hand-offs. Its rows do not depend on where it pauses (idle rows
    # merge, `Engine.merge_idle_rows`), and nothing the cluster reads of it between rows before then changes what it does
    # there: the decode pool's horizons take its clock as a bound on its next hand-off, which a later clock keeps
    hand_off = engine.hand_off_prefilled
    pausable = engine.may_pause  # (`Engine._run_fast`: it drives the run and pauses it; else `advance`)
    runs_on = hand_off and engine.runs_to_horizon
    release_s = math.inf  # the earliest release of KV handed off since the run was last resumed (`runs_on`)
    handing: list[int] = []  # this tick's hand-offs
    handed: list[int] = []  # every hand-off of the run
    j_paused = 0  # rows run at the last pause (or the start), merged idle rows included
    idle_ends: dict[int, float] = {}  # idle row -> its end (the next arrival or the horizon, not its start + gap)
    # `Engine.merge_idle_rows`: an idle row that goes on from the last idle row (no row between, the same blocks in use)
    # extends it, as `Engine._record_idle` does: the last one recorded before the run (`idle_j` 0, the engine's
    # `open_idle_row`), or this run's (row `idle_j` - 1); `merged` counts them (the run pauses after each, as after a row)
    merge = engine.merge_idle_rows
    idle_j, idle_from, idle_used, merged = -1, 0.0, -1, 0
    if merge and (last := engine.open_idle_row()) is not None and last[3][:2] == (0, 0) and last[3][3] == cap:
        idle_j, idle_from, idle_used = 0, last[1], last[3][2]
    peak_in_tick = 0  # the most blocks in use during a tick that freed some at its end (`Engine.kv_peak_in_tick_blocks`)
    while j < tick_budget:
        # (`runs_on`: it pauses where it would wait for input, nothing queued or running and no arrival routed to it: the
        # loop steps no instance without work, and takes releases while it waits at its clock, as a general step's)
        if now >= max_time or hand_off and j + merged > j_paused and (
                not runs_on or next_arrival_s == math.inf and not running and head == len(waiting)):  # fmt: skip  # cluster hook: at the horizon the cluster may add
            if turn_out or now >= max_time >= lim.max_sim_time_s:  # requests here and let the run go on (a prefill instance:
                break  # after each row); a finished turn goes to the deployment first
            j_paused = j + merged
            num_in_run = len(running) + len(waiting) - head
            # The cluster's answer here, in the run (issue 13: cost; a yield to the engine and a resume for every routing
            # instant a replica's run reaches cost ~3k instructions more): it pauses only where it must wait, after a
            # tick at least, with requests running or queued (a prefill instance after every row, where a general step
            # ends, with nothing to run as well: one run lives across its requests), and takes the horizon it is sent then
            # (swapped-out requests are outstanding and waiting too: a run that may pause never swaps, `preempts_here`,
            # but the cluster's unpaused reference does, and its routers read what a run ended here would write back)
            horizon = engine.horizon_reached(now, num_in_run + len(swapped), ptr, free, len(waiting) - head + len(swapped))
            if not (pausable and j_paused and (hand_off or horizon <= now and num_in_run)):
                joined, num_reserved = (), 0
                # (a decode instance of the cluster's unpaused reference ends where it would pause: `Engine.num_in_run`)
                if not pausable and j_paused and horizon <= now and num_in_run and engine.joins_prefilled:
                    engine._ended_in_run = not fixed and pc is None and not copies
            else:  # (joinable: paged, no prefix cache, one sample, `_join_decoders`' blocks and tokens)
                horizon, joined, num_reserved = yield (now, num_in_run, ptr, free, j_paused, d, finish_at, prefilling, waiting,
                                                       head, not fixed and pc is None and not copies, done_ticks)  # fmt: skip
            # blocks reserved for transfers while the run was paused (negative: a prefill instance's blocks released,
            # `Engine.release`; its runs never block admission: each tick prefills, no tick decodes only)
            free -= num_reserved
            if joined:  # decoders that joined (not a prefill instance's release, nor a decode run's reservation alone:
                # no call with nothing to join, once per request on each side of 2P2D)
                if j < want_batches:  # (the batch log lists them from tick j, after the admissions before it)
                    joined_at.extend(zip(joined, itertools.repeat(j)))  # ((r, j) each: a genexpr over j made it a cell)
                S, B, L = _join_decoders(engine, joined, d, j, sync_s, running, base, join, sync_from, waiting_since,
                                         finish_at, done_ticks, phase_count, S, B, L, tokenless)  # fmt: skip
                toks = B  # (one sample: `joinable`)
            if (max_time := min(lim.max_sim_time_s, horizon)) <= now:
                break
            runs_on, release_s = hand_off and engine.runs_to_horizon, math.inf  # (the cluster has taken its hand-offs)
            next_arrival_s = arrival_at[ptr] if ptr < R else later_arrival_s()
        while next_arrival_s <= now:
            if ptr < R:
                _enqueue(waiting, ptr, is_fcfs, order_key, head, class_end)
                ptr += 1
            else:  # (a session's turn, by its key)
                join_queue(waiting, take_turn(now), head, class_end)
            if not is_fcfs:  # by key it may take the head: admission is worth trying again
                admission_blocked = False
            next_arrival_s = arrival_at[ptr] if ptr < R else later_arrival_s()
        if speculating and B and not prefilling and (head == len(waiting) or len(running) >= cap or admission_blocked):
            # No prefill work, speculating: the unrolled loop below with each decoder's own tokens (`_spec_decode`;
            # no array-priced stretches: a tick's contexts follow from the draws before it). Every tick decodes
            # every decoder; it stops where the loop below would compose a tick (an arrival that may join, a
            # completion that makes room) or hand one back (a decoder short of a block).
            j_before, run_start_s = j, now
            num_running, num_waiting = len(running), len(waiting) - head
            spec_durs: list[float] = []  # (the phase controller's `decode_run`: durations and tokens emitted)
            spec_tokens: list[int] = []
            spec_order = list(running)  # (every running request decodes)
            while j < tick_budget and now < max_time:
                if next_arrival_s <= now:
                    if num_running < cap and (not admission_blocked or not is_fcfs):
                        break  # it could be admitted: the loop below
                    ptr, next_arrival_s = _queue_arrivals(now, waiting, ptr, R, arrival_at, later_arrival_s, take_turn,
                                                          is_fcfs, order_key, head, class_end)  # (the batch is full)
                    num_waiting = len(waiting) - head
                elif num_waiting and num_running < cap and not admission_blocked:
                    break  # a completion made room for a waiting request
                spec_grown, need_d = _spec_grow(spec_order, base, spec_held, d, spec_slots, bs)
                if need_d > free:
                    break  # (the loop below hands the tick back: pre-emption is the scheduler's)
                free -= need_d
                ctx, num_dec, order_tick = S + B * d, B, spec_order
                D, pairs, draft_s, spec_emitted, done, freed, S, spec_order = _spec_decode(
                    spec, spec_draws, verify_width, order_tick, spec_grown, base, spec_left, spec_held, d, S, finished, j)  # fmt: skip
                dur, flops, nbytes, is_comp = tick(D, D, pairs, ctx, num_dec, 0.0)  # (the loop below's, P = A = 0)
                spec.draft_time_s += draft_s
                dur += draft_s
                spec.log_tick_emitted(num_ticks0 + j, spec_emitted)
                if j < want_batches:
                    spec_batches.append((j, order_tick, spec_grown, (), ()))
                if waiting_since:  # their first gap is their own; the tick's gaps in running order (all decode)
                    tick_gaps[j] = _own_gaps(running, waiting_since, now + dur, sync_s, first_gap, sync_from, j + 1)
                if done is not None:
                    if num_blocks - free > peak_in_tick:  # (in use during the tick: its finishing decoders free theirs)
                        peak_in_tick = num_blocks - free
                    free += freed
                    for r in done:
                        del running[r]
                    B -= len(done)
                    toks = B
                    num_running = len(running)
                    admission_blocked = False
                rows.append((dur, D, num_running, num_waiting, num_blocks - free, flops, nbytes, is_comp))
                spec_seqs.append(num_dec)
                if not policy_is_fixed:
                    spec_durs.append(dur)
                    spec_tokens.append(spec_emitted)
                now += dur  # (the tick's end: `now + dur`, as everywhere)
                j += 1
                d += 1
                if done is not None:
                    if release is not None:  # (closed loop: the clients send their next requests; sessions: next turns)
                        release(done, now)
                        next_arrival_s = arrival_at[ptr] if ptr < R else later_arrival_s()
                        if hands_turns:  # (the run ends here: `turn_out`)
                            turn_out, max_time = True, now
                    if not B:
                        break
            if j > j_before:
                if not policy_is_fixed:  # the scheduler's tick_kind and observe for each of these ticks, in one call
                    if phase_is_fixed:
                        sched.decode_ticks(j - j_before)
                    else:
                        decode_run(run_start_s, spec_durs, spec_tokens)
                sync_s = now  # every tick of the loop decoded
                continue
            # no tick ran (a decoder short of a block, or room for an arrival): the loop below
        if B and not prefilling and (head == len(waiting) or len(running) >= cap or admission_blocked or swap_blocked) and not (
                first_blocks or speculating or swapped and not swap_blocked):  # fmt: skip  # (swapped: a swap-in may take one)
            # No prefill work (nothing prefills; nothing waits, or the batch is full): every policy decodes
            # every decoder (Scheduler._plan); the loop below for that case, unrolled. Its row counts change
            # only at an arrival or a completion, so they are kept as locals. Decoders whose last token is
            # not the last decoding tick's (`waiting_since`: after a prefill-only tick) get their own gaps
            # in the first tick, as in the loop below. (A first decode's block copies, n > 1: the loop below.)
            j_before, run_start_s, scalar_until = j, now, 0
            rows_before, blocks_before = len(rows), len(row_blocks)
            num_running, num_waiting = len(running), len(waiting) - head
            next_done = done_ticks[0]  # the next decoding tick in which a decoder emits its last token
            # prefix cache: each tick's trim (below) is kept as (tick, free blocks) and applied with the others
            # before the cache is next used (PrefixCache.trim_marked); `evictable` is the count they leave
            trims: list[int] = []
            evictable = pc._num_evictable if pc is not None else 0
            while j < tick_budget and now < max_time:
                if next_arrival_s <= now:
                    if num_running < cap and (not admission_blocked or not is_fcfs) and not swap_blocked:
                        break  # it could be admitted: the loop below
                    ptr, next_arrival_s = _queue_arrivals(now, waiting, ptr, R, arrival_at, later_arrival_s, take_turn,
                                                          is_fcfs, order_key, head, class_end)  # (the batch is full)
                    num_waiting = len(waiting) - head
                elif num_waiting and num_running < cap and not admission_blocked and not swap_blocked:
                    break  # a completion made room for a waiting request
                if next_done - d >= MIN_PRICED_TICKS and j >= scalar_until and not waiting_since:
                    # A long stretch before the next completion: the same ticks priced as arrays (below)
                    k = min(next_done - d, tick_budget - j, MAX_PRICED_TICKS)
                    # an arrival ends it (swapped requests: none is admitted before they are swapped in)
                    joins = num_running < cap and (not admission_blocked or not is_fcfs) and not swap_blocked
                    limit_s = min(next_arrival_s, max_time) if joins else max_time
                    if limit_s < math.inf:  # ticks only lengthen as contexts grow: a bound from this one's
                        ctx = S + toks * d
                        k = min(k, int((limit_s - now) / tick(toks, toks, ctx + toks, ctx, toks, 0.0)[0]) + 1)
                    if k < MIN_PRICED_TICKS:
                        scalar_until = j + k  # (the limit is that close: tick by tick until it passes)
                    else:
                        k, ends, dur_a, flops_a, bytes_a, comp_a, need_a = _price_decode_stretch(
                            cost, toks, S + toks * d, k, now, free, None if fixed else phase_count, d, bs)  # fmt: skip
                        starts = ends[:k]
                        stop = int(np.searchsorted(starts, limit_s, side="left"))  # first tick starting at the limit
                        if stop < k:
                            k = stop
                        if k:
                            if joins:
                                waits = num_waiting
                            else:  # arrivals by a tick's start join the queue before it (the batch is full)
                                if sessions:  # (the state's own count: its arrivals are not in id order)
                                    arrived = st.num_arrived_by(starts[:k])
                                else:
                                    arrived = np.searchsorted(arrival[ptr:R], starts[:k], side="right")
                                waits = arrived + num_waiting
                                for _ in range(int(arrived[k - 1])):
                                    if ptr < R:
                                        _enqueue(waiting, ptr, is_fcfs, order_key, head, class_end)
                                        ptr += 1
                                    else:  # (a session's turn sent by the last tick's start)
                                        join_queue(waiting, take_turn(starts.item(k - 1)), head, class_end)
                                next_arrival_s = arrival_at[ptr] if ptr < R else later_arrival_s()
                                num_waiting = len(waiting) - head
                            if fixed:
                                used = num_blocks - free
                            else:
                                used = need_a[:k] + (num_blocks - free)
                                if pc is not None:  # each tick's trim, as the loop below does it
                                    if trims:
                                        pc.trim_marked(trims)
                                        trims = []
                                    pc.trim_ticks(j, free - need_a[:k])
                                    evictable = pc._num_evictable
                                free -= int(need_a[k - 1])
                            block = (dur_a[:k], toks, num_running, waits, used, flops_a[:k], bytes_a[:k], comp_a[:k])  # _ROW
                            row_blocks.append((j, k, block))  # (the rows stay arrays)
                            now = ends.item(k)
                            j += k
                            d += k
                            continue
                need_d = 0 if fixed else phase_count[d % bs]
                if need_d > free:
                    break
                if pc is not None and evictable > free - need_d:  # the decoders' blocks evict as the composed DECODE
                    evictable = free - need_d  # tick's trim does, marked at this tick (the recorder's count + j)
                    trims.append(num_ticks0 + j)
                    trims.append(evictable)
                ctx = S + toks * d  # (the samples' contexts: `Engine._advance_tick`'s n x the decoders')
                dur, flops, nbytes, is_comp = tick(toks, toks, ctx + toks, ctx, toks, 0.0)
                free -= need_d
                if waiting_since:  # their first gap is their own; the tick's gaps in running order (all decode)
                    tick_gaps[j] = _own_gaps(running, waiting_since, now + dur, sync_s, first_gap, sync_from, j + 1)
                    if tokenless:
                        tick_gaps[j] = _decode_first_tokens(tokenless, tick_gaps[j], j, first_gap, decode_first)
                if d != next_done:  # (the common case first: nobody finishes, the row's counts are unchanged)
                    rows.append((dur, toks, num_running, num_waiting, num_blocks - free, flops, nbytes, is_comp))
                    now += dur  # (the tick's end: `now + dur`, as everywhere)
                    j += 1
                    d += 1
                    continue
                toks_tick = toks
                if num_blocks - free > peak_in_tick:  # (in use during the tick: its finishing decoders free theirs below)
                    peak_in_tick = num_blocks - free
                if pc is not None:
                    if trims:
                        pc.trim_marked(trims)
                        trims = []
                    pc.tick_offset = j  # (the releases' marks)
                heapq.heappop(done_ticks)  # (d: the smallest key)
                leaving = finish_at.pop(d)
                if unclipped:
                    L -= (d + 1) * len(leaving)
                for r in leaving:
                    b = base[r]
                    if fixed:
                        free += held_fixed[r]
                    else:  # ceil((b + d + 1) / bs): its context's blocks (n > 1: each sample's, less what they share)
                        free += (b + d) // bs + 1 if not copies else n * ((b + d) // bs + 1) - shared.pop(r)
                    if pc is not None:
                        free -= pc.finish(r, b + d + 1)
                    phase_count[(-b) % bs] -= n
                    S -= b * n
                    finished.append((r, j, d))
                    del running[r]
                    B -= 1
                toks = B * n
                if pc is not None:
                    evictable = pc._num_evictable
                num_running = len(running)
                admission_blocked = False
                next_done = done_ticks[0] if B else -1
                rows.append((dur, toks_tick, num_running, num_waiting, num_blocks - free, flops, nbytes, is_comp))
                now += dur  # (the tick's end: `now + dur`, as everywhere)
                if release is not None:  # (closed loop: the clients send their next requests; sessions: next turns)
                    release(leaving, now)
                    next_arrival_s = arrival_at[ptr] if ptr < R else later_arrival_s()
                    if hands_turns:  # (the run ends here: `turn_out`)
                        turn_out, max_time = True, now
                j += 1
                d += 1
                if not B or swap_blocked:  # (swapped: the freed blocks may let the next tick swap one in)
                    break
            if trims:
                pc.trim_marked(trims)
            if j > j_before:
                if swap_blocked:  # (the rows' swapped count, one for these ticks: none was swapped in or out)
                    swap_rows.append((j_before, j - j_before, len(swapped), 0))
                    swap_blocked = False
                if not policy_is_fixed:  # the scheduler's tick_kind and observe for each of these ticks, in one call
                    if phase_is_fixed:  # (only SGLang's new-token ratio has state: one decay per decoding tick)
                        sched.decode_ticks(j - j_before)
                    else:
                        durs, tokens = _stretch_columns(rows, rows_before, row_blocks, blocks_before, j_before)
                        decode_run(run_start_s, durs, tokens)
                sync_s = now  # every tick of the loop decoded
                continue
            # no tick ran (a decoder short of a block, or room for an arrival): the loop below
        swap_blocks = 0  # (blocks the tick moves over PCIe: swap-outs and swap-ins)
        # (the tick tries a swap-in, not an admission: the next may admit; without `swaps` nothing is ever swapped in the
        # run, so `swapped` stays empty and `bool` is not called: ~170 instructions a composed tick)
        had_swapped = swaps and bool(swapped)
        if idle_now := hand_off and not running and head == len(waiting):  # (a prefill instance between requests)
            if by_ratio:  # the idle step's ratio: `Scheduler._plan` with nothing to run
                sched.reset_ratio()
        if idle_now and policy_is_fixed:  # (the tick would run nothing, and a stateless policy's choice changes nothing)
            decoding, chunks, admit = False, no_steps, no_steps
        else:
            num_running, num_waiting = len(running), len(waiting) - head
            # the scheduler's own choice of tick (phase controller, then its suspension rule, which reads
            # the prefill starts: written as prefills are admitted)
            if fixed_kind is not None:  # (prefill work would only inform the choice: whether one may join, when some wait)
                kind = fixed_kind
                may_admit = num_waiting > 0 and num_running < join_cap
            else:
                if phase_state is not None:
                    saved_phase = phase_state()
                can_admit, has_prefill_work = prefill_work(num_running, B, num_waiting, len(swapped))
                may_admit = can_admit and num_waiting > 0
                if kind_by_choice is not None:  # (tick_kind is the phase controller's choice here: the call, without tick_kind's)
                    kind = kind_by_choice(now, B, has_prefill_work)
                else:
                    prefills = np.fromiter(prefilling, dtype=np.int64, count=len(prefilling)) if smart and prefilling else _NONE
                    kind = tick_kind(st, now, B, num_running, has_prefill_work, prefills)
                steps.kind = kind  # (the prefix cache's lines and a chunk's pre-emption read it; a fixed kind: set once before the loop)
            # the tick's steps read the loop's state through `steps` (closures would turn the hot loop's
            # locals into cells, which costs more than these stores on the composed ticks only)
            steps.B = B  # (one store each: a six-name tuple assignment builds and unpacks a tuple)
            steps.head = head
            steps.seqs_left = cap - num_running
            steps.free = free
            steps.chunks = steps.admit = no_steps
            if speculating:  # the decoders in batch order, the blocks each holds if they run, and the blocks they take
                spec_order = _spec_order(running, prefilling)
                spec_grown, steps.need_d = _spec_grow(spec_order, base, spec_held, d, spec_slots, bs)
                steps.spec_chunk_held = ()
            elif not fixed:  # the blocks the decoders take if they run (those at a block boundary); fixed: none, set once
                steps.need_d = phase_count[d % bs]
                steps.d = d  # (a pre-emption reads the decoders' contexts)
            if pc is not None:  # (only the prefix cache's lines read it)
                steps.j = j
            if by_ratio:  # (only SGLang's token test reads them)
                steps.d = d
                if unclipped:
                    steps.left_total = L - B * d
                sched.batch_may_have_shrunk(num_running)  # (as `Scheduler._plan` starts)
            try:
                decoding = compose_tick(kind, B, max_tokens, decode_tokens, may_admit, had_swapped, run_decodes, run_chunks,
                                        admit_waiting, swap_in_step, verify_width)  # fmt: skip
            except _HandBack:
                if saved_phase is not None:
                    sched.phase.restore(saved_phase)
                if steps.victims:
                    steps.undo_preempt()
                steps.swap_taken = ()
                break
            free_after, chunks, admit = steps.free, steps.chunks, steps.admit
            if steps.victims:  # pre-empted (`_Steps._preempt_for_decodes`, `_preempt_for_chunk`): the decoders leave this
                # run's state, and `Scheduler._preempt` is applied to the arrays and the run's queue (`_preempt_in_run`)
                if not decoding and not chunks and not admit:  # (nothing left to run: the scheduler plans again at once)
                    steps.undo_preempt()
                    if saved_phase is not None:
                        sched.phase.restore(saved_phase)
                    break
                dec_ctx = {}  # decoder victim -> its context (it decoded up to decoding tick d - 1)
                for r in steps.victims:
                    del running[r]
                    resumed.pop(r, None)
                    if r not in steps.victim_prefills:
                        dec_ctx[r] = base[r] + d
                        if again_here is not None:  # (before `_leave` drops its own last token)
                            again_here.last_s[r] = waiting_since.get(r, sync_s)
                        S, B, L, first_blocks = _leave(r, d, bs, n, base, finish_at, done_ticks, phase_count, shared,
                                                       waiting_since, S, B, L, first_blocks, prompt_of if copies else None)  # fmt: skip
                        dec_victims[r] = d - 1
                toks = B * n
                # What pre-empting does, `Scheduler._preempt` itself, now: the victims wait in this run's queue (a later
                # pre-emption, admission tests and the rows see them as a tick-by-tick step would); the write-back records
                # their events and puts back what it would overwrite (`kept`). The run goes on, until one would be admitted.
                if whole:
                    retargets.extend((r, j, target_of(r)) for r in steps.victims)
                plan, kept_now = _preempt_in_run(engine, steps.victims, steps.victim_held, steps.victim_prefills,
                                                 dec_ctx, waiting, head, swapped)  # fmt: skip
                if whole:  # (their prefill targets now count what they emitted: `reserve` reads them again)
                    for r in plan.preempted_idx.tolist():
                        reserved.pop(r, None)
                if plan.preempted_idx.size:
                    episodes.append((plan.preempted_idx, j))
                    requeued.update(plan.preempted_idx.tolist())
                    if again_here is not None:
                        again_here.preempted(plan.preempted_idx.tolist())
                kept.append(kept_now)
                if plan.swapped_out_idx.size:  # (swapped out: waiting in `swapped`, their blocks moved over PCIe in this tick)
                    swap_blocks += plan.swap_blocks
                    swap_events.append((plan.swapped_out_idx, j, Event.SWAPPED_OUT))
                    out = plan.swapped_out_idx
                    again_here.swapped_out(out.tolist())  # (swapped in again in the run: a second stretch, `_Again.swapped_in`)
                    steps.swapped_apart.update(out[_apart_from_context(kv, st, out)].tolist())
                    engine.num_swap_outs += plan.swapped_out_idx.size
                if copies and plan.preempted_idx.size and again_here is not None:  # (n > 1: a recompute victim that
                    # emitted waits for `Scheduler.admit_samples`, which counts its positions past the prompt per sample)
                    victims_waiting += sum(1 for r in plan.preempted_idx.tolist() if emitted_of[r])
                    steps.samples_admit = victims_waiting > 0
                steps.victims, steps.victim_held, steps.victim_prefills, steps.undo = [], [], {}, None
                steps.chunk_preempted = False
                preempted_now = True
            if by_ratio:  # (the running requests, pre-empted ones gone, and the tick's admissions)
                sched._num_planned = len(running) + len(admit)
            if pc is not None and kind == _DECODE_KIND:
                pc.tick_offset = j
                pc.trim(free_after)
        # The tick's state changes, made before it is priced (none of them reads its duration; the few values that do
        # are kept and finished below), so one pass over its chunks both sums what the price reads and applies them.
        # The sums start from the decodes' (kv_read: the samples' contexts; pairs: those plus one new token each; D: the
        # decode tokens, n per decoder).
        freed = 0
        done = None  # requests that finish in this tick
        if decoding:  # (the decodes run only with decoders: D = n x B > 0)
            D, kv_read = toks, S + toks * d
            pairs = kv_read + D
            if first_blocks:  # (the decoders' first decodes took their copies)
                phase_count[d % bs] -= first_blocks
                first_blocks = 0
            # decoders that emit their last token now leave; every other decoder grew by one
            if waiting_since:  # their first gap is their own: their last tokens, in running order (gaps: below)
                since = waiting_since.get
                if prefilling:
                    own_last = _decoders_last_tokens(running, since, sync_s, base, prefilling)
                else:  # every running request decodes (the tick's admissions join `running` below)
                    own_last = list(map(since, running, itertools.repeat(sync_s)))
            dec_seqs = D  # (sequences that decode: the price's, and the decoders' gaps)
            if speculating:  # each decoder's own tokens (`_spec_decode`); D: the positions verified
                dec_seqs = B
                spec_b = len(spec_order)  # (its draft's decoders and their context: `_spec_decode`'s)
                spec_ctx = S + spec_b * d
                D, pairs, draft_s, spec_emitted, done, freed, S, _ = _spec_decode(
                    spec, spec_draws, verify_width, spec_order, spec_grown, base, spec_left, spec_held, d, S, finished, j)  # fmt: skip
                spec.log_tick_emitted(num_ticks0 + j, spec_emitted)
                if done is not None:
                    B -= len(done)
                    toks = B
            else:
                done = finish_at.pop(d, None)
                if done is not None:
                    heapq.heappop(done_ticks)  # (d: the smallest key)
                    if unclipped:
                        L -= (d + 1) * len(done)
                    for r in done:
                        b = base[r]
                        if fixed:
                            freed += held_fixed[r]
                        else:  # ceil((b + d + 1) / bs): its context's blocks (n > 1: each sample's, less what they share)
                            freed += (b + d) // bs + 1 if not copies else n * ((b + d) // bs + 1) - shared.pop(r)
                        if pc is not None:
                            freed -= pc.finish(r, b + d + 1)
                        phase_count[(-b) % bs] -= n
                        S -= b * n
                        finished.append((r, j, d))
                    B -= len(done)
                    toks = B * n
            d += 1
        elif not chunks and not admit and not (had_swapped and steps.swap_taken):  # (a swap-in alone: a SWAP tick, below)
            if not idle_now:
                if saved_phase is not None:  # (the general loop chooses this tick again)
                    sched.phase.restore(saved_phase)
                break  # nothing to run: idle gaps and the end of the run are the general loop's
            until = engine.idle_end_s(min(next_arrival_s, release_s))  # (a prefill instance between requests: the idle step's end)
            if until is None:
                break
            used = num_blocks - free
            if idle_j == j and idle_used == used:  # (`merge`) the last idle row goes on to `until`
                if j:
                    rows[-1] = (until - idle_from, 0, 0, 0, used, 0.0, 0.0, 0)  # _ROW
                    idle_ends[j - 1] = until
                else:  # the engine's last row, recorded before the run: the run's rows start after it
                    engine.extend_idle_row(until)
                    now0 = until
                now = until
                merged += 1
                continue
            rows.append((until - now, 0, 0, 0, used, 0.0, 0.0, 0))  # _ROW
            if merge:
                idle_j, idle_from, idle_used = j + 1, now, used
            idle_ends[j] = now = until
            j += 1
            continue
        else:
            D = kv_read = pairs = dec_seqs = 0
        swapped_in = None  # (decoders swapped in this tick, (request, last token) each: their gaps are their own)
        if had_swapped and steps.swap_taken:  # the requests the swap-in step took join the run (from the next tick)
            taken, steps.swap_taken = steps.swap_taken, ()
            if again_here.out:  # (victims of the run among them: their first decoding stretch filed apart first)
                again_here.swapped_in(taken, base, join, sync_from, first_gap, st, d)
            swap_blocks, S, B, first_blocks, swapped_in = _swap_in_joins(
                engine, taken, d, j, swap_blocks, running, prefilling, targets, base, join, sync_from, finish_at,
                done_ticks, phase_count, shared, S, B, first_blocks, n, again_here)  # fmt: skip
            toks = B * n
            del swapped[: len(taken)]
            swap_events.append((np.array(taken, dtype=np.int64), j, Event.SWAPPED_IN))
            if j < want_batches:  # (the batch log lists them in running order: after the requests before them)
                joined_at.extend(zip(taken, itertools.repeat(j)))
        # the tick's prefill chunks in batch order: running prefills', then admissions' (computed before: the cached prompt)
        pre = (chunks + admit if chunks else admit) if admit else chunks  # (request, computed before, chunk)
        if speculating:  # the blocks the tick's chunks and admissions hold (admitted: no lookahead, as `Scheduler._admit`)
            spec_held.update(steps.spec_chunk_held)
            for w, _, chunk in admit:
                spec_held[w] = reserve(w) if whole else -(-chunk // bs)
        for w, h, _ in admit:
            scheduled.append((w, j))
            if requeued and w in requeued:  # (`again_here`) a victim of the run: its first stretch filed apart
                again_here.admitted(w, base, join, sync_from, first_gap)
                if emitted_of[w]:  # (a recompute: its prefill ends in PREFILL_DONE; `_preempt_in_run` wrote its count)
                    resumed[w] = emitted_of[w]
                    if copies:  # (its chunks by `Scheduler.chunk_positions`)
                        victims_waiting -= 1
                        steps.samples_admit, steps.samples_chunks = victims_waiting > 0, True
            elif victims_waiting and emitted_of[w]:  # a recompute victim: its prefill ends in PREFILL_DONE (below)
                resumed[w] = emitted_of[w]
                victims_waiting -= 1
                if copies:
                    steps.samples_admit, steps.samples_chunks = victims_waiting > 0, True
            if smart:
                st.prefill_start_s[w] = now  # (the tick's start)
            if hand_off and st.first_scheduled_s.item(w) != st.first_scheduled_s.item(w):  # (NaN: a first admission)
                st.first_scheduled_s[w] = now  # (the cluster prices a pipelined transfer by it at the hand-off, before the
                # run's write-back, which then finds it set: the same value, the tick's start)
            running[w] = None
            prefilling[w] = h
        P, samples = 0, D  # (samples: the sequences that sample a token, the decoders' and each completed prompt's)
        pairs0, kv_read0 = pairs, kv_read  # (the decodes': the chunks' are what the loop adds, for the draft's price)
        past_seqs = 0  # sequences of the other samples in recompute chunks past the prompt (n > 1: below)
        fresh = None  # decoders whose first token is this prefill-only tick's (their last token: its end, below)
        for r, c, chunk in pre:
            P += chunk
            total = c + chunk
            # its causal pairs, chunk·c + chunk·(chunk + 1) / 2, as one product: chunk·(2c + chunk + 1) is even (an
            # operation fewer per chunk; the same integer)
            pairs += chunk * (total + c + 1) // 2
            kv_read += c
            if pc is not None:  # Engine._advance_tick: the full prompt blocks computed so far become reusable
                freed += pc.cache_prefilled(r, total)
            if resumed and copies and r in resumed:  # a recompute chunk's positions past the prompt: every sample's
                more_tokens, more_pairs, more_read, more_seqs = samples_past_prompt(n, [chunk], [c], [prompt_of(r)])
                P += more_tokens
                pairs += more_pairs
                kv_read += more_read
                past_seqs += more_seqs
            if total < targets[r]:
                prefilling[r] = total
                continue
            samples += 1
            del prefilling[r]
            o = output_of[r]
            if again_here is not None and r in again_here.victims:  # (its last pre-emption's counts are not put back)
                again_here.reentered.add(r)
            if resumed and r in resumed:  # a recompute victim: no first token, its next after the one before pre-emption
                e = resumed.pop(r)
                o -= e  # (tokens left, this one included)
                again.append(r)
                recomputed.append((r, j, e + 1))  # (its emitted count after it)
                if copies:  # (a token of each sample: `Engine._advance_tick`'s)
                    samples += copies
                    steps.samples_chunks = bool(resumed)
            else:
                first_token.append((r, j))
            if o == 1:
                if copies and not fixed and again and again[-1] == r:  # (a recompute victim: past its prompt its
                    freed += int(kv_blocks_for(total, prompt_of(r)))  # samples hold their own blocks; no prefix cache)
                elif speculating:  # (its chunks' blocks, the draft's lookahead with them)
                    freed += spec_held[r]
                else:
                    freed += held_fixed[r] if fixed else -(-total // bs) - (pc.release(r) if pc is not None else 0)
                finished.append((r, j, -1))
                if done is None:
                    done = []
                done.append(r)
                continue
            if hand_off:  # a prefill instance: it leaves at its first token (`_hand_off`)
                handing.append(r)
                continue
            b = base[r] = total - d
            join[r], sync_from[r] = d, j + 1
            if not decoding:
                if fresh is None:
                    fresh = []
                fresh.append(r)
            if speculating:  # its tokens left after this first one (its blocks: its chunks', `spec_held`)
                spec_left[r] = o - 1
                S += b
                B += 1
                toks += 1
                continue
            last_d = d + o - 2
            if unclipped:
                L += last_d + 1
            _file_finish(finish_at, done_ticks, last_d, r)
            phase_count[(-b) % bs] += n
            if copies and not fixed:  # its samples share the prompt's full blocks; each copies a partial last one
                if again and again[-1] == r:  # (a recompute victim: past its prompt, the copies are held already)
                    shared[r] = copies * (prompt_of(r) // bs)
                else:
                    shared[r] = copies * (total // bs)  # (at its first decode, decoding tick d; total is its prompt here)
                    if total % bs:
                        phase_count[d % bs] += copies
                        first_blocks += copies
            S += b * n
            B += 1
            toks += n
        A = len(pre)
        if speculating:
            if j < want_batches and (decoding or A):  # the batch log: decoders, then prefill chunks and admissions
                spec_batches.append((j, spec_order if decoding else (), spec_grown if decoding else (), pre,
                                     [spec_held[r] for r, _, _ in pre]))  # fmt: skip
        dur, flops, nbytes, is_comp = tick(P + D, samples, pairs, kv_read, A + dec_seqs + past_seqs,
                                           swap_blocks * block_bytes if swap_blocks else 0.0)  # fmt: skip
        if speculating and (decoding or pre):  # the draft's k steps (`Engine._advance_tick`: the target's price, then
            if pre:  # the draft's): with chunks, its steps run over their tokens too (`Speculator.tick_draft_s`)
                draft_s = spec.tick_draft_s(spec_b if decoding else 0, spec_ctx if decoding else 0, P, pairs - pairs0,
                                            kv_read - kv_read0, len(pre))  # fmt: skip
            spec.draft_time_s += draft_s
            dur += draft_s
        t_end = now + dur
        if A and j < want_batches:  # the batch log: prefill chunks, then admissions
            batch_extras[j] = pre  # (the blocks each holds follow from it: `_batch_entries`; nothing changes `pre`)
        if decoding and waiting_since:  # the tick's gaps are kept in running order
            tick_gaps[j] = _gaps_to(t_end, own_last)
            for r, last_s in waiting_since.items():  # (all running: only a decoding tick, this one, ends them)
                if r in running:
                    first_gap[r] = t_end - last_s
                    sync_from[r] = j + 1
            waiting_since.clear()
            if tokenless:
                tick_gaps[j] = _decode_first_tokens(tokenless, tick_gaps[j], j, first_gap, decode_first)
        elif fresh is not None:
            for r in fresh:
                waiting_since[r] = t_end  # its first token; decoders' last token is older
        if swapped_in is not None:  # (after this tick's gaps: they decode from the next decoding tick, from their own last token)
            waiting_since.update(swapped_in)
        if again:  # PREFILL_DONE: each a gap from its last token before pre-emption, after the decoders' (`_advance_tick`)
            gaps = tick_gaps.get(j)
            if gaps is None:  # (the decoders' gaps, in running order: all the shared one)
                gaps = tick_gaps[j] = [t_end - sync_s] * (dec_seqs // n) if decoding else []
            max_itl = st.max_itl_s
            for r in again:  # (a victim of the run: its last token in the run, not yet in the arrays)
                gap = t_end - (last_token.item(r) if again_here is None else again_here.last_token_s(r, last_token))
                gaps.append(gap)
                max_itl[r] = max(max_itl.item(r), gap)
            again.clear()
        if done:
            for r in done:
                del running[r]
            if release is not None:  # (closed loop: the clients send their next requests; sessions: next turns)
                release(done, t_end)
                next_arrival_s = arrival_at[ptr] if ptr < R else later_arrival_s()
                if hands_turns:  # (the run ends here: `turn_out`)
                    turn_out, max_time = True, t_end
        if handing:
            if runs_on:  # (no release of their KV before its bound: the run goes on to it at most)
                bound = engine.release_bound_s
                for r in handing:
                    release_s = min(release_s, bound(t_end, target_of(r)))
                max_time = min(max_time, release_s)
            _hand_off(engine, handing, t_end, running, handed)
        # (prefix caching: evictions can shrink a chunked head's need, so the head is looked up every tick)
        admission_blocked = may_block and not A and not done and not prefilling and head < len(waiting) and not had_swapped
        if had_swapped:  # (a swap-in that took nothing takes nothing until a completion or a pre-emption: `swap_blocked`)
            swap_blocked = may_block and steps.swap_failed and not done and not prefilling and not preempted_now
            steps.swap_failed = False
        if preempted_now:  # (a tick that pre-empted tried no admission, and its victims freed blocks: the next tries)
            admission_blocked = preempted_now = False
        head += len(admit)  # admitted requests leave the head of the queue (no O(queue) copy)
        if freed:
            if num_blocks - free_after > peak_in_tick:  # (in use during the tick: its finishing requests' too)
                peak_in_tick = num_blocks - free_after
            free = free_after + freed
        else:  # (no new int for `free_after + 0`: most composed ticks free nothing)
            free = free_after
        rows.append((dur, D, len(running), len(waiting) - head, num_blocks - free, flops, nbytes, is_comp))
        if swapped or swap_blocks:
            swap_rows.append((j, 1, len(swapped), swap_blocks))
        prefill_rows.append(j)  # (three appends: ~240 instructions fewer than extending it by a tuple)
        prefill_rows.append(P)
        prefill_rows.append(A)
        if speculating:  # (the row's decode tokens are the positions verified: its decoders apart)
            spec_seqs.append(dec_seqs)
            if not policy_is_fixed:  # (the phase controllers count decode throughput in tokens emitted)
                observe(t_end, dur, P, spec_emitted if decoding else 0)
        elif not policy_is_fixed:  # (a fixed policy's observe does nothing)
            observe(t_end, dur, P, D)
        if decoding:
            sync_s = t_end
        now = t_end
        j += 1
    if speculating:  # (the steps the run took: the stream goes on from there)
        spec_draws.settle()
    if pc is not None:
        pc.tick_offset = 0
    engine._note_kv_peak(peak_in_tick)
    if j == 0:
        if not merged:
            return False
        # (idle only, the engine's last idle row extended: its clock and the arrivals queued meanwhile, written back)
        st.waiting_keys = np.array(waiting[head:], dtype=np.int64)
        st.status[st.key_to_id(st.waiting_keys)] = Status.WAITING
        st.next_arrival = ptr
        return True
    if row_blocks:
        rows = _rows_with_blocks(rows, row_blocks, j)
    done = _write_back(engine, d, rows, prefill_rows, now0, cap, tick_gaps, scheduled, first_token, finished, batch_extras,
                       want_batches, running0, running, prefilling, base, join, sync_from, first_gap, waiting[head:],
                       ptr, free, num_ticks0, held_fixed if fixed else None, joined_at, idle_ends, decode_first, n,
                       recomputed, (episodes, dec_victims, kept, again_here) if kept else None,
                       speculated=(spec_held, spec_seqs, spec_batches) if speculating else None,
                       retargets=retargets if whole else None,
                       swapping=(swapped, swap_events, swap_rows) if swaps else None)  # fmt: skip
    if handed:  # (the write-back marked the run's admissions RUNNING)
        st.status[handed] = Status.FINISHED
    if idle_j == j:  # the run's last row is idle: an idle row after it extends it (`Engine.open_idle_row`)
        engine._idle_row = (rec.num_ticks, idle_from, now, (0, 0, idle_used, cap))
    return done


def _own_gaps(running: dict, waiting_since: dict, t_end: float, sync_s: float, first_gap: dict, sync_from: dict,
              j_next: int) -> list[float]:
    """The gaps of an all-decode tick that ends at `t_end`, every running decoder's in running order, when some
    decoders' last token is their own (`waiting_since`, emptied here; their gap is also their `first_gap`, and the
    shared gaps are theirs from the next tick, `j_next`) and the others' the last decoding tick's end `sync_s`. The
    shared gap is one subtraction, `t_end - sync_s`, for all of them: the list is made in C and the few own gaps are
    put in their place (a Python expression per decoder cost ~3 us a tick at 60 decoders; issue 11e: article-quota)."""
    if len(waiting_since) <= OWN_GAPS_BY_INDEX:
        gaps, order = [t_end - sync_s] * len(running), list(running)
    else:  # (many: each decoder's gap, in one pass)
        since, order = waiting_since.get, None
        gaps = [t_end - since(r, sync_s) for r in running]
    for r, last_s in waiting_since.items():
        if r in running:
            gap = first_gap[r] = t_end - last_s
            sync_from[r] = j_next
            if order is not None:
                gaps[order.index(r)] = gap
    waiting_since.clear()
    return gaps


def _decode_first_tokens(tokenless: dict, gaps: list[float], j: int, first_gap: dict, decode_first: list) -> list[float]:
    """`Engine._decode_first_tokens` in a run: the decoders with no token yet (all of them were waiting, so all decode
    in tick j, the decoding tick that ends their wait) emit their first token there, with no gap (NaN in `gaps`, the
    tick's gaps in running order, returned without them; their `first_gap` -inf). Clears `tokenless`."""
    for r in tokenless:
        first_gap[r] = -math.inf
        decode_first.append((r, j))
    tokenless.clear()
    return [g for g in gaps if g == g]


def _spec_order(running: dict, prefilling: dict) -> list[int]:
    """The decoders of a speculative tick in batch order: running order without the running prefills
    (`Scheduler._plan`'s decodes)."""
    return [r for r in running if r not in prefilling] if prefilling else list(running)


def _spec_grow(order: list[int], base: dict, held: dict, d: int, slots: int, bs: int) -> tuple[list[int], int]:
    """The blocks each decoder of a speculative tick (batch order, decoding tick d) holds if they decode
    (`Scheduler._grow_decodes`: the blocks for its context plus `Scheduler.decode_slots`, its verify positions and the
    draft's lookahead, never fewer than it holds), and the blocks they take in total (the tick's `need_d`)."""
    grown = []
    need = 0
    up = d + slots + bs - 1  # (ceil((base + d + slots) / bs) as one floor division of ints: three operations fewer)
    for r in order:
        h = (base[r] + up) // bs  # (context base + d: `run_ticks`' bookkeeping)
        x = held[r]
        if h > x:
            need += h - x
            grown.append(h)
        else:
            grown.append(x)
    return grown, need


class _SpecDraws:
    """The acceptance stream as a run takes it, tick by tick in batch order: from `Speculator.upcoming_list` (read
    only), and `settle` makes `Speculator.use` of the steps taken when the run ends (the stream is then where
    tick-by-tick stepping leaves it)."""

    __slots__ = ("spec", "lead", "pos")

    def __init__(self, spec):
        self.spec, self.lead, self.pos = spec, [], 0

    def take(self, num_steps: int) -> list[int]:
        """The next `num_steps` sequence-steps' leading accepted drafts."""
        pos = self.pos
        end = pos + num_steps
        if end > len(self.lead):
            self.spec.use(pos)
            self.lead = self.spec.upcoming_list(num_steps)
            pos, end = 0, num_steps
        self.pos = end
        return self.lead[pos:end]

    def settle(self) -> None:
        self.spec.use(self.pos)
        self.lead, self.pos = [], 0


def _min_int(a: int, b: int) -> int:
    """`min` of two Python ints, as `tokens_emitted`'s `minimum` one decoder at a time (the builtin's argument handling
    costs ~1.5k instructions a call: ~3.5k a decoder with it, ~1.9k with this)."""
    return a if a < b else b


def _spec_decode(spec, draws: _SpecDraws, verify_width, order: list[int], grown: list[int], base: dict, left: dict,
                 held: dict, d: int, S: int, finished: list, j: int):  # fmt: skip
    """The decode step of a speculative tick (decoding tick d, tick j) as `Engine._advance_tick` makes it, per decoder:
    the verify width (`Scheduler.verify_width` of the decoders that run), the tick's verify aggregates
    (`speculative.verify_aggregates`) and the draft's time (`Speculator.tick_draft_s`, `draft_s` in ints) over their
    contexts (S + B x d), then the next B sequence-steps of the acceptance stream in batch order (`_SpecDraws`:
    `Speculator.accepted`'s), each decoder's tokens by the one rule (`speculative.tokens_emitted`: its values by leading
    accepted drafts, `Speculator.emitted_by_lead`, for a decoder with more tokens left than drafts, else one decoder at
    a time, or in one array call for many), in the same pass as its bookkeeping: its extra tokens
    go into `base` (its context stays `base + d`, S their sum), the decoders that emit their last token are finished
    (their blocks freed) and the Speculator's counters move as `_advance_tick` moves them. Returns (decode tokens: the
    positions verified, attention pairs, the draft's time, tokens emitted, the finished decoders in batch order or
    None, their blocks, S, the decoders left in batch order)."""
    B = len(order)
    width = verify_width(B)
    ctx = S + B * d
    D, _, pairs, _ = verify_aggregates(width, B, ctx)
    draft_s = spec.tick_draft_s(B, ctx)
    drafts = width - 1
    lead = draws.take(B)
    if B < SPEC_RULE_BY_ARRAYS:  # the rule's values by leading accepted drafts where the tokens left cannot cut them
        by_lead, near = spec.emitted_by_lead(drafts), drafts  # (`emitted_by_lead`; a decoder nearer its end: the rule)
    else:  # many decoders: their tokens from one array call of the rule, read below through the identity (left >= 1)
        lead = tokens_emitted(np.array(lead, dtype=np.int64), drafts, np.array([left[r] for r in order], dtype=np.int64),
                              np.minimum).tolist()  # fmt: skip
        by_lead, near = range(width + 1), 0
    freed = emitted = 0
    done = None
    for r, a, h in zip(order, lead, grown):  # (one pass: the rule's value, then the decoder's bookkeeping)
        held[r] = h
        left_r = left[r]
        g = by_lead[a] if left_r > near else tokens_emitted(a, drafts, left_r, _min_int)
        emitted += g
        b = base[r] = base[r] + g - 1
        S += g - 1
        left_r -= g
        if left_r:
            left[r] = left_r
            continue
        S -= b  # (it leaves the sum of base)
        freed += h
        finished.append((r, j, d))
        if done is None:
            done = []
        done.append(r)
    spec.num_steps += B
    spec.num_emitted += emitted  # (the draft's time: its caller's, which may price it again with the tick's chunks)
    # the decoders left, in batch order: `order` itself in a tick where none finished (most: no list built per decoder)
    if done is None:
        staying = order
    else:  # (a set to test against: a list's membership made a tick where many of a large batch finish ~50x dearer)
        finished_now = set(done)
        staying = [r for r in order if r not in finished_now]
    return D, pairs, draft_s, emitted, done, freed, S, staying


def _spec_batch_entries(K: int, spec_batches: list, num_ticks0: int) -> tuple:
    """The batch log of a speculative run's first K ticks as `Recorder.batch` takes them (`_batch_entries`' layout):
    per tick its decoders in batch order (one token each), then its prefill chunks and admissions (request, computed
    before, chunk), each with the blocks it held during the tick (`_spec_grow`'s, `_Steps._spec_chunks_need`'s)."""
    ticks: list[int] = []
    req: list[int] = []
    new: list[int] = []
    is_dec: list[bool] = []
    held: list[int] = []
    for j, order, grown, pre, pre_held in spec_batches:
        if j >= K:
            break
        ticks += [num_ticks0 + j] * (len(order) + len(pre))
        req += order
        new += [1] * len(order)
        is_dec += [True] * len(order)
        held += grown
        for r, _, chunk in pre:
            req.append(r)
            new.append(chunk)
            is_dec.append(False)
        held += pre_held
    return (np.array(ticks, dtype=np.int64), np.array(req, dtype=np.int64), np.array(new, dtype=np.int64),
            np.array(is_dec, dtype=bool), np.array(held, dtype=np.int64))  # fmt: skip


def _leave(r: int, d: int, bs: int, n: int, base: dict, finish_at: dict, done_ticks: list, phase_count: list, shared: dict,
           waiting_since: dict, S: int, B: int, L: int, first_blocks: int, prompt_of) -> tuple[int, int, int, int]:
    """Decoder r, pre-empted before decoding tick d, leaves the run's bookkeeping (`_join_decoders` in reverse): its
    finish tick (and the heap's key when it was the last there), its blocks at each boundary, its context in S, its
    outputs still to write in L, a first decode's block copies still pending (n > 1: `prompt_of` given; its context is
    still its prompt). Rare: the scans are O(decoders). Returns (S, B, L, first_blocks)."""
    b = base[r]
    for key, ending in finish_at.items():
        if r in ending:
            ending.remove(r)
            if not ending:
                del finish_at[key]
                done_ticks.remove(key)
                heapq.heapify(done_ticks)
            L -= key + 1
            break
    phase_count[(-b) % bs] -= n
    if prompt_of is not None:
        shared.pop(r, None)
        p = prompt_of(r)
        if b + d == p and p % bs:  # (its copies at decoding tick d: `first_blocks`)
            phase_count[d % bs] -= n - 1
            first_blocks -= n - 1
    waiting_since.pop(r, None)
    return S - b * n, B - 1, L, first_blocks


def _file_finish(finish_at: dict, done_ticks: list, last_d: int, r: int) -> None:
    """Decoder r of a run ends at its last decoding tick `last_d`, known when it starts decoding: filed under it in
    `finish_at`, a new key pushed on its heap `done_ticks` (the loop pops the heap to find the next completion). Every
    decoder that starts decoding in a run is filed here: a prompt that completed, a decode instance's joined decoder, a
    swapped-in one."""
    ending = finish_at.get(last_d)
    if ending is None:
        finish_at[last_d] = [r]
        heapq.heappush(done_ticks, last_d)
    else:
        ending.append(r)


def _join_decoders(engine: Engine, joined, d: int, j: int, sync_s: float, running: dict, base: dict, join: dict,
                   sync_from: dict, waiting_since: dict, finish_at: dict, done_ticks: list, phase_count: list, S: int,
                   B: int, L: int, tokenless: dict) -> tuple[int, int, int]:  # fmt: skip
    """Decoders that joined a paused run (`Engine.inject_prefilled` on a decode instance: context, first token and
    its time in the arrays, blocks held) enter the run's state as a call that starts now would set them up: running
    last, in step from tick j unless their last token is older than the last decoding tick (or they have none yet:
    `tokenless`). A new key of `finish_at` joins its heap `done_ticks` (pushed: the run's keys were sorted again at
    every join, and `L`, the sum over decoders of their last decoding tick + 1, summed again over every key: 6.1 % and
    5.2 % of a 2P2D run's instructions at 2,000 requests, round robin and least outstanding); returns (S, B, L)."""
    st = engine.st
    bs = engine.kv.block_size
    for r in joined:
        c, last_s = st.computed.item(r), st.last_token_s.item(r)
        running[r] = None
        base[r], join[r], sync_from[r] = c - d, d, j
        if last_s != sync_s:
            waiting_since[r] = last_s
            if last_s != last_s:  # (NaN: no token yet, first_token_from = decode)
                tokenless[r] = None
        last_d = d + st.output.item(r) - st.emitted.item(r) - 1  # (>= d: one token at least is still to emit)
        _file_finish(finish_at, done_ticks, last_d, r)
        L += last_d + 1
        phase_count[(-(c - d)) % bs] += 1
        S += c - d
        B += 1
    return S, B, L


def holds_fixed_blocks(engine: Engine) -> bool:
    """Reserved admission (GUARANTEED_NO_EVICT) and contiguous KV hold a fixed number of blocks from admission to the
    end (what the scheduler's admission allocates); paged KV grows with the context (`run_ticks`' `fixed`)."""
    return engine.sched.cfg.admission == "reserve" or engine.kv.blocks_per_boundary == 0


def hands_off(engine: Engine) -> bool:
    """A prefill-pool instance (`Engine.hand_off_prefilled`) runs on this path: its requests leave at their first token
    (`_hand_off`), it idles between requests inside the run (`Engine.idle_end_s`), and the run pauses after every row, where
    a general step ends, or goes on to its horizon while that holds (`Engine.runs_to_horizon`, `run_ticks`) (the cluster
    takes hand-offs and gives the next horizon then: `Engine._run_fast`), so one run lives across hand-offs and idle gaps (issue 13: cost; a run per request costs its set-up and write-back, and a
    general step its plan and tick, ~35 us). Only where the run can pause
    (`Engine.may_pause`) and the blocks a handed-off request holds are its context's on a paged cache without the
    prefix cache: their release while the run is paused counts into its free blocks (`Engine.release`)."""
    return engine.may_pause and engine.prefix is None and not holds_fixed_blocks(engine)


def _hand_off(engine: Engine, ids: list[int], t_end: float, running: dict, handed: list[int]) -> None:
    """`Engine._hand_off` in a run: the requests whose prompt completed in the tick ending at `t_end` (none finished
    there) leave the batch, FINISHED here at their first token, holding their context's blocks until `Engine.release`.
    What the cluster reads of them before the run's write-back (their context, prompt, first token, blocks) is written
    now (the hand-off's record itself is `Engine._record_hand_off`, as a general step's); the run's other rows and
    events at its write-back. Clears `ids`."""
    st, kv = engine.st, engine.kv
    bs = kv.block_size
    for r in ids:
        total = st.prefill_target.item(r)
        del running[r]
        st.computed[r] = total
        st.emitted[r] = 1
        st.first_token_s[r] = st.last_token_s[r] = t_end
        kv.held[r] = -(-total // bs)
    engine._record_hand_off(np.array(ids, dtype=np.int64), t_end)
    handed += ids
    ids.clear()


def _clock_with_idle(now0: float, dur: np.ndarray, idle_ends: dict[int, float]) -> tuple[np.ndarray, np.ndarray]:
    """(starts, ends) of a run's rows: each starts where the last ended, a tick's end its start plus its duration (the
    loop's `now + dur`), an idle row's end its own (`idle_ends`, as `Engine._record_idle` sets the clock)."""
    starts = []
    now = now0
    get = idle_ends.get
    for k, gap in enumerate(dur.tolist()):
        starts.append(now)
        end = get(k)
        now = now + gap if end is None else end
    t0 = np.array(starts)
    t_end = t0 + dur
    at = np.fromiter(idle_ends, dtype=np.int64, count=len(idle_ends))
    t_end[at] = np.fromiter(idle_ends.values(), dtype=np.float64, count=len(idle_ends))
    return t0, t_end


class LiveLeft:
    """Tokens left to emit for the requests running or queued in a run paused at its horizon (`run_ticks`' yield `at`),
    as `Engine.outstanding_bounds` counts them: how many have at most `most` left (`num_within`). A decoder in
    `finish_at[f]` emits its last token in decoding tick f, so it has f - d + 1 left before decoding tick d; a
    prefilling or queued request has its output less what it emitted before a pre-emption left. Nothing in the run
    changes while it is paused, so the decoders are counted from `finish_at` itself: a lookup per decoding tick up to
    `most` (a router asks a few ticks ahead, mostly), or past FEW_TICKS its keys sorted once (C-level) and its lists'
    lengths summed along them; not a list of every request's tokens left made in Python at each pause (issue 13:
    cost)."""

    FEW_TICKS = 32

    __slots__ = ("d", "finish_at", "start", "ticks", "num_by", "queued", "first", "blocks_by", "walked_to", "num_walked")

    def __init__(self, engine: Engine, at: tuple):
        _, _, _, _, _, d, finish_at, prefilling, waiting, head, _, done_ticks = at
        self.d, self.finish_at = d, finish_at
        self.ticks: list[int] | None = None  # finish_at's keys ascending, and the decoders finishing by each (made when needed)
        self.num_by: list[int] = []
        self.blocks_by: list[int] | None = None  # per key of `ticks`: whole-context blocks of the decoders finishing by it
        queued = []
        if prefilling or head < len(waiting):  # (loops, not comprehensions: those made cells of locals at every pause)
            # (a recompute victim's output less what it emitted before pre-emption: the state's, unchanged meanwhile)
            output, emitted, R = engine.st.output, engine.st.emitted, engine.st.num_requests
            for r in prefilling:
                queued.append(output.item(r) - emitted.item(r))
            for w in waiting[head:]:  # (admitted ones stay before `head`: not skipped one by one)
                queued.append(output.item(w % R) - emitted.item(w % R))
            queued.sort()
        self.queued = queued
        # fewest tokens any of them has left (inf: none): `num_within` is 0 below it (`CountCurve`'s O(1) test). (The
        # smallest key from the run's heap of them: a `min` over ~40 keys cost ~9k instructions, most of a curve's making)
        first = done_ticks[0] - d + 1 if done_ticks else math.inf
        self.first = min(first, queued[0]) if queued else first
        # the first decoding tick in which a decoder finishes (no key below it): walks over the ticks start there, not at d
        self.start = done_ticks[0] if done_ticks else d
        # `num_within`'s walk so far: the decoders finishing in the decoding ticks from `start` up to `walked_to`
        self.walked_to, self.num_walked = self.start, 0

    def _sort_ticks(self) -> None:
        """`finish_at`'s keys ascending and the decoders finishing by each (past FEW_TICKS; made once per pause)."""
        self.ticks = sorted(self.finish_at)
        self.num_by = list(itertools.accumulate(map(len, map(self.finish_at.__getitem__, self.ticks))))

    def _finishing_within(self, most: int):
        """The lists of decoders finishing in each of the next `most` decoding ticks that has any (a walk over those
        ticks from the first with any: up to FEW_TICKS, cheaper than sorting the keys)."""
        return filter(None, map(self.finish_at.get, range(self.start, self.d + most)))

    def _num_ticks_within(self, most: int) -> int:
        """How many of the sorted finish ticks (`ticks`, made on first use) fall within the next `most` decoding ticks."""
        if self.ticks is None:
            self._sort_ticks()
        return bisect.bisect_right(self.ticks, self.d + most - 1)

    def num_within(self, most: int) -> int:
        """Requests of the run with at most `most` tokens left."""
        if most <= self.FEW_TICKS:
            # The decoders finishing in each of the next `most` decoding ticks, walked on from where the last ask left off
            # (a router asks a paused run at later instants, mostly): a loop over a few ticks, not a chain of C-level
            # iterators, whose making cost more than the walk (~3.8k instructions; issue 13: cost)
            end, k, num = self.d + most, self.walked_to, self.num_walked
            if end < k:  # (an earlier instant than the last ask: from the first finish again)
                k, num = self.start, 0
            get = self.finish_at.get
            while k < end:
                done = get(k)
                if done:
                    num += len(done)
                k += 1
            self.walked_to, self.num_walked = k, num
        else:
            k = self._num_ticks_within(most)
            num = self.num_by[k - 1] if k else 0
        return (num + bisect.bisect_right(self.queued, most)) if self.queued else num

    def blocks_within(self, most: int, prompt: np.ndarray, output: np.ndarray, bs: int) -> int:
        """Blocks of their whole context (prompt plus output, `bs` tokens a block: at least the blocks each holds) of the
        decoders with at most `most` tokens left (`Engine._live_kv_used_bounds`: what finishes can free)."""
        if most <= self.FEW_TICKS:
            blocks = 0
            for done in self._finishing_within(most):
                for r in done:
                    blocks += -(-(prompt.item(r) + output.item(r)) // bs)
            return blocks
        k = self._num_ticks_within(most)
        if self.blocks_by is None:
            finish_at = self.finish_at
            ids = np.fromiter(itertools.chain.from_iterable(map(finish_at.__getitem__, self.ticks)), dtype=np.int64,
                              count=self.num_by[-1] if self.num_by else 0)  # fmt: skip
            cum = np.cumsum(-(-(prompt[ids] + output[ids]) // bs))
            self.blocks_by = [int(cum[n - 1]) if n else 0 for n in self.num_by]
        return self.blocks_by[k - 1] if k else 0


def _record_batches(rec, K: int, decoding: np.ndarray, batch_extras: dict, num_extras: int, order: np.ndarray,
                    dec_req: np.ndarray, dec_base: np.ndarray, dec_join: np.ndarray, dec_last: np.ndarray, bs: int,
                    num_ticks0: int, held_fixed, num_samples: int = 1, dec_shared: np.ndarray | None = None,
                    ext_blocks=None, dec_ids: np.ndarray | None = None) -> None:  # fmt: skip
    """The batch log of the first K ticks: per tick its decoders in running order (one token, the blocks
    for their context), then its prefill chunks and admissions (`batch_extras`, `num_extras` entries). Every decoding
    tick decodes every decoder, so decoder r is in the decoding ticks numbered join[r] to its last. The call's decoders
    come as arrays (`dec_req`: each one's id, in no particular order; its base, first and last decoding tick numbers) and
    are put in running order (`order`: the call's admission order, every decoder among them) by a search, not per
    decoder in Python. (`dec_ids`: each one's request when `dec_req` holds keys of their own, a request's earlier
    decoding stretches in the run: `_Again.batch_lives`.) Counted now (a run budget counts the rows), built when the log
    is first read (`_batch_entries`): the arguments are this call's own and nothing changes them after `_write_back`."""
    tick_of_d = np.flatnonzero(decoding[:K])  # (Kd,) the logged tick of each decoding tick number
    Kd = tick_of_d.size
    if dec_req.size:  # decoders in running order: the entries of `order` that are decoders, and where each is in dec_*
        sorter = np.argsort(dec_req)
        at = sorter[np.minimum(np.searchsorted(dec_req, order, sorter=sorter), dec_req.size - 1)]
        is_dec = dec_req[at] == order
        at = at[is_dec]
    else:
        at = _NONE
    decs, lo = (dec_req if dec_ids is None else dec_ids)[at], dec_join[at]
    sizes = np.maximum(np.minimum(dec_last[at], Kd - 1) - lo + 1, 0)  # logged decoding ticks of each decoder
    dec_b = dec_base[at]
    dec_s = None if dec_shared is None else dec_shared[at]
    rec.batch_deferred(int(sizes.sum()) + num_extras, lambda: _batch_entries(
        K, tick_of_d, decs, dec_b, lo, sizes, batch_extras, bs, num_ticks0, held_fixed, num_samples, dec_s,
        ext_blocks))  # fmt: skip


def _batch_entries(K: int, tick_of_d: np.ndarray, decs: np.ndarray, dec_b: np.ndarray, lo: np.ndarray, sizes: np.ndarray,
                   batch_extras: dict, bs: int, num_ticks0: int, held_fixed, num_samples: int = 1,
                   dec_shared: np.ndarray | None = None, ext_blocks=None) -> tuple[np.ndarray, ...]:  # fmt: skip
    """`_record_batches`' entries as `Recorder.batch` takes them: the entries of all ticks are expanded
    decoder by decoder, then put in tick order (a stable sort keeps running order within a tick).
    Temporaries are 32-bit and few: on a VM, first touching fresh pages costs 2-6 us per 4 KiB page."""
    Kd, nd = tick_of_d.size, decs.size
    E = int(sizes.sum())
    who = np.repeat(np.arange(nd, dtype=np.int32), sizes)  # (E,) decoder of each entry, decoder-major
    dnum = np.arange(E, dtype=np.int32)  # (E,) its decoding tick number: lo + its place in the stretch
    dnum -= np.repeat((np.cumsum(sizes) - sizes - lo).astype(np.int32), sizes)
    # A stable sort by tick number keeps running order within a tick (16-bit keys: NumPy's radix sort)
    by_tick = np.argsort(dnum.astype(np.int16) if Kd <= np.iinfo(np.int16).max else dnum, kind="stable")
    who, dnum = who[by_tick], dnum[by_tick].astype(np.int64)  # (mixed-width in-place arithmetic is slow)
    del by_tick
    dec_req = decs[who]
    if held_fixed is None:  # ceil((base + d + 1) / bs): the context before decoding tick d is base + d
        dec_held = dec_b[who]
        dec_held += dnum
        dec_held += bs  # (+1, then + bs - 1 for the ceiling)
        dec_held //= bs
        if dec_shared is not None:  # n > 1 samples: a block table each past the prompt, its full blocks shared
            dec_held *= num_samples
            dec_held -= dec_shared[who]
    else:
        dec_held = np.fromiter((held_fixed[r] for r in decs.tolist()), dtype=np.int64, count=nd)[who]
    counts = np.zeros(K, dtype=np.int64)  # entries of each logged tick
    counts[tick_of_d] = np.bincount(dnum, minlength=Kd)
    del who, dnum
    if not batch_extras:
        return (num_ticks0 + np.repeat(np.arange(K, dtype=np.int64), counts), dec_req, np.ones(E, dtype=np.int64),
                np.ones(E, dtype=bool), dec_held)  # fmt: skip
    # The tick's prefill chunks and admissions follow its decoders; the decoder entries fill the other slots in order
    ext_ticks = np.fromiter(batch_extras, dtype=np.int64, count=len(batch_extras))
    ext_sizes = np.fromiter((len(x) for x in batch_extras.values()), dtype=np.int64, count=len(batch_extras))
    ext_after = counts[ext_ticks]  # decoders before them
    counts[ext_ticks] += ext_sizes
    first_slot = np.cumsum(counts) - counts
    at = np.repeat(first_slot[ext_ticks] + ext_after, ext_sizes)
    ext_slot = at + np.arange(at.size) - np.repeat(np.cumsum(ext_sizes) - ext_sizes, ext_sizes)
    # (request, computed before, chunk) of each: it holds ceil((computed before + chunk) / bs) blocks, or its fixed count
    ext_req, ext_before, ext_new = (np.array(col, dtype=np.int64) for col in zip(*itertools.chain.from_iterable(batch_extras.values())))
    if ext_blocks is not None:  # (n > 1: a recompute chunk past its prompt, every sample's blocks there, `blocks_for`)
        ext_held = ext_blocks(ext_before + ext_new, ext_req, np.repeat(ext_ticks, ext_sizes))
    elif held_fixed is None:
        ext_held = -(-(ext_before + ext_new) // bs)
    else:
        ext_held = np.fromiter((held_fixed[r] for r in ext_req.tolist()), dtype=np.int64, count=ext_req.size)
    total = E + ext_slot.size
    out_dec = np.ones(total, dtype=bool)
    out_dec[ext_slot] = False
    out_req, out_new, out_held = np.empty(total, dtype=np.int64), np.ones(total, dtype=np.int64), np.empty(total, dtype=np.int64)
    out_req[ext_slot], out_new[ext_slot], out_held[ext_slot] = ext_req, ext_new, ext_held
    out_req[out_dec], out_held[out_dec] = dec_req, dec_held
    return num_ticks0 + np.repeat(np.arange(K, dtype=np.int64), counts), out_req, out_new, out_dec, out_held


def _int64s(values, n: int) -> np.ndarray:
    """n Python ints (any iterable) as a new int64 array, packed by `struct` in one call: ~100 instructions a value, where
    np.fromiter's per-value conversion costs ~210 (~260 through a chain of tuples). The write-back converts a few values
    per request and per composed tick this way."""
    out = np.empty(n, dtype=np.int64)
    if n:
        struct.pack_into(f"{n}q", out, 0, *values)
    return out


def _float64s(values, n: int) -> np.ndarray:
    """`_int64s` for floats: n Python numbers as a new float64 array (`struct`'s "d" converts an int or a bool as
    float() does, the value np.fromiter gives). The rows of the ticks run one by one, 8 values a tick: ~170 instructions a
    value through their chain of tuples, against ~260 by np.fromiter."""
    out = np.empty(n)
    if n:
        struct.pack_into(f"{n}d", out, 0, *values)
    return out


def _columns(items: list[tuple], k: int) -> np.ndarray:
    """(request, tick, ...) tuples of k ints -> a (k, len(items)) int64 array: one conversion (its rows are views)."""
    return _int64s(itertools.chain.from_iterable(items), k * len(items)).reshape(len(items), k).T


def _write_back(engine, d_end, rows, prefill_rows, now0, cap, tick_gaps, scheduled, first_token, finished, batch_extras, want_batches,
                running0, running, prefilling, base, join, sync_from, first_gap, waiting, ptr, free, num_ticks0,
                held_fixed, joined_at=(), idle_ends=None, decode_first=(), num_samples=1, recomputed=(),
                preempted=None, speculated=None, swapping=None, retargets=None) -> bool:  # fmt: skip
    """Record the fast ticks and write every touched request's state back to the arrays (`idle_ends`: a prefill
    instance's idle rows and their ends, `Engine.idle_end_s`; `decode_first`: (decoder, tick) of first tokens that
    decoding ticks emitted, `_decode_first_tokens`; `num_samples`: a decoder's decode tokens in a tick; `recomputed`:
    (request, tick) of recompute prefills that ended, PREFILL_DONE; `preempted`: the run's pre-emptions, `run_ticks`'
    (episodes: (victims, tick) each; decoder victims -> their last decoding tick number; kept: (victims, computed,
    emitted) as `Scheduler._preempt` left them in the run, `_preempt_in_run`; its victims admitted again in it, `_Again`
    or None): a decoder victim's progress up to its last decoding tick is written as a finished decoder's (its last
    token, gaps, batch log), then what the pre-emption left is put back (but where the run wrote later progress) and the
    PREEMPTED events are recorded; `speculated`: a speculative run's (decoder -> blocks held,
    decoders of each tick, logged ticks' decoders: `run_ticks`' spec_held, spec_seqs, spec_batches); `swapping`: a run
    under swap's (its swapped queue, its swap events (ids, tick, kind) and (tick, requests swapped out after it, blocks
    moved) of its ticks with swapped requests or a swap: `run_ticks`' swapped, swap_events, swap_rows))."""
    st, kv, rec = engine.st, engine.kv, engine.rec
    bs = kv.block_size
    n = len(rows)
    block = rows if isinstance(rows, np.ndarray) else (  # (issue-11v: array-priced stretches arrive as one array)
        _float64s(itertools.chain.from_iterable(rows), n * len(_ROW)).reshape(n, len(_ROW)))
    col = dict(zip(_ROW, block.T))
    P, A = np.zeros(n), np.zeros(n)
    if prefill_rows:
        at, P_at, A_at = _int64s(prefill_rows, len(prefill_rows)).reshape(-1, 3).T
        P[at], A[at] = P_at, A_at
    col.update(num_prefill_tokens=P, num_prefill_seqs=A)
    dur, D = col["duration_s"], col["num_decode_tokens"]
    seqs = D if num_samples == 1 else D / num_samples  # decoders in each tick (n tokens each: exact in float64)
    if speculated is not None:  # (its decode tokens are the positions verified)
        seqs = np.array(speculated[1], dtype=np.float64)
    # The loop's clock: each tick starts where the last ended (`now + dur`, added in the same order)
    if idle_ends:
        t0, t_end = _clock_with_idle(now0, dur, idle_ends)
    else:
        t0 = np.empty(max(n, 1))  # (np.cumsum of [now0, dur[:-1]]: the same sums, without a list made into an array)
        t0[0] = now0
        t0[1:] = dur[:-1]
        np.add.accumulate(t0, out=t0)
        t_end = t0 + dur  # the same addition as the loop's `now + dur`
    decoding = D > 0  # a tick that decodes decodes every decoder
    col.update(t_start_s=t0, phase=np.where(P > 0, np.where(decoding, MIXED, PREFILL), DECODE), num_decode_seqs=seqs,
               num_swapped=0, num_preempted=0, swap_blocks=0, batch_cap=cap)  # fmt: skip
    if idle_ends:
        col["phase"][np.fromiter(idle_ends, dtype=np.int64, count=len(idle_ends))] = IDLE
    if preempted is not None:  # (`_advance_tick`'s row: the victims counted as pre-empted; as waiting: in the run's rows)
        episodes, dec_victims, kept, again = preempted
        col["num_preempted"] = np.zeros(n, dtype=np.int64)
        for victims, j_pre in episodes:
            col["num_preempted"][j_pre] = victims.size
    if swapping is not None and swapping[2]:  # (swapped out and in: the row's swapped count and blocks moved)
        at, k, num_swapped, swap_blocks = _columns(swapping[2], 4)
        col["num_swapped"], col["swap_blocks"] = np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64)
        col["swap_blocks"][at] = swap_blocks  # (0 at a stretch of the unrolled loop's: k > 1 ticks, none swapped)
        col["num_swapped"][np.repeat(at - np.cumsum(k) + k, k) + np.arange(int(k.sum()))] = np.repeat(num_swapped, k)
        only = at[(P[at] == 0) & (D[at] == 0) & (swap_blocks > 0)]  # (ticks that only swapped in)
        if only.size:
            col["phase"][only] = SWAP
        for ids, j_swap, kind in swapping[1]:  # (a victim swapped out is counted as pre-empted, as `_advance_tick` does)
            if kind == Event.SWAPPED_OUT:
                col["num_preempted"][j_swap] += ids.size
    rec.ticks(col, n)
    # Per tick: the gap of every decoder in step, since the end of the last decoding tick (-inf: no decoding)
    last_dec = np.maximum.accumulate(np.where(decoding, np.arange(n), -1))  # last decoding tick up to each tick
    since = np.concatenate([[-1], last_dec[:-1]])
    gap_arr = np.where(decoding, t_end - np.where(since >= 0, t_end[since], now0), -np.inf)
    last_decoding_tick = int(last_dec[-1])
    gap_counts = seqs.astype(np.int64)  # decoders in each tick, one gap each
    fin_all = _columns(finished, 3) if finished else (_NONE, _NONE, _NONE)  # (request, tick, decoding tick number)
    sched_cols = _columns(scheduled, 2) if scheduled else None  # (request, tick admitted)
    # The call's decoders: id, base, first decoding tick (0: decoding from the call's start), and for those that finished
    # after decoding (`is_fin`) their entry in the finished columns (`at_fin`)
    n_dec = len(base)
    dec_req = _int64s(base, n_dec)  # the call's first decoders, then those that joined
    dec_b = _int64s(base.values(), n_dec)
    dec_join = np.zeros(n_dec, dtype=np.int64)
    if join:  # joined in insertion order, after the first decoders
        dec_join[n_dec - len(join):] = _int64s(join.values(), len(join))
    fin_req, fin_tick, fin_d = fin_all
    gone = None
    if preempted is not None and dec_victims:  # pre-empted decoders: their progress as a finished decoder's, up to their
        # last decoding tick; those that did not decode in this run (`gone`) keep what the arrays or the run's first
        # tokens say
        tick_of_d = np.flatnonzero(decoding)
        left = [(r, int(tick_of_d[last]), last) for r, last in dec_victims.items() if last >= join.get(r, 0)]
        gone = [r for r, last in dec_victims.items() if last < join.get(r, 0)]
        if left:
            fin_req, fin_tick, fin_d = _columns(finished + left, 3)
    decoded_fin = fin_d >= 0  # (not those that finished at their first token)
    is_fin = None
    if n_dec and decoded_fin.any():
        fin_req, fin_tick, fin_d = fin_req[decoded_fin], fin_tick[decoded_fin], fin_d[decoded_fin]
        sorter = np.argsort(fin_req)  # (request ids are distinct: each decoder's entry, if it has one, by a search)
        at_fin = sorter[np.minimum(np.searchsorted(fin_req, dec_req, sorter=sorter), fin_req.size - 1)]
        is_fin = fin_req[at_fin] == dec_req
        at_fin = at_fin[is_fin]
    if want_batches and speculated is not None:  # (a decoder's blocks are not its context's: logged tick by tick)
        K = min(n, want_batches)
        spec_batches = speculated[2]
        num_rows = sum(len(order) + len(pre) for j, order, _, pre, _ in spec_batches if j < K)
        rec.batch_deferred(num_rows, lambda: _spec_batch_entries(K, spec_batches, num_ticks0))
    elif want_batches:
        # running order: the call's first requests, then admissions and joined decoders as they entered `running` (a
        # decoder that joins before tick j comes before tick j's admissions; `sorted` is stable)
        if joined_at:
            added = [(j, 1, w) for w, j in scheduled] + [(j, 0, r) for r, j in joined_at]
            order = np.array(running0 + [x[2] for x in sorted(added, key=lambda x: x[:2])], dtype=np.int64)
        else:  # (admissions alone: `scheduled` is in tick order already)
            order = np.concatenate((np.array(running0, dtype=np.int64), sched_cols[0] if scheduled else _NONE))
        dec_last = np.full(n_dec, d_end - 1)  # each decoder's last decoding tick number
        if is_fin is not None:
            dec_last[is_fin] = fin_d[at_fin]
        if gone:  # (none logged: before their first decoding tick)
            at_gone = isin(dec_req, gone)
            dec_last[at_gone] = dec_join[at_gone] - 1
        log_keys, log_ids, log_b, log_join = dec_req, None, dec_b, dec_join
        if preempted is not None and preempted[3] is not None and preempted[3].ended:  # (victims admitted again: `_Again`)
            order, log_keys, log_ids, log_b, log_join, dec_last = preempted[3].batch_lives(
                order, st.num_requests, dec_req, dec_b, dec_join, dec_last)  # fmt: skip
        K = min(n, want_batches)
        # (every logged tick with prefill entries lists its A chunks and admissions: `batch_extras`)
        # (n > 1 samples: a decoder holds n x ceil(context / bs) blocks less its prompt's shared ones, `run_ticks`' shared)
        copies = num_samples - 1
        dec_shared = None  # (each stretch's request: a closed stretch is under a key of its own, `log_ids` its request's)
        if copies and held_fixed is None:
            dec_shared = copies * (st.prompt[dec_req if log_ids is None else log_ids] // bs)
        # (a chunk's blocks with n > 1, a recompute's past its prompt included: `kv.blocks_for`; the prompts are fixed)
        ext_blocks = None if not copies or held_fixed is not None else (lambda ctx, req, _, prompt=st.prompt: kv.blocks_for(ctx, prompt[req]))
        if retargets is not None:  # (watermark admission: a prefill holds its whole prompt's blocks, `run_ticks`')
            # each entry's prefill target as the run leaves it, read now: the batch log is made later (`batch_deferred`),
            # when a pre-emption after this run may have grown it
            entries = itertools.chain.from_iterable(batch_extras.values())
            targets_now = st.prefill_target[np.fromiter((r for r, _, _ in entries), np.int64)]

            def ext_blocks(ctx, req, ticks, prompt=st.prompt):
                held_to = targets_now.copy()  # (its prefill target then: the old one before the run pre-empted it)
                for r, j, old in reversed(retargets):
                    held_to[(req == r) & (ticks < j)] = old
                return kv.blocks_for(np.maximum(ctx, held_to), prompt[req])
        _record_batches(rec, K, decoding, batch_extras, int(A[:K].sum()), order, log_keys, log_b, log_join, dec_last, bs,
                        num_ticks0, held_fixed, num_samples, dec_shared, ext_blocks, log_ids)  # fmt: skip
    if tick_gaps:  # ticks whose gaps differ: their gaps one by one, in their place (gaps stay in tick order)
        ticks = np.fromiter(tick_gaps, dtype=np.int64, count=len(tick_gaps))
        gap_counts[ticks] = 0
        where = np.repeat(ticks, [len(g) for g in tick_gaps.values()])
        own_gaps = np.fromiter(itertools.chain.from_iterable(tick_gaps.values()), dtype=np.float64, count=where.size)
        # (ticks in the order they ran: `where` never decreases)
        rec.itl_runs(insert_sorted(gap_arr, own_gaps, where), insert_sorted(gap_counts, np.ones(where.size, np.int64), where))
    else:
        rec.itl_runs(gap_arr, gap_counts)

    # (a victim admitted again in the run, `_Again`: its events all, its state from its first admission or its last)
    again = preempted[3] if preempted is not None else None
    twice = again is not None and again.victims
    if scheduled:
        req, tick = sched_cols
        rec.event(req, t0[tick], Event.SCHEDULED)
        st.status[req] = Status.RUNNING
        if twice:  # (the first admission's start is its first; the last's its prefill's)
            at = _first_of(req)
            first_req, first_tick = req[at], tick[at]
            at = _last_of(req)
            req, tick = req[at], tick[at]
        else:
            first_req, first_tick = req, tick
        first = np.isnan(st.first_scheduled_s[first_req])
        st.first_scheduled_s[first_req[first]] = t0[first_tick][first]
        st.prefill_start_s[req] = t0[tick]
    if first_token:
        req, tick = _columns(first_token, 2)
        rec.event(req, t_end[tick], Event.FIRST_TOKEN)
        st.first_token_s[req] = t_end[tick]
        st.last_token_s[req] = t_end[tick]
        st.computed[req] = st.prefill_target[req]
        st.emitted[req] = 1
    if recomputed:  # (a token after those before pre-emption; their gaps and max_itl_s: in the run)
        req, tick, emitted = _columns(recomputed, 3)
        rec.event(req, t_end[tick], Event.PREFILL_DONE)
        if twice:
            at = _last_of(req)
            req, tick, emitted = req[at], tick[at], emitted[at]
        st.last_token_s[req] = t_end[tick]
        st.computed[req] = st.prefill_target[req]
        st.emitted[req] = emitted
    if decode_first:  # (their progress, last token and gaps: with the other decoders' below)
        req, tick = _columns(decode_first, 2)
        engine.record_decode_first(req, t_end[tick])
    if twice and again.closed:
        again.write_closed(st, decoding, t_end, gap_arr)
    if base:
        n, req, b = n_dec, dec_req, dec_b
        ctx = b + d_end  # still running: decoded up to the last decoding tick
        last = np.full(n, last_decoding_tick)
        decoded = d_end > dec_join
        if is_fin is not None:
            ctx[is_fin] = b[is_fin] + fin_d[at_fin] + 1
            last[is_fin] = fin_tick[at_fin]
            decoded |= is_fin
        if gone:
            decoded &= ~isin(req, gone)
        lo = _int64s(sync_from.values(), n)  # (`sync_from`: in base's order)
        own = np.full(n, -np.inf)
        if first_gap:  # (a few decoders, each in its place among the call's decoders)
            sorter = np.argsort(req)
            at = sorter[np.searchsorted(req, np.fromiter(first_gap, dtype=np.int64, count=len(first_gap)), sorter=sorter)]
            own[at] = np.fromiter(first_gap.values(), dtype=np.float64, count=len(first_gap))
        if not decoded.all():  # joined after the last decoding tick
            req, ctx, last, lo, own = req[decoded], ctx[decoded], last[decoded], lo[decoded], own[decoded]
        if req.size:
            st.computed[req] = ctx
            st.emitted[req] = _emitted(ctx, st.prompt[req])
            st.last_token_s[req] = t_end[last]
            shared = lo <= last  # decoded in step at least once after its own first gap
            if shared.any():
                own[shared] = np.maximum(own[shared], _range_max(gap_arr, lo[shared], last[shared]))
            st.max_itl_s[req] = np.maximum(st.max_itl_s[req], own)
    if preempted is not None:  # what each pre-emption left of the victims' counts (the lines above wrote their progress
        # in the run: first tokens, PREFILL_DONE, decoding), but where the run wrote later progress (`_Again.written`)
        later = again.written(d_end) if twice else None
        for ids, computed, emitted in kept:
            keep = None if later is None else ~isin(ids, later)
            if keep is not None:
                ids, computed, emitted = ids[keep], computed[keep], emitted[keep]
            st.computed[ids] = computed
            st.emitted[ids] = emitted
    if prefilling:  # (after the put-back: a victim admitted again in the run may be prefilling)
        req = np.array(list(prefilling), dtype=np.int64)
        st.computed[req] = np.array(list(prefilling.values()), dtype=np.int64)
    if finished:
        req, tick, _ = fin_all
        st.status[req] = Status.FINISHED
        st.finish_s[req] = t_end[tick]
        st.num_finished += req.size
        kv.held[req] = 0
        rec.event(req, t_end[tick], Event.FINISHED)
    run_ids = _int64s(running, len(running))
    # (watermark admission: a running prefill holds its whole prompt's blocks, a decoder its context's, which is more)
    held_ctx = st.computed[run_ids] if retargets is None else np.maximum(st.computed[run_ids], st.prefill_target[run_ids])
    if held_fixed is None and num_samples == 1:
        kv.held[run_ids] = -(-held_ctx // bs)
        if speculated is not None:  # (their verify positions and the draft's lookahead too: `run_ticks`' spec_held)
            held = speculated[0]
            kv.held[run_ids] = [held[r] for r in running]
    elif held_fixed is None:  # (n > 1: the samples' blocks past the prompt, `kv.blocks_for`)
        kv.held[run_ids] = kv.blocks_for(held_ctx, st.prompt[run_ids])
    else:
        kv.held[run_ids] = np.array([held_fixed[r] for r in running], dtype=np.int64)
    kv.num_free = free
    st.running = run_ids
    st.waiting_keys = np.array(waiting, dtype=np.int64)
    st.status[st.key_to_id(st.waiting_keys)] = Status.WAITING  # arrivals queued on the fast path
    st.next_arrival = ptr
    st.now_s = float(t_end[-1])
    if preempted is not None:
        for victims, j_pre in episodes:
            rec.event(victims, t0[j_pre], Event.PREEMPTED)
    if swapping is not None:  # the run's swapped queue (its victims SWAPPED, though admitted in the run), swap events
        st.swapped_keys = np.array(swapping[0], dtype=np.int64)
        st.status[st.key_to_id(st.swapped_keys)] = Status.SWAPPED
        for ids, j_swap, kind in swapping[1]:
            rec.event(ids, t0[j_swap], kind)
    return True


class _Again:
    """A core run's victims admitted again in it (issue 11, session 47: at n = 1 under hard KV pressure the victim of a
    pre-emption is admitted again at the next tick, and a run that handed that tick back lasted ~6 ticks, nearly all of
    its cost its set-up and write-back). The run's per-decoder entries (`base`, `join`, `sync_from`, `first_gap`, its
    finish in `dec_victims`) hold one decoding stretch per request: at the victim's admission its first stretch is filed
    here (`closed`: what the write-back still needs of it, its last token and its largest gap) and its entries start
    again. `last_s`: decoder victim -> its last token's time in the run (not yet in the arrays: its PREFILL_DONE gap is
    from it); `victims`: the requests admitted again; `reentered`: those whose prompt completed since their last
    pre-emption (the write-back does not put back that pre-emption's counts over what the run wrote since).
    Under swap (session 48) a victim swapped out in the run and swapped in again is filed the same way
    (`swapped_in`): it resumes decoding with its KV, so its second stretch is a decoder that joins (`_swap_in_joins`,
    its first gap from `last_s`), not a prefill; `out`: the run's victims swapped out and not swapped in since;
    `rejoined`: decoder -> the decoding tick number its stretch after a swap-in starts at (the run writes its progress
    only if it decoded since: else the swap-out's counts are put back)."""

    __slots__ = ("requeued", "dec_victims", "last_s", "victims", "reentered", "closed", "ended", "out", "rejoined")

    def __init__(self, requeued: set[int], dec_victims: dict[int, int]):
        self.requeued, self.dec_victims = requeued, dec_victims  # (the run's: its victims waiting, its decoder victims)
        self.last_s: dict[int, float] = {}
        self.victims: set[int] = set()
        self.reentered: set[int] = set()
        # (request, last decoding tick number, sync_from, first gap, base, first decoding tick number) of each stretch
        self.closed: list[tuple[int, int, int, float, int, int]] = []
        # (request, its closed stretch's index or -1: none) each time a victim is admitted again, in order: the batch
        # log's running order holds the request once per admission, and the time it was in the batch before this one
        # is that stretch's (`batch_lives`)
        self.ended: list[tuple[int, int]] = []
        self.out: set[int] = set()
        self.rejoined: dict[int, int] = {}

    def admitted(self, w: int, base: dict, join: dict, sync_from: dict, first_gap: dict) -> None:
        """Victim w of the run is admitted again: its decoding stretch in the run (if it decoded in it) is filed in
        `closed` and leaves the run's per-decoder entries (a decoder that joins later is entered after the others, as
        `base`'s order and `join`'s expect)."""
        self.requeued.discard(w)
        self.victims.add(w)
        last_d = self.dec_victims.pop(w, None)
        if last_d is None:  # (pre-empted mid-prefill: no stretch open)
            self.ended.append((w, -1))
            return
        b = base.pop(w)
        first_d = join.pop(w, 0)
        lo = sync_from.pop(w)
        own = first_gap.pop(w, -math.inf)
        if last_d >= first_d:  # (it decoded in the run)
            self.ended.append((w, len(self.closed)))
            self.closed.append((w, last_d, lo, own, b, first_d))
        else:
            self.ended.append((w, -1))

    def preempted(self, ids: list[int]) -> None:
        """The run pre-empted these victims: their counts as the pre-emption left them are theirs again (the write-back
        puts them back unless later progress of theirs is written: `reentered`, `rejoined`)."""
        self.reentered.difference_update(ids)
        for r in ids:
            self.rejoined.pop(r, None)

    def swapped_out(self, ids: list[int]) -> None:
        """The run swapped these victims out (`preempted`; swapping one in again is `swapped_in`)."""
        self.out.update(ids)
        self.preempted(ids)

    def swapped_in(self, taken: list[int], base: dict, join: dict, sync_from: dict, first_gap: dict, st, d: int) -> None:
        """Of the requests a tick swaps in (before decoding tick d), the run's own victims start their next stretch: the
        one before is filed (`admitted`), before `_swap_in_joins` enters the next after the run's other decoders. A
        decoder's progress is written from its next stretch if that decodes (`rejoined`); a prefill's from its first
        token (`reentered`, when its prompt completes) or its computed tokens (`prefilling`)."""
        out = self.out
        for r in taken:
            if r in out:
                out.discard(r)
                self.admitted(r, base, join, sync_from, first_gap)
                if st.computed.item(r) >= st.prefill_target.item(r):
                    self.rejoined[r] = d

    def last_token_s(self, r: int, last_token: np.ndarray) -> float:
        """Request r's last token before its PREFILL_DONE or its swap-in: in the run if it decoded in it, else the
        arrays'."""
        last_s = self.last_s.get(r)
        return last_token.item(r) if last_s is None else last_s

    def write_closed(self, st, decoding: np.ndarray, t_end: np.ndarray, gap_arr: np.ndarray) -> None:
        """The closed stretches' last tokens and largest gaps (as the write-back writes a decoder's), in the order they
        closed: a later token of the same request (its PREFILL_DONE, its next stretch) is written after or kept."""
        tick_of_d = np.flatnonzero(decoding)
        last_token, max_itl = st.last_token_s, st.max_itl_s
        for w, last_d, lo, own, _, _ in self.closed:
            last = int(tick_of_d[last_d])
            t = t_end.item(last)
            if not last_token.item(w) >= t:  # (NaN: none yet)
                last_token[w] = t
            if lo <= last:  # decoded in step at least once after its own first gap
                own = max(own, gap_arr[lo : last + 1].max())
            max_itl[w] = max(max_itl.item(w), own)

    def batch_lives(self, order: np.ndarray, key0: int, dec_req: np.ndarray, dec_b: np.ndarray, dec_join: np.ndarray,
                    dec_last: np.ndarray) -> tuple[np.ndarray, ...]:
        """The batch log's running order and decoders (`_record_batches`' `order`, `dec_req`, ...) with the closed
        stretches: the request's place in `order` before each admission again is its closed stretch's, under a key of
        its own (`key0` + its index: above every request id), or no decoder's (-1); its last place is its open
        stretch's (`dec_req`). Returns (order, keys, ids, bases, first and last decoding tick numbers)."""
        order = order.copy()
        for w, k in self.ended:  # (each admission again ends the earliest of its places still its own)
            places = np.flatnonzero(order == w)
            if places.size:  # (none: it joined after the logged ticks, a swap-in past them)
                order[places[0]] = -1 if k < 0 else key0 + k
        if not self.closed:
            return order, dec_req, dec_req, dec_b, dec_join, dec_last
        ids, last, b, first = (np.array([x[i] for x in self.closed], dtype=np.int64) for i in (0, 1, 4, 5))
        keys = np.concatenate((dec_req, key0 + np.arange(ids.size)))
        return (order, keys, np.concatenate((dec_req, ids)), np.concatenate((dec_b, b)),
                np.concatenate((dec_join, first)), np.concatenate((dec_last, last)))  # fmt: skip

    def written(self, d_end: int) -> np.ndarray | None:
        """The victims whose counts a pre-emption left are not theirs at the run's end (None: none), as the write-back
        wrote later progress: `reentered`, or swapped in again and decoded since (`rejoined` before the run's decoding
        tick count `d_end`). (Once per write-back: its pre-emptions, ~1,700 in a hard-pressure run, each read it.)"""
        later = self.reentered.union(r for r, d in self.rejoined.items() if d < d_end)
        if not later:
            return None
        return np.fromiter(later, np.int64, len(later))


def _first_of(req: np.ndarray) -> np.ndarray:
    """Where each distinct request first occurs in `req`."""
    return np.unique(req, return_index=True)[1]


def _last_of(req: np.ndarray) -> np.ndarray:
    """Where each distinct request last occurs in `req`."""
    return req.size - 1 - np.unique(req[::-1], return_index=True)[1]


def _preempt_in_run(engine, victims: list[int], held: list[int], prefills: dict[int, int], dec_ctx: dict[int, int],
                    waiting: list[int], head: int, swapped: list[int]) -> tuple[StepPlan, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """`Scheduler._preempt` of a run's tick's victims (recompute: the core's pre-emptions), made in the run: the arrays
    are given the victims as they are at that tick (a running prefill's computed tokens `prefills`; a decoder's context
    `dec_ctx` and its emitted count, as the write-back writes a decoder's; the blocks each held), and the queues it
    puts them in are the run's lists: `waiting[head:]` takes the requeued victims back, `swapped` those it swaps out
    (swap: `Scheduler.swaps_out`; their blocks go to host memory, `BlockManager.swap_out`).
    Returns its plan (the victims it pre-empted, for PREEMPTED, those it swapped out and the blocks they moved) and
    (victims, computed, emitted) as it left them (the write-back, which writes the run's first tokens and
    progress over them, puts these back). The other arrays it writes (recompute target, counts, status, the victims'
    blocks) the write-back does not touch, and it overwrites the state's running list, queues and free blocks."""
    st = engine.st
    ids = np.array(victims, dtype=np.int64)
    computed, emitted, prompt = st.computed, st.emitted, st.prompt
    for r, c in prefills.items():
        computed[r] = c
    for r, c in dec_ctx.items():
        computed[r] = c
        emitted[r] = _emitted(c, prompt.item(r))
    kv_held = engine.kv.held
    for r, h in zip(victims, held):
        kv_held[r] = h
    plan = StepPlan()
    # (the victims join the run's lists in place, which the steps read: the state's arrays, which the write-back
    # overwrites, are not asked; converting ~135 keys there and back cost 71-85k instructions a pre-emption, session 52)
    engine.sched._preempt(st, ids, plan, (waiting, head, swapped))
    return plan, (ids, computed[ids], emitted[ids])


def preempts_here(engine: Engine) -> bool:
    """Pre-emption runs on this path (`run_ticks`' `may_preempt`, swap or recompute: `swaps_here`) unless the engine has
    the prefix cache, fixed blocks, the old retract headroom or speculation (its victims' blocks are not their
    context's), or is a cluster instance that pauses, hands off or joins prefilled requests (a decode-pool instance:
    only a run that does not pause reached it there, the cluster's unpaused test reference, and random runs found it
    differing from tick by tick, session 49); those hand the pre-empting tick back to the scheduler."""
    sched = engine.sched
    return (engine.prefix is None and not holds_fixed_blocks(engine) and sched._headroom_steps <= 1 and not engine.may_pause
            and not engine.hand_off_prefilled and not engine.joins_prefilled and engine.spec is None)


def swaps_here(engine: Engine) -> bool:
    """Swap runs on this path (`Scheduler.use_swap`: victims swapped out by `Scheduler._preempt` in the run, swapped in by
    `_Steps.swap_in`) where pre-emption does (`preempts_here`), and not under SGLang's token test (which reads the
    decoders' outputs still to write, kept per decoder here, around the victims); the rest is the scheduler's."""
    sched = engine.sched
    return sched.use_swap and not sched._by_ratio and preempts_here(engine)


def _host_layout_holds(engine: Engine) -> bool:
    """Each swapped request holds in host memory the blocks of its context (`BlockManager.blocks_for`), which a swap-in
    gives back: the layout the run's bookkeeping assumes of a request that joins it."""
    st = engine.st
    return not _apart_from_context(engine.kv, st, st.key_to_id(st.swapped_keys)).any()


def _apart_from_context(kv, st, ids: np.ndarray) -> np.ndarray:
    """Which of these swapped requests hold in host memory other blocks than their context's (`BlockManager.blocks_for`;
    a victim that took a block or a chunk's blocks in its pre-empting tick): swapping one in would not give the layout
    `_swap_in_joins` assumes. Asked of every swapped request at a call's start (`_host_layout_holds`) and of the
    victims the run swaps out (`_Steps.swapped_apart`)."""
    return kv.host_held[ids] != kv.blocks_for(st.computed[ids], st.prompt[ids])


def _swap_in_joins(engine: Engine, taken: list[int], d: int, j: int, swap_blocks: int, running: dict, prefilling: dict,
                   targets: dict, base: dict, join: dict, sync_from: dict, finish_at: dict, done_ticks: list,
                   phase_count: list, shared: dict, S: int, B: int, first_blocks: int, n: int, again=None):  # fmt: skip
    """Requests swapped in at tick j (`_Steps.swap_in`: swapped out before the run, or by it, `_Again.swapped_in`) join
    the run as `Scheduler._swap_in` leaves them: their blocks back from host memory (`BlockManager.swap_in`), RUNNING,
    last in running order; a prefill with what it computed, a decoder from the next decoding tick d (its context
    `base + d`, its finish tick from the tokens it still has to emit, its blocks at each boundary; n > 1: its samples'
    shared prompt blocks and, at its first decode, the copies of a partial last one), its gap from its own last token
    (`waiting_since`, returned to the loop, which sets them after the tick's gaps; a victim of the run's: its last token
    in the run, `_Again.last_token_s`, not yet in the arrays). Returns (swap_blocks with theirs, S, B, first_blocks,
    (decoder, last token) of the decoders)."""
    st, kv = engine.st, engine.kv
    bs = kv.block_size
    copies = n - 1
    decoders = []
    for r in taken:
        swap_blocks += kv.swap_in(r)
        st.status[r] = Status.RUNNING
        running[r] = None
        c, t = st.computed.item(r), st.prefill_target.item(r)
        if c < t:
            prefilling[r] = c
            targets[r] = t
            continue
        b = base[r] = c - d
        join[r], sync_from[r] = d, j + 1
        decoders.append((r, st.last_token_s.item(r) if again is None else again.last_token_s(r, st.last_token_s)))
        _file_finish(finish_at, done_ticks, d + st.output.item(r) - st.emitted.item(r) - 1, r)  # (one token at least to emit)
        phase_count[(-b) % bs] += n
        if copies:  # its samples share the prompt's full blocks; a first decode copies a partial last one
            p = st.prompt.item(r)
            shared[r] = copies * (p // bs)
            if c == p and p % bs:
                phase_count[d % bs] += copies
                first_blocks += copies
        S += b * n
        B += 1
    return swap_blocks, S, B, first_blocks, decoders
