"""Planner: the cheapest configuration it returns meets the SLOs on its own, nothing cheaper does."""

from typing import get_args

import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs
from pydantic import ValidationError

from sim_core.backend import LocalBackend
from sim_core.config import Router, format_validation_error
from sim_core.engine import run_simulation
from sim_core.planner import (CalibrationBand, Family, PlanSpec, default_prices, deployment_config, family_config, pareto_front,
                              plan, replica_config, saturation_config)
from sim_core.presets import PresetError, config_from_dict, list_presets, load_preset
from sim_core.sweep import meets_objective
from tests.conftest import make_config


def _base():
    return make_config(workload__prompt_tokens={"dist": "fixed", "mean": 512, "min": 1, "max": 512},
                       workload__output_tokens={"dist": "lognormal", "mean": 64, "min": 1, "max": 256, "sigma": 0.5},
                       slo__ttft_s=0.5, slo__tpot_s=0.05)  # fmt: skip


SPEC = PlanSpec(target_rate_per_s=60.0, gpus=("a100-80gb", "h100-sxm"), tp_degrees=(1, 2), max_replicas=4,
                engines=("vllm-v1", "tensorrt-llm-max-utilization"), num_results=3, evaluation="deployment")  # fmt: skip


def test_cheapest_plan_meets_the_slos_and_nothing_cheaper_does():
    """The returned deployment, simulated on its own through the cluster, meets the SLOs; every
    cheaper deployment in the search space (brute force) does not."""
    base = _base()
    p = plan(base, SPEC, with_band=False)
    best = p.rows[0]
    dep = deployment_config(family_config(base, best.family), 60.0, best.size, SPEC.router)
    assert best.config == dep and (best.size[0] == 1 or dep.deployment.replicas == best.size[0])
    alone = run_simulation(dep).summary
    assert meets_objective(alone, dep, SPEC.objective)
    prices = SPEC.prices()
    for gpu in SPEC.gpus:
        for tp in SPEC.tp_degrees:
            for engine in SPEC.engines:
                for r in range(1, SPEC.max_replicas + 1):
                    if prices[gpu] * tp * r >= best.usd_per_hour:
                        continue
                    try:
                        cfg = deployment_config(family_config(base, Family(gpu, tp, engine, None, None)), 60.0, (r,))
                        s = run_simulation(cfg).summary
                    except Exception:  # does not fit in memory: not a candidate
                        continue
                    assert not meets_objective(s, cfg, SPEC.objective), (gpu, tp, engine, r)
    assert [r.usd_per_hour for r in p.rows] == sorted(r.usd_per_hour for r in p.rows)
    assert all(r.headroom(60.0) is not None and r.headroom(60.0) >= 0 for r in p.rows)
    assert sum(p.pruned.values()) + len(p.evaluated) == p.num_candidates


def test_at_one_price_the_row_with_more_headroom_comes_first():
    # `plan --rate 50` listed 3x H100 TP1 with SGLang (+25 %) above vLLM V1 (+26 %) at the same $9.00/h: ties were
    # ordered by name. Both evaluations that bisect headroom order a price's rows by capacity.
    base = _base()
    spec = SPEC.model_copy(update={"num_results": 6})
    for evaluation in ("deployment", "one_replica"):
        rows = plan(base, spec.model_copy(update={"evaluation": evaluation}), with_band=False).rows
        keys = [(r.usd_per_hour, -r.capacity_per_s) for r in rows]
        assert keys == sorted(keys) and len({r.usd_per_hour for r in rows}) < len(rows), (evaluation, keys)


def test_one_replica_evaluation_is_the_share_of_a_random_router():
    p = plan(_base(), SPEC.model_copy(update={"evaluation": "one_replica", "num_results": 1}), with_band=False)
    best = p.rows[0]
    assert best.config.deployment is None
    assert best.config.workload.arrival.rate_per_s == pytest.approx(60.0 / best.num_replicas)
    assert best.goodput_per_s == pytest.approx(best.num_replicas * best.summary.steady.goodput_requests_per_s)


def test_prefilter_confirms_its_rows_as_deployments():
    spec = SPEC.model_copy(update={"evaluation": "prefilter", "num_results": 1})
    p = plan(_base(), spec, with_band=False)
    best = p.rows[0]
    assert best.config.deployment is None or best.config.deployment.replicas == best.size[0]
    assert best.config.workload.arrival.rate_per_s == 60.0
    assert meets_objective(run_simulation(best.config).summary, best.config, spec.objective)
    exact = plan(_base(), SPEC.model_copy(update={"num_results": 1}), with_band=False).rows[0]
    assert exact.usd_per_hour <= best.usd_per_hour  # the exact search is never dearer


def test_a_prefill_decode_split_is_searched_when_asked():
    spec = PlanSpec(target_rate_per_s=40.0, gpus=("a100-80gb",), tp_degrees=(1,), max_replicas=3, engines=("vllm-v1",),
                    num_results=2, disaggregated=True, evaluation="deployment")  # fmt: skip
    p = plan(_base(), spec, with_band=False)
    splits = [r for r in p.evaluated if r.family.is_split]
    assert splits, "no xPyD candidate simulated"
    r = splits[0]
    dis = r.config.deployment.disaggregation
    assert (dis.prefill.replicas, dis.decode.replicas) == r.size and r.num_gpus == sum(r.size)
    assert r.usd_per_hour == pytest.approx(r.num_gpus * spec.prices()["a100-80gb"])
    assert "P" in r.label and "D" in r.label
    assert p.num_candidates == 3 + 3  # 1..3 replicas, and (x, y) with x + y <= 3
    assert sum(p.pruned.values()) + len(p.evaluated) == p.num_candidates
    assert not any(r.family.is_split for r in plan(_base(), spec.model_copy(update={"disaggregated": False}),
                                                    with_band=False).evaluated)  # fmt: skip


