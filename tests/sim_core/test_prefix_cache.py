"""Prefix cache room: key chains, reference counts, LRU eviction of unreferenced blocks only."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs

from sim_core.prefix_cache import PrefixCachingBlockManager, block_keys
from sim_core.workload import Workload

BS = 16


def wl(content: list[int], prompt: list[int], group=None, prefix_len=None) -> Workload:
    R = len(content)
    z = np.zeros(R, dtype=np.int64)
    return Workload(
        arrival_s=np.arange(R, dtype=float), prompt_tokens=np.array(prompt, dtype=np.int64),
        output_tokens=z + 4, priority=z, class_idx=z, num_samples=1, closed_loop_think_s=None,
        prefix_group=np.array(group if group is not None else [-1] * R, dtype=np.int64),
        prefix_len=np.array(prefix_len if prefix_len is not None else [0] * R, dtype=np.int64),
        content_id=np.array(content, dtype=np.int64),
    )  # fmt: skip


def admit(kv: PrefixCachingBlockManager, r: int, prompt: int) -> int:
    """What the scheduler does at admission: reuse the cached chain, allocate the rest. Returns hit tokens."""
    keys, hit, _ = kv.lookup(r, prompt)
    kv.acquire(r, keys, hit, prompt)
    need = int(kv.blocks_for(prompt, prompt)) - hit
    assert kv.can_allocate(need)
    kv.held[r] += need
    kv.num_free -= need
    return hit * BS


def cached(kv: PrefixCachingBlockManager, r: int, prompt: int) -> int:
    """Blocks request r would find cached if it came back now (a side-effect-free lookup)."""
    return kv.lookup(r, prompt)[1]


def finish(kv: PrefixCachingBlockManager, r: int, prompt: int) -> None:
    kv.register(np.array([r]), np.array([prompt]))
    kv.free(np.array([r]))


def test_identical_prompts_in_a_row_hit_after_the_first():
    w = wl([7, 7, 7], [100, 100, 100])
    kv = PrefixCachingBlockManager(64, 0, BS, w)
    assert admit(kv, 0, 100) == 0
    finish(kv, 0, 100)
    for r in (1, 2):
        assert admit(kv, r, 100) == (100 - 1) // BS * BS  # every full block but the one holding the last token
        finish(kv, r, 100)
        kv.check_invariants()
    assert kv.prefix.num_hit_blocks == 2 * 6 and kv.prefix.num_query_blocks == 3 * 6


def test_keys_chain_on_the_prefix_and_separate_different_content():
    w = wl([1, 2, 3], [200, 200, 200], group=[0, 0, -1], prefix_len=[64, 64, 0])
    k0, k1, k2 = (block_keys(w, r, 12, BS) for r in range(3))
    assert k0[:4] == k1[:4] and all(a != b for a, b in zip(k0[4:], k1[4:]))  # the 64-token system prompt = 4 blocks
    assert not set(k2) & set(k0) and len(set(k0)) == 12
    assert block_keys(w, 0, 12, BS) == k0  # deterministic


def test_eviction_frees_the_least_recently_used_unreferenced_block_first():
    w = wl([1, 2, 3, 4], [33, 33, 33, 33])  # 2 full blocks each
    kv = PrefixCachingBlockManager(8, 0, BS, w)
    for r in (0, 1):
        admit(kv, r, 33)
        finish(kv, r, 33)  # r=0's blocks are released first: least recently used
    assert kv.num_evictable == 4 and kv.num_free == 8
    admit(kv, 2, 33)  # 3 blocks: 4 truly free blocks, nothing evicted
    assert kv.num_evictable == 4 and cached(kv, 0, 33) == cached(kv, 1, 33) == 2
    admit(kv, 3, 33)  # 3 more: one truly free, two evictions
    assert kv.prefix.num_evicted == 2
    assert cached(kv, 0, 33) == 0 and cached(kv, 1, 33) == 2  # r=0 was released first
    assert kv.prefix._debt == 0 and kv.prefix.num_evicted == 2  # the lookups settled the deferred evictions: counted once
    kv.check_invariants()
    # within a request the tail block goes before the head (vLLM frees in reverse order)
    kv2 = PrefixCachingBlockManager(4, 0, BS, wl([1, 2], [33, 40]))
    admit(kv2, 0, 33)
    finish(kv2, 0, 33)
    admit(kv2, 1, 40)  # 3 blocks: 2 free + 1 eviction
    assert cached(kv2, 0, 33) == 1
    kv2.check_invariants()
    # the same for a shared system prompt's blocks
    w3 = wl([1, 2], [65, 70], group=[0, 1], prefix_len=[64, 64])
    kv3 = PrefixCachingBlockManager(6, 0, BS, w3)
    admit(kv3, 0, 65)
    finish(kv3, 0, 65)  # 4 system blocks evictable
    admit(kv3, 1, 70)  # 5 blocks: 2 free + 3 evictions, tail first
    assert cached(kv3, 0, 65) == 1
    kv3.check_invariants()


def test_a_referenced_block_is_never_evicted_or_freed():
    w = wl([5, 5, 9], [65, 65, 65])
    kv = PrefixCachingBlockManager(10, 0, BS, w)
    admit(kv, 0, 65)
    kv.register(np.array([0]), np.array([65]))  # r=0 still running, its 4 full blocks cached
    assert admit(kv, 1, 65) == 64  # shares all 4 (65 tokens: the last token sits in a 5th block)
    kv.check_invariants()
    assert kv.num_free == 10 - 5 - 1  # 4 shared + 1 private each
    kv.free(np.array([0]))  # r=1 still references the 4 shared blocks: they stay in use
    assert kv.num_evictable == 0 and kv.num_free == 10 - 5
    admit(kv, 2, 65)  # needs 5 blocks: exactly the free ones, no shared block touched
    assert all(c == 1 for c in kv.prefix.ref.values())
    with pytest.raises(AssertionError):
        admit(kv, 0, 65)  # nothing left: the referenced blocks cannot be taken
    kv.check_invariants()


@settings(max_examples=60, deadline=None)
@given(ops=hs.lists(hs.tuples(hs.integers(0, 5), hs.integers(1, 120), hs.booleans()), min_size=1, max_size=40))
def test_random_admit_and_finish_keep_blocks_conserved(ops):
    w = wl([c for c, _, _ in ops], [p for _, p, _ in ops])
    _admit_or_preempt_each(PrefixCachingBlockManager(24, 4, BS, w), [(p, swap) for _, p, swap in ops])


def _admit_or_preempt_each(kv: PrefixCachingBlockManager, steps, after_each=lambda kv, running: None) -> None:
    """Request r (prompt p) is admitted when its blocks fit, else the oldest running request is swapped out
    (when `swap` and possible) or freed; invariants hold after every step and after freeing everything."""
    R = len(steps)
    running: list[int] = []
    for r, (p, swap) in enumerate(steps):
        keys, hit, ev = kv.lookup(r, p)
        need = int(kv.blocks_for(p, p)) - hit
        if kv.can_allocate(need + ev):
            kv.acquire(r, keys, hit, p)
            kv.held[r] += need
            kv.num_free -= need
            kv.register(np.array([r]), np.array([p]))
            running.append(r)
        elif running:
            victim = running.pop(0)
            if swap and kv.can_swap_out(victim):
                kv.swap_out(victim)
            else:
                kv.free(np.array([victim]))
        kv.check_invariants()
        after_each(kv, running)
    kv.free(np.array(running + [r for r in range(R) if kv.held[r] and r not in running], dtype=np.int64))
    kv.check_invariants()


def test_a_swap_out_releases_a_runs_cache_request_and_keeps_the_shared_system_prompt():
    """Distinct contents (the runs representation): swap_out releases the request's references without forgetting it
    (`release(r, forget=False)`); its own run becomes evictable, the system prompt another request holds does not."""
    w = wl([7, 8], [65, 65], group=[0, 0], prefix_len=[32, 32])  # 4 full blocks each: 2 of the system prompt, 2 own
    kv = PrefixCachingBlockManager(16, 8, BS, w)
    assert kv.prefix.use_runs
    for r in (0, 1):
        admit(kv, r, 65)
        kv.register(np.array([r]), np.array([65]))
    evictable = kv.num_evictable
    assert kv.swap_out(1) == 5  # (its 4 full blocks and the partial fifth, privately on the host)
    kv.check_invariants()
    assert kv.num_evictable == evictable + 2 and cached(kv, 1, 65) == 4


def _hot_prompt_then_a_scan(policy: str) -> PrefixCachingBlockManager:
    """Two requests share a 4-block system prompt, then two one-off prompts scan through an 8-block cache."""
    w = wl([1, 2, 3, 4, 5], [65, 65, 49, 49, 65], group=[0, 0, -1, -1, 0], prefix_len=[64, 64, 0, 0, 64])
    kv = PrefixCachingBlockManager(8, 0, BS, w, policy)
    for r, p in ((0, 65), (1, 65), (2, 49)):
        admit(kv, r, p)
        finish(kv, r, p)
        kv.check_invariants()
    admit(kv, 3, 49)  # 4 blocks: 1 truly free, 3 evicted (7 evictable: 4 system-prompt blocks used twice, 3 once)
    kv.check_invariants()
    assert kv.prefix.num_evicted == 3
    return kv


def test_lru_and_lfu_differ_on_a_hot_system_prompt_and_a_scan():
    lru = _hot_prompt_then_a_scan("lru")  # the system prompt was released before the scan: its tail goes
    assert cached(lru, 4, 65) == 1 and cached(lru, 2, 49) == 3
    lfu = _hot_prompt_then_a_scan("lfu")  # the once-used scan blocks go; the twice-used prompt stays whole
    assert cached(lfu, 4, 65) == 4 and cached(lfu, 2, 49) == 0
    assert lfu.prefix.lru_order()[:1] == [block_keys(lfu.prefix.wl, 0, 4, BS)[-1]]  # then its tail first


@settings(max_examples=60, deadline=None)
@given(ops=hs.lists(hs.tuples(hs.integers(0, 5), hs.integers(1, 120), hs.booleans(), hs.integers(-1, 1)),
                    min_size=1, max_size=40))  # fmt: skip
def test_lfu_keeps_blocks_conserved_and_referenced_blocks_in_place(ops):
    w = wl([c for c, _, _, _ in ops], [p for _, p, _, _ in ops], group=[g for *_, g in ops],
           prefix_len=[32 if g >= 0 else 0 for *_, g in ops])  # fmt: skip

    def referenced_never_evictable(kv, running):
        evictable = set(kv.prefix.lru_order())
        for q in running:
            assert not set(kv.prefix.refs.get(q, ())) & evictable

    _admit_or_preempt_each(PrefixCachingBlockManager(24, 4, BS, w, "lfu"), [(p, swap) for _, p, swap, _ in ops],
                           referenced_never_evictable)  # fmt: skip


class _Ticks:
    num_ticks = 5  # a recorder's ticks so far (marks are at num_ticks + tick_offset)


def _filled_cache(policy: str) -> PrefixCachingBlockManager:
    """A 24-block cache whose free blocks mostly hold evictable content: prompts, some sharing a system prompt,
    admitted and finished in turn."""
    w = wl(list(range(8)), [70, 50, 90, 33, 65, 49, 81, 40], group=[0, -1, 0, -1, 1, 0, -1, 1],
           prefix_len=[48, 0, 48, 0, 32, 48, 0, 32])  # fmt: skip
    kv = PrefixCachingBlockManager(24, 0, BS, w, policy)
    kv.prefix.recorder = _Ticks()
    for r, p in enumerate(w.prompt_tokens.tolist()):
        admit(kv, r, p)
        finish(kv, r, p)
    return kv


@pytest.mark.parametrize("policy", ["lru", "lfu"])
@settings(max_examples=80, deadline=None)
@given(taken=hs.lists(hs.integers(0, 3), max_size=30), tick=hs.integers(0, 50))
def test_trimming_a_run_of_ticks_at_once_equals_trimming_tick_by_tick(policy, taken, tick):
    """PrefixCache.trim_ticks (the fast path's all-decode stretches priced as arrays) and trim_marked leave the same marks,
    counts and LRU as the loop's per-tick trim: at tick + i, when allocation left free_after[i] blocks free."""
    one_by_one, at_once = _filled_cache(policy), _filled_cache(policy)
    assert one_by_one.prefix.num_evictable > 4
    free_after = np.maximum(one_by_one.num_free - np.cumsum(np.array(taken, dtype=np.int64)), 0)
    pc = one_by_one.prefix
    for i, f in enumerate(free_after.tolist()):
        pc.tick_offset = tick + i
        if pc.num_evictable > f:
            pc.trim(f)
    at_once.prefix.trim_ticks(tick, free_after)
    a, b = one_by_one.prefix, at_once.prefix
    assert (a.marks.tolist(), a.num_evictable, a.num_evicted) == (b.marks.tolist(), b.num_evictable, b.num_evicted)
    assert a.lru_order() == b.lru_order()
    # trim_marked (the unrolled loop's ticks): the (tick, free blocks) of the ticks that trim, applied at once
    marked, evictable = _filled_cache(policy), _filled_cache(policy).prefix.num_evictable
    flat = []
    for i, f in enumerate(free_after.tolist()):
        if evictable > f:
            evictable = f
            flat += [_Ticks.num_ticks + tick + i, f]
    if flat:
        marked.prefix.trim_marked(flat)
    c = marked.prefix
    assert (a.marks.tolist(), a.num_evictable, a.num_evicted) == (c.marks.tolist(), c.num_evictable, c.num_evicted)
    assert a.lru_order() == c.lru_order()


def _decode_and_finish(kv: PrefixCachingBlockManager, r: int, prompt: int, output: int) -> None:
    """r's prefill completed (prompt blocks registered), then it decoded `output` tokens and finished: it holds blocks
    for prompt + output - 1 tokens of KV (its last token's KV is never written) when it finishes."""
    kv.register(np.array([r]), np.array([prompt]))
    need = int(kv.blocks_for(prompt + output - 1, prompt)) - int(kv.held[r])
    kv.held[r] += need
    kv.num_free -= need
    kv.finish(np.array([r]), np.array([prompt + output - 1]))


def test_a_finished_turn_leaves_its_reply_blocks_cached_for_the_next_turn():
    """Two turns of one session, blocks of 16: turn 0 (prompt 40, reply 30) has KV for 40 + 30 - 1 = 69 tokens, 4 full
    blocks (2 of prompt, 2 of reply), all cached when it finishes; turn 1's prompt is 40 + 30 + 10 = 80 tokens and finds
    all 4 (64 tokens; it may reuse at most (80 - 1) // 16 = 4). Only the prompt's 2 were cached before (32 tokens)."""
    kv = PrefixCachingBlockManager(16, 0, BS, wl([3, 3], [40, 80]))
    assert kv.prefix.cache_replies and not kv.prefix.use_runs  # a shared content id: sessions
    assert admit(kv, 0, 40) == 0
    _decode_and_finish(kv, 0, 40, 30)
    kv.check_invariants()
    assert kv.num_evictable == 4 and kv.num_free == 16 and kv.prefix.num_entries_blocks == 4  # the 5th (partial) is free
    assert admit(kv, 1, 80) == 64
    assert kv.num_free == 16 - 5 and kv.num_evictable == 0  # 4 cached blocks referenced + 1 new block
    kv.check_invariants()


def test_a_reply_no_later_request_shares_is_not_cached():
    """Distinct content ids (no sessions): a finished request's reply is never looked up again, so its blocks stay
    truly free (vLLM's free queue orders free blocks alike, hashed or not); only the prompt's 2 full blocks stay cached."""
    kv = PrefixCachingBlockManager(16, 0, BS, wl([3, 4], [40, 80]))
    assert not kv.prefix.cache_replies
    admit(kv, 0, 40)
    _decode_and_finish(kv, 0, 40, 30)
    assert kv.num_evictable == 2 and kv.num_free == 16
    kv.check_invariants()


def test_a_reply_another_turn_cached_meanwhile_is_adopted():
    """Open-loop sessions: turn 1 (prompt 80 = turn 0's 40 + reply 30 + 10) was sent before turn 0 finished and cached
    blocks 2 and 3 of the session's content; turn 0's own copies of them are freed when it finishes (adopted), as a
    prompt's are at registration."""
    kv = PrefixCachingBlockManager(16, 0, BS, wl([3, 3], [40, 80]))
    admit(kv, 0, 40)
    kv.register(np.array([0]), np.array([40]))
    assert admit(kv, 1, 80) == 32  # turn 0's 2 prompt blocks
    kv.register(np.array([1]), np.array([80]))  # turn 1 caches blocks 2..4
    kv.held[0] += 2  # turn 0 decodes its reply: 69 tokens of KV in 5 blocks (3 for its prompt)
    kv.num_free -= 2
    assert kv.num_free == 16 - 5 - 3
    kv.finish(np.array([0]), np.array([69]))
    # freed: its partial 5th block and its own copies of blocks 2 and 3 (turn 1's are adopted); the 2 prompt blocks
    # stay in use by turn 1
    assert kv.num_free == 16 - 5
    assert kv.num_evictable == 0 and kv.prefix.num_entries_blocks == 5  # turn 1 references every cached block
    kv.check_invariants()
    kv.free(np.array([1]))
    assert kv.num_evictable == 5 and kv.num_free == 16
    kv.check_invariants()


@settings(max_examples=60, deadline=None)
@given(ops=hs.lists(hs.tuples(hs.integers(0, 3), hs.integers(1, 90), hs.integers(1, 40), hs.booleans()), min_size=1,
                    max_size=30),
       lfu=hs.booleans())  # fmt: skip
def test_random_turns_that_finish_with_replies_keep_blocks_conserved(ops, lfu):
    """Requests of a few shared contents are admitted, finish with random replies (cached) or are pre-empted (freed:
    their partial output is not cached), in random order: blocks are conserved and referenced blocks stay put."""
    w = wl([c for c, _, _, _ in ops], [p for _, p, _, _ in ops])
    kv = PrefixCachingBlockManager(40, 0, BS, w, "lfu" if lfu else "lru")
    running: list[tuple[int, int, int]] = []
    for r, (_, p, o, done) in enumerate(ops):
        keys, hit, ev = kv.lookup(r, p)
        need = int(kv.blocks_for(p + o, p)) - hit  # room for the whole reply
        if kv.can_allocate(need + ev):
            kv.acquire(r, keys, hit, p)
            kv.held[r] += int(kv.blocks_for(p, p)) - hit
            kv.num_free -= int(kv.blocks_for(p, p)) - hit
            kv.register(np.array([r]), np.array([p]))
            running.append((r, p, o))
        elif running:
            q, pq, oq = running.pop(0)
            if done:
                grow = int(kv.blocks_for(pq + oq - 1, pq)) - int(kv.held[q])
                if kv.can_allocate(grow):
                    kv.held[q] += grow
                    kv.num_free -= grow
                    kv.finish(np.array([q]), np.array([pq + oq - 1]))
                else:
                    kv.free(np.array([q]))
            else:
                kv.free(np.array([q]))  # pre-empted
        kv.check_invariants()
    for q, pq, _ in running:
        kv.finish(np.array([q]), np.array([pq]))
        kv.check_invariants()
    assert kv.num_free == 40 and kv.num_evictable == kv.prefix.num_entries_blocks


def _decode_to(kv: PrefixCachingBlockManager, r: int, prompt: int, kv_tokens: int) -> None:
    """Request r (admitted) grows until it holds KV for `kv_tokens` positions: it decodes, or a tick computes its
    prompt up to there (a chunk)."""
    grow = int(kv.blocks_for(kv_tokens, prompt)) - int(kv.held[r])
    assert kv.can_allocate(grow)
    kv.held[r] += grow
    kv.num_free -= grow


@pytest.mark.parametrize("policy", ["lru", "lfu"])  # runs and chains (lru, no sharing); per-block entries (lfu)
def test_a_request_preempted_by_recompute_finds_its_prompt_and_output_blocks_again(policy):
    """Prompt 40 (a 1-block system prompt, then its own content), 31 tokens emitted: KV for 70 positions, 4 full blocks
    (2 of prompt, 2 of output). Pre-empted by recompute, it leaves all 4 cached, as vLLM V1 (which hashed every full
    block of prompt + output as it was computed); back, it looks up its prompt and emitted tokens (71) and finds all 4:
    only the 6 positions of its partial block are recomputed, not 70 - 32 (its prompt's blocks alone, before)."""
    w = wl([5, 6], [40, 40], group=[0, -1], prefix_len=[16, 0])
    kv = PrefixCachingBlockManager(16, 0, BS, w, policy)
    assert admit(kv, 0, 40) == 0
    kv.register(np.array([0]), np.array([40]))
    _decode_to(kv, 0, 40, 70)
    kv.preempt(np.array([0]), np.array([70]))
    kv.check_invariants()
    assert kv.held[0] == 0 and kv.num_free == 16 and kv.num_evictable == 4
    assert cached(kv, 0, 40) == 2 and cached(kv, 0, 71) == 4  # (a lookup of the prompt alone: its blocks only)
    keys, hit, evictable = kv.lookup(0, 71)
    assert kv.acquire(0, keys, hit, 71) == 64  # tokens of the dropped KV found again: not recomputed
    kv.check_invariants()
    assert kv.held[0] == 4 and kv.num_evictable == 0
    pc = kv.prefix
    assert pc.num_query_tokens == 40 and pc.num_hit_blocks == 0  # the hit rate counts first admissions (vLLM V1)
    assert pc.num_saved_tokens == 64  # prefill tokens saved: re-admissions included


def test_a_preempted_requests_tail_is_evicted_first():
    """Its blocks are released tail first (vLLM frees a request's blocks in reverse order): an allocation that
    evicts one of them takes its last output block, and the request comes back to the other 3."""
    w = wl([5, 6], [40, 40])
    kv = PrefixCachingBlockManager(8, 0, BS, w)
    admit(kv, 0, 40)
    kv.register(np.array([0]), np.array([40]))
    _decode_to(kv, 0, 40, 70)
    kv.preempt(np.array([0]), np.array([70]))
    admit(kv, 1, 40)  # r=1 takes 3 of the 4 truly free blocks...
    kv.held[1] += 2
    kv.num_free -= 2  # ...then 2 more: 1 truly free, 1 evicted
    kv.check_invariants()
    assert kv.prefix.num_evicted == 1 and cached(kv, 0, 71) == 3


@settings(max_examples=80, deadline=None)
@given(ops=hs.lists(hs.tuples(hs.integers(0, 3), hs.integers(1, 90), hs.integers(0, 40), hs.integers(0, 2)), min_size=1,
                    max_size=30),
       lfu=hs.booleans(), system=hs.integers(0, 40))  # fmt: skip
def test_random_recompute_preemptions_keep_blocks_conserved_and_find_only_what_was_dropped(ops, lfu, system):
    """Requests (content ids 0..3: sessions when they repeat) are admitted, decode `o` tokens, and are pre-empted by
    recompute (then admitted again with their prompt and emitted tokens) or finish, in random order: blocks are
    conserved every step, and a re-admission finds at most the full blocks of what it knew, never more tokens of its
    dropped KV than it dropped."""
    R = len(ops)
    w = wl([c for c, _, _, _ in ops], [p for _, p, _, _ in ops], group=[0] * R, prefix_len=[min(system, p) for _, p, _, _ in ops])
    kv = PrefixCachingBlockManager(40, 0, BS, w, "lfu" if lfu else "lru")
    running: dict[int, int] = {}  # request -> KV positions
    waiting: dict[int, int] = {}  # pre-empted request -> prompt + emitted tokens
    plan = [(r, p, o, what) for r, (_, p, o, what) in enumerate(ops)]
    for r, p, o, what in plan + [(q, None, 0, 2) for q in range(R)]:
        tokens = waiting.pop(r, None) if p is None else p
        if tokens is None:
            continue
        prompt = int(w.prompt_tokens[r])
        keys, hit, ev = kv.lookup(r, tokens)
        assert hit <= (tokens - 1) // BS
        need = int(kv.blocks_for(tokens, prompt)) - hit
        if not kv.can_allocate(need + ev):
            continue
        dropped_before = kv.prefix.dropped.get(r)
        kept = kv.acquire(r, keys, hit, tokens)
        assert kept == (0 if dropped_before is None else min(hit * BS, dropped_before))
        kv.held[r] += need
        kv.num_free -= need
        kv.register(np.array([r]), np.array([prompt]))
        ctx = tokens + o
        grow = int(kv.blocks_for(ctx, prompt)) - int(kv.held[r])
        if kv.can_allocate(grow):
            kv.held[r] += grow
            kv.num_free -= grow
        else:
            ctx = tokens
        if what == 0:  # pre-empted by recompute: back later with its prompt and the tokens it emitted
            kv.preempt(np.array([r]), np.array([ctx]))
            waiting[r] = ctx + 1
        elif what == 1:
            kv.finish(np.array([r]), np.array([ctx]))
        else:
            running[r] = ctx
        kv.check_invariants()
    kv.free(np.array(list(running), dtype=np.int64))
    kv.check_invariants()
    assert kv.num_free == 40 and kv.num_evictable == kv.prefix.num_entries_blocks



def admit_chunk(kv: PrefixCachingBlockManager, r: int, prompt: int, computed: int) -> int:
    """Admission of r with the blocks it finds, then its first chunk up to `computed` tokens. Returns hit tokens."""
    keys, hit, _ = kv.lookup(r, prompt)
    kv.acquire(r, keys, hit, prompt)
    _decode_to(kv, r, prompt, max(computed, hit * BS + 1))
    return hit * BS


@pytest.mark.parametrize("policy", ["lru", "lfu"])  # a system prompt's chain (lru); per-block entries (lfu)
def test_a_prompt_still_prefilling_publishes_the_full_blocks_it_computed_after_each_tick(policy):
    """Two prompts of 100 tokens open with the same 64-token system prompt (4 blocks). Request 0 prefills 40 tokens
    a tick: after its first tick its 2 full blocks are cached (referenced by it), so request 1, admitted in the next
    tick, finds them (vLLM V1 caches a chunk's full blocks as it schedules the step; SGLang after the chunk). Both
    then compute blocks 2-3 in the same tick: request 0 registers them first, request 1 adopts them and its own 2
    copies go free. Reference counts: each system-prompt block is referenced by both."""
    w = wl([5, 6], [100, 100], group=[0, 0], prefix_len=[64, 64])
    kv = PrefixCachingBlockManager(20, 0, BS, w, policy)
    assert admit_chunk(kv, 0, 100, 40) == 0
    assert cached(kv, 1, 100) == 0  # admitted in the same tick: looked up before it ran
    kv.register(np.array([0]), np.array([40]))  # after the tick
    kv.check_invariants()
    assert cached(kv, 1, 100) == 2 and kv.num_free == 20 - 3
    assert admit_chunk(kv, 1, 100, 40) == 32  # found 2 blocks, computes 8 more tokens: 3 blocks, 1 of them new
    _decode_to(kv, 0, 100, 80)
    kv.register(np.array([0, 1]), np.array([80, 40]))
    kv.check_invariants()
    assert kv.num_free == 20 - 5 - 1  # request 0: 5 blocks; request 1: the 2 it shares and 1 of its own
    _decode_to(kv, 1, 100, 80)  # request 1 computes blocks 2-4 too (request 0 had cached 2-3 already)...
    assert kv.num_free == 20 - 5 - 5 + 2
    kv.register(np.array([1]), np.array([80]))  # ...and adopts them: its copies go free
    kv.check_invariants()
    assert kv.num_free == 20 - 5 - 1 and kv.prefix.num_dup_refs == 4 and cached(kv, 1, 100) == 5
    kv.free(np.array([0, 1]))
    kv.check_invariants()
    assert kv.num_free == 20 and kv.num_evictable == 4 + 1 + 1  # the system prompt, and each one's own block


@settings(max_examples=80, deadline=None)
@given(reqs=hs.lists(hs.tuples(hs.integers(0, 1), hs.integers(1, 120), hs.integers(0, 4)), min_size=1, max_size=12),
       chunk=hs.integers(1, 48), system=hs.integers(0, 70), lfu=hs.booleans())  # fmt: skip
def test_random_chunked_prefills_find_only_blocks_computed_before_their_tick(reqs, chunk, system, lfu):
    """Requests (system prompt 0 or 1 of `system` tokens, then their own content) are admitted at random ticks and
    prefill `chunk` tokens a tick, their full prompt blocks published after every tick; one finishes when its prefill
    completes. An admission finds exactly the longest run of whole system-prompt blocks that another request had
    computed before its tick (nothing is evicted: the cache holds them all), and blocks stay conserved."""
    R = len(reqs)
    prompts = [p for _, p, _ in reqs]
    w = wl(list(range(R)), prompts, group=[g for g, _, _ in reqs], prefix_len=[min(system, p) for p in prompts])
    kv = PrefixCachingBlockManager(1 + sum(-(-p // BS) for p in prompts), 0, BS, w, "lfu" if lfu else "lru")
    computed: dict[int, int] = {}  # request -> tokens computed (running or done)
    running: list[int] = []
    at = sorted(range(R), key=lambda r: reqs[r][2])  # admission order by tick
    for tick in range(5 * 120):
        for r in [r for r in at if reqs[r][2] == tick]:
            g, p = reqs[r][0], prompts[r]
            before = max([c for q, c in computed.items() if reqs[q][0] == g], default=0)
            keys, hit, _ = kv.lookup(r, p)
            assert hit == min(system, p, before, p - 1) // BS  # (min(system, p): its system prompt's length)
            kv.acquire(r, keys, hit, p)
            computed[r] = hit * BS  # this tick's chunk: below, with the others
            running.append(r)
        for r in running:
            computed[r] = min(computed[r] + chunk, prompts[r])
            _decode_to(kv, r, prompts[r], computed[r])
        if running:
            kv.register(np.array(running), np.array([computed[r] for r in running]))
            kv.check_invariants()
        done = [r for r in running if computed[r] == prompts[r]]
        if done:
            kv.free(np.array(done))
            running = [r for r in running if r not in done]
            kv.check_invariants()
    assert not running
    assert kv.num_free == kv.num_blocks and kv.prefix.num_evicted == 0


@pytest.mark.parametrize("engine", ["vllm-v1", "sglang", "exclusive"])
def test_settling_a_few_evictions_one_by_one_equals_the_sliced_walk(engine, monkeypatch):
    """`_settle` drops a tick's few deferred evictions of per-block entries one by one (SETTLE_LOOP_BLOCKS), skipping the
    stale entries a session's next turn re-acquired: every result (evictions, hit rates, the cached-free marks, ticks)
    equals the sliced walk's, which alone ran before. The one-by-one loop must have run, on groups with stale entries."""
    import copy
    import hashlib
    from collections import deque

    from sim_core import prefix_cache
    from sim_core.bench import _set, engine_config
    from sim_core.engine import run_simulation
    from tests.sim_core.test_engine_digest import engine_digest

    cfg = _set(engine_config(engine)[0], workload__num_requests=256, workload__sessions__turns=4,
               workload__sessions__think_time_s=0.3, kv_cache__enable_prefix_caching=True)  # fmt: skip
    small = {"settles": 0, "stale": 0}
    settle = prefix_cache.PrefixCache._settle

    def counted(pc):  # each small settle of per-block entries against the sliced walk's on a copy of the cache
        if not (0 < pc._debt <= prefix_cache.SETTLE_LOOP_BLOCKS and not pc.use_runs):
            return settle(pc)
        small["settles"] += 1
        gen, keys, _, _ = pc._queue[0]
        small["stale"] += sum(pc.ref.get(k) != -(gen + 1) for k in keys[pc._head:])
        sliced = copy.copy(pc)
        sliced.ref, sliced._queue = dict(pc.ref), deque(pc._queue)
        with monkeypatch.context() as m:
            m.setattr(prefix_cache, "SETTLE_LOOP_BLOCKS", 0)
            settle(sliced)
        settle(pc)
        assert pc.ref == sliced.ref and pc.lru_order() == sliced.lru_order() and pc._debt == sliced._debt == 0
        assert pc._num_evicted == sliced._num_evicted

    def digest():
        m = hashlib.sha256()
        engine_digest._update(run_simulation(cfg), m)
        return m.hexdigest()

    monkeypatch.setattr(prefix_cache.PrefixCache, "_settle", counted)
    one_by_one = digest()
    assert small["settles"] > 20 and small["stale"] > 0
    monkeypatch.setattr(prefix_cache, "SETTLE_LOOP_BLOCKS", 0)  # the sliced walk only
    assert digest() == one_by_one


def test_content_keys_memoised_per_content_equal_the_hashed_ones_and_stay_bounded():
    """ContentChains (block_keys' `content_chain`) hands back exactly content_keys' list whatever it was asked before:
    longer (extended), shorter (a prefix), the same content under another parent or first block (replaced); past
    `max_keys` keys the least recently extended contents go, and are hashed again when asked."""
    from sim_core.prefix_cache import ContentChains, content_keys

    memo = ContentChains(max_keys=50)
    asks = [(0, 7, 0, 10), (0, 7, 0, 4), (0, 7, 0, 25), (0, 7, 0, 25), (99, 7, 0, 8), (99, 7, 3, 9), (0, 8, 2, 30),
            (0, 9, 0, 30), (0, 8, 2, 31), (99, 7, 3, 12), (0, 9, 0, 5), (0, 7, 0, 60)]  # fmt: skip
    for parent, content, first, stop in asks:
        assert memo(parent, content, first, stop) == content_keys(parent, content, first, stop)
        assert memo.num_keys <= 60  # the bound, or one content alone asked for more (kept: it was just asked for)
    assert memo.num_keys == 60 and len(memo._entries) == 1  # the 60-block content pushed every other out
    memo(0, 8, 2, 31)
    assert memo.num_keys == 29 and list(memo._entries) == [8]  # ... and then went itself, the oldest past the bound
    # block_keys with the memo equals block_keys without it, system prompts included
    w = wl([5, 5, 6, 5], [200, 260, 200, 300], group=[1, 1, 1, -1], prefix_len=[64, 64, 40, 0])
    memo = ContentChains(max_keys=8)
    for r, n in [(0, 12), (1, 16), (2, 12), (0, 12), (3, 18), (1, 10), (1, 16)]:
        assert block_keys(w, r, n, BS, content_chain=memo) == block_keys(w, r, n, BS)


def _sessions_engine(engine: str, **changes):
    from sim_core.bench import _set, engine_config
    from sim_core.engine import Engine

    cfg = _set(engine_config(engine)[0], workload__num_requests=192, workload__sessions__turns=4,
               workload__sessions__think_time_s=0.3, kv_cache__enable_prefix_caching=True, **changes)  # fmt: skip
    return Engine(cfg)


def _cache_state(pc) -> tuple:
    pc._settle()
    return (dict(pc.ref), pc.lru_order(), dict(pc.refs), pc.num_evicted, pc.num_evictable, pc.num_dup_refs,
            pc.num_hit_blocks, pc.num_rehit_blocks, pc.num_query_blocks, list(pc.marks), dict(pc.uses))  # fmt: skip


@pytest.mark.parametrize("engine, changes", [("vllm-v1", {}), ("sarathi-serve", {}),
                                             ("vllm-v0", {"workload__sessions__closed_loop": False}),
                                             ("sglang", {"kv_cache__eviction_policy": "lfu"})])  # fmt: skip
def test_memoised_keys_leave_every_result_and_the_cache_state_alone(engine, changes, monkeypatch):
    """Sessions with the prefix cache (per-block entries, under KV pressure: evictions and pre-emptions): with the
    content keys memoised per content id (ContentChains), every result and the cache's final state (entries, LRU order,
    references, counts, marks) equal those of the unmemoised path; the memo must have served most keys."""
    from sim_core import prefix_cache
    from sim_core.engine import Engine
    from tests.sim_core.test_equivalence import _with_kv_room, assert_same_result

    base = _sessions_engine(engine, **changes).cfg
    cfg = _with_kv_room(base, 2.0)
    hashed = [0]
    content_keys = prefix_cache.content_keys

    def counted_keys(parent, content, first, stop):
        hashed[0] += stop - first
        return content_keys(parent, content, first, stop)

    monkeypatch.setattr(prefix_cache, "content_keys", counted_keys)
    fast = Engine(cfg)
    fast_res = fast.run()
    fast.kv.check_invariants()
    memo_hashed = hashed[0]
    with monkeypatch.context() as m:
        m.setattr(prefix_cache.ContentChains, "__call__", lambda memo, *ask: counted_keys(*ask))
        slow = Engine(cfg)
        slow_res = slow.run()
    assert_same_result(fast_res, slow_res)
    assert _cache_state(fast.prefix) == _cache_state(slow.prefix)
    assert not fast.prefix.use_runs and fast_res.summary.num_preemptions > 0 and fast.prefix.num_evicted > 0
    assert memo_hashed < 0.5 * (hashed[0] - memo_hashed)  # the memo hashed each session's history once, not per turn

