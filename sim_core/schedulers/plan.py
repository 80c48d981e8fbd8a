"""The scheduler's output: what runs this tick. The engine prices and applies it."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sim_core.types import BoolArray, IntArray

# Shared defaults of every plan: read-only, so that no module-level state can ever be written through a plan
_EMPTY = np.empty(0, dtype=np.int64)
_EMPTY.flags.writeable = False
_EMPTY_BOOL = np.empty(0, dtype=bool)
_EMPTY_BOOL.flags.writeable = False


@dataclass(slots=True, init=False)
class StepPlan:
    req_idx: IntArray  # (B,) requests computing this tick
    num_new_tokens: IntArray  # (B,) per sequence: chunk, or 1 for decode
    is_decode: BoolArray  # (B,)
    admitted_idx: IntArray  # (A,) taken from the waiting queue
    preempted_idx: IntArray  # (P,) KV dropped, back to waiting
    swapped_out_idx: IntArray  # (S,) KV moved to host
    swapped_in_idx: IntArray  # (I,) KV moved back, running again
    swap_blocks: int  # blocks moved over PCIe (out + in)
    num_decodes: int  # the first num_decodes entries decode; the rest are prefill chunks

    # (A plain __init__ with shared empty arrays as defaults: a plan is built every planned tick, and seven
    # `default_factory` calls cost ~1 us of a cluster prefill instance's ~30 us tick. Sharing is safe: nothing writes
    # into a plan's arrays in place (a plan's fields are replaced, never filled), and a size-0 array holds nothing.)
    def __init__(self, req_idx: IntArray = _EMPTY, num_new_tokens: IntArray = _EMPTY, is_decode: BoolArray = _EMPTY_BOOL,
                 admitted_idx: IntArray = _EMPTY, preempted_idx: IntArray = _EMPTY, swapped_out_idx: IntArray = _EMPTY,
                 swapped_in_idx: IntArray = _EMPTY, swap_blocks: int = 0, num_decodes: int = 0) -> None:  # fmt: skip
        self.req_idx, self.num_new_tokens, self.is_decode = req_idx, num_new_tokens, is_decode
        self.admitted_idx, self.preempted_idx = admitted_idx, preempted_idx
        self.swapped_out_idx, self.swapped_in_idx = swapped_out_idx, swapped_in_idx
        self.swap_blocks, self.num_decodes = swap_blocks, num_decodes

    @property
    def is_empty(self) -> bool:
        return self.req_idx.size == 0 and self.swap_blocks == 0

    @property
    def changes_membership(self) -> bool:
        """True when the set of running requests changed (the batch is not a repeat of the last one)."""
        return bool(self.admitted_idx.size or self.preempted_idx.size or self.swapped_out_idx.size or self.swapped_in_idx.size)
