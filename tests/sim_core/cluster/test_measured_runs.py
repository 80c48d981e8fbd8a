"""DistServe's measured serving runs (sim_core/cluster/measured_runs.py): the data is the artifact's, the DistServe
presets replay its requests, and the calibration profiles fitted on half the runs match the other half."""

from __future__ import annotations

import csv
import re

import numpy as np
import pytest

from sim_core.cluster.measured_runs import SYSTEM_PRESETS, SYSTEM_PROFILES, MeasuredRun, RunComparison, compare, compare_all, error_summary, fit_runs, format_table, measured_runs
from sim_core.presets import PRESETS_DIR, load_preset, read_preset_data

TRACE = PRESETS_DIR / "traces" / "distserve-sharegpt-opt13b.csv"


def _artifact_list() -> list[tuple[int, int]]:
    with TRACE.open(newline="") as f:
        return [(int(r["prompt_tokens"]), int(r["output_tokens"])) for r in csv.DictReader(f)]


def test_every_run_replays_a_prefix_of_the_artifacts_request_list():
    # the artifact's workloads are prefixes of one shuffled list of 1,600 ShareGPT requests (checked when copied);
    # the bundled trace is that list, so a run's requests and the presets' requests are the same requests
    runs, requests = measured_runs(), _artifact_list()
    assert len(runs) == 21 and sum(len(r.arrival_s) for r in runs) == 8_900 and len(requests) == 1_600
    assert {r.system for r in runs} == set(SYSTEM_PRESETS) == set(SYSTEM_PROFILES)
    for r in runs:
        n = len(r.arrival_s)
        assert r.name == f"{r.system}-{n}-{r.rate_per_s:g}"
        assert list(zip(r.prompt_tokens, r.output_tokens)) == requests[:n]
        assert r.arrival_s[0] == 0 and np.all(np.diff(r.arrival_s) >= 0)
        assert 0.7 < (n - 1) / r.arrival_s[-1] / r.rate_per_s < 1.3  # Poisson at the run's nominal rate
        assert np.all(r.ttft_ms > 0) and np.all(r.tpot_ms >= 0)


@pytest.mark.parametrize("preset", sorted(set(SYSTEM_PRESETS.values())))
def test_the_distserve_presets_replay_the_artifacts_first_300_requests_at_3_per_s(preset):
    cfg = load_preset(preset)
    tr = cfg.workload.trace
    assert cfg.workload.num_requests == 300 and list(zip(tr.prompt_tokens, tr.output_tokens)) == _artifact_list()[:300]
    assert (300 - 1) / tr.arrival_s[-1] == pytest.approx(3.0, rel=1e-3) and cfg.workload.arrival.rate_per_s == 3.0
    assert max(p + o for p, o in zip(tr.prompt_tokens, tr.output_tokens)) <= cfg.model.max_model_len  # OPT's 2,048


def test_the_fitted_and_held_out_runs_alternate_by_rate_and_share_none():
    # two runs at one rate are the same requests at nearly the same instants (one request list, one draw of gaps
    # scaled to the rate): a held-out run must be at a rate no fitted run has
    for system in SYSTEM_PRESETS:
        runs = [r for r in measured_runs() if r.system == system]
        rates = sorted({r.rate_per_s for r in runs})
        fitted = {r.rate_per_s for r in runs if r.name in fit_runs(system)}
        held = {r.rate_per_s for r in runs if r.name not in fit_runs(system)}
        assert fitted == set(rates[::2]) and held == set(rates[1::2]) and not fitted & held
        assert min(fitted) == rates[0] and len(held) >= 3


def test_runs_at_one_rate_are_the_same_requests_at_the_same_instants_and_fall_on_one_side_of_the_split():
    # review 31c: the artifact drew every run's Poisson gaps from one seed, scaled to the run's rate (the copy script
    # said "with its own Poisson arrivals"), so two runs at one rate are the same requests issued at the same instants
    # give or take the client's timing: holding out one of them against the other would test a repeat, not new traffic
    runs = measured_runs()
    first = runs[0]
    for r in runs[1:]:
        k = min(len(r.arrival_s), len(first.arrival_s))
        gaps, ref = np.diff(r.arrival_s[:k]) * r.rate_per_s, np.diff(first.arrival_s[:k]) * first.rate_per_s
        assert np.corrcoef(gaps, ref)[0, 1] > 0.99, r.name
    for a in runs:
        for b in runs:
            if a.system == b.system and a.rate_per_s == b.rate_per_s and len(a.arrival_s) < len(b.arrival_s):
                n = len(a.arrival_s)
                drift = np.max(np.abs(np.subtract(b.arrival_s[:n], a.arrival_s)))  # (the client's timing: up to 3.6 s in 50)
                assert b.prompt_tokens[:n] == a.prompt_tokens and drift < 0.1 * a.arrival_s[-1]
                assert (a.name in fit_runs(a.system)) == (b.name in fit_runs(b.system))
    assert "one draw of arrival gaps" in " ".join(fit_runs.__doc__.split())


