"""Published disaggregation claims as trends: direction and a 1.5x band around the claim, with the
untuned cost model, at a reduced resolution (200-300 requests per probe, 4-6 bisection steps; the CLI's
`trends` uses 300 requests and 6 steps). DistServe's band is not reproduced (see sim_core/cluster/trends.py):
its test is a strict xfail, so that a model change that makes it hold is noticed."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from sim_core.cluster.trends import comparisons, format_trend, run_comparison


def test_dynamo_single_node_disaggregation_gains_per_gpu():
    trend = run_comparison(comparisons()[2], num_requests=200, iters=4)
    assert trend.direction_holds and trend.within_band  # published 1.3x per GPU on one node
    assert trend.best_split[0] > trend.best_split[1]  # 3K-token prompts: more prefill than decode instances


def test_splitwise_ha_gains_per_cost_within_band():
    trend = run_comparison(comparisons()[1], num_requests=200, iters=4)
    assert trend.direction_holds and trend.within_band  # published 1.75x per cost (1.4x at 20 % lower cost)
    assert trend.best_split == (3, 1)  # prompt-heavy conversation trace: three H100 prompt machines per A100


@pytest.fixture(scope="module")
def distserve():
    return run_comparison(comparisons()[0])


def test_distserve_disaggregation_serves_more_per_gpu(distserve):
    # each engine at its own measured step times: DistServe's P TP2 + D TP1 meets the SLOs at ~2 req/s per GPU,
    # 2023 vLLM on one GPU per replica at no rate (its prefill of the longest prompts alone exceeds 0.25 s)
    assert distserve.direction_holds
    assert distserve.disaggregated_capacity / distserve.disaggregated_gpus > 1.0
    assert distserve.colocated_capacity == 0 and math.isinf(distserve.ratio)
    assert "none: under 90 %" in format_trend(distserve) and "unbounded" in format_trend(distserve)
    # the README's figure is this run's (it said 2.09 req/s per GPU where `trends` prints 6.65 req/s on 3 GPUs: review 27)
    per_gpu = distserve.disaggregated_capacity / distserve.disaggregated_gpus
    readme = " ".join((Path(__file__).resolve().parents[3] / "README.md").read_text().split())
    assert f"D TP1 (decode batches up to 1,024, the artifact's flags) serves {per_gpu:.2f} req/s per GPU" in readme


@pytest.mark.xfail(strict=True, reason="the co-located baseline meets the SLOs at no rate, so the gain is unbounded, "
                   "not 2.0-3.41x: the claim needs a baseline prefilling 20-30 % faster than DistServe's profile of it (README, Beyond one engine)")
def test_distserve_claim_within_band(distserve):
    assert distserve.within_band


def test_the_readme_claims_table_quotes_the_trends_commands_ratios():
    # "Published claims": `python -m sim_core trends` runs each comparison at 300 requests and 6 bisection steps (the
    # tests above use fewer); session 28's decode-side first token changed the Dynamo disaggregated runs' TTFT, and
    # nothing compared the table with a run (1.37x and 1.49x per GPU / per cost still)
    readme = " ".join((Path(__file__).resolve().parents[3] / "README.md").read_text().split())
    splitwise, dynamo = (run_comparison(comparisons()[k]) for k in (1, 2))
    assert f"| Dynamo, one node of 8 H100 (3P1D vs 4 replicas, TP2) | 1.3x per GPU | {dynamo.ratio:.2f}x |" in readme
    assert f"1.75x per cost | {splitwise.ratio:.2f}x | both sides vLLM V0 |" in readme
    assert f"the interference the split removes ({splitwise.ratio:.2f}x;" in readme


def test_the_splitwise_baseline_on_vllm_v1_gains_what_the_readme_and_presets_say(monkeypatch):
    # "(with vLLM V1's chunked prefill as before, 1.11x)", also in both Splitwise presets' descriptions: the same
    # comparison with engine vllm-v1 on both sides, which session 28 changed (the preset's greedy admission); held
    import sim_core.cluster.trends as trends
    from sim_core.presets import config_from_dict, load_preset, read_preset_data

    def on_vllm_v1(name):
        data = read_preset_data("scenarios", name)
        return config_from_dict({k: v for k, v in data.items() if k not in ("name", "description")} | {"engine": "vllm-v1"})

    monkeypatch.setattr(trends, "load_preset", lambda name: on_vllm_v1(name) if "splitwise" in name else load_preset(name))
    assert trends.colocated_config(comparisons()[1], 10).scheduler.prefill_mode == "decode_first"  # (V0: prefill_first)
    ratio = f"{run_comparison(comparisons()[1]).ratio:.2f}x"
    readme = " ".join((Path(__file__).resolve().parents[3] / "README.md").read_text().split())
    assert f"with vLLM V1's chunked prefill as before, {ratio})" in readme
    for name in ("cluster-splitwise-llama70b-4xdgx-colocated", "cluster-splitwise-llama70b-4xdgx-ha-3p1d"):
        assert f"({ratio} per cost instead of" in read_preset_data("scenarios", name)["description"]
