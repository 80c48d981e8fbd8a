"""Automatic prefix caching (vLLM V1 automatic prefix caching, SGLang RadixAttention; DESIGN §8).

Only full prompt blocks are cached. A block's key is a hash of (its parent block's key, the block's
identity): here the workload's prefix identity and position (a system prompt, a session's
content, or a trace's hash id), chained so equal keys mean equal prefixes. When a request finishes
or is pre-empted, its cached blocks keep their content with reference count 0 and become
evictable; allocation takes truly free blocks first and then evicts the least recently used
evictable block. A new request reuses its longest chain of cached blocks: those tokens are not
recomputed, though attention still reads them.

Accounting beside the count-based BlockManager: a request's `held[r]` counts every block in its
block table, cached ones included, so the scheduler's arithmetic is unchanged. A cached block
referenced by k requests is counted k times in `held` but exists once, and an evictable block is
free as far as the scheduler is concerned (allocating it evicts it). So

    num_free + held.sum() − (refs − referenced entries) == num_blocks,   evictable ⊆ free.

Every operation costs O(blocks of the request it concerns): a dict lookup per block and an
OrderedDict for the LRU, never a scan over past requests.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable

import numpy as np

from sim_core.kvcache import BlockManager
from sim_core.types import IntArray
from sim_core.workload import Workload

_M64 = (1 << 64) - 1
_P = np.uint64(0x100000001B3)  # FNV-1a prime: odd, so it has an inverse mod 2**64
_P_INV = np.uint64(pow(0x100000001B3, -1, 1 << 64))
_TAG_SYSTEM, _TAG_CONTENT, _TAG_TRACE = 1, 2, 3


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64 finaliser, elementwise on uint64 (wrapping arithmetic)."""
    x = x ^ (x >> np.uint64(30))
    x = x * np.uint64(0xBF58476D1CE4E5B9)
    x = x ^ (x >> np.uint64(27))
    x = x * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def chain_keys(idents: np.ndarray) -> np.ndarray:
    """key_b = H(key_{b−1}, ident_b) for b = 0..n−1, as one vectorised pass.

    H is a polynomial rolling hash (key_b = key_{b−1}·P + ident_b mod 2^64, then mixed): equal keys
    at b need equal identities at every position up to b. Computed as P^b · Σ_{i≤b} ident_i · P^{−i},
    which NumPy's wrapping uint64 products and sums give exactly.
    """
    n = idents.size
    if n == 0:
        return np.empty(0, dtype=np.uint64)
    with np.errstate(over="ignore"):
        pw = _powers(_P, n)
        inv = _powers(_P_INV, n)
        acc = np.cumsum(_mix(idents.astype(np.uint64)) * inv, dtype=np.uint64)
        return _mix(acc * pw)


def _powers(base: np.uint64, n: int) -> np.ndarray:
    """base^0 .. base^(n−1) mod 2^64."""
    out = np.empty(n, dtype=np.uint64)
    out[0] = 1
    if n > 1:
        out[1:] = base
        with np.errstate(over="ignore"):
            out[1:] = np.cumprod(out[1:], dtype=np.uint64)
    return out


def block_identities(wl: Workload, r: int, num_blocks: int, block_size: int) -> np.ndarray:
    """Identity of each of request r's first `num_blocks` full prompt blocks (before chaining).

    A block is identified by what its last token belongs to (a system prompt, the request's or
    session's own content, or a trace hash block) and its position, so two requests agree on a block
    exactly when they share the content up to its end.
    """
    b = np.arange(num_blocks, dtype=np.uint64)
    last = (np.arange(num_blocks, dtype=np.int64) + 1) * block_size - 1  # last token of each block
    pos = b << np.uint64(20)
    if wl.block_hash_ids is not None:
        ids = wl.block_hash_ids[r]
        h = last // wl.hash_block_tokens
        known = h < ids.size
        hid = np.where(known, ids[np.minimum(h, max(ids.size - 1, 0))] if ids.size else 0, r).astype(np.uint64)
        tag = np.where(known, _TAG_TRACE, _TAG_CONTENT).astype(np.uint64)
        return (tag << np.uint64(60)) ^ (hid << np.uint64(24)) ^ pos
    content = int(wl.content_id[r]) if wl.content_id is not None else r
    if wl.prefix_len is not None and wl.prefix_group[r] >= 0:
        in_system = last < wl.prefix_len[r]
        owner = np.where(in_system, int(wl.prefix_group[r]), content).astype(np.uint64)
        tag = np.where(in_system, _TAG_SYSTEM, _TAG_CONTENT).astype(np.uint64)
    else:
        owner = np.full(num_blocks, content, dtype=np.uint64)
        tag = np.full(num_blocks, _TAG_CONTENT, dtype=np.uint64)
    return (tag << np.uint64(60)) ^ (owner << np.uint64(24)) ^ pos


