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
queue of release groups for the LRU (PrefixCache), never a scan over past requests.
"""

from __future__ import annotations

from collections import deque
from itertools import compress, filterfalse, repeat
from operator import eq
from collections.abc import Callable

import numpy as np

from sim_core.kvcache import BlockManager
from sim_core.types import IntArray
from sim_core.workload import Workload

_SYSTEM, _CONTENT, _TRACE = 1, 2, 3  # what a block's content belongs to
MAX_MEMO_KEYS = 1_000_000  # memoised system-prompt keys (~100 MB at most with their lists)


def system_prompt_keys(group: int, num_blocks: int) -> list[int]:
    """The key chain of the first num_blocks blocks of pool system prompt `group` (as block_keys)."""
    h, keys = 0, []
    for b in range(num_blocks):
        h = hash((h, _SYSTEM, group, b))
        keys.append(h)
    return keys


def block_keys(wl: Workload, r: int, num_blocks: int, block_size: int, system_chain=None) -> list[int]:
    """Keys of request r's first `num_blocks` full prompt blocks: key_b = hash(parent key, identity_b).

    A block's identity is what its last token belongs to (a pool system prompt, the request's or
    session's own content, or a trace hash block) and its position. System-prompt and trace blocks
    chain on the previous block's key. A content block's parent is the key of the last system-prompt
    block: its content id and position fix every token after it, so chaining inside the content would
    add nothing but a Python-level loop (these keys are made with C-level map()). Python's hash of a
    tuple of ints is deterministic (no per-process salt) and 64-bit.
    """
    keys: list[int] = []
    h = 0
    if wl.block_hash_ids is not None:
        ids = wl.block_hash_ids[r].tolist()
        hbt = wl.hash_block_tokens
        for b in range(num_blocks):
            i = ((b + 1) * block_size - 1) // hbt
            h = hash((h, _TRACE, ids[i], b) if i < len(ids) else (h, _CONTENT, -1 - r, b))
            keys.append(h)
        return keys
    content = int(wl.content_id[r]) if wl.content_id is not None else r
    num_system = 0
    if wl.prefix_len is not None and wl.prefix_group[r] >= 0:
        num_system = min(int(wl.prefix_len[r]) // block_size, num_blocks)  # blocks ending inside the system prompt
        group = int(wl.prefix_group[r])
        keys = list(system_chain(group, num_system) if system_chain is not None else system_prompt_keys(group, num_system))
        h = keys[-1] if keys else 0
    if num_blocks > num_system:
        keys += map(hash, zip(repeat(h), repeat(_CONTENT), repeat(content), range(num_system, num_blocks)))
    return keys


class PrefixCache:
    """Keys, reference counts and the LRU of evictable blocks. Knows nothing of free-block counts.

    The LRU is a queue of release groups (what one request released, tail block first); an
    evictable entry's value in `ref` is -(g + 1) for the group g that released it last, so a key
    re-acquired or released again later leaves a stale queue slot behind, skipped on eviction and
    dropped by compaction. Release, acquisition and registration are a few C-level bulk dict
    operations per request (an OrderedDict costs a Python-level insertion per block), and eviction
    follows the exact least-recently-released order.

    NOTE: a request's own content, when no other request can share it (no sessions, no trace hash
    ids), is one run entry `("run", content)` holding its first `run_len` blocks, instead of one entry
    per block: eviction takes blocks from the run's tail. Only that request can ever hit them (after a
    recompute pre-emption) and only after its whole system prompt hit, so a run answers every lookup
    a per-block chain would, at O(1) instead of O(blocks) per admission, release and eviction.
    """

    def __init__(self, wl: Workload, block_size: int):
        self.wl = wl
        self.block_size = block_size
        # key -> reference count (> 0), or -(g + 1) for an evictable entry queued under release group g
        self.ref: dict = {}
        self.run_len: dict[int, int] = {}  # content id -> blocks its run holds (run entries only)
        self.refs: dict[int, list] = {}  # request -> per-block keys it references, in block order
        self.run_refs: dict[int, int] = {}  # request -> blocks of its run it references
        self.num_dup_refs = 0  # Σ over referenced entries of (count − 1)
        self.num_evicted = 0
        self._num_evictable = 0
        self._queue: deque[tuple[int, list, int | None]] = deque()  # (group, keys tail first, run content or None)
        self._head = 0  # keys of the oldest group already consumed
        self._num_queued = 0  # entries in the queue, stale ones included (bounded by compaction)
        self._group = 0
        ids = wl.content_id
        self.use_runs = wl.block_hash_ids is None and (ids is None or np.unique(ids).size == ids.size)
        # statistics over every admission (a recomputed request looks up again, as in vLLM)
        self.num_query_tokens = 0
        self.num_hit_tokens = 0
        self.num_query_blocks = 0
        self.num_hit_blocks = 0
        self.hit_tokens = np.zeros(wl.num_requests, dtype=np.int64)  # (R,) at the latest admission
        self.on_change: Callable[[int], None] | None = None  # called with the evictable count
        self._keys: dict[int, list[int]] = {}  # request -> its per-block keys, while in flight
        self._system_keys: dict[int, list[int]] = {}  # pool system prompt -> its key chain
        self._num_system_keys = 0

    # ------------------------------------------------------------ keys
    def _num_keyed(self, r: int, num_blocks: int) -> int:
        """How many of r's first num_blocks blocks have per-block keys (the rest is r's run)."""
        if not self.use_runs:
            return num_blocks
        wl = self.wl
        if wl.prefix_len is None or wl.prefix_group[r] < 0:
            return 0
        return min(int(wl.prefix_len[r]) // self.block_size, num_blocks)

    def _content(self, r: int) -> int:
        return int(self.wl.content_id[r]) if self.wl.content_id is not None else r

    def keys(self, r: int, num_blocks: int) -> list[int]:
        """Per-block keys of r's first num_blocks prompt blocks (memoised while r is in flight: a queue
        head that does not fit yet is looked up again every tick)."""
        have = self._keys.get(r)
        if have is None or len(have) < num_blocks:
            full = int(self.wl.prompt_tokens[r]) // self.block_size
            have = block_keys(self.wl, r, max(full, num_blocks), self.block_size, self._system_chain)
            self._keys[r] = have
        return have[:num_blocks]

    def _system_chain(self, group: int, num_blocks: int) -> list[int]:
        """Pool system prompts are shared by many requests: their key chains are memoised (bounded)."""
        have = self._system_keys.get(group)
        if have is None or len(have) < num_blocks:
            have = system_prompt_keys(group, num_blocks)
            if self._num_system_keys + len(have) <= MAX_MEMO_KEYS:
                self._num_system_keys += len(have) - len(self._system_keys.get(group, ()))
                self._system_keys[group] = have
        return have[:num_blocks]

    def forget(self, r: int) -> None:
        self._keys.pop(r, None)

    @property
    def num_evictable(self) -> int:
        return self._num_evictable

    def holds(self, r: int) -> bool:
        return r in self.refs or r in self.run_refs

    # ------------------------------------------------------------ lookups
    def lookup(self, r: int, prompt_tokens: int) -> tuple[tuple[list, int, int], int, int]:
        """(handle, hit blocks, evictable among them) for r's prompt, without side effects. At least
        one prompt token is always computed (the last block is recomputed when all are cached)."""
        cap = (prompt_tokens - 1) // self.block_size
        keyed = self._num_keyed(r, cap)
        keys = self.keys(r, keyed) if keyed else []
        found = list(map(self.ref.get, keys))  # C-level; a miss ends the chain
        hit = found.index(None) if None in found else len(found)
        evictable = hit - sum(map((0).__lt__, found[:hit]))
        run_hit = 0
        if hit == keyed and cap > keyed and self.use_runs:  # r's own run, if its system prompt all hit
            run_hit = min(self.run_len.get(self._content(r), 0), cap - keyed)
            evictable += run_hit  # only r uses its run and r is not running: it is evictable
        return (keys, cap, run_hit), hit + run_hit, evictable

    def admit(self, r: int, handle: tuple[list, int, int], hit: int, prompt_tokens: int) -> int:
        """A request is admitted with its first `hit` blocks cached: count the lookup (statistics
        count admissions, not lookups of a queue head that then did not fit) and reference them.
        Returns how many of them were evictable (they stop being free)."""
        keys, cap, run_hit = handle
        self.num_query_tokens += prompt_tokens
        self.num_hit_tokens += hit * self.block_size
        self.num_query_blocks += cap
        self.num_hit_blocks += hit
        self.hit_tokens[r] = hit * self.block_size
        took = self.acquire(r, keys[: hit - run_hit]) if hit > run_hit else 0
        if run_hit:
            cid = self._content(r)
            extra = self.run_len[cid] - run_hit  # blocks past the hit (the recomputed last one): dropped
            self.ref[("run", cid)] = 1  # its queue slot turns stale
            self.run_len[cid] = run_hit
            self.run_refs[r] = run_hit
            self._num_evictable -= run_hit + extra
            self.num_evicted += extra
            took += run_hit
            if self.on_change:
                self.on_change(self._num_evictable)
        return took

    def trim(self, num_free: int) -> None:
        """Allocation left `num_free` blocks free: evict until the evictable blocks fit in them."""
        excess = self._num_evictable - num_free
        if excess > 0:
            self.evict(excess)

    def acquire(self, r: int, keys: list[int]) -> int:
        """Reference cached per-block entries for r; returns how many were evictable."""
        ref = self.ref
        counts = list(map(ref.__getitem__, keys))
        ref.update(zip(keys, [c + 1 if c > 0 else 1 for c in counts]))  # an evictable entry's queue slot turns stale
        took = len(counts) - sum(map((0).__lt__, counts))
        self._num_evictable -= took
        self.num_dup_refs += len(keys) - took
        self.refs.setdefault(r, []).extend(keys)
        if took and self.on_change:
            self.on_change(self._num_evictable)
        return took

    def register(self, r: int, keys: list[int]) -> None:
        """r's computed blocks with these keys become cache entries (r keeps referencing them).
        A key already cached (computed concurrently by another request) stays r's private block."""
        ref = self.ref
        new = list(filterfalse(ref.__contains__, keys))
        if new:
            ref.update(dict.fromkeys(new, 1))
            self.refs.setdefault(r, []).extend(new)

    def register_prompt(self, r: int, prompt_tokens: int) -> None:
        """r's prefill completed: its full prompt blocks after the ones it already references."""
        n_full = prompt_tokens // self.block_size
        keyed = self._num_keyed(r, n_full)
        have = len(self.refs.get(r, ()))
        if keyed > have:
            self.register(r, self.keys(r, keyed)[have:])
        if n_full > keyed and self.use_runs:
            cid = self._content(r)
            old = self.run_len.get(cid, 0)
            if old and r not in self.run_refs:  # an older evictable copy of this content: r's replaces it
                self._num_evictable -= old
                self.num_evicted += old
                if self.on_change:
                    self.on_change(self._num_evictable)
            self.ref[("run", cid)] = 1
            self.run_len[cid] = n_full - keyed
            self.run_refs[r] = n_full - keyed

    def release(self, r: int) -> tuple[int, int]:
        """Drop r's references: (blocks r referenced, blocks that became evictable). Tail blocks are
        queued first so they are evicted before the shared head (vLLM frees in reverse order)."""
        keys = self.refs.pop(r, None) or []
        run = self.run_refs.pop(r, 0)
        if not keys and not run:
            return 0, 0
        ref = self.ref
        g = self._group
        tag = -(g + 1)
        zero: list = []
        if keys:
            counts = list(map(ref.__getitem__, keys))
            if max(counts) == 1:  # the common case: r was the only user of every block
                ref.update(dict.fromkeys(keys, tag))
                zero = keys[::-1]
            else:  # some blocks stay referenced by other requests
                ref.update(zip(keys, [c - 1 if c > 1 else tag for c in counts]))
                zero = list(compress(reversed(keys), map((1).__eq__, reversed(counts))))
                self.num_dup_refs -= len(keys) - len(zero)
        cid = None
        if run:
            cid = self._content(r)
            ref[("run", cid)] = tag
        if zero or run:
            self._group += 1
            self._queue.append((g, zero, cid))
            self._num_queued += len(zero) + (cid is not None)
            self._num_evictable += len(zero) + run
            if self._num_queued > 2 * len(self.ref) + 4096:
                self._compact()
            if self.on_change:
                self.on_change(self._num_evictable)
        return len(keys) + run, len(zero) + run

    def evict(self, count: int) -> None:
        """Drop the `count` least recently released evictable blocks."""
        ref, queue = self.ref, self._queue
        left = count
        while left:
            g, keys, cid = queue[0]
            tag = -(g + 1)
            if cid is not None:  # the group's run goes first (it is the tail of that request's prompt)
                if ref.get(("run", cid)) == tag:
                    m = self.run_len[cid]
                    take = min(m, left)
                    left -= take
                    if take == m:
                        del ref[("run", cid)], self.run_len[cid]
                    else:
                        self.run_len[cid] = m - take
                        break
                queue[0] = (g, keys, None)
                self._num_queued -= 1
                if not left:
                    if not keys:
                        queue.popleft()
                    break
            i, n = self._head, len(keys)
            while i < n and left:  # a slice at a time; stale entries (re-acquired or re-released) are skipped
                part = keys[i : i + left]
                valid = list(compress(part, map(eq, repeat(tag), map(ref.get, part))))  # eq: ref.get may be None
                i += len(part)
                deque(map(ref.__delitem__, valid), maxlen=0)
                left -= len(valid)
            self._num_queued -= i - self._head
            if i == n:
                queue.popleft()
                self._head = 0
            else:
                self._head = i
        self.num_evicted += count
        self._num_evictable -= count
        if count and self.on_change:
            self.on_change(self._num_evictable)

    def _live(self, first: bool, g: int, keys: list) -> list:
        return [k for k in (keys[self._head :] if first else keys) if self.ref.get(k) == -(g + 1)]

    def _compact(self) -> None:
        """Drop stale queue entries (re-acquired or re-released keys): memory stays O(entries)."""
        out: deque = deque()
        for n, (g, keys, cid) in enumerate(self._queue):
            live = self._live(n == 0, g, keys)
            run = cid if cid is not None and self.ref.get(("run", cid)) == -(g + 1) else None
            if live or run is not None:
                out.append((g, live, run))
        self._queue, self._head = out, 0
        self._num_queued = sum(len(k) + (c is not None) for _, k, c in out)

    def lru_order(self) -> list:
        """Evictable entries, least recently released first: keys, and ("run", content, blocks)."""
        out: list = []
        for n, (g, keys, cid) in enumerate(self._queue):
            if cid is not None and self.ref.get(("run", cid)) == -(g + 1):
                out.append(("run", cid, self.run_len[cid]))
            out += self._live(n == 0, g, keys)
        return out

    def check(self) -> None:
        order = self.lru_order()
        zero_keys = {k for k, c in self.ref.items() if c < 0 and not isinstance(k, tuple)}
        zero_runs = {k[1] for k, c in self.ref.items() if c < 0 and isinstance(k, tuple)}
        q_keys = [k for k in order if not isinstance(k, tuple)]
        q_runs = [k[1] for k in order if isinstance(k, tuple)]
        blocks = len(zero_keys) + sum(self.run_len[c] for c in zero_runs)
        if (set(q_keys) != zero_keys or len(q_keys) != len(zero_keys) or set(q_runs) != zero_runs
                or len(q_runs) != len(zero_runs) or blocks != self._num_evictable):  # fmt: skip
            raise RuntimeError("prefix cache: the LRU must hold exactly the unreferenced entries, once each")
        if set(self.run_len) != {k[1] for k in self.ref if isinstance(k, tuple)} or min(self.run_len.values(), default=1) < 1:
            raise RuntimeError("prefix cache: run entries and run lengths disagree")
        for r, m in self.run_refs.items():
            if self.ref.get(("run", self._content(r))) != 1 or self.run_len[self._content(r)] != m:
                raise RuntimeError("prefix cache: a request's run is not referenced by it alone")
        total = sum(len(v) for v in self.refs.values())
        live = [c for k, c in self.ref.items() if c > 0 and not isinstance(k, tuple)]
        if total != sum(live) or self.num_dup_refs != total - len(live):
            raise RuntimeError("prefix cache: reference counts disagree with the requests' references")

    @property
    def num_entries_blocks(self) -> int:
        """Blocks the cache's entries occupy (referenced or evictable)."""
        return sum(1 for k in self.ref if not isinstance(k, tuple)) + sum(self.run_len.values())


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
        self.prefix.trim(value)  # when allocation took every truly free block: evict the least recently used

    # ------------------------------------------------------------ prefix hooks
    def lookup(self, r: int, prompt_tokens: int):
        """(handle, hit blocks, evictable among them): PrefixCache.lookup."""
        return self.prefix.lookup(r, prompt_tokens)

    def acquire(self, r: int, handle, hit: int, prompt_tokens: int) -> None:
        """On admission: r's block table starts with its first `hit` cached blocks (statistics count
        admissions only, not lookups of a request that then did not fit)."""
        took = self.prefix.admit(r, handle, hit, prompt_tokens)
        if hit:
            self.held[r] += hit
            self.num_free = self._num_free - took

    def register(self, done_prefill: IntArray, prompt_tokens: IntArray) -> None:
        """Requests whose prefill just completed publish their full prompt blocks."""
        for r, p in zip(done_prefill.tolist(), prompt_tokens.tolist()):
            self.prefix.register_prompt(r, p)

    # ------------------------------------------------------------ BlockManager overrides
    def free(self, req_idx: IntArray) -> None:
        ids = np.atleast_1d(req_idx)
        freed = int(self.held[ids].sum())
        back = 0
        pc = self.prefix
        for r in ids.tolist():
            pc.forget(r)  # finished, or pre-empted (keys are recomputed if it comes back)
            if pc.holds(r):
                referenced, evictable = pc.release(r)
                back += referenced - evictable  # still referenced by others: not freed
        self.held[ids] = 0
        self.num_free = self._num_free + freed - back

    def swap_out(self, req: int) -> int:
        """The swapped copy is private; cached blocks on the GPU lose one reference."""
        n = int(self.held[req])
        back = 0
        if self.prefix.holds(req):
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
        # bounded state: every entry occupies a block; the queue's stale entries are compacted away
        if pc.num_entries_blocks > self.num_blocks or pc._num_queued > 2 * len(pc.ref) + 4096 + self.num_blocks:
            raise RuntimeError(f"prefix cache state unbounded: {len(pc.ref)} entries, {pc._num_queued} queued")
        physical = int(self.held.sum()) - pc.num_dup_refs
        if self._num_free < pc.num_evictable or self._num_free + physical != self.num_blocks:
            raise RuntimeError(
                f"GPU blocks not conserved: free {self._num_free} (evictable {pc.num_evictable}) + in use {physical} "
                f"!= {self.num_blocks}"
            )
        if self.num_host_free < 0 or self.num_host_free + int(self.host_held.sum()) != self.num_host_blocks:
            raise RuntimeError("host swap blocks not conserved")
