"""Batch-of-one runs: many consecutive single-request services per engine step.

When the batch cap is 1 (exclusive batching, or dynamic batch sizing whose rule has halved the cap
to 1 on slow ticks and keeps it there), a request once admitted prefills alone and decodes alone to
its last token: nothing can join (`Scheduler.prefill_work` says so for one running request at a cap
of 1) and nothing else holds KV. Its service is then fixed by its prompt, its output and the cost
model, and services chain: the next starts when the previous finishes, or at its arrival after an
idle gap. This module runs that chain for as many requests as it provably can in one call and
records the same rows, events, gaps and batch log as tick-by-tick stepping (`Engine._advance_tick`).

NOTE: the policy is not restated; every decision is asked of the scheduler and its rules:
  * which request is next: the waiting queue's order key (`SimState.order_key`, any queue order),
    over the requests that have arrived by the time the previous service ends;
  * whether it is admitted whole: `rules.admit_in_order` with the scheduler's admission blocks
    (`Scheduler.admission_blocks`) and token budget (a prompt that needs chunking hands back);
  * whether a tick of this kind admits or decodes: `Scheduler.prefill_work` and `tick_kind`
    (a stateless phase controller, asked once per call);
  * whether the cap stays 1: `Scheduler.cap_trajectory` (the dynamic batch rule over the ticks'
    durations), stopping before the first service with a tick that would raise it.
Ticks are priced by the same cost functions as the reference (`Engine._price_run` for a decoding
request, `CostModel.prefill_tick`, `_advance_tick`'s aggregates for a lone prefill) and times accumulate
sequentially from each service's start (`np.add.accumulate`), so results are bit-identical
(tests/sim_core/test_equivalence.py). Only whole services run here, and only while every guard
allows them (limits.max_ticks, max_sim_time_s, the budget meter's next check, a cluster's
horizon); anything else (a swapped or recomputing request, speculative decoding, a KV shortage) is left
to the general loop.

n samples per request (`workload.num_samples`) decode in lockstep: a decode tick computes n tokens over n
contexts (`Engine._price_run`) and holds `kv.blocks_for(context, prompt)`'s copy-on-write layout; a fresh
prompt's prefill is the same tick as with one sample. A closed loop's clients are released as the chain goes:
at each service's end the chain makes `Engine._finish`'s own call (`SimState.release_closed_loop`: that end,
one request, the think time) and reads the released arrival time back, so the next service may be one just
sent (issue 11: both ran ~7x the batch-of-one path's cost per tick on the general loop).

Closed-loop multi-turn sessions (SessionState) chain too (issue 11: 8-12x on the general loop): a later turn's arrival
is known only once the turn before it finishes, so the candidates are the waiting requests and the turns that may
arrive (`SessionState.may_arrive`), and the chain takes each arrival from the state in send order with its queue key
(`SessionState.take_arrival`, as `admit_arrivals` does), a request outside the candidates stopping the chain when it is
the head. At each service's end it makes `Engine._finish`'s call (`release_next_turns`: that turn, its end), so with
think time 0 the next turn may be the next service. Tick by tick an arrival is taken at a tick's start: what the chain
took after the last tick it runs (by the end of that tick, or by the start of a service it then does not run) is given
back (`SessionState.untake`), for the step after the chain to take.

With the prefix cache (issue 11: 40-80x on the general loop) each service makes the cache's calls of tick-by-tick
stepping, in the same order and at the same ticks (`_CachedServices`): its admission after the longest cached prefix
(`Scheduler.prefix_lookup`, `prefix_admission_blocks`, `admit_cached`: the scheduler's own steps), its prefill tick
priced after the hit and registered (`kv.register`), its growth's evictions (`PrefixCache.trim_marked`), and at its end
`Engine.free_finished` (a session's reply cached, its blocks released). Its prefill after the hit must be whole and keep
the dynamic batch cap at 1, else the service is left to the general loop.
"""

from __future__ import annotations

import heapq
import math
from bisect import bisect_left
from typing import TYPE_CHECKING

import numpy as np

from sim_core.arrays import isin
from sim_core.recorder import CHUNK_ROWS
from sim_core.schedulers import rules
from sim_core.schedulers.phase import TickKind
from sim_core.sessions import SessionState
from sim_core.types import Event, Phase, Status

if TYPE_CHECKING:
    from sim_core.engine import Engine

_EMPTY = np.empty(0, dtype=np.int64)
MAX_SOLO_SERVICES = 2048  # requests considered per call (bounds the arrays one call builds)
MIN_SOLO_SERVICES = 16  # the first window; it doubles while calls serve all of it
MAX_BACKOFF_STEPS = 32  # most empty-engine steps skipped after calls that served one request or none
WINDOW, LEFT, GUARD, NONE = "window", "left", "guard", "none"  # why a call stopped (`advance`)
MAX_SOLO_TICKS = 1 << 16  # ticks of those requests per call (~10 float/int columns of this length)
MAX_PRICED_HITS = 1 << 16  # prefill ticks after a cached prefix priced and kept per engine ((chunk, cached) -> price)


