"""fastpath._Steps: the scalar core's steps of a composed tick against the rules they shortcut (schedulers/rules.py).

The steps take the common cases (no running prefill, one running prefill, one admission, a spent budget) without
the rules' lists and loops; for any queue, budget and free blocks they must take what the rules take."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from sim_core.fastpath import OWN_GAPS_BY_INDEX, _HandBack, _own_gaps, _Steps
from sim_core.schedulers import rules


def _steps(targets, waiting, prefilling, free, bs, wm, is_chunked, fixed=False, seqs_left=8, reserve_blocks=None):
    target_arr = np.array(targets, dtype=np.int64)
    R = len(targets)
    held_fixed: dict[int, int] = {}
    s = _Steps([0] * bs, bs, fixed, None, dict(prefilling), target_arr, is_chunked, list(waiting), R,
               (lambda w: reserve_blocks[w]), wm, held_fixed, {r: targets[r] for r in prefilling})  # fmt: skip
    s.B, s.head, s.seqs_left, s.free, s.chunks, s.admit = 0, 0, seqs_left, free, [], []
    return s, held_fixed


queues = st.lists(st.integers(1, 600), min_size=1, max_size=6)


@given(queues, st.integers(-8, 8) | st.integers(-650, 1000), st.integers(0, 80), st.integers(0, 8), st.booleans(), st.booleans(),
       st.integers(0, 6), st.sampled_from([1, 16]))  # fmt: skip
@example([10, 10, 10], 3, 50, 0, True, False, 8, 16)  # (a budget left after the first: a second is admitted)
@example([10, 10, 10], 0, 50, 0, True, False, 8, 16)  # (the budget spent: none)
# (one token of budget left: the shortcut's boundary, a second admitted with a chunk of 1, or a 1-token prompt whole;
# hypothesis's 300 draws missed it: `left <= chunk + 1` passed them)
@example([10, 10, 10], 1, 50, 0, True, False, 8, 16)
@example([10, 1, 10], 1, 50, 0, False, False, 8, 16)
@settings(max_examples=300)
def test_admission_takes_what_admit_in_order_takes(prompts, offset, free, wm, is_chunked, fixed, seqs_left, bs):
    """One, two or more admitted, a budget the first spends or just does not, a batch slot limit: `admit_waiting`
    equals the rule over the queue (blocks: ceil(chunk / bs) paged, or each request's reserved count)."""
    budget = prompts[0] + offset  # (around the first prompt: whether a second is tested is decided there)
    reserve_blocks = [1 + (p + 7) // 8 for p in prompts]
    s, held_fixed = _steps(prompts, range(len(prompts)), {}, free, bs, wm, is_chunked, fixed, seqs_left, reserve_blocks)
    need = (lambda i, chunk: reserve_blocks[i]) if fixed else (lambda i, chunk: -(-chunk // bs))
    expected = rules.admit_in_order(prompts[:seqs_left], budget, free, wm, need, is_chunked, False)
    admitted, tokens = s.admit_waiting(budget)
    assert admitted == len(expected) and tokens == sum(chunk for chunk, _ in expected)
    assert s.admit == [(w, 0, chunk) for w, (chunk, _) in enumerate(expected)]
    assert s.free == free - sum(blocks for _, blocks in expected)
    if fixed:
        assert held_fixed == {w: blocks for w, (_, blocks) in enumerate(expected)}
    assert s.targets == {w: prompts[w] for w in range(len(expected))}  # (what the chunks of later ticks read)


@given(st.integers(1, 600), st.integers(-600, 0), st.integers(0, 50), st.integers(0, 4), st.booleans(), st.booleans())
def test_a_spent_budget_admits_nobody(remaining, budget, free, wm, is_chunked, fixed):
    """What `admit_waiting`'s shortcut relies on: with no budget left the rule admits no further candidate."""
    assert rules.admit_next(1, remaining, budget, free, wm, lambda i, chunk: 0, is_chunked, False) is None


@given(st.lists(st.tuples(st.integers(1, 600), st.integers(0, 599)), max_size=4), st.integers(-50, 1500),
       st.integers(0, 80), st.booleans(), st.sampled_from([1, 16]))  # fmt: skip
def test_chunks_are_prefill_chunks_or_a_hand_back(prefills, budget, free, is_chunked, bs):
    """No, one or several running prefills: `run_chunks` takes `rules.prefill_chunks`' chunks and their new blocks,
    or hands the tick back, changing nothing, when they do not fit in the free blocks."""
    targets = [t for t, _ in prefills]
    prefilling = {r: min(c, t - 1) for r, (t, c) in enumerate(prefills)}
    s, _ = _steps(targets or [1], [], prefilling, free, bs, 0, is_chunked)
    sizes = rules.prefill_chunks([targets[r] - c for r, c in prefilling.items()], budget, is_chunked)
    expected = [(r, c, ch) for (r, c), ch in zip(prefilling.items(), sizes) if ch > 0]
    need = sum(-(-(c + ch) // bs) - -(-c // bs) for r, c, ch in expected)
    if need > free:
        with pytest.raises(_HandBack):
            s.run_chunks(budget)
        assert s.free == free and s.chunks == []
        return
    assert s.run_chunks(budget) == sum(ch for _, _, ch in expected)
    assert s.chunks == expected and s.free == free - need


@given(st.integers(0, 5), st.integers(0, 5), st.booleans())
def test_decodes_take_their_blocks_or_hand_back(need_d, free, fixed):
    s, _ = _steps([1], [], {}, free, 16, 0, True, fixed)
    s.need_d, s.B = (0 if fixed else need_d), 3
    if not fixed and need_d > free:
        with pytest.raises(_HandBack):
            s.run_decodes()
        assert s.free == free
    else:
        assert s.run_decodes() == (3, False, False)
        assert s.free == free - (0 if fixed else need_d)


@given(st.lists(st.integers(0, 40), unique=True, max_size=30), st.data())
@settings(max_examples=300)
def test_own_gaps_are_each_decoders_gap_in_running_order(order, data):
    """`_own_gaps` (a tick's gaps when some decoders' last token is their own) equals every running decoder's
    `t_end - (its own last token, else the shared one)` in running order, with few own gaps (put in place by a
    search) and many (one pass), including decoders with their own last token that no longer run; their first
    gaps and the tick their shared gaps start from are set for those that run."""
    running = dict.fromkeys(order)
    own = data.draw(st.lists(st.integers(0, 45), unique=True, max_size=2 * OWN_GAPS_BY_INDEX + 2))
    last_s = {r: data.draw(st.floats(0.0, 9.0)) for r in own}
    t_end, sync_s = 10.0, data.draw(st.floats(0.0, 9.5))
    expected = [t_end - last_s.get(r, sync_s) for r in order]
    first_gap: dict[int, float] = {}
    sync_from: dict[int, int] = {}
    waiting_since = dict(last_s)
    gaps = _own_gaps(running, waiting_since, t_end, sync_s, first_gap, sync_from, 7)
    assert gaps == expected and not waiting_since
    assert first_gap == {r: t_end - s for r, s in last_s.items() if r in running}
    assert sync_from == dict.fromkeys(first_gap, 7)


@given(st.lists(st.integers(0, 2), min_size=2, max_size=12), st.sampled_from(["fcfs", "priority", "shortest_prompt_first"]),
       st.booleans(), st.data())  # fmt: skip
def test_an_arrival_joins_the_queue_where_push_waiting_puts_it(classes, order, append, data):
    """`_enqueue` (the scalar core's arrivals) against `SimState.push_waiting`: requests arrived and some were pre-empted
    (put back by key, or with requeue append at their class's end, out of key order); each later arrival joins both
    queues at the same place."""
    from sim_core.fastpath import _enqueue
    from sim_core.state import SimState
    from sim_core.workload import Workload

    R = len(classes)
    cls = np.array(classes, dtype=np.int64)
    wl = Workload(arrival_s=np.zeros(R), prompt_tokens=cls + 1, output_tokens=np.ones(R, dtype=np.int64), priority=cls,
                  class_idx=np.full(R, -1), num_samples=1, closed_loop_think_s=None)  # fmt: skip
    state = SimState(wl, order, "append" if append else "by_key")
    arrived = data.draw(st.integers(1, R - 1))
    state.push_waiting(np.arange(arrived, dtype=np.int64))
    victims = data.draw(st.lists(st.sampled_from(range(arrived)), unique=True, max_size=arrived))
    if victims:  # (pre-empted: they leave the queue, then come back in the order they were pre-empted)
        state.waiting_keys = state.waiting_keys[~np.isin(state.key_to_id(state.waiting_keys), victims)]
        state.push_waiting(np.array(victims, dtype=np.int64))
    waiting = state.waiting_keys.tolist()
    for r in range(arrived, R):
        _enqueue(waiting, r, order == "fcfs", state.order_key, 0, state.class_end if state.requeue_appends else None)
        state.push_waiting(np.array([r]))
        assert waiting == state.waiting_keys.tolist()


@given(st.lists(st.tuples(st.integers(0, 5000), st.integers(0, 400)), min_size=0, max_size=12), st.integers(0, 300),
       st.integers(1, 17), st.sampled_from([1, 16, 32]))  # fmt: skip
@settings(max_examples=300, deadline=None)
def test_spec_grow_gives_each_decoder_the_blocks_of_its_context_and_slots(decoders, d, slots, bs):
    """`_spec_grow` (its ceiling as one floor division, session 51): a decoder of context base + d holds
    max(held, ceil((base + d + slots) / bs)) blocks if it decodes (`Scheduler._grow_decodes`), and the tick takes the
    blocks they gain."""
    from sim_core.fastpath import _spec_grow

    order = list(range(len(decoders)))
    base = {r: b for r, (b, _) in enumerate(decoders)}
    held = {r: h for r, (_, h) in enumerate(decoders)}
    grown, need = _spec_grow(order, base, held, d, slots, bs)
    want = [max(h, -(-(b + d + slots) // bs)) for b, h in decoders]
    assert grown == want
    assert need == sum(w - h for w, (_, h) in zip(want, decoders))


@given(st.integers(1, 6), st.lists(st.integers(1, 14), min_size=1, max_size=40), st.integers(1, 7), st.integers(0, 3),
       st.sampled_from([0.0, 0.5, 0.9, 1.0]))  # fmt: skip
@settings(max_examples=200, deadline=None)
def test_spec_decode_gives_each_decoder_the_rules_tokens_in_batch_order(k, lefts, width, offset, alpha):
    """`_spec_decode` (each decoder's tokens read from `Speculator.emitted_by_lead` when it has more tokens left than
    drafts, else the rule; the rule in one array call from `SPEC_RULE_BY_ARRAYS` decoders; its bookkeeping in the same
    pass; the decoders left as the tick's order when none finished, session 51) against the rule applied decoder by
    decoder to the same stream: each decoder's tokens, context, tokens left and blocks, the finished decoders and their
    blocks, the decoders left in batch order, the tokens emitted and the Speculator's counters."""
    from sim_core.config import SimConfig
    from sim_core.costmodel import CostModel
    from sim_core.fastpath import _spec_decode, _SpecDraws
    from sim_core.speculative import Speculator, tokens_emitted, verify_aggregates

    cfg = SimConfig.model_validate({"scheduler": {"speculative": {"enabled": True, "num_draft_tokens": k,
                                                                  "acceptance_rate": alpha}}})  # fmt: skip
    spec, ref = Speculator(cfg, CostModel(cfg)), Speculator(cfg, CostModel(cfg))
    width = min(width, 1 + k)
    B = len(lefts)
    order = [10 * i + 3 for i in range(B)][::-1]  # (ids not in batch order)
    base = {r: 100 * i for i, r in enumerate(order)}
    left = dict(zip(order, lefts))
    held = {r: 1 for r in order}
    grown = [2 + i % 3 for i in range(B)]
    draws = _SpecDraws(spec)
    draws.take(offset)  # (a stream already read into)
    finished: list = []
    S0, d, j = sum(base.values()), 5, 9
    base_run = dict(base)
    D, pairs, draft_s, emitted, done, freed, S, staying = _spec_decode(
        spec, draws, lambda b: width, order, grown, base_run, left, held, d, S0, finished, j)
    lead = ref.upcoming(offset + B)[offset:].tolist()
    gained = [tokens_emitted(a, width - 1, x) for a, x in zip(lead, lefts)]
    ends = [r for r, g, x in zip(order, gained, lefts) if g == x]
    assert (D, pairs) == verify_aggregates(width, B, S0 + B * d)[::2]
    assert emitted == sum(gained)
    assert (done or []) == ends and finished == [(r, j, d) for r in ends]
    assert staying == [r for r in order if r not in ends]
    assert freed == sum(h for r, h in zip(order, grown) if r in ends)
    assert [held[r] for r in order] == grown
    assert base_run == {r: base[r] + g - 1 for r, g in zip(order, gained)}
    assert S == sum(base_run[r] for r in staying)
    assert all(left[r] == x - g for r, g, x in zip(order, gained, lefts) if r not in ends)
    # (the draft's time is its caller's to add: a tick with prefill chunks prices it again with them)
    assert (spec.num_steps, spec.num_emitted, spec.draft_time_s) == (B, sum(gained), 0.0)
    assert draft_s == spec.tick_draft_s(B, S0 + B * d)
    draws.settle()  # (the stream goes on where the decoder-by-decoder one does)
    ref.use(offset + B)
    assert spec.upcoming(64).tolist() == ref.upcoming(64).tolist()


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_range_max_takes_each_ranges_maximum_by_mask_or_sparse_table(data):
    # a write-back takes each decoder's largest gap over its ticks in step; short runs by a mask, long ones by a sparse
    # table: both the maximum of the same values, whatever the sizes (-inf: ticks that did not decode)
    from sim_core import fastpath

    T = data.draw(st.integers(1, 200))
    values = np.array(data.draw(st.lists(st.one_of(st.floats(-1e3, 1e3), st.just(-np.inf)), min_size=T, max_size=T)))
    pairs = data.draw(st.lists(st.tuples(st.integers(0, T - 1), st.integers(0, T - 1)), min_size=1, max_size=40))
    lo = np.array([min(a, b) for a, b in pairs], dtype=np.int64)
    hi = np.array([max(a, b) for a, b in pairs], dtype=np.int64)
    want = np.array([values[a : b + 1].max() for a, b in zip(lo, hi)])
    kept = fastpath.RANGE_MAX_MASK_CELLS
    try:
        for cells in (0, 10**9):  # (the sparse table always, the mask always)
            fastpath.RANGE_MAX_MASK_CELLS = cells
            assert np.array_equal(fastpath._range_max(values, lo, hi), want)
    finally:
        fastpath.RANGE_MAX_MASK_CELLS = kept
