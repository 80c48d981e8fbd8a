"""cache_aware: SGLang's rule on the router's own approximate tree of the prompts it sent (router.py),
settled from count bounds like least_outstanding."""

from __future__ import annotations

from itertools import repeat

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim_core.cluster.router import BALANCE_ABS_THRESHOLD, Router
from sim_core.prefix_cache import block_keys
from sim_core.presets import DEFAULT_SCENARIO
from sim_core.sweep import with_value
from sim_core.workload import generate_workload
from tests.sim_core.cluster.support import open_loop_config
from tests.sim_core.cluster.test_deployment import (
    assert_cluster_invariants,
    assert_routes_as_if_every_replica_reached_each_arrival,
    deploy,
)
from tests.sim_core.cluster.test_prefix_affinity import prefix_hit_rates, shared_prompts

WL = generate_workload(shared_prompts(num_prompts=3, num_requests=40).workload, np.random.default_rng(0))
LONG = [r for r in range(WL.num_requests) if WL.prefix_group[r] >= 0 and WL.prompt_tokens[r] > 2100]


class _Count:  # an engine as cache_aware sees it: a count, no cache to query
    def __init__(self, outstanding: int):
        self.num_outstanding = outstanding


def _same_prompt_pair():
    g = WL.prefix_group[LONG[0]]
    return LONG[0], next(r for r in LONG[1:] if WL.prefix_group[r] == g)


def test_the_tree_remembers_where_a_prompt_went_without_asking_the_engines():
    first, again = _same_prompt_pair()
    router = Router("cache_aware", 3, WL, 16)
    assert router.choose([_Count(0), _Count(0), _Count(0)], first) == 0  # nothing known: least outstanding
    # the same system prompt goes back to instance 0 although it is now the busiest (balanced: within 64)
    assert router.choose([_Count(5), _Count(0), _Count(0)], again) == 0
    busy = BALANCE_ABS_THRESHOLD + 10
    assert router.choose([_Count(busy), _Count(1), _Count(2)], again) == 1  # imbalanced: by load


def _sizes(router):
    return [len(t) + p for t, p in zip(router._tree, router._num_private)]


def _trees_of_unequal_size():
    """Instance 0 holds one long prompt, 1 a shorter one, 2 two long ones (sent there by load: imbalanced)."""
    router = Router("cache_aware", 3, WL, 16)
    far = BALANCE_ABS_THRESHOLD * 3
    for r, loads in ((0, (0, far, far)), (1, (far, 0, far)), (3, (far, far, 0)), (4, (far, far, 0))):
        assert router.choose([_Count(c) for c in loads], r) == loads.index(0)
    return router


def test_without_a_good_match_a_balanced_request_goes_to_the_smallest_tree_not_the_least_loaded():
    # SGLang (sgl-router cache_aware.rs select_worker): match rate <= cache_threshold -> tree.get_smallest_tenant()
    loads = (5, 3, 0)  # balanced (within 64): the tree decides; instance 2 is the least loaded and the largest tree
    no_prefix = next(r for r in range(WL.num_requests) if WL.prefix_group[r] < 0)  # no system prompt: no match anywhere
    exact, early = _trees_of_unequal_size(), _trees_of_unequal_size()
    sizes = _sizes(exact)
    assert sizes[1] < sizes[0] < sizes[2]
    assert exact.choose([_Count(c) for c in loads], no_prefix) == 1
    # from bounds: the tree sizes are the router's own state, so any count bounds that leave the load balanced settle it
    assert early.choose_by_bounds([(0, 20), (0, 20), (0, 20)], no_prefix) == (1, [])
    assert _sizes(exact) == _sizes(early) and _sizes(exact)[1] > sizes[1]  # the prompt is in its tree now
    assert early.turn == exact.turn == 2


def test_an_idle_deployment_spreads_requests_while_the_trees_are_equal():
    # (equal trees: ties to the next instance in turn, as every rule's; SGLang's order among equal tenants is a hash map's)
    router = Router("cache_aware", 3, WL, 16)
    no_prefix = [r for r in range(WL.num_requests) if WL.prefix_group[r] < 0]
    assert [router.choose([_Count(0)] * 3, r) for r in no_prefix[:3]] == [0, 1, 2]


