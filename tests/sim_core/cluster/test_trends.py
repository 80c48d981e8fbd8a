"""Published disaggregation claims as trends: direction and a 1.5x band around the claim, with the
untuned cost model, at a reduced resolution (200-300 requests per probe, 4-6 bisection steps; the CLI's
`trends` uses 300 requests and 6 steps). DistServe's band is not reproduced (see sim_core/cluster/trends.py):
its test is a strict xfail, so that a model change that makes it hold is noticed."""

from __future__ import annotations

from pathlib import Path

import pytest

from sim_core.cluster.trends import comparisons, format_trend, run_comparison
from tests.documents import prose


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
    # each engine at the calibration fitted on DistServe's measured runs of it, on the artifact's requests: P TP2 +
    # D TP1 meets the SLOs up to ~2 req/s per GPU (DistServe measured 95 % of them met at 6 req/s on its 3 GPUs, 80 %
    # at 7.5); 2023 vLLM on one GPU per replica only when almost idle (it measured 86 % at 1 req/s, and no run of
    # 1-4 req/s reached 90 %)
    assert distserve.direction_holds
    per_gpu = distserve.disaggregated_capacity / distserve.disaggregated_gpus
    assert 1.8 <= per_gpu <= 2.5
    assert 0 < distserve.colocated_capacity / distserve.colocated_gpus < 1.0
    assert f"simulated {distserve.ratio:.2f}x per GPU" in format_trend(distserve)
    assert "same direction, outside 1.5x of the claim" in format_trend(distserve)
    # the figures of the README's section (in full: docs/cluster.md) are this run's
    readme = prose("cluster")
    assert f"D TP1 (decode batches up to 1,024, the artifact's flags) serves {per_gpu:.2f} req/s per GPU" in readme
    assert (f"| DistServe chatbot, OPT-13B (P TP2 + D TP1 vs 3x vLLM TP1) | 2.0-3.41x per GPU | {distserve.ratio:.2f}x "
            f"(vLLM: {distserve.colocated_capacity / distserve.colocated_gpus:.2f} req/s per GPU) |") in readme  # fmt: skip
    # and the README's line of the three claims (it named them without a figure)
    assert f"DistServe {distserve.ratio:.2f}x vs 2.0-3.41x per GPU" in prose()


@pytest.mark.xfail(strict=True, reason="the co-located baseline meets 90 % only when almost idle (DistServe's measured vLLM runs "
                   "stay under 90 % at every rate they measured, 1-4 req/s), so the ratio is far above 2.0-3.41x (docs/cluster.md)")
def test_distserve_claim_within_band(distserve):
    assert distserve.within_band


def test_the_readme_claims_table_quotes_the_trends_commands_ratios():
    # "Published claims": `python -m sim_core trends` runs each comparison at 300 requests and 6 bisection steps (the
    # tests above use fewer); session 28's decode-side first token changed the Dynamo disaggregated runs' TTFT, and
    # nothing compared the table with a run (1.37x and 1.49x per GPU / per cost still)
    readme = prose("cluster")
    splitwise, dynamo = (run_comparison(comparisons()[k]) for k in (1, 2))
    assert f"| Dynamo, one node of 8 H100 (3P1D vs 4 replicas, TP2) | 1.3x per GPU | {dynamo.ratio:.2f}x |" in readme
    assert f"1.75x per cost | {splitwise.ratio:.2f}x | both sides vLLM V0 |" in readme
    assert f"the interference the split removes ({splitwise.ratio:.2f}x;" in readme
    assert (f"simulated vs published: Dynamo {dynamo.ratio:.2f}x vs 1.3x per GPU, Splitwise-HA {splitwise.ratio:.2f}x vs "
            "1.75x per cost") in prose()  # (the README's own line)  # fmt: skip


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
    readme = prose("cluster")
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
def test_distserve_presets_describe_the_requests_they_replay(name):
    # the descriptions quote the artifact's first 300 requests (what the presets replay) and this project's own count
    # of ShareGPT by the artifact's procedure (scripts/distserve_sharegpt_lengths.py), so neither can drift
    import numpy as np

    from sim_core.presets import load_preset

    cfg = load_preset(name)
    text = " ".join(cfg.description.split())
    p, o = np.array(cfg.workload.trace.prompt_tokens), np.array(cfg.workload.trace.output_tokens)
    assert (f"prompt mean {p.mean():.0f} / median {np.median(p):.0f} / p90 {np.percentile(p, 90):,.0f} tokens ({100 * np.mean(p > 1311):.1f} % "
            f"above 1,311, {100 * np.mean(p > 1650):.1f} % above 1,650, longest {p.max():,}), output mean {o.mean():.0f} / median "
            f"{np.median(o):.0f} (longest {o.max():,})") in text  # fmt: skip
    m = _recorded_lengths()
    assert f"agrees: prompt mean {m['p_mean']:.0f} / median {m['p_median']:.0f} / p90 {m['p_p90']:,.0f}." in text


