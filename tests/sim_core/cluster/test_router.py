"""Routing policies on a skewed load: what each one balances, as stated in router.py."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sim_core import load_preset, run_simulation
from sim_core.cluster.router import Router
from sim_core.lessons import load_lessons
from sim_core.sweep import with_value
from tests.conftest import trace_config
from tests.documents import prose
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


def test_the_readme_quotes_the_router_presets_as_they_run():
    # Regression: "Beyond one engine" quoted least_kv 1.11 s exact / 1.90 s stale vs round robin 1.14 s and prefix
    # affinity 51.7 %, 0.70 -> 0.32 s, while the presets ran 1.26 / 2.27 / 1.29 s and 51.9 %, 0.81 -> 0.31 s (the
    # router lesson, tested, had been restated; the README had not). Each number recomputed and looked up.
    text = prose("cluster")  # (the README's section in full, docs/cluster.md)
    runs: dict = {}

    def run(preset: str, router: str, refresh_s: float | None = None):
        cfg = with_value(load_preset(preset), "deployment.router", router)
        if refresh_s is not None:
            cfg = with_value(cfg, "deployment.state_refresh_s", refresh_s)
        return runs.setdefault((preset, router, refresh_s), run_simulation(cfg).summary)

    s = lambda x: f"{x:.2f} s"  # noqa: E731
    pct = lambda x: f"{x * 100:.1f} %"  # noqa: E731
    # (review 27: one seed's 1.26 -> 2.27 s became 2.24 -> 1.94 s after the H100 refit; quoted over seeds 0-5 since)
    seeds = range(6)
    base = load_preset("cluster-router-4xh100-llama8b")
    p90 = {(r, f): [run_simulation(with_value(with_value(with_value(base, "deployment.router", r), "seed", seed),
                                              "deployment.state_refresh_s", f)).summary.ttft_p90_s for seed in seeds]
           for r, f in (("least_kv", 0.0), ("least_kv", 0.05), ("round_robin", 0.05), ("least_outstanding", 0.05))}  # fmt: skip
    assert base.deployment.state_refresh_s == 0.05  # (the preset's refresh: the "50 ms" quoted)
    exact, stale = p90["least_kv", 0.0], p90["least_kv", 0.05]
    mean = lambda v: s(sum(v) / len(v))  # noqa: E731
    worse = sum(b > a for a, b in zip(exact, stale))
    assert (f"least_kv's TTFT p90 averages {mean(exact)} exact and {mean(stale)} with the 50 ms refresh (worse on "
            f"{worse} of 6 seeds), against round robin's {mean(p90['round_robin', 0.05])} "
            f"and least outstanding's {mean(p90['least_outstanding', 0.05])}") in text  # fmt: skip
    # the claim, here and in the router lesson ("the stale view adds to it on most seeds"): lagging, and staleness adds
    assert mean(stale) > mean(exact) > mean(p90["round_robin", 0.05]) and worse > len(seeds) / 2
    lesson = next(x for x in load_lessons() if x.id == "router-policies")
    assert "queued prompts hold no KV yet, and the stale view adds to it on most seeds" in lesson.answer
    # (seed means since session 27: on one seed prefix_affinity and cache_aware swapped places with each fix, tied over seeds)
    prefix = load_preset("cluster-prefix-4xh100-llama8b")

    def means(router: str, refresh_s: float | None = None):
        cfg = with_value(prefix, "deployment.router", router)
        cfg = cfg if refresh_s is None else with_value(cfg, "deployment.state_refresh_s", refresh_s)
        runs_ = [run_simulation(with_value(cfg, "seed", seed)).summary for seed in seeds]
        return tuple(sum(getattr(x, k) for x in runs_) / len(runs_) for k in ("prefix_hit_rate_tokens", "ttft_p90_s", "ttft_p99_s"))

    rr, pa, exact, ca, lo = (means(r, f) for r, f in (("round_robin", None), ("prefix_affinity", None), ("prefix_affinity", 0.0),
                                                        ("cache_aware", None), ("least_outstanding", None)))  # fmt: skip
    assert (f"over seeds 0-5 (means) prefix hit rate {pct(rr[0])} → {pct(pa[0])} of prompt tokens, TTFT p90 {rr[1]:.2f} → "
            f"{s(pa[1])}, p99 {rr[2]:.2f} → {s(pa[2])}") in text  # fmt: skip
    assert (f"exact: {pct(exact[0])}, {s(exact[1])}, {s(exact[2])}; cache_aware {pct(ca[0])}, {s(ca[1])}, {s(ca[2])}; "
            f"least outstanding {pct(lo[0])}, {s(lo[1])})") in text  # fmt: skip
    # and the README's short section, the means and seed 0's (what `run` of the preset gives: a newcomer read the means
    # as one run's, session 52's audit), TTFT p90 halved
    one = {r: run_simulation(with_value(with_value(prefix, "deployment.router", r), "seed", 0)).summary
           for r in ("round_robin", "prefix_affinity")}  # fmt: skip
    rr0, pa0 = one["round_robin"], one["prefix_affinity"]
    assert (f"lifts prefix hits {rr[0] * 100:.1f} → {pct(pa[0])} of prompt tokens, TTFT p90 {rr[1]:.2f} → {s(pa[1])} "
            f"(means of seeds 0-5; seed 0: {rr0.prefix_hit_rate_tokens * 100:.1f} → {pct(pa0.prefix_hit_rate_tokens)}, "
            f"{rr0.ttft_p90_s:.2f} → {s(pa0.ttft_p90_s)})") in prose() and pa[1] < 0.55 * rr[1]  # fmt: skip
    # "cache_aware beats prefix_affinity on TTFT at the same hit rate" (since its fallback is SGLang's smallest tree; with
    # least outstanding there the two tied: the router lesson said "over seeds 0-5 the two rules' TTFT p90 differ by under
    # 0.01 s")
    assert ca[1] < pa[1] and ca[2] < pa[2] and abs(ca[0] - pa[0]) < 0.01
    assert f"over seeds 0-5 {s(ca[1])} against prefix_affinity's {s(pa[1])}" in lesson.answer


def test_the_router_presets_burst_and_a_load_they_sustain_read_as_the_documents_say():
    # a browser review (session 68): cluster-router-4xh100-llama8b opened with "100% meet SLOs" above "it looks
    # overloaded" and said nothing of it; 400 requests at 60 req/s are a burst past what the four finish. Its
    # description and docs/cluster.md now say so, and give a load they sustain, where the routers' order is the same
    # and the stale view adds about a tenth; the prefix preset's gap is much of it the caches' warm-up
    from sim_core.presets import read_preset_data

    s = lambda x: f"{x:.2f} s"  # noqa: E731
    text, readme = prose("cluster"), prose()
    base = load_preset("cluster-router-4xh100-llama8b")
    described = read_preset_data("scenarios", "cluster-router-4xh100-llama8b")["description"]
    burst = run_simulation(with_value(base, "workload.num_requests", 3500)).summary.steady
    assert burst.arrival_rate_per_s > 55 and burst.requests_per_s < 0.8 * burst.arrival_rate_per_s
    assert f"faster than the four finish them (about {burst.requests_per_s:.0f} req/s)" in described
    assert f"({burst.requests_per_s:.0f} req/s in the steady window of 3,500 such requests)" in text
    assert "workload.arrival.rate_per_s = 40 and workload.num_requests = 3000" in described
    sustained = with_value(with_value(base, "workload.arrival.rate_per_s", 40.0), "workload.num_requests", 3000)
    assert run_simulation(sustained).summary.steady.note is None  # (it settles: no "Too short to say")
    p90 = {(r, f): [run_simulation(with_value(with_value(with_value(sustained, "deployment.router", r), "seed", seed),
                                              "deployment.state_refresh_s", f)).summary.ttft_p90_s for seed in range(6)]
           for r, f in (("least_kv", 0.0), ("least_kv", 0.05), ("round_robin", 0.05), ("least_outstanding", 0.05))}  # fmt: skip
    mean = {k: sum(v) / len(v) for k, v in p90.items()}
    worse = sum(b > a for a, b in zip(p90["least_kv", 0.0], p90["least_kv", 0.05]))
    assert (f"least_kv {s(mean['least_kv', 0.0])} exact and {s(mean['least_kv', 0.05])} with the 50 ms refresh (worse on "
            f"{worse} of 6 seeds), round robin {s(mean['round_robin', 0.05])}, least outstanding "
            f"{s(mean['least_outstanding', 0.05])}") in text  # fmt: skip
    assert min(mean["least_kv", 0.0], mean["least_kv", 0.05]) > mean["round_robin", 0.05] > mean["least_outstanding", 0.05]
    # "the stale view still adds about a tenth" (+10 % since vllm-v1's session-75 refit; it read 0.98 s either way before)
    assert 0.05 < mean["least_kv", 0.05] / mean["least_kv", 0.0] - 1 < 0.15
    prefix = with_value(load_preset("cluster-prefix-4xh100-llama8b"), "workload.num_requests", 5000)
    rr, pa = (run_simulation(with_value(prefix, "deployment.router", r)).summary for r in ("round_robin", "prefix_affinity"))
    assert (f"Over 5,000 requests (seed 0) round robin → prefix_affinity reads {rr.prefix_hit_rate_tokens:.0%} → "
            f"{pa.prefix_hit_rate_tokens:.0%} of prompt tokens, TTFT p90 {rr.ttft_p90_s:.2f} → {s(pa.ttft_p90_s)}, p99 "
            f"{rr.ttft_p99_s:.2f} → {s(pa.ttft_p99_s)}").replace("%", " %") in text  # fmt: skip
    assert (f"much of it the caches' warm-up: over 5,000 requests {rr.prefix_hit_rate_tokens * 100:.0f} → "
            f"{pa.prefix_hit_rate_tokens:.0%}, {rr.ttft_p90_s:.2f} → {s(pa.ttft_p90_s)}").replace("%", " %") in readme  # fmt: skip


def test_the_routers_prefix_threshold_is_the_one_its_description_states():
    # (config.py's description typed out "> 50 %" beside the router's constant; the load test's thresholds likewise)
    from sim_core.cluster import router
    from sim_core.config import BALANCE_ABS_THRESHOLD, BALANCE_REL_THRESHOLD, CACHE_THRESHOLD, DeploymentConfig

    assert router.CACHE_THRESHOLD is CACHE_THRESHOLD and router.BALANCE_ABS_THRESHOLD is BALANCE_ABS_THRESHOLD
    assert router.BALANCE_REL_THRESHOLD is BALANCE_REL_THRESHOLD
    text = DeploymentConfig.model_fields["router"].description
    assert f"covers > {CACHE_THRESHOLD * 100:g} % of the" in text
    assert f"differ by <= {BALANCE_ABS_THRESHOLD} or the most is <= {BALANCE_REL_THRESHOLD:g} x the fewest" in text
    # SGLang's launchers' defaults (sgl-router src/main.rs CliArgs, router_args.py RouterArgs), not its library's
    assert (CACHE_THRESHOLD, BALANCE_ABS_THRESHOLD, BALANCE_REL_THRESHOLD) == (0.3, 64, 1.5)