def test_costs_follow_the_formulas():
    p = plan(_base(), SPEC.model_copy(update={"num_results": 1}))
    row, t = p.rows[0], p.table()[0]
    assert row.usd_per_hour == pytest.approx(row.num_gpus * SPEC.prices()[row.family.gpu])
    assert t["usd_per_million_output_tokens"] == pytest.approx(row.usd_per_hour * 1e6 / (row.output_tokens_per_s * 3600))
    assert t["good_requests_per_usd"] == pytest.approx(row.goodput_per_s * 3600 / row.usd_per_hour)
    from sim_core import validate

    if validate.CALIBRATION_CSV.exists():  # the held-out error of sim_core/validate.py
        assert p.band.median_pct is not None and p.band.num_rows > 0
    else:
        assert p.robust(row) is None and "unavailable" in p.band.text()
    p.band = CalibrationBand(median_pct=10.0, p90_pct=30.0, num_rows=5)
    assert p.robust(row) == (row.headroom(SPEC.target_rate_per_s) >= 0.10) and "±10 %" in p.band.text()
    front = pareto_front(p.evaluated, 99)
    assert front and all(a.usd_per_hour <= b.usd_per_hour and a.latency_s("ttft", 99) > b.latency_s("ttft", 99)
                         for a, b in zip(front, front[1:]))  # fmt: skip


def test_replicas_thin_a_trace_to_its_share():
    from tests.conftest import trace_config

    cfg = trace_config([100] * 400, [10] * 400, arrivals=[i * 0.1 for i in range(400)])
    one = replica_config(cfg, 20.0, 4)
    n = one.workload.num_requests
    assert 60 < n < 140  # ~ 1 in 4
    assert one.workload.trace.arrival_s[-1] == pytest.approx(399 / 20.0, rel=0.05)  # time-scaled to 20 req/s
    assert set(saturation_config(one).workload.trace.arrival_s) == {0.0}  # saturation: every request queued at once


def test_prices_are_cited_data_and_a_missing_price_is_named():
    prices = default_prices()
    assert prices and all(p.source and p.date and p.usd_per_gpu_hour > 0 for p in prices.values())
    assert set(prices) <= set(list_presets("hardware"))
    with pytest.raises(PresetError, match="no price for GPU preset"):
        plan(_base(), PlanSpec(target_rate_per_s=1.0, gpus=("l4",)), with_band=False)


def test_the_planner_searches_up_to_the_replicas_a_deployment_allows():
    """PlanSpec.max_replicas is bounded by config.MAX_REPLICAS, as deployment.replicas and each pool's replicas are
    (the three restated 64)."""
    from sim_core.config import MAX_REPLICAS, field_info

    for loc in (("deployment", "replicas"), ("deployment", "disaggregation", "prefill", "replicas")):
        assert any(getattr(m, "le", None) == MAX_REPLICAS for m in field_info(loc).metadata)
    assert PlanSpec(target_rate_per_s=10.0, max_replicas=MAX_REPLICAS).max_replicas == MAX_REPLICAS
    with pytest.raises(ValueError, match=f"less than or equal to {MAX_REPLICAS}"):
        PlanSpec(target_rate_per_s=10.0, max_replicas=MAX_REPLICAS + 1)


def test_the_planner_offers_every_router_a_deployment_has():
    """PlanSpec.router is config.Router (one list): every router validates and reaches the deployment."""
    from typing import get_args

    from sim_core.config import Router

    base = _base()
    for router in get_args(Router):
        spec = PlanSpec(target_rate_per_s=10.0, router=router)
        assert deployment_config(base, 10.0, (2,), spec.router).deployment.router == router
    with pytest.raises(ValueError, match="session"):  # a bad name is answered with the allowed ones
        PlanSpec(target_rate_per_s=10.0, router="sticky")


def test_the_cheapest_plan_is_monotone_in_rate_slos_and_gpu_speed():
    """Sizing trends a serving engineer relies on, on the small space (exact deployment search): a higher target rate
    never makes the cheapest plan cheaper, looser SLOs never make it dearer, and an H100 at an A100's price never
    makes it dearer than A100s alone. (Checked at 10-80 req/s x three SLO pairs while reviewing; three rates here.)"""
    spec = SPEC.model_copy(update={"num_results": 1})

    with LocalBackend(2) as backend:
        slos = [(0.25, 0.03), (0.5, 0.05), (1.0, 0.1)]  # tight to loose
        costs = {(rate, slo): plan(_base().model_copy(update={"slo": _base().slo.model_copy(
            update={"ttft_s": slo[0], "tpot_s": slo[1]})}), spec.model_copy(update={"target_rate_per_s": rate}),
            backend=backend, with_band=False).rows[0].usd_per_hour for rate in (20.0, 45.0, 80.0) for slo in slos}  # fmt: skip
        for slo in slos:
            assert costs[(20.0, slo)] <= costs[(45.0, slo)] <= costs[(80.0, slo)], slo
        for rate in (20.0, 45.0, 80.0):
            assert costs[(rate, slos[0])] >= costs[(rate, slos[1])] >= costs[(rate, slos[2])], rate
        a100 = spec.model_copy(update={"target_rate_per_s": 60.0, "gpus": ("a100-80gb",)})
        both = a100.model_copy(update={"gpus": ("a100-80gb", "h100-sxm"), "prices_usd_per_gpu_hour": {
            "h100-sxm": default_prices()["a100-80gb"].usd_per_gpu_hour}})  # fmt: skip
        alone = plan(_base(), a100, backend=backend, with_band=False).rows[0]
        faster = plan(_base(), both, backend=backend, with_band=False).rows[0]
        assert faster.usd_per_hour <= alone.usd_per_hour and faster.family.gpu == "h100-sxm"


