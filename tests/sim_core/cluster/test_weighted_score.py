"""The weighted_score router (llm-d's default endpoint picker: 2 x queue + 2 x KV + 3 x prefix, router.py): its
choice on hand-built states, and deployments routed by it."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim_core import run_simulation
from sim_core.cluster import Deployment
from sim_core.cluster.deployment import _Running
from sim_core.cluster.result import build_result
from sim_core.cluster.router import Router
from sim_core.config import KV_SCORE_WEIGHT, MAX_PREFIX_BLOCKS, PREFIX_SCORE_WEIGHT, QUEUE_SCORE_WEIGHT, STATE_ROUTERS
from tests.conftest import trace_config
from tests.sim_core.cluster.support import open_loop_config, run_checking_invariants, with_shared_prefixes
from tests.sim_core.cluster.test_deployment import assert_cluster_invariants, deploy
from tests.sim_core.cluster.test_prefix_affinity import prefix_hit_rates, shared_prompts
from tests.sim_core.cluster.test_state_refresh import _assert_coalescing_free, _closed_loop

BS = 16


class _Stub:
    """An instance as the router reads it: waiting requests, KV usage, leading prompt blocks cached."""

    def __init__(self, waiting: int = 0, usage: float = 0.0, cached: int = 0, outstanding: int = 0):
        self.num_waiting, self.num_outstanding, self._cached = waiting, outstanding, cached
        self.kv = SimpleNamespace(usage=usage)

    def cached_prefix_blocks(self, source, r):
        return self._cached


def _router(n: int, prompt_tokens: int = 1 + 100 * BS) -> Router:
    """A router over one request whose prompt has (prompt_tokens - 1) // BS full blocks (100 by default)."""
    return Router("weighted_score", n, SimpleNamespace(prompt_tokens=np.array([prompt_tokens])), BS)


def _scores(engines, prompt_tokens: int = 1 + 100 * BS) -> list[float]:
    return _router(len(engines), prompt_tokens)._weighted_scores(engines, 0, list(range(len(engines))))


def test_the_queue_score_is_min_max_normalised_and_one_when_all_equal():
    # queue.go: (max - its) / (max - min); every count equal scores 1 ("a neutral score")
    assert _scores([_Stub(4), _Stub(0), _Stub(2)]) == pytest.approx([QUEUE_SCORE_WEIGHT * q + KV_SCORE_WEIGHT for q in (0, 1, 0.5)])
    assert _scores([_Stub(3), _Stub(3), _Stub(3)]) == [QUEUE_SCORE_WEIGHT + KV_SCORE_WEIGHT] * 3
    assert _router(3).choose([_Stub(4), _Stub(0), _Stub(2)], 0) == 1


def test_the_kv_score_is_the_free_share():
    usage = (0.9, 0.2, 0.5)
    assert _scores([_Stub(1, u) for u in usage]) == pytest.approx([QUEUE_SCORE_WEIGHT + KV_SCORE_WEIGHT * (1 - u) for u in usage])
    assert _router(3).choose([_Stub(1, u) for u in usage], 0) == 1


def test_the_prefix_score_is_the_cached_share_of_the_prompts_full_blocks():
    cached = (0, 100, 50)
    assert _scores([_Stub(cached=c) for c in cached]) == pytest.approx(
        [QUEUE_SCORE_WEIGHT + KV_SCORE_WEIGHT + PREFIX_SCORE_WEIGHT * c / 100 for c in cached])
    assert _router(3).choose([_Stub(cached=c) for c in cached], 0) == 1
    # a prompt without a full block scores 0 everywhere (llm-d hashes no block of it)
    assert _scores([_Stub(cached=0), _Stub(cached=0)], prompt_tokens=BS) == [QUEUE_SCORE_WEIGHT + KV_SCORE_WEIGHT] * 2


