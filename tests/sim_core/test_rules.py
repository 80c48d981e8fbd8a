"""The integer scheduling rules shared by the scheduler and the fast path (schedulers/rules.py)."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from sim_core.schedulers import rules


def test_unchunked_prefills_stop_at_the_first_that_does_not_fit():
    # 5 fits, 10 does not fit the 7 left: the 3 behind it must not jump the queue
    assert rules.prefill_chunks([5, 10, 3], 12, is_chunked=False) == [5, 0, 0]


def test_chunked_prefills_split_the_budget_in_order():
    assert rules.prefill_chunks([5, 10, 3], 12, is_chunked=True) == [5, 7, 0]


@given(st.lists(st.integers(1, 5000), max_size=12), st.integers(-100, 20000))
def test_chunked_prefills_equal_the_cumulative_clip(remaining, budget):
    rem = np.array(remaining, dtype=np.int64)
    expected = np.clip(budget - (np.cumsum(rem) - rem), 0, rem)  # the vectorised form
    assert rules.prefill_chunks(remaining, budget, is_chunked=True) == expected.tolist()


@given(st.integers(-10, 10), st.integers(-10, 10), st.booleans())
def test_a_chunk_is_the_smaller_of_prompt_and_budget_as_min_returns_it(remaining, budget, as_numpy):
    # chunk_size spells min() out (it runs every composed tick); it returns the same object min() does,
    # so an executor passing NumPy integers gets the same types back
    rem = np.int64(remaining) if as_numpy else remaining
    chunk = rules.chunk_size(rem, budget, is_chunked=True)
    assert chunk == min(rem, budget) and type(chunk) is type(min(rem, budget))


@given(st.lists(st.integers(1, 50), max_size=6), st.integers(-5, 200), st.booleans())
def test_prefill_chunks_take_any_iterable_and_leave_a_list_untouched(remaining, budget, is_chunked):
    given_list = list(remaining)
    from_list = rules.prefill_chunks(given_list, budget, is_chunked)
    assert from_list == rules.prefill_chunks(iter(remaining), budget, is_chunked)
    assert given_list == remaining and len(from_list) == len(remaining)


def test_admission_stops_at_the_first_request_without_blocks():
    blocks = [2, 9, 1]
    taken = rules.admit_in_order([32, 144, 16], 10_000, free_blocks=10, reserve_blocks=1,
                                 blocks_needed=lambda i, chunk: blocks[i], is_chunked=True, is_static=False)  # fmt: skip
    assert taken == [(32, 2)]  # 9 + 1 reserve > 8 left; the small third one waits behind it


def test_admission_chunks_the_last_prompt_to_the_budget():
    taken = rules.admit_in_order([300, 300, 300], 500, 100, 0, lambda i, chunk: 1, is_chunked=True, is_static=False)
    assert taken == [(300, 1), (200, 1)]


def test_static_batches_admit_prompts_over_the_budget():
    taken = rules.admit_in_order([300, 900], 500, 100, 0, lambda i, chunk: 1, is_chunked=False, is_static=True)
    assert [chunk for chunk, _ in taken] == [300, 0]  # the second is prefilled in a later tick


def test_admission_reads_candidates_lazily():
    seen = []

    def queue():
        for rem in (10, 10, 10, 10):
            seen.append(rem)
            yield rem

    rules.admit_in_order(queue(), 15, 100, 0, lambda i, chunk: 1, is_chunked=False, is_static=False)
    assert len(seen) == 2  # the long queue behind the first refusal is never read


@given(st.lists(st.integers(1, 600), max_size=6), st.integers(-5, 1200), st.integers(0, 40), st.integers(0, 5),
       st.integers(1, 32), st.booleans(), st.booleans())  # fmt: skip
def test_admission_of_a_single_candidate_is_admit_in_orders_test(remaining, budget, free, reserve, bs, is_chunked,
                                                                  is_static):  # fmt: skip
    """`admit_next` (what the fast path calls for the queue's first one or two candidates) applied candidate by
    candidate, each with the budget and blocks the ones before it left, takes what admit_in_order takes."""
    need = lambda i, chunk: -(-max(chunk, 1) // bs) + i % 2
    expected = rules.admit_in_order(remaining, budget, free, reserve, need, is_chunked, is_static)
    taken, left, free_now = [], budget, free
    for i, rem in enumerate(remaining):
        one = rules.admit_next(i, rem, left, free_now, reserve, need, is_chunked, is_static)
        if one is None:
            break
        taken.append(one)
        left, free_now = left - one[0], free_now - one[1]
    assert taken == expected


@given(cap=st.integers(1, 300), max_extra=st.integers(0, 300), flags=st.lists(st.booleans(), max_size=80))
def test_batch_cap_trajectory_is_the_rule_applied_tick_by_tick(cap, max_extra, flags):
    """The coalesced run's caps equal `next_batch_cap` stepped once per tick (both code paths:
    few flag changes in closed form, many stepped)."""
    max_seqs = cap + max_extra
    out = rules.batch_cap_trajectory(cap, np.array(flags, dtype=bool), max_seqs)
    expected = [cap]
    for slow in flags:
        expected.append(rules.next_batch_cap(expected[-1], slow, max_seqs))
    assert out.tolist() == expected


@given(st.integers(1, 5), st.integers(0, 600), st.integers(0, 600), st.integers(1, 400), st.integers(-5, 3000))
def test_a_chunks_budget_tokens_and_the_positions_they_cover_invert(n, computed, positions, prompt, tokens):
    # A chunk's budget tokens: each position once, each one past the prompt once more per further sample (the extra
    # tokens the engine prices for the other samples); chunk_positions is the most positions a token count covers.
    from sim_core.engine import samples_past_prompt

    cost = rules.chunk_tokens(n, computed, positions, prompt)
    assert cost - positions == samples_past_prompt(n, [positions], [computed], [prompt])[0]
    assert rules.chunk_positions(n, computed, cost, prompt) == positions
    m = rules.chunk_positions(n, computed, tokens, prompt)
    assert m == tokens if tokens <= 0 else (rules.chunk_tokens(n, computed, m, prompt) <= tokens
                                             < rules.chunk_tokens(n, computed, m + 1, prompt))  # fmt: skip


# ---------------------------------------------------------------- SGLang's KV token budget (admission new_token_ratio)
def test_token_budget_refuses_a_prompt_that_fits_the_blocks_but_not_with_its_output_and_the_running_reservation():
    # 100 free blocks of 16 = 1,600 tokens; running requests keep 1,000 tokens x 0.5 = 500. A 600-token prompt takes
    # 38 blocks (fits), but 600 + 500 output >= 1,600 - 500: SGLang's PrefillAdder.add_one_req refuses it
    tokens = rules.TokenBudget(16, rules.running_reservation([1000], 0.5), lambda i: 500)
    assert rules.admit_in_order([600], 8192, 100, 0, lambda i, c: -(-c // 16), True, False, None, tokens) == []
    # without the running requests it passes: 600 + 500 < 1,600
    tokens = rules.TokenBudget(16, rules.running_reservation([], 0.5), lambda i: 500)
    assert rules.admit_in_order([600], 8192, 100, 0, lambda i, c: -(-c // 16), True, False, None, tokens) == [(600, 38)]


def test_token_budget_refuses_an_exact_fit():
    # add_one_req: `total_tokens >= rem_total_tokens` refuses, so prompt + output equal to the room waits
    assert not rules.TokenBudget(1, 0.0, lambda i: 40).admits(0, 60, 100)
    assert rules.TokenBudget(1, 0.0, lambda i: 39).admits(0, 60, 100)


def test_token_budget_promises_each_admitted_output_but_not_a_chunked_ones():
    # two requests of 100 prompt / 300 output tokens in 1,000 free tokens: the first promises its 300, so the second
    # sees 1,000 - 100 (its blocks) - 300 = 600 > 400 and passes; a third does not (500 - 600 < 400)
    tokens = rules.TokenBudget(1, 0.0, lambda i: 300)
    taken = rules.admit_in_order([100, 100, 100], 8192, 1000, 0, lambda i, c: c, True, False, None, tokens)
    assert taken == [(100, 100), (100, 100)] and tokens.reserved == 600
    # a prompt cut to a chunk (budget 50) promises no output yet (SGLang's truncated request reserves 0)
    tokens = rules.TokenBudget(1, 0.0, lambda i: 300)
    assert rules.admit_in_order([100], 50, 1000, 0, lambda i, c: c, True, False, None, tokens) == [(50, 50)]
    assert tokens.reserved == 0


def test_output_reservation_clips_at_4096_and_to_the_pool():
    assert rules.output_reservation(10_000, 100, 1_000_000) == rules.CLIP_MAX_NEW_TOKENS == 4096
    assert rules.output_reservation(300, 100, 1_000_000) == 300
    # SGLang cuts max_new_tokens so prompt + output stays 7 tokens below the pool: one request alone always fits
    assert rules.output_reservation(900, 500, 1000) == 1000 - 7 - 500
    assert rules.output_reservation(900, 2000, 1000) == 0
    assert rules.running_reservation([10_000, 100], 0.5) == (4096 + 100) * 0.5


def test_the_ratio_decays_per_decode_step_to_its_floor():
    init, floor, decay = 0.7, 0.7 * 0.14, (0.7 - 0.7 * 0.14) / 600
    assert rules.new_token_ratio(init, 0, floor, decay) == init
    assert rules.new_token_ratio(init, 1, floor, decay) == init - decay
    assert abs(rules.new_token_ratio(init, 300, floor, decay) - (init + floor) / 2) < 1e-12
    assert rules.new_token_ratio(init, 600, floor, decay) == floor or abs(rules.new_token_ratio(init, 600, floor, decay) - floor) < 1e-12
    assert rules.new_token_ratio(init, 10_000, floor, decay) == floor
    # a retract's ratio below the floor holds until the first decode step
    assert rules.new_token_ratio(0.05, 0, floor, decay) == 0.05 and rules.new_token_ratio(0.05, 1, floor, decay) == floor


def test_a_retract_sets_the_ratio_from_the_requests_left():
    # ScheduleBatch.retract_decode: (sum decoded + 20 x left) / sum max_new_tokens, at most 1
    assert rules.retract_ratio([100, 50], [400, 200]) == (150 + 40) / 600
    assert rules.retract_ratio([390, 190], [400, 200]) == 1.0
    assert rules.retract_ratio([], []) is None


@given(st.lists(st.tuples(st.integers(1, 3000), st.integers(0, 5000)), max_size=8), st.integers(-50, 9000),
       st.integers(0, 400), st.sampled_from([1, 8, 16]), st.floats(0, 5000), st.booleans())
def test_token_budget_admission_is_the_block_rule_cut_where_the_token_test_first_fails(cands, budget, free, bs, reserved,
                                                                                       is_chunked):  # fmt: skip
    """Property: with the token budget, admission takes a prefix of what the block rule alone takes, and stops
    exactly at the first candidate whose prefill + output does not fit below the room the ones before it left."""
    remaining = [r for r, _ in cands]
    outs = [o for _, o in cands]
    need = lambda i, c: -(-max(c, 1) // bs)
    plain = rules.admit_in_order(remaining, budget, free, 0, need, is_chunked, False)
    tokens = rules.TokenBudget(bs, reserved, outs.__getitem__)
    taken = rules.admit_in_order(remaining, budget, free, 0, need, is_chunked, False, None, tokens)
    assert taken == plain[: len(taken)]
    room_free, promised = free, reserved
    for i, (chunk, blocks) in enumerate(taken):  # each admitted one passed the test with what was left then
        assert remaining[i] + outs[i] < room_free * bs - promised
        promised += outs[i] if chunk >= remaining[i] else 0
        room_free -= blocks
    assert tokens.reserved == promised
    if len(taken) < len(plain):  # the first refused by the token test alone
        i = len(taken)
        assert not remaining[i] + outs[i] < room_free * bs - promised
