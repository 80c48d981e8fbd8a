"""Scheduling rules that are plain integer arithmetic, written once and used by both the scheduler
(scheduler.py) and the scalar per-tick core (fastpath.py).

Each function takes Python ints (or an iterable of them) and returns Python ints: no state, so the
scalar fast path can call it every tick and the scheduler can apply its answer to the arrays. The
one NumPy function, `batch_cap_trajectory`, is `next_batch_cap` applied over a coalesced run.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy as np

MAX_CAP_SEGMENTS = 16  # flag changes in a run above which the trajectory is stepped tick by tick


def chunk_size(remaining: int, budget: int, is_chunked: bool) -> int:
    """Tokens of a prefill that run this tick: with chunked prefill as many as the budget allows
    (may be <= 0 when the budget is spent), otherwise the whole remaining prompt or nothing."""
    if is_chunked:
        return budget if budget < remaining else remaining  # min(remaining, budget) exactly, without the call
    return remaining if remaining <= budget else 0


def positions_past_prompt(computed: int, positions: int, prompt: int) -> int:
    """Of a prefill chunk of `positions` from `computed`, those past the prompt: only a recompute prefill, whose target
    is the prompt plus the tokens emitted before its pre-emption, has them."""
    past = computed + positions - (computed if computed > prompt else prompt)
    return past if past > 0 else 0


def chunk_tokens(n: int, computed: int, positions: int, prompt: int) -> int:
    """Tokens a prefill chunk computes with n samples per request: each position once, and each position past the
    prompt once more per further sample (every sample has its own tokens there; the prompt's blocks are shared).
    What a tick prices (engine.samples_past_prompt) and what the token budget counts (vLLM V0 sums the new tokens of
    every sequence of a group, Scheduler._get_num_new_uncached_and_cached_tokens)."""
    return positions + (n - 1) * positions_past_prompt(computed, positions, prompt) if n > 1 else positions


def chunk_positions(n: int, computed: int, tokens: int, prompt: int) -> int:
    """The most positions from `computed` whose chunk takes at most `tokens` tokens (chunk_tokens' inverse)."""
    below = prompt - computed if computed < prompt else 0
    return tokens if n == 1 or tokens <= below else below + (tokens - below) // n


def prefill_chunks(remaining: Iterable[int], budget: int, is_chunked: bool) -> list[int]:
    """Chunks of the running prefills, in admission order, under one token budget. The first prompt
    that gets nothing ends the tick's prefilling: later (shorter) prompts do not jump it."""
    out: list[int] = []
    rest = remaining if isinstance(remaining, list) else list(remaining)
    for rem in rest:
        chunk = chunk_size(rem, budget, is_chunked)
        if chunk <= 0:
            out += [0] * (len(rest) - len(out))
            break
        out.append(chunk)
        budget -= chunk
    return out


# SGLang's admission by KV tokens (admission `new_token_ratio`; python/sglang/srt/managers/schedule_policy.py
# PrefillAdder, schedule_batch.py ScheduleBatch.retract_decode): constants of its source, not knobs.
CLIP_MAX_NEW_TOKENS = 4096  # SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION: a request's output is counted up to this
RETRACT_DECODE_STEPS = 20  # global_config.retract_decode_steps: decode steps a retract's new ratio leaves room for
# Its Scheduler cuts max_new_tokens to max_req_input_len - 1 - prompt, max_req_input_len = max_total_num_tokens - 1 - 5:
# a request's prompt plus output stays this many tokens below the pool, so one alone always passes the test.
POOL_MARGIN_TOKENS = 7


def output_reservation(output_left: int, prompt: int, pool_tokens: int) -> int:
    """Output tokens SGLang's admission counts for a request it admits whole (its prompt completes in the step):
    min(max_new_tokens, CLIP_MAX_NEW_TOKENS) (`PrefillAdder.add_one_req`, `add_chunked_req` on the last chunk), with
    max_new_tokens its output still to write, cut as SGLang cuts it to fit the pool (`POOL_MARGIN_TOKENS`)."""
    cut = pool_tokens - POOL_MARGIN_TOKENS - prompt
    out = output_left if output_left < CLIP_MAX_NEW_TOKENS else CLIP_MAX_NEW_TOKENS
    out = out if out < cut else cut
    return out if out > 0 else 0


def running_reservation(outputs_left: Iterable[int], ratio: float, counts: Iterable[int] | None = None) -> float:
    """KV tokens SGLang's admission keeps for the requests already running: each one's output still to write, at most
    CLIP_MAX_NEW_TOKENS, times the new-token ratio (`PrefillAdder.__init__`'s rem_total_token_offset; the exact
    sum of the clipped counts, then one product, so any order of the requests gives the same float). `counts`: how
    many requests have each of `outputs_left` (default one each)."""
    clip = CLIP_MAX_NEW_TOKENS
    if counts is None:
        return scaled_reservation(sum(x if x < clip else clip for x in outputs_left), ratio)
    return scaled_reservation(sum((x if x < clip else clip) * c for x, c in zip(outputs_left, counts)), ratio)


def scaled_reservation(total_left: int, ratio: float) -> float:
    """`running_reservation` from the running requests' clipped outputs still to write, summed (a caller that keeps
    the sum: the scalar core, when no output reaches the clip)."""
    return total_left * ratio


def new_token_ratio(base: float, steps: int, min_ratio: float, decay: float) -> float:
    """The ratio `steps` decode-only steps after it was `base` (SGLang: `max(ratio - decay, min_ratio)` after each
    decode batch, `Scheduler.update_running_batch`; a base below the floor, a retract's, holds until the first
    step). Counted in steps, so a run of steps and steps one by one give the same float."""
    if not steps:
        return base
    ratio = base - steps * decay
    return ratio if ratio > min_ratio else min_ratio


def rem_total_tokens(free_blocks: int, block_size: int, reserved: float) -> float:
    """SGLang's `PrefillAdder.rem_total_tokens`: the free KV tokens (here the free blocks x the block size) less what is
    reserved: the running requests' outputs still to write x the ratio (`running_reservation`), and what the round
    already promised. What the token test admits below (`TokenBudget`) and a continuing chunk is cut to (`cut_to_room`)."""
    return free_blocks * block_size - reserved


def cut_to_room(chunk: int, room: float) -> int:
    """A continuing chunk under SGLang's token budget (`PrefillAdder.add_chunked_req`: `_rem_tokens = min(
    rem_chunk_tokens, int(rem_total_tokens))`, then the chunk is truncated to it), `room` its `rem_total_tokens`: cut
    to int(room) when that is smaller; when it is not positive SGLang runs the whole chunk (`if _rem_tokens <= 0:
    _rem_tokens = rem_chunk_tokens`: the chunked request must be scheduled), and so does this (the free blocks still
    bound it: chunk_short_of_blocks shrink)."""
    limit = int(room)
    return limit if 0 < limit < chunk else chunk


def retract_ratio(emitted: Iterable[int], outputs: Iterable[int]) -> float | None:
    """The ratio after a retract (`ScheduleBatch.retract_decode`): the requests left running have written `emitted`
    of their `outputs`; (sum emitted + RETRACT_DECODE_STEPS x their count) / sum outputs, at most 1. None when none
    is left (the ratio is then unchanged)."""
    emitted, outputs = list(emitted), list(outputs)
    total = sum(outputs)
    if not emitted or total <= 0:
        return None
    ratio = (sum(emitted) + RETRACT_DECODE_STEPS * len(emitted)) / total
    return ratio if ratio < 1.0 else 1.0


class TokenBudget:
    """SGLang's KV token budget over one admission round (`PrefillAdder`, admission `new_token_ratio`): a request is
    admitted only while its prefill tokens plus its output reservation stay below rem_total_tokens, the free KV
    tokens less what the round already promised (`>=` refuses: `add_one_req`'s `total_tokens >= rem_total_tokens`).
    The free tokens are the free blocks x block size as the round leaves them (an admitted prefill's blocks, its page
    rounding: today's SGLang ceils each prefill to its pages); the promised tokens start at the running requests'
    reservation and grow by each admitted request's output reservation when its whole prompt runs in this step (a
    prompt cut to a chunk promises no output yet, as SGLang's truncated request). The test comes before the block
    and token-budget tests of `admit_next`: a prompt that must be chunked still has to fit whole with its output."""

    __slots__ = ("block_size", "reserved", "output_of", "_out", "refused")

    def __init__(self, block_size: int, reserved: float, output_of: Callable[[int], int]):
        self.block_size, self.reserved, self.output_of = block_size, reserved, output_of
        self._out = 0  # the last candidate's output reservation (`take` follows `admits` for the same candidate)
        self.refused = False  # a candidate failed the token test (SGLang's NO_TOKEN: the caller marks the batch full)

    def admits(self, i: int, remaining: int, free_blocks: int) -> bool:
        """Candidate i (queue index), `remaining` prefill tokens, passes the token test with `free_blocks` free."""
        out = self._out = self.output_of(i)
        if remaining + out < rem_total_tokens(free_blocks, self.block_size, self.reserved):
            return True
        self.refused = True
        return False

    def take(self, i: int, remaining: int, chunk: int) -> None:
        """Candidate i, just tested by `admits`, was admitted with this first chunk: its output is promised when the
        chunk is its whole prefill."""
        if chunk >= remaining:
            self.reserved += self._out


def admit_in_order(
    remaining: Iterable[int],
    budget: int,
    free_blocks: int,
    reserve_blocks: int,
    blocks_needed: Callable[[int, int], int],
    is_chunked: bool,
    is_static: bool,
    on_admit: Callable[[int, int, int], None] | None = None,
    tokens: TokenBudget | None = None,
) -> list[tuple[int, int]]:
    """Admission from the head of the waiting queue: (chunk, blocks) for each request admitted, in
    queue order. Stops at the first request that does not fit in the token budget or in the free
    blocks above the reserve (no skipping, as in vLLM: head-of-line order is part of the policy).
    A static batch admits requests whose prompt exceeds the tick's budget (prefilled later).

    Args:
        remaining: prefill tokens of each candidate, in queue order (consumed lazily).
        blocks_needed: (candidate index, chunk) -> KV blocks to allocate on admission.
        on_admit: (candidate index, chunk, blocks) called as each is admitted, before the next
            candidate is read (prefix caching: the next lookup must see this admission's effects).
        tokens: admission new_token_ratio: SGLang's KV token test too (`TokenBudget`), before the others.
    """
    out: list[tuple[int, int]] = []
    for i, rem in enumerate(remaining):
        if tokens is None:
            taken = admit_next(i, rem, budget, free_blocks, reserve_blocks, blocks_needed, is_chunked, is_static)
        else:
            taken = admit_tested(tokens, i, rem, budget, free_blocks, reserve_blocks, blocks_needed, is_chunked, is_static)
        if taken is None:
            break
        chunk, need = taken
        free_blocks -= need
        budget -= chunk
        out.append(taken)
        if on_admit is not None:
            on_admit(i, chunk, need)
    return out


def admit_next(i: int, remaining: int, budget: int, free_blocks: int, reserve_blocks: int,
               blocks_needed: Callable[[int, int], int], is_chunked: bool, is_static: bool) -> tuple[int, int] | None:  # fmt: skip
    """`admit_in_order`'s test of one candidate (queue index i, `remaining` prefill tokens) with the budget and free
    blocks the candidates before it left: (chunk, blocks) when it is admitted, None when admission stops at it.
    (A caller with a single candidate calls this instead of admit_in_order: the same rule, without the lists.)"""
    chunk = chunk_size(remaining, budget, is_chunked)
    if chunk <= 0 and not is_static:
        return None
    need = blocks_needed(i, chunk)
    if need + reserve_blocks > free_blocks:
        return None
    return chunk, need


def admit_tested(tokens: TokenBudget, i: int, remaining: int, budget: int, free_blocks: int, reserve_blocks: int,
                 blocks_needed: Callable[[int, int], int], is_chunked: bool, is_static: bool) -> tuple[int, int] | None:  # fmt: skip
    """`admit_next` under SGLang's token test (`admit_in_order` with `tokens`): the token test first, with the free
    blocks the candidates before it left (`TokenBudget.admits`), then `admit_next`'s; when admitted, its output is
    promised (`TokenBudget.take`). (The scalar core's admission with the prefix cache calls it candidate by candidate,
    each looked up in the cache as it is read: `fastpath._Steps.admit_waiting`.)"""
    if not tokens.admits(i, remaining, free_blocks):
        return None
    taken = admit_next(i, remaining, budget, free_blocks, reserve_blocks, blocks_needed, is_chunked, is_static)
    if taken is not None:
        tokens.take(i, remaining, taken[0])
    return taken


def next_batch_cap(cap: int, is_slow: bool, max_seqs: int) -> int:
    """Article §5.2 dynamic_batch_size: halve the batch cap after a slow tick, +1 otherwise."""
    return max(1, cap // 2) if is_slow else min(max_seqs, cap + 1)


def batch_cap_trajectory(cap: int, is_slow: np.ndarray, max_seqs: int) -> np.ndarray:
    """The cap in force at each of k ticks and after the last ((k + 1,)): `next_batch_cap` applied tick
    by tick, in closed form over each stretch of equal flags (t slow ticks: max(1, cap >> t); t fast
    ones: min(max_seqs, cap + t); cap <= max_seqs)."""
    k = is_slow.size
    out = np.empty(k + 1, dtype=np.int64)
    out[0] = cap
    change = np.flatnonzero(is_slow[1:] != is_slow[:-1]) + 1
    if change.size > MAX_CAP_SEGMENTS:  # flags that flip often: the plain recurrence is cheaper
        for j, slow in enumerate(is_slow.tolist()):
            cap = out[j + 1] = next_batch_cap(cap, slow, max_seqs)
        return out
    bounds = [0, *change.tolist(), k] if k else []
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        t = np.arange(1, hi - lo + 1)
        if is_slow[lo]:
            out[lo + 1 : hi + 1] = np.maximum(cap >> np.minimum(t, 62), 1)
        else:
            out[lo + 1 : hi + 1] = np.minimum(cap + t, max_seqs)
        cap = int(out[hi])
    return out