@pytest.mark.parametrize("disaggregated, evaluation", [(False, "prefilter"), (True, "prefilter"), (True, "deployment"),
                                                       (True, "one_replica")])  # fmt: skip
@pytest.mark.parametrize("max_replicas", [1, 2, 5])
def test_the_candidate_count_is_every_familys_sizes(disaggregated, evaluation, max_replicas):
    # the count the page shows (planner.num_candidates, its one source) is the space the search enumerates
    from sim_core.planner import _families, num_candidates

    spec = PlanSpec(target_rate_per_s=10, gpus=("h100-sxm", "a100-80gb"), tp_degrees=(2, 1, 2), max_replicas=max_replicas,
                    engines=("vllm-v1", "sglang"), token_budgets=(None, 512), disaggregated=disaggregated, evaluation=evaluation)
    fams = _families(spec)
    assert num_candidates(spec) == sum(len(f.sizes(max_replicas)) for f in fams)
    assert all(f.num_sizes(max_replicas) == len(f.sizes(max_replicas)) for f in fams)
    assert any(f.is_split for f in fams) == (disaggregated and evaluation != "one_replica")


class _FakeClockBackend:
    """Runs nothing: saturation probes report `rate`, points an error (each costs no fake time). `cancelled` is asked
    before every map, as a real backend does."""

    name = "fake"

    def __init__(self, rate: float = 1e6):
        self.rate = rate
        self.num_points = 0

    def map(self, fn, items, on_progress=None, cancelled=None):
        import json

        from sim_core.backend import SearchCancelled

        items = list(items)
        if cancelled and cancelled():
            raise SearchCancelled("cancelled by the backend")
        if getattr(fn, "tag", "") == "saturation":
            return [json.dumps({"rate": self.rate})] * len(items)
        self.num_points += len(items)
        return [json.dumps({"error": "not simulated here"})] * len(items)

    def close(self):
        pass


def _charged(monkeypatch, family_s: float, size_s: float) -> list[float]:
    """A fake page clock charged for the search space's setup: `family_s` per family config made, `size_s` per
    instance count priced (Family.num_gpus). Returns the clock (one float in a list)."""
    from sim_core import planner

    now_s = [0.0]
    real_config, real_gpus = planner.family_config, Family.num_gpus

    def family_config(base, fam):
        now_s[0] += family_s
        return real_config(base, fam)

    def num_gpus(self, size):
        now_s[0] += size_s
        return real_gpus(self, size)

    monkeypatch.setattr(planner, "family_config", family_config)
    monkeypatch.setattr(Family, "num_gpus", num_gpus)
    return now_s


def test_a_giant_search_stops_at_the_page_budget_while_its_families_are_built(monkeypatch):
    """Nothing asked the page's time limit while the search space was built: with every option maxed out the first
    phase spent 3.3 s on 10,240 family configs before its first run, and the P:D phase would have built ~41k (about
    0.7 ms each here). Fake clock: each family config costs 1 ms; the page allows 0.1 s."""
    from sim_core.planner import SetupCancelled

    now_s = _charged(monkeypatch, family_s=1e-3, size_s=0.0)
    budget_s = 0.1
    spec = PlanSpec(target_rate_per_s=50, gpus=tuple(default_prices()), engines=tuple(list_presets("engines")),
                    evaluation="deployment")  # 4 TP x 16 engines x every priced GPU: hundreds of families  # fmt: skip
    with pytest.raises(SetupCancelled, match="while building the search space"):
        plan(_base(), spec, backend=_FakeClockBackend(), cancelled=lambda: now_s[0] > budget_s, with_band=False)
    assert now_s[0] <= budget_s + 1e-3 + 1e-9  # stopped at the first family past the budget (it went on to all 640)


def test_a_giant_split_search_stops_at_the_page_budget_while_its_candidates_are_listed(monkeypatch):
    """The candidates were listed and sorted in full before the first run: 41k P:D families x 2,016 sizes with every
    option maxed out (minutes, gigabytes). They are made as the search asks for them, and the page's limit is asked
    at each. Fake clock: each family config costs 1 ms, each instance count priced 1 us; the page allows 0.2 s; runs
    fail at once (a failure rules out smaller counts only, so the search looks at many)."""
    from sim_core.backend import SearchCancelled

    now_s = _charged(monkeypatch, family_s=1e-3, size_s=1e-6)
    budget_s = 0.2
    spec = PlanSpec(target_rate_per_s=50, gpus=("h100-sxm",), tp_degrees=(1, 2, 4, 8), engines=("vllm-v1",),
                    token_budgets=(None, 512, 2048, 8192), max_replicas=64, disaggregated=True,
                    evaluation="deployment")  # 64 split families x 2,016 sizes: 129,024 candidates  # fmt: skip
    backend = _FakeClockBackend()
    with pytest.raises(SearchCancelled):
        plan(_base(), spec, backend=backend, cancelled=lambda: now_s[0] > budget_s, with_band=False)
    # stopped within one round past the budget: a round's configs (at most batch_size family configs) are made after
    # its last look at a candidate, then the backend asks; listing them all first read 0.28 s
    assert now_s[0] <= budget_s + spec.batch_size * 1e-3 + 1e-9
    assert backend.num_points > 0  # the search ran before the budget was spent, not after listing everything