def test_the_prefix_match_and_the_prompt_are_capped_at_the_scorers_block_limit():
    # llm-d hashes at most 256 leading blocks: a prompt of 400 full blocks with 256 of them cached scores 1, as one
    # with all 400 cached; 200 of them, 200 / 256
    long = 1 + 400 * BS
    full = QUEUE_SCORE_WEIGHT + KV_SCORE_WEIGHT + PREFIX_SCORE_WEIGHT
    got = _scores([_Stub(cached=MAX_PREFIX_BLOCKS), _Stub(cached=400), _Stub(cached=200)], long)
    assert got == pytest.approx([full, full, QUEUE_SCORE_WEIGHT + KV_SCORE_WEIGHT + PREFIX_SCORE_WEIGHT * 200 / MAX_PREFIX_BLOCKS])


def test_the_weights_trade_a_cache_hit_against_load():
    # A holds the whole prompt but has the longest queue: 0 + 2 (1 - u) + 3 against B's 2 + 2 x 0.9 + 0
    hit, idle = _Stub(waiting=5, usage=0.9, cached=100), _Stub(waiting=0, usage=0.1)
    assert _router(2).choose([hit, idle], 0) == 1  # 3.2 < 3.8: load wins
    hit.kv.usage = 0.5
    assert _router(2).choose([hit, idle], 0) == 0  # 4.0 > 3.8: the cache wins


def test_ties_go_to_the_next_in_turn_and_eligibility_holds():
    router = _router(3)
    same = [_Stub(1, 0.5, 10) for _ in range(3)]
    assert [router.choose(same, 0) for _ in range(4)] == [0, 1, 2, 0]  # (llm-d: a random one of the tied)
    # instance 0 scores best but is not eligible (decode back-pressure's rule); 1 and 2 tie: the next in turn from 0
    assert _router(3).choose([_Stub(0), _Stub(9), _Stub(9)], 0, eligible=[1, 2]) == 1


def test_without_a_workload_it_is_least_outstanding_and_reads_no_kv():
    # the decode pool's choice (no prompt to match), as prefix_affinity's
    router = Router("weighted_score", 3)
    assert not router.reads_kv_usage and _router(3).reads_kv_usage and "weighted_score" in STATE_ROUTERS
    assert router.choose([_Stub(0, 0.0, outstanding=4), _Stub(9, 0.9, outstanding=1), _Stub(0, 0.0, outstanding=2)], 0) == 1


def test_the_same_config_routes_and_runs_the_same():
    cfg = deploy(shared_prompts(num_prompts=8, num_requests=150, rate=40.0), {"replicas": 3, "router": "weighted_score"})
    a, b = run_simulation(cfg), run_simulation(cfg)
    assert np.array_equal(a.instance_of, b.instance_of)
    assert np.array_equal(a.requests.finish_s, b.requests.finish_s, equal_nan=True)


def test_it_balances_a_skewed_load():
    # test_router.skewed: every other request 16x longer; round robin sends every long one to replica 0
    from tests.sim_core.cluster.test_router import skewed, token_share

    rr, ws = skewed("round_robin"), skewed("weighted_score")
    assert token_share(ws) < 0.6 < 0.9 < token_share(rr)
    assert ws.summary.e2e_p99_s < 0.9 * rr.summary.e2e_p99_s


def test_it_follows_prefix_hits():
    hit = prefix_hit_rates(("round_robin", "weighted_score"))
    assert hit["weighted_score"] > hit["round_robin"] + 0.05


@pytest.mark.parametrize("refresh_s", [0.0, 0.05, 0.7])
def test_routing_and_runs_do_not_depend_on_coalescing(refresh_s):
    cfg = shared_prompts(num_prompts=8, num_requests=150, rate=40.0)
    _assert_coalescing_free(deploy(cfg, {"replicas": 3, "router": "weighted_score", "state_refresh_s": refresh_s}))


def test_within_one_refresh_interval_only_the_requests_sent_count():
    # Every arrival falls in the first interval: the router sees the engines at t = 0 (empty: no queue, no KV, no
    # cache) plus the requests it sent since, which it counts as waiting, so it deals them out in turn whatever their
    # size and shared prefixes; with exact state it follows cached prefixes and queues.
    cfg = shared_prompts(num_prompts=2, num_requests=12, rate=5.0)
    stale = run_simulation(deploy(cfg, {"replicas": 3, "router": "weighted_score", "state_refresh_s": 60.0}))
    assert float(stale.requests.arrival_s.max()) < 60.0 and stale.instance_of.tolist() == [i % 3 for i in range(12)]
    exact = run_simulation(deploy(cfg, {"replicas": 3, "router": "weighted_score", "state_refresh_s": 0.0}))
    assert exact.instance_of.tolist() != stale.instance_of.tolist()


