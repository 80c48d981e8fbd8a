"""The calibrated cost model against measurements shipped in presets/calibration/data (never skipped)."""

import itertools
import math
import os

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sim_core.config import CalibrationConfig
from sim_core.presets import read_preset_data
from sim_core.validate import (
    CALIBRATION_CSV, PROFILE_FIT_ROWS, PROFILE_SECTIONS, SIMULATED_FAMILIES, SIMULATED_GRIDS, build_rows, error_stats,
    evaluate, fit, load_rows, profile_calibration, summary_lines, summary_table,
)  # fmt: skip
from tests.documents import prose, text
from tests.strategies import cases

# Rows priced by running the simulator (trtllm-bench replays) take about a minute: all of them, and the
# refit of their profile, run with SIM_CORE_SLOW_TESTS=1; by default a sample of them runs.
SLOW = os.environ.get("SIM_CORE_SLOW_TESTS") == "1"
CLOSED_FORM = tuple(p for p in PROFILE_SECTIONS if p not in SIMULATED_FAMILIES)


@pytest.fixture(scope="module")
def rows():
    return build_rows(load_rows())


@pytest.fixture(scope="module")
def results(rows):
    return evaluate([r for r in rows if SLOW or r.group not in SIMULATED_FAMILIES])


def test_the_data_ships_in_the_repository():
    assert CALIBRATION_CSV.is_file()
    assert "shared" not in CALIBRATION_CSV.parts


def test_held_out_error_stays_within_its_recorded_band(results):
    n, median, p90 = error_stats(results, engine_only=True)
    assert n >= 70
    # Closed-form families (the simulated families' rows join with SIM_CORE_SLOW_TESTS=1): recorded median 6.4 %,
    # p90 16.9 % over 148 rows; with them 5.9 % / 16.7 % over 195 (docs/accuracy.md, whose figures the tests below
    # recompute; target 8 % / 20 %).
    assert median <= 7 and p90 <= 18


def test_operator_rows_held_out_are_close(results):
    table = {(e["profile"], e["source"]): e for e in summary_table(results)}
    assert table[("operators", "Vidur mlp.csv")]["held_out_median"] <= 8
    assert table[("operators", "Vidur attention.csv + mlp.csv")]["held_out_median"] <= 8


def test_every_profile_is_fitted_on_at_least_three_rows_of_its_family(rows):
    for profile, ids in PROFILE_FIT_ROWS.items():
        fitted = [r for r in rows if r.group == profile and not r.held_out]
        assert len(fitted) >= 3 and {r.id for r in fitted} == set(ids)
        assert all(r.id.startswith(PROFILE_SECTIONS[profile]) for r in fitted)


def test_every_profiles_description_names_its_fit_rows():
    # (the sidebar shows a profile's description: tensorrt-llm-classic's named 6 of its 10 fit rows after a refit
    # added four, and still said FasterTransformer ran on it after it got its own profile)
    for profile, ids in PROFILE_FIT_ROWS.items():
        text = read_preset_data("calibration", profile)["description"]
        assert all(i in text for i in ids), (profile, [i for i in ids if i not in text])


def test_fit_and_held_out_rows_are_disjoint_and_both_reported(results):
    for e in summary_table(results):
        assert e["fit_n"] + e["held_out_n"] > 0
    assert any(not r["fit"] for r in results) and any(r["fit"] for r in results)


def test_the_report_gives_each_source_whole_and_no_error_where_a_split_has_no_rows(results):
    # the source was cut to 48-50 characters ("Figure 2 data (d" / "(p") and a source without fit rows read "nan"
    table = summary_table(results)
    lines = summary_lines(table)
    assert len({(e["profile"], e["source"]) for e in table}) == len(table) == len(lines) - 3
    assert all(line.endswith(e["source"]) for line, e in zip(lines[3:], table, strict=True))
    assert {"Sarathi-Serve OSDI'24 artifact, Figure 2 data (decode.csv)", "Sarathi-Serve OSDI'24 artifact, Figure 2 data "
            "(prefill.csv)"} <= {e["source"] for e in table}
    assert not any("nan" in line for line in lines)
    assert any(e["fit_n"] == 0 for e in table) and all(" –      – |" in line for line, e in zip(lines[3:], table) if not e["fit_n"])


