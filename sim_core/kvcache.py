"""KV-cache block accounting on the GPU and in host swap space. Mechanism only: no scheduling decisions.

Blocks are counted, not addressed: a request holds `held[r]` blocks. That is all the schedulers
and metrics need; block identities (for prefix sharing) can be added behind the same methods.

Invariants (checked by `check_invariants`, which tests call every tick):
  num_free + held.sum() == num_blocks, 0 <= num_free;  num_host_free + host_held.sum() == num_host_blocks.
"""

from __future__ import annotations

import numpy as np

from sim_core.types import IntArray


class BlockManager:
    def __init__(
        self,
        num_blocks: int,
        num_host_blocks: int,
        block_size: int,
        num_requests: int,
        num_samples: int,
        contiguous_tokens: int | None,
    ):
        """Args:
        contiguous_tokens: None for paged KV; else the tokens reserved per sequence on admission
            (max_model_len: the pre-PagedAttention layout of Orca / FasterTransformer).
        """
        self.num_blocks = num_blocks
        self.num_host_blocks = num_host_blocks
        self.block_size = block_size
        self.num_samples = num_samples
        self.num_free = num_blocks
        self.num_host_free = num_host_blocks
        self.held = np.zeros(num_requests, dtype=np.int64)  # (R,) GPU blocks per request
        self.host_held = np.zeros(num_requests, dtype=np.int64)  # (R,) swapped-out blocks per request
        self._contiguous_blocks = None if contiguous_tokens is None else num_samples * -(-contiguous_tokens // block_size)
        # Blocks a decoding request gains at each block boundary of its context: one per sample when
        # paged, none when its whole length was reserved at admission (contiguous).
        self.blocks_per_boundary = num_samples if contiguous_tokens is None else 0

    # ------------------------------------------------------------ questions
    def blocks_for(self, ctx_tokens, prompt_tokens):
        """Blocks a request needs to hold `ctx_tokens` of context (elementwise).

        With n > 1 samples the full prompt blocks are shared and each sample owns its tail (the last
        partial prompt block is copied on divergence), as in vLLM's copy-on-write block tables.
        """
        if self._contiguous_blocks is not None:
            return np.where(np.asarray(ctx_tokens) > 0, self._contiguous_blocks, 0)
        bs, n = self.block_size, self.num_samples
        if n == 1 and type(ctx_tokens) is int:  # (one request as a Python int, e.g. an admission test each tick: the
            return -(-ctx_tokens // bs)  # same ceiling division below without NumPy scalars, ~1 us less)
        if type(ctx_tokens) is int and type(prompt_tokens) is int:  # (n > 1, one request as Python ints: the scalar
            if ctx_tokens <= prompt_tokens:  # core's recompute chunks and admissions; the same counts as below, ~10 us less)
                return -(-ctx_tokens // bs)
            shared = prompt_tokens // bs
            return shared + n * (-(-(ctx_tokens - shared * bs) // bs))
        ctx = np.asarray(ctx_tokens, dtype=np.int64)
        if n == 1:
            return -(-ctx // bs)
        shared = np.asarray(prompt_tokens, dtype=np.int64) // bs
        return np.where(ctx <= prompt_tokens, -(-ctx // bs), shared + n * (-(-(ctx - shared * bs) // bs)))

    @staticmethod
    def fits(num_blocks: int, reserve: int, num_free: int) -> bool:
        """The block rule on counts: `num_blocks` more fit in `num_free` and leave at least `reserve` free
        (`can_allocate`, `can_swap_out`, and the scheduler's swap decisions on counts: `Scheduler.swaps_out`,
        `Scheduler.swap_in_count`, which the scalar core calls too)."""
        return num_blocks + reserve <= num_free

    def can_allocate(self, num_blocks: int, reserve: int = 0) -> bool:
        return self.fits(num_blocks, reserve, self.num_free)

    @property
    def num_used(self) -> int:
        return self.num_blocks - self.num_free

    @property
    def usage(self) -> float:
        return self.num_used / self.num_blocks

    # ------------------------------------------------------------ actions
    def grow_to(self, req_idx: IntArray, target_blocks: IntArray) -> None:
        """Make each request hold at least `target_blocks`. Caller has checked capacity."""
        if type(req_idx) is int:  # (one request as ints, a cluster's reservation: the same counts without arrays)
            extra = max(target_blocks - self.held.item(req_idx), 0)
            self.held[req_idx] += extra
            self.num_free -= extra
            return
        extra = np.maximum(np.asarray(target_blocks) - self.held[req_idx], 0)
        self.held[req_idx] += extra
        self.num_free -= int(extra.sum())

    def allocate(self, req_idx: IntArray, num_blocks: IntArray, total: int | None = None) -> None:
        """Give each request `num_blocks` more (ids unique; `total` = their sum if known). Caller has
        checked capacity."""
        self.held[req_idx] += num_blocks
        self.num_free -= int(num_blocks.sum()) if total is None else total

    def free(self, req_idx: IntArray) -> None:
        if type(req_idx) is int:  # (one request as an int, a cluster's release: the same count without arrays)
            self.num_free += self.held.item(req_idx)
            self.held[req_idx] = 0
            return
        self.num_free += int(self.held[req_idx].sum())
        self.held[req_idx] = 0

    def preempt(self, req_idx: IntArray, kv_tokens: IntArray) -> None:
        """Requests pre-empted by recompute (KV for kv_tokens positions each) drop their blocks (with prefix caching
        their full blocks stay cached: PrefixCachingBlockManager.preempt)."""
        self.free(req_idx)

    def can_swap_out(self, req: int) -> bool:
        return self.fits(int(self.held[req]), 0, self.num_host_free)

    def swap_out(self, req: int) -> int:
        """Move one request's blocks to host memory; returns the number moved."""
        n = int(self.held[req])
        self.host_held[req], self.held[req] = n, 0
        self.num_free += n
        self.num_host_free -= n
        return n

    def swap_in(self, req: int) -> int:
        n = int(self.host_held[req])
        self.held[req], self.host_held[req] = n, 0
        self.num_free -= n
        self.num_host_free += n
        return n

    def check_invariants(self) -> None:
        if self.num_free < 0 or self.num_free + int(self.held.sum()) != self.num_blocks:
            raise RuntimeError(f"GPU blocks not conserved: free {self.num_free} + held {int(self.held.sum())} != {self.num_blocks}")
        if self.num_host_free < 0 or self.num_host_free + int(self.host_held.sum()) != self.num_host_blocks:
            raise RuntimeError("host swap blocks not conserved")