@pytest.mark.parametrize("refresh_s", [0.05, 0.5])
def test_every_arrival_of_an_interval_is_routed_on_the_state_at_its_start(refresh_s):
    # What the router read at each choice: within one refresh interval no engine steps, KV usage and cached prefixes
    # stay what they were at the interval's start, and each waiting count grows by the requests sent there meanwhile;
    # every busy engine has reached the interval's start (an idle one waits for its next arrival, which is later)
    cfg = deploy(shared_prompts(num_prompts=8, num_requests=150, rate=40.0),
                 {"replicas": 3, "router": "weighted_score", "state_refresh_s": refresh_s})
    dep = Deployment(cfg, check_invariants=True)
    choose, seen = dep.router.choose, []

    def recording(engines, r, eligible=None):
        instant = np.floor(float(dep.arrival_s[r]) / refresh_s) * refresh_s
        for x, e in zip(dep.front, engines):
            # (an idle one's state is its state then; the one routing inside its run, `_route_mid_run_exact`, is at the
            # instant by construction: its clock moves when the run pauses or ends)
            in_run = isinstance(e, _Running) and e._waiting is not None
            assert x.engine.st.now_s >= instant or not x.engine.is_busy or in_run
        state = ([e.num_waiting for e in engines], [e.kv.usage for e in engines], [e.rec.num_ticks for e in dep._engines])
        pick = choose(engines, r, eligible)
        seen.append((instant, pick, *state))
        return pick

    dep.router.choose = recording
    dep.run()
    assert len(seen) == cfg.workload.num_requests and len({s[0] for s in seen}) > 5
    for (t0, pick, waiting, usage, ticks), (t1, _, waiting1, usage1, ticks1) in zip(seen, seen[1:]):
        if t1 == t0:  # (the next arrival of the same interval)
            assert usage1 == usage and ticks1 == ticks
            assert waiting1 == [w + (i == pick) for i, w in enumerate(waiting)]
    assert_cluster_invariants(build_result(dep))


def test_closed_loop_routes_on_exact_state_whatever_the_refresh():
    # as prefix_affinity: its view at a refresh instant would be each engine's whole prefix cache
    a, b = run_simulation(_closed_loop("weighted_score", 0.5)), run_simulation(_closed_loop("weighted_score", 0.0))
    assert np.array_equal(a.instance_of, b.instance_of) and a.summary.num_finished == 90


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 40), replicas=st.integers(1, 4), refresh_s=st.sampled_from([0.0, 0.05, 0.4]),
       disaggregated=st.booleans(), prefix=st.booleans())
def test_deployments_keep_their_invariants(seed, replicas, refresh_s, disaggregated, prefix):
    # the engine tests' random configs (test_prefix_affinity's invariants test, for this router), replicas or xPyD
    cfg = with_shared_prefixes(open_loop_config(seed)) if prefix else open_loop_config(seed)
    dep = {"router": "weighted_score", "state_refresh_s": refresh_s}
    dep |= ({"disaggregation": {"prefill": {"replicas": replicas}, "decode": {"replicas": 1 + seed % 2}}} if disaggregated
            else {"replicas": replicas})  # fmt: skip
    run_checking_invariants(cfg, dep)


def test_one_replica_is_the_single_engine():
    cfg = shared_prompts(num_prompts=8, num_requests=150, rate=40.0)
    from tests.sim_core.cluster.test_deployment import assert_same_run

    for refresh_s in (0.0, 0.3):
        assert_same_run(run_simulation(cfg), run_simulation(deploy(cfg, {"replicas": 1, "router": "weighted_score",
                                                                          "state_refresh_s": refresh_s})))  # fmt: skip
