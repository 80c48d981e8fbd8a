"""Routing policies on a skewed load: what each one balances, as stated in router.py."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sim_core import run_simulation
from sim_core.cluster.router import Router
from sim_core.sweep import with_value
from tests.conftest import trace_config
from tests.sim_core.cluster.support import open_loop_config

N = 48


def skewed(router: str):
    """Every other request is 16x longer (prompt and output), arriving faster than one replica serves.
    Round robin with 2 replicas sends every long request to replica 0."""
    prompts = [3200 if i % 2 == 0 else 200 for i in range(N)]
    outputs = [480 if i % 2 == 0 else 30 for i in range(N)]
    arrivals = [i * 0.05 for i in range(N)]
    cfg = trace_config(prompts, outputs, arrivals)
    return run_simulation(with_value(cfg, "deployment", {"replicas": 2, "router": router}), check_invariants=True)


def token_share(res):
    """Fraction of all prompt+output tokens served by the busier replica (0.5 = perfect balance)."""
    req = res.requests
    tokens = req.prompt_tokens + req.output_tokens
    per = np.array([tokens[res.instance_of == i].sum() for i in range(2)])
    return per.max() / per.sum()


@pytest.fixture(scope="module")
def runs():
    return {p: skewed(p) for p in ("round_robin", "least_outstanding", "least_kv", "prefix_affinity")}


def test_round_robin_splits_counts_evenly_but_not_work(runs):
    rr = runs["round_robin"]
    counts = np.bincount(rr.instance_of, minlength=2)
    assert abs(int(counts[0]) - int(counts[1])) <= 1
    assert np.all(rr.instance_of[::2] == 0)  # all long requests on replica 0
    assert token_share(rr) > 0.9


@pytest.mark.parametrize("policy", ["least_outstanding", "least_kv"])
def test_load_aware_policies_spread_the_work(runs, policy):
    assert token_share(runs[policy]) < 0.6 < 0.9 < token_share(runs["round_robin"])
    # The long requests no longer queue behind each other on one replica: the tail and the run end sooner.
    assert runs[policy].summary.e2e_p99_s < 0.9 * runs["round_robin"].summary.e2e_p99_s
    assert runs[policy].summary.makespan_s < 0.95 * runs["round_robin"].summary.makespan_s


def test_prefix_affinity_without_prefix_caching_is_least_outstanding(runs):
    assert np.array_equal(runs["prefix_affinity"].instance_of, runs["least_outstanding"].instance_of)


class _Stub:
    def __init__(self, outstanding, usage):
        self.num_outstanding = outstanding
        self.kv = type("KV", (), {"usage": usage})()


def test_choices_and_ties():
    engines = [_Stub(3, 0.5), _Stub(1, 0.9), _Stub(1, 0.1)]
    lo = Router("least_outstanding", 3)
    assert lo.choose(engines, 0) == 1  # tie on 1 -> the next in turn from instance 0
    assert lo.choose(engines, 1) == 2  # same tie, the turn has moved past 1
    assert Router("least_kv", 3).choose(engines, 0) == 2
    assert Router("least_kv", 3).choose(engines, 0, eligible=[0, 1]) == 0
    rr = Router("round_robin", 3)
    assert [rr.choose(engines, r) for r in range(4)] == [0, 1, 2, 0]
    assert rr.choose(engines, 4, eligible=[0, 2]) == 2  # next in turn among the eligible
    # the cache-aware choice itself: test_prefix_affinity.py; with no workload to read prefixes from, by load
    assert Router("prefix_affinity", 3).choose(engines, 0) == 1


class _Count:
    def __init__(self, outstanding):
        self.num_outstanding = outstanding


@given(st.lists(st.tuples(st.integers(0, 6), st.integers(0, 4), st.integers(0, 4)), min_size=1, max_size=6),
       st.integers(0, 5))
def test_bounds_settle_the_choice_only_when_every_count_within_them_agrees(spec, start):
    # spec: per instance (low, width, offset of the true count inside [low, low + width])
    bounds = [(lo, lo + w) for lo, w, _ in spec]
    counts = [lo + min(off, w) for lo, w, off in spec]
    n = len(spec)
    early, exact = Router("least_outstanding", n), Router("least_outstanding", n)
    early.turn = exact.turn = start % n
    pick, rivals = early.choose_by_bounds(bounds)
    if pick is None:
        assert rivals and early.turn == start % n  # unsettled: nothing consumed
    else:
        assert pick == exact.choose([_Count(c) for c in counts], 0) and early.turn == exact.turn
    points, ref = Router("least_outstanding", n), Router("least_outstanding", n)
    points.turn = ref.turn = start % n
    assert points.choose_by_bounds([(c, c) for c in counts])[0] == ref.choose([_Count(c) for c in counts], 0)


@pytest.mark.parametrize("seed", range(6))
def test_least_outstanding_routes_as_if_every_replica_reached_each_arrival(seed):
    # the early choice from count bounds (only ambiguous replicas run up to the arrival) is the choice with
    # every replica at the arrival: same routing, same request times, same ticks
    from tests.sim_core.cluster.test_deployment import assert_routes_as_if_every_replica_reached_each_arrival
    
    cfg = open_loop_config(seed, "gamma")
    cfg = with_value(cfg, "deployment", {"replicas": 2 + seed % 3, "router": "least_outstanding"})
    assert_routes_as_if_every_replica_reached_each_arrival(cfg)
