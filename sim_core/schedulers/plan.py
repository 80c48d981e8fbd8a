"""The scheduler's output: what runs this tick. The engine prices and applies it."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from sim_core.types import BoolArray, IntArray

_EMPTY = np.empty(0, dtype=np.int64)


@dataclass(slots=True)
class StepPlan:
    req_idx: IntArray = field(default_factory=lambda: _EMPTY)  # (B,) requests computing this tick
    num_new_tokens: IntArray = field(default_factory=lambda: _EMPTY)  # (B,) per sequence: chunk, or 1 for decode
    is_decode: BoolArray = field(default_factory=lambda: np.empty(0, dtype=bool))  # (B,)
    admitted_idx: IntArray = field(default_factory=lambda: _EMPTY)  # (A,) taken from the waiting queue
    preempted_idx: IntArray = field(default_factory=lambda: _EMPTY)  # (P,) KV dropped, back to waiting
    swapped_out_idx: IntArray = field(default_factory=lambda: _EMPTY)  # (S,) KV moved to host
    swapped_in_idx: IntArray = field(default_factory=lambda: _EMPTY)  # (I,) KV moved back, running again
    swap_blocks: int = 0  # blocks moved over PCIe (out + in)
    num_decodes: int = 0  # the first num_decodes entries decode; the rest are prefill chunks

    @property
    def is_empty(self) -> bool:
        return self.req_idx.size == 0 and self.swap_blocks == 0

    @property
    def changes_membership(self) -> bool:
        """True when the set of running requests changed (the batch is not a repeat of the last one)."""
        return bool(self.admitted_idx.size or self.preempted_idx.size or self.swapped_out_idx.size or self.swapped_in_idx.size)