def test_progress_is_complete_only_when_the_plan_is(tmp_path):
    """The Plan page's bar read "576 / 576" when the candidates were settled, before the prefilter's confirmation runs
    and the headroom bisections (seconds more). Progress now goes through the plan's phases: 100 % means done."""
    from sim_core.backend import LocalBackend

    log: list[object] = []

    class Logged(LocalBackend):
        def map(self, fn, items, on_progress=None, cancelled=None):
            items = list(items)
            log.append(("runs", len(items)))
            return super().map(fn, items, on_progress, cancelled)

    def progress(*args):  # (the plan's progress; before: done, total of the candidates)
        p = args[0] if len(args) == 1 else None
        log.append(("progress", p.fraction if p else args[0] / max(args[1], 1), p))

    spec = PlanSpec(target_rate_per_s=30.0, gpus=("h100-sxm",), tp_degrees=(1,), engines=("vllm-v1",), max_replicas=3)
    with Logged(1) as backend:
        result = plan(make_config(workload__num_requests=200), spec, backend=backend, on_progress=progress, with_band=False)
    assert result.rows and result.rows[0].capacity_per_s is not None  # confirmed and bisected: runs after the search
    fractions = [e[1] for e in log if e[0] == "progress"]
    assert fractions == sorted(fractions) and fractions[-1] == 1.0
    first_done = next(i for i, e in enumerate(log) if e[0] == "progress" and e[1] >= 1.0)
    assert not any(e[0] == "runs" and e[1] for e in log[first_done:])  # nothing ran after 100 %
    steps = [e[2] for e in log if e[0] == "progress"]
    assert {(p.step, p.num_steps) for p in steps} == {(1, 4), (2, 4), (3, 4), (4, 4)}
    assert steps[-1].text() == f"step 4 of 4: {len(result.rows)} / {len(result.rows)} rows' headroom bisected"
    # the saturation probes, one per family, are a phase of their own (they ran without progress: minutes of silence
    # for a large search space)
    from sim_core.planner import SATURATION_PHASE

    assert steps[0].what == SATURATION_PHASE and (steps[0].done, steps[0].total) == (0, 1)
    assert any(p.what == SATURATION_PHASE and p.done == p.total == 1 for p in steps)


def test_the_family_count_is_the_search_spaces():
    from sim_core.planner import _families, num_families

    for spec in (SPEC, SPEC.model_copy(update={"disaggregated": True}),
                 SPEC.model_copy(update={"disaggregated": True, "evaluation": "one_replica", "tp_degrees": (1, 1, 2)}),
                 PlanSpec(target_rate_per_s=1.0, token_budgets=(None, 2048), max_batches=(64, 128, 256))):  # fmt: skip
        assert num_families(spec) == len(_families(spec))


def test_the_saturation_probe_of_multi_turn_sessions_keeps_the_batch_full():
    # closed-loop sessions send a turn its think time after the previous reply: the offline probe kept the preset's
    # 20 s thinks, so 256 sessions left the batch mostly empty and the "saturation" was think-bound. On
    # multi-turn-chat-h100-llama8b it said 10.2 req/s while the preset meets its SLOs at 20 req/s (steady TTFT p99
    # 0.14 s, goodput 19.8 req/s): the Sweep page's range stopped at 12 req/s, short of the knee, and the planner's
    # bound ("fewer replicas than the saturation bound allows") pruned sizes that keep up
    from sim_core.presets import load_preset
    from sim_core.sweep import completion_rate_per_s, run_sweep

    cfg = load_preset("multi-turn-chat-h100-llama8b")
    probe = saturation_config(cfg)
    assert probe.workload.sessions.think_time_s == 0  # (a turn waits only for its previous reply)
    assert probe.workload.num_requests >= 4 * cfg.scheduler.max_num_seqs * cfg.workload.sessions.turns  # (sessions)
    saturation = completion_rate_per_s(run_simulation(probe))
    (met,) = run_sweep(cfg, "rate", [20.0], steady_length=True)
    assert met.summary.steady.ttft_p99_s <= cfg.slo.ttft_s and met.summary.steady.goodput_requests_per_s > 19
    assert saturation > 20  # (an upper bound on what the setup keeps up with)


def test_a_confirmed_rows_headroom_is_its_deployments_so_it_is_never_below_a_target_it_meets():
    # chat-4xh100-llama70b at 32 req/s, TPOT 50 ms: 7x H100 TP4 met the SLOs as a round-robin deployment, yet its
    # headroom, bisected on one replica's share at a random router, read "capacity 26.3 req/s, -18 %"
    from sim_core.presets import load_preset
    from sim_core.sweep import with_value

    base = with_value(load_preset("chat-4xh100-llama70b"), "slo.tpot_s", 0.05)
    spec = PlanSpec(target_rate_per_s=32.0, gpus=("h100-sxm",), tp_degrees=(4,), engines=("vllm-v1",))
    (row,) = plan(base, spec, backend=LocalBackend(1), with_band=False).rows
    assert row.meets and row.config.deployment.replicas == 7
    assert row.capacity_per_s >= 32.0 and row.headroom(32.0) >= 0


QWEN = {"name": "Qwen2.5-7B", "num_heads": 28, "num_kv_heads": 4, "hidden_size": 3584}  # TP 1, 2, 4 or 28 only


def test_a_tp_degree_the_models_heads_do_not_split_over_is_pruned_and_said_like_memory():
    # (TP 8 of Qwen2.5-7B's 28 heads was planned with 3.5 heads per GPU, a deployment no engine starts)
    base = make_config(model=_base().model.model_dump() | QWEN)
    spec = PlanSpec(target_rate_per_s=2.0, gpus=("h100-sxm",), tp_degrees=(4, 8), max_replicas=2, engines=("vllm-v1",),
                    num_results=1, evaluation="one_replica")  # fmt: skip
    p = plan(base, spec, with_band=False)
    assert p.pruned["TP degree the model's heads do not split over (Qwen2.5-7B: TP 1, 2, 4 or 28 only)"] == 2
    assert p.rows and all(r.family.tp == 4 for r in p.rows) and all(c.family.tp == 4 for c in p.evaluated)
    split = plan(base, spec.model_copy(update={"disaggregated": True, "evaluation": "deployment", "max_replicas": 2}),
                 with_band=False)  # a split with either pool on 8 GPUs is pruned too  # fmt: skip
    assert all(8 not in (r.family.tp, r.family.decode_tp) for r in split.evaluated)