def eligible(engine: Engine) -> bool:
    """Config-level conditions under which the batch may be one request at a time and a service
    depends on nothing but the request and the cost model (checked again per call: the cap)."""
    sched, cfg = engine.sched, engine.cfg
    return (
        (sched.max_seqs == 1 or cfg.scheduler.dynamic_batch.enabled)
        and sched.phase.is_stateless  # `choose` answers from its arguments (and `observe` keeps nothing)
        and not sched._by_ratio  # (SGLang's admission keeps its ratio as state, advanced tick by tick)
        and engine.spec is None
        # (sessions: the chain takes arrivals from SessionState's own queue; a deployment's instances route them)
        and (engine.workload.next_turn is None or isinstance(engine.st, SessionState))
        and not engine.hand_off_prefilled
    )


def _rules_allow(engine: Engine) -> bool:
    """At a cap of 1: an empty engine admits one request in a tick that is not decode-only, and one
    running decoder leaves no room and no prefill work (so it decodes alone to its end)."""
    sched, st = engine.sched, engine.st
    if sched.batch_cap != 1:
        return False
    if sched.prefill_work(0, 0, 1, 0) != (True, True) or sched.prefill_work(1, 1, 1, 0) != (False, False):
        return False
    return sched.tick_kind(st, st.now_s, 0, 0, True, _EMPTY) != TickKind.DECODE


def _candidates(engine: Engine, window: int):
    """Requests that may be served next, in the order they join the queue: the waiting ones (by key),
    then arrivals in arrival order, bounded per call. Returns (ids, how many of them wait now, the
    smallest key of a waiting request left out, the first arrival left out)."""
    st = engine.st
    waiting = st.key_to_id(st.waiting_keys[:window])
    lo = st.next_arrival
    pending = np.arange(lo, min(st.num_requests, lo + window - waiting.size), dtype=np.int64)
    ids = np.concatenate([waiting, pending]) if waiting.size else pending
    ticks = np.cumsum(st.output[ids])  # one prefill tick and output - 1 decode ticks each
    ids = ids[: int(np.searchsorted(ticks, MAX_SOLO_TICKS, side="right"))]
    num_waiting = min(ids.size, waiting.size)
    left_key = int(st.waiting_keys[num_waiting]) if num_waiting < st.waiting_keys.size else math.inf
    beyond = lo + ids.size - num_waiting
    left_s = float(st.arrival_s[beyond]) if beyond < st.num_requests else math.inf
    return ids, num_waiting, left_key, left_s


class SoloPath:
    """The batch-of-one path of one engine (`Engine.step` calls `advance`). Besides its price tables
    it keeps only how much to try (never what to decide): pricing a window of candidates costs O(its
    ticks) whether or not its services can run here, so the window starts small, doubles while calls
    serve all of it, and shrinks to twice what a call served when a service that must be left to the
    general loop stops the chain; after calls in a row that served one request or none that way, the
    next 1, 2, 4, ... 32 empty-engine steps are left to the general loop (one service costs less there)."""

    def __init__(self, engine: Engine):
        self.engine = engine
        self.window = MIN_SOLO_SERVICES
        self.prices = _Prices(engine)
        self.backoff = 0  # empty-engine steps to leave to the general loop after a call served one or none
        self._skip = 0

    def advance(self) -> bool:
        """Serve whole requests one at a time from the current state; False when not one could be."""
        if self.engine.st.running.size:
            return False
        if self._skip:  # a call costs ~3 general steps: where services alternate with others, back off
            self._skip -= 1
            return False
        served, stop = advance(self.engine, self.window, self.prices)
        if stop == WINDOW:
            self.window = min(2 * self.window, MAX_SOLO_SERVICES)
        elif stop == LEFT:
            self.window = max(2 * served, MIN_SOLO_SERVICES)
        if served > 1 or stop != LEFT:
            self.backoff = 0
        else:  # one request or none before a service that is not for this path: calls in a row back off more
            self.backoff = self._skip = min(2 * self.backoff or 1, MAX_BACKOFF_STEPS)
        return served > 0


