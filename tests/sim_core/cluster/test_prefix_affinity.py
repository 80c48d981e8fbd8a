"""Prefix caching in a deployment (one cache per replica, or per prefill instance) and the cache-aware
router (SGLang's cache_aware policy, reading each engine's actual cache)."""

from __future__ import annotations

import numpy as np
import pytest

from sim_core import run_simulation
from sim_core.cluster import Deployment
from sim_core.cluster.result import build_result
from sim_core.cluster.router import BALANCE_ABS_THRESHOLD, CACHE_THRESHOLD, Router
from sim_core.presets import load_preset
from sim_core.sweep import with_value
from sim_core.workload import generate_workload
from tests.sim_core.cluster.support import open_loop_config, run_checking_invariants, with_shared_prefixes
from tests.sim_core.cluster.test_deployment import assert_cluster_invariants, assert_same_run, deploy


def prefix_hit_rates(routers, replicas: int = 4) -> dict[str, float]:
    """Prompt-token hit rate of `shared_prompts()` over `replicas` replicas, per router (runs must finish)."""
    hit = {}
    for router in routers:
        res = run_simulation(deploy(shared_prompts(), {"replicas": replicas, "router": router}), check_invariants=True)
        assert res.summary.stopped_reason is None
        hit[router] = res.summary.prefix_hit_rate_tokens
    return hit


def shared_prompts(num_prompts: int = 64, num_requests: int = 600, rate: float = 30.0):
    """90 % of requests start with one of `num_prompts` 2,000-token system prompts (issue 12's preset)."""
    cfg = load_preset("shared-system-prompt-h100-llama8b")
    for path, value in (("kv_cache.enable_prefix_caching", True), ("workload.num_requests", num_requests),
                        ("workload.arrival.rate_per_s", rate), ("workload.shared_prefix.num_system_prompts", num_prompts)):
        cfg = with_value(cfg, path, value)  # fmt: skip
    return cfg


@pytest.mark.parametrize("case", ["shared-system-prompt-h100-llama8b", "multi-turn-chat-h100-llama8b", "trace-mooncake-h100-llama8b"])
def test_one_replica_with_prefix_caching_is_the_single_engine_bit_for_bit(case):
    cfg = with_value(load_preset(case), "kv_cache.enable_prefix_caching", True)
    cfg = with_value(cfg, "workload.sessions.closed_loop", False)  # a deployment sends turns at fixed times (issue 12)
    cfg = with_value(cfg, "workload.num_requests", min(cfg.workload.num_requests, 150)) if cfg.workload.trace is None else cfg
    single = run_simulation(cfg)
    for router in ("round_robin", "prefix_affinity", "cache_aware"):
        dep = run_simulation(deploy(cfg, {"replicas": 1, "router": router}), check_invariants=True)
        assert_same_run(single, dep)
        assert dep.summary.prefix_hit_rate_tokens == single.summary.prefix_hit_rate_tokens > 0


def test_prefix_affinity_beats_round_robin_on_hit_rate_with_shared_system_prompts():
    # 64 system prompts over 4 replicas: round robin makes every prompt miss once on each replica, the
    # cache-aware router sends a prompt back to the replica that holds it
    hit = prefix_hit_rates(("round_robin", "least_outstanding", "prefix_affinity"))
    assert hit["prefix_affinity"] > hit["round_robin"] + 0.05
    assert hit["prefix_affinity"] > hit["least_outstanding"] + 0.05


def test_deployment_hit_rate_sums_hits_over_replicas():
    res = run_simulation(deploy(shared_prompts(num_requests=200), {"replicas": 3, "router": "prefix_affinity"}))
    caches = [p.result.summary for p in res.instances]
    saved = sum(s.prefill_tokens_saved for s in caches)
    assert res.summary.prefill_tokens_saved == saved > 0
    asked = sum(s.prefill_tokens_saved / s.prefix_hit_rate_tokens for s in caches if s.prefix_hit_rate_tokens)
    assert res.summary.prefix_hit_rate_tokens == pytest.approx(saved / asked)


@pytest.mark.parametrize("router", ["round_robin", "prefix_affinity"])
def test_prefill_pool_caches_prefixes_and_invariants_hold(router):
    cfg = deploy(shared_prompts(num_prompts=8, num_requests=200, rate=10.0), {"router": router, "disaggregation": {
        "prefill": {"replicas": 2}, "decode": {"replicas": 1}, "link": {"bandwidth_gb_per_s": 50.0}}})  # fmt: skip
    run = Deployment(cfg, check_invariants=True)
    run.run()
    res = build_result(run)
    assert_cluster_invariants(res)
    assert res.summary.stopped_reason is None and res.summary.num_finished == 200
    assert [x.engine.prefix is not None for x in run.instances] == [True, True, False]  # decode gets whole KV
    assert res.summary.prefix_hit_rate_tokens > 0.3
    assert all(x.engine.kv.num_used == 0 for x in run.instances)


class _Stub:
    def __init__(self, outstanding: int, cached: int):
        self.num_outstanding, self._cached = outstanding, cached

    def cached_prefix_blocks(self, source, r):
        return self._cached


def test_cache_aware_router_follows_the_cache_unless_load_is_imbalanced():
    w = generate_workload(shared_prompts(num_requests=10).workload, np.random.default_rng(0))
    r = int(np.argmax(w.prompt_tokens))  # a long prompt: many full blocks
    full = (int(w.prompt_tokens[r]) - 1) // 16
    route = lambda engines: Router("prefix_affinity", len(engines), w, 16).choose(engines, r)  # noqa: E731
    assert route([_Stub(3, 0), _Stub(5, full)]) == 1  # the longest cached prefix, though busier
    # (the launcher's threshold, 0.3: its library default, 0.5, once stood here)
    assert route([_Stub(3, 0), _Stub(5, int(full * CACHE_THRESHOLD))]) == 0  # at most the threshold: least outstanding
    assert route([_Stub(3, 0), _Stub(5, int(full * CACHE_THRESHOLD) + 1)]) == 1  # just over it: the cache
    busy = BALANCE_ABS_THRESHOLD + 10
    assert route([_Stub(2, 0), _Stub(busy, full)]) == 0  # imbalanced (max - min > 64, max > 1.5 x min): by load
    assert route([_Stub(busy - 5, 0), _Stub(busy, full)]) == 1  # balanced again: the cache wins


@pytest.mark.parametrize("seed", range(6))
def test_invariants_hold_with_prefix_caching_on_random_configs(seed):
    
    cfg = with_shared_prefixes(open_loop_config(seed))
    router = ["prefix_affinity", "least_outstanding", "round_robin"][seed % 3]
    for dep in ({"replicas": 3, "router": router},
                {"router": router, "disaggregation": {"prefill": {"replicas": 2}, "decode": {"replicas": 1}}}):  # fmt: skip
        run_checking_invariants(cfg, dep)
