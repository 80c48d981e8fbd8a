"""How one tick is composed from the rule families: the order in which decodes, prefill chunks,
swap-in, admission and the decode fallback are applied, written once for both executors
(`Scheduler._plan` on arrays, the scalar per-tick core `fastpath.advance` on Python ints).

The executor supplies the steps as callables that apply one rule to its own representation and
report plain integers back; this function decides which steps run, in which order, and with which
token budget. Changing the order or adding a step is one edit here. A step may raise to hand the
tick back (the scalar core does, before it has changed anything it cannot undo).
"""

from __future__ import annotations

from collections.abc import Callable

from sim_core.schedulers.phase import TickKind

# plain ints: comparing an IntEnum member costs more than an int, and this runs every tick
_PREFILL, _DECODE, _DECODE_FIRST = int(TickKind.PREFILL), int(TickKind.DECODE), int(TickKind.DECODE_FIRST)
_PREFILL_MIXED = int(TickKind.PREFILL_MIXED)


def compose_tick(
    kind: TickKind,
    num_decodes: int,
    budget: int,
    decode_tokens: int,
    may_admit: bool,
    has_swapped: bool,
    run_decodes: Callable[[], tuple[int, bool, bool]],
    run_chunks: Callable[[int], int],
    admit: Callable[[int], tuple[int, int]],
    swap_in: Callable[[], None] | None,
    verify_width: Callable[[int], int] | None = None,
) -> bool:
    """Apply the steps of a tick of this kind in the scheduler's order; True when the decodes run.

    1. Decodes (every kind but PREFILL): each running decode gets its KV for one more step
       (`run_decodes() -> (decodes still running, a decode was pre-empted, one was swapped out)`);
       under DECODE_FIRST and PREFILL_MIXED they take `decode_tokens` each from the token budget (SGLang's
       mixed chunk: `PrefillAdder`'s rem_chunk_tokens less the running batch's size; TensorRT-LLM: generation tokens
       count against max_num_tokens before the context chunks, `MicroBatchScheduler`).
    2. Prefill (every kind but DECODE): chunks of the running prefills in admission order
       (`run_chunks(budget) -> tokens`), then with the budget left either swap-in (swapped requests
       come back first, unless this tick swapped one out) or admission from the head of the queue
       (`admit(budget) -> (admitted, tokens)`; not in a tick that pre-empted a decode).
    3. Fallback: a PREFILL tick that could neither prefill nor admit runs the decodes instead of
       idling (KV full).

    Args:
        num_decodes: running requests whose prompt is complete.
        budget: the tick's token budget (max_num_batched_tokens).
        decode_tokens: budget tokens one decoding request takes (samples x positions verified).
        may_admit: requests wait and may join (`Scheduler.prefill_work`'s can_admit).
        has_swapped: requests wait in host memory for swap-in.
        verify_width: speculative decoding: the positions each of this many running decodes verifies (its drafts
            cut to the budget, `Scheduler.verify_width`), which replaces `decode_tokens`; None: `decode_tokens`.
    """
    if kind != _PREFILL and num_decodes:
        left, preempted, swapped_out = run_decodes()
        decoding = True
        if kind == _DECODE_FIRST or kind == _PREFILL_MIXED:
            budget -= left * (decode_tokens if verify_width is None else verify_width(left))
    else:
        decoding = preempted = swapped_out = False
    if kind != _DECODE:
        tokens = run_chunks(budget)
        budget -= tokens
        admitted = 0
        if has_swapped and not swapped_out:
            swap_in()
        elif may_admit and not preempted:
            admitted, admitted_tokens = admit(budget)
            tokens += admitted_tokens
        if not tokens and not admitted and kind == _PREFILL and num_decodes:
            run_decodes()  # nothing could be prefilled: a decode tick rather than an idle one
            decoding = True
    return decoding