def test_the_readme_distserve_paragraph_quotes_the_measurements_and_fresh_runs(capsys, monkeypatch):
    # the measured runs' figures, the co-located idle and 1 req/s attainment and the sensitivity script's goodputs
    # (docs/cluster.md, Beyond one engine): each from its source, not restated by hand
    import runpy
    import sys

    import numpy as np

    from sim_core import run_simulation
    from sim_core.cluster.measured_runs import compare_all, error_summary, measured_runs
    from sim_core.cluster.step_profiles import published_ms, simulated_ms
    from sim_core.presets import load_preset
    from sim_core.sweep import with_rate, with_value

    readme = prose("cluster")
    comps = compare_all()
    for system, name in (("vllm", "vLLM"), ("distserve-c21d11", "DistServe")):
        held = [c for c in comps if c.run.system == system and not c.fitted]
        err, att = error_summary(held)
        assert f"{err:.3f} ({name})" in readme and f"{att:.3f}" in readme
    measured = " / ".join(f"{100 * c.attainment(False):.0f}" for c in comps if c.run.system == "vllm")
    assert f"(1 to 4 req/s: {measured} %)" in readme
    by_name = {c.run.name: c for c in comps}
    pct = lambda name, sim: f"{100 * by_name[name].attainment(sim):.0f}"  # noqa: E731
    assert (f"(vLLM measured vs simulated: {pct('vllm-150-1.5', False)} / {pct('vllm-150-1.5', True)} % at 1.5 req/s, "
            f"{pct('vllm-250-2.5', False)} / {pct('vllm-250-2.5', True)} % at 2.5, {pct('vllm-350-3.5', False)} / "
            f"{pct('vllm-350-3.5', True)} % at 3.5; the measured vLLM attainment is not monotonic in the rate itself, "
            f"{pct('vllm-100-2', False)} and {pct('vllm-200-2', False)} % at 2 req/s against {pct('vllm-250-2.5', False)} % at 2.5)") in readme  # fmt: skip
    six, seven = (by_name[f"distserve-c21d11-300-{r}"].attainment(False) for r in ("6", "7.5"))
    crossing = 6 + 1.5 * (six - 0.9) / (six - seven)  # req/s on 3 GPUs where the straight line crosses 90 %
    assert (f"measured 300-request runs (the size of Fig. 8) had {100 * six:.0f} % of requests meeting both SLOs at 6 req/s on its 3 "
            f"GPUs and {100 * seven:.0f} % at 7.5, {crossing / 3:.2f} req/s per GPU where a straight line between them crosses 90 % (its "
            f"longer runs at those rates measured {pct('distserve-c21d11-600-6', False)} and {pct('distserve-c21d11-750-7.5', False)} %)") in readme  # fmt: skip
    assert f"with its measured {crossing / 3:.2f} req/s per GPU puts vLLM's goodput at {crossing / 3 / 3.41:.2f}-{crossing / 3 / 2.0:.2f} req/s per GPU" in readme
    assert f"it gives {pct('vllm-100-1', True)} % where {pct('vllm-100-1', False)} % was measured" in readme
    light = [r for r in measured_runs() if r.system == "vllm" and r.rate_per_s <= 1.5]
    prompt = np.concatenate([np.asarray(r.prompt_tokens) for r in light])
    ttft = np.concatenate([r.ttft_ms for r in light])
    assert f"DistServe measured prompts of up to {prompt[ttft <= 250].max():,} tokens meeting 0.25 s at 1-1.5 req/s" in readme
    profile = next(v for kind, n, v in published_ms("vllm", 1) if kind == "prefill" and n == 1536)
    fitted = simulated_ms(with_value(load_preset(DISTSERVE_PRESETS[0]), "deployment", None), 1, [("prefill", 1536, 0.0)])[0]
    assert (f"got its first token after {ttft[prompt >= 1536].min():.0f} ms at 1-1.5 req/s, queueing and API server included, "
            f"where the profile prefills 1,536 tokens in {profile:.0f} ms)") in readme
    assert f"the fitted profile prefills them in {fitted:.0f} ms" in readme
    base = load_preset(DISTSERVE_PRESETS[0])
    idle, busy = (run_simulation(with_rate(base, 3 * per_gpu)).summary.slo_attainment for per_gpu in (0.05, 1.0))
    assert f"(attainment {idle:.0%} at 0.05 req/s per GPU, {busy:.0%} at 1 req/s per GPU,".replace("%", " %") in readme
    script = ROOT / "scripts" / "distserve_sensitivity.py"
    # (the script reads its command line, `--help`: run as `python script.py`, not with pytest's arguments, which it
    # refused whenever pytest was given any)
    monkeypatch.setattr(sys, "argv", [str(script)])
    runpy.run_path(str(script), run_name="__main__")
    lines = {float(x.split("x")[1].split(":")[0]): x for x in capsys.readouterr().out.splitlines()}
    per_gpu = [lines[s].split("goodput ")[1].split()[0] for s in (1.0, 1.1, 1.15, 1.2, 1.3, 1.4)]
    assert f"with GEMMs 1.0 / 1.1 / 1.15 / 1.2 / 1.3 / 1.4x faster, {' / '.join(per_gpu)} req/s per GPU" in readme


