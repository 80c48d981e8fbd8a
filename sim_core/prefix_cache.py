"""Automatic prefix caching (vLLM V1 automatic prefix caching, SGLang RadixAttention).

Full prompt blocks are cached as a prompt's prefill computes them (after each tick, `cache_prefilled`: a
request admitted in a later tick finds the blocks of a prompt still being prefilled), a finished session turn's full
reply blocks when it finishes (`cache_reply`: the next turn's prompt holds the reply, as vLLM V1 and
SGLang find it; replies nobody shares stay truly free), and a request pre-empted by recompute leaves
every full block of the KV it had, prompt and output (`preempt`: vLLM V1 hashed each as it computed
it), for its re-admission to look up with its prompt and emitted tokens. A block's key is a hash of
(its parent block's key, the block's identity): here the workload's prefix identity and position (a system prompt, a
session's content, or a trace's hash id), chained so equal keys mean equal prefixes. When a request
finishes or is pre-empted, its cached blocks keep their content with reference count 0 and become
evictable; allocation takes truly free blocks first and then evicts the least recently used
evictable block. A new request reuses its longest chain of cached blocks: those tokens are not
recomputed, though attention still reads them.

Accounting beside the count-based BlockManager: a request's `held[r]` counts every block in its
block table, cached ones included, so the scheduler's arithmetic is unchanged. A cached block
referenced by k requests is counted k times in `held` but exists once, and an evictable block is
free as far as the scheduler is concerned (allocating it evicts it). So

    num_free + held.sum() − (refs − referenced entries) == num_blocks,   evictable ⊆ free.

Every operation costs at most O(blocks of the request it concerns) (C-level dict operations and a
queue of release groups for the LRU, see PrefixCache), never a scan over past requests; the state
is bounded by the KV blocks (checked by `check_invariants`).

Also a registration detail: blocks that another request cached while this one was prefilling are
adopted (this request's own copies are freed), so a request always references a prefix of every
chain it uses.
"""

from __future__ import annotations

import dataclasses
import heapq
from array import array
from collections import deque
from itertools import compress, repeat
from operator import eq

import numpy as np

from sim_core.kvcache import BlockManager
from sim_core.types import IntArray
from sim_core.workload import Workload

_SYSTEM, _CONTENT, _TRACE = 1, 2, 3  # what a block's content belongs to
MAX_MEMO_KEYS = 1_000_000  # memoised system-prompt keys (~100 MB at most with their lists)
MAX_CONTENT_MEMO_KEYS = 1 << 17  # memoised content keys per prefix cache (ContentChains: ~5.8 MB at ~44 bytes a key)
_NO_CHAIN = (-1, 0)  # chain_refs' default: no system prompt referenced
MAX_DEFERRED_BLOCKS = 512  # LRU evictions counted but not yet dropped from the queue (see PrefixCache.evict)
# `_settle` drops up to this many per-block entries in a plain loop: a slice's C-level pipeline (slice, maps, compress,
# list, deque) costs ~5k instructions to set up, and with sessions most settles drop a tick's few evicted blocks from
# groups whose entries the next turn re-acquired (stale), walked a few at a time (vLLM V1 sessions: ~6 slices a settle)
SETTLE_LOOP_BLOCKS = 32


def _all_distinct(ids: IntArray) -> bool:
    """No id repeats. (A sort and a neighbour compare: np.unique's hash table took ~0.1 s per 200k ids, once per
    replica of a deployment: 6 s of a 64-replica link before its run budget could stop it.)"""
    ordered = np.sort(ids)
    return not bool((ordered[1:] == ordered[:-1]).any())


def system_prompt_keys(group: int, num_blocks: int) -> list[int]:
    """The key chain of the first num_blocks blocks of pool system prompt `group` (as block_keys)."""
    h, keys = 0, []
    for b in range(num_blocks):
        h = hash((h, _SYSTEM, group, b))
        keys.append(h)
    return keys