@pytest.mark.parametrize("tree_blocks", [1, 200, 1 << 16])
@pytest.mark.parametrize("preset", ["shared-system-prompt-h100-llama8b", "multi-turn-chat-h100-llama8b"])
def test_the_tree_is_bounded_and_stays_a_leading_run_of_each_prompt(tree_blocks, preset):
    from itertools import takewhile

    from sim_core.presets import load_preset

    wl = generate_workload(with_value(load_preset(preset), "workload.num_requests", 60).workload, np.random.default_rng(1))
    router = Router("cache_aware", 2, wl, 16, tree_blocks=tree_blocks)
    for r in range(wl.num_requests):
        router.choose([_Count(r % 3), _Count(1)], r)
        assert all(len(t) <= tree_blocks for t in router._tree)
        for q in range(wl.num_requests):  # the bisection finds what a scan finds
            keys = router._keys(q)
            for i, tree in enumerate(router._tree):
                assert router._match((), q, i, keys) == len(list(takewhile(tree.__contains__, keys)))


class _EagerStamps(Router):
    """The tree as a plain LRU of every block's key: every block of a routed prompt stamped as it is routed (what
    `_remember` defers), its private blocks too (which `_keys` counts without their keys)."""

    def _keys(self, request):
        if self._memo[0] != request:
            full = (int(self.workload.prompt_tokens[request]) - 1) // self.block_size
            self._memo = (request, block_keys(self.workload, request, full, self.block_size) if full > 0 else [], None, 0)
        return self._memo[1]

    def _remember(self, i, keys):
        if not keys:
            return
        self._memo = (-1, [], None, 0)
        tree = self._tree[i]
        tree.update(zip(keys, repeat(self._stamp)))
        self._stamp += 1
        if len(tree) > self.tree_blocks:
            stamps = np.fromiter(tree.values(), dtype=np.int64, count=len(tree))
            keep = self.tree_blocks // 2
            newest = np.partition(stamps, stamps.size - keep - 1)[stamps.size - keep - 1] if keep else stamps.max()
            self._tree[i] = {k: v for k, v in tree.items() if v > newest}


@pytest.mark.parametrize("tree_blocks", [1, 150, 400, 1 << 16])
@pytest.mark.parametrize("preset", ["shared-system-prompt-h100-llama8b", "multi-turn-chat-h100-llama8b", DEFAULT_SCENARIO])
@pytest.mark.parametrize("max_owed", [2, 256])
def test_owed_stamps_give_the_tree_of_stamping_every_block_as_it_is_routed(tree_blocks, preset, max_owed, monkeypatch):
    # the same picks and blocks after every request, and once the owed stamps are written, the same stamps
    from sim_core.cluster import router as router_module
    from sim_core.presets import load_preset

    monkeypatch.setattr(router_module, "MAX_OWED", max_owed)
    wl = generate_workload(with_value(load_preset(preset), "workload.num_requests", 120).workload, np.random.default_rng(2))
    deferred, eager = (cls("cache_aware", 3, wl, 16, tree_blocks=tree_blocks) for cls in (Router, _EagerStamps))
    owed = private = 0
    for r in range(wl.num_requests):
        loads = [_Count((r * 7 + i) % 4) for i in range(3)]  # each request routed once: from bounds, or exactly
        bounds = [(c.num_outstanding, c.num_outstanding + (r + i) % 2) for i, c in enumerate(loads)]
        pick = None
        if r % 2:
            pick, rivals = deferred.choose_by_bounds(bounds, r)
            assert (pick, rivals) == eager.choose_by_bounds(bounds, r)
        if pick is None:  # (an open choice is tried again: here exactly)
            assert deferred.choose(loads, r) == eager.choose(loads, r)
        for i in range(3):  # the blocks with keys, and as many private ones as the eager tree holds beyond them
            assert deferred._tree[i].keys() <= eager._tree[i].keys()
            assert len(deferred._tree[i]) + deferred._num_private[i] == len(eager._tree[i])
        owed += sum(len(o) for o in deferred._owed)
        private += sum(deferred._num_private)
    if tree_blocks >= 400:  # (smaller trees hold little more than the last prompt: nothing is found there, or kept)
        assert private > 0 or preset.startswith("multi-turn")  # (sessions share content: every block has its key)
        assert owed > 0 or preset == DEFAULT_SCENARIO  # (no pool system prompt: every block is private)
    for i in range(3):  # once settled, the same stamps: of the keyed blocks, and of the private ones
        deferred._settle_stamps(i)
        tree, ref = deferred._tree[i], eager._tree[i]
        assert tree == {k: ref[k] for k in tree}
        assert sorted(v for k, v in ref.items() if k not in tree) == [s for s, n in deferred._private[i] for _ in range(n)]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 60), st.integers(0, 40), st.integers(0, 40)), min_size=2, max_size=4),
       st.integers(0, 3), st.integers(0, WL.num_requests - 1), st.integers(0, 12), st.sampled_from([300, 1 << 16]),
       st.integers(0, 4))