def test_the_band_and_the_attainment_are_the_single_engine_trends_and_distserves(monkeypatch):
    # (this module restated trends.BAND as 1.5 in its rule and its verdict, and DistServe's 90 % as 0.9 and "90 %")
    from sim_core.cluster import trends as cluster_trends
    from sim_core.cluster.trends import ClusterTrend

    c = comparisons()[2]  # published 1.3x
    trend = ClusterTrend(c, 0.0, 8, 8, (3, 1), 2.4, 1.3 * 1.8)
    assert trend.direction_holds and not trend.within_band
    monkeypatch.setattr(cluster_trends, "BAND", 2.0)
    monkeypatch.setattr(cluster_trends, "ATTAINMENT", 0.8)
    text = format_trend(trend)
    assert trend.within_band and "same direction, within 2x of the claim" in text
    assert "paper 1.3x vs simulated 2.34x" in text  # (a claim of one figure is not written as a range "1.3-1.3x")
    assert f"none: under 80 % at {c.rate_lo_per_s:g} req/s already" in text


def test_a_trend_outside_its_band_says_why_where_the_reason_is_known():
    # "41.89x ... outside 1.5x of the claim" came with no word of why (a review); within the band nothing is added
    from sim_core.cluster.trends import ClusterTrend

    distserve = comparisons()[0]
    out = ClusterTrend(distserve, 0.15, 3, 3, (1, 1), 6.28, 41.89)
    assert f"\n  why: {distserve.known_gap}" in format_trend(out) and "validate" in distserve.known_gap
    assert "why:" not in format_trend(ClusterTrend(distserve, 1.0, 3, 3, (1, 1), 2.5, 2.5))
    assert all("why:" not in format_trend(ClusterTrend(c, 1.0, 8, 8, (3, 1), 100.0, 100.0)) for c in comparisons() if not c.known_gap)


def test_the_paired_presets_descriptions_say_what_their_own_runs_show():
    # Compare on the Splitwise pair showed the split at 0.71x the baseline's throughput under "Published: 1.4x
    # throughput": the claim is of capacity (above), and the presets' own runs show what their descriptions now say
    from sim_core import run_simulation
    from sim_core.presets import load_preset

    def run(name):
        return run_simulation(load_preset(name))

    co, split = run("cluster-dynamo-llama70b-fp8-8xh100-colocated"), run("cluster-dynamo-llama70b-fp8-8xh100-3p1d")
    assert "both deployments finish every request, so their throughputs match" in split.config.description
    assert co.summary.num_unfinished == split.summary.num_unfinished == 0
    assert split.summary.output_tokens_per_s == pytest.approx(co.summary.output_tokens_per_s, rel=0.02)
    assert split.summary.goodput_requests_per_s > 1.5 * co.summary.goodput_requests_per_s
    co, split = run("cluster-splitwise-llama70b-4xdgx-colocated"), run("cluster-splitwise-llama70b-4xdgx-ha-3p1d")
    assert "a makespan spent mostly draining the token machine after the last arrival" in split.config.description
    last_arrival_s = float(split.requests.arrival_s.max())
    assert split.summary.makespan_s > 2 * last_arrival_s  # (more than half of it after the last arrival)
    assert split.summary.output_tokens_per_s < co.summary.output_tokens_per_s  # the headline a reader compared
    # (what to read instead is a capacity measure, `trends`, as the description says: this run is too short to settle,
    # below, and its steady window's goodput is no capacity: with vllm-v0 refitted, session 74, it reads 19.3 req/s for
    # the split against 25.9 for the baseline, where `trends` gives the split 1.50x per cost)
    assert "judge the claim by a capacity measure ('python -m sim_core trends'" in split.config.description


def test_the_splitwise_ha_preset_says_its_run_is_too_short_to_settle_as_its_summary_does():
    # its description told a reader to "read the steady state's goodput", which the page does not show for this run
    from sim_core import run_simulation
    from sim_core.metrics import SHORT_NOTE
    from sim_core.presets import load_preset

    cfg = load_preset("cluster-splitwise-llama70b-4xdgx-ha-3p1d")
    assert "too short to settle (the page says so and shows no steady-state figures)" in cfg.description
    assert "read the steady state's goodput" not in cfg.description
    note = run_simulation(cfg).summary.steady.note
    assert note is not None and note.startswith(SHORT_NOTE), note