def test_a_search_of_only_tp_degrees_the_model_refuses_is_a_message_not_an_empty_plan():
    with pytest.raises(PresetError) as err:
        plan(_base(), SPEC.model_copy(update={"tp_degrees": (3, 6)}), with_band=False)
    assert str(err.value) == ("tp_degrees = 3, 6: Llama-3.1-8B's 32 attention heads (8 KV heads) split evenly only over "
                              "1, 2, 4, 8, 16 or 32 GPUs (vLLM refuses other tensor-parallel sizes); search at least "
                              "one of those degrees")  # fmt: skip


def test_a_plan_of_offline_traffic_is_refused_naming_the_process():
    # the offline preset was planned at "5 req/s" as one queue at t = 0: "no configuration in the search space meets
    # the SLOs at this rate: widen it", for traffic that has no rate
    from sim_core.planner import plan

    spec = PlanSpec(target_rate_per_s=5, gpus=("h100-sxm",), tp_degrees=(1,), engines=("vllm-v1",))
    with pytest.raises(PresetError, match="workload.arrival.process = 'offline'"):
        plan(make_config(workload__arrival__process="offline"), spec, backend=LocalBackend(1))


@pytest.mark.parametrize("evaluation", ["prefilter", "deployment"])
def test_candidates_pruned_by_an_error_name_the_error(evaluation):
    # `plan --set limits.max_ticks=1` said "pruned: 2 simulation error" and `--token-budgets 1` "2 invalid
    # configuration", then advised widening the search (--max-replicas, --gpus, --tp): neither said what failed (fuzz39)
    spec = PlanSpec(target_rate_per_s=2.0, gpus=("h100-sxm",), tp_degrees=(1,), max_replicas=2, engines=("vllm-v1",),
                    evaluation=evaluation)  # fmt: skip
    stopped = plan(make_config(limits__max_ticks=1), spec, backend=LocalBackend(1), with_band=False)
    assert not stopped.rows and "simulation error" in stopped.pruned
    assert "simulation error (first: too few requests finished to measure saturation (stopped after 1 tick " \
           "(limits.max_ticks)" in stopped.pruned_text()  # fmt: skip
    invalid = plan(_base(), spec.model_copy(update={"token_budgets": (1,)}), backend=LocalBackend(1), with_band=False)
    assert not invalid.rows and "\n" not in invalid.pruned_text()
    assert "2 invalid configuration (first: Invalid plan candidate h100-sxm TP1 · vllm-v1, budget 1: " \
           "scheduler.max_num_batched_tokens = 1: must be >= scheduler.max_num_seqs (256) under " \
           "scheduler.prefill_mode 'decode_first'" in invalid.pruned_text()  # fmt: skip
    assert "dominated" not in plan(_base(), spec, backend=LocalBackend(1), with_band=False).examples  # (counts alone)


ROUTED = "cluster-router-4xh100-llama8b"


@pytest.mark.parametrize("asked", [None, "least_outstanding"])
@pytest.mark.parametrize("asked_refresh_s", [None, 0.0])
def test_plan_cli_routes_candidates_by_the_configs_router_unless_told_another(capsys, monkeypatch, asked, asked_refresh_s):
    # `plan` of a deployment routed by least_kv searched and confirmed every candidate behind round robin, without a
    # word: --router's default was PlanSpec's, not the config's; and its candidates refreshed the router's view of the
    # engines every 0.05 s whatever the config's deployment.state_refresh_s (0.2 s here)
    from sim_core import planner
    from sim_core.cli import main

    seen = []
    real = planner.plan

    def recording(base, spec, **kw):
        result = real(base, spec, **kw)
        seen.extend(r.config for r in result.evaluated)
        return result

    monkeypatch.setattr(planner, "plan", recording)
    argv = ["plan", ROUTED, "--rate", "16", "--gpus", "h100-sxm", "--tp", "1", "--engines", "vllm-v1", "--max-replicas", "2",
            "--set", "workload.num_requests=60", "--set", "deployment.router=least_kv", "--set", "deployment.state_refresh_s=0.2",
            "--no-cache", "--workers", "1", *(["--router", asked] if asked else []),
            *(["--state-refresh-s", str(asked_refresh_s)] if asked_refresh_s is not None else [])]  # fmt: skip
    main(argv)
    out = capsys.readouterr().out
    want = asked or "least_kv"
    want_refresh_s = 0.2 if asked_refresh_s is None else asked_refresh_s
    confirmed = [c.deployment for c in seen if c.deployment is not None]  # (the confirmations, as deployments of 2 replicas)
    assert confirmed and {d.router for d in confirmed} == {want}, confirmed
    assert {d.state_refresh_s for d in confirmed} == {want_refresh_s}
    assert f"finalists confirmed as deployments ({want} router)" in out
    said = ("router: candidates are routed by the config's deployment.router, least_kv" if asked is None else
            "router: candidates are routed by least_outstanding, not the config's deployment.router, least_kv")  # fmt: skip
    assert said in out, out
    if asked is None:  # (least_kv reads engine state; least_outstanding does not, and the note says nothing of it)
        assert ("(refreshing engine state every 0.2 s, as the config's deployment.state_refresh_s)" if asked_refresh_s is None
                else "(refreshing engine state every 0 s, not the config's deployment.state_refresh_s = 0.2 s)") in out, out
    else:
        assert "refreshing" not in out


@given(router=hs.sampled_from(get_args(Router)), asked=hs.one_of(hs.none(), hs.sampled_from(get_args(Router))),
       evaluation=hs.sampled_from(["prefilter", "deployment", "one_replica"]), refresh_s=hs.sampled_from([0.0, 0.05, 1.0]),
       asked_refresh_s=hs.sampled_from([None, 0.0, 0.05, 1.0]))