@pytest.fixture(scope="module")
def closed_form_fit(rows):
    return fit(rows, families=CLOSED_FORM)


def test_stored_profiles_are_what_the_fit_produces(closed_form_fit):
    fitted = closed_form_fit
    assert CalibrationConfig().model_dump() == pytest.approx(fitted["default"])
    for preset in ("a100-80gb", "a100-40gb", "a100-80gb-pcie", "a100-80gb-pcie-nvlink-bridge", "h100-sxm"):
        gpu = "h100" if preset.startswith("h100") else "a100"
        assert read_preset_data("hardware", preset)["hbm_efficiency_scale"] == fitted["hbm_efficiency_scale"][gpu]
    for name in CLOSED_FORM:
        assert profile_calibration(name) == pytest.approx(fitted[name])


def test_no_fitted_profile_streams_hbm_faster_than_a_datasheet(closed_form_fit):
    # Every profile runs on every GPU preset at memory_efficiency x hbm_efficiency_scale of the datasheet bandwidth:
    # the fit's grid went to 0.95, and compiled-pytorch (whose efficiencies the simulated families start from) sat
    # at that bound, 0.95 x 1.0695 = 1.016 on an H100. The simulated families do not refit memory_efficiency.
    top = max(closed_form_fit["hbm_efficiency_scale"].values())
    for name in (*CLOSED_FORM, "default"):
        assert closed_form_fit[name]["memory_efficiency"] * top <= 1, name


@given(st.floats(0.5, 2))
@cases(50)
def test_the_memory_efficiency_grid_stops_at_the_datasheet(scale):
    from sim_core.validate import _memory_efficiency_grid

    grid = _memory_efficiency_grid((scale, 1.0))
    assert grid.size and np.all(grid * max(scale, 1.0) <= 1 + 1e-12)


def test_simulated_family_sample_is_close(rows):
    # held-out rows of each simulated family: TensorRT-LLM 1.0 on other hardware and model than its fit rows
    # (H200 8B, H100 70B TP2); SGLang 0.3 and vLLM 0.6 offline throughput of 70B at TP4; vLLM V1 mean latency
    # of 8B near its knee (50 req/s) and of 70B TP4 at 20 req/s
    sample = [r for r in rows if r.id in ("T016", "T025", "S010", "V006", "W004", "W011")]
    assert len(sample) == 6 and all(r.held_out for r in sample)
    for row in evaluate(sample):
        assert row["error_pct"] <= 20, row


def test_every_engine_preset_names_a_profile_fitted_on_its_own_family():
    # vLLM V1 no longer borrows SGLang's profile; the TensorRT-LLM, vLLM V0, SGLang, Sarathi-Serve presets use theirs
    for engine in ("vllm-v1", "vllm-v0", "vllm-v0-swap", "sglang", "sarathi-serve", "tensorrt-llm-pytorch",
                   "tensorrt-llm-no-evict", "tensorrt-llm-max-utilization", "fastertransformer"):
        profile = read_preset_data("engines", engine)["calibration"]
        assert profile in PROFILE_FIT_ROWS and len(PROFILE_FIT_ROWS[profile]) >= 3, engine
    assert read_preset_data("engines", "vllm-v1")["calibration"] == "vllm-v1"
    # FasterTransformer no longer borrows TensorRT-LLM's profile: its own is fitted on its own latency tables
    assert read_preset_data("engines", "fastertransformer")["calibration"] == "fastertransformer"


def _rate_and_latency(row: dict[str, str]) -> tuple[float, float]:
    from sim_core.validate import offered_rate_per_s

    return offered_rate_per_s(row), float(row["value"])


