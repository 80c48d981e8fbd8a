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
request, `CostModel.tick` with `_advance_tick`'s aggregates for a lone prefill) and times accumulate
sequentially from each service's start (`np.add.accumulate`), so results are bit-identical
(tests/sim_core/test_equivalence.py). Only whole services run here, and only while every guard
allows them (limits.max_ticks, max_sim_time_s, the budget meter's next check, a cluster's
horizon); anything else (a swapped or recomputing request, prefix caching, speculative decoding,
n > 1 samples, closed-loop releases, a KV shortage) is left to the general loop.
"""

from __future__ import annotations

import heapq
import math
from typing import TYPE_CHECKING

import numpy as np

from sim_core.schedulers import rules
from sim_core.schedulers.phase import TickKind
from sim_core.types import Event, Phase, Status

if TYPE_CHECKING:
    from sim_core.engine import Engine

_EMPTY = np.empty(0, dtype=np.int64)
MAX_SOLO_SERVICES = 2048  # requests considered per call (bounds the arrays one call builds)
MAX_SOLO_TICKS = 1 << 16  # ticks of those requests per call (~10 float/int columns of this length)


def eligible(engine: Engine) -> bool:
    """Config-level conditions under which the batch may be one request at a time and a service
    depends on nothing but the request and the cost model (checked again per call: the cap)."""
    sched, cfg = engine.sched, engine.cfg
    return (
        (sched.max_seqs == 1 or cfg.scheduler.dynamic_batch.enabled)
        and sched.phase.is_stateless  # `choose` answers from its arguments (and `observe` keeps nothing)
        and engine.n == 1
        and engine.spec is None
        and engine.prefix is None
        and not engine.workload.releases_on_finish
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


def _candidates(engine: Engine):
    """Requests that may be served next, in the order they join the queue: the waiting ones (by key),
    then arrivals in arrival order, bounded per call. Returns (ids, how many of them wait now, the
    smallest key of a waiting request left out, the first arrival left out)."""
    st = engine.st
    waiting = st.key_to_id(st.waiting_keys[:MAX_SOLO_SERVICES])
    lo = st.next_arrival
    pending = np.arange(lo, min(st.num_requests, lo + MAX_SOLO_SERVICES - waiting.size), dtype=np.int64)
    ids = np.concatenate([waiting, pending]) if waiting.size else pending
    ticks = np.cumsum(st.output[ids])  # one prefill tick and output - 1 decode ticks each
    ids = ids[: int(np.searchsorted(ticks, MAX_SOLO_TICKS, side="right"))]
    num_waiting = min(ids.size, waiting.size)
    left_key = int(st.waiting_keys[num_waiting]) if num_waiting < st.waiting_keys.size else math.inf
    beyond = lo + ids.size - num_waiting
    left_s = float(st.arrival_s[beyond]) if beyond < st.num_requests else math.inf
    return ids, num_waiting, left_key, left_s


def advance(engine: Engine) -> bool:
    """Serve whole requests one at a time from the current state; False when not one could be."""
    st, kv, sched, lim = engine.st, engine.kv, engine.sched, engine.cfg.limits
    if st.running.size or st.swapped_keys.size or kv.num_used or not _rules_allow(engine):
        return False
    ids, num_waiting0, left_key, left_s = _candidates(engine)
    if not ids.size:
        return False
    prompt, output = st.prompt[ids], st.output[ids]
    # Fresh requests only (a recompute after pre-emption has emitted tokens and a different first tick).
    fresh = (st.computed[ids] == 0) & (st.emitted[ids] == 0) & (st.prefill_target[ids] == prompt)
    # Admission of each, whole, by the scheduler's rule; then room for its context as it decodes.
    adm = np.asarray(sched.admission_blocks(st, ids, prompt), dtype=np.int64)
    budget = sched.cfg.max_num_batched_tokens
    pairs, inverse = np.unique(np.stack([prompt, adm]), axis=1, return_inverse=True)
    whole = np.array([rules.admit_in_order([p], budget, kv.num_free, sched.watermark_blocks, lambda i, c, a=a: a,
                                           sched.is_chunked, sched.is_static) == [(p, a)]
                      for p, a in pairs.T.tolist()])[inverse.reshape(-1)]  # fmt: skip
    last_held = np.maximum(adm, kv.blocks_for(prompt + output - 2 + sched.decode_width, None))
    fits = (output < 2) | (last_held <= kv.num_free)
    # Tick prices in a per-candidate layout: slot p_c holds the service's start, then its ticks' durations.
    T = output
    slot = np.cumsum(T + 1) - (T + 1)  # (C,) start slot of each candidate
    L = int(slot[-1] + T[-1] + 1)
    cand = np.repeat(np.arange(ids.size), T)  # (N,) candidate of each tick, in candidate order
    t = np.arange(cand.size) - np.repeat(np.cumsum(T) - T, T)  # tick index within its service
    q = slot[cand] + 1 + t  # (N,) slot of each tick
    is_pre = t == 0
    ctx = prompt[cand] + t - 1  # context before a decode tick
    c_lo, c_hi = int(prompt.min()), int((prompt + output).max()) - 1
    u_p, p_inv = np.unique(prompt, return_inverse=True)
    # `_advance_tick`'s aggregates for a tick with one whole prefill and no decodes
    pre = engine.cost.tick(u_p, np.ones_like(u_p), u_p * (u_p + 1) // 2, np.zeros_like(u_p), np.ones_like(u_p), 0.0)
    p_of = p_inv.reshape(-1)[cand]
    d_of = np.where(is_pre, 0, ctx - c_lo)
    if c_hi > c_lo:  # a decoding request: the engine's price of a one-decode tick at each context
        dec = engine._price_run(np.ones(c_hi - c_lo, dtype=np.int64), np.arange(c_lo, c_hi, dtype=np.int64))
        cols = [np.where(is_pre, pre[j][p_of], dec[j][d_of]) for j in range(4)]
    else:
        cols = [pre[j][p_of] for j in range(4)]
    dur = cols[0]
    # The cap stays 1 up to the first tick after which the rule would raise it: services before it are safe.
    caps = sched.cap_trajectory(dur)[1:]
    first_raise = np.flatnonzero(caps != 1)
    safe = fresh & whole & fits
    if first_raise.size:
        safe[int(cand[first_raise[0]]):] = False
    m_safe = int(np.argmin(safe)) if not safe.all() else ids.size
    if m_safe == 0:
        return False
    buf = np.empty(L)
    buf[q] = dur
    # --- the chain: who is next (queue order), when it starts, whether every guard allows it whole
    keys = st.order_key[ids].tolist()
    arrival = st.arrival_s[ids].tolist()
    T_l, slot_l = T.tolist(), slot.tolist()
    heap = [(keys[c], c) for c in range(num_waiting0)]  # sorted keys: already a heap
    nxt = num_waiting0  # next candidate to arrive
    f = st.now_s
    rows = engine.rec.num_ticks
    max_rows = lim.max_ticks if engine.meter is None else min(lim.max_ticks, rows + engine.meter.ticks_until_check(rows))
    end_s = min(lim.max_sim_time_s, engine.horizon_s)  # every tick must start before it
    served, idle_from = [], []
    accumulate = np.add.accumulate
    while True:
        while nxt < ids.size and arrival[nxt] <= f:
            heapq.heappush(heap, (keys[nxt], nxt))
            nxt += 1
        s, gap = f, False
        if not heap:  # nothing waits: an idle row to the next arrival (before the horizon)
            if nxt >= ids.size or arrival[nxt] >= engine.horizon_s:
                break
            s, gap = arrival[nxt], True
            while nxt < ids.size and arrival[nxt] <= s:
                heapq.heappush(heap, (keys[nxt], nxt))
                nxt += 1
        if left_s <= s:  # a request outside the candidates has arrived: it might be the head
            break
        key, c = heap[0]
        if c >= m_safe or key > left_key:
            break
        r = rows + gap + T_l[c]
        if r > max_rows:
            break
        p, k = slot_l[c], T_l[c]
        seg = buf[p : p + k + 1]
        seg[0] = s
        accumulate(seg, out=seg)  # sequential: the same rounding as tick by tick
        if float(seg[k - 1]) >= end_s or s >= end_s:
            break
        heapq.heappop(heap)
        served.append(c)
        idle_from.append(f if gap else math.nan)
        f = float(seg[k])
        rows = r
    if not served:
        return False
    _record(engine, ids, prompt, output, np.array(served, dtype=np.int64), np.array(idle_from), slot, buf, cols)
    return True


def _record(engine: Engine, ids, prompt, output, sv, idle_from, slot, buf, cols) -> None:
    """Write the served requests' rows, events, gaps, batch log and final state in bulk."""
    st, kv, sched, rec = engine.st, engine.kv, engine.sched, engine.rec
    K = sv.size
    r_ids, P, O = ids[sv], prompt[sv], output[sv]
    T = O
    p = slot[sv]
    svc = np.repeat(np.arange(K), T)
    N = svc.size
    t = np.arange(N) - np.repeat(np.cumsum(T) - T, T)
    bi = p[svc] + t  # slot holding each tick's start (the previous tick's end)
    starts, ends = buf[bi], buf[bi + 1]
    # per-candidate columns were built tick by tick in candidate order: gather the served ticks
    c_first = np.cumsum(output) - output  # first tick of each candidate in the column arrays
    ti = c_first[sv][svc] + t
    dur, flops, nbytes, is_comp = (col[ti] for col in cols)
    is_pre = t == 0
    is_last = t == T[svc] - 1
    svc_start, first_tok, finish = buf[p], buf[p + 1], buf[p + T]
    adm = np.asarray(sched.admission_blocks(st, r_ids, P), dtype=np.int64)
    held = np.maximum(adm[svc], np.where(is_pre, 0, kv.blocks_for(P[svc] + t - 1 + sched.decode_width, None)))
    # rows: an idle row before each service that waited for its arrival, then its ticks
    gap = ~np.isnan(idle_from)
    row_of = np.arange(N) + np.cumsum(gap)[svc]
    idle_rows = (np.cumsum(T) - T + np.cumsum(gap))[gap] - 1
    M = N + int(gap.sum())
    waiting = st.waiting_keys.size + st.num_arrived_by(starts) - (svc + 1)

    def col(tick_vals, idle_vals=0, dtype=np.float64):
        out = np.empty(M, dtype)
        out[row_of] = tick_vals
        out[idle_rows] = idle_vals
        return out

    n = engine.n
    cap = sched.batch_cap
    rec.event(r_ids, svc_start, Event.SCHEDULED)
    rec.event(r_ids, first_tok, Event.FIRST_TOKEN)
    rec.event(r_ids, finish, Event.FINISHED)
    gaps = ends - starts  # a decode's gap: its end minus the previous token (this tick's start)
    dec_gaps = np.where(is_pre, -np.inf, gaps)
    rec.itl(gaps[~is_pre])
    if rec.wants_batches:
        g = rec.num_ticks + row_of
        keep = g < engine.cfg.limits.num_recorded_batches
        rec.batch(g[keep], r_ids[svc][keep], np.where(is_pre, P[svc], 1)[keep], ~is_pre[keep], held[keep])
    rec.ticks(
        {
            "t_start_s": col(starts, idle_from[gap]), "duration_s": col(dur, svc_start[gap] - idle_from[gap]),
            "phase": col(np.where(is_pre, Phase.PREFILL, Phase.DECODE), Phase.IDLE),
            "num_prefill_tokens": col(np.where(is_pre, P[svc], 0)), "num_decode_tokens": col(np.where(is_pre, 0, n)),
            "num_prefill_seqs": col(is_pre), "num_decode_seqs": col(~is_pre), "num_running": col(~is_last),
            "num_waiting": col(waiting), "num_swapped": 0, "kv_blocks_used": col(np.where(is_last, 0, held)),
            "flops": col(flops), "bytes": col(nbytes), "is_compute_bound": col(is_comp), "num_preempted": 0,
            "swap_blocks": 0, "batch_cap": cap,
        },
        M,
    )  # fmt: skip
    # state: arrivals by the last tick's start join the queue, the served leave it finished
    st.admit_arrivals(float(starts[-1]))
    st.waiting_keys = st.waiting_keys[~np.isin(st.waiting_keys, st.order_key[r_ids])]
    st.status[r_ids] = Status.FINISHED
    st.first_scheduled_s[r_ids] = svc_start
    st.prefill_start_s[r_ids] = svc_start
    st.first_token_s[r_ids] = first_tok
    st.last_token_s[r_ids] = finish
    st.finish_s[r_ids] = finish
    st.computed[r_ids] += P + O - 1
    st.emitted[r_ids] += O
    st.max_itl_s[r_ids] = np.maximum(st.max_itl_s[r_ids], np.maximum.reduceat(dec_gaps, np.cumsum(T) - T))
    st.num_finished += K
    sched.batch_cap = int(sched.cap_trajectory(dur)[-1])
    st.now_s = float(finish[-1])