@settings(max_examples=80, deadline=None)
def test_a_plans_router_is_the_configs_unless_asked_and_the_note_says_which(router, asked, evaluation, refresh_s, asked_refresh_s):
    from sim_core.config import STATE_ROUTERS
    from sim_core.planner import candidate_config, default_router, default_state_refresh_s, router_note
    from sim_core.presets import load_preset

    data = load_preset(ROUTED).model_dump(mode="python")
    data["deployment"] = {"replicas": 4, "router": router, "state_refresh_s": refresh_s}
    base = config_from_dict(data)
    assert default_router(base) == router and default_state_refresh_s(base) == refresh_s
    spec = PlanSpec(target_rate_per_s=10.0, router=asked or default_router(base), evaluation=evaluation,
                    state_refresh_s=default_state_refresh_s(base) if asked_refresh_s is None else asked_refresh_s)  # fmt: skip
    note = router_note(base, spec)
    if evaluation == "one_replica":
        assert note.endswith("is not used: evaluation one_replica simulates each candidate as one replica behind a random router")
    elif asked in (None, router):
        assert note.startswith(f"candidates are routed by the config's deployment.router, {router}")
    else:
        assert note.startswith(f"candidates are routed by {asked}, not the config's deployment.router, {router}")
    reads_state = spec.router in STATE_ROUTERS and evaluation != "one_replica"
    assert ("refreshing engine state" in note) == reads_state
    assert (f"not the config's deployment.state_refresh_s = {refresh_s:g} s" in note) == (
        reads_state and spec.state_refresh_s != refresh_s)
    # what the note says is what the candidates run: a deployment behind spec's router at spec's refresh interval
    fam = Family("h100-sxm", 1, "vllm-v1", None, None)
    dep = candidate_config(family_config(base, fam), fam, (2,), 10.0, spec).deployment
    if evaluation == "one_replica":
        assert dep is None
    else:
        assert (dep.router, dep.state_refresh_s) == (spec.router, spec.state_refresh_s)
    assert router_note(load_preset("chat-h100-llama8b"), spec) is None  # one engine: no router of its own
    assert default_router(load_preset("chat-h100-llama8b")) == "round_robin"
    assert default_state_refresh_s(load_preset("chat-h100-llama8b")) == PlanSpec.model_fields["state_refresh_s"].default


@pytest.mark.parametrize("refresh_s", [-1.0, 1e-300, 61.0, float("nan")])
def test_a_plans_refresh_interval_is_held_to_the_configs_range(refresh_s):
    with pytest.raises(ValidationError) as err:
        PlanSpec(target_rate_per_s=10.0, state_refresh_s=refresh_s)
    text = format_validation_error(err.value, "plan", PlanSpec)
    assert "state_refresh_s" in text and ("at least 1e-06 s" in text if refresh_s == 1e-300 else ">= 0 and <= 60" in text), text


def test_a_finalist_the_servers_budget_refuses_is_said_as_such_not_as_failing(monkeypatch):
    """The Plan page said "No configuration ... meets the SLOs: add GPUs" at 400 req/s where the command line found 19x
    H100: the server's memory per run refused the 19-replica finalist (19 x 184,000 requests), and the prefilter counted
    that as "finalist fails as a deployment". Here every deployment is refused at set-up (a budget whose set-up share
    fits none), single engines run: the finalists are named as stopped by the server's budget, with the message."""
    from sim_core import budget as budget_mod
    from sim_core.budget import BUDGET_MARK, RunBudget, is_budget_stop

    monkeypatch.setattr(budget_mod, "SETUP_BYTES_PER_INSTANCE_REQUEST", 10**9)
    spec = PlanSpec(target_rate_per_s=150.0, gpus=("h100-sxm",), tp_degrees=(1,), max_replicas=4, engines=("vllm-v1",),
                    num_results=1, evaluation="prefilter")  # fmt: skip
    p = plan(_base(), spec, backend=LocalBackend(max_workers=1), with_band=False, budget=RunBudget())
    assert not p.rows
    refused = {why: n for why, n in p.pruned.items() if is_budget_stop(why)}
    assert refused and "finalist fails as a deployment" not in p.pruned, p.pruned
    assert all(BUDGET_MARK in p.examples[why] and "deployment.replicas" in p.examples[why] for why in refused), p.examples


def test_a_finalist_whose_run_the_servers_budget_stopped_part_way_is_not_said_to_fail(monkeypatch):
    """The Plan page's caption said "2 finalist fails as a deployment" above its warning that the server's budget had
    stopped 2 candidates: the 7x A100 deployments' runs were cut part-way at 5 s, not judged. Here every deployment run
    comes back stopped by the budget (the single engines run whole)."""
    from sim_core import planner
    from sim_core.budget import BUDGET_MARK
    from sim_core.planner import FINALIST_CUT

    real = planner.run_points

    def cut(cfgs, *args, **kwargs):
        stop = f"stopped after 4.0 s of server time, {BUDGET_MARK} per run is 5 s"
        return [(s.model_copy(update={"stopped_reason": stop}) if s is not None and c.deployment is not None else s, e)
                for c, (s, e) in zip(cfgs, real(cfgs, *args, **kwargs))]

    monkeypatch.setattr(planner, "run_points", cut)
    spec = PlanSpec(target_rate_per_s=150.0, gpus=("h100-sxm",), tp_degrees=(1,), max_replicas=4, engines=("vllm-v1",),
                    num_results=1, evaluation="prefilter")  # fmt: skip
    p = plan(_base(), spec, backend=LocalBackend(max_workers=1), with_band=False)
    assert not p.rows and p.pruned.get(FINALIST_CUT) and "finalist fails as a deployment" not in p.pruned, p.pruned
    assert BUDGET_MARK in p.examples[FINALIST_CUT] and BUDGET_MARK not in FINALIST_CUT  # (counted once: by its run)


