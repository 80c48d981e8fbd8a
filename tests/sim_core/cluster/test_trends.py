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


ROOT = Path(__file__).resolve().parents[3]
DISTSERVE_PRESETS = ("cluster-distserve-opt13b-3xa100-colocated", "cluster-distserve-opt13b-3xa100-p2d1")


def _recorded_lengths(tokenizer: str = "OPT-13B (GPT-2 BPE + BOS)") -> dict[str, float]:
    # the recorded output of scripts/distserve_sharegpt_lengths.py (an offline one-off): OPT-13B's count, as DistServe
    # counted with facebook/opt-13b's tokenizer, or the cl100k_base count the presets used before (prompt median 679)
    import re

    text = (ROOT / "scripts" / "distserve_sharegpt_lengths.py").read_text()
    block = text[text.index(f"# {tokenizer} requests") :].split("# Checked")[0].split("\n# cl100k_base")[0]
    num = r"([\d.]+)"
    found = {}
    for pattern, names in ((rf"prompt mean {num} median {num} p90 {num}", ("p_mean", "p_median", "p_p90")),
                           (rf"output mean {num} median {num} p90 {num}", ("o_mean", "o_median", "o_p90")),
                           (rf"above 1311: {num} %, 1450: {num} %, 1536: {num} %; of outputs above 512: {num} %; longest output "
                            rf"of a prompt above 1536: {num}", ("over_1311", "over_1450", "over_1536", "o_over_512", "o_longest"))):  # fmt: skip
        found |= dict(zip(names, map(float, re.search(pattern, block).groups())))
    return found


@pytest.mark.parametrize("name", DISTSERVE_PRESETS)
def test_distserve_presets_generate_the_lengths_their_descriptions_state(name):
    # the descriptions quote the OPT-tokenizer measurement, and the lognormals have its prompt median and p90 and its
    # output mean and median, so that a preset and its description cannot drift apart (they quoted a cl100k count)
    import numpy as np

    from sim_core.presets import load_preset
    from sim_core.workload import sample_lengths

    m, cfg = _recorded_lengths(), load_preset(name)
    text = " ".join(cfg.description.split())
    assert "counted with OPT-13B's tokenizer" in text
    assert (f"measured prompt mean {m['p_mean']:.0f} / median {m['p_median']:.0f} / p90 {m['p_p90']:,.0f} ({m['over_1311']:.1f} % above "
            f"1,311 and {m['over_1450']:.1f} % above 1,450 tokens) and output mean {m['o_mean']:.0f} / median {m['o_median']:.0f} / p90 "
            f"{m['o_p90']:.0f} tokens") in text  # fmt: skip
    prompt, output = cfg.workload.prompt_tokens, cfg.workload.output_tokens
    z90 = 1.2815516  # the standard normal's 90th percentile
    p_median = prompt.mean * np.exp(-(prompt.sigma**2) / 2)  # LengthDist's mean is the lognormal's
    assert abs(p_median / m["p_median"] - 1) < 0.005 and abs(p_median * np.exp(z90 * prompt.sigma) / m["p_p90"] - 1) < 0.005
    sigma = np.log(m["p_p90"] / m["p_median"]) / z90  # the stated derivation, before the preset rounds sigma to 0.01
    assert prompt.mean == round(m["p_median"] * np.exp(sigma**2 / 2)) and prompt.sigma == round(sigma, 2)
    assert output.mean == round(m["o_mean"]) and output.sigma == round(np.sqrt(2 * np.log(m["o_mean"] / m["o_median"])), 2)
    assert f"(sigma {prompt.sigma:.2f}, mean {prompt.mean}) capped at {prompt.max:,}" in text
    assert f"(sigma {output.sigma:.2f}) capped at {output.max}" in text
    # what the config draws: the stated medians (the caps are above them), and prompt + output within OPT's 2,048
    rng = np.random.default_rng(0)
    drawn_p, drawn_o = sample_lengths(prompt, 200_000, rng), sample_lengths(output, 200_000, rng)
    assert abs(np.median(drawn_p) / m["p_median"] - 1) < 0.01 and abs(np.median(drawn_o) / m["o_median"] - 1) < 0.02
    assert prompt.max + output.max <= 2048 and prompt.max < m["p_p90"] and output.max < m["o_p90"]
    assert f"({m['over_1536']:.1f} % of prompts exceed {prompt.max:,}, {m['o_over_512']:.1f} % of outputs exceed {output.max})" in text
    assert m["o_longest"] < 460 and "the measured prompts over 1,536 all have outputs under 460" in text


def test_the_readme_distserve_paragraph_quotes_the_measurement_and_fresh_runs(capsys):
    # "a prompt over 1,311 tokens misses TTFT 0.25 s on an idle A100, and 18.6 % of ... prompts are that long ...
    # (13.4 % exceed 1,450; ... the presets' capped lognormal has 15.4 %)", the idle attainment and the sensitivity
    # script's goodputs (README, Beyond one engine): each from its source, not restated by hand
    import runpy

    import numpy as np

    from sim_core import run_simulation
    from sim_core.presets import load_preset
    from sim_core.sweep import with_value
    from sim_core.workload import sample_lengths

    readme = " ".join((ROOT / "README.md").read_text().split())
    base = load_preset(DISTSERVE_PRESETS[0])

    def idle_ttft_s(prompt_tokens: int) -> float:
        cfg = with_value(with_value(base, "workload.num_requests", 1), "workload.prompt_tokens",
                         base.workload.prompt_tokens.model_copy(update={"dist": "fixed", "mean": prompt_tokens}))  # fmt: skip
        return float(run_simulation(cfg).requests.ttft_s[0])

    assert idle_ttft_s(1311) <= 0.25 < idle_ttft_s(1312)
    m, cl100k = _recorded_lengths(), _recorded_lengths("cl100k_base (the earlier count, no BOS)")
    drawn = sample_lengths(base.workload.prompt_tokens, 1_000_000, np.random.default_rng(0))
    assert (f"a prompt over 1,311 tokens misses TTFT 0.25 s on an idle A100, and {m['over_1311']:.1f} % of the artifact's ShareGPT prompts "
            f"are that long, counted with OPT-13B's tokenizer as the artifact counts them ({m['over_1450']:.1f} % exceed 1,450; "
            f"`scripts/distserve_sharegpt_lengths.py`; the presets' capped lognormal has {100 * np.mean(drawn > 1311):.1f} %)") in readme  # fmt: skip
    assert (f"prompt median {m['p_median']:.0f} / p90 {m['p_p90']:,.0f} vs {cl100k['p_median']:.0f} / {cl100k['p_p90']:,.0f}; "
            f"{m['over_1311']:.1f} % vs {cl100k['over_1311']:.1f} % over 1,311 tokens") in readme  # fmt: skip
    runpy.run_path(str(ROOT / "scripts" / "distserve_sensitivity.py"), run_name="__main__")
    lines = {float(x.split("x")[1].split(":")[0]): x for x in capsys.readouterr().out.splitlines()}
    per_gpu = [lines[s].split("goodput ")[1].split()[0] for s in (1.0, 1.15, 1.2, 1.3, 1.4)]  # as printed, "0.00" as 0
    assert f"with GEMMs 1.0 / 1.15 / 1.2 / 1.3 / 1.4x faster, {' / '.join('0' if float(g) == 0 else g for g in per_gpu)} req/s per GPU" in readme
    idle_attainment = float(lines[1.0].split("attainment ")[1].split()[0])
    assert f"(attainment {idle_attainment:.0%} at 0.05 req/s per GPU;".replace("%", " %") in readme
