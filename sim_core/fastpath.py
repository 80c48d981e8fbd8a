"""A scalar fast path for the common steady state of decode-first (Sarathi-Serve / vLLM V1) serving.

NOTE: while every running request decodes and every arriving prompt fits whole into the tick's
leftover token budget, the batch evolves by a few scalar rules: each tick all decoders emit one
token, arrivals are admitted and prefilled in one tick, a request finishes at a tick known when it
starts decoding, and a decoder needs a new KV block exactly when its context is a multiple of the
block size. So a tick costs a few Python operations instead of ~40 NumPy calls. Per-request state
is written back to the arrays when the fast path stops; per-request aggregates (max ITL) are
computed from the tick timeline afterwards.

The admission and chunking rules are the scheduler's own (`schedulers/rules.py`); what this module
adds is the bookkeeping that makes a tick O(1) in the number of decoders. The path prices ticks with
the same `CostModel` arithmetic and integer aggregates as
`Engine._advance_tick`, so results are bit-identical (tests compare against tick-by-tick runs). It
stops, before changing anything for that tick, whenever a tick would need the general scheduler:
a prompt that must be chunked, a decoder short of blocks (pre-emption), a guard limit, nothing to
run, or the end of the run.
"""

from __future__ import annotations

from itertools import chain
from typing import TYPE_CHECKING

import numpy as np

from sim_core.schedulers import rules
from sim_core.types import Event, Phase, Status

if TYPE_CHECKING:
    from sim_core.engine import Engine

MAX_FAST_TICKS = 4096  # ticks per call: bounds the Python lists a call keeps before writing back


def eligible(engine: Engine) -> bool:
    """Config-level conditions under which the fast path's rules are the scheduler's rules."""
    cfg = engine.cfg
    s = cfg.scheduler
    return (
        s.prefill_mode == "decode_first"
        and s.batching == "continuous"
        and s.queue_order == "fcfs"
        and s.admission in ("watermark", "greedy")
        and not s.dynamic_batch.enabled
        and not s.smart_preemption.enabled
        and cfg.kv_cache.layout == "paged"
        and engine.n == 1
        and not engine.workload.releases_on_finish
    )