def test_bounds_settle_the_choice_only_when_every_count_within_them_agrees(spec, start, which, history, tree_blocks, skew):
    # spec: per instance (low, width, offset of the true count inside [low, low + width]); the request: with a system
    # prompt routed before or not (no good match: the smallest tree); the history: balanced, or some of it by load (skew),
    # into trees that evict (tree_blocks 300) or not
    n = len(spec)
    bounds = [(lo, lo + w) for lo, w, _ in spec]
    counts = [lo + min(off, w) for lo, w, off in spec]
    # (and every count clamped into its bounds at each bound's value: among them the narrowest and the widest spread
    # the bounds allow, where the balance test's answer may change: review 23)
    edges = sorted({v for b in bounds for v in b})
    all_counts = [counts] + [[min(max(x, lo), hi) for lo, hi in bounds] for x in edges]

    def with_history():
        router = Router("cache_aware", n, WL, 16, tree_blocks=tree_blocks)
        for q in range(history):  # the same routing history in every tree
            far = BALANCE_ABS_THRESHOLD * 3 if q < skew else 0  # (imbalanced: instance q mod n, the only idle one)
            router.choose([_Count((q * 7 + i) % 5 + far * (i != q % n)) for i in range(n)], q)
        router.turn = start % n
        return router

    early = with_history()
    r = (LONG + [q for q in range(WL.num_requests) if q not in LONG])[which]
    pick, rivals = early.choose_by_bounds(bounds, r)
    if pick is None:
        assert rivals and early.turn == start % n  # unsettled: nothing consumed
        return
    for true_counts in all_counts:
        exact = with_history()
        assert pick == exact.choose([_Count(c) for c in true_counts], r) and early.turn == exact.turn
        assert early._tree == exact._tree and early._num_private == exact._num_private


@pytest.mark.parametrize("seed", range(4))
def test_routes_as_if_every_replica_reached_each_arrival(seed):
    
    cfg = open_loop_config(seed, "gamma")
    cfg = with_value(with_value(cfg, "kv_cache.layout", "paged"), "kv_cache.enable_prefix_caching", True)
    cfg = with_value(cfg, "workload.shared_prefix", {"num_system_prompts": 3, "share_ratio": 0.7,
                                                     "system_prompt_tokens": {"dist": "fixed", "mean": 128}})  # fmt: skip
    cfg = deploy(cfg, {"replicas": 2 + seed % 3, "router": "cache_aware"})
    assert_cluster_invariants(assert_routes_as_if_every_replica_reached_each_arrival(cfg))


def test_shared_system_prompts_hit_the_cache_like_the_precise_router():
    hit = prefix_hit_rates(("round_robin", "prefix_affinity", "cache_aware"))
    assert hit["cache_aware"] > hit["round_robin"] + 0.05
    assert hit["cache_aware"] > hit["prefix_affinity"] - 0.03