def system_prompt_blocks(wl: Workload, r: int, num_blocks: int, block_size: int) -> int:
    """Of request r's first `num_blocks` full prompt blocks, those ending inside its pool system prompt (their
    keys are the system prompt's chain, shared by every request of that prompt; `block_keys`)."""
    if wl.prefix_len is None or wl.prefix_group[r] < 0:
        return 0
    return min(int(wl.prefix_len[r]) // block_size, num_blocks)


def block_keys(wl: Workload, r: int, num_blocks: int, block_size: int, system_chain=None,
               content_chain=None) -> list[int]:
    """Keys of request r's first `num_blocks` full prompt blocks: key_b = hash(parent key, identity_b).

    A block's identity is what its last token belongs to (a pool system prompt, the request's or
    session's own content, or a trace hash block) and its position; blocks past the prompt's full ones hold
    output tokens (a pre-empted request's, a session turn's reply): its own content. System-prompt and trace blocks
    chain on the previous block's key. A content block's parent is the key of the last system-prompt
    block: its content id and position fix every token after it, so chaining inside the content would
    add nothing but a Python-level loop (these keys are made with C-level map()). Python's hash of a
    tuple of ints is deterministic (no per-process salt) and 64-bit; an int's own hash is itself except
    hash(-1) == -2 and modulo 2^61 - 1 (so identities avoid -1 and trace ids stay below 2^61 - 1).
    `system_chain` and `content_chain` memoise the two parts (SystemChains, ContentChains; None: hashed here).
    """
    keys: list[int] = []
    h = 0
    if wl.block_hash_ids is not None:
        ids = wl.block_hash_ids[r].tolist()
        hbt = wl.hash_block_tokens
        in_prompt = int(wl.prompt_tokens[r]) // block_size
        for b in range(num_blocks):
            i = ((b + 1) * block_size - 1) // hbt
            # (past its hash ids, the request's own content: -2 - r, never -1 - r, since hash(-1) == hash(-2) in
            # CPython and requests 0 and 1 shared their unhashed blocks: a false prefix hit)
            h = hash((h, _TRACE, ids[i], b) if i < len(ids) and b < in_prompt else (h, _CONTENT, -2 - r, b))
            keys.append(h)
        return keys
    content = int(wl.content_id[r]) if wl.content_id is not None else r
    num_system = system_prompt_blocks(wl, r, num_blocks, block_size)
    if num_system:
        group = int(wl.prefix_group[r])
        keys = list(system_chain(group, num_system) if system_chain is not None else system_prompt_keys(group, num_system))
        h = keys[-1] if keys else 0
    if num_blocks > num_system:
        keys += (content_chain or content_keys)(h, content, num_system, num_blocks)
    return keys


def content_keys(parent: int, content: int, first: int, stop: int) -> list[int]:
    """The keys of content `content`'s blocks first..stop-1 under `parent` (the key of the last system-prompt block
    before them, 0 for none): `block_keys`'s content blocks."""
    return list(map(hash, zip(repeat(parent), repeat(_CONTENT), repeat(content), range(first, stop))))


class SystemChains:
    """`system_prompt_keys`, memoised per pool system prompt (bounded by MAX_MEMO_KEYS keys): a pool system prompt
    is shared by many requests, so its chain is hashed once, not per request. Called as `block_keys`'s
    `system_chain` by the prefix cache and by the cache-aware router's tree."""

    __slots__ = ("_chains", "_num_keys")

    def __init__(self):
        self._chains: dict[int, list[int]] = {}
        self._num_keys = 0

    def __call__(self, group: int, num_blocks: int) -> list[int]:
        have = self._chains.get(group)
        if have is None or len(have) < num_blocks:
            have = system_prompt_keys(group, num_blocks)
            if self._num_keys + len(have) <= MAX_MEMO_KEYS:
                self._num_keys += len(have) - len(self._chains.get(group, ()))
                self._chains[group] = have
        return have[:num_blocks]


class ContentChains:
    """`content_keys`, memoised per content id, as `block_keys`'s `content_chain` (the per-block representation's
    keys): a session's turns share a content id and each turn's prompt holds the turn before's prompt and reply, so
    without it every turn hashed its whole history again, at its lookup and again at its reply (vLLM V1 sessions:
    60,876 block keys hashed for 512 turns). An entry is (parent, first block, keys of blocks first, first + 1, ...),
    extended when a longer prompt or reply asks; a request of the same content under another parent (system prompt)
    or first block replaces it, so a call returns exactly `content_keys`' list. Bounded: at most `max_keys` keys in
    all (MAX_CONTENT_MEMO_KEYS: ~44 bytes a key, its list slot and its int), past which the least recently extended
    entries go (their keys are hashed again if asked). One per PrefixCache (no module-level state). The list
    returned may be the memo's own: callers copy it (block_keys extends its own list with it)."""

    __slots__ = ("_entries", "_num_keys", "max_keys")

    def __init__(self, max_keys: int = 0):
        self._entries: dict[int, tuple[int, int, list[int]]] = {}  # content -> (parent, first, keys); oldest first
        self._num_keys = 0
        self.max_keys = max_keys or MAX_CONTENT_MEMO_KEYS

    @property
    def num_keys(self) -> int:
        """Keys memoised now (at most max_keys, unless one content alone asked for more)."""
        return self._num_keys

    def __call__(self, parent: int, content: int, first: int, stop: int) -> list[int]:
        entries = self._entries
        entry = entries.get(content)
        if entry is not None and entry[0] == parent and entry[1] == first:
            keys = entry[2]
            have = first + len(keys)
            if stop <= have:  # (the common case: a turn's lookup after the turn before's reply, a reply after its lookup)
                return keys if stop == have else keys[: stop - first]
            keys += content_keys(parent, content, have, stop)
            del entries[content]  # (re-inserted below: the most recently extended entry goes last)
            self._num_keys += stop - have
        else:
            keys = content_keys(parent, content, first, stop)
            if entry is not None:
                del entries[content]
                self._num_keys -= len(entry[2])
            entry = (parent, first, keys)
            self._num_keys += len(keys)
        entries[content] = entry
        while self._num_keys > self.max_keys and len(entries) > 1:  # the oldest go (never the one just asked for)
            self._num_keys -= len(entries.pop(next(iter(entries)))[2])
        return keys


class _Chain:
    """One pool system prompt's cached blocks 0..cached-1. Requests reference prefixes [0, L) of it,
    so reference counts fall along the chain: blocks [top, cached) are the evictable ones (top = the
    longest referenced prefix), released tail first. `items` splits them by release group, oldest
    (the chain's tail) first: item k covers [lo_k, lo_{k-1}) with lo_{-1} = cached."""

    __slots__ = ("cached", "items", "levels", "top")

    def __init__(self):
        self.cached = 0
        self.top = 0
        self.levels: dict[int, int] = {}  # referenced prefix length -> requests referencing it
        self.items: deque[list[int]] = deque()  # [release group, lo], oldest first

    def raise_top(self, level: int) -> int:
        """Blocks [top, level) become referenced; returns how many left the evictable set."""
        if level <= self.top:
            return 0
        items = self.items
        while items and items[-1][1] < level:  # the newest items hold the lowest blocks
            hi = items[-2][1] if len(items) > 1 else self.cached
            if hi <= level:
                items.pop()
            else:
                items[-1][1] = level
                break
        took = level - self.top
        self.top = level
        return took


class PrefixCache:
    """Keys, reference counts and the LRU of evictable blocks. Knows nothing of free-block counts.

    The LRU is a queue of release groups (what one request released, tail first); an evictable
    per-block entry's value in `ref` is -(g + 1) for the group g that released it last, so a key
    re-acquired or released again later leaves a stale queue slot behind, skipped on eviction and
    dropped by compaction. Eviction follows the exact least-recently-released order.

    NOTE: when no two requests share content other than pool system prompts (no sessions, no trace
    hash ids), the cache needs no per-block entries: a request's own content is one run entry
    (`run_state[content]`, counted like `ref`) holding its first `run_len` blocks (only that request can hit it, after a
    recompute pre-emption, and only after its whole system prompt hit), and each system prompt is one
    `_Chain` whose referenced blocks are always a prefix. Every admission, release and eviction is
    then O(1) instead of O(blocks); a test checks the results equal the per-block representation's.
    """

    def __init__(self, wl: Workload, block_size: int, policy: str = "lru", drop_last_hit: bool = False):
        self.wl = wl
        self.block_size = block_size
        if drop_last_hit:  # (an instance attribute: the plain lookup, every admission's, stays one call)
            self.lookup = self._lookup_without_last_block
        # LFU (SGLang's LFUStrategy: (hit_count, last_access_time)): an evictable per-block entry is
        # heaped under (uses, release group, position tail first); uses = admissions that referenced
        # it. A parent block has at least its child's uses and was released no earlier, so the heap
        # still evicts a chain's tail before its head, as a radix tree evicts leaves first.
        self.lfu = policy == "lfu"
        self.uses: dict[int, int] = {}  # key -> uses (LFU only)
        self._heap: list[tuple[int, int, int, int]] = []  # (uses, release group, position, key), LFU only
        # key -> reference count (> 0), or -(g + 1) for an evictable entry queued under release group g
        self.ref: dict = {}
        self.run_len: dict[int, int] = {}  # content id -> blocks its run holds (run entries only)
        self.run_state: dict[int, int] = {}  # content id -> 1 (referenced) or -(g + 1), as `ref` for a run
        self.chains: dict[int, _Chain] = {}  # pool system prompt -> its cached chain
        self.refs: dict[int, list] = {}  # request -> per-block keys it references, in block order
        self.run_refs: dict[int, int] = {}  # request -> blocks of its run it references
        self.chain_refs: dict[int, tuple[int, int]] = {}  # request -> (system prompt, prefix length referenced)
        self.num_dup_refs = 0  # Σ over referenced blocks of (count − 1)
        self._num_evicted = 0  # evictions settled (or LFU); num_evicted adds the deferred debt
        self._num_evictable = 0
        # (release group, per-block keys tail first, run content or None, chain or None), oldest first
        self._queue: deque[tuple[int, list, int | None, int | None]] = deque()
        self._head = 0  # keys of the oldest group already consumed
        self._num_queued = 0  # queue slots, stale ones included (bounded by compaction)
        self._debt = 0  # evictions counted but not yet dropped from the queue (LRU, see evict)
        self._group = 0
        ids = wl.content_id
        # Sessions: turns share a content id, so a later turn's prompt holds an earlier turn's reply
        shared = wl.block_hash_ids is None and ids is not None and not _all_distinct(ids)
        # (An EAGLE/MTP head drops a hit's last block, `_lookup_without_last_block`: per-block entries keep it cached, as
        # vLLM does, where a run holds no block past its hit, so a re-admission's run would count it evicted.)
        self.use_runs = not self.lfu and wl.block_hash_ids is None and not shared and not drop_last_hit
        self.bind_representation()
        # A finished request's full reply blocks are cached where a later request can find them (sessions; see
        # cache_reply): elsewhere no request ever looks them up, so they stay truly free as before.
        self.cache_replies = shared
        # Python lists: per-request lookups here run once per admission, where NumPy scalars are slow
        R = wl.num_requests
        self._content_of = ids.tolist() if ids is not None else range(R)
        self._prompt_of = wl.prompt_tokens.tolist()  # (each prefill chunk's registration reads its prompt)
        self._group_of = wl.prefix_group.tolist() if wl.prefix_len is not None else None
        # blocks ending inside each request's pool system prompt (0: none)
        self._sys_blocks = (np.where(wl.prefix_group >= 0, wl.prefix_len // block_size, 0).tolist()
                            if wl.prefix_len is not None else [0] * R)  # fmt: skip
        # The hit rate's statistics count first admissions; a request re-admitted after a recompute pre-emption finds
        # what is left of its own KV and is counted apart, as vLLM V1 does (PrefixCacheStats.preempted_*, PR #25787:
        # re-found KV made the hit rate of a run without shared prefixes 30 %).
        self.num_query_tokens = 0
        self.num_query_blocks = 0
        self.num_hit_blocks = 0  # (hit tokens: num_hit_tokens, a whole number of blocks)
        self.num_rehit_blocks = 0  # found by re-admissions (prefill tokens saved: num_saved_tokens)
        self._hit_tokens = [0] * wl.num_requests  # per request, at its first admission
        self.dropped: dict[int, int] = {}  # request pre-empted by recompute -> KV tokens it dropped, until re-admitted
        self._num_samples = wl.num_samples
        # Per-tick record of the evictable count (the KV panel's cached-but-free line): tick and count
        # at each change; the tick is the recorder's count plus ticks run but not yet recorded.
        self.marks = array("q")  # flat int64: tick, count, tick, count, ... (ticks non-decreasing; read without a copy)
        self.recorder = None  # has num_ticks (the engine's Recorder); None: no marks
        self.tick_offset = 0
        self._keys: dict[int, list[int]] = {}  # request -> its per-block keys, while in flight
        self._system_chain = SystemChains()  # pool system prompt -> its key chain (memoised, bounded)
        self._content_chain = ContentChains()  # content id -> its content blocks' keys (memoised, bounded)
        self._own_identity = False  # bind_slot copied the identity arrays (a cluster replica's cache)

    def bind_representation(self) -> None:
        """With runs and chains (`use_runs`), release, finish and register_prompt are their runs forms, bound as instance
        attributes (as lookup is for an EAGLE head): one call per completion and per prefill chunk, without the
        representation's tests. Called by __init__, and again by whoever changes use_runs (a test runs the per-block
        representation where runs would be used, to compare the two)."""
        for name in ("release", "finish", "register_prompt"):
            vars(self).pop(name, None)
        if self.use_runs:
            self.release = self.finish = self._release_runs
            self.register_prompt = self._register_runs

    # ------------------------------------------------------------ keys
    def _content(self, r: int) -> int:
        return self._content_of[r]

    def keys(self, r: int, num_blocks: int) -> list[int]:
        """Per-block keys of r's first num_blocks blocks, prompt then output (memoised while r is in flight: a queue
        head that does not fit yet is looked up again every tick)."""
        return self._keys_upto(r, num_blocks)[:num_blocks]

    def _keys_upto(self, r: int, num_blocks: int) -> list[int]:
        """r's memoised per-block keys, at least its first num_blocks (the memo's own list: callers slice what they
        need once, `keys`' copy and then a slice of it cost two)."""
        have = self._keys.get(r)
        if have is None or len(have) < num_blocks:
            full = self._prompt_of[r] // self.block_size
            have = block_keys(self.wl, r, max(full, num_blocks), self.block_size, self._system_chain, self._content_chain)
            self._keys[r] = have
        return have

    # ------------------------------------------------------------ cluster replicas (sim_core/cluster)
    def bind_slot(self, slot: int, source: Workload, r: int) -> None:
        """A replica's slot `slot` holds request r of the deployment's workload `source` (the router adds
        requests slot by slot): copy r's prefix identity (prompt length, system prompt, content, trace hash
        ids) into the slot. The first call gives this cache its own copy of the identity arrays."""
        if not self._own_identity:
            wl = self.wl
            self.wl = dataclasses.replace(
                wl, prompt_tokens=wl.prompt_tokens.copy(),
                prefix_group=None if wl.prefix_group is None else wl.prefix_group.copy(),
                prefix_len=None if wl.prefix_len is None else wl.prefix_len.copy(),
                content_id=None if wl.content_id is None else wl.content_id.copy(),
                block_hash_ids=None if wl.block_hash_ids is None else list(wl.block_hash_ids),
            )  # fmt: skip
            self._content_of = list(self._content_of)
            self._own_identity = True
        wl = self.wl
        wl.prompt_tokens[slot] = source.prompt_tokens[r]
        self._prompt_of[slot] = int(source.prompt_tokens[r])
        if wl.content_id is not None:
            wl.content_id[slot] = source.content_id[r]
            self._content_of[slot] = int(source.content_id[r])
        else:  # each request is its own content (unique within this cache, like the slot)
            self._content_of[slot] = r
        if wl.prefix_len is not None:
            wl.prefix_group[slot], wl.prefix_len[slot] = source.prefix_group[r], source.prefix_len[r]
            self._group_of[slot] = int(source.prefix_group[r])
            self._sys_blocks[slot] = int(source.prefix_len[r]) // self.block_size if source.prefix_group[r] >= 0 else 0
        if wl.block_hash_ids is not None:
            wl.block_hash_ids[slot] = source.block_hash_ids[r]

    def cached_prefix_blocks(self, source: Workload, r: int) -> int:
        """How many leading full prompt blocks of request r of `source` this cache holds (referenced or
        evictable), without side effects: what a cache-aware router reads before it routes r."""
        cap = (int(source.prompt_tokens[r]) - 1) // self.block_size
        if cap <= 0:
            return 0
        self._settle()  # (evictions deferred by evict are dropped before the cache is read)
        if not self.use_runs:
            keys = block_keys(source, r, cap, self.block_size, self._system_chain)
            found = list(map(self.ref.get, keys))
            return found.index(None) if None in found else len(found)
        if source.prefix_len is None or source.prefix_group[r] < 0:
            return 0  # a request's own content is cached only after it ran (a pre-emption): never before routing
        ch = self.chains.get(int(source.prefix_group[r]))
        return min(ch.cached, int(source.prefix_len[r]) // self.block_size, cap) if ch is not None else 0

    @property
    def num_evictable(self) -> int:
        return self._num_evictable

    @property
    def hit_tokens(self) -> IntArray:
        """(R,) cached prompt tokens of each request at its first admission (0: none yet; vLLM's num_cached_tokens)."""
        return np.array(self._hit_tokens, dtype=np.int64)

    @property
    def num_hit_tokens(self) -> int:
        """Tokens first admissions found cached (the hit rate's numerator)."""
        return self.num_hit_blocks * self.block_size

    @property
    def num_saved_tokens(self) -> int:
        """Prefill tokens the cache spared: every admission's hits, re-admissions after a pre-emption included."""
        return (self.num_hit_blocks + self.num_rehit_blocks) * self.block_size

    @property
    def num_evicted(self) -> int:
        """Blocks evicted so far (those counted by trim/evict but not yet dropped from the LRU included)."""
        return self._num_evicted + self._debt

    def _changed(self) -> None:
        rec = self.recorder
        if rec is not None:  # (two appends: cheaper than extending by a tuple, ~65 vs ~130 ns)
            marks = self.marks
            marks.append(rec.num_ticks + self.tick_offset)
            marks.append(self._num_evictable)

    def _cacheable(self, r: int, tokens: int) -> int:
        """Of r's first `tokens` tokens, those whose full blocks are cached and looked up: all, prompt then output, with
        one sample; with n > 1 samples the prompt's only (each sample's output is its own, and a request here keeps
        one progress count for all of them; vLLM V1 runs n requests instead)."""
        if self._num_samples == 1:
            return tokens
        p = int(self.wl.prompt_tokens[r])
        return tokens if tokens < p else p

    # ------------------------------------------------------------ lookups
    def lookup(self, r: int, tokens: int):
        """(handle, hit blocks, evictable among them) for r's first `tokens` tokens (its prompt, and after a recompute
        pre-emption the tokens it emitted: vLLM V1's get_computed_blocks reads request.block_hashes up to
        num_tokens - 1), without side effects. At least one token is always computed (the last block is recomputed
        when all are cached). With n > 1 samples only the prompt's (`_cacheable`): a re-admission, which computes its
        output again, finds every full prompt block, as each of vLLM V1's n requests would (capped at its tokens - 1,
        the last prompt block stayed cached past the hit, which the runs representation does not keep: review 27e)."""
        cap = (tokens - 1) // self.block_size
        if self._num_samples > 1:
            p = self.wl.prompt_tokens.item(r)
            if tokens > p:
                cap = p // self.block_size
        if not self.use_runs:
            if self._debt:
                self._settle()
            keys = self.keys(r, cap)
            found = list(map(self.ref.get, keys))  # C-level; a miss ends the chain
            hit = found.index(None) if None in found else len(found)
            return (keys, cap, 0, 0), hit, hit - sum(map((0).__lt__, found[:hit]))
        n_sys = self._sys_blocks[r]  # (inline: this runs at every admission and every blocked queue head)
        if n_sys > cap:
            n_sys = cap
        # Deferred evictions (see evict) are dropped first only if they could touch what r reads:
        # its system prompt's evictable blocks or its own run (usually neither exists).
        hit = evictable = 0
        if n_sys:
            ch = self.chains.get(self._group_of[r])
            if ch is not None:
                if self._debt and ch.cached > ch.top:
                    self._settle()
                hit = ch.cached if ch.cached < n_sys else n_sys  # (a chain emptied by the settle keeps cached = top = 0)
                if hit > ch.top:
                    evictable = hit - ch.top
        run_hit = 0
        if hit == n_sys and cap > n_sys:  # r's own run, if its whole system prompt hit
            m = self.run_len.get(self._content_of[r], 0)
            if m:  # (usually none: only a pre-empted request finds its own run)
                if self._debt:
                    self._settle()
                    m = self.run_len.get(self._content_of[r], 0)
                run_hit = min(m, cap - n_sys)
                evictable += run_hit  # only r uses its run and r is not running: it is evictable
        return ((), cap, run_hit, hit), hit + run_hit, evictable

    def _lookup_without_last_block(self, r: int, tokens: int):
        """`lookup` for vLLM V1 with an EAGLE/MTP head: the last matched block of a hit is dropped, so the head gets the
        hidden states of its tokens (FullAttentionManager.find_longest_cache_hit: `if use_eagle and computed_blocks:
        pop()`; a draft model keeps the whole hit). The shorter hit is looked up again (a prefix of a hit is a hit);
        the handle keeps the first lookup's cap, which the statistics count as the blocks queried."""
        handle, hit, evictable = PrefixCache.lookup(self, r, tokens)
        if not hit:
            return handle, hit, evictable
        again, hit, evictable = PrefixCache.lookup(self, r, (hit - 1) * self.block_size + 1)
        return (again[0], handle[1], *again[2:]), hit, evictable

    def admit(self, r: int, handle, hit: int, tokens: int) -> int:
        """A request is admitted with its first `hit` blocks cached (`tokens` as looked up): count the lookup
        (statistics count admissions, not lookups of a queue head that then did not fit; a re-admission after a
        recompute pre-emption apart) and reference them. Returns how many of them were evictable (they stop being free)."""
        keys, cap, run_hit, sys_hit = handle
        if self.dropped and self.dropped.pop(r, None) is not None:
            self.num_rehit_blocks += hit
        else:
            self.num_query_tokens += tokens
            self.num_query_blocks += cap
            self.num_hit_blocks += hit
            self._hit_tokens[r] = hit * self.block_size
        if not self.use_runs:
            return self.acquire(r, keys[:hit]) if hit else 0  # (acquire settles first)
        took = 0
        if sys_hit:
            g = self._group_of[r]
            ch = self.chains[g]
            top = ch.top
            if sys_hit > top:  # it takes evictable blocks: deferred evictions (see evict) are dropped first
                if self._debt:
                    self._settle()
                took = ch.raise_top(sys_hit)
                self._num_evictable -= took
            # (else it only references blocks other requests hold: deferred evictions cannot touch them)
            self.num_dup_refs += top if top < sys_hit else sys_hit
            levels = ch.levels
            levels[sys_hit] = levels.get(sys_hit, 0) + 1
            self.chain_refs[r] = (g, sys_hit)
        if run_hit:
            if self._debt:
                self._settle()
            cid = self._content(r)
            extra = self.run_len[cid] - run_hit  # blocks past the hit (the recomputed last one): dropped
            self.run_state[cid] = 1  # its queue slot turns stale
            self.run_len[cid] = run_hit
            self.run_refs[r] = run_hit
            self._num_evictable -= run_hit + extra
            self._num_evicted += extra
            took += run_hit
        if took:
            self._changed()
        return took

    def trim(self, num_free: int) -> None:
        """Allocation left `num_free` blocks free: evict until the evictable blocks fit in them. Called
        at every allocation (every tick on the fast path, and when the cache is full it evicts at
        nearly every one), so `evict`'s LRU bookkeeping is inline here: the evicted count is the
        settled count plus the deferred debt (see num_evicted)."""
        excess = self._num_evictable - num_free
        if excess > 0:
            if self.lfu:
                self.evict(excess)
                return
            self._num_evictable = num_free
            debt = self._debt = self._debt + excess
            rec = self.recorder
            if rec is not None:  # (two appends: cheaper than extending by a tuple)
                marks = self.marks
                marks.append(rec.num_ticks + self.tick_offset)
                marks.append(num_free)
            if debt > MAX_DEFERRED_BLOCKS:  # dropped entries free their memory: the state stays O(blocks)
                self._settle()

    def trim_marked(self, marked: list[int]) -> None:
        """The trims of several ticks at once, with no other use of the cache between them (the fast path's
        all-decode ticks): `marked` holds tick, free blocks, tick, free blocks, ... for each tick whose
        allocation left fewer free blocks than there were evictable ones (each count below the one before),
        ticks as `trim` marks them (the recorder's count plus the offset). The same marks, counts and
        evictions as `trim` tick by tick: deferred evictions are dropped oldest first whenever they are,
        and LFU's heap pops the same entries in one call as in several."""
        last = marked[-1]
        excess = self._num_evictable - last
        self._num_evictable = last
        if self.recorder is not None:
            self.marks.fromlist(marked)  # (array.extend iterates a list generically: ~3x fromlist's time)
        self._drop(excess)

    def trim_ticks(self, tick: int, free_after: np.ndarray) -> None:
        """`trim` at each of a run of ticks tick, tick + 1, ... whose allocations left free_after[i] blocks free
        (non-increasing: ticks that only take blocks, like the fast path's all-decode stretches priced as arrays),
        in array operations: the same marks, counts and evictions as `trim(free_after[i])` tick by tick with
        tick_offset = tick + i. The evictable count only falls (to min(evictable, free_after[i])), so a tick
        trims exactly when its free count is below both the count before the run and the previous tick's."""
        E = self._num_evictable
        if not free_after.size or free_after[-1] >= E:
            return  # no tick leaves fewer free blocks than there are evictable ones
        if self.lfu:  # (eviction is immediate under LFU: tick by tick, where the ticks trim)
            prev = np.concatenate(([E], free_after[:-1]))
            for i in np.flatnonzero((free_after < E) & (free_after < prev)).tolist():
                self.tick_offset = tick + i
                self.trim(int(free_after[i]))
            return
        prev = np.empty_like(free_after)
        prev[0] = E
        prev[1:] = free_after[:-1]
        at = np.flatnonzero((free_after < E) & (free_after < prev))
        last = int(free_after[-1])
        self._num_evictable = last
        rec = self.recorder
        if rec is not None:
            pairs = np.empty((at.size, 2), dtype=np.int64)
            pairs[:, 0] = at + (rec.num_ticks + tick)
            pairs[:, 1] = free_after[at]
            self.marks.frombytes(pairs.tobytes())
        self._drop(E - last)  # (settled once for the run: dropping deferred evictions in one walk or several ends alike)

    def acquire(self, r: int, keys: list[int]) -> int:
        """Reference cached per-block entries for r; returns how many were evictable."""
        if self._debt:
            self._settle()
        ref = self.ref
        counts = list(map(ref.__getitem__, keys))
        ref.update(zip(keys, [c + 1 if c > 0 else 1 for c in counts]))  # an evictable entry's queue slot turns stale
        took = len(counts) - sum(map((0).__lt__, counts))
        self._num_evictable -= took
        self.num_dup_refs += len(keys) - took
        self.refs.setdefault(r, []).extend(keys)
        if self.lfu:
            self._count_uses(keys)
        if took:
            self._changed()
        return took

    def _count_uses(self, keys: list[int]) -> None:
        uses = self.uses
        uses.update(zip(keys, [u + 1 for u in map(uses.get, keys, repeat(0))]))

    def cache_prefilled(self, r: int, num_tokens: int) -> int:
        """After a tick in which r prefilled (a chunk, or the last one): r has KV for its first `num_tokens` positions,
        and the full blocks of its prompt among them become cache entries it references (register_prompt), so a
        request admitted in a later tick finds them; a request admitted in the same tick was looked up before. vLLM V1
        caches each full block of a chunk as it schedules the step that computes it
        (KVCacheManager.allocate_slots -> coordinator.cache_blocks(request, num_computed + num_new)), SGLang inserts a
        chunked request's computed tokens after each chunk (Scheduler.get_next_batch_to_run ->
        RadixCache.cache_unfinished_req): both find them from the next step on (vLLM V1 also in the same step, for a
        waiting request scheduled after the chunk; not modelled). Prompt blocks only: past the prompt (a recompute
        prefill's emitted tokens) `preempt` caches them. Returns the blocks freed by adoption, as register_prompt."""
        p = self._prompt_of[r]
        return self.register_prompt(r, num_tokens if num_tokens < p else p)

    def register_prompt(self, r: int, tokens: int) -> int:
        """r has KV for its first `tokens` positions (its prompt's computed so far after a tick, `cache_prefilled`;
        prompt and output when it is pre-empted, `preempt`): it references their full blocks. Blocks another request cached meanwhile are
        adopted (r's own copies are freed); the others become cache entries. Returns the blocks freed by adoption
        that were not evictable (the change in free blocks)."""
        if self.use_runs:
            return self._register_runs(r, tokens)
        if self._debt:
            self._settle()
        n_full = tokens // self.block_size
        have = len(self.refs.get(r, ()))
        return self._register_keys(r, self._keys_upto(r, n_full)[have:n_full]) if n_full > have else 0

    def _register_runs(self, r: int, tokens: int) -> int:
        """register_prompt with runs and chains (`use_runs`)."""
        n_full = tokens // self.block_size
        n_sys = self._sys_blocks[r]
        if n_sys > n_full:
            n_sys = n_full
        g, level = self.chain_refs.get(r, _NO_CHAIN)
        cid = self._content_of[r]
        # Deferred evictions (see evict) are dropped first only if they could touch what r registers: its system
        # prompt's evictable blocks when r reaches further into the chain, or an evictable run of its content (usually
        # neither: a prefill's later chunks extend the run it references)
        if self._debt and (self.run_state.get(cid, 1) < 0 or n_sys > level and (ch := self.chains.get(self._group_of[r]))
                           is not None and ch.cached > ch.top):  # fmt: skip
            self._settle()
        freed = 0
        if n_sys > level:
            g = self._group_of[r]
            ch = self.chains.get(g)
            if ch is None:
                ch = self.chains[g] = _Chain()
            upto = min(ch.cached, n_sys)  # blocks [level, upto) are cached already: adopt them
            if upto > level:
                freed = max(min(ch.top, upto) - level, 0)  # referenced by others: r's copies go free
                self.num_dup_refs += freed
                adopted = ch.raise_top(upto)
                if adopted:
                    self._num_evictable -= adopted
                    self._changed()  # (rare: another request cached this prompt while r prefilled)
            if n_sys > ch.cached:
                ch.cached = n_sys
                ch.raise_top(n_sys)
            if level:
                ch.levels[level] -= 1
                if not ch.levels[level]:
                    del ch.levels[level]
            ch.levels[n_sys] = ch.levels.get(n_sys, 0) + 1
            self.chain_refs[r] = (g, n_sys)
        have, n_run = self.run_refs.get(r, 0), n_full - n_sys  # (have 0: r references no run; a run holds blocks)
        if n_run > have:  # (never fewer: r may reference output blocks it found again)
            old = self.run_len.get(cid, 0)
            if old and not have:  # an older evictable copy of this content: r's replaces it
                # (r's copies of the blocks it computed again take their place, as per-block entries adopt them, and only
                # the older copy's blocks past r's are evicted: r swapped out mid-prefill and back in re-registers its
                # prompt over the run it left, and counting all of it evicted made prefix_blocks_evicted differ from the
                # per-block representation's, review 28b)
                self._num_evictable -= old
                self._num_evicted += max(old - n_run, 0)
                self._changed()
            self.run_state[cid] = 1
            self.run_len[cid] = self.run_refs[r] = n_run
        return freed

    def cache_reply(self, r: int, kv_tokens: int) -> int:
        """r finished with KV for its first `kv_tokens` positions (prompt + output - 1: its last token's KV is never
        written): its full blocks past the prompt's become cache entries as register_prompt's did, so its session's
        next turn (whose prompt is this prompt + reply + new text) finds the reply. vLLM V1 caches every full block up
        to request.num_tokens, decode blocks included (KVCacheManager.allocate_slots -> cache_blocks); SGLang's
        cache_finished_req inserts prompt + output into the radix tree. Only with `cache_replies` (sessions): a reply
        no later request shares would only turn truly free blocks into evictable ones (docs/prefix-caching.md, Replies).
        Returns the blocks freed by adoption (another turn cached them meanwhile), as register_prompt."""
        if not self.cache_replies:
            return 0
        n_full = kv_tokens // self.block_size
        have = len(self.refs.get(r, ()))
        # (have < the prompt's full blocks: r's prompt blocks are not referenced here, e.g. swapped in as a private copy;
        # more: a re-admission after a pre-emption found some of its reply's blocks)
        if n_full <= have or have < int(self.wl.prompt_tokens[r]) // self.block_size:
            return 0
        if self._debt:
            self._settle()
        return self._register_keys(r, self._keys_upto(r, n_full)[have:n_full])

    def finish(self, r: int, kv_tokens: int) -> int:
        """r finished (KV for `kv_tokens` positions): its reply's full blocks are cached (cache_reply), then its
        references dropped (release). Returns the change in free blocks to subtract, as release's count."""
        if self.cache_replies:
            freed = self.cache_reply(r, kv_tokens)
            return self.release(r) - freed
        return self.release(r)

    def preempt(self, r: int, kv_tokens: int) -> int:
        """r is pre-empted by recompute with KV for its first `kv_tokens` positions: every full block of them becomes a
        cache entry (register_prompt; with n > 1 samples its prompt's only, `_cacheable`), as vLLM V1 has them cached
        (KVCacheManager.allocate_slots caches each full block of request.all_token_ids as it is scheduled, and
        _preempt_request frees them tail first, hashes kept). Its references are dropped next (`release`), so they
        are evictable, and its re-admission's lookup (prompt and emitted tokens) finds what is left of them; the
        dropped count is kept until then. Returns the blocks freed by adoption, as register_prompt."""
        self.dropped[r] = kv_tokens
        return self.register_prompt(r, self._cacheable(r, kv_tokens))

    def _register_keys(self, r: int, keys: list[int]) -> int:
        ref = self.ref
        counts = list(map(ref.get, keys))
        if counts.count(None) != len(counts):  # some blocks were cached meanwhile: adopt them
            present = [k for k, c in zip(keys, counts) if c is not None]
            pc = [c for c in counts if c is not None]
            ref.update(zip(present, [c + 1 if c > 0 else 1 for c in pc]))
            adopted = len(pc) - sum(map((0).__lt__, pc))
            self._num_evictable -= adopted
            self.num_dup_refs += len(pc) - adopted
            if adopted:
                self._changed()
            freed = len(pc) - adopted
        else:
            freed = 0
        ref.update(dict.fromkeys(compress(keys, map(eq, counts, repeat(None))), 1))
        self.refs.setdefault(r, []).extend(keys)
        if self.lfu:
            self._count_uses(keys)
        return freed

    def release(self, r: int, forget: bool = True) -> int:
        """Drop r's references; returns how many of its cached blocks stay in use because other requests
        still reference them (the rest become evictable: free). Tail blocks are queued first so they are
        evicted before the shared head (vLLM frees in reverse order). `forget`: r finished or was
        pre-empted, so its memoised keys go too (recomputed if it comes back); a swapped-out request keeps them."""
        if not self.use_runs:
            return self._release_keys(r, forget)
        return self._release_runs(r)

    def _release_runs(self, r: int, forget=True) -> int:
        """release with runs and chains (LRU; `use_runs`), and with them `finish` too: the second argument, release's
        `forget` (swap_out passes it by name) or finish's `kv_tokens`, changes nothing here (no memoised keys, no replies
        cached)."""
        run = self.run_refs.pop(r, 0)
        g, level = self.chain_refs.pop(r, _NO_CHAIN)
        gen = self._group
        dropped, chain = 0, None  # (chain: g, when r's release lowers the chain's referenced prefix)
        if level:
            ch = self.chains[g]
            levels = ch.levels
            left = levels[level] - 1
            if left:  # (the common case: others reference the same prefix, so the top, at least that level, stays)
                levels[level] = left
                self.num_dup_refs -= level
            else:
                del levels[level]
                top = ch.top
                new_top = max(levels, default=0) if level == top else top  # (the longest referenced prefix)
                self.num_dup_refs -= new_top if new_top < level else level
                if new_top < top:
                    dropped = top - new_top
                    ch.items.append([gen, new_top])
                    ch.top = new_top
                    chain = g
        if run:
            cid = self._content_of[r]
            self.run_state[cid] = -(gen + 1)
        elif dropped:
            cid = None
        else:
            return level  # nothing became evictable
        became = run + dropped
        self._group = gen + 1
        self._queue.append((gen, (), cid, chain))
        queued = self._num_queued = self._num_queued + (cid is not None) + (chain is not None)
        self._num_evictable += became
        # (queued > 4096 first: the second test implies it, and it is the cheap one; the queue is seldom that long)
        if queued > 4096 and queued > 2 * (len(self.run_state) + len(self.chains)) + 4096:
            self._compact()
        rec = self.recorder
        if rec is not None:  # (_changed, inline: a completion's mark)
            marks = self.marks
            marks.append(rec.num_ticks + self.tick_offset)
            marks.append(self._num_evictable)
        return run + level - became

    def _release_keys(self, r: int, forget: bool) -> int:
        """release with per-block entries (no runs or chains: sessions, trace hash ids, or LFU)."""
        if forget and self._keys:
            self._keys.pop(r, None)
        keys = self.refs.pop(r, None)
        if not keys:
            return 0
        ref = self.ref
        gen = self._group
        tag = -(gen + 1)
        counts = list(map(ref.__getitem__, keys))
        if max(counts) == 1:  # the common case: r was the only user of every block
            ref.update(dict.fromkeys(keys, tag))
            zero = keys[::-1]  # per-block entries that became evictable, tail first
        else:  # some blocks stay referenced by other requests
            ref.update(zip(keys, [c - 1 if c > 1 else tag for c in counts]))
            zero = list(compress(reversed(keys), map((1).__eq__, reversed(counts))))
            self.num_dup_refs -= len(keys) - len(zero)
        became = len(zero)
        if became:
            self._group = gen + 1
            if self.lfu:
                heap, uses = self._heap, self.uses
                for i, k in enumerate(zero):
                    heapq.heappush(heap, (uses[k], gen, i, k))
                queued = self._num_queued = len(heap)
            else:
                self._queue.append((gen, zero, None, None))
                queued = self._num_queued = self._num_queued + became
            self._num_evictable += became
            if queued > 2 * len(ref) + 4096:
                self._compact()
            self._changed()
        return len(keys) - became

    def evict(self, count: int) -> None:
        """Drop the `count` least recently released evictable blocks (LFU: the least used ones).

        NOTE: under LRU the entries are dropped when the cache is next read (`_settle`), not now: a
        release only appends newer entries behind them, so the `count` oldest stay the same, and the
        few blocks that each tick's allocation evicts are dropped in one walk at the next lookup.
        The counts (free, evictable, evicted) change now."""
        if not count:
            return
        self._num_evictable -= count
        self._changed()
        self._drop(count)

    def _drop(self, count: int) -> None:
        """The `count` least recently released (LFU: least used) evictable blocks go, the counts already taken:
        LFU pops them now (a release may heap an entry below older ones); LRU defers them (see `evict`) and
        settles once the debt passes MAX_DEFERRED_BLOCKS (dropped entries free their memory: the state stays
        O(blocks)). `trim` inlines the LRU case: it runs at nearly every allocation."""
        if self.lfu:
            self._num_evicted += count
            self._evict_lfu(count)
        else:
            self._debt += count
            if self._debt > MAX_DEFERRED_BLOCKS:
                self._settle()

    def _settle(self) -> None:
        """Drop the evictions deferred by `evict`, oldest first (every read of the cache's entries calls
        this first)."""
        left = self._debt
        if not left:
            return
        self._debt = 0
        self._num_evicted += left
        ref, queue = self.ref, self._queue
        gen, keys, cid, chain = queue[0]
        if cid is not None and self._head == 0:  # the common case: part of the oldest request's own run
            m = self.run_len.get(cid, 0)
            if m > left and self.run_state.get(cid) == -(gen + 1):
                self.run_len[cid] = m - left
                return
        run_len, run_state = self.run_len, self.run_state
        queued = self._num_queued  # (a local in the loop: most groups are one run, a few bytecodes each)
        while left:
            gen, keys, cid, chain = queue[0]
            tag = -(gen + 1)
            if not keys and chain is None:  # only a run (with runs, what most groups are): the loop below, shortened
                if cid is not None:
                    if run_state.get(cid) == tag:
                        m = run_len[cid]
                        if m > left:
                            run_len[cid] = m - left
                            break
                        left -= m
                        del run_state[cid], run_len[cid]
                    queued -= 1
                queue.popleft()
                continue
            if cid is not None:  # the group's run goes first (it is the tail of that request's prompt)
                if run_state.get(cid) == tag:
                    m = run_len[cid]
                    take = min(m, left)
                    left -= take
                    if take < m:
                        run_len[cid] = m - take
                        break
                    del run_state[cid], run_len[cid]
                queue[0] = (gen, keys, None, chain)
                queued -= 1
                if not left:
                    break
            if chain is not None:  # then the system-prompt blocks this group released
                ch = self.chains.get(chain)
                if ch is not None and ch.items and ch.items[0][0] == gen:
                    lo = ch.items[0][1]
                    take = min(ch.cached - lo, left)
                    ch.cached -= take
                    left -= take
                    if ch.cached > lo:
                        break
                    ch.items.popleft()
                    if not ch.cached and not ch.levels:
                        del self.chains[chain]
                queue[0] = (gen, keys, None, None)
                queued -= 1
                if not left:
                    break
            i, n = self._head, len(keys)
            if left <= SETTLE_LOOP_BLOCKS:  # a few blocks (a tick's evictions): one by one, stale entries skipped
                get = ref.get
                while i < n and left:
                    k = keys[i]
                    i += 1
                    if get(k) == tag:
                        del ref[k]
                        left -= 1
            while i < n and left:  # a slice at a time; stale entries (re-acquired or re-released) are skipped
                part = keys[i : i + left]
                valid = list(compress(part, map(eq, repeat(tag), map(ref.get, part))))  # eq: ref.get may be None
                i += len(part)
                deque(map(ref.__delitem__, valid), maxlen=0)
                left -= len(valid)
            queued -= i - self._head
            if i == n:
                queue.popleft()
                self._head = 0
            else:
                self._head = i
        self._num_queued = queued
        if queue and not queue[0][1] and queue[0][2] is None and queue[0][3] is None:
            queue.popleft()  # a group emptied exactly
            self._head = 0

    def _evict_lfu(self, count: int) -> None:
        """Pop the heap until `count` live entries are gone (stale ones, re-acquired since, are skipped)."""
        ref, uses, heap = self.ref, self.uses, self._heap
        left = count
        while left:
            _, gen, _, k = heapq.heappop(heap)
            if ref.get(k) == -(gen + 1):
                del ref[k], uses[k]
                left -= 1
        self._num_queued = len(heap)

    def _live(self, first: bool, g: int, keys: list) -> list:
        return [k for k in (keys[self._head :] if first else keys) if self.ref.get(k) == -(g + 1)]

    def _chain_live(self, gen: int, chain: int | None) -> bool:
        ch = self.chains.get(chain) if chain is not None else None
        return ch is not None and any(item[0] == gen for item in ch.items)

    def _compact(self) -> None:
        """Drop stale queue slots (re-acquired or re-released entries): memory stays O(entries)."""
        self._settle()
        if self.lfu:
            self._heap = [e for e in self._heap if self.ref.get(e[3]) == -(e[1] + 1)]
            heapq.heapify(self._heap)
            self._num_queued = len(self._heap)
            return
        out: deque = deque()
        for n, (g, keys, cid, chain) in enumerate(self._queue):
            live = self._live(n == 0, g, keys)
            run = cid if cid is not None and self.run_state.get(cid) == -(g + 1) else None
            chain = chain if self._chain_live(g, chain) else None
            if live or run is not None or chain is not None:
                out.append((g, live, run, chain))
        self._queue, self._head = out, 0
        self._num_queued = sum(len(k) + (c is not None) + (h is not None) for _, k, c, h in out)

    def lru_order(self) -> list:
        """Evictable entries, least recently released first: keys, ("run", content, blocks) and
        ("chain", system prompt, blocks). Under LFU: keys in eviction order."""
        self._settle()
        if self.lfu:
            return [e[3] for e in sorted(self._heap) if self.ref.get(e[3]) == -(e[1] + 1)]
        out: list = []
        for n, (g, keys, cid, chain) in enumerate(self._queue):
            if cid is not None and self.run_state.get(cid) == -(g + 1):
                out.append(("run", cid, self.run_len[cid]))
            if self._chain_live(g, chain):
                ch = self.chains[chain]
                k = next(k for k, item in enumerate(ch.items) if item[0] == g)
                hi = ch.items[k - 1][1] if k else ch.cached
                out.append(("chain", chain, hi - ch.items[k][1]))
            out += self._live(n == 0, g, keys)
        return out

    def check(self) -> None:
        self._settle()
        order = self.lru_order()
        zero_keys = {k for k, c in self.ref.items() if c < 0}
        zero_runs = {cid for cid, c in self.run_state.items() if c < 0}
        q_keys = [k for k in order if not isinstance(k, tuple)]
        q_runs = [k[1] for k in order if isinstance(k, tuple) and k[0] == "run"]
        q_chain_blocks = sum(k[2] for k in order if isinstance(k, tuple) and k[0] == "chain")
        chain_evictable = sum(ch.cached - ch.top for ch in self.chains.values())
        blocks = len(zero_keys) + sum(self.run_len[c] for c in zero_runs) + chain_evictable
        if (set(q_keys) != zero_keys or len(q_keys) != len(zero_keys) or set(q_runs) != zero_runs
                or len(q_runs) != len(zero_runs) or q_chain_blocks != chain_evictable
                or blocks != self._num_evictable):  # fmt: skip
            raise RuntimeError("prefix cache: the LRU must hold exactly the unreferenced entries, once each")
        if self.run_len.keys() != self.run_state.keys() or min(self.run_len.values(), default=1) < 1:
            raise RuntimeError("prefix cache: run entries and run lengths disagree")
        for r, m in self.run_refs.items():
            if self.run_state.get(self._content(r)) != 1 or self.run_len[self._content(r)] != m:
                raise RuntimeError("prefix cache: a request's run is not referenced by it alone")
        dup = 0
        for g, ch in self.chains.items():
            levels: dict[int, int] = {}
            for gg, level in self.chain_refs.values():
                if gg == g:
                    levels[level] = levels.get(level, 0) + 1
            lows = [item[1] for item in ch.items]
            if (levels != ch.levels or ch.top != max(levels, default=0) or not ch.top <= ch.cached
                    or lows != sorted(lows, reverse=True) or (lows and (lows[-1] != ch.top or lows[0] >= ch.cached))):  # fmt: skip
                raise RuntimeError(f"prefix cache: system prompt chain {g} inconsistent")
            dup += sum(level * c for level, c in levels.items()) - ch.top
        if self.lfu and (self.uses.keys() != self.ref.keys() or min(self.uses.values(), default=1) < 1):
            raise RuntimeError("prefix cache: LFU use counts must cover exactly the cached entries")
        total = sum(len(v) for v in self.refs.values())
        live = [c for c in self.ref.values() if c > 0]
        if total != sum(live) or self.num_dup_refs != total - len(live) + dup:
            raise RuntimeError("prefix cache: reference counts disagree with the requests' references")

    @property
    def num_entries_blocks(self) -> int:
        """Blocks the cache's entries occupy (referenced or evictable)."""
        self._settle()
        return (len(self.ref) + sum(self.run_len.values())
                + sum(ch.cached for ch in self.chains.values()))  # fmt: skip


class PrefixCachingBlockManager(BlockManager):
    """A BlockManager whose free blocks may still hold cached content (evictable, LRU).

    `num_free` is a property: every allocation, wherever it happens, lowers it, and when the truly
    free blocks run out the least recently used evictable blocks are evicted to make room.
    """

    def __init__(self, num_blocks: int, num_host_blocks: int, block_size: int, workload: Workload,
                 eviction_policy: str = "lru", drop_last_hit: bool = False):  # fmt: skip
        self.prefix = PrefixCache(workload, block_size, eviction_policy, drop_last_hit)
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
    def lookup(self, r: int, tokens: int):
        """(handle, hit blocks, evictable among them): PrefixCache.lookup."""
        return self.prefix.lookup(r, tokens)

    def acquire(self, r: int, handle, hit: int, tokens: int) -> int:
        """On admission: r's block table starts with its first `hit` cached blocks (statistics count
        admissions only, not lookups of a request that then did not fit). Returns how many tokens of the KV r
        dropped at a recompute pre-emption it finds again (0 at a first admission): they are not recomputed."""
        kept = min(hit * self.block_size, self.prefix.dropped.get(r, 0))
        took = self.prefix.admit(r, handle, hit, tokens)
        if hit:
            self.held[r] += hit
            self.num_free = self._num_free - took
        return kept

    def register(self, prefilled: IntArray, num_tokens: IntArray) -> None:
        """Requests that prefilled in the tick just run (KV for num_tokens positions each) publish the full blocks of
        their prompts computed so far (PrefixCache.cache_prefilled)."""
        freed = 0
        cache_prefilled = self.prefix.cache_prefilled
        for r, n in zip(prefilled.tolist(), num_tokens.tolist()):
            freed += cache_prefilled(r, n)
        if freed:  # adopted blocks another request cached meanwhile: the request's own copies are free
            self.num_free = self._num_free + freed

    # ------------------------------------------------------------ BlockManager overrides
    def finish(self, req_idx: IntArray, kv_tokens: IntArray) -> None:
        """Finished requests (KV for kv_tokens positions each): their reply blocks are cached where a later request
        can share them (PrefixCache.cache_reply), then their blocks are freed as `free` frees them."""
        pc = self.prefix
        if pc.cache_replies:
            freed = 0
            for r, n in zip(np.atleast_1d(req_idx).tolist(), np.atleast_1d(kv_tokens).tolist()):
                freed += pc.cache_reply(r, n)
            if freed:  # adopted blocks another request cached meanwhile: the request's own copies are free
                self.num_free = self._num_free + freed
        self.free(req_idx)

    def preempt(self, req_idx: IntArray, kv_tokens: IntArray) -> None:
        """Requests pre-empted by recompute (KV for kv_tokens positions each): their full blocks stay cached
        (PrefixCache.preempt), then their blocks are freed as `free` frees them."""
        freed = 0
        for r, n in zip(np.atleast_1d(req_idx).tolist(), np.atleast_1d(kv_tokens).tolist()):
            freed += self.prefix.preempt(r, n)
        if freed:  # adopted blocks another request cached meanwhile: the request's own copies are free
            self.num_free = self._num_free + freed
        self.free(req_idx)

    def free(self, req_idx: IntArray) -> None:
        ids = np.atleast_1d(req_idx)
        freed = int(self.held[ids].sum())
        back = 0
        release = self.prefix.release
        for r in ids.tolist():  # finished, or pre-empted
            back += release(r)  # blocks still referenced by others: not freed
        self.held[ids] = 0
        self.num_free = self._num_free + freed - back

    def swap_out(self, req: int) -> int:
        """The swapped copy is private; cached blocks on the GPU lose one reference."""
        n = int(self.held[req])
        back = self.prefix.release(req, forget=False)
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
        if pc.num_entries_blocks > self.num_blocks or pc._num_queued > 2 * (len(pc.ref) + len(pc.run_state)) + 4096 + self.num_blocks:
            raise RuntimeError(f"prefix cache state unbounded: {len(pc.ref)} entries, {pc._num_queued} queued")
        physical = int(self.held.sum()) - pc.num_dup_refs
        if self._num_free < pc.num_evictable or self._num_free + physical != self.num_blocks:
            raise RuntimeError(
                f"GPU blocks not conserved: free {self._num_free} (evictable {pc.num_evictable}) + in use {physical} "
                f"!= {self.num_blocks}"
            )
        if self.num_host_free < 0 or self.num_host_free + int(self.host_held.sum()) != self.num_host_blocks:
            raise RuntimeError("host swap blocks not conserved")