def _measured_saturation_rate(panel: list[dict[str, str]]) -> float:
    """The sustainable rate a panel's own points give: its two highest-rate points overloaded, the one below them not.
    N prompts offered at λ > μ and served at μ add N/2·(1/μ − 1/λ) to the mean latency (the queue grows linearly), so
    L(λ) = L(base) + N/2·(1/μ − 1/λ) through the two overloaded points: two equations, N and μ unknown."""
    (_, base), (r1, l1), (r2, l2) = (_rate_and_latency(r) for r in panel[-3:])
    half_n = (l2 - l1) / (1 / r1 - 1 / r2)
    return 1 / ((l1 - base) / half_n + 1 / r1)


@pytest.mark.parametrize("gpus, saturation", [("1", 56.0), ("4", 23.3)])
def test_rows_above_the_measured_saturation_rate_are_graded_c(gpus, saturation):
    # vLLM's V1 figure does not state its prompt count, and above the sustainable rate an open-loop benchmark's mean
    # latency grows with it: such a row is under-specified, graded C and not replayed (data README, section 18). The
    # rate is the source's own (its overload points), not the model's: the rule used until session 74, a row whose
    # simulated value moved > 10 % between 1,000 and 5,000 prompts, graded the rows by the profile being graded (the
    # seed-0 refit of vllm-v1 to 1.5 ms a tick, docs/accuracy.md, moved W004, 50 req/s on 8B, by 12.8 %)
    panel = [r for r in load_rows() if r["id"].startswith("W") and r["num_gpus"] == gpus]
    mu = _measured_saturation_rate(panel)
    assert mu == pytest.approx(saturation, abs=0.05)
    rates = [_rate_and_latency(r)[0] for r in panel]
    assert rates[-3] < mu < rates[-2]  # (the premise: the two highest rates overloaded, the one below them not)
    for r, rate in zip(panel, rates):
        assert (r["trust"] == "C") == (rate > mu), r["id"]


def test_simulated_profile_is_a_minimum_of_its_fit_loss(rows):
    # The full refit (minutes) runs with SIM_CORE_SLOW_TESTS=1; always: the stored constants beat their grid
    # neighbours on the family's fit rows, one constant at a time.
    from sim_core.validate import _fit_rows, _log_loss

    for name in SIMULATED_FAMILIES if SLOW else SIMULATED_FAMILIES[:1]:
        stored = profile_calibration(name)
        fit_rows = _fit_rows(rows, name)
        loss = _log_loss(fit_rows, stored)
        for key, grid in SIMULATED_GRIDS[name].items():
            step = float(grid[1] - grid[0])
            for value in (stored[key] - step, stored[key] + step):
                if grid[0] <= value <= grid[-1] + 1e-9:
                    assert loss <= _log_loss(fit_rows, stored | {key: value}), (name, key, value)
        if SLOW:
            assert stored == pytest.approx(fit(rows, families=(name,))[name])


def test_the_simulated_fit_prices_each_grid_point_once_and_lands_where_an_unremembered_search_does(rows, monkeypatch):
    # A simulated family's point costs seconds (five seeds a row): `_product_then_descent` keeps each point's loss for
    # its call, so the descent's revisits (its current point in every sweep, the product's points) are not simulated
    # again. Checked on a closed-form family's rows, where a point is cheap, over a small product of three grids.
    import sim_core.validate as validate

    fit_rows = validate._fit_rows(rows, "fastertransformer")
    start = profile_calibration("fastertransformer")
    grids = {"tick_overhead_ms": np.arange(0, 3.01, 0.5), "per_seq_overhead_us": np.arange(0, 60.1, 10.0),
             "layer_fixed_us": np.arange(0, 40.1, 5.0)}
    priced = []
    real_loss = validate._log_loss
    monkeypatch.setattr(validate, "_log_loss", lambda r, cal: priced.append(tuple(cal[k] for k in grids)) or real_loss(r, cal))
    found = validate._product_then_descent(fit_rows, start, grids)
    assert len(priced) == len(set(priced)) > math.prod(len(g[::2]) for g in grids.values())  # (the product, then more)
    # without the memo: the same product, then the plain descent (which prices its current point in every sweep)
    names = list(grids)
    best = min(itertools.product(*[g[::2] for g in grids.values()]),
               key=lambda point: real_loss(fit_rows, start | dict(zip(names, map(float, point)))))
    monkeypatch.setattr(validate, "_log_loss", real_loss)
    assert found == validate._grid_fit(fit_rows, start | dict(zip(names, map(float, best))), grids, rounds=20)