class _Prices:
    """The cost model's (duration, flops, bytes, compute-bound) of a lone tick: a one-decode tick by
    the context before it (`Engine._price_run`), and a whole-prompt prefill tick by the prompt
    (`_advance_tick`'s aggregates for one prefill and no decodes). Pure functions of the context,
    kept per engine as tables over 0..n - 1 that grow by doubling; bounded by the longest context
    (max_model_len): 4 columns x 8 bytes per token, 1 MiB at 32k tokens."""

    def __init__(self, engine: Engine):
        self.engine = engine
        self.decode: tuple = ()
        self.prefill: tuple = ()
        self.after: dict[tuple[int, int], tuple] = {}  # (chunk, cached tokens) -> a prefill tick's price after a hit

    def decode_at(self, max_ctx: int) -> tuple:
        if not self.decode or self.decode[0].size <= max_ctx:
            n = max(2 * (self.decode[0].size if self.decode else 0), max_ctx + 1, 256)
            self.decode = self.engine._price_run(np.ones(n, dtype=np.int64), np.arange(n, dtype=np.int64))
        return self.decode

    def prefill_of(self, max_prompt: int) -> tuple:
        if not self.prefill or self.prefill[0].size <= max_prompt:
            p = np.arange(max(2 * (self.prefill[0].size if self.prefill else 0), max_prompt + 1, 256), dtype=np.int64)
            self.prefill = self.engine.cost.prefill_tick(p, np.zeros_like(p))
        return self.prefill

    def prefill_after(self, chunk: int, cached: int) -> tuple:
        """A lone prefill tick of `chunk` positions after `cached` tokens found in the prefix cache (Python ints: the
        cost model's scalar path, as `_advance_tick` prices it), kept per (chunk, cached)."""
        key = (chunk, cached)
        priced = self.after.get(key)
        if priced is None:
            if len(self.after) >= MAX_PRICED_HITS:
                self.after.clear()
            priced = self.after[key] = self.engine.cost.prefill_tick(chunk, cached)
        return priced


class _CachedServices:
    """The prefix cache's part of the services a chain runs (issue 11: with the prefix cache both presets ran on the
    general loop, 40-80x the chain's cost per tick). A service makes the cache's calls that tick-by-tick stepping makes
    for it, in the same order and at the same ticks (the cache's marks are per tick: the recorder's count plus
    `PrefixCache.tick_offset`, set here to each call's row):
      * at its first tick, the admission: `Scheduler.prefix_lookup` (the longest cached prefix), the admission rule
        (`rules.admit_next`, admit_in_order's test of one candidate) with `Scheduler.prefix_admission_blocks`, then
        `Scheduler.admit_cached` (the hit referenced, the rest allocated: evictions by the free count), then the
        prefill's registration (`kv.register`, as `_advance_tick` after the tick);
      * at each decode tick whose context needs a block, `_grow_decodes`' allocation (the free count set: its trim);
      * at its last tick, `Engine.free_finished` (`_finish`'s: the reply cached with sessions, the blocks released).
    Nothing else runs between them (one request at a time), and every service ends with no block held. The lookup,
    which changes nothing the results read, is made before the service is known to run (its prefill tick's price
    follows the hit); the rest only once it runs. A service whose admission after the hit is not whole, or whose
    prefill tick after the hit would raise the dynamic batch cap, is left to the general loop."""

    def __init__(self, engine: Engine, ids, prompt, T, adm, first, cols, ends, prices: _Prices):
        self.engine, self.cols, self.ends, self.prices = engine, cols, ends, prices
        kv, sched = engine.kv, engine.sched
        self.ids, self.first, self.T = ids.tolist(), first.tolist(), T.tolist()
        self.positions = prompt.copy()  # each candidate's prefill positions (its prompt, less what its hit holds)
        self.dynamic = sched.cfg.dynamic_batch.enabled
        self.looked: tuple = ()  # the last candidate priced: (its lookup, the blocks its admission takes)
        # Blocks held during each candidate tick (as `_record` counts them) and the decode ticks where they grow
        N = int(first[-1] + T[-1])
        ctx = np.repeat(prompt - 1, T) + (np.arange(N) - np.repeat(first, T))  # context before each decode tick
        layout = np.repeat(prompt, T) if engine.n > 1 else None  # (only the n > 1 layout depends on the prompt)
        held = np.maximum(np.repeat(adm, T), kv.blocks_for(ctx + sched.decode_slots, layout))
        held[first] = adm
        grows = np.flatnonzero(held[1:] != held[:-1]) + 1
        grows = grows[~isin(grows, first)]  # (a service's first tick holds its admission's blocks)
        self.grow_at, self.grow_to = grows.tolist(), held[grows].tolist()

    def price(self, c: int) -> bool:
        """Candidate c's admission after its cached prefix, as the scheduler would make it now: True when it is admitted
        whole (its prefill tick, after the hit, priced into the columns), False when the service is left to the
        general loop."""
        eng = self.engine
        st, kv, sched = eng.st, eng.kv, eng.sched
        r = self.ids[c]
        looked, tokens = sched.prefix_lookup(st, r)
        taken = rules.admit_next(0, tokens, sched.cfg.max_num_batched_tokens, kv.num_free, sched.watermark_blocks,
                                 lambda i, chunk: sched.prefix_admission_blocks(st, r, looked, chunk), sched.is_chunked,
                                 sched.is_static)  # fmt: skip
        if taken is None or taken[0] != tokens:
            return False
        hit = looked[1]
        if hit:  # its prefill tick computes what follows the hit, over the hit's context
            m = sched.prefix_positions(st, r, looked, tokens)
            priced = self.prices.prefill_after(m, hit * kv.block_size)
            if self.dynamic and sched.cap_trajectory(np.array([priced[0]]))[1] != 1:
                return False  # (the cap rule over that tick: a faster tick would raise the cap)
            o = self.first[c]
            for col, value in zip(self.cols, priced):
                col[o] = value
            self.ends[o] = priced[0]
            self.positions[c] = m
        self.looked = (looked, taken[1])
        return True

    def serve(self, c: int, row: int) -> None:
        """The cache's calls of candidate c's service (priced last, by `price`), whose first tick is row `row`."""
        eng = self.engine
        st, kv, sched, pc = eng.st, eng.kv, eng.sched, eng.prefix
        r, o, k = self.ids[c], self.first[c], self.T[c]
        base = row - o - eng.rec.num_ticks  # a candidate tick's offset from the recorder's count (marks' ticks)
        one = np.array([r], dtype=np.int64)
        pc.tick_offset = base + o
        looked, need = self.looked
        sched.admit_cached(st, r, looked, need)
        st.computed[r] += int(self.positions[c])  # (its prefill tick, `_advance_tick`'s order: computed, then registered)
        kv.register(one, st.computed[one])
        # Its decode ticks that take a block (`_grow_decodes`' `kv.allocate`, whose free count's trim evicts when the
        # evictable blocks exceed the free ones): nothing else uses the cache until its end, so the trims of the ticks
        # that evict are made in one call (`PrefixCache.trim_marked`, as the scalar core's all-decode ticks), each at
        # its tick, before the free count is set (whose own trim then has nothing left to evict)
        grow_at, grow_to = self.grow_at, self.grow_to
        held = kv.held.item(r)  # (its admission's blocks, hit included)
        free, evictable, tick = kv.num_free, pc.num_evictable, eng.rec.num_ticks + base
        marked: list[int] = []
        for i in range(bisect_left(grow_at, o + 1), bisect_left(grow_at, o + k)):
            free -= grow_to[i] - held
            held = grow_to[i]
            if free < evictable:
                marked += (tick + grow_at[i], free)
                evictable = free
        if marked:
            pc.trim_marked(marked)
        kv.num_free = free
        kv.held[r] = held
        pc.tick_offset = base + o + k - 1
        eng.free_finished(one)
        pc.tick_offset = 0