def test_a_pd_search_the_caller_stops_keeps_the_confirmed_rows_and_says_where_it_stopped(monkeypatch):
    """The Plan page's budget stopping its P:D split search dropped every co-located row it had confirmed, and the page
    said only "press Plan again". A cancel in that phase now returns the confirmed rows, the splits found so far and
    the cost up to which every candidate was settled; the rows' headroom is not bisected (said in their note)."""
    from sim_core import planner
    from sim_core.planner import NOT_BISECTED

    # (without the prefill bound, which leaves this small space's split search a single round: nothing to stop)
    monkeypatch.setattr(planner, "prefill_bound_per_s", lambda pool, prompt_tokens: None)
    spec = PlanSpec(target_rate_per_s=40.0, gpus=("a100-80gb",), tp_degrees=(1,), max_replicas=3, engines=("vllm-v1",),
                    num_results=3, disaggregated=True)  # fmt: skip
    with LocalBackend(1) as backend:
        full = plan(_base(), spec, backend=backend, with_band=False)
        splits_settled = []

        def progress(p):
            if p.what.startswith("P:D split"):
                splits_settled.append(p.done)

        part = plan(_base(), spec, backend=backend, with_band=False, on_progress=progress,
                    cancelled=lambda: any(n > 0 for n in splits_settled))  # (after the first round of splits)  # fmt: skip
    assert full.stopped is None and part.stopped is not None
    assert part.stopped.what == "P:D split search" and part.stopped.frontier_usd_per_hour > 0
    assert "every candidate under $" in part.stopped.text()
    colocated = [r.label for r in full.rows if not r.family.is_split]
    assert colocated and all(label in [r.label for r in part.rows] for label in colocated)
    assert all(r.meets for r in part.rows)
    # below the frontier the partial answer is the final one
    assert [r.label for r in part.rows if r.usd_per_hour < part.stopped.frontier_usd_per_hour] == \
        [r.label for r in full.rows if r.usd_per_hour < part.stopped.frontier_usd_per_hour]
    assert {r.capacity_note for r in part.rows} == {NOT_BISECTED}
    assert part.pruned.get("not tried: the search was stopped", 0) > 0


def test_p_d_split_candidates_use_the_planned_configs_own_kv_link():
    from sim_core.presets import load_preset
    # a plan from the DistServe preset searched its P:D splits over the default 50 GB/s link, not its 300 GB/s NVLink
    # (browser review, session 58): a split candidate takes a P:D config's own link, and the text names that one
    from sim_core.cluster.report import describe_link
    from sim_core.config import LinkConfig
    from sim_core.planner import split_link

    pd_base = load_preset("cluster-distserve-opt13b-3xa100-p2d1")
    own = pd_base.deployment.disaggregation.link
    assert own != LinkConfig() and split_link(pd_base) == own
    fam = Family("a100-80gb", 2, "vllm-v1", None, None, decode_tp=1)
    assert family_config(pd_base, fam).deployment.disaggregation.link == own
    spec = PlanSpec(target_rate_per_s=2.0, disaggregated=True)
    assert f"KV link {describe_link(own)}" in spec.describe_evaluation(pd_base)
    colocated = load_preset("chat-h100-llama8b")  # (no link of its own: the config's default)
    assert split_link(colocated) == LinkConfig() and family_config(colocated, fam).deployment.disaggregation.link == LinkConfig()


def test_a_plan_counts_simulation_runs_and_says_when_finalists_run_again():
    # a review: the Plan page read "576 candidate configurations, 19 simulated; skipped: 84 ..., 480 ...", 583 in all:
    # under the prefilter a finalist runs again as a deployment, so its runs are counted as runs, and said so
    spec = PlanSpec(target_rate_per_s=40.0, gpus=("a100-80gb",), tp_degrees=(1,), max_replicas=3, engines=("vllm-v1",))
    pre = plan(_base(), spec, with_band=False)
    one = plan(_base(), spec.model_copy(update={"evaluation": "one_replica"}), with_band=False)
    assert pre.spec.evaluation == "prefilter" and len(pre.evaluated) > len(one.evaluated)  # (the finalists' runs)
    assert pre.runs_text() == f"{len(pre.evaluated)} simulation runs (finalists run again as deployments)"
    assert one.runs_text() == f"{len(one.evaluated)} simulation run{'s' if len(one.evaluated) != 1 else ''}"
    assert sum(one.pruned.values()) + len(one.evaluated) == one.num_candidates  # (one replica each: they add up)


@pytest.mark.parametrize("name", ["cluster-distserve-opt13b-3xa100-p2d1", "cluster-dynamo-llama70b-fp8-8xh100-3p1d",
                                  "cluster-splitwise-llama70b-4xdgx-ha-3p1d"])  # fmt: skip
def test_a_splits_prefill_bound_is_above_what_its_prefill_pool_serves_saturated(name):
    # the bound prunes splits with too few prefill instances: it must be an upper bound on what they complete, here
    # every request queued at once (the most a split serves); Dynamo's 3P1D reaches 85 % of it
    from sim_core.config import pool_config
    from sim_core.planner import mean_prompt_tokens, prefill_bound_per_s, saturation_config
    from sim_core.sweep import completion_rate_per_s

    sat = saturation_config(load_preset(name))
    bound = sat.deployment.disaggregation.prefill.replicas * prefill_bound_per_s(pool_config(sat, "prefill"), mean_prompt_tokens(sat))
    assert completion_rate_per_s(run_simulation(sat)) <= bound