def test_engine_error_band_is_the_closed_form_held_out_figure(results):
    from sim_core.validate import engine_error_band

    closed = [r for r in results if r["profile"] in CLOSED_FORM]
    assert engine_error_band() == pytest.approx(error_stats(closed, engine_only=True))
    # the planner quotes this band ("cost-model error on 148 held-out published measurements"), not the 195 rows of
    # "How good is the model": the planner's text (docs/capacity.md) says which it is
    num, median, p90 = engine_error_band()
    readme = prose("capacity")
    assert (f"(the {num} held-out engine-level rows priced in closed form, `validate.engine_error_band`: median {median:.1f} %, "
            f"p90 {p90:.1f} %; the 195 below add the simulated families' rows)") in readme


def test_the_readme_quotes_fastertransformers_gpt20b_errors_at_tp1_and_tp8(results):
    # "now within 4-11 % at both" (since the per-GEMM time) while the TP1 rows ran 4-12 % slow and the TP8 rows from
    # 10 % fast to 4 % slow: each end recomputed from the rows (signed: + is the model slower than the table)
    def signed(tp: str) -> list[float]:
        return [100 * (r["predicted"] / r["measured"] - 1) for r in results if r["what"].startswith(f"GPT-20B A100-SXM-80GB {tp} ")]

    tp1, tp8 = signed("TP1"), signed("TP8")
    assert len(tp1) == len(tp8) == 10 and min(tp1) > 0 and min(tp8) < 0 < max(tp8)
    readme = prose("accuracy")
    assert (f"now {min(tp1):.0f}–{max(tp1):.0f} % too slow at TP1 and from {-min(tp8):.0f} % too fast to {max(tp8):.0f} % too "
            f"slow at TP8") in readme  # fmt: skip


def test_each_rows_label_is_whole_and_tells_rows_of_one_run_apart(rows):
    # `validate` cut every label at 54 characters and the GPU at 9: SGLang's median TTFT and TPOT rows at one rate
    # both read "... SGLang 0.3.0 median T", the GPU "H100-SXM-"; labels are now whole and the column as wide as they
    whats = {r.id: r.what for r in rows}
    assert whats["S001"].endswith("median TTFT, Poisson request rate 4/s") and "A100-SXM-80GB" in whats["S001"]
    assert whats["S002"].endswith("median TPOT, Poisson request rate 4/s")
    assert not any(w.endswith(("(re", "throug")) for w in whats.values())


@pytest.fixture(scope="module")
def every_result(rows, results):
    # (the simulated families' held-out rows, ~7 s: the split below needs them whatever SIM_CORE_SLOW_TESTS says)
    return results if SLOW else results + evaluate([r for r in rows if r.group in SIMULATED_FAMILIES])


def test_the_held_out_error_is_given_by_kind_of_row_and_the_serving_rows_err_most(every_result):
    # a review: the 195 rows' 6.4 % median was three-quarters static batches with no queue, while the serving rows,
    # which scheduling and queueing decide, err ~15 %; the planner quoted the closed-form band alone
    from sim_core.planner import CalibrationBand
    from sim_core.validate import ROW_KINDS, error_stats_by_kind, row_kind

    by_kind = error_stats_by_kind(every_result)
    assert list(by_kind) == list(ROW_KINDS)
    assert sum(n for n, _, _ in by_kind.values()) == error_stats(every_result, engine_only=True)[0] == 195
    static, offline, serving = by_kind.values()
    assert serving[1] > 2 * static[1] and serving[2] > static[2]  # the planner's "errs more"
    assert all(row_kind(r) == ROW_KINDS[2] for r in every_result if r["id"].startswith(("W", "S00")) and r["unit"] != "tok/s")
    table = prose("accuracy")
    for kind, (n, median, p90) in by_kind.items():
        assert f"| {kind} | {n} | {median:.1f} % | {p90:.1f} % |" in table
    n, median, p90 = error_stats(every_result, engine_only=True)
    assert (f"Held-out engine-level rows ({n}): median {median:.1f} %, p90 {p90:.1f} % (target 8 % / 20 %); **serving latencies under "
            f"arrivals ({serving[0]}): {serving[1]:.1f} % / {serving[2]:.1f} %**, low just below saturation; static batches "
            f"({static[0]}) {static[1]:.1f} % / {static[2]:.1f} %, offline runs ({offline[0]}) {offline[1]:.1f} % / "
            f"{offline[2]:.1f} %.") in prose()  # fmt: skip
    assert f"(the {serving[0]} held-out serving rows: median {serving[1]:.1f} %, p90 {serving[2]:.1f} %)" in prose("capacity")
    assert "Latency under arrivals, which queueing decides, errs more" in CalibrationBand(6.4, 16.9, 148).text()