def _first_raise(sched, dur: np.ndarray) -> int:
    """Index of the first tick after which the batch cap is no longer 1 (dur.size if none), from
    `Scheduler.cap_trajectory` over growing prefixes (the cap after a tick depends on those before)."""
    k = 64
    while True:
        hit = np.flatnonzero(sched.cap_trajectory(dur[:k])[1:] != 1)
        if hit.size:
            return int(hit[0])
        if k >= dur.size:
            return dur.size
        k *= 4


def advance(engine: Engine, window: int = MAX_SOLO_SERVICES, prices: _Prices | None = None) -> tuple[int, str]:
    """Serve whole requests one at a time from the current state, from the first `window` in queue
    order. Returns (requests served, why it stopped: WINDOW (its candidates ran out), LEFT (the next
    service is left to the general loop), GUARD (a limit or the horizon), or NONE (not applicable))."""
    st, kv, sched, lim = engine.st, engine.kv, engine.sched, engine.cfg.limits
    if st.running.size or st.swapped_keys.size or kv.num_used or not _rules_allow(engine):
        return 0, NONE
    if st.requeue_appends and st.waiting_keys.size > 1 and not (st.waiting_keys[1:] > st.waiting_keys[:-1]).all():
        return 0, NONE  # a pre-empted request waits behind later keys (requeue append): the chain's next is by key
    prices = prices or _Prices(engine)
    # The queue's head first (cheap): a service that would raise the cap is left to the general loop.
    head = int(st.key_to_id(st.waiting_keys[0])) if st.waiting_keys.size else st.next_arrival
    if head < st.num_requests:
        p, o = int(st.prompt[head]), int(st.output[head])
        dur = prices.decode_at(p + o)[0][p - 1 : p + o - 1].copy()
        dur[0] = prices.prefill_of(p)[0][p]
        if _first_raise(sched, dur) < o:
            return 0, LEFT
    sessions = engine.workload.next_turn is not None
    ids, num_waiting0, left_key, left_s = (_session_candidates if sessions else _candidates)(engine, window)
    if not ids.size:
        return 0, NONE
    prompt, T, adm, ends_at, first, cols, safe = _price(engine, ids, prices)
    if not safe.any() or (not sessions and not safe[0]):
        return 0, LEFT
    ends = cols[0].copy()  # accumulated in place, service by service
    cached = None if engine.prefix is None else _CachedServices(engine, ids, prompt, T, adm, first, cols, ends, prices)
    rows = engine.rec.num_ticks
    max_rows = lim.max_ticks if engine.meter is None else min(lim.max_ticks, rows + engine.meter.ticks_until_check(engine))
    end_s = min(lim.max_sim_time_s, engine.horizon_s)  # every tick must start before it
    chain = _session_chain if sessions else _chain
    served, starts, idle_from, stop, arrived = chain(engine, ids, num_waiting0, left_key, left_s, safe, T, first, ends,
                                                     rows, max_rows, end_s, cached)  # fmt: skip
    if not served:
        return 0, stop
    sv = np.array(served, dtype=np.int64)
    if served == list(range(sv.size)):  # served in candidate order (FCFS): their ticks are a prefix
        ti = slice(0, int(ends_at[sv[-1]]))
    else:
        ti = np.repeat(first[sv] - (np.cumsum(T[sv]) - T[sv]), T[sv]) + np.arange(int(T[sv].sum()))
    pre_tokens = prompt[sv] if cached is None else cached.positions[sv]
    _record(engine, ids[sv], prompt[sv], T[sv], adm[sv], np.array(starts), np.array(idle_from),
            ends[ti], [col[ti] for col in cols], arrived, pre_tokens)  # fmt: skip
    return sv.size, stop