def test_the_prefill_bound_prunes_splits_without_changing_the_plan(monkeypatch):
    # A 70B P:D search on the Plan page spent ~80 presses of its budget on splits with too few prefill instances: they
    # are pruned now, and the plan is the one the search without the bound finds
    from sim_core import planner

    spec = PlanSpec(target_rate_per_s=60.0, gpus=("a100-80gb",), tp_degrees=(1,), max_replicas=6, engines=("vllm-v1",),
                    num_results=2, disaggregated=True, evaluation="deployment")  # fmt: skip
    bounded = plan(_base(), spec, with_band=False)
    monkeypatch.setattr(planner, "prefill_bound_per_s", lambda pool, prompt_tokens: None)
    unbounded = plan(_base(), spec, with_band=False)
    assert bounded.pruned.get(planner.PREFILL_BOUND_REASON, 0) > 0 and planner.PREFILL_BOUND_REASON not in unbounded.pruned
    assert [(r.label, r.usd_per_hour) for r in bounded.rows] == [(r.label, r.usd_per_hour) for r in unbounded.rows]
    assert len(bounded.evaluated) < len(unbounded.evaluated)
    assert sum(bounded.pruned.values()) + len(bounded.evaluated) == bounded.num_candidates


@pytest.mark.parametrize("engine", list_presets("engines"))
def test_no_engine_prefills_more_than_its_token_budget_in_a_tick_the_prefill_bound_reads(engine):
    # the prefill bound's premise: a tick of every engine holds at most max_num_batched_tokens prefill tokens, under
    # KV pressure too (recompute victims' prefills come back within it)
    from sim_core.presets import apply_part

    cfg = apply_part(load_preset("kv-pressure-a100-llama8b"), "engines", engine)
    tl = run_simulation(cfg).timeline
    assert int(tl.num_prefill_tokens.max()) <= cfg.scheduler.max_num_batched_tokens


def test_an_empty_plan_says_why_from_what_it_skipped():
    # a review: a 70B model on one A100-80GB (TP 1) and a rate beyond the most replicas both read "No configuration ...
    # meets the SLOs at this rate: add GPUs, TP degrees or replicas", advice that cannot help the first
    from sim_core.planner import plan

    spec = PlanSpec(target_rate_per_s=5.0, gpus=("a100-80gb",), tp_degrees=(1,), max_replicas=2, engines=("vllm-v1",))
    big = plan(make_config(model="llama-3.1-70b"), spec, backend=LocalBackend(1), with_band=False)
    assert not big.rows and not big.evaluated and set(big.pruned) == {"does not fit in memory"}
    assert big.no_answer_text().startswith("the model fits on none of these GPU x TP choices")
    fast = plan(_base(), spec.model_copy(update={"target_rate_per_s": 5000.0}), backend=LocalBackend(1), with_band=False)
    assert not fast.rows and not fast.evaluated and fast.pruned["fewer replicas than the saturation bound allows"] == 2
    assert fast.no_answer_text().startswith("even the most replicas searched (2) cannot keep up with 5000 req/s")
    # a search that ran candidates and found none: the search space's own advice, and the caller's way to widen it
    from sim_core.planner import Plan

    ran = Plan(spec=spec, rows=[], evaluated=fast.evaluated + ["a candidate run"])
    assert ran.no_answer_text("widen it (--max-replicas)") == (
        "no configuration in the search space meets the SLOs at this rate: widen it (--max-replicas), or relax the SLOs")


def test_a_candidates_engine_is_taken_whole_as_choosing_it_in_simulate_does():
    # a review: the plan's "sglang" rows kept the base's vLLM V1 memory rule and calibration (TPOT p99 38.9 ms at
    # 50 req/s where SGLang read 47.3 ms in Sweep's head-to-head; a 7x A100 row passed that failed on SGLang's own)
    from sim_core.presets import config_with, load_preset

    base = load_preset("chat-h100-llama8b")
    for engine in ("sglang", "tensorrt-llm-max-utilization", "vllm-v0"):
        fam = Family("h100-sxm", 1, engine, None, None)
        got, chosen = family_config(base, fam), config_with(base, {"engine": engine})
        assert (got.scheduler, got.kv_cache, got.calibration) == (chosen.scheduler, chosen.kv_cache, chosen.calibration)
        assert got.calibration.profile != base.calibration.profile and got.workload == base.workload
        # the searched knobs over the engine's scheduler, not in place of it (a review: a budget-512 SGLang row ran
        # the config model's default scheduler under SGLang's name)
        knobs = family_config(base, Family("h100-sxm", 1, engine, 8192, 64))
        assert knobs.scheduler == config_with(base, {"engine": engine, "scheduler.max_num_batched_tokens": 8192,
                                                     "scheduler.max_num_seqs": 64}).scheduler  # fmt: skip


def test_a_calibration_changed_from_its_profile_is_said_to_be_replaced_by_the_engines(capsys):
    # a review: since candidates take their engine's profile, a calibration tuned in Simulate (or by --set) was
    # dropped without a word for every engine whose preset names a profile
    from sim_core.planner import calibration_note
    from sim_core.presets import config_with, load_preset

    base = load_preset("chat-h100-llama8b")
    spec = PlanSpec(target_rate_per_s=10.0, engines=("vllm-v1", "sglang", "article-priority"))
    assert calibration_note(base, spec) is None  # (the stock profile: nothing lost)
    tuned = config_with(base, {"calibration.gemm_efficiency": 0.6})
    said = calibration_note(tuned, spec)
    assert said is not None and "'vllm-v1'" in said and "vllm-v1, sglang:" in said and "article-priority" not in said
    assert calibration_note(tuned, PlanSpec(target_rate_per_s=10.0, engines=("article-priority",))) is None
    # and the CLI prints it
    from sim_core.cli import main

    code = main(["plan", "chat-h100-llama8b", "--rate", "10", "--set", "calibration.gemm_efficiency=0.6", "--gpus",
                 "h100-sxm", "--tp", "1", "--engines", "sglang", "--max-replicas", "1", "--workers", "1", "--no-cache"])  # fmt: skip
    assert code in (0, 1) and "  calibration: the config's calibration differs from its profile 'vllm-v1'" in capsys.readouterr().out