# docs/accuracy.md's table, by the start of a row's source cell: the rows each line summarises
ACCURACY_TABLE_ROWS = {
    "Vidur mlp.csv (GEMMs": lambda r: r["source"] == "Vidur mlp.csv",
    "Vidur attention.csv + mlp.csv (70B": lambda r: r["source"] == "Vidur attention.csv + mlp.csv",
    "Vidur all_reduce.csv (A100": lambda r: r["source"] == "Vidur all_reduce.csv",
    "TensorRT-LLM v0.5 performance tables": lambda r: r["profile"] == "tensorrt-llm-classic" and "release/0.5.0" in r["source"],
    "TensorRT-LLM v0.6.1 tables": lambda r: r["profile"] == "tensorrt-llm-classic" and "v0.6.1" in r["source"],
    "FasterTransformer's own latency tables": lambda r: r["profile"] == "fastertransformer",
    "TensorRT-LLM 1.0 performance overview": lambda r: r["profile"] == "tensorrt-llm-pytorch",
    "vLLM 0.6.0 in SGLang's": lambda r: r["profile"] == "vllm-v0",
    "vLLM 0.7.0 V1 engine": lambda r: r["profile"] == "vllm-v1",
    "SGLang 0.3.0, SGLang's": lambda r: r["profile"] == "sglang",
    "gpt-fast batch-1 decode": lambda r: r["profile"] == "compiled-pytorch",
}


def test_the_accuracy_tables_rows_are_validates_figures(every_result):
    # a review found figures beside this table left from before session 75's refit; the table itself was read by
    # no test, so each row (fit and held-out rows of its sources) is recomputed here
    def cell(rows: list[dict]) -> str:
        errs = [r["error_pct"] for r in rows]
        return f"{len(errs)}: {np.median(errs):.1f} / {np.percentile(errs, 90):.1f} %" if errs else "0"

    lines = text("accuracy").splitlines()
    for start, picks in ACCURACY_TABLE_ROWS.items():
        (line,) = [ln for ln in lines if ln.startswith("| ") and ln.split(" | ")[1].startswith(start)]
        rows = [r for r in every_result if picks(r)]
        fit, held = cell([r for r in rows if r["fit"]]), cell([r for r in rows if not r["fit"]])
        assert f"| {fit} | {held}" in line, (start, fit, held)
    assert sum(len([r for r in every_result if picks(r)]) for picks in ACCURACY_TABLE_ROWS.values()) > 600


def test_the_accuracy_sizing_reading_quotes_the_held_out_figures(every_result):
    # "a held-out median error of 6 % and p90 of 18 %" stayed after the 195 rows' p90 moved to 16.7 %
    n, median, p90 = error_stats(every_result, engine_only=True)
    doc = prose("accuracy")
    assert f"**Engine-level held-out rows ({n}): median {median:.1f} %, p90 {p90:.1f} %**" in doc
    assert (f"held-out median error of {median:.0f} % and p90 of {p90:.0f} % read as: a simulated capacity is within "
            f"±{median:.0f} % for half of the setups and within ±{p90:.0f} % for nine in ten") in doc