def _range_max(values: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """max(values[lo_i : hi_i + 1]) for each i (lo <= hi), via a sparse table: O(T log T + R)."""
    T = values.size
    levels = max(int(T).bit_length(), 1)
    table = np.full((levels, T), -np.inf)  # table[k, i] = max(values[i : i + 2**k])
    table[0] = values
    for k in range(1, levels):
        w = 1 << (k - 1)
        table[k, : T - w] = np.maximum(table[k - 1, : T - w], table[k - 1, w:])
    k = np.log2(hi - lo + 1).astype(np.int64)
    return np.maximum(table[k, lo], table[k, hi - (1 << k) + 1])


def advance(engine: Engine) -> bool:
    """Run ticks on the fast path from the current state; False when not a single tick could be."""
    st, kv, cost, rec, lim = engine.st, engine.kv, engine.cost, engine.rec, engine.cfg.limits
    running_arr = st.running
    if st.swapped_keys.size:
        return False
    ctx_arr = st.computed[running_arr]
    is_dec = ctx_arr >= st.prefill_target[running_arr]
    if np.any(st.last_token_s[running_arr[is_dec]] != st.now_s):  # every decoder emitted at the last tick
        return False
    if np.any(st.emitted[running_arr[~is_dec]] != 0):
        return False  # a recompute victim mid-prefill: its prefill ends in PREFILL_DONE (general path)
    if st.waiting_keys.size and np.any(st.emitted[st.waiting_keys] != 0):  # keys are ids under FCFS
        return False

    bs = kv.block_size
    pc = engine.prefix  # issue 12: the prefix cache (None when off); its rules are PrefixCachingBlockManager's
    tick = cost._tick_scalar  # the same arithmetic as CostModel.tick on Python ints
    budget = engine.cfg.scheduler.max_num_batched_tokens
    cap = engine.sched.batch_cap
    wm = engine.sched.watermark_blocks
    arrival, target_arr, output_arr = st.arrival_s, st.prefill_target, st.output
    R = st.num_requests
    ptr = st.next_arrival
    num_ticks0 = rec.num_ticks
    tick_budget = lim.max_ticks - num_ticks0
    if engine.meter is not None:  # hand back to the engine loop for the server's budget checks
        tick_budget = min(tick_budget, engine.meter.ticks_until_check(num_ticks0))
    max_time = min(lim.max_sim_time_s, engine.horizon_s)  # cluster hook: stop where external input may arrive

    # NOTE: -(-x // bs) is ceil(x / bs) in integers; a request holds exactly ceil(context / bs) blocks.
    running = running_arr.tolist()  # admission order, decoders and prefills mixed (as st.running)
    prefilling: dict[int, int] = {}  # request -> tokens computed so far (prompt not finished)
    base: dict[int, int] = {}  # decoder -> context before fast tick j minus j
    start: dict[int, int] = {}  # decoder -> first fast tick at which it decodes
    finish_at: dict[int, list[int]] = {}  # fast tick -> decoders that emit their last token in it
    phase_count = [0] * bs  # decoders whose context is a multiple of bs at ticks j with j % bs == r
    S = 0  # sum of decoder contexts before the current tick
    B = 0
    for r, c, d, e, o in zip(running, ctx_arr.tolist(), is_dec.tolist(), st.emitted[running_arr].tolist(),
                             output_arr[running_arr].tolist()):  # fmt: skip
        if not d:
            prefilling[r] = c
            continue
        base[r], start[r] = c, 0
        finish_at.setdefault(o - e - 1, []).append(r)
        phase_count[(-c) % bs] += 1
        S += c
        B += 1
    waiting = st.waiting_keys.tolist()
    head = 0  # waiting[head:] is the queue
    free = kv.num_free

    rows: list[tuple] = []
    gaps: list[float] = []  # one per tick (-inf when nobody decoded)
    gap_counts: list[int] = []
    t0_list: list[float] = []
    t_end_list: list[float] = []
    scheduled: list[tuple[int, int]] = []  # (request, tick admitted)
    first_token: list[tuple[int, int]] = []  # (request, tick its prompt completed)
    finished: list[tuple[int, int]] = []  # (request, tick)
    batch_log: list[tuple] = []
    want_batches = max(lim.num_recorded_batches - num_ticks0, 0)
    now = st.now_s
    j = 0
    tick_budget = min(tick_budget, MAX_FAST_TICKS)
    while j < tick_budget and now < max_time:
        while ptr < R and arrival[ptr] <= now:
            waiting.append(ptr)
            ptr += 1
        B_tick = B  # decoders in this tick
        need_d = phase_count[j % bs] if B else 0
        if need_d > free:
            break  # a decoder is short of a block: pre-emption is the general scheduler's job
        free_after = free - need_d
        left = budget - B
        # continuing prefills, in running order, then admission in queue order: the scheduler's rules
        chunks: list[tuple[int, int, int]] = []  # (request, computed before, chunk)
        if prefilling:
            pre_items = list(prefilling.items())  # insertion order is running order (admitted at the end)
            sizes = rules.prefill_chunks([int(target_arr[r]) - c for r, c in pre_items], left, True)
            chunks = [(r, c, ch) for (r, c), ch in zip(pre_items, sizes) if ch > 0]
        need_p = 0
        for r, c, chunk in chunks:
            need_p += -(-(c + chunk) // bs) - -(-c // bs)
            left -= chunk
        if need_p > free_after:
            break  # chunks would have to shrink to the free blocks: the general path's case
        free_after -= need_p
        if pc is not None:
            pc.tick_offset = j
            pc.trim(free_after)  # decoder and chunk blocks taken: evict as the block manager would
        admit: list[tuple[int, int, int]] = []  # (request, chunk, cached prompt tokens)
        if head < len(waiting):
            seqs_left = max(cap - len(running), 0)
            candidates = range(head, min(head + seqs_left, len(waiting)))  # (islice would walk from 0)
            if pc is None:
                taken = rules.admit_in_order((int(target_arr[waiting[i]]) for i in candidates), left, free_after, wm,
                                             lambda i, chunk: -(-chunk // bs), True, False)  # fmt: skip
                hits = [0] * len(taken)
            else:
                taken, hits = _admit_with_prefix_cache(pc, [waiting[i] for i in candidates], target_arr, bs, left,
                                                       free_after, wm)  # fmt: skip
            admit = [(waiting[head + i], chunk, h) for i, ((chunk, _), h) in enumerate(zip(taken, hits))]
            for chunk, need_w in taken:
                free_after -= need_w
                left -= chunk
        if B == 0 and not chunks and not admit:
            break  # nothing to run: idle gaps and the end of the run are the general loop's
        P = pairs = kv_read = completes = 0
        for r, c, chunk in chunks:
            P += chunk
            pairs += chunk * c + chunk * (chunk + 1) // 2
            kv_read += c
            completes += c + chunk >= int(target_arr[r])
        for w, chunk, h in admit:
            P += chunk
            pairs += chunk * h + chunk * (chunk + 1) // 2
            kv_read += h
            completes += h + chunk >= int(target_arr[w])
        A = len(chunks) + len(admit)
        dur, flops, nbytes, is_comp = tick(P + B, B + completes, pairs + (S + B), kv_read + S, A + B, 0.0)
        t0, t_end = now, now + dur
        decoders = [r for r in running if r not in prefilling] if (want_batches > j) else None
        if decoders is not None:
            batch_log.append((
                j, decoders + [r for r, _, _ in chunks] + [w for w, _, _ in admit],
                [1] * B + [ch for _, _, ch in chunks] + [ch for _, ch, _ in admit],
                [True] * B + [False] * A,
                [-(-(base[r] + j + 1) // bs) for r in decoders] + [-(-(c + ch) // bs) for _, c, ch in chunks]
                + [-(-(h + ch) // bs) for _, ch, h in admit],
            ))  # fmt: skip
        # decoders that emit their last token now leave; every other decoder grew by one
        done = finish_at.pop(j, [])
        freed = 0
        for r in done:
            ctx_after = base[r] + j + 1
            freed += -(-ctx_after // bs) - (_release(pc, r) if pc is not None else 0)
            phase_count[(-base[r]) % bs] -= 1
            S -= ctx_after
            finished.append((r, j))
        S += B
        B -= len(done)
        for w, _, h in admit:
            scheduled.append((w, j))
            running.append(w)
            prefilling[w] = h
        for r, c, chunk in chunks + [(w, h, ch) for w, ch, h in admit]:
            total = c + chunk
            if total < target_arr[r]:
                prefilling[r] = total
                continue
            del prefilling[r]
            first_token.append((r, j))
            if pc is not None:  # Engine._advance_tick: full prompt blocks become reusable
                freed += pc.register_prompt(r, total)
            o = int(output_arr[r])
            if o == 1:
                freed += -(-total // bs) - (_release(pc, r) if pc is not None else 0)
                finished.append((r, j))
                done.append(r)
                continue
            base[r], start[r] = total - (j + 1), j + 1
            finish_at.setdefault(j + o - 1, []).append(r)
            phase_count[(-(total - (j + 1))) % bs] += 1
            S += total
            B += 1
        if done:
            done_set = set(done)
            running = [r for r in running if r not in done_set]
        head += len(admit)  # admitted requests leave the head of the queue (no O(queue) copy)
        free = free_after + freed
        phase = Phase.MIXED if P and B_tick else Phase.PREFILL if P else Phase.DECODE
        rows.append((t0, dur, phase, P, B_tick, A, B_tick, len(running), len(waiting) - head, 0, kv.num_blocks - free,
                     flops, nbytes, int(is_comp), 0, 0, cap))  # fmt: skip
        gaps.append(t_end - t0 if B_tick else -np.inf)
        gap_counts.append(B_tick)
        t0_list.append(t0)
        t_end_list.append(t_end)
        now = t_end
        j += 1
    if pc is not None:
        pc.tick_offset = 0
    if j == 0:
        return False
    return _write_back(engine, j, rows, gaps, gap_counts, t0_list, t_end_list, scheduled, first_token, finished,
                       batch_log, running, prefilling, base, start, waiting[head:], ptr, free, num_ticks0)


def _admit_with_prefix_cache(pc, candidates: list[int], target_arr, bs: int, left: int, free: int, wm: int):
    """Scheduler._admit_with_prefix_cache on the fast path's integers: the same rule, each prompt
    starting after its longest cached prefix, looked up as the rule reads it and referenced (then the
    rest allocated, evicting as needed) as it is admitted. Returns (taken, cached tokens of each)."""
    looked: list[tuple] = []
    free_now = [free]

    def remaining():
        for w in candidates:
            looked.append(pc.lookup(w, int(target_arr[w])))
            yield int(target_arr[w]) - looked[-1][1] * bs

    def blocks(i: int, chunk: int) -> int:
        _, hit, evictable = looked[i]
        return -(-(hit * bs + chunk) // bs) - hit + evictable

    def admit(i: int, chunk: int, need: int) -> None:
        handle, hit, _ = looked[i]
        pc.admit(candidates[i], handle, hit, int(target_arr[candidates[i]]))
        free_now[0] -= need
        pc.trim(free_now[0])

    taken = rules.admit_in_order(remaining(), left, free, wm, blocks, True, False, admit)
    return taken, [looked[i][1] * bs for i in range(len(taken))]


def _release(pc, r: int) -> int:
    """A request finishes: its cached blocks lose a reference. Returns how many of its blocks stay in
    use because other requests still reference them (PrefixCachingBlockManager.free)."""
    pc.forget(r)
    if not pc.holds(r):
        return 0
    referenced, evictable = pc.release(r)
    return referenced - evictable


def _write_back(engine, J, rows, gaps, gap_counts, t0_list, t_end_list, scheduled, first_token, finished,
                batch_log, running, prefilling, base, start, waiting, ptr, free, num_ticks0) -> bool:  # fmt: skip
    """Record the fast ticks and write every touched request's state back to the arrays."""
    st, kv, rec = engine.st, engine.kv, engine.rec
    bs = kv.block_size
    t0 = np.array(t0_list)
    t_end = np.array(t_end_list)
    rec.tick_rows(rows)
    if batch_log:
        ticks = [num_ticks0 + tick for tick, req, *_ in batch_log for _ in req]
        flat = [list(chain.from_iterable(entry[k] for entry in batch_log)) for k in (1, 2, 3, 4)]
        rec.batch(np.array(ticks, dtype=np.int64), np.array(flat[0], dtype=np.int64), np.array(flat[1], dtype=np.int64),
                  np.array(flat[2], dtype=bool), np.array(flat[3], dtype=np.int64))  # fmt: skip
    gap_arr = np.array(gaps)
    rec.itl(np.repeat(gap_arr, gap_counts))

    def pairs(items):
        return (np.array([r for r, _ in items], dtype=np.int64), np.array([t for _, t in items], dtype=np.int64))

    if scheduled:
        req, tick = pairs(scheduled)
        rec.event(req, t0[tick], Event.SCHEDULED)
        first = np.isnan(st.first_scheduled_s[req])
        st.first_scheduled_s[req[first]] = t0[tick][first]
        st.prefill_start_s[req] = t0[tick]
        st.status[req] = Status.RUNNING
    if prefilling:
        req = np.array(list(prefilling), dtype=np.int64)
        st.computed[req] = np.array(list(prefilling.values()), dtype=np.int64)
    if first_token:
        req, tick = pairs(first_token)
        rec.event(req, t_end[tick], Event.FIRST_TOKEN)
        st.first_token_s[req] = t_end[tick]
        st.last_token_s[req] = t_end[tick]
        st.computed[req] = st.prefill_target[req]
        st.emitted[req] = 1
    if base:
        fin = dict(finished)
        req = np.fromiter(base, dtype=np.int64, count=len(base))
        b = np.array([base[r] for r in base], dtype=np.int64)
        s0 = np.array([start[r] for r in base], dtype=np.int64)
        last = np.array([fin.get(r, J - 1) for r in base], dtype=np.int64)  # last fast tick it decoded
        ok = last >= s0
        req, b, s0, last = req[ok], b[ok], s0[ok], last[ok]
        st.computed[req] = b + last + 1
        st.emitted[req] = st.computed[req] - st.prompt[req] + 1
        st.last_token_s[req] = t_end[last]
        if req.size:
            st.max_itl_s[req] = np.maximum(st.max_itl_s[req], _range_max(gap_arr, s0, last))
    if finished:
        req, tick = pairs(finished)
        st.status[req] = Status.FINISHED
        st.finish_s[req] = t_end[tick]
        st.num_finished += req.size
        kv.held[req] = 0
        rec.event(req, t_end[tick], Event.FINISHED)
    run_ids = np.array(running, dtype=np.int64)
    kv.held[run_ids] = -(-st.computed[run_ids] // bs)
    kv.num_free = free
    st.running = run_ids
    st.waiting_keys = np.array(waiting, dtype=np.int64)
    st.status[st.waiting_keys] = Status.WAITING  # arrivals admitted on the fast path (FCFS: keys are ids)
    st.next_arrival = ptr
    st.now_s = float(t_end[-1])
    return True