class PrefixCache:
    """Keys, reference counts and the LRU of evictable blocks. Knows nothing of free-block counts."""

    def __init__(self, wl: Workload, block_size: int):
        self.wl = wl
        self.block_size = block_size
        self.ref: dict[int, int] = {}  # key -> reference count (0: evictable, in `lru`)
        self.lru: OrderedDict[int, None] = OrderedDict()  # evictable keys, least recently used first
        self.refs: dict[int, list[int]] = {}  # request -> keys it references, in block order
        self.num_dup_refs = 0  # Σ over referenced entries of (count − 1)
        self.num_evicted = 0
        # statistics over every lookup (a recomputed request looks up again, as in vLLM)
        self.num_query_tokens = 0
        self.num_hit_tokens = 0
        self.num_query_blocks = 0
        self.num_hit_blocks = 0
        self.hit_tokens = np.zeros(wl.num_requests, dtype=np.int64)  # (R,) at the latest admission
        self.on_change: Callable[[int], None] | None = None  # called with the evictable count

    def keys(self, r: int, num_blocks: int) -> np.ndarray:
        return chain_keys(block_identities(self.wl, r, num_blocks, self.block_size))

    @property
    def num_evictable(self) -> int:
        return len(self.lru)

    def match(self, keys: np.ndarray) -> tuple[int, int]:
        """(blocks of the longest cached chain, how many of them are evictable). No side effects."""
        hit = evictable = 0
        for k in keys.tolist():
            c = self.ref.get(k)
            if c is None:
                break
            hit += 1
            evictable += c == 0
        return hit, evictable

    def acquire(self, r: int, keys: list[int]) -> int:
        """Reference cached blocks for r; returns how many were evictable (they stop being free)."""
        took = 0
        for k in keys:
            c = self.ref[k]
            if c == 0:
                del self.lru[k]
                took += 1
            else:
                self.num_dup_refs += 1
            self.ref[k] = c + 1
        self.refs.setdefault(r, []).extend(keys)
        if took and self.on_change:
            self.on_change(len(self.lru))
        return took

    def register(self, r: int, keys: list[int]) -> None:
        """r's computed blocks with these keys become cache entries (r keeps referencing them).
        A key already cached (computed concurrently by another request) stays r's private block."""
        mine = self.refs.setdefault(r, [])
        for k in keys:
            if k not in self.ref:
                self.ref[k] = 1
                mine.append(k)

    def release(self, r: int) -> tuple[int, int]:
        """Drop r's references: (blocks r referenced, blocks that became evictable). Tail blocks are
        queued first so they are evicted before the shared head (vLLM frees in reverse order)."""
        keys = self.refs.pop(r, None)
        if not keys:
            return 0, 0
        freed = 0
        for k in reversed(keys):
            c = self.ref[k] - 1
            self.ref[k] = c
            if c == 0:
                self.lru[k] = None
                freed += 1
            else:
                self.num_dup_refs -= 1
        if freed and self.on_change:
            self.on_change(len(self.lru))
        return len(keys), freed

    def evict(self, count: int) -> None:
        for _ in range(count):
            k, _ = self.lru.popitem(last=False)
            del self.ref[k]
        self.num_evicted += count
        if count and self.on_change:
            self.on_change(len(self.lru))

    def check(self) -> None:
        zero = {k for k, c in self.ref.items() if c == 0}
        if zero != set(self.lru):
            raise RuntimeError("prefix cache: the LRU must hold exactly the unreferenced entries")
        if any(c < 0 for c in self.ref.values()):
            raise RuntimeError("prefix cache: negative reference count")
        total = sum(len(v) for v in self.refs.values())
        live = sum(1 for c in self.ref.values() if c > 0)
        if total != sum(self.ref.values()) or self.num_dup_refs != total - live:
            raise RuntimeError("prefix cache: reference counts disagree with the requests' references")