def _price(engine: Engine, ids: np.ndarray, prices: _Prices) -> tuple:
    """The candidates' services, priced in candidate order (candidate c's ticks at first[c] : first[c] + T[c]), and
    which may run here: (prompt, ticks T, admission blocks, ends_at, first, the price columns, safe)."""
    st, kv, sched = engine.st, engine.kv, engine.sched
    prompt, T = st.prompt[ids], st.output[ids]  # a service has one prefill tick and output - 1 decode ticks
    # Fresh requests only (a recompute after pre-emption has emitted tokens and a different first tick).
    fresh = (st.computed[ids] == 0) & (st.emitted[ids] == 0) & (st.prefill_target[ids] == prompt)
    # Admission of each, whole, by the scheduler's rule; then room for its context as it decodes.
    adm = np.asarray(sched.admission_blocks(st, ids, prompt), dtype=np.int64)
    if engine.prefix is None:
        budget = sched.cfg.max_num_batched_tokens
        span = int(adm.max()) + 1
        pairs, inverse = np.unique(prompt * span + adm, return_inverse=True)
        whole = np.array([rules.admit_in_order([pa // span], budget, kv.num_free, sched.watermark_blocks,
                                               lambda i, c, a=pa % span: a, sched.is_chunked, sched.is_static)
                          == [(pa // span, pa % span)] for pa in pairs.tolist()])[inverse.reshape(-1)]  # fmt: skip
    else:  # (after the prefix cache's hit, known only when the service would start: `_CachedServices.price`)
        whole = True
    last_held = np.maximum(adm, kv.blocks_for(prompt + T - 2 + sched.decode_slots, prompt))
    fits = (T < 2) | (last_held <= kv.num_free)
    ends_at = np.cumsum(T)
    first = ends_at - T
    N = int(ends_at[-1])
    dec = prices.decode_at(int((prompt + T).max()))
    pre = prices.prefill_of(int(prompt.max()))
    # each tick at the context before it (prefill ticks: overwritten by the prefill's price)
    d_of = np.repeat(prompt - 1, T) + (np.arange(N) - np.repeat(first, T))
    cols = [dec[j][d_of] for j in range(4)]
    for j in range(4):
        cols[j][first] = pre[j][prompt]
    # The cap stays 1 up to the first tick after which the rule would raise it: services before it are safe (the rule's
    # only state is the cap, so services that each keep it at 1 keep it there in any order).
    first_raise = _first_raise(sched, cols[0])
    safe = fresh & whole & fits
    if first_raise < N:
        safe[int(np.searchsorted(ends_at, first_raise, side="right")):] = False
    return prompt, T, adm, ends_at, first, cols, safe


def _service_end(ends: np.ndarray, o: int, k: int, s: float, end_s: float) -> float:
    """A service of k ticks (at ends[o : o + k], their durations) started at s: its ticks' ends, accumulated in place
    from s (sequentially: the same rounding as tick by tick, np.add.accumulate); its end, or NaN when its last tick
    would start at or after end_s."""
    seg = ends[o : o + k]
    seg[0] = s + seg[0]
    np.add.accumulate(seg, out=seg)
    if k > 1 and float(seg[k - 2]) >= end_s:
        return math.nan
    return float(seg[k - 1])


def _chain(engine: Engine, ids, num_waiting0, left_key, left_s, safe, T, first, ends, rows, max_rows, end_s, cached):
    """The chain where requests arrive in id order (open loop, closed loop): who is next (queue order), when it starts,
    whether every guard allows it whole. Returns (candidates served, their starts, idle rows' starts (NaN: none),
    why it stopped, None: arrivals are read from the state by `_record`)."""
    st = engine.st
    C = ids.size
    m_safe = int(np.argmin(safe)) if not safe.all() else C
    keys = st.order_key[ids].tolist()
    arrival = st.arrival_s[ids].tolist()
    T_l, first_l = T.tolist(), first.tolist()
    heap = [(keys[c], c) for c in range(num_waiting0)]  # sorted keys: already a heap
    nxt = num_waiting0  # next candidate to arrive
    f = st.now_s
    served, starts, idle_from = [], [], []
    # Closed loop: a service's end frees its client, who sends the next request after the think time; the chain makes
    # `Engine._finish`'s own release and reads back the times it wrote (ids from `lo` on are the pending candidates)
    think_s = engine.workload.closed_loop_think_s
    lo, beyond = st.next_arrival, st.next_arrival + C - num_waiting0
    while True:
        while nxt < C and arrival[nxt] <= f:
            heapq.heappush(heap, (keys[nxt], nxt))
            nxt += 1
        s, gap = f, False
        if not heap:  # nothing waits: an idle row to the next arrival (before the horizon)
            if nxt >= C or arrival[nxt] >= engine.horizon_s:
                stop = WINDOW if nxt >= C else GUARD
                break
            s, gap = arrival[nxt], True
            while nxt < C and arrival[nxt] <= s:
                heapq.heappush(heap, (keys[nxt], nxt))
                nxt += 1
        key, c = heap[0]
        if left_s <= s or key > left_key:  # a request outside the candidates has arrived: it might be the head
            stop = WINDOW
            break
        if c >= m_safe:
            stop = LEFT
            break
        r = rows + gap + T_l[c]
        stop = GUARD
        if r > max_rows or s >= end_s:
            break
        if cached is not None and not cached.price(c):  # (its admission after the cache's hit: the general loop's)
            stop = LEFT
            break
        end = _service_end(ends, first_l[c], T_l[c], s, end_s)
        if end != end:  # (NaN: the last tick would start too late)
            break
        heapq.heappop(heap)
        served.append(c)
        starts.append(s)
        idle_from.append(f if gap else math.nan)
        if cached is not None:  # its cache calls, at its ticks
            cached.serve(c, rows + gap)
        f = end
        rows = r
        if think_s is not None and st.next_release < st.num_requests:
            sent = st.next_release
            st.release_closed_loop(f, 1, think_s)
            if sent < beyond:  # a candidate: it may be served later in this chain
                arrival[num_waiting0 + sent - lo] = float(st.arrival_s[sent])
            elif left_s == math.inf:  # the first request outside the candidates to arrive (ids are sent in order)
                left_s = float(st.arrival_s[sent])
    return served, starts, idle_from, stop, None


def _session_candidates(engine: Engine, window: int):
    """Closed-loop sessions: the waiting requests (by key), then the turns that may arrive next (`SessionState.may_arrive`:
    released turns, first turns, and the later turns of these and of the waiting ones), bounded per call. Returns (ids,
    how many of them wait now, the smallest key of a waiting request left out, inf: arrivals are taken one by one)."""
    st = engine.st
    waiting = st.key_to_id(st.waiting_keys[:window])
    upcoming = np.array(st.may_arrive(waiting.tolist(), window - waiting.size), dtype=np.int64)
    ids = np.concatenate([waiting, upcoming[: max(window - waiting.size, 0)]])
    ticks = np.cumsum(st.output[ids])  # one prefill tick and output - 1 decode ticks each
    ids = ids[: int(np.searchsorted(ticks, MAX_SOLO_TICKS, side="right"))]
    num_waiting = min(ids.size, waiting.size)
    left_key = int(st.waiting_keys[num_waiting]) if num_waiting < st.waiting_keys.size else math.inf
    return ids, num_waiting, left_key, math.inf


def _take(take, t: float, heap: list, where: dict, taken: list, R: int) -> None:
    """Every arrival sent by t from the state (`take_arrival`: the send order, its queue key) joins the chain's queue
    (the candidate it is, or -1: not a candidate)."""
    while (key := take(t)) >= 0:
        taken.append(key)
        heapq.heappush(heap, (key, where.get(key % R, -1)))


def _session_chain(engine: Engine, ids, num_waiting0, left_key, left_s, safe, T, first, ends, rows, max_rows, end_s,
                   cached):
    """The chain where later turns are released by finishes (closed-loop sessions, SessionState): arrivals are taken
    from the state in send order with their queue keys (`take_arrival`), and at each service's end the chain makes
    `Engine._finish`'s own release (`release_next_turns`: that turn, its end). The arrivals taken after the last run
    tick's start are given back (`untake`): tick by tick they are taken at the next step. Returns (candidates served,
    their starts, idle rows' starts (NaN: none), why it stopped, the ids arrived by the last tick's start, in order)."""
    st = engine.st
    R = st.num_requests
    take, release = st.take_arrival, st.release_next_turns
    ids_l, T_l, first_l, safe_l = ids.tolist(), T.tolist(), first.tolist(), safe.tolist()
    where = {r: c for c, r in enumerate(ids_l)}
    heap = [(key, c) for c, key in enumerate(st.waiting_keys[:num_waiting0].tolist())]  # sorted keys: a heap
    if left_key != math.inf:  # the first waiting request left out: the chain stops when it is the head
        heap.append((left_key, -1))
    taken: list[int] = []  # keys taken from the state's arrivals, in send order
    f, last_start = st.now_s, -math.inf  # (the last run tick's start)
    served, starts, idle_from = [], [], []
    while True:
        _take(take, f, heap, where, taken, R)
        s, gap = f, False
        if not heap:  # nothing waits: an idle row to the next arrival (before the horizon)
            s = st.next_arrival_s()
            if s >= engine.horizon_s:
                stop = WINDOW if s == math.inf else GUARD
                break
            gap = True
            _take(take, s, heap, where, taken, R)
        key, c = heap[0]
        if c < 0:  # a request outside the candidates is the head
            stop = WINDOW
            break
        if not safe_l[c]:
            stop = LEFT
            break
        r = rows + gap + T_l[c]
        stop = GUARD
        if r > max_rows or s >= end_s:
            break
        if cached is not None and not cached.price(c):  # (its admission after the cache's hit: the general loop's)
            stop = LEFT
            break
        o, k = first_l[c], T_l[c]
        end = _service_end(ends, o, k, s, end_s)
        if end != end:  # (NaN: the last tick would start too late)
            break
        heapq.heappop(heap)
        served.append(c)
        starts.append(s)
        idle_from.append(f if gap else math.nan)
        if cached is not None:  # its cache calls, at its ticks (before `_finish`'s release of the next turn, as there)
            cached.serve(c, rows + gap)
        f, last_start = end, float(ends[o + k - 2]) if k > 1 else s
        rows = r
        release([ids_l[c]], f)
    arrived = np.array(taken, dtype=np.int64) % R
    num_kept = int(np.searchsorted(st.arrival_s[arrived], last_start, side="right"))  # (taken in send order)
    st.untake(taken[num_kept:])
    return served, starts, idle_from, stop, arrived[:num_kept]


def _record(engine: Engine, r_ids, P, T, adm, svc_start, idle_from, ends, cols, arrived, pre_tokens) -> None:
    """Write the served requests' rows, events, gaps, batch log and final state in bulk (ticks in
    service order: `ends` and the price columns `cols` are per tick). `arrived`: the ids that arrived by
    the last tick's start, in order, taken from the state by the chain (sessions), or None: read here.
    `pre_tokens`: each prefill tick's positions (the prompt, or with the prefix cache what follows its hit)."""
    st, kv, sched, rec = engine.st, engine.kv, engine.sched, engine.rec
    K, N = r_ids.size, ends.size
    dur, flops, nbytes, is_comp = cols
    first = np.cumsum(T) - T  # first tick of each service
    last = first + T - 1
    tick_starts = np.empty(N)
    tick_starts[1:] = ends[:-1]  # a tick starts when the previous one ends (its service's start for a first tick)
    tick_starts[first] = svc_start
    first_tok, finish = ends[first], ends[last]
    is_pre = np.zeros(N, dtype=bool)
    is_pre[first] = True
    svc = np.repeat(np.arange(K), T)
    ctx = np.repeat(P - 1, T) + (np.arange(N) - np.repeat(first, T))  # context before a decode tick
    held = np.maximum(np.repeat(adm, T), kv.blocks_for(ctx + sched.decode_slots, np.repeat(P, T) if engine.n > 1 else None))
    held[first] = adm  # blocks held during each tick (admission's, grown as the context crosses blocks)
    # Requests waiting during each tick: those waiting now and arrivals by its start, less those admitted.
    if arrived is None:
        lo = st.next_arrival
        arrived_s = st.arrival_s[lo : lo + int(np.searchsorted(st.arrival_s[lo:], tick_starts[-1], side="right"))]
    else:
        arrived_s = st.arrival_s[arrived]
    joins = np.searchsorted(tick_starts, arrived_s, side="left")  # tick each arrival counts from
    waiting = np.cumsum(np.bincount(joins, minlength=N)[:N]) + (st.waiting_keys.size - 1) - svc
    running = np.ones(N, dtype=np.int64)
    running[last] = 0
    used = held.copy()
    used[last] = 0
    engine._note_kv_peak(int(held.max()))  # (during each tick: a service's last holds its blocks until its end)
    gaps = ends - tick_starts  # a decode's gap: its end minus the previous token (this tick's start)
    rec.event(r_ids, svc_start, Event.SCHEDULED)
    rec.event(r_ids, first_tok, Event.FIRST_TOKEN)
    rec.event(r_ids, finish, Event.FINISHED)
    rec.itl(gaps[~is_pre])
    gaps[first] = -np.inf
    max_gap = np.maximum.reduceat(gaps, first)
    n, cap = engine.n, sched.batch_cap
    # rows: an idle row before each service that waited for its arrival, then its ticks
    gap = ~np.isnan(idle_from)
    tick_cols = {
        "t_start_s": tick_starts, "duration_s": dur, "phase": np.where(is_pre, Phase.PREFILL, Phase.DECODE),
        "num_prefill_tokens": np.where(is_pre, np.repeat(pre_tokens, T), 0), "num_decode_tokens": np.where(is_pre, 0, n),
        "num_prefill_seqs": is_pre, "num_decode_seqs": ~is_pre, "num_running": running, "num_waiting": waiting,
        "num_swapped": 0, "kv_blocks_used": used, "flops": flops, "bytes": nbytes, "is_compute_bound": is_comp,
        "num_preempted": 0, "swap_blocks": 0, "batch_cap": cap,
    }  # fmt: skip
    if gap.any():  # scatter the ticks around the idle rows
        row_of = np.arange(N) + np.repeat(np.cumsum(gap), T)
        idle_rows = (first + np.cumsum(gap))[gap] - 1
        M = N + int(gap.sum())
        idle_vals = {"t_start_s": idle_from[gap], "duration_s": svc_start[gap] - idle_from[gap], "phase": Phase.IDLE}
        for name, vals in tick_cols.items():
            if np.ndim(vals):
                out = np.empty(M)
                out[row_of] = vals
                out[idle_rows] = idle_vals.get(name, 0)
                tick_cols[name] = out
    else:
        row_of, M = None, N
    if rec.wants_batches:
        m = engine.cfg.limits.num_recorded_batches - rec.num_ticks  # rows still logged
        g = rec.num_ticks + (np.arange(N) if row_of is None else row_of)
        keep = g < engine.cfg.limits.num_recorded_batches
        if m < M:
            rec.batch(g[keep], np.repeat(r_ids, T)[keep], np.where(is_pre, np.repeat(pre_tokens, T), 1)[keep], ~is_pre[keep],
                      held[keep])  # fmt: skip
        else:
            rec.batch(g, np.repeat(r_ids, T), np.where(is_pre, np.repeat(pre_tokens, T), 1), ~is_pre, held)
    _ticks_in_chunks(rec, tick_cols, M)
    # state: arrivals by the last tick's start join the queue, the served leave it finished
    if arrived is None:
        st.admit_arrivals(float(tick_starts[-1]))
    elif arrived.size:  # (as `SessionState.admit_arrivals` queues what it takes)
        st.push_waiting(arrived)
    st.waiting_keys = st.waiting_keys[~isin(st.waiting_keys, st.order_key[r_ids])]
    st.status[r_ids] = Status.FINISHED
    # (a request pre-empted by recompute before its first token is fresh again but keeps its first admission's time, as
    # `Scheduler._admit` keeps it)
    scheduled_s = st.first_scheduled_s[r_ids]
    st.first_scheduled_s[r_ids] = np.where(np.isnan(scheduled_s), svc_start, scheduled_s)
    st.prefill_start_s[r_ids] = svc_start
    st.first_token_s[r_ids] = first_tok
    st.last_token_s[r_ids] = finish
    st.finish_s[r_ids] = finish
    st.computed[r_ids] = P + T - 1  # (fresh requests; with the prefix cache the admission set the hit's tokens)
    st.emitted[r_ids] += T
    st.max_itl_s[r_ids] = np.maximum(st.max_itl_s[r_ids], max_gap)
    st.num_finished += K
    sched.batch_cap = int(sched.cap_trajectory(dur)[-1])
    st.now_s = float(finish[-1])


def _ticks_in_chunks(rec, cols: dict, M: int) -> None:
    """`Recorder.ticks` in pieces that end at the recorder's chunk boundaries (a piece that fits the
    current chunk is written in place; one that straddles a boundary is copied row-major first)."""
    done = 0
    while done < M:
        take = min(M - done, CHUNK_ROWS - rec.num_ticks % CHUNK_ROWS)
        rec.ticks({k: (v[done : done + take] if np.ndim(v) else v) for k, v in cols.items()}, take)
        done += take