def _one_run(output_tokens, ttft_ms, tpot_ms) -> MeasuredRun:
    n = len(output_tokens)
    return MeasuredRun("x-1-1", "vllm", 1.0, tuple(float(i) for i in range(n)), (100,) * n, tuple(output_tokens),
                       np.array(ttft_ms, dtype=float), np.array(tpot_ms, dtype=float))  # fmt: skip


def test_a_one_token_request_is_judged_by_its_ttft_alone():
    # the artifact records TPOT 0 for a request of one output token; the model has none (NaN): both meet the TPOT
    # objective, and its error counts its TTFT only
    run = _one_run([1, 5], [100.0, 300.0], [0.0, 50.0])
    cfg = load_preset(SYSTEM_PRESETS["vllm"])  # (TTFT 0.25 s, TPOT 0.1 s)
    c = RunComparison(run, False, np.array([120.0, 200.0]), np.array([np.nan, 60.0]), cfg)
    assert c.attainment(False) == 0.5 and c.attainment(True) == 1.0
    np.testing.assert_allclose(c.log_errors(), np.log([120 / 100, 200 / 300, 60 / 50]))


def _quoted(description: str, label: str) -> tuple[float, list[tuple[float, float]]]:
    part = description.split(label)[1].split(". ")[0]
    err = float(re.search(r"median \|log error\| ([\d.]+)", part).group(1))
    return err, [(float(a), float(b)) for a, b in re.findall(r"req/s: ([\d.]+) vs ([\d.]+)", part)]


@pytest.fixture(scope="module")
def comparisons() -> list[RunComparison]:
    return compare_all()


@pytest.mark.parametrize("system", sorted(SYSTEM_PROFILES))
def test_each_profile_states_its_fit_and_held_out_errors_as_fresh_runs_give_them(system, comparisons):
    text = read_preset_data("calibration", SYSTEM_PROFILES[system])["description"]
    for fitted, label in ((True, "measured serving runs"), (False, "Held out")):
        sel = [c for c in comparisons if c.run.system == system and c.fitted == fitted]
        err, att = _quoted(text, label)
        assert err == round(error_summary(sel)[0], 3)
        assert att == [(round(c.attainment(False), 2), round(c.attainment(True), 2)) for c in sel]


# vLLM's measured attainment is not monotonic in the rate (63 and 66 % at 2 req/s, 78 % at 2.5): the data's own spread
@pytest.mark.parametrize("system, most_error, most_attainment_gap", [("vllm", 0.2, 0.15), ("distserve-c21d11", 0.1, 0.05)])
def test_held_out_runs_match_their_measurement(system, most_error, most_attainment_gap, comparisons):
    # request by request (median |log(simulated / measured)| of TTFT and TPOT) and in what DistServe's goodput reads:
    # the fraction of requests meeting TTFT 0.25 s and TPOT 0.1 s, on runs the profile was not fitted on
    held = [c for c in comparisons if c.run.system == system and not c.fitted]
    assert len(held) >= 3
    err, gap = error_summary(held)
    assert err <= most_error and gap <= most_attainment_gap


def test_the_table_lists_every_run_and_each_systems_summary(comparisons):
    lines = format_table(comparisons)
    assert len(lines) == 2 + 21 + 2 * len(SYSTEM_PROFILES)
    assert all(any(line.startswith(r.name) for line in lines) for r in measured_runs())
    assert "nan" not in " ".join(lines)  # (one-token requests have no TPOT in the model: left out of both percentiles)


def test_the_cached_runs_cannot_be_written_into():
    run = measured_runs()[0]
    with pytest.raises(ValueError):
        run.ttft_ms[0] = 1.0
    with pytest.raises(ValueError):
        run.tpot_ms[0] = 1.0


def test_compare_replays_the_run_through_its_system_preset():
    run = next(r for r in measured_runs() if r.system == "distserve-c21d11")
    c = compare(run)
    assert c.ttft_ms.shape == run.ttft_ms.shape and np.all(np.isfinite(c.ttft_ms))
    assert (c.cfg.slo.ttft_s, c.cfg.slo.tpot_s) == (0.25, 0.1)
