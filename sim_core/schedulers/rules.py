"""Scheduling rules that are plain integer arithmetic, written once and used by both the scheduler
(scheduler.py) and the decode-first fast path (fastpath.py).

Each function takes Python ints (or an iterable of them) and returns Python ints: no NumPy, no state,
so the scalar fast path can call it every tick and the scheduler can apply its answer to the arrays.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable


def chunk_size(remaining: int, budget: int, is_chunked: bool) -> int:
    """Tokens of a prefill that run this tick: with chunked prefill as many as the budget allows
    (may be <= 0 when the budget is spent), otherwise the whole remaining prompt or nothing."""
    if is_chunked:
        return min(remaining, budget)
    return remaining if remaining <= budget else 0


def prefill_chunks(remaining: Iterable[int], budget: int, is_chunked: bool) -> list[int]:
    """Chunks of the running prefills, in admission order, under one token budget. The first prompt
    that gets nothing ends the tick's prefilling: later (shorter) prompts do not jump it."""
    out: list[int] = []
    rest = list(remaining)
    for rem in rest:
        chunk = chunk_size(rem, budget, is_chunked)
        if chunk <= 0:
            break
        out.append(chunk)
        budget -= chunk
    return out + [0] * (len(rest) - len(out))


def admit_in_order(
    remaining: Iterable[int],
    budget: int,
    free_blocks: int,
    reserve_blocks: int,
    blocks_needed: Callable[[int, int], int],
    is_chunked: bool,
    is_static: bool,
) -> list[tuple[int, int]]:
    """Admission from the head of the waiting queue: (chunk, blocks) for each request admitted, in
    queue order. Stops at the first request that does not fit in the token budget or in the free
    blocks above the reserve (no skipping, as in vLLM: head-of-line order is part of the policy).
    A static batch admits requests whose prompt exceeds the tick's budget (prefilled later).

    Args:
        remaining: prefill tokens of each candidate, in queue order (consumed lazily).
        blocks_needed: (candidate index, chunk) -> KV blocks to allocate on admission.
    """
    out: list[tuple[int, int]] = []
    for i, rem in enumerate(remaining):
        chunk = chunk_size(rem, budget, is_chunked)
        if chunk <= 0 and not is_static:
            break
        need = blocks_needed(i, chunk)
        if need + reserve_blocks > free_blocks:
            break
        free_blocks -= need
        budget -= chunk
        out.append((chunk, need))
    return out