class PrefixCachingBlockManager(BlockManager):
    """A BlockManager whose free blocks may still hold cached content (evictable, LRU).

    `num_free` is a property: every allocation, wherever it happens, lowers it, and when the truly
    free blocks run out the least recently used evictable blocks are evicted to make room.
    """

    def __init__(self, num_blocks: int, num_host_blocks: int, block_size: int, workload: Workload):
        self.prefix = PrefixCache(workload, block_size)
        self._num_free = 0
        super().__init__(num_blocks, num_host_blocks, block_size, workload.num_requests, workload.num_samples, None)

    @property
    def num_free(self) -> int:
        return self._num_free

    @num_free.setter
    def num_free(self, value: int) -> None:
        self._num_free = value
        excess = self.prefix.num_evictable - value
        if excess > 0:  # allocation took every truly free block: evict the least recently used
            self.prefix.evict(excess)

    # ------------------------------------------------------------ prefix hooks
    def lookup(self, r: int, prompt_tokens: int) -> tuple[np.ndarray, int, int]:
        """(keys of r's cacheable blocks, hit blocks, evictable among them). At least one prompt token is
        always computed (the last block is recomputed when the whole prompt is cached, as in vLLM)."""
        keys = self.prefix.keys(r, (prompt_tokens - 1) // self.block_size)
        hit, evictable = self.prefix.match(keys)
        return keys, hit, evictable

    def acquire(self, r: int, keys: np.ndarray, hit: int, prompt_tokens: int) -> None:
        """On admission: r's block table starts with its first `hit` cached blocks (statistics count
        admissions only, not lookups of a request that then did not fit)."""
        pc = self.prefix
        pc.num_query_tokens += prompt_tokens
        pc.num_hit_tokens += hit * self.block_size
        pc.num_query_blocks += keys.size
        pc.num_hit_blocks += hit
        pc.hit_tokens[r] = hit * self.block_size
        if hit:
            took = pc.acquire(r, keys[:hit].tolist())
            self.held[r] += hit
            self.num_free = self._num_free - took

    def register(self, done_prefill: IntArray, prompt_tokens: IntArray) -> None:
        """Requests whose prefill just completed publish their full prompt blocks."""
        for r, p in zip(done_prefill.tolist(), prompt_tokens.tolist()):
            n_full = p // self.block_size
            have = len(self.prefix.refs.get(r, ()))
            if n_full > have:
                self.prefix.register(r, self.prefix.keys(r, n_full)[have:].tolist())

    # ------------------------------------------------------------ BlockManager overrides
    def free(self, req_idx: IntArray) -> None:
        ids = np.atleast_1d(req_idx)
        freed = int(self.held[ids].sum())
        back = 0
        for r in ids.tolist():
            if r in self.prefix.refs:
                referenced, evictable = self.prefix.release(r)
                back += referenced - evictable  # still referenced by others: not freed
        self.held[ids] = 0
        self.num_free = self._num_free + freed - back

    def swap_out(self, req: int) -> int:
        """The swapped copy is private; cached blocks on the GPU lose one reference."""
        n = int(self.held[req])
        back = 0
        if req in self.prefix.refs:
            referenced, evictable = self.prefix.release(req)
            back = referenced - evictable
        self.host_held[req], self.held[req] = n, 0
        self.num_free = self._num_free + n - back
        self.num_host_free -= n
        return n

    @property
    def num_evictable(self) -> int:
        return self.prefix.num_evictable

    def check_invariants(self) -> None:
        pc = self.prefix
        pc.check()
        physical = int(self.held.sum()) - pc.num_dup_refs
        if self._num_free < pc.num_evictable or self._num_free + physical != self.num_blocks:
            raise RuntimeError(
                f"GPU blocks not conserved: free {self._num_free} (evictable {pc.num_evictable}) + in use {physical} "
                f"!= {self.num_blocks}"
            )
        if self.num_host_free < 0 or self.num_host_free + int(self.host_held.sum()) != self.num_host_blocks:
            raise RuntimeError("host swap blocks not conserved")
