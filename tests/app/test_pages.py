"""AppTest for every page: renders, widgets change results, links round-trip, bad input is explained."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from app.components import workshop
from app.components.config_form import SECTIONS
from app.state import CFG_KEY, decode_config, encode_config
from sim_core import load_preset, run_simulation
from sim_core.lessons import load_lessons
from tests.conftest import make_config

APP = str(Path(__file__).resolve().parents[2] / "app" / "streamlit_app.py")
PAGES = ["app_pages/simulate.py", "app_pages/compare.py", "app_pages/sweep.py", "app_pages/learn.py", "app_pages/about.py",
         "app_pages/plan.py", "app_pages/glossary.py"]
TIMEOUT = 120


def app(open_sections: bool = True, **query) -> AppTest:
    """The app, by default with every sidebar section open (they are lazy: a closed one draws nothing)."""
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    if open_sections:
        for section in SECTIONS:
            at.session_state[f"ui.section.{section}"] = True
    for k, v in query.items():
        at.query_params[k] = v
    return at


def instance_table(preset: str = "cluster-dynamo-llama70b-fp8-8xh100-3p1d"):
    """(the app, its per-instance table) on the Requests tab of a deployment preset."""
    at = app(preset=preset)
    at.session_state["ui.tab"] = "Requests"
    at.run()
    assert not at.exception
    return at, next(d for d in at.dataframe if "instance" in d.value.columns)


def open_page(page: str, **query) -> AppTest:
    """Open a page the way a link to it does: the page's own query params survive navigation."""
    at = app().run()
    at.switch_page(page)
    for k, v in query.items():
        at.query_params[k] = v
    return at.run()


def metric(at: AppTest, label: str) -> str:
    return next(m.value for m in at.metric if m.label == label)


@pytest.mark.parametrize("page", PAGES)
def test_every_page_renders_without_exception(page):
    at = app().run()
    if page != PAGES[0]:
        at.switch_page(page).run()
    assert not at.exception
    assert not at.error, [e.value for e in at.error]


def test_default_page_shows_the_headline_numbers():
    at = app().run()
    labels = {m.label for m in at.metric}
    assert {"Output throughput", "TTFT p50", "TPOT p50", "Goodput", "GPU busy", "Pre-emptions", "KV cache peak"} <= labels
    assert at.query_params["preset"] == "chat-h100-llama8b"


def test_moving_the_chunk_slider_changes_the_result_and_the_link():
    at = app(preset="chat-h100-llama8b-vllm-v0").run()
    before = metric(at, "TPOT p50"), metric(at, "TTFT p50")
    at.selectbox(key="w.scheduler.prefill_mode").set_value("decode_first").run()
    at.select_slider(key="w.scheduler.max_num_batched_tokens").set_value(512).run()
    assert not at.exception
    assert (metric(at, "TPOT p50"), metric(at, "TTFT p50")) != before
    # a readable link: the preset plus the two knobs that moved
    assert at.query_params["preset"] == "chat-h100-llama8b-vllm-v0"
    assert at.query_params["scheduler.max_num_batched_tokens"] == "512"
    assert at.query_params["scheduler.prefill_mode"] == "decode_first"
    assert at.session_state[CFG_KEY].scheduler.max_num_batched_tokens == 512


def test_the_deployment_section_comes_before_the_engines_knobs():
    # a review of lesson 14: its Router sat at the foot of the sidebar, below the open Hardware and Scheduler sections
    at = app(open_sections=False, preset="multi-turn-chat-h100-llama8b", **{"deployment.replicas": "4"}).run()
    labels = [e.label for e in at.sidebar.expander]
    assert labels.index("Deployment (replicas, disaggregation)") < labels.index("Hardware"), labels
    deployment = next(e for e in at.sidebar.expander if e.label.startswith("Deployment"))
    assert any(s.label == "Router" for s in deployment.selectbox) and deployment.proto.expanded
    single = app(open_sections=False).run()  # one engine: the section is there, closed
    assert not next(e for e in single.sidebar.expander if e.label.startswith("Deployment")).proto.expanded


def test_a_deployments_kv_peak_names_the_instance_and_the_pool_it_is_a_share_of():
    # The lesson-12 preset said "KV cache peak 38% of 910,304 tokens": 38% is replica 0's peak of its own 455,152 tokens
    # (the Requests tab: replica 0 38.33%, replica 1 0.15%); 38% of both replicas' 910,304 was never in use.
    at = app(preset="cluster-router-2xh100-agent-pairs").run()
    peak = next(m for m in at.metric if m.label == "KV cache peak")
    assert "replica 0" in peak.delta and "456,432" in peak.delta and "912,864" not in peak.delta, peak.delta
    # with the Requests tab's one decimal (the headline read "34%" above a row reading 34.5 %)
    from sim_core.cluster.report import instance_rows

    res = run_simulation(load_preset("cluster-router-2xh100-agent-pairs"))
    table = next(r["kv_peak"] for r in instance_rows(res) if r["instance"].startswith("replica 0"))
    assert peak.value == f"{table * 100:.1f}%" == "38.2%", (peak.value, table)
    one = app(preset="chat-h100-llama8b").run()  # one engine: its own pool, as before
    assert next(m for m in one.metric if m.label == "KV cache peak").delta == "of 456,432 tokens"


def test_one_engines_kv_peak_has_the_decimal_its_kv_panel_writes():
    # mechanism-chunked-prefill's headline read "1%" above its KV panel's "peak in view 1.1 %" (a whole-run window)
    from app.components.timeline import kv_peak_text

    at = app(preset="mechanism-chunked-prefill").run()
    peak = next(m for m in at.metric if m.label == "KV cache peak").value
    usage = run_simulation(load_preset("mechanism-chunked-prefill")).summary.kv_peak_usage
    assert peak == f"{usage:.1%}" and f"{usage * 100:.1f} %" in kv_peak_text(usage * 100), (peak, usage)


def test_a_deployment_whose_decode_side_streams_the_first_token_says_what_the_instance_ttft_is():
    # The 3P1D preset streams the first token from the decode side: the table's caption said "TTFT on the instances
    # that emit first tokens" beside prefill instances at 416-443 ms (their prefill's end) under a headline TTFT p50
    # of 468 ms, which no mixture of those instances can have
    import json

    at, table = instance_table()
    caption = " ".join(c.value for c in at.caption if c.value.startswith("Per instance"))
    assert "instances that emit first tokens" not in caption and "decode side" in caption, caption
    assert "headline" in caption, caption
    help_ = json.loads(table.proto.columns)["ttft_p50_ms"]["help"]
    assert "prefill" in help_ and "decode side" in help_, help_
    # a split whose prefill side streams the first token says it as before
    at, table = instance_table("cluster-distserve-opt13b-3xa100-p2d1")
    caption = " ".join(c.value for c in at.caption if c.value.startswith("Per instance"))
    assert "TTFT on the instances that emit first tokens" in caption, caption


def test_a_deployments_tables_show_a_missing_latency_as_a_dash_and_say_why():
    # The Requests tab of a 3P1D deployment showed "None" for the prefill instances' TPOT and the decode instance's
    # TTFT (NaN in a number column); the requests table did the same for an unfinished request's finish and TTFT.
    import json

    at, table = instance_table()
    rows = table.value.set_index("instance")
    assert rows["tpot_p50_ms"].isna().tolist() == [True, True, True, False]  # the data stays numbers (sortable)
    assert table.proto.placeholder == "–"  # (as fmt_number writes NaN)
    columns = json.loads(table.proto.columns)
    assert "decode instance" in columns["ttft_p50_ms"]["help"] and "prefill instance" in columns["tpot_p50_ms"]["help"]
    assert columns["ticks"]["type_config"]["format"] == "localized"  # 2,054 ticks, as prompt tokens 1,200,000
    # busy and KV peak with one decimal each (Streamlit's "percent" printed "77.9%" beside "77.27%"), from the result's
    # fractions
    assert {columns[c]["type_config"]["format"] for c in ("busy", "kv_peak")} == {"%.1f%%"}
    assert 0 < rows["busy"].max() <= 100 and rows["busy"].max() > 1  # percent, not a fraction
    requests = next(d for d in at.dataframe if "request_id" in d.value.columns)
    assert requests.proto.placeholder == "–"  # the requests table too


def test_the_roofline_tab_shows_the_compute_bound_share_and_mfu_lesson_13_quotes():
    # Lesson 13's answer: "compute-bound ticks go from about 23 % to 63 % of the GPU's busy time (MFU about 15 % → 31 %)"
    # (over the busy time; a plain mean of the ticks' MFU read 8 % → 18 %)."
    # Neither figure was on any page (MFU only in the Glossary): a student could not check the answer against the run.
    lesson = next(x for x in load_lessons() if x.id == "spec-decode-saturation")
    for step, share, mfu in ((0, "23%", "15%"), (1, "63%", "31%")):
        assert share.replace("%", " %") in lesson.answer and mfu.replace("%", " %") in lesson.answer
        at = app(cfg=encode_config(lesson.config(step)))
        at.session_state["ui.tab"] = "Roofline"
        at.run()
        said = " ".join(c.value for c in at.caption)
        assert f"{share} of the busy time in compute-bound ticks" in said and f"MFU {mfu} and MBU" in said, said
        # where a tick turns compute-bound: the calibrated roof's knee (dots left of the datasheet's ridge counted)
        from sim_core.costmodel import CostModel

        cm = CostModel(lesson.config(step))
        assert f"past the calibrated roof's knee, about {cm.gemm_flops_per_s / cm.achieved_hbm_bytes_per_s:,.0f} FLOP/byte" in said


def test_a_shared_link_reproduces_config_and_numbers():
    cfg = make_config(seed=7, workload__num_requests=120, scheduler__max_num_seqs=32)
    at = app(cfg=encode_config(cfg)).run()
    assert at.session_state[CFG_KEY] == cfg
    assert at.number_input(key="w.seed").value == 7
    again = app(cfg=encode_config(cfg)).run()
    assert [m.value for m in again.metric] == [m.value for m in at.metric]


def test_a_readable_link_sets_the_knobs():
    at = app(preset="engine-sarathi-serve", **{"scheduler.max_num_batched_tokens": "4096"}).run()
    assert at.session_state[CFG_KEY].scheduler.max_num_batched_tokens == 4096
    assert at.select_slider(key="w.scheduler.max_num_batched_tokens").value == 4096


def test_a_link_that_changes_knobs_without_naming_a_preset_changes_the_default_scenario():
    # ?workload.num_requests=120 opened the default's 300 requests, and ?scheduler.max_num_batched_tokens=-5 the default,
    # both without a word: a hand-edited link (the preset dropped) did nothing the student could see.
    at = app(**{"workload.num_requests": "120"}).run()
    assert at.session_state[CFG_KEY] == load_preset("chat-h100-llama8b").model_copy(
        update={"workload": load_preset("chat-h100-llama8b").workload.model_copy(update={"num_requests": 120})})
    assert not at.warning and metric(at, "Finished") == "120 / 120"
    assert dict(at.query_params) == {"preset": "chat-h100-llama8b", "workload.num_requests": "120"}  # the address names it
    bad = app(**{"scheduler.max_num_batched_tokens": "-5"}).run()
    assert any("scheduler.max_num_batched_tokens = -5" in w.value and "1048576" in w.value for w in bad.warning), bad.warning


def test_a_broken_link_warns_and_falls_back_to_the_default():
    at = app(cfg="definitely-not-a-config").run()
    assert not at.exception
    assert any("default scenario" in w.value for w in at.warning)
    assert at.session_state[CFG_KEY] == load_preset("chat-h100-llama8b")


def test_an_invalid_combination_is_reported_and_the_last_result_kept():
    at = app().run()
    before = [m.value for m in at.metric]
    at.number_input(key="w.workload.prompt_tokens.max").set_value(100).run()  # below the mean
    assert not at.exception
    side = [e.value for e in at.sidebar.error]
    # in the widgets' words, next to them: the field the check names, its value and the range
    assert any("“Prompt mean” = 1155: must lie between “Prompt min” (16) and “Prompt max” (100)" in e for e in side), side
    assert any("Prompt length" in e.value for e in at.main.error)  # and at the top of the page
    assert [m.value for m in at.metric] == before


def test_a_cross_field_error_names_both_knobs_by_their_labels():
    at = app(preset="chat-h100-llama8b").run()
    at.select_slider(key="w.scheduler.max_num_batched_tokens").set_value(128).run()
    msg = " ".join(e.value for e in at.sidebar.error)
    assert ("“Token budget / chunk size” = 128: must be ≥ “Max batch size” (256) under “Prefill mode” 'decode_first'"
            in msg and "max_num_seqs" not in msg), msg
    assert len(at.sidebar.error) == 3  # under each of the three knobs


def test_an_hbm_efficiency_past_the_datasheet_is_named_under_its_knob():
    # on an H100 (hbm_efficiency_scale 1.0695) 0.99 would stream HBM at 1.06x its datasheet: refused, with the range
    at = app(preset="chat-h100-llama8b").run()
    before = [m.value for m in at.metric]
    at.slider(key="w.calibration.memory_efficiency").set_value(0.99).run()
    assert not at.exception
    msg = " ".join(e.value for e in at.sidebar.error)
    assert "“HBM efficiency” = 0.99" in msg and "hbm_efficiency_scale = 1.0695" in msg and "≤ 0.935" in msg
    assert len(at.sidebar.error) == 1 and [m.value for m in at.metric] == before


def test_out_of_memory_shows_the_numbers_and_the_knob():
    at = app(preset="prefill-oom-l4-llama8b").run()
    at.select_slider(key="w.scheduler.max_num_batched_tokens").set_value(65536).run()
    assert not at.exception
    msg = " ".join(e.value for e in at.error)
    # the knobs by the sidebar's labels and sections (the CLI's message names config paths, which a student
    # cannot find in the sidebar)
    assert "Out of memory" in msg and "“Token budget / chunk size” (Scheduler) (65536)" in msg and "GiB" in msg
    assert "“Memory” (Hardware) = " in msg and "max_num_batched_tokens" not in msg and "hardware." not in msg


def test_a_runs_notes_name_settings_by_the_sidebars_labels():
    # engine-vllm-v0-swap's note read "scheduler.preemption = 'swap', but no request was pre-empted ... a lower
    # kv_cache.gpu_memory_utilization": config paths a student cannot find in the sidebar
    at = app(preset="engine-vllm-v0-swap").run()
    notes = [c.value for c in at.caption if "no request was pre-empted" in c.value]
    assert len(notes) == 1 and "“Pre-emption” (Scheduler) = 'swap'" in notes[0], notes
    assert "“GPU memory utilisation” (KV cache" in notes[0] and "scheduler." not in notes[0]  # (& escaped: text)


def test_the_preset_picker_loads_a_scenario():
    at = app().run()
    at.sidebar.selectbox(key="w.preset").set_value("engine-orca").run()
    assert at.session_state[CFG_KEY] == load_preset("engine-orca")
    assert at.query_params["preset"] == "engine-orca"


def test_a_run_stopped_by_the_guard_says_so_with_partial_results():
    cfg = make_config(workload__arrival__rate_per_s=200.0, workload__num_requests=2000, limits__max_sim_time_s=5.0)
    at = app(cfg=encode_config(cfg)).run()
    assert any("did not finish" in w.value for w in at.warning)
    assert metric(at, "Finished").split(" / ")[1] == "2,000"


def test_compare_page_link_carries_both_setups():
    at = open_page(PAGES[1], a_preset="engine-orca", b_preset="engine-vllm-v0")
    assert not at.exception
    assert sum("(from the link)" in m.value for m in at.markdown) == 2
    assert at.query_params["a_preset"] == "engine-orca" and at.query_params["b_preset"] == "engine-vllm-v0"
    df = at.table[0].value
    assert list(df.index)[:2] == ["Output throughput", "Goodput"]
    assert list(df.columns) == ["A", "B", "B / A"]  # narrow enough for a phone
    assert "Swaps" in df.index  # (recompute and swap read the same pre-emption count)
    finished = df.loc["Finished"]
    assert "." not in finished["A"] and "." not in finished["B"]  # counts are integers
    assert any(" s" in v or " ms" in v for v in df.loc["TTFT p50", ["A", "B"]])
    # a time's decimals keep three significant digits ("1.9 s" beside "2.11 s" read as a less precise figure)
    times = [v for v in df[["A", "B"]].to_numpy().ravel() if v.endswith((" s", " ms")) and "." in v]
    assert times and all(len(v.split()[0].replace(".", "").lstrip("0")) == 3 for v in times), times
    # a ratio says which side did better only with the metric's direction (ui37: a class hesitated over "0.80×"); each
    # cell says it too, where the metric has a better way (a reader flipped the direction row by row)
    assert any(c.value.startswith("B / A is B's value over A's, and whether B is better or worse. Below 1× B is lower: "
                                  "better for the latencies") for c in at.caption)  # fmt: skip
    for row, higher_better in (("TTFT p99", False), ("Goodput", True), ("Finished", True)):
        cell = df.loc[row]["B / A"]
        if cell not in ("1.00×", "–"):
            ratio = float(cell.split("×")[0])
            assert cell.endswith("better" if (ratio > 1) == higher_better else "worse"), (row, cell)
    assert df.loc["GPU busy"]["B / A"].endswith("×")  # (neither way is better)


def test_compare_shows_per_class_latency_and_says_when_b_loses_its_workload():
    at = open_page(PAGES[1], a_preset="engine-article-priority", b_preset="chat-h100-llama8b")
    df = at.table[0].value
    assert any(m.startswith("TTFT p99 · interactive") for m in df.index)
    assert any("replaced by A's" in c.value for c in at.caption)


def test_sweep_page_sweeps_the_rate_and_marks_capacity():
    at = open_page(PAGES[2], preset="chat-h100-llama8b", sweep="rate", start="4", stop="24", n="4")
    assert not at.exception
    assert at.query_params["sweep"] == "rate" and at.query_params["n"] == "4"
    rows = at.dataframe[0].value
    assert len(rows) >= 2 and "output tok/s" in rows.columns
    assert any("capacity" in m.value for m in at.markdown)
    import json

    specs = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    assert len(specs) == 3
    spec = specs[0]
    from tests.app.test_charts import numeric_axes_without_separators, raw_numbers_in_hover

    # the throughput axis read "1000" and "2000" (and its hovers "1234.567891") beside the table's 1,234
    assert not numeric_axes_without_separators(spec["layout"]) and not [raw_numbers_in_hover(t.get("hovertemplate", "")) for t in spec["data"] if raw_numbers_in_hover(t.get("hovertemplate", ""))]
    assert spec["layout"]["yaxis"]["tickformat"] == "," and spec["layout"]["yaxis"]["hoverformat"] == ",.6~r"
    for fig in specs:
        shown = [t for t in fig["data"] if t.get("showlegend", True) and t.get("name")]
        legend = [t["name"] for t in shown]
        assert len(legend) == len(set(legend)) and len(legend) <= 6
        # each entry says what it is: the setup by a colour square (not a line beside "<name> TTFT p99"), the lines by
        # style; one entry per setup and series (10 with a second setup, in columns) overlapped the axis titles on a phone
        assert [t["marker"]["symbol"] for t in shown if t["name"] == "vLLM V1"] == ["square"]
        assert fig["layout"]["xaxis"]["title"]["text"] == "arrival rate (requests/s)"  # each stands alone on a phone
    assert "TTFT p50" in [t["name"] for t in specs[2]["data"]]
    # the capacity line's legend sample shows its pattern ("longdash" drew one short stroke in its ~30 px, read as
    # solid) and is none of the series' styles
    cap = next(t for t in specs[2]["data"] if t.get("name") == "capacity (vertical)")
    series = {t["line"]["dash"] for t in specs[2]["data"] if t.get("line", {}).get("dash") and t.get("name") != "capacity (vertical)"}
    assert cap["line"]["dash"] == "dashdot" and "dashdot" not in series
    assert all(s["line"]["dash"] == "dashdot" for s in specs[2]["layout"]["shapes"])  # the line itself, as its sample
    assert [f["layout"]["title"]["text"] for f in specs] == ["Throughput (tok/s)", "Goodput (req/s)", "Latency (ms, log)"]
    assert specs[2]["layout"]["yaxis"]["type"] == "log" and specs[2]["layout"]["yaxis"]["ticktext"]  # 10, 20, 50, not bare digits


def test_sweeps_charts_are_each_a_figure_tall_enough_to_read_on_a_phone():
    # One figure of three panels side by side, 430 px tall: on a 390-px phone each panel was 87 px wide, its plot 216 px
    # tall (193 with a second setup's legend). Three figures, each with its own axes and legend, sit side by side on a
    # wide page and one under the other (each the page's width) on a narrow one (test_browser measures both); the same
    # height and bottom margin in each keeps their plots as tall as each other, whatever their legends.
    import json

    at = open_page(PAGES[2], preset="chat-h100-llama8b", sweep="rate", start="4", stop="24", n="3", vs="sarathi-serve")
    assert not at.exception
    layouts = [json.loads(c.proto.spec)["layout"] for c in at.get("plotly_chart")]
    assert len(layouts) == 3 and not any("xaxis2" in lay for lay in layouts)
    assert len({(lay["height"], lay["margin"]["t"], lay["margin"]["b"]) for lay in layouts}) == 1
    assert all(lay["height"] - lay["margin"]["t"] - lay["margin"]["b"] >= 220 for lay in layouts)  # the plot's own height


def test_sweep_opens_on_a_rate_range_that_crosses_the_knee():
    # its first range was a quarter to twice the current rate (2-16 req/s on the default preset, whose knee is past
    # 20): every point met the SLOs and the page said "raise 'To'"; it now runs past the offline saturation rate
    at = open_page(PAGES[2], preset="chat-h100-llama8b", sweep="rate")
    assert not at.exception
    assert at.number_input(key="sw.start.rate").value == 2.0 and at.number_input(key="sw.stop.rate").value == 30.0
    assert at.query_params["start"] == "2" and at.query_params["stop"] == "30"  # (the link keeps the range it ran)
    said = " ".join(m.value for m in at.markdown if "capacity" in m.value)
    assert "capacity" in said and "raise 'To'" not in said and "even the lowest" not in said


def test_the_sweep_to_inputs_help_stays_after_the_first_interaction():
    # 'To' said why its default runs past the knee ("This setup completes at most 20 req/s ...") only on the page's
    # first run: the saturation rate was probed for the first default alone, so any interaction (a new point count,
    # a new 'To') rebuilt the input with help=None and the (?) went away
    at = open_page(PAGES[2], preset="chat-h100-llama8b", sweep="rate")
    first = at.number_input(key="sw.stop.rate").help
    assert "completes at most" in first
    at.number_input(key="sw.n").set_value(5).run()
    assert not at.exception and at.number_input(key="sw.stop.rate").help == first
    at.number_input(key="sw.stop.rate").set_value(40.0).run()
    assert not at.exception and at.number_input(key="sw.stop.rate").help == first
    at.selectbox(key="sw.knob").set_value("max_num_seqs").run()
    at.selectbox(key="sw.knob").set_value("rate").run()  # (the range's widgets keep their values, and 'To' its help)
    assert not at.exception and at.number_input(key="sw.stop.rate").help == first


def test_another_knob_picked_in_the_sweep_page_takes_its_own_range_not_the_rate_links():
    # the page writes the rate sweep's start/stop/n into the link; picking the token budget then read start = 0.5 as
    # the chunk's and said "The sweep link's start, stop or n cannot be used (start = 0.5: chunk must be between 1 and
    # 1.04858e+06); using defaults", a warning about a link the user never typed
    at = linked_page(PAGES[2], preset="engine-sarathi-serve", sweep="rate")
    assert at.query_params["sweep"] == "rate" and "start" in at.query_params
    at.selectbox(key="sw.knob").set_value("chunk").run()
    assert not at.exception and not at.warning, [w.value for w in at.warning]
    cfg = at.session_state[CFG_KEY]
    assert cfg.scheduler.name == load_preset("engine-sarathi-serve").scheduler.name
    from sim_core.sweep import default_range, knob_value

    assert at.number_input(key="sw.start.chunk").value == default_range("chunk", knob_value(cfg, "chunk"), None, 8, cfg=cfg)[0]
    assert at.query_params["sweep"] == "chunk"  # (and the link now carries the chunk's range)


def test_a_sweep_link_with_only_a_start_takes_the_default_stop_past_the_knee():
    # the saturation probe ran only for a link with neither start nor stop, so '?sweep=rate&start=20' on the default
    # preset got the fallback stop (twice the current rate, 16): "start = 20 must be below stop = 16; using defaults",
    # and the range fell back to 2-16, short of the knee; the CLI's --start 20 alone takes the default stop (30)
    at = open_page(PAGES[2], preset="chat-h100-llama8b", sweep="rate", start="20")
    assert not at.exception and not [w.value for w in at.warning]
    assert at.number_input(key="sw.start.rate").value == 20.0 and at.number_input(key="sw.stop.rate").value == 30.0


def test_a_sweep_link_stays_readable():
    # Sweep rewrote ?preset=chat-h100-llama8b&scheduler.max_num_seqs=64&seed=3 as an opaque ?cfg=… (it wrote its link
    # without the preset the settings came from, which Simulate's and Compare's readable links diff against)
    at = app(preset="chat-h100-llama8b", seed="3", **{"scheduler.max_num_seqs": "64"}).run()  # (the session's link)
    at.switch_page(PAGES[2])
    for k, v in {"sweep": "rate", "start": "4", "stop": "8", "n": "2"}.items():
        at.query_params[k] = v
    at.run()
    assert not at.exception
    q = {k: at.query_params[k] for k in at.query_params}
    assert "cfg" not in q and q.get("preset") == "chat-h100-llama8b", q
    assert q.get("scheduler.max_num_seqs") == "64" and q.get("seed") == "3" and q.get("sweep") == "rate", q


def test_a_sweep_links_point_count_sets_the_default_ranges_round_steps():
    # a link with n=5 and no range got the 8-point range (2-30 by 4: 2, 9, 16, 23, 30 at 5 points); it gets 5 points'
    from sim_core import load_preset, run_simulation
    from sim_core.sweep import default_rate_range, saturation_per_s

    cfg = load_preset("chat-h100-llama8b")
    start, stop = default_rate_range(cfg.workload.arrival.rate_per_s, saturation_per_s(cfg), 5)
    at = open_page(PAGES[2], preset="chat-h100-llama8b", sweep="rate", n="5")
    assert not at.exception and not at.warning
    assert (at.number_input(key="sw.start.rate").value, at.number_input(key="sw.stop.rate").value, at.number_input(key="sw.n").value) == (start, stop, 5)
    assert stop != default_rate_range(cfg.workload.arrival.rate_per_s, saturation_per_s(cfg), 8)[1] and (stop - start) / 4 == round((stop - start) / 4)


@pytest.mark.parametrize("lesson", [x.id for x in load_lessons()])
def test_each_lesson_page_loads(lesson):
    at = open_page(PAGES[3], lesson=lesson)
    assert not at.exception
    assert at.query_params["lesson"] == lesson
    assert any(lesson_title(lesson) in s.value for s in at.subheader)


@pytest.mark.parametrize("number", [1, 11, 16])
def test_a_link_may_name_a_lesson_by_its_number_in_the_list(number):
    # "open lesson 11" in a workshop: ?lesson=11 said "unknown lesson" and showed lesson 1
    lesson = load_lessons()[number - 1].id
    at = open_page(PAGES[3], lesson=str(number))
    assert not at.exception and not at.warning
    assert at.query_params["lesson"] == lesson
    assert any(lesson_title(lesson) in s.value for s in at.subheader)


def test_a_lesson_number_past_the_list_is_named_as_unknown():
    at = open_page(PAGES[3], lesson=str(len(load_lessons()) + 1))
    assert any("unknown lesson" in w.value for w in at.warning)
    assert at.query_params["lesson"] == load_lessons()[0].id


def lesson_title(lesson_id: str) -> str:
    return next(x.title for x in load_lessons() if x.id == lesson_id)


def test_the_first_lesson_picked_on_learn_opened_from_the_menu_is_shown():
    # Learn opened from the page menu (no ?lesson=) wrote ?lesson=roofline; the first pick of another lesson then
    # read that address as a link naming lesson 1 and put the radio back: a class's first click did nothing
    at = app().run()
    at.switch_page(PAGES[3]).run()
    assert at.query_params["lesson"] == "roofline"
    at.selectbox(key="learn.pick").set_value("split-prefill-decode").run()
    assert not at.exception
    assert any(lesson_title("split-prefill-decode") in s.value for s in at.subheader)
    assert at.query_params["lesson"] == "split-prefill-decode"


def test_learn_steps_to_the_next_and_previous_lesson_from_one_line():
    # a browser review: the seventeen titles as a list filled a phone's first screen above the lesson; one picker and
    # Previous / Next instead, each step a lesson the page shows and its address names
    ids = [x.id for x in sorted(load_lessons(), key=lambda x: x.order)]
    at = open_page(PAGES[3], lesson=ids[0])
    assert at.button(key="learn.prev").disabled and not at.button(key="learn.next").disabled
    at.button(key="learn.next").click().run()
    assert not at.exception and at.selectbox(key="learn.pick").value == ids[1] and at.query_params["lesson"] == ids[1]
    assert any(lesson_title(ids[1]) in s.value for s in at.subheader)
    at.button(key="learn.prev").click().run()
    assert at.selectbox(key="learn.pick").value == ids[0] and at.query_params["lesson"] == ids[0]
    last = open_page(PAGES[3], lesson=ids[-1])
    assert last.button(key="learn.next").disabled and not last.button(key="learn.prev").disabled
    assert last.selectbox(key="learn.pick").options[:2] == [f"1. {lesson_title(ids[0])}", f"2. {lesson_title(ids[1])}"]


def test_a_lesson_button_opens_simulate_with_the_lesson_config():
    lesson = next(x for x in load_lessons() if x.id == "chunk-size")
    at = open_page(PAGES[3], lesson=lesson.id)
    at.button(key=f"learn.open1.{lesson.id}").click().run()
    assert not at.exception
    assert at.session_state[CFG_KEY] == lesson.config(1)
    assert any(m.label == "TTFT p50" for m in at.metric)  # the Simulate page is showing
    banner = " ".join(m.value for m in at.markdown) + " ".join(t.value for t in at.text)
    assert lesson.title in banner and lesson.question in banner  # the lesson stays on the page, with a way back
    assert at.button(key="lesson_banner.close")


@pytest.mark.parametrize("query, back", [
    ({"workshop": "1"}, "lesson=kv-preemption&workshop=1"),
    ({"workshop": "1", "reveal": "kv-preemption"}, "lesson=kv-preemption&workshop=1&reveal=kv-preemption"),
    ({}, "lesson=kv-preemption"),
])  # fmt: skip
def test_back_to_the_lesson_keeps_the_workshops_hidden_answers(query, back):
    # "Back to the lesson" linked ?lesson=kv-preemption alone: from a workshop's agenda (answers hidden) the class's
    # way back landed outside workshop mode, every answer one click away
    at = open_page(PAGES[3], lesson="kv-preemption", **query)
    at.button(key="learn.open1.kv-preemption").click().run()
    assert not at.exception
    link = next(e.proto for e in at.get("page_link") if e.proto.label == "Back to the lesson")
    assert link.query_string == back
    at = open_page(PAGES[3], lesson="kv-preemption", **query)
    foot = " ".join(c.value for c in at.caption)
    assert ("reveal=1 to reveal them" in foot) == ("workshop" not in query)  # (the foot told the class how to reveal)


def _banner_line(at) -> str | None:
    return next((m.value for m in at.markdown if m.value.startswith("**Lesson ")), None)


def test_a_reloaded_or_shared_lesson_address_keeps_its_banner():
    # the banner lived in the session alone: a reload, or the address shared with the class, showed the run without
    # its question or a way back to the lesson (whose answers a workshop hides)
    lesson = next(x for x in load_lessons() if x.id == "kv-preemption")
    at = open_page(PAGES[3], lesson=lesson.id, workshop="1")
    at.button(key=f"learn.open1.{lesson.id}").click().run()
    assert not at.exception
    address = dict(at.query_params)
    assert {k: address.get(k) for k in ("lesson", "lesson_step", "workshop")} == {"lesson": lesson.id, "lesson_step": "1", "workshop": "1"}
    share = " ".join(c.value for c in at.code)
    assert "lesson=kv-preemption&lesson_step=1&workshop=1" in share  # the Share popover's link says it too
    assert any(c.value.startswith("A link to these settings: copy it with the icon") for c in at.caption)  # (and what it is)
    fresh = app(**address).run()  # a new session on that address (Simulate, the first page): a reload, a student's browser
    assert not fresh.exception and not fresh.warning
    assert fresh.session_state[CFG_KEY] == lesson.config(1)
    assert _banner_line(fresh) == _banner_line(at) and lesson.question in " ".join(t.value for t in fresh.text)
    link = next(e.proto for e in fresh.get("page_link") if e.proto.label == "Back to the lesson")
    assert link.query_string == "lesson=kv-preemption&workshop=1"  # the way back keeps the answers hidden


def test_a_mechanism_runs_banner_says_its_question_is_about_the_main_run():
    # a review: lesson 17's 24-request mechanism run sat under "1,000 requests wait at t = 0 on an H200 ..." as if
    # that were this run
    lesson = next(x for x in load_lessons() if x.id == "batch-cap")
    query = {k: str(v) for k, v in lesson.overrides.items()} | {lesson.knob: str(lesson.values[0])}
    at = app(preset=lesson.mechanism, lesson=lesson.id, lesson_run="mechanism", **query).run()
    assert not at.exception
    assert f"Question (about the lesson's main run): {lesson.question}" in [t.value for t in at.text]
    assert "the mechanism scenario" in _banner_line(at)
    main = app(preset=lesson.side_preset(0), lesson=lesson.id).run()
    assert f"Question: {lesson.question}" in [t.value for t in main.text]


def test_a_lesson_side_only_a_whole_config_can_say_gets_the_banners_short_address():
    # a review: lesson 11's "3 prefill + 1 decode" side put 2.7k characters of cfg= in the address, while the Links
    # box gives ?lesson=split-prefill-decode&lesson_step=1, which opens the same side
    lesson = next(x for x in load_lessons() if x.id == "split-prefill-decode")
    at = open_page(PAGES[3], lesson=lesson.id)
    at.button(key=f"learn.open1.{lesson.id}").click().run()
    assert not at.exception and at.session_state[CFG_KEY] == lesson.config(1)
    address = dict(at.query_params)
    assert address == {"lesson": lesson.id, "lesson_step": "1"}, address
    fresh = app(**address).run()
    assert not fresh.exception and fresh.session_state[CFG_KEY] == lesson.config(1) and _banner_line(fresh)
    # changed in the sidebar: the whole config again, beside the banner
    fresh.number_input(key="w.seed").set_value(5).run()
    moved = dict(fresh.query_params)
    assert fresh.session_state[CFG_KEY] != lesson.config(1) and "cfg" in moved and moved["lesson"] == lesson.id
    assert decode_config(moved["cfg"]) == fresh.session_state[CFG_KEY]


def test_a_link_naming_only_a_lesson_side_opens_that_side():
    # an instructor's short link, ?lesson=3&lesson_step=1, opened the default scenario under lesson 3's banner, which
    # then listed the default's differences as "Changed since the lesson opened this run"
    from sim_core import load_preset
    from sim_core.presets import DEFAULT_SCENARIO

    stalls = next(x for x in load_lessons() if x.id == "prefill-first-stalls")
    at = app(lesson=str(stalls.order), lesson_step="1").run()
    assert not at.exception and not at.warning
    assert at.session_state[CFG_KEY] == stalls.config(1) != load_preset(DEFAULT_SCENARIO)
    assert _banner_line(at) and _changed_line(at) is None
    assert at.query_params["lesson"] == stalls.id and at.query_params["lesson_step"] == "1"
    fresh = app(**dict(at.query_params)).run()  # the address it writes opens the same side again
    assert fresh.session_state[CFG_KEY] == stalls.config(1) and _changed_line(fresh) is None
    mechanism = app(lesson=stalls.id, lesson_run="mechanism").run()
    assert mechanism.session_state[CFG_KEY] == stalls.config(0, "mechanism") and _changed_line(mechanism) is None
    split = next(x for x in load_lessons() if x.id == "split-prefill-decode")
    also = app(lesson=split.id, lesson_run="also", lesson_step="1").run()
    assert also.session_state[CFG_KEY] == load_preset(split.also[1].preset) and _changed_line(also) is None
    # a link with a config of its own keeps it, and the banner says what differs from the side
    own = app(lesson=stalls.id, **{"workload.num_requests": "50"}).run()
    assert own.session_state[CFG_KEY] == load_preset(DEFAULT_SCENARIO).model_copy(
        update={"workload": load_preset(DEFAULT_SCENARIO).workload.model_copy(update={"num_requests": 50})})
    assert _changed_line(own) is not None
    # a lesson value no page can use: the default scenario, and the page says why
    bad = app(lesson=stalls.id, lesson_step="7").run()
    assert bad.session_state[CFG_KEY] == load_preset(DEFAULT_SCENARIO) and _banner_line(bad) is None
    assert any("lesson_step = '7' is not used" in w.value for w in bad.warning)
    # the Learn page reads ?lesson= to show a lesson: a fresh session there keeps the default scenario
    from app.state import page_asked

    assert page_asked("http://host:8501/learn?lesson=3") == "learn" and page_asked("http://host:8501/?lesson=3") == ""


def _changed_line(at) -> str | None:
    return next((c.value for c in at.caption if c.value.startswith("Changed since the lesson opened this run")), None)


def test_the_lesson_banner_says_what_the_run_changed_since_the_lesson_opened_it():
    # a review: a student who switched lesson 14's router to prefix_affinity read "Router = round_robin" in the banner
    # above a prefix_affinity run
    lesson = next(x for x in load_lessons() if x.id == "kv-preemption")
    at = open_page(PAGES[3], lesson=lesson.id)
    at.button(key=f"learn.open1.{lesson.id}").click().run()
    assert not at.exception and _banner_line(at) and _changed_line(at) is None  # (as opened: nothing to say)
    # (the side it opened, said as such: "Router = round_robin" above a moved router read as the run's, a review)
    assert f"· opened with {lesson.knob_label} = `" in _banner_line(at), _banner_line(at)
    address = dict(at.query_params)
    moved = app(**{**address, "scheduler.preemption": "recompute"}).run()  # (the knob moved back in the sidebar)
    assert not moved.exception and _banner_line(moved) == _banner_line(at)
    said = _changed_line(moved)
    assert said == "Changed since the lesson opened this run: scheduler.preemption swap → recompute.", said
    # a scenario a lesson's text names, opened as it is, then changed
    split = next(x for x in load_lessons() if x.id == "split-prefill-decode")
    opened = {"preset": split.also[0].preset, "lesson": split.id, "lesson_run": "also"}
    also = app(**opened).run()
    assert not also.exception and _banner_line(also) and _changed_line(also) is None
    also = app(**opened, **{"workload.num_requests": "50"}).run()
    assert _changed_line(also).startswith("Changed since the lesson opened this run: workload.num_requests "), _changed_line(also)


def test_presenter_mode_keeps_the_timelines_window_rows_and_zoom_one_click_away():
    # on a 1400x900 projector the focused timeline began at the foot of the screen, under the rows and zoom controls;
    # at 1280x720 under a lesson's banner the window's sliders, the run's caption and the expander took the screen
    at = app(present="1").run()
    assert not at.exception
    box = next(e for e in at.expander if e.label == "Window, rows and zoom")
    assert [s.label for s in box.select_slider] == ["Window (simulated time)"]
    assert [s.label for s in box.slider] == ["Window start (s)", "Requests shown"]
    assert [n.label for n in box.number_input] == ["Skip requests"]
    assert box.slider[-1].value == 12  # (a projector's screen: 30 rows pushed the lower panels off it)
    assert not any("Results are modelled by a calibrated roofline" in c.value for c in at.caption)  # (the focus row's place)
    normal = app().run()
    assert not any(e.label == "Window, rows and zoom" for e in normal.expander)
    assert any(s.label == "Requests shown" for s in normal.slider)
    assert any("Results are modelled by a calibrated roofline" in c.value for c in normal.caption)


def test_presenter_focus_keeps_its_choice_the_address_and_shows_the_steady_state_and_requests():
    at = app(present="1").run()
    focus = at.segmented_control(key="ui.focus")
    assert focus.options == ["Headline", "Timeline", "Latency", "Roofline", "Step through", "Requests"]
    assert at.query_params.get("present") == "1"  # (dropped after load: a reload opened without presenter mode)
    # a click on the chosen one cleared it, and the page showed the timeline with nothing marked
    focus.set_value(None).run()
    assert not at.exception and at.segmented_control(key="ui.focus").value == "Timeline"
    at.segmented_control(key="ui.focus").set_value("Headline").run()
    # (lesson 11's answer quotes the steady state, which presenter mode's headline left out)
    assert not at.exception and any(m.label == "Output throughput" for m in at.metric)
    assert any(c.value.startswith("Steady state") or "Steady state" in c.value for c in at.caption), [c.value for c in at.caption]
    at.segmented_control(key="ui.focus").set_value("Requests").run()
    assert not at.exception and at.dataframe  # (lesson 12 asks the room to read the requests table)


def test_a_lessons_link_opens_on_the_view_its_answer_reads():
    # a review in presenter mode: lessons 1, 7, 9, 13, 15 and 17 quote headline figures, and their links opened on the
    # timeline; a mechanism run shows its requests on the timeline, all 24 of lesson 17's (12 rows hid the 8 that wait)
    lesson = next(x for x in load_lessons() if x.id == "batch-cap")
    assert lesson.opens_on == "Headline"
    # (lesson 16's answer quotes pre-emptions, recomputed tokens, TTFT, TPOT and throughput: a later review)
    admission = next(x for x in load_lessons() if x.id == "admission-kv-pressure")
    shown = app(preset=admission.side_preset(0), lesson=admission.id, present="1").run()
    assert shown.segmented_control(key="ui.focus").value == "Headline" and any(m.label == "Pre-emptions" for m in shown.metric)
    at = app(preset=lesson.side_preset(0), lesson=lesson.id, present="1").run()
    assert at.segmented_control(key="ui.focus").value == "Headline" and any(m.label == "Output throughput" for m in at.metric)
    normal = app(preset=lesson.side_preset(0), lesson=lesson.id)
    normal.session_state["ui.tab"] = "Latency"  # (the tab the session was on: a lesson's link moves it)
    normal.run()
    assert normal.session_state["ui.tab"] == "Timeline" and any(m.label == "Output throughput" for m in normal.metric)
    query = {k: str(v) for k, v in lesson.overrides.items()} | {lesson.knob: str(lesson.values[0])}
    mech = app(preset=lesson.mechanism, lesson=lesson.id, lesson_run="mechanism", present="1", **query).run()
    assert not mech.exception and mech.segmented_control(key="ui.focus").value == "Timeline"
    box = next(e for e in mech.expander if e.label == "Window, rows and zoom")
    assert box.slider[-1].value == lesson.config(0, "mechanism").workload.num_requests == 24
    stalls = next(x for x in load_lessons() if x.id == "prefill-first-stalls")  # (its answer reads the timeline)
    assert stalls.opens_on == "Timeline"
    again = app(preset=stalls.side_preset(0), lesson=stalls.id, present="1")
    again.session_state["ui.focus"] = "Latency"
    again.run()
    assert again.segmented_control(key="ui.focus").value == "Timeline"
    requests = next(x for x in load_lessons() if x.id == "router-policies")  # (its question sends the room to the tab)
    tab = app(preset=requests.side_preset(0), lesson=requests.id).run()
    assert requests.opens_on == "Requests" and tab.session_state["ui.tab"] == "Requests" and tab.dataframe


def test_presenter_mode_outlives_a_visit_to_a_page_without_its_toggle():
    # the toggle is Simulate's sidebar widget; on Learn Streamlit dropped its state, and a lesson opened from there came
    # back outside presenter mode (a review)
    at = app(present="1").run()
    at.switch_page("app_pages/learn.py")
    at.run()
    at.run()
    assert at.session_state["ui.presenter"] is True
    at.switch_page("app_pages/simulate.py")
    at.run()
    assert not at.exception and at.session_state["ui.presenter"] is True and at.segmented_control(key="ui.focus")


def test_a_closed_lesson_banner_stays_closed_and_leaves_the_address():
    at = open_page(PAGES[0], preset="chat-h100-llama8b", lesson="roofline", lesson_step="1")
    assert _banner_line(at) and at.query_params["lesson"] == "roofline"
    at.button(key="lesson_banner.close").click().run()
    assert not at.exception and _banner_line(at) is None
    assert "lesson" not in at.query_params and "lesson_step" not in at.query_params
    at.run()
    assert _banner_line(at) is None


def test_the_instructors_links_open_each_side_with_its_banner():
    lesson = next(x for x in load_lessons() if x.id == "split-prefill-decode")
    at = open_page(PAGES[3], lesson=lesson.id, workshop="1")
    links = [c.value for c in at.code]
    assert any("lesson=split-prefill-decode&workshop=1" in x and "lesson_step" not in x and "preset=" in x for x in links)
    assert any("lesson=split-prefill-decode&lesson_step=1&workshop=1" in x for x in links)
    also = f"preset={lesson.also[1].preset}&lesson=split-prefill-decode&lesson_step=1&lesson_run=also&workshop=1"
    assert any(also in x for x in links), links
    # the 3P1D side is no preset plus a few settings: its link names the lesson side (it was 2,685 characters of cfg=,
    # which no instructor could read or edit), and Simulate opens that side's config from it
    from urllib.parse import parse_qsl, urlsplit

    split = next(x for x in links if "lesson_step=1&workshop=1" in x and "lesson_run" not in x)
    assert "cfg=" not in split and len(split) < 200, split
    side = app(**dict(parse_qsl(urlsplit(split).query))).run()
    assert not side.exception and side.session_state[CFG_KEY] == lesson.config(1)


def test_a_lessons_numeric_sides_are_written_with_thousands_separators():
    # Lesson 1 read "The knob: HBM bandwidth (GB/s): from 3350 to 1675" and its buttons "= 3350", the chunk lesson
    # "= 4096", beside the sidebar's 3,350 and the lessons' own text ("a 4,096-token prompt")
    lesson = next(x for x in load_lessons() if x.id == "chunk-size")
    at = open_page(PAGES[3], lesson=lesson.id)
    assert any("from **512** to **4,096**" in m.value for m in at.markdown)
    assert at.button(key=f"learn.open1.{lesson.id}").label == f"Open with {lesson.knob_label} = 4,096"
    at.button(key=f"learn.open1.{lesson.id}").click().run()
    line = next(m.value for m in at.markdown if m.value.startswith(f"**Lesson {lesson.order}:"))
    assert "= `4,096`" in line, line  # (the banner on Simulate)
    from app.components.units import fmt_setting

    assert [fmt_setting(v) for v in (3350, 65536, 0.5, 1234.5, True, False, "swap")] == ["3,350", "65,536", "0.5", "1,234.5", "on", "off", "swap"]


def test_the_lesson_banner_names_a_whole_section_by_its_label():
    # the split lesson's knob is the deployment section: the banner showed its dict
    lesson = next(x for x in load_lessons() if x.id == "split-prefill-decode")
    at = open_page(PAGES[3], lesson=lesson.id)
    at.button(key=f"learn.open1.{lesson.id}").click().run()
    assert not at.exception
    line = next(m.value for m in at.markdown if m.value.startswith(f"**Lesson {lesson.order}:"))
    assert f"= `{lesson.value_labels[1]}`" in line and "{" not in line


def test_a_lesson_opens_the_presets_its_question_names():
    # lesson 11 asked the student to "open the DistServe pair" with no button for it: only the sidebar's dropdown
    lesson = next(x for x in load_lessons() if x.id == "split-prefill-decode")
    at = open_page(PAGES[3], lesson=lesson.id)
    labels = [at.button(key=f"learn.also{i}.{lesson.id}").label for i in range(len(lesson.also))]
    assert labels == [x.label for x in lesson.also] and all("DistServe pair" in x for x in labels[:2]) and len(labels) == 3
    links = " ".join(c.value for c in at.code)
    assert all(f"preset={x.preset}" in links for x in lesson.also)  # the instructors' expander lists them too
    at.button(key=f"learn.also1.{lesson.id}").click().run()
    assert not at.exception and not at.error
    preset = lesson.also[1].preset
    assert at.session_state[CFG_KEY] == load_preset(preset)
    assert at.session_state["sim.preset"] == preset and at.query_params["preset"] == preset
    assert any(m.label == "TTFT p50" for m in at.metric)  # the Simulate page is showing
    line = next(m.value for m in at.markdown if m.value.startswith(f"**Lesson {lesson.order}:"))
    assert "DistServe pair" in line and lesson.knob_label not in line  # the banner names the preset, not a knob side
    assert at.button(key="lesson_banner.close")


def _sides(lesson):
    return [(run, step) for run in (("lesson", "mechanism") if lesson.mechanism else ("lesson",)) for step in (0, 1)]


@pytest.mark.parametrize("lesson", load_lessons(), ids=lambda x: x.id)
def test_each_lesson_link_opens_its_side_without_a_warning(lesson):
    """Every link a lesson gives (each side, and each side of its mechanism scenario) opens in Simulate with no
    warning and no error; only the OOM lesson's first side shows its out-of-memory error, as its text says."""
    from app.state import config_to_query

    for run, step in _sides(lesson):
        cfg = lesson.config(step, run)
        at = app(**config_to_query(cfg, None, lesson.mechanism if run == "mechanism" else lesson.scenario)).run()
        assert not at.exception, (run, step)
        assert at.session_state[CFG_KEY] == cfg
        # a run stopped by the server's wall-clock budget says so: that is the machine's load, not the lesson's
        warnings = [w.value for w in at.warning if "s of server time" not in w.value]
        errors = [e.value for e in at.error]
        assert not warnings, (run, step, warnings)
        if lesson.expect.metric == "fits" and step == 0:
            assert len(errors) == 1 and errors[0].startswith("Out of memory"), errors
        else:
            assert not errors, (run, step, errors)


@pytest.mark.parametrize("lesson", load_lessons(), ids=lambda x: x.id)
def test_the_run_both_panel_shows_every_metric_the_lessons_question_asks_about(lesson):
    # lesson 11 asked "What happens to goodput, TTFT p90 and TPOT p99?" and its panel showed goodput alone (browser
    # review); lesson 12 its makespan, lesson 16 its recomputed tokens likewise
    from app.components.claims import CLAIM_METRICS

    asked = {m for m, (label, _) in CLAIM_METRICS.items() if label.lower() in lesson.question.lower()}
    assert asked <= {lesson.expect.metric, *lesson.also_show}, asked
    # each named in words (lesson 11's TTFT p90 and TPOT p99 read "ttft_p90_s" and "tpot_p99_s" under their numbers)
    from app.components.claims import PANEL_METRICS

    assert all(m in PANEL_METRICS and "_" not in PANEL_METRICS[m][0] for m in (lesson.expect.metric, *lesson.also_show))


@pytest.mark.parametrize("lesson", load_lessons(), ids=lambda x: x.id)
def test_each_revealed_lesson_shows_every_claim_holding_and_no_warning(lesson):
    """The Learn page as a presenter shows it (answer revealed): both runs and every "what to look for" line, each
    checked on the app's own runs (under the server's budget) — all ✓, no warning, no error."""
    from sim_core.budget import is_budget_stop

    at = open_page(PAGES[3], lesson=lesson.id, workshop="1", reveal=lesson.id)
    assert not at.exception and not at.error
    look = next(t.value for t in at.text if "“" in t.value)
    assert "✗" not in look, look
    assert len(at.metric) == 2 * (1 + len(lesson.also_show))  # the two sides, side by side (each its metrics)
    # one row per metric, both sides in it: on a phone the columns stack, and all of side A came before side B
    from app.components.claims import panel_label

    named = [panel_label(m, lesson.config(0)) for m in (lesson.expect.metric, *lesson.also_show)]
    assert [m.delta for m in at.metric] == [name for name in named for _ in (0, 1)]
    # a run the server's wall-clock budget stopped (a loaded machine, not the lesson) is named, its claims unjudged
    unjudged = look.count("? not checked, a run stopped early")
    assert look.count("✓") + unjudged == len(lesson.claims), look
    assert all(is_budget_stop(w.value) and w.value.startswith("**A run stopped early:**") for w in at.warning)
    assert bool(unjudged) == bool(at.warning)
    # each line names its side as the buttons do (lesson 11's lines ended in the deployment's raw dict, "{'router': ...")
    from app.components.workshop import side_labels

    labels = side_labels(lesson)  # (numbers with separators: "= 3,350")
    assert labels == tuple(f"{v:,}" if type(v) is int else ("on" if v else "off") if type(v) is bool else str(v)
                           for v in (lesson.value_labels or lesson.values))  # (a switch as its toggle: "= on")
    assert all(f"({lesson.knob_label} = {labels[c.step]}" in look for c in lesson.claims) and "{'" not in look, look
    # and what the run shows: a quote alone ("✓ “from about 49% to 100%”", once per side) did not say what it measured
    assert all("): " in line for line in look.splitlines() if line.startswith("✓")), look


def test_a_lesson_run_stopped_by_the_server_is_named_not_judged(monkeypatch):
    # a busy server stopped the session lesson's round-robin side at its 5 s budget: 4 claims read ✗, with no word why
    from app.components import runner
    from sim_core.budget import RunBudget

    lesson = next(x for x in load_lessons() if x.id == "static-vs-continuous")
    real = runner.run

    def tiny_budget(cfg, *a, **k):  # the static side (13,737 ticks) stops at 1,000; the others run whole
        out = real(cfg, *a, **k)
        if cfg != lesson.config(0) or out.result is None:
            return out
        from sim_core import run_simulation

        return runner.Outcome(run_simulation(cfg, budget=RunBudget(max_ticks=1000)), None)

    monkeypatch.setattr(runner, "run", tiny_budget)
    at = open_page(PAGES[3], lesson=lesson.id, workshop="1", reveal=lesson.id)
    look = next(t.value for t in at.text if "“" in t.value)
    assert "✗" not in look and "? not checked, a run stopped early: “Throughput rises”" in look
    assert any(w.value.startswith("**A run stopped early:**") for w in at.warning)
    assert any("stopped early, partial figures:" in c.value for c in at.caption)


def test_an_unmodified_preset_opened_by_a_lesson_keeps_its_name():
    lesson = next(x for x in load_lessons() if x.id == "kv-preemption")  # recompute is the preset's own value
    at = open_page(PAGES[3], lesson=lesson.id)
    at.button(key=f"learn.open0.{lesson.id}").click().run()
    assert at.session_state["sim.preset"] == lesson.scenario
    assert at.selectbox(key="w.preset").value == lesson.scenario


def test_workshop_mode_hides_the_answer_until_revealed():
    lesson = load_lessons()[2]
    hidden = open_page(PAGES[3], lesson=lesson.id, workshop="1")
    assert not hidden.exception
    assert "Agenda" in " ".join(e.label for e in hidden.expander)
    assert "Show the answer" not in [e.label for e in hidden.expander]
    agenda = hidden.table[0].value.reset_index()  # (a table: st.text's proportional font put the times' rows out of line)
    marked = [("▶ " if i == 2 else "") + f"{x.order}. {x.title}" for i, x in enumerate(load_lessons())]
    assert [x.replace("\\", "") for x in agenda["lesson"]] == marked  # every lesson, the one shown marked (Markdown-escaped)
    assert agenda["minutes"].iloc[-1].endswith(f"–{sum(x.minutes for x in load_lessons())}")
    # folded above a lesson the link names (open, it pushed the lesson off the first screen); open on the bare link
    assert not next(e for e in hidden.expander if e.label.startswith("Agenda")).proto.expanded
    bare = open_page(PAGES[3], workshop="1")
    assert next(e for e in bare.expander if e.label.startswith("Agenda")).proto.expanded
    shown = open_page(PAGES[3], lesson=lesson.id, workshop="1", reveal=lesson.id)
    assert lesson.answer in " ".join(m.value for m in shown.markdown)
    assert "✓" in " ".join(t.value for t in shown.text)  # what to look for, checked on the run
    # the checks quote the answer's figures: they come after it, never above it
    labels = [e.label for e in shown.expander]
    assert labels.index("Show the answer") < labels.index("Check the answer on these runs (what to look for)")


def test_a_workshop_value_learn_cannot_use_is_named_once_and_left_out_of_the_address():
    # ?reveal=roofine was warned about and kept in the address, so a copied link carried the typo on
    lesson = load_lessons()[0]
    at = open_page(PAGES[3], lesson=lesson.id, workshop="yes", reveal="roofine")
    assert not at.exception and "reveals nothing" in " ".join(w.value for w in at.warning)
    assert "reveal" not in at.query_params and "workshop" not in at.query_params
    kept = open_page(PAGES[3], lesson=lesson.id, workshop="1", reveal="all")
    assert kept.query_params["workshop"] == "1" and kept.query_params["reveal"] == "all"


def test_run_both_shows_every_metric_a_lessons_question_weighs():
    # lesson 1 asks whether TTFT or TPOT suffers more when bandwidth halves; its panel showed TPOT alone
    from sim_core.lessons import metric_value, run_lesson_step

    at = open_page(PAGES[3], lesson="roofline", workshop="1", reveal="roofline")
    assert not at.exception
    shown = [(m.delta, m.value) for m in at.metric]
    assert [d for d, _ in shown] == ["TPOT p50", "TPOT p50", "TTFT p50", "TTFT p50"], shown  # (a row per metric)
    from app.components.claims import fmt_metric_value

    ttft_s = [metric_value("ttft_p50_s", run_lesson_step(load_lessons()[0], k)) for k in (0, 1)]
    assert [shown[2][1], shown[3][1]] == [fmt_metric_value("s", v, strip_zeros=False) for v in ttft_s], (shown, ttft_s)  # (the runs' own TTFT)
    assert shown[2][1].endswith(" ms") and shown[2][1] != shown[3][1]


def test_a_lesson_naming_a_metric_no_run_has_is_refused_with_the_one_meant():
    import json

    from sim_core import PresetError
    from sim_core.lessons import LESSONS_DIR, parse_lesson

    raw = json.loads((LESSONS_DIR / "01-roofline.json").read_text())
    with pytest.raises(PresetError, match=r"also_show\[0\] = 'ttft_p5_s': not a metric of a run's summary \(did you mean 'ttft_p50_s'"):
        parse_lesson(raw | {"also_show": ["ttft_p5_s"]}, "01-roofline.json")


@pytest.mark.parametrize("lesson", ["short-benchmark", "shared-system-prompt", "admission-kv-pressure", "prefill-oom", "priority-tail"])
def test_run_both_names_the_lessons_metric_in_words_with_its_unit(lesson):
    # the short-benchmark lesson showed "1" and "0.268" under "slo_attainment", the prefix lesson "ttft_p99_s"; the
    # admission lesson would have shown "num_preemptions"
    at = open_page(PAGES[3], lesson=lesson, workshop="1", reveal=lesson)
    assert not at.exception
    shown = [(m.value, m.delta) for m in at.metric]
    also = len(next(x for x in load_lessons() if x.id == lesson).also_show)
    assert len(shown) == 2 * (1 + also) and all("_" not in delta for _, delta in shown), shown
    shown = shown[:2]  # (the first row, both sides: the lesson's metric; the rows of those its question weighs follow)
    # each figure labelled by its side's value, and no "(left)"/"(right)", wrong on a phone where the columns stack
    assert [m.label for m in at.metric][:2] == [str(v) for v in workshop.side_labels(next(x for x in load_lessons() if x.id == lesson))]
    assert any("each figure under its setting" in c.value and "(left)" not in c.value for c in at.caption)
    if lesson == "short-benchmark":
        assert [v for v, _ in shown] == ["100%", "20%"] and shown[0][1] == "requests meeting the SLOs"
    elif lesson == "admission-kv-pressure":
        assert [v for v, _ in shown] == ["68", "3"] and shown[0][1] == "pre-emptions"
    elif lesson == "prefill-oom":  # ("does not fit" above "fits in memory" read as both)
        assert shown == [("does not fit", "in GPU memory"), ("fits", "in GPU memory")], shown
    elif lesson == "priority-tail":
        # (each class by its name: "of the priority-1 class" left the student to work out which class pays)
        assert shown[0][1] == "TTFT p99 of the interactive class (priority 0)", shown
        assert [m.delta for m in at.metric][2] == "TTFT p99 of the batch class (priority 1)"
    else:
        assert all(v.endswith("ms") or v.endswith(" s") for v, _ in shown) and shown[0][1] == "TTFT p99"


def test_the_glossary_defines_the_workshop_terms_and_cites_the_article():
    at = open_page("app_pages/glossary.py")
    text = " ".join(m.value for m in at.markdown)
    # (and those Sweep, Plan and the deployment lessons use: a workshop met them there undefined)
    for term in ("TTFT", "TPOT", "ITL", "Goodput", "Tick", "Stalled", "SLO attainment", "Steady-state window", "Saturation",
                 "Capacity", "Headroom", "Pareto front", "Replicas and router", "Disaggregated prefill/decode",
                 "Prefix caching", "Speculative decoding"):
        assert f"**{term}" in text, term
    assert "大模型推理中Prefill与Decode阶段的调度优化策略" in text
    # its sections English first, as the lessons cite them (without a CJK font each line began with boxes, a review)
    sections = at.text[0].value.splitlines()
    assert sections[0] == "§1 Overview: prefill is compute-bound, decode memory-bound (Prefill与Decode阶段调度策略概述)"
    assert len(sections) == 10 and all(line.startswith("§") and line.endswith(")") for line in sections)


def _uploader(at: AppTest, key: str):
    return next(u for u in at.file_uploader if u.key == key)


def test_uploading_a_config_applies_it_and_a_bad_one_is_explained_inline():
    at = app().run()
    cfg = make_config("engine-orca", seed=11)
    _uploader(at, "w.upload_config").set_value(("mine.json", cfg.model_dump_json().encode(), "application/json"))
    at.run()
    assert at.session_state[CFG_KEY] == cfg
    _uploader(at, "w.upload_config").set_value(("bad.json", b'{"scheduler": {"max_num_seqs": 0}}', "application/json"))
    at.run()
    assert not at.exception
    assert any("scheduler.max_num_seqs = 0" in e.value for e in at.sidebar.error)
    assert at.session_state[CFG_KEY] == cfg  # nothing the user had is lost
    # and at the top of the page, once (only the sidebar said it: collapsed on a phone, beside the previous run)
    assert [e.value.split(":**")[0] for e in at.main.error] == ["**The uploaded config was not used"]
    assert "scheduler.max_num_seqs = 0" in at.main.error[0].value
    at.run()
    assert not at.main.error and any("scheduler.max_num_seqs = 0" in e.value for e in at.sidebar.error)
    _uploader(at, "w.upload_config").set_value(None).run()  # the file removed: its refusal goes with it (a review)
    assert not at.exception and not any("scheduler.max_num_seqs = 0" in e.value for e in at.sidebar.error)
    assert at.session_state[CFG_KEY] == cfg


def test_uploading_a_trace_replays_it_and_a_bad_one_is_explained_inline():
    at = app().run()
    csv = b"arrival_s,prompt_tokens,output_tokens\n0.0,100,10\n0.5,200,20\n1.0,300,30\n"
    _uploader(at, "w.upload_trace").set_value(("t.csv", csv, "text/csv"))
    at.run()
    wl = at.session_state[CFG_KEY].workload
    assert wl.trace is not None and wl.num_requests == 3 and wl.trace.prompt_tokens == [100, 200, 300]
    assert metric(at, "Finished").startswith("3 / 3")
    _uploader(at, "w.upload_trace").set_value(("bad.csv", b"arrival_s,prompt_tokens,output_tokens\n0,abc,5\n", "text/csv"))
    at.run()
    assert not at.exception
    assert any("line 2: prompt_tokens = 'abc'" in e.value for e in at.sidebar.error)
    assert len(at.main.error) == 1 and at.main.error[0].value.startswith("**The uploaded trace was not used:**")
    assert "line 2: prompt_tokens = 'abc'" in at.main.error[0].value
    _uploader(at, "w.upload_trace").set_value(None).run()  # (as a config's)
    assert not at.exception and not any("prompt_tokens = 'abc'" in e.value for e in at.sidebar.error)


@pytest.mark.parametrize("seed", [0, 5])
def test_an_uploaded_trace_is_sampled_with_the_configs_seed_as_the_cli_samples_it(seed, tmp_path):
    # the upload drew its sample with seed 0 whatever the config's: the same file, sample size and seed replayed other
    # requests in the app than `run --trace FILE --trace-max-requests 10 --set seed=5` (TraceOptions.seed: the config's)
    from sim_core.cli import main
    from sim_core.traces import TraceOptions, load_trace

    path = Path(__file__).resolve().parents[2] / "presets" / "traces" / "azure-2023-sample.csv"
    at = app(preset="chat-h100-llama8b", seed=str(seed)).run()
    at.number_input(key="w.trace_max_requests").set_value(10)
    _uploader(at, "w.upload_trace").set_value((path.name, path.read_bytes(), "text/csv"))
    at.run()
    assert not at.exception
    trace = at.session_state[CFG_KEY].workload.trace
    assert trace == load_trace(path, TraceOptions(max_requests=10, seed=seed)).trace
    assert trace != load_trace(path, TraceOptions(max_requests=10, seed=seed + 1)).trace  # (the seed decides the sample)
    assert at.session_state[CFG_KEY].seed == seed
    assert main(["run", "chat-h100-llama8b", "--trace", str(path), "--trace-max-requests", "10", "--set", f"seed={seed}",
                 "--out", str(tmp_path)]) == 0  # fmt: skip
    assert load_preset(str(tmp_path / "config.json")).workload.trace == trace


def test_a_preset_trace_is_not_called_an_upload_and_the_upload_options_say_they_are_for_the_next_file():
    # review 31c: a trace preset (the DistServe pair) showed "Replaying an uploaded trace of 300 requests" above a
    # "Time scale 1.00" that reads as this trace's, where the preset scaled it by 5.475 (the upload options apply only
    # to a file uploaded next)
    at = app(preset="cluster-distserve-opt13b-3xa100-colocated").run()
    note = next(i.value for i in at.sidebar.info if "Replaying" in i.value)
    assert "an uploaded trace" not in note and "300 requests" in note and "DistServe ShareGPT" in note
    assert "apply to the next file uploaded" in note
    at = app().run()
    csv = b"arrival_s,prompt_tokens,output_tokens\n0.0,100,10\n0.5,200,20\n"
    _uploader(at, "w.upload_trace").set_value(("my_*trace*.csv", csv, "text/csv"))
    at.run()
    note = next(i.value for i in at.sidebar.info if "Replaying" in i.value)
    assert "2 requests" in note and "my\\_\\*trace\\*.csv" in note  # the file's name as text, not markdown


def test_prefix_caching_and_speculation_show_their_numbers_and_a_mooncake_trace_uploads():
    at = app(preset="shared-system-prompt-h100-llama8b").run()
    assert "Prefix cache hits" not in {m.label for m in at.metric}
    at.toggle(key="w.kv_cache.enable_prefix_caching").set_value(True).run()
    assert not at.exception and metric(at, "Prefix cache hits").endswith("%")
    at.toggle(key="w.scheduler.speculative.enabled").set_value(True).run()
    assert float(metric(at, "Tokens per decode step")) > 1
    # the draft time with its share of the busy time it is part of ("draft 11.18 s" said neither what nor how much)
    from sim_core.engine import run_simulation

    s = run_simulation(at.session_state[CFG_KEY]).summary  # (the run the page shows: same config, same result)
    drafted = next(m for m in at.metric if m.label == "Tokens per decode step").proto.delta
    assert drafted.startswith("drafting ") and drafted.endswith(
        f"({s.spec_draft_time_s / (s.gpu_busy_fraction * s.makespan_s):.0%} of busy time)"), drafted
    line = b'{"timestamp": 0, "input_length": 600, "output_length": 8, "hash_ids": [0, 1]}\n'
    _uploader(at, "w.upload_trace").set_value(("m.jsonl", line * 3, "application/jsonl"))
    at.run()
    wl = at.session_state[CFG_KEY].workload
    assert not at.exception and wl.trace is not None and wl.trace.block_hash_ids == [[0, 1]] * 3


def test_closed_sidebar_sections_draw_nothing_and_keep_the_config():
    cfg = make_config(seed=5, workload__num_requests=90)
    at = app(open_sections=False, cfg=encode_config(cfg)).run()
    keys = {w.key for w in at.sidebar.number_input}
    assert "w.seed" not in keys and "w.workload.num_requests" not in keys  # Objectives & Workload start closed
    at.slider(key="w.hardware.peak_tflops").set_value(500.0).run()  # Hardware starts open
    assert at.session_state[CFG_KEY].seed == 5 and at.session_state[CFG_KEY].workload.num_requests == 90
    assert at.session_state[CFG_KEY].hardware.peak_tflops == 500.0


def test_hardware_sources_are_shown():
    at = app().run()
    assert any("H100 datasheet" in c.value for c in at.sidebar.caption)
    # the sidebar gives the datasheet's figures; where they were copied and the fitted factors (file paths a student
    # cannot open) are the About page's, which it says
    (said,) = [c.value for c in at.sidebar.caption if "datasheet" in c.value]
    assert "PCIe Gen5 x16 64 GB/s." in said and "Sources and fitted factors: the About page." in said
    assert ".md" not in said and ".csv" not in said and "hbm_efficiency_scale" not in said
    about = open_page("app_pages/about.py")
    # a static table that wraps (the sources, a sentence each, were cut at the page's edge in a scrolling grid)
    table = about.table[0].value
    assert len(table) >= 5 and table["source"].str.len().min() > 10 and not about.dataframe
    assert table.loc["b200", "dense BF16 TFLOP/s"] == "2,250" and table.loc["h100-sxm", "HBM GB/s"] == "3,350"
    assert "a100-80gb-pcie-nvlink-bridge" in table.index


def test_about_gives_each_pools_memory_for_a_split_deployment_of_two_gpu_kinds():
    # Splitwise-HA prefills on H100s and decodes on A100s: About showed the top-level H100's plan alone, "Per GPU"
    from sim_core import load_preset, run_simulation
    from sim_core.config import pool_config
    from sim_core.costmodel import plan_memory

    about = linked_page(PAGES[4], preset="cluster-splitwise-llama70b-4xdgx-ha-3p1d")
    assert not about.exception
    text = " ".join(m.value for m in about.markdown)
    cfg = load_preset("cluster-splitwise-llama70b-4xdgx-ha-3p1d")
    for role, gpu in (("Prefill", "H100 SXM"), ("Decode", "A100 80GB SXM")):
        plan = plan_memory(pool_config(cfg, role.lower()))
        assert f"{role} pool (" in text and gpu in text and f"({plan.num_blocks:,} blocks per instance)" in text
    assert "Per GPU:" not in text
    decode_tokens = plan_memory(pool_config(cfg, "decode")).kv_capacity_tokens
    assert [m.value for m in about.metric if m.label.startswith("KV capacity")] == [f"{decode_tokens:,}"]


def test_about_names_the_configuration_and_counts_the_drafts_kv_per_token():
    # (a review: Llama-2-7B drafting for Llama-3.1-8B showed "KV per token 128 KiB" beside
    # 43 GiB of KV for 70,720 tokens, and the page named no model or GPU)
    from sim_core import load_preset
    from sim_core.costmodel import kv_bytes_per_token, plan_memory
    from sim_core.presets import config_with

    cfg = config_with(load_preset("spec-decode-h100-llama8b"), {"scheduler.speculative.draft": "model"})
    about = linked_page(PAGES[4], preset="spec-decode-h100-llama8b", **{"scheduler.speculative.draft": "model"})
    assert not about.exception
    assert any(c.value.startswith("Llama-3.1-8B on 1× H100 SXM") for c in about.caption)
    per_token = next(m for m in about.metric if m.label == "KV per token")
    plan = plan_memory(cfg)
    total = plan.block_bytes / cfg.kv_cache.block_size * cfg.hardware.num_gpus  # (what a token's KV takes, draft's included)
    assert per_token.value == f"{total / 1024:.0f} KiB" and f"target {kv_bytes_per_token(cfg) / 1024:.0f} + draft" in per_token.delta
    assert "of the draft" in next(m for m in about.metric if m.label == "Parameters").delta
    # a head draft: one more layer's KV
    head = linked_page(PAGES[4], preset="spec-decode-h100-llama8b")
    assert next(m for m in head.metric if m.label == "KV per token").value == "132 KiB"


def test_about_quotes_the_cost_models_computed_error_band_as_plan_does():
    # it said "82 other published measurements ... about 11 %" while validate and Plan reported another band
    from sim_core.planner import calibration_band

    about = open_page("app_pages/about.py")
    text = " ".join(m.value for m in about.markdown)
    assert calibration_band().text() in text and "about 11 %" not in text


def narrow_plan_search(at, max_replicas: int) -> None:
    """Plan's search space cut to H100s at TP1 running vLLM V1, up to `max_replicas` (a test's few candidates)."""
    at.multiselect(key="plan.gpus").set_value(["h100-sxm"])
    at.multiselect(key="plan.tp").set_value([1])
    at.multiselect(key="plan.engines").set_value(["vllm-v1"])
    at.number_input(key="plan.replicas").set_value(max_replicas)
    at.run()


def test_plan_page_opens_its_first_two_rows_in_compare(tmp_path, monkeypatch):
    # a review: a plan's runner-up could not be put in Compare (its lists hold presets and the session's settings);
    # the link opens Compare on rows 1 and 2, each side the row's exact config
    from urllib.parse import parse_qsl, urlsplit

    monkeypatch.setenv("SIM_CORE_CACHE_DIR", str(tmp_path))
    at = open_page("app_pages/plan.py")
    at.number_input(key="plan.rate").set_value(30.0)
    narrow_plan_search(at, 3)
    at.multiselect(key="plan.engines").set_value(["vllm-v1", "sglang"]).run()
    at.button(key="plan.go").click().run()
    assert not at.exception
    df = at.dataframe[-1].value
    assert len(df) >= 2
    (button,) = at.get("link_button")
    url = urlsplit(button.proto.url)
    assert url.path == "./compare" and button.proto.label == "Compare the first two rows"
    query = dict(parse_qsl(url.query))
    assert set(query) == {"a_cfg", "b_cfg"}
    compare = open_page("app_pages/compare.py", **query)
    assert not compare.exception
    sides = [compare.session_state[f"cmp.parsed_{side}"][1][0] for side in "ab"]
    for side, row in zip(sides, df["configuration"][:2]):  # ("2× h100-sxm TP1 · sglang": 2 replicas of the family)
        count, family = row.split("× ", 1)
        assert side.name == f"plan: {family}" and (side.deployment.replicas if side.deployment else 1) == int(count)
        assert side.scheduler.name == ("SGLang" if family.endswith("sglang") else "vLLM V1")


def test_plan_rate_box_shows_a_typed_small_rate_and_starts_where_a_plan_can_run():
    # A rate typed as 0.001 read "0.00" above the plan made for it (two decimals, chosen by the opening value), and the
    # box's own minimum, 1e-6, planned 2 replicas at 5e-7 each and was refused as "Invalid capacity probe at 5e-07
    # req/s": the box's floor is PlanSpec's, the config's lowest rate times the most replicas.
    from sim_core.config import MAX_REPLICAS, field_bounds

    at = open_page("app_pages/plan.py")
    at.number_input(key="plan.rate").set_value(0.001).run()
    box = at.number_input(key="plan.rate")
    assert not at.exception and box.value == 0.001 and box.proto.format == "%.6g"
    assert box.min == field_bounds(("workload", "arrival", "rate_per_s"))[0] * MAX_REPLICAS


def test_plan_page_lists_the_cheapest_deployment_with_a_simulate_link(tmp_path, monkeypatch):
    import json

    monkeypatch.setenv("SIM_CORE_CACHE_DIR", str(tmp_path))
    at = open_page("app_pages/plan.py")
    assert not at.exception
    at.number_input(key="plan.rate").set_value(30.0)
    narrow_plan_search(at, 3)
    at.button(key="plan.go").click().run()
    assert not at.exception
    df = at.dataframe[-1].value  # after the price editor
    assert list(df["configuration"]) == ["2× h100-sxm TP1 · vllm-v1"]
    assert df["open"][0].startswith("./?") and df["$/hour"][0] == 6.0
    # short headers (the long ones hid headroom and robustness behind a scroll on a 1,400-px page), and the link beside
    # the configuration: last, it sat past the right edge of a 1,400-px page and of a phone, behind a scroll
    assert list(df.columns)[:2] == ["configuration", "open"] and list(df.columns)[-2:] == ["headroom", "robust"]
    assert "$/M out tok" in df.columns and "capacity" in df.columns  # (short headers: the table fits 1,400 px, test_browser)
    columns = json.loads(at.dataframe[-1].proto.columns)
    # (the configuration pinned while the numbers scroll: with All columns, test_plans_table_opens_on_the_columns_…)
    assert columns["TTFT P99 (ms)"]["type_config"]["format"] == "%,.0f"  # 1,736 ms, as good req/$ writes 19,519
    assert at.dataframe[-1].proto.placeholder == "–"  # a headroom not known: "–", as fmt_number writes NaN, not "None"
    assert any("candidate configurations" in c.value for c in at.caption)
    # the Pareto chart draws the misses under the meets: a miss at a front point's price and TTFT covered its blue dot,
    # the front's ring around a grey one; the legend still lists the meets first
    traces = json.loads(at.get("plotly_chart")[0].proto.spec)["data"]
    assert [t["name"] for t in traces] == ["misses them (TTFT or TPOT)", "meets the SLOs", "Pareto front"]
    # a grey point well under the TTFT objective misses on TPOT, which the chart does not draw: its hover says it
    assert all("TPOT P99 %{customdata:,.1f} ms" in t["hovertemplate"] for t in traces[:2])
    assert traces[1]["legendrank"] < traces[0]["legendrank"]
    # ... and the TTFT objective is a line, with its value (a review: grey misses sat far under an unmarked 2 s)
    layout = json.loads(at.get("plotly_chart")[0].proto.spec)["layout"]
    (line,), (label,) = layout["shapes"], layout["annotations"]
    assert line["y0"] == line["y1"] == 2000 and label["text"] == "TTFT SLO 2,000 ms"
    assert layout["yaxis"]["type"] == "log" and label["y"] == pytest.approx(math.log10(2000))  # (a log axis's own units)
    # the error band starts a sentence there: it read "... dearer than the cheapest results. cost-model error on 148 ..."
    assert any(". Cost-model error on " in c.value for c in at.caption) and not any(". cost-model" in c.value for c in at.caption)
    fig = json.loads(at.get("plotly_chart")[-1].proto.spec)
    from tests.app.test_charts import numeric_axes_without_separators, raw_numbers_in_hover

    # the $/hour axis and the hover ("$1234.00/h · 1736 ms") without separators, beside the table's 1,736
    assert not numeric_axes_without_separators(fig["layout"]) and fig["layout"]["xaxis"]["tickformat"] == ","
    assert not [t["hovertemplate"] for t in fig["data"] if raw_numbers_in_hover(t.get("hovertemplate", ""))]
    front = next(t for t in fig["data"] if t["name"] == "Pareto front")
    assert "markers" in front["mode"]  # a front of one config is a ring, not an invisible zero-length line
    assert fig["layout"]["yaxis"]["type"] == "log" and fig["layout"]["yaxis"]["ticktext"]  # labels in full, not bare digits
    # Each configuration once, at its deployment's latency: the prefilter's one-replica approximation (λ/N) of a row it
    # confirmed was drawn too (2× at 251 ms beside the table's 196 ms on the default search; a λ/N miss beside a pass)
    points = [(label, y) for t in fig["data"] if t["name"] != "Pareto front" for label, y in zip(t["text"], t["y"])]
    assert len({label for label, _ in points}) == len(points)
    assert dict(points)["2× h100-sxm TP1 · vllm-v1"] == pytest.approx(df["TTFT P99 (ms)"][0])
    # and the caption says how they were simulated (it said "every candidate is simulated as a deployment")
    assert any("finalists confirmed as deployments" in c.value for c in at.caption)


def test_plan_opens_on_the_configs_router_and_says_so():
    # the Router box opened on round robin whatever the config's deployment routed by, so a plan of a least_kv
    # deployment searched behind another router unless its reader noticed (`python -m sim_core plan` did the same)
    # ... and its candidates refreshed the router's view of the engines every 0.05 s whatever the config's interval
    at = linked_page(PAGES[5], preset="cluster-router-4xh100-llama8b",
                     **{"deployment.router": "least_kv", "deployment.state_refresh_s": 0.2})  # fmt: skip
    assert not at.exception
    assert at.selectbox(key="plan.router").value == "least_kv"
    assert at.number_input(key="plan.refresh").value == 0.2 and not at.number_input(key="plan.refresh").disabled
    said = " ".join(c.value for c in at.caption)
    assert ("Router: candidates are routed by the config's deployment.router, least_kv (refreshing engine state every "
            "0.2 s, as the config's deployment.state_refresh_s).") in said, said  # fmt: skip
    at.number_input(key="plan.refresh").set_value(0.0).run()
    said = " ".join(c.value for c in at.caption)
    assert "(refreshing engine state every 0 s, not the config's deployment.state_refresh_s = 0.2 s)" in said, said
    at.selectbox(key="plan.router").set_value("round_robin").run()
    said = " ".join(c.value for c in at.caption)
    assert "Router: candidates are routed by round_robin, not the config's deployment.router, least_kv." in said, said
    assert at.number_input(key="plan.refresh").disabled  # (round robin reads no engine state)


def test_a_plan_whose_every_candidate_errs_names_the_error(tmp_path, monkeypatch):
    # a link's limits.max_ticks=1 stops every saturation probe: the page said "skipped: 3 simulation error" and "No
    # configuration ... meets the SLOs: add GPUs, TP degrees or replicas", never naming the limit (fuzz39)
    monkeypatch.setenv("SIM_CORE_CACHE_DIR", str(tmp_path))
    at = linked_page(PAGES[5], preset="chat-h100-llama8b", **{"limits.max_ticks": "1"})
    narrow_plan_search(at, 3)
    at.button(key="plan.go").click().run()
    assert not at.exception
    said = " ".join(c.value for c in at.caption)
    assert "simulation error (first: too few requests finished to measure saturation" in said, said
    assert "(limits.max_ticks)" in said


def test_a_plan_whose_split_search_the_page_budget_stops_shows_its_confirmed_rows(tmp_path, monkeypatch):
    # the page's budget stopping the P:D split search dropped the co-located rows it had confirmed ("The search
    # stopped ... press Plan again"); they are shown now, with where the split search got to and how to go on
    from sim_core import planner

    real = planner._search

    def search(*args, partial=False, **kwargs):  # the split phase (the one searched partially) finds the page spent
        if partial:
            args = (*args[:5], lambda: True, *args[6:])  # (cancelled: _search's sixth argument)
        return real(*args, partial=partial, **kwargs)

    monkeypatch.setattr(planner, "_search", search)
    monkeypatch.setenv("SIM_CORE_CACHE_DIR", str(tmp_path))
    at = open_page("app_pages/plan.py")
    at.number_input(key="plan.rate").set_value(30.0)
    narrow_plan_search(at, 3)
    at.checkbox(key="plan.pd").check()
    at.button(key="plan.go").click().run()
    assert not at.exception
    assert list(at.dataframe[-1].value["configuration"]) == ["2× h100-sxm TP1 · vllm-v1"]
    said = " ".join(w.value for w in at.warning)
    assert "split search stopped (cancelled while building the search space" in said, said
    assert "before any of its candidates was tried" in said
    assert "Press Plan again to go on from there" in said and "python -m sim_core plan --pd" in said
    assert not at.error
    # the co-located row is no answer yet: a split not tried may be cheaper (it was headed "Cheapest meeting the SLOs")
    assert any(m.value.startswith("**Cheapest found so far, not final (the search stopped") for m in at.markdown)
    assert not any("Cheapest meeting the SLOs" in m.value for m in at.markdown)


def test_a_plan_of_a_trace_says_why_its_headroom_is_missing(tmp_path, monkeypatch):
    # a traced plan's headroom read "–" in the table and in the sentence above it, with no word of why
    from app.state import CFG_KEY
    from sim_core.planner import NO_HEADROOM_FOR_TRACES
    from tests.conftest import trace_config

    monkeypatch.setenv("SIM_CORE_CACHE_DIR", str(tmp_path))
    at = open_page("app_pages/plan.py")
    at.session_state[CFG_KEY] = trace_config([256] * 200, [16] * 200, arrivals=[i * 0.05 for i in range(200)])
    at.number_input(key="plan.rate").set_value(20.0)
    narrow_plan_search(at, 2)
    at.button(key="plan.go").click().run()
    assert not at.exception
    said = next(m.value for m in at.markdown if m.value.startswith("**Cheapest meeting the SLOs:**"))
    assert "headroom n/a (see the note under the table)" in said, said
    assert f"Note (every row): {NO_HEADROOM_FOR_TRACES}." in [c.value for c in at.caption]


def roomy_plan_budget(monkeypatch, tmp_path) -> None:
    """A plan page whose whole search and bisection fit its budget (a fresh cache in `tmp_path`): beside other tests on
    2 cores the server's own budget may cut the bisection, a stop these tests are not about."""
    from app.components import runner
    from sim_core.budget import RunBudget

    monkeypatch.setenv("SIM_CORE_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(runner.PageBudget, "run_budget", property(lambda self: RunBudget(max_wall_s=120.0)))
    real_init = runner.PageBudget.__init__
    monkeypatch.setattr(runner.PageBudget, "__init__", lambda self, max_wall_s=None: real_init(self, 600.0))


def test_plans_table_opens_on_the_columns_a_phone_shows_and_keeps_the_rest_one_toggle_away(tmp_path, monkeypatch):
    # At 390 px the eleven columns scrolled sideways (927 px in a 356-px box) with the configuration, the link, GPUs and
    # $/hour in view and headroom out of it. The table opens on four that fit; the cheapest is written in full above it
    # (a long configuration may end in "…" in the narrow column). The data is the same either way (its CSV too).
    import json

    # (the headroom the sentence names needs the whole bisection: at load ~3 the page's own budget cut it, "headroom
    # n/a"; what is tested here is the table's columns, not the server's budget)
    roomy_plan_budget(monkeypatch, tmp_path)
    at = open_page("app_pages/plan.py")
    at.number_input(key="plan.rate").set_value(30.0)
    narrow_plan_search(at, 3)
    at.button(key="plan.go").click().run()
    assert not at.exception
    table = at.dataframe[-1]
    assert list(table.proto.column_order) == ["configuration", "$/hour", "headroom", "open"]
    columns = json.loads(table.proto.columns)
    assert sum(columns[c]["width"] for c in table.proto.column_order) <= 352  # (test_browser measures it on a phone)
    assert not columns["configuration"].get("pinned")  # (pinned, it stays in view while the rest scroll: nothing to)
    assert len(table.value.columns) == 11 and table.value["open"][0].startswith("./?")
    # a row short of the model's error is named under the table (only "All columns" showed its "robust: no")
    fragile = [c for c, robust in zip(table.value["configuration"], table.value["robust"]) if robust == "no"]
    said_fragile = [c.value for c in at.caption if c.value.startswith("Less headroom than the cost model's median error")]
    assert len(said_fragile) == (1 if fragile else 0) and all(c in said_fragile[0] for c in fragile), (fragile, said_fragile)
    said = next(m.value for m in at.markdown if m.value.startswith("**Cheapest meeting the SLOs:**"))
    assert "2× h100" in said and "6.00 per hour" in said and "headroom +" in said, said
    at = open_page("app_pages/plan.py")
    at.session_state["plan.all_columns"] = True
    at.number_input(key="plan.rate").set_value(30.0)
    narrow_plan_search(at, 3)
    at.button(key="plan.go").click().run()
    full = at.dataframe[-1]
    assert list(full.proto.column_order) == [] and json.loads(full.proto.columns)["configuration"]["pinned"] is True
    assert full.value.equals(table.value)


def test_a_plan_row_short_of_the_models_error_is_named_under_the_table(tmp_path, monkeypatch):
    # "1× h100-sxm TP2 · headroom +0 %" sat beside +31 % rows at one price; only "All columns" said "robust: no"
    roomy_plan_budget(monkeypatch, tmp_path)
    at = open_page("app_pages/plan.py")
    at.number_input(key="plan.rate").set_value(37.7)  # (2x H100 serves ~39.4: +4 %, under the median error)
    narrow_plan_search(at, 3)
    at.button(key="plan.go").click().run()
    assert not at.exception
    table = at.dataframe[-1].value
    assert list(table["robust"]) == ["no"], table
    said = [c.value for c in at.caption if c.value.startswith("Less headroom than the cost model's median error")]
    assert len(said) == 1 and f"{table['configuration'][0]} (+4%)" in said[0], said


def test_plans_tp_degrees_are_those_the_models_heads_split_over():
    # Plan offered TP 1, 2, 4 and 8 for every model: Qwen2.5-7B's 28 heads (4 KV heads) do not split over 8 GPUs, and
    # TP 8, picked by default, was pruned after the Plan press. The sidebar offers only degrees the model allows.
    from sim_core.config import tp_rule_text

    qwen = app(preset="code-completion-l40s-qwen7b").run()
    qwen.switch_page("app_pages/plan.py").run()
    assert not qwen.exception
    tp = qwen.multiselect(key="plan.tp")
    assert [int(t) for t in tp.options] == [1, 2, 4] and tp.value == [1, 2, 4]
    assert tp_rule_text(qwen.session_state[CFG_KEY].model) in tp.help  # why 8 is not there, and that 28 would be
    llama = open_page("app_pages/plan.py")
    assert [int(t) for t in llama.multiselect(key="plan.tp").options] == [1, 2, 4, 8]


def test_plan_page_offers_prefill_decode_splits_and_a_router():
    at = open_page("app_pages/plan.py")
    at.multiselect(key="plan.gpus").set_value(["h100-sxm"])
    at.multiselect(key="plan.tp").set_value([1, 2])
    at.multiselect(key="plan.engines").set_value(["vllm-v1"])
    at.number_input(key="plan.replicas").set_value(3)
    at.run()
    assert any(c.value.startswith("6 candidate configurations") for c in at.caption)  # 2 TP x 3 replicas
    at.checkbox(key="plan.pd").check().run()
    from typing import get_args

    from sim_core.config import Router

    assert at.selectbox(key="plan.router").options == list(get_args(Router))  # every router a deployment has
    at.selectbox(key="plan.router").set_value("least_outstanding").run()
    assert not at.exception
    # + 2 x 2 pool TP pairs x 3 (x, y) splits with x + y <= 3
    assert any(c.value.startswith("18 candidate configurations") for c in at.caption)


def test_sweep_head_to_head_names_each_strategys_overloaded_points():
    # tflops 400-1000 against Sarathi-Serve: "(tflops = 400, 400, 700, 1000)" listed both strategies' points as one
    at = open_page(PAGES[2], preset="chat-h100-llama8b", sweep="tflops", start="400", stop="1000", n="3", vs="sarathi-serve")
    assert not at.exception
    # (vLLM V1 at 400 was named too until session 56: its 200-request window finished 7.07 of 8.49 req/s with every
    # request within the SLOs; at 4,000 requests it keeps up, 8.02 of 7.95: a run too short, not a server behind)
    said = [i.value for i in at.info if "no steady state" in i.value]
    assert said and "(tflops: Sarathi-Serve at 400, 700, 1000)" in said[0], said


def test_the_default_rate_sweep_names_every_point_past_its_capacity_as_falling_behind():
    # its note named 26 and 30 req/s (each with a note on its window) but not 22, which also finished fewer requests
    # than arrived (capacity's keep-up rule) and read goodput 8.5 req/s with TTFT p99 12 s beside a capacity below it
    at = open_page(PAGES[2], preset="chat-h100-llama8b", sweep="rate")
    assert not at.exception
    said = [i.value for i in at.info if "no steady state" in i.value]
    assert len(said) == 1, [i.value for i in at.info]
    named = said[0].split("(rate = ")[1].split(")")[0].split(", ")
    assert len(named) >= 3 and "22" in named, said


def test_sweep_page_repeats_over_seeds_and_says_when_runs_are_too_short():
    at = open_page(PAGES[2], preset="chat-h100-llama8b", sweep="rate", start="8", stop="32", n="3")
    at.number_input(key="sw.seeds").set_value(2).run()
    assert not at.exception
    fig = at.get("plotly_chart")[0].proto.spec
    assert '"fill":"toself"' in fig.replace(" ", "")  # the band across seeds
    # (8-32 req/s: the one point past the knee, 32, is overloaded, and said "Run about … requests or more", advice no
    # length of run can follow; it now says requests arrive faster than they finish there)
    said = [i.value for i in at.info if "steady state" in i.value]
    assert said and said[0].startswith("1 of 3 points has no steady state (rate = 32): requests arrive faster than they finish "
                                       "(at rate = 32, the closest to keeping up, it completed ")  # (of its 2 seeds)
    assert "Run about" not in said[0], said
    at.selectbox(key="sw.rule").set_value("P50").run()
    assert any("P50 TTFT" in c.value for c in at.caption)


def test_a_steady_window_the_run_cannot_vouch_for_shows_no_figures_beside_its_note():
    # cluster-router-4xh100-llama8b: "goodput 59.57 req/s of 59.75 offered" sat just above "Too short to say", and a
    # class quoted 60 req/s; the headline's whole-run goodput is 14.7
    at = app(preset="cluster-router-4xh100-llama8b").run()
    assert not at.exception
    assert any(i.value.startswith("Too short to say") for i in at.info)
    said = [c.value for c in at.caption if c.value.startswith("Steady state")]
    assert len(said) == 1 and "cannot say what it is" in said[0] and "req/s" not in said[0], said


def test_a_scenario_sizing_an_engines_batch_still_names_that_engine():
    # engine-vllm-v0 batches 16,384 tokens at its 16k context (vLLM V0's own default there) and read "scheduler custom
    # (from vLLM V0)"; a change of the engine's policy still reads as custom
    from sim_core.presets import engine_label as _scheduler_label

    assert _scheduler_label(load_preset("engine-vllm-v0")) == "vLLM V0"
    assert _scheduler_label(load_preset("kv-pressure-a100-llama8b")) == "custom (from vLLM V0)"  # (greedy admission)
    assert _scheduler_label(make_config("chat-h100-llama8b", scheduler__max_num_seqs=64)) == "vLLM V1"
    assert _scheduler_label(make_config("chat-h100-llama8b", scheduler__prefill_mode="prefill_first")) == "custom (from vLLM V1)"


def test_simulate_states_the_steady_window_and_flags_a_short_run():
    at = app(preset="chat-h100-llama8b").run()
    assert any("Steady state (requests 30–269" in c.value for c in at.caption)
    cfg = make_config(workload__num_requests=300, workload__arrival__rate_per_s=24.0)
    at = app(cfg=encode_config(cfg)).run()
    assert any(i.value.startswith("Too short to say") for i in at.info)  # overloaded: the warm-up never settles


def test_a_demonstration_sized_run_says_in_one_line_that_it_has_no_steady_state():
    # A mechanism preset (4 requests) is a lesson, not a measurement: no steady-state line of 4 requests' percentiles,
    # and no banner asking the class to run 125 requests; one caption says why and what the figures cover
    at = app(preset="mechanism-chunked-prefill").run()
    assert not at.exception and not any(i.value.startswith("Too short to say") for i in at.info)
    assert not any(c.value.startswith("Steady state") for c in at.caption)
    # (a replayed trace of 4 cannot run 125 requests: a review read "Run at least 125 requests" under one)
    assert any(c.value == "A demonstration: this scenario replays 4 requests (4 in the steady window), too few for "
               "steady-state figures (a p99 needs 100). The figures above cover the whole run." for c in at.caption), \
        [c.value for c in at.caption]
    assert not any("Run at least" in c.value for c in at.caption)
    # a drawn workload that short can be run longer: its caption says how
    at = app(preset="chat-h100-llama8b", **{"workload.num_requests": "40"}).run()
    assert any(c.value.startswith("Too short to say: the steady window holds 32 requests") and "Run at least 125 requests" in c.value
               and c.value.endswith("The figures above cover the whole run.") for c in at.caption), [c.value for c in at.caption]


def test_compare_repeats_over_seeds_and_says_whether_the_bands_overlap():
    at = open_page(PAGES[1])
    at.number_input(key="cmp.seeds").set_value(3).run()
    assert not at.exception
    df = next(d.value for d in at.dataframe if "bands overlap" in d.value.columns)
    assert list(df["metric"])[:2] == ["Output throughput", "Goodput"] and set(df["bands overlap"]) <= {"yes", "no"}
    assert "A (min – max, 3 seeds)" in df.columns


def test_the_timeline_is_drawn_without_plotly_until_zoom_is_asked_for():
    at = app(open_sections=False, preset="chat-h100-llama8b-vllm-v0").run()
    timelines = [h for h in at.get("html") if 'data-testid="timeline-html"' in h.proto.body]
    assert len(timelines) == 1 and "GPU: one bar per tick" in timelines[0].proto.body
    assert not at.get("plotly_chart")  # nothing on the first screen needs the Plotly bundle
    at.toggle(key="ui.timeline_plotly").set_value(True).run()
    assert not at.exception
    assert [c.key for c in at.get("plotly_chart")] == ["chart.timeline"]
    assert not [h for h in at.get("html") if 'data-testid="timeline-html"' in h.proto.body]


def test_the_timeline_tab_redraws_on_its_own_controls():
    at = app(open_sections=False, preset="chat-h100-llama8b-vllm-v0").run()
    headline = metric(at, "TTFT p50")
    at.slider(key="ui.rows").set_value(10).run()  # a control inside the timeline's fragment
    assert not at.exception
    body = next(h.proto.body for h in at.get("html") if 'data-testid="timeline-html"' in h.proto.body)
    assert body.count(">req ") == 10
    # the title counts the rows of the requests alive (it said "10 requests alive" where more were)
    import re

    alive = re.search(r"10 of the ([\d,]+) requests alive in this window", body)
    assert alive and int(alive.group(1).replace(",", "")) > 10, body[:300]
    assert metric(at, "TTFT p50") == headline


def test_the_requests_shown_slider_reaches_no_further_than_the_runs_requests():
    # A mechanism preset's 6 requests: "Requests shown" ran 5-60 with its handle at 6, near the left end, and 54 of its
    # 56 positions drew the same six rows (a control that did nothing); it ends at the run's request count
    at = app(open_sections=False, preset="mechanism-prefill-stall").run()
    rows = at.slider(key="ui.rows")
    assert (rows.min, rows.max, rows.value) == (5, 6, 6)
    # and a value kept from a larger run (40 of 300) gives way to this run's (the slider's range changed: a new widget)
    at = app(open_sections=False).run()
    at.slider(key="ui.rows").set_value(40).run()
    at.query_params["preset"] = "mechanism-prefill-stall"
    at.session_state[CFG_KEY] = load_preset("mechanism-prefill-stall")
    at.run()
    assert not at.exception
    assert at.slider(key="ui.rows").value == 6 and at.slider(key="ui.rows").max == 6
    # a large run keeps the whole range
    at = app(open_sections=False).run()
    assert at.slider(key="ui.rows").max == 60


def test_compares_gantts_name_their_side_above_the_chart_and_hang_their_legend_below_the_axis():
    # 390 px, two deployments: the Gantt's title "A · cluster-dynamo-llama70b-fp8-8xh100-colocated" was cut at the
    # chart's edge (Plotly does not wrap a title), and its legend, wrapped to two rows and anchored by its bottom,
    # rose over "simulated time (s)"
    import json

    at = open_page(PAGES[1], a_preset="cluster-dynamo-llama70b-fp8-8xh100-colocated", b_preset="cluster-dynamo-llama70b-fp8-8xh100-3p1d",
                   **{"a_workload.num_requests": "60", "b_workload.num_requests": "60"})
    assert not at.exception
    names = [m.value for m in at.markdown]
    assert "**A** · modified · vLLM V1" in names and "**B** · modified · vLLM V1" in names  # (60 requests: modified presets)
    gantts = [json.loads(c.proto.spec)["layout"] for c in at.get("plotly_chart")[:2]]
    # (a deployment's legend, a line per instance too, in its own strip at the figure's foot: test_cluster_timeline)
    assert all(not g.get("title", {}).get("text") and g["legend"]["yref"] == "container" for g in gantts), gantts
    one = open_page(PAGES[1])  # one engine a side: the same
    g = json.loads(one.get("plotly_chart")[0].proto.spec)["layout"]
    assert not g.get("title", {}).get("text") and g["legend"]["yanchor"] == "top"


def test_compare_says_when_b_cannot_run_on_the_workload_of_a():
    # B took A's workload by an unvalidated copy: a trace longer than B's pools' max_model_len reached the worker as
    # "The simulation failed unexpectedly (ValidationError …). Please report the config", and the page's link
    # carried the invalid B (opened, it fell back to the default scenario)
    at = open_page(PAGES[1], a_preset="trace-azure-2023-h100-llama8b", b_preset="cluster-distserve-opt13b-3xa100-p2d1")
    assert not at.exception
    msg = " ".join(e.value for e in at.error)
    assert "max_model_len" in msg and "Run B on A's workload and seed" in msg and "unexpectedly" not in msg
    at.toggle(key="cmp.same_workload").set_value(False).run()  # nothing lost: B runs on its own workload
    assert not at.exception and not at.error and len(at.table) == 1


def test_a_config_too_long_for_a_link_leaves_no_other_config_in_the_address():
    # after a trace upload too long for a link the address bar kept ?preset=chat-h100-llama8b: copied, it shared the
    # preset's run as this one
    import numpy as np

    rng = np.random.default_rng(0)
    rows = "".join(f"{t:.6f},{p},{o}\n" for t, p, o in zip(np.cumsum(rng.exponential(0.1, 3000)), rng.integers(10, 4000, 3000),
                                                          rng.integers(1, 500, 3000)))  # fmt: skip
    at = app(preset="chat-h100-llama8b").run()
    assert at.query_params["preset"] == "chat-h100-llama8b"
    _uploader(at, "w.upload_trace").set_value(("t.csv", ("arrival_s,prompt_tokens,output_tokens\n" + rows).encode(), "text/csv"))
    at.run()
    assert not at.exception and at.session_state[CFG_KEY].workload.num_requests == 3000
    assert not {"preset", "cfg"} & set(at.query_params)
    assert any("Too long for a link" in t.value for t in at.text)  # the Share button says why (and where the JSON is)
    at.switch_page(PAGES[2])  # Sweep wrote the whole trace into the address (a 100k-request one: megabytes)
    for k, v in {"sweep": "max_num_seqs", "start": "64", "stop": "128", "n": "2"}.items():
        at.query_params[k] = v
    at.run()
    assert not at.exception and at.query_params["sweep"] == "max_num_seqs" and not {"preset", "cfg"} & set(at.query_params)


def test_the_sweep_table_writes_large_latencies_with_separators_and_a_missing_value_as_a_dash():
    # max_num_seqs = 1 on the default preset queues for minutes: its TTFT p99 read "466455.2" ms; a point without a
    # result (an error) read "None" in every number column
    import json

    at = open_page(PAGES[2], preset="chat-h100-llama8b", sweep="max_num_seqs", start="1", stop="64", n="2")
    assert not at.exception
    table = at.dataframe[0]
    assert table.value["TTFT p99 (ms)"].max() > 100_000
    columns = json.loads(table.proto.columns)
    # (the units in the cells: the headers are short enough for a phone, test_the_sweep_table_opens_on_…)
    assert [columns[c]["type_config"]["format"] for c in ("output tok/s", "TTFT p99 (ms)", "TPOT p99 (ms)")] == ["%,.0f tok/s", "%,.0f ms", "%,.1f ms"]
    assert table.proto.placeholder == "–"
    assert columns["max_num_seqs"]["help"] == "max_num_seqs: max batch size (sequences)"  # the knob's column says its unit on hover


def test_the_sweep_tables_rate_column_names_its_unit():
    # the knob's column is headed by its short name ("rate"): its help gives the label with the unit
    import json

    at = open_page(PAGES[2], preset="chat-h100-llama8b", sweep="rate", start="1", stop="2", n="2")
    assert not at.exception
    assert json.loads(at.dataframe[0].proto.columns)["rate"]["help"] == "rate: arrival rate (requests/s)"


def test_a_sweep_point_that_cannot_settle_is_drawn_open_said_so_and_not_the_answer(monkeypatch):
    # the router preset's replica sweep drew 44 and 58 req/s of steady goodput at 2 and 3 replicas, beside 8's 60,
    # where 7-9 req/s finished: the runs cannot settle (their notes), and the chart and table did not say so
    import json

    at = linked_page(PAGES[2], preset="cluster-router-4xh100-llama8b", sweep="replicas", start="2", stop="8", n="4")
    assert not at.exception
    table = at.dataframe[0].value
    said = dict(zip(table["replicas"], table["steady state"]))
    assert said[2] == "no: too short" or said[2].startswith("no"), said
    figs = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    goodput = figs[1]
    markers = [t for t in goodput["data"] if t.get("mode") == "lines+markers"][0]["marker"]["symbol"]
    assert markers == ["circle" if s == "yes" else "circle-open" for s in table["steady state"]]
    assert "open: no steady state (note above)" in [t.get("name") for t in goodput["data"]]
    # 2 replicas fell behind (6.7 req/s finish in a window of 60 arriving): its goodput is its whole run's, 8.4 req/s,
    # not its window's 44 (`sweep.shown_field`); 8 replicas' window is only too short to settle and keeps its own figure
    # (its whole run's, 15 req/s, is its drain's). The table shows what the chart draws
    goodput_at = dict(zip(table["replicas"], table["goodput req/s"]))
    assert goodput_at[2] < 12.0 and goodput_at[8] > 50.0, goodput_at
    drawn = [t for t in goodput["data"] if t.get("mode") == "lines+markers"][0]["y"]
    assert drawn == list(table["goodput req/s"]), (drawn, table)
    answer = next(m.value for m in at.markdown if "most goodput at" in m.value)
    settled = table[table["steady state"] == "yes"]
    if len(settled):  # the answer is a settled point's
        best = settled.loc[settled["goodput req/s"].idxmax(), "replicas"]
        assert f"most goodput at replicas = {best:g}" in answer, answer
    # every point too short: the page offers the steady length, and with it the runs settle where they keep up
    assert "Switch on “Steady-state run length” to run every point" in " ".join(i.value for i in at.info)
    # (the steady-length runs are 3,000-6,000 requests each: on a slow or busy machine the server's 5 s per run stopped
    # them all, "no: unfinished", in CI at load; what is tested here is how they settle, not the server's budget)
    from app.components import runner
    from sim_core.budget import RunBudget

    monkeypatch.setattr(runner.PageBudget, "run_budget", property(lambda self: RunBudget(max_wall_s=120.0)))
    monkeypatch.setattr(runner.PageBudget, "exhausted", lambda self: False)
    at.toggle(key="sw.steady_other").set_value(True).run(timeout=600)
    assert not at.exception
    said = dict(zip(*(at.dataframe[0].value[c] for c in ("replicas", "steady state"))))
    assert said[8] == "yes" and said[2].startswith("no"), said
    answer = next(m.value for m in at.markdown if "most goodput at" in m.value)
    assert "in a run too short to settle" not in answer, answer


def test_the_sweep_table_opens_on_the_columns_a_phone_shows_and_keeps_the_rest_one_toggle_away():
    # At 390 px its eight columns scrolled sideways (630 px in a 356-px box) with the setup, the rate and the throughput in
    # view and the latencies out of it. It opens, as Plan's does, on those that fit (the knob, goodput and latencies, and
    # head to head the setup), headers short with the units in the cells; "All columns" brings the rest back; a sentence
    # says the answer of a sweep of a knob other than the rate (the rate's is its capacity).
    import json

    from app.components.tables import PHONE_TABLE_PX

    at = open_page(PAGES[2], preset="chat-h100-llama8b", sweep="rate", start="4", stop="24", n="3", vs="sarathi-serve")
    assert not at.exception
    table = at.dataframe[0]
    assert list(table.proto.column_order) == ["setup", "rate", "goodput req/s", "TTFT p99 (ms)", "TPOT p99 (ms)"]
    columns = json.loads(table.proto.columns)
    assert sum(columns[c]["width"] for c in table.proto.column_order) <= PHONE_TABLE_PX  # (test_browser measures it)
    assert at.toggle(key="sw.all_columns").value is False and len(table.value.columns) == 9
    at.toggle(key="sw.all_columns").set_value(True).run()
    full = at.dataframe[0]
    assert list(full.proto.column_order) == [] and json.loads(full.proto.columns)["setup"]["pinned"] is True
    assert full.value.equals(table.value)
    at = open_page(PAGES[2], preset="chat-h100-llama8b", sweep="max_num_seqs", start="16", stop="256", n="2")
    table = at.dataframe[0]
    assert list(table.proto.column_order) == ["max_num_seqs", "goodput req/s", "TTFT p99 (ms)", "TPOT p99 (ms)"]
    columns = json.loads(table.proto.columns)
    assert sum(columns[c]["width"] for c in table.proto.column_order) <= PHONE_TABLE_PX
    assert columns["max_num_seqs"]["label"] == "batch"  # ("max_num_seqs" read "max_nu" in its 50 px)
    said = next(m.value for m in at.markdown if "most goodput" in m.value)
    assert said.startswith("**vLLM V1**: most goodput at max_num_seqs = ") and " req/s (TTFT p99 " in said, said
    # a knob past where it binds runs the same: every value serving the most goodput is named, not the first alone
    at = open_page(PAGES[2], preset="chat-h100-llama8b", sweep="max_num_seqs", start="16", stop="256", n="4")
    said = next(m.value for m in at.markdown if "most goodput" in m.value)
    assert "most goodput at max_num_seqs = 96 (the same at 176, 256), " in said, said


def test_sweep_shows_a_small_start_as_the_link_gives_it():
    # "From" used Streamlit's default "%0.2f": a link's start=0.001 req/s showed as 0.00 while the sweep ran from 0.001
    at = open_page(PAGES[2], preset="chat-h100-llama8b", sweep="rate", start="0.001", stop="2", n="2")
    assert not at.exception
    for key, text in (("sw.start.rate", "0.001"), ("sw.stop.rate", "2")):
        w = at.number_input(key=key)
        assert (w.proto.format or "%0.2f") % w.value == text  # printf, as the browser formats it


LINK_3P1D = {"preset": "cluster-dynamo-llama70b-fp8-8xh100-3p1d", "workload.num_requests": "60"}


def sweep_of(link: dict[str, str], **sweep: str) -> AppTest:
    """Sweep opened on the config of `link` (a session started from it), with the sweep's own params."""
    at = app(**link).run()
    at.switch_page(PAGES[2])
    for k, v in (link | sweep).items():
        at.query_params[k] = v
    return at.run()


def test_sweep_of_the_pd_split_opens_on_the_splits_the_deployment_has():
    # Regression: the P:D knob's range came from the pool field (1-64) and its default was current / 2 to current x 2, so
    # Sweep of a 3P1D deployment ran 1..6 prefill instances: three of six points were "prefill_instances = 4: with 4
    # instances in all it must be in [1, 3]" warnings and empty table rows. The range is now [1, P + D - 1]; the x
    # axis of an integer knob ticks whole numbers (it read 1, 1.5, 2, 2.5, 3 instances).
    import json

    at = sweep_of(LINK_3P1D, sweep="prefill_instances")
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert not [w.value for w in at.warning]
    assert sorted(at.dataframe[0].value["prefill_instances"].tolist()) == [1, 2, 3]
    # as many points as splits (it opened on 8, rounded to these 3 with a note saying so)
    assert at.number_input(key="sw.n").value == 3 and not any("rounded" in c.value for c in at.caption)
    assert at.number_input(key="sw.stop.prefill_instances").proto.max == 3
    spec = json.loads(at.get("plotly_chart")[0].proto.spec)
    # each split named on the x axis (3P1D: 4 instances in all), not the prefill count alone
    assert spec["layout"]["xaxis"]["tickvals"] == [1, 2, 3]
    assert spec["layout"]["xaxis"]["ticktext"] == ["1P3D", "2P2D", "3P1D"]
    # a link asking for more than the deployment has is named and replaced by the range it has
    at = sweep_of(LINK_3P1D, sweep="prefill_instances", start="1", stop="6", n="6")
    assert not at.exception and any("between 1 and 3" in w.value for w in at.warning), [w.value for w in at.warning]
    assert sorted(at.dataframe[0].value["prefill_instances"].tolist()) == [1, 2, 3]


def test_sweep_of_an_integer_knob_says_what_the_cli_says_of_a_fractional_end_and_of_rounded_points():
    # the link's start=1.5 said "'1.5' is not a whole number" without the knob (the CLI ran it as 2 without a word); 8
    # points from 1 to 4 ran 4 without a word. The page and `python -m sim_core sweep` now share both sentences.
    link = {"preset": "chat-h100-llama8b", "workload.num_requests": "8"}
    at = sweep_of(link, sweep="max_num_seqs", start="1.5", stop="4", n="2")
    assert not at.exception
    assert any("start = 1.5: max_num_seqs takes whole numbers; give an integer such as 1 or 2" in w.value for w in at.warning), \
        [w.value for w in at.warning]  # fmt: skip
    at = sweep_of(link, sweep="max_num_seqs", start="1", stop="4", n="8")
    assert not at.exception and not at.warning, [w.value for w in at.warning]
    assert any("max_num_seqs takes whole numbers: 8 evenly spaced points from 1 to 4 are rounded to 1, 2, 3, 4 (4 points"
               in c.value for c in at.caption), [c.value for c in at.caption]  # fmt: skip
    assert sorted(at.dataframe[0].value["max_num_seqs"].tolist()) == [1, 2, 3, 4]


def test_sweep_says_in_full_why_runs_stopped_and_counts_with_separators(monkeypatch):
    # Past a 3P1D deployment's knee the runs stop at the simulated-time limit: the table's last column, the reason,
    # read "decode 0: stoppe…" on a 1,400-px page, nowhere else in full; "finished" read 2102 beside 1,549.4 tok/s (the
    # prefill pool is the first to stop since vllm-v1's session-75 refit)
    import json

    from app.components import runner
    from sim_core.budget import RunBudget

    # (the runs go on to the time limit, ~8,000 ticks each: under CI's load the server's 5 s per run stopped the first
    # one first, "decode 0: stopped after 4.x s ... the server's budget per run is 5 s"; what is tested here is the
    # sentence, not the budget)
    monkeypatch.setattr(runner.PageBudget, "run_budget", property(lambda self: RunBudget(max_wall_s=120.0)))
    monkeypatch.setattr(runner.PageBudget, "exhausted", lambda self: False)
    # (rates past the knee: 12 req/s stopped too until the sweep's time limit allowed for the arrivals' spread, review 33c)
    at = sweep_of(LINK_3P1D, sweep="rate", start="16", stop="20", n="2")
    assert not at.exception
    said = [c.value for c in at.caption if "stopped before their last request finished" in c.value]
    assert len(said) == 1 and "(rate = 16, 20)" in said[0] and "At rate = 16 (vLLM V1): prefill 0: stopped at " in said[0], said
    columns = json.loads(at.dataframe[0].proto.columns)
    assert columns["finished"]["type_config"]["format"] == "localized" and "in full under the table" in columns["stopped"]["help"]


def test_the_sweep_tables_rate_and_chunk_columns_are_headed_by_their_units():
    # the knob's column read "rate" and "chunk", numbers without a unit beside "8.5 req/s" (a phone gives it 48-60 px:
    # the unit, which the page's Knob box names the knob of; tests/app/test_browser.py measures them there)
    import json

    for knob, (start, stop), unit in (("rate", ("4", "8"), "req/s"), ("chunk", ("512", "1024"), "tokens")):
        at = sweep_of({"preset": "chat-h100-llama8b", "workload.num_requests": "40"}, sweep=knob, start=start, stop=stop, n="2")
        assert not at.exception
        columns = json.loads(at.dataframe[0].proto.columns)
        assert columns[knob]["label"] == unit, columns[knob]


def test_sweep_of_the_pd_split_on_one_engine_says_what_it_needs_once():
    at = sweep_of({"preset": "chat-h100-llama8b"}, sweep="prefill_instances")
    assert not at.exception
    assert [e.value for e in at.error] == ["prefill_instances needs a disaggregated deployment: set "
                                           "deployment.disaggregation first (Serving: disaggregated, in Simulate's sidebar)."]
    assert not at.warning and not at.dataframe  # not one warning per point, no table of empty rows


def test_plan_page_reads_the_candidate_count_and_the_split_link_from_sim_core(monkeypatch):
    # the page restated the count's formula (GPUs x TP x engines x knobs x (m + TP x m(m - 1)/2)) and the 50 GB/s
    # KV link of the splits: a change to either in sim_core left the page saying the old one
    from sim_core import planner
    from sim_core.config import LinkConfig

    monkeypatch.setattr(planner, "num_candidates", lambda spec: 12_345, raising=False)
    monkeypatch.setattr(planner, "split_link", lambda base: LinkConfig(bandwidth_gb_per_s=400.0, latency_us=5.0), raising=False)
    at = open_page("app_pages/plan.py")
    at.checkbox(key="plan.pd").check().run()
    assert not at.exception
    text = " ".join(c.value for c in at.caption)
    assert "12,345 candidate configurations" in text and "400 GB/s + 5 µs" in text


def test_a_plan_search_too_large_to_set_up_in_the_page_budget_says_to_narrow_it(monkeypatch, tmp_path):
    # a search stopped while its space was built said "press Plan again to continue": the next press meets the same
    # setup (nothing of it is cached). Page time here: always spent (no timing).
    from app.components import runner

    monkeypatch.setenv("SIM_CORE_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(runner.PageBudget, "spent_s", property(lambda self: self.max_wall_s + 1))
    at = open_page("app_pages/plan.py")
    at.button(key="plan.go").click().run()
    assert not at.exception
    text = " ".join(e.value for e in at.error)
    assert "too large to set up" in text and "while building the search space (0 of" in text
    assert "press Plan again" not in text
    assert "or run `python -m sim_core plan`, which" in text  # a command, not "`python -m sim_core plan`" as typed


def test_a_plan_search_the_page_budget_stopped_names_the_command_without_it(monkeypatch, tmp_path):
    # The message escaped its command for Markdown: the page showed "`python -m sim_core plan`", backticks as typed.
    from sim_core import planner
    from sim_core.backend import SearchCancelled

    def stopped(*args, on_progress=None, **kwargs):
        on_progress(planner.PlanProgress(2, 3, "candidates settled", 319, 576))
        raise SearchCancelled("stopped")

    monkeypatch.setenv("SIM_CORE_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(planner, "plan", stopped)
    at = open_page("app_pages/plan.py")
    at.button(key="plan.go").click().run()
    assert not at.exception
    text = " ".join(e.value for e in at.error)
    assert "press Plan again to continue" in text and "or run `python -m sim_core plan`, which" in text
    # how far it got (a review: an impossible SLO took ~8 presses, each message without its progress, which the bar took)
    assert "It had reached step 2 of 3: 319 / 576 candidates settled." in text, text


def test_a_plan_whose_headroom_bisection_the_page_budget_stopped_says_so_and_settles_no_tie(monkeypatch, tmp_path):
    # The first press at 32 req/s named "2x h100-sxm TP1 · sglang ..., headroom n/a" where the command line (and a
    # third press) named vLLM V1 at the same price with +31 %: rows at one price go by headroom, which the page's budget
    # had cut, and only a grey note under the table said so
    from sim_core import planner
    from sim_core.backend import SearchCancelled

    def cut(*args, **kwargs):
        raise SearchCancelled("stopped")

    monkeypatch.setenv("SIM_CORE_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(planner, "find_capacities", cut)
    # (the search before the bisection is the page's, under its own budget: beside other tests on 2 cores it ran out
    # there, a stop this test is not about)
    from app.components import runner
    from sim_core.budget import RunBudget

    monkeypatch.setattr(runner.PageBudget, "spent_s", property(lambda self: 0.0))
    monkeypatch.setattr(runner.PageBudget, "run_budget", property(lambda self: RunBudget(max_wall_s=120.0)))
    at = open_page("app_pages/plan.py")
    at.button(key="plan.go").click().run(timeout=600)
    assert not at.exception
    warned = " ".join(w.value for w in at.warning)
    assert "ran out before the headroom bisection" in warned and "Press Plan again" in warned, warned
    # above the table it qualifies (it was under the chart, a screen or two below, where a room saw the "–" and not why)
    def walk(node):
        yield node
        for child in getattr(node, "children", {}).values():
            yield from walk(child)

    order = [type(e).__name__ for e in walk(at.main)]
    table = len(order) - 1 - order[::-1].index("Dataframe")  # (the results: the page's inputs hold a table too)
    assert order.index("Warning") < table, order
    said = next(m.value for m in at.markdown if "Cheapest meeting the SLOs" in m.value)
    assert "headroom n/a" in said  # (the default search has three rows at $6.00/h)
    assert "more at the same price below; which of them has the most headroom is not known" in said, said


def run_in_process_with_budget(monkeypatch, **budget) -> None:
    """The page's runs go on in this process under the server's budget per run with `budget`'s fields replaced (the
    worker pool's runs keep the server's own: a budget set on the settings alone never reached them)."""
    import dataclasses

    from app.components import runner

    real = runner._simulate
    monkeypatch.setattr(runner, "_simulate", lambda srv, cfg: real(dataclasses.replace(
        srv, pool=None, settings=dataclasses.replace(srv.settings, run=dataclasses.replace(srv.settings.run, **budget))), cfg))


def stopped_page(monkeypatch, num_requests: int, **budget) -> tuple[AppTest, str]:
    """Simulate on the default preset with `num_requests` (a count no other test runs: its result is in no cache) under
    the server's budget with `budget`'s fields; the page and its warnings' text."""
    run_in_process_with_budget(monkeypatch, **budget)
    at = AppTest.from_file(APP, default_timeout=120)
    at.query_params["workload.num_requests"] = str(num_requests)
    at.run()
    assert not at.exception
    return at, " ".join(w.value for w in at.warning)


def test_a_run_the_servers_budget_stopped_says_what_its_figures_cover(monkeypatch):
    # a review: lesson 14 under prefix_affinity, stopped by the budget at 55-98 s of its 183 s, headed 2,732 tok/s
    # against a finished run's 1,191 (its busy first part alone), and nothing said its figures were of a part
    at, warned = stopped_page(monkeypatch, 347, max_ticks=1500)
    finished = next(m for m in at.metric if m.label == "Finished").value  # ("263 / 347")
    done = int(finished.split(" / ")[0].replace(",", ""))
    assert "the server's budget of 1,500 ticks per run" in warned, warned
    span = warned.split("The figures below cover its first ")[1].split(" s of simulated time")[0]
    assert 0 < float(span) < 40 and f"and {done:,} of its 347 requests, so they do not compare with a finished run's" in warned, warned
    # (a tick limit stops the run on the same tick anywhere: nothing is said of the server's load)
    assert "how busy the server is" not in warned and any("sees this run" in c.value for c in at.caption)


def test_a_run_the_servers_time_budget_stopped_says_a_link_may_get_further(monkeypatch):
    # a review: a link stopped at 13,533 of 20,000 requests by the server's time budget finished a few minutes later,
    # with other figures, and the Share box said "Whoever opens it sees this run"
    at, warned = stopped_page(monkeypatch, 2347, max_wall_s=0.05)
    assert "s of server time" in warned and "depends on how busy the server is" in warned, warned
    shared = " ".join(c.value for c in at.caption)
    assert "whoever opens the link runs it again, and may get further" in shared and "sees this run" not in shared


def test_a_run_whose_arrivals_outlast_the_time_limit_is_not_called_overloaded(monkeypatch):
    # 200,000 requests at 8 req/s stop at the 3,600 s limit with 171,016 still to arrive and 23 in flight: the page said
    # "The server cannot keep up with this load: lower the arrival rate" and "14% meet SLOs" of a server meeting them.
    # (The run takes ~2 s of the server's 5 s per run here; beside a busy CI, at 4 s, the budget stopped it first and the
    # page rightly said so: what is tested is the time limit's message, so the wall-clock budget is the test's, 120 s.)
    run_in_process_with_budget(monkeypatch, max_wall_s=120.0)
    at = AppTest.from_file(APP, default_timeout=120)
    at.query_params["workload.num_requests"] = "200000"
    at.run()
    assert not at.exception
    warned = " ".join(w.value for w in at.warning)
    assert "had not arrived yet" in warned and "cannot keep up" not in warned, warned
    goodput = next(m for m in at.metric if m.label == "Goodput")
    # (whole run: beside the steady line's goodput; a few of the ~29,000 finished miss, which "100%" rounded away)
    assert goodput.delta == "99.9% meet SLOs · whole run", goodput.delta
    # an overloaded one still hears that it is
    over = AppTest.from_file(APP, default_timeout=120)
    over.query_params["workload.arrival.rate_per_s"] = "200"
    over.query_params["limits.max_sim_time_s"] = "20"
    over.run()
    assert "cannot keep up" in " ".join(w.value for w in over.warning)


def test_simulate_says_when_vllm_would_refuse_the_configuration():
    # chat-l4-llama8b at the model's 131,072 tokens of context, 70,000 of KV (the preset caps it at 32k since session
    # 56); vLLM would not start, the page says so under the headline (as the CLI's NOTE line) and still shows the run
    at = AppTest.from_file(APP, default_timeout=120)
    at.query_params["preset"] = "chat-l4-llama8b"
    at.query_params["model.max_model_len"] = "131072"
    at.run()
    assert not at.exception and not at.error
    shown = [c.value for c in at.caption if "would refuse to start" in c.value]
    assert len(shown) == 1 and "131,072" in shown[0]
    default = AppTest.from_file(APP, default_timeout=120).run()
    assert not [c.value for c in default.caption if "would refuse to start" in c.value]
    capped = AppTest.from_file(APP, default_timeout=120)
    capped.query_params["preset"] = "chat-l4-llama8b"
    assert not [c.value for c in capped.run().caption if "would refuse to start" in c.value]


def test_the_requests_table_opens_on_columns_a_phone_shows_and_keeps_every_column_one_toggle_away():
    # At 390 px the requests table's 17 columns scrolled sideways with request_id, arrival_s, prompt_tokens and
    # output_tokens in view and TTFT 0.0419 (s, four places) out of it. It opens on six narrow columns, latencies in
    # ms; "All columns" shows every column of the CSV (a deployment's instance and KV transfer too), none dropped.
    import json

    at = app(preset="cluster-dynamo-llama70b-fp8-8xh100-3p1d", **{"workload.num_requests": "60"})
    at.session_state["ui.tab"] = "Requests"
    at.run()
    assert not at.exception
    table = next(d for d in at.dataframe if "request_id" in d.value.columns)
    assert list(table.value.columns) == ["request_id", "ttft_ms", "tpot_ms", "e2e_s", "prompt_tokens", "output_tokens"]
    columns = json.loads(table.proto.columns)
    assert columns["request_id"]["pinned"] is True and columns["ttft_ms"]["label"] == "TTFT ms"
    assert sum(c.get("width", 0) for c in columns.values()) <= 340  # (a phone's page is ~358 px; test_browser measures it)
    from app.components import runner

    frame = runner.frames(runner.run(at.session_state[CFG_KEY]).result)["requests"]
    assert table.value["ttft_ms"].tolist() == pytest.approx((frame["ttft_s"] * 1e3).tolist(), nan_ok=True)
    at.toggle(key="ui.requests_all_columns").set_value(True).run()
    full = next(d for d in at.dataframe if "request_id" in d.value.columns)
    shown = [c.removesuffix("_ms") + "_s" if c.endswith("_ms") else c for c in full.value.columns]
    assert sorted(shown) == sorted(frame.columns) and len(shown) == len(set(shown)) == 22
    assert list(full.value.columns)[:7] == ["request_id", "ttft_ms", "tpot_ms", "e2e_s", "prompt_tokens", "output_tokens", "status"]
    assert full.value["kv_transfer_ms"].tolist() == pytest.approx((frame["kv_transfer_s"] * 1e3).tolist(), nan_ok=True)
    assert all(c.get("help") for name, c in json.loads(full.proto.columns).items() if name != "_index")  # each short header says what it is


def test_every_quantity_in_the_requests_table_says_its_unit():
    # The prompt and output columns read "prompt" and "output" (and All columns' "emitted"), 1,024 of what not said,
    # beside "TTFT ms", "E2E s" and "recomputed tok". A request's id and priority are labels; pre-emptions a count.
    import json

    at = app(preset="cluster-dynamo-llama70b-fp8-8xh100-3p1d", **{"workload.num_requests": "60"})
    at.session_state["ui.tab"] = "Requests"
    at.session_state["ui.requests_all_columns"] = True
    at.run()
    assert not at.exception
    table = next(d for d in at.dataframe if "request_id" in d.value.columns)
    columns = json.loads(table.proto.columns)
    numeric = {name: c["label"] for name, c in columns.items() if c.get("type_config", {}).get("format") is not None}
    assert {"prompt_tokens", "output_tokens", "num_emitted", "kv_transfer_bytes"} <= set(numeric), numeric
    unitless = {name: label for name, label in numeric.items()
                if name not in ("request_id", "priority", "num_preemptions") and label.split()[-1] not in ("ms", "s", "tok", "bytes")}  # fmt: skip
    assert not unitless, unitless
    # (in and out, the pricing words, as Plan's "$/M out tok": "prompt tok" needs ~78 px, a phone's compact view has 58)
    assert numeric["prompt_tokens"] == "in tok" and numeric["output_tokens"] == "out tok"


def test_a_deployments_instance_table_opens_on_the_columns_a_phone_shows():
    # 3P1D at 390 px: the instance table's eleven columns (849 px) scrolled sideways with busy, KV peak, TTFT and TPOT
    # out of view. It opens on the instance and those four, the ms in the cells; "All columns" (the requests table's
    # toggle, above both) brings back requests, prompt tokens, ticks, GPUs and pre-emptions. The data is the same.
    import json

    at, table = instance_table()
    assert list(table.proto.column_order) == ["instance", "busy", "kv_peak", "ttft_p50_ms", "tpot_p50_ms"]
    columns = json.loads(table.proto.columns)
    assert sum(columns[c]["width"] for c in table.proto.column_order) <= 340  # (a phone's page is ~358; test_browser)
    assert columns["ttft_p50_ms"]["label"] == "TTFT p50" and columns["ttft_p50_ms"]["type_config"]["format"].endswith(" ms")
    assert "requests" in table.value.columns and any("All columns: the requests routed to it" in c.value for c in at.caption)
    # a heading between the two tables (on a touch screen the second table's toolbar covered the first one's last row)
    assert any(c.value.startswith("Per request: one row each") for c in at.caption)
    at.toggle(key="ui.requests_all_columns").set_value(True).run()
    full = next(d for d in at.dataframe if "instance" in d.value.columns)
    assert list(full.proto.column_order) == [] and json.loads(full.proto.columns)["ttft_p50_ms"]["label"] == "TTFT p50 (ms)"
    assert full.value.equals(table.value)
    # (the instance pinned while the numbers scroll, as Plan's and Sweep's tables pin theirs: one helper draws all three)
    assert json.loads(full.proto.columns)["instance"]["pinned"] is True and not columns["instance"].get("pinned")


def test_the_roofline_caption_names_the_mixed_ticks_that_reach_the_ridge():
    # The caption said "Prefill ticks sit right of the ridge, decode ticks left": on the default (vLLM V1) run the
    # dots at and past the ridge are purple mixed ticks (prefill chunks riding with decodes), the orange prefill ones
    # one or two; a student looked for orange dots on the right and found none.
    import numpy as np

    from app.components import runner
    from sim_core.types import Phase

    at = app(preset="chat-h100-llama8b")
    at.session_state["ui.tab"] = "Roofline"
    at.run()
    said = " ".join(c.value for c in at.caption)
    assert "Prefill ticks sit right of the ridge" not in said and "(prefill and mixed ticks)" in said, said
    tl = runner.run(at.session_state[CFG_KEY]).result.timeline
    bound = tl.is_compute_bound.astype(bool)
    assert np.count_nonzero(bound & (tl.phase == Phase.MIXED)) > 10 * np.count_nonzero(bound & (tl.phase == Phase.PREFILL))


def test_the_pages_say_how_to_reach_a_hover_on_a_phone():
    # A touch screen has no pointer to rest: the Glossary said "Hover the (?)", and the timeline's caption "Rest the
    # pointer on a bar" for the plain view, whose hovers are title tooltips a phone never shows
    glossary = open_page(PAGES[6])
    assert any("Hover or tap the (?)" in c.value for c in glossary.caption)
    at = app(preset="chat-h100-llama8b").run()
    said = " ".join(c.value for c in at.caption)
    assert "on a phone: turn on Zoom with the mouse, then tap" in said, said
    at.toggle(key="ui.timeline_plotly").set_value(True).run()
    assert "on a phone" not in " ".join(c.value for c in at.caption)  # (the Plotly view: a tap shows the hover)


def _count_whole_config_work(monkeypatch) -> dict[str, int]:
    """Calls that serialise or validate a whole SimConfig in this process (a worker's run is another process)."""
    from pydantic import BaseModel

    from sim_core import SimConfig

    calls = {"model_dump": 0, "model_validate": 0}

    def dump(self, *args, **kwargs):
        calls["model_dump"] += 1
        return BaseModel.model_dump(self, *args, **kwargs)

    def validate(cls, *args, **kwargs):
        calls["model_validate"] += 1
        return BaseModel.model_validate.__func__(cls, *args, **kwargs)

    monkeypatch.setattr(SimConfig, "model_dump", dump)
    monkeypatch.setattr(SimConfig, "model_validate", classmethod(validate))
    return calls



def _with_uploaded_trace(n: int = 300):
    """(the app after uploading a config with an n-request trace, that config)."""
    from tests.conftest import trace_config

    cfg = trace_config([64 + i % 50 for i in range(n)], [8] * n, [0.05 * i for i in range(n)], seed=3)
    at = app(open_sections=False).run()
    _uploader(at, "w.upload_config").set_value(("big.json", cfg.model_dump_json().encode(), "application/json"))
    return at.run(), cfg

def test_a_rerun_that_changes_no_knob_neither_serialises_nor_validates_the_config():
    # audit 35: with an uploaded 100,000-request trace every rerun (a timeline slider, a tab) serialised the whole config
    # several times (result key, link, window keys, timeline cache keys), validated it twice (the sidebar's collect,
    # the scheduler's label) and compressed it for a link: about 10 s of the server's interpreter, which every other
    # session waits for. What is derived from a config is now derived once per config.
    at, cfg = _with_uploaded_trace()
    assert at.session_state[CFG_KEY] == cfg and not at.exception
    at.run()  # (the first rerun with a new config derives its key, link and description once)
    with pytest.MonkeyPatch.context() as mp:
        calls = _count_whole_config_work(mp)
        at.run()
        rows = next(s for s in at.slider if s.key == "ui.rows")
        rows.set_value(rows.value - 1).run()
        assert not at.exception
        assert calls == {"model_dump": 0, "model_validate": 0}
    # and a knob that changes the config still changes it, and the run
    peak = next(s for s in at.sidebar.slider if s.key == "w.hardware.peak_tflops")
    peak.set_value(peak.value + 10).run()
    assert at.session_state[CFG_KEY].hardware.peak_tflops == cfg.hardware.peak_tflops + 10
    assert at.session_state[CFG_KEY].workload.trace == cfg.workload.trace


def test_an_uploaded_config_is_parsed_validated_and_derived_in_a_worker_not_the_server():
    # audit 35 leftover: the largest legal upload (100,000 rows, 4 million block hash ids) cost ~7 s of the server's
    # interpreter on its first rerun (parse, validation, the sidebar's collect, its scheduler label, its key and link),
    # seconds every other session's page waited for. A worker checks it and derives those values; the server unpickles.
    from app.components.text import plain
    from sim_core import PresetError, config_from_json
    from tests.conftest import trace_config

    cfg = trace_config([64 + i % 50 for i in range(300)], [8] * 300, [0.05 * i for i in range(300)], seed=3)
    at = app(open_sections=False).run()
    with pytest.MonkeyPatch.context() as mp:
        calls = _count_whole_config_work(mp)
        _uploader(at, "w.upload_config").set_value(("big.json", cfg.model_dump_json().encode(), "application/json"))
        at.run()
        assert at.session_state[CFG_KEY] == cfg and not at.exception
        assert calls == {"model_dump": 0, "model_validate": 0}
        assert metric(at, "Finished").startswith("300 / 300")
    # the worker's message is the one the server gave: field, value, allowed range
    bad = b'{"scheduler": {"max_num_seqs": 0}}'
    with pytest.raises(PresetError) as err:
        config_from_json(bad, "uploaded file 'bad.json'")
    _uploader(at, "w.upload_config").set_value(("bad.json", bad, "application/json"))
    at.run()
    assert [e.value for e in at.sidebar.error] == [plain(str(err.value))] and at.session_state[CFG_KEY] == cfg


def test_an_uploaded_deployment_with_a_trace_is_not_validated_again_with_its_trace_in_the_server():
    # (the sidebar's deployment editor gives a dict, not the config's own value: it is checked against the config less
    # its trace, not by validating the whole config, trace and all, once more)
    from pydantic import BaseModel

    from sim_core import SimConfig
    from tests.conftest import trace_config

    cfg = trace_config([64 + i % 50 for i in range(300)], [8] * 300, [0.05 * i for i in range(300)], seed=3,
                       deployment={"replicas": 2, "router": "least_outstanding"})  # fmt: skip
    at = app(open_sections=False).run()
    with_trace = []

    def validate(cls, data, *args, **kwargs):
        with_trace.append(isinstance(data, dict) and (data.get("workload") or {}).get("trace") is not None)
        return BaseModel.model_validate.__func__(cls, data, *args, **kwargs)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(SimConfig, "model_validate", classmethod(validate))
        _uploader(at, "w.upload_config").set_value(("big.json", cfg.model_dump_json().encode(), "application/json"))
        at.run()
        at.run()
    assert not at.exception and at.session_state[CFG_KEY] == cfg
    assert not any(with_trace), with_trace
    replicas = at.sidebar.number_input(key="w.dep.replicas")  # (and the editor still changes the deployment)
    replicas.set_value(3).run()
    assert at.session_state[CFG_KEY].deployment.replicas == 3 and at.session_state[CFG_KEY].workload == cfg.workload


def test_an_uploaded_trace_file_is_read_in_a_worker_not_the_server():
    import importlib.util

    at = app(open_sections=False)
    at.session_state["ui.section.Workload"] = True  # (the trace's uploader)
    at.run()
    csv = b"arrival_s,prompt_tokens,output_tokens\n" + b"".join(b"%.2f,%d,8\n" % (0.05 * i, 64 + i % 50) for i in range(300))
    parsed = []
    with pytest.MonkeyPatch.context() as mp:
        calls = _count_whole_config_work(mp)
        for module in ("app.components.sidebar", "app.components.uploads"):  # (where it was read, where it is)
            real = getattr(importlib.util.find_spec(module) and importlib.import_module(module), "parse_trace", None)
            if real is not None:
                mp.setattr(f"{module}.parse_trace", lambda *a, real=real, **k: parsed.append(1) or real(*a, **k))
        _uploader(at, "w.upload_trace").set_value(("t.csv", csv, "text/csv"))
        at.run()
        assert not at.exception and at.session_state[CFG_KEY].workload.num_requests == 300
        assert calls == {"model_dump": 0, "model_validate": 0} and not parsed


def test_an_upload_whose_check_the_worker_stopped_changes_nothing_and_says_so(monkeypatch):
    from app.components import runner

    at = app(open_sections=False).run()
    before = at.session_state[CFG_KEY]
    monkeypatch.setattr(runner, "UPLOAD_CHECK_TIMEOUT_S", 0.0)
    cfg = make_config("engine-orca", seed=11)
    _uploader(at, "w.upload_config").set_value(("mine.json", cfg.model_dump_json().encode(), "application/json"))
    at.run()
    assert not at.exception and at.session_state[CFG_KEY] == before
    said = " ".join(e.value for e in at.sidebar.error)
    assert "could not be checked" in said and "Nothing was changed" in said, said


def test_an_upload_past_the_servers_upload_limit_is_refused_and_a_derived_config_is_counted(monkeypatch):
    # audit 36: a session keeps its config, and the largest legal upload holds ~150 MB as Python lists: thirty
    # sessions would hold 4.5 GB that no bound saw. The server counts the traces the sessions' configs hold
    # ([uploads] max_bytes) and refuses an upload past it; the session keeps its config.
    from app.components import runner

    at, cfg = _with_uploaded_trace()
    ledger = runner.server().uploads
    assert at.session_state[CFG_KEY] == cfg and ledger.holds(at.session_state[CFG_KEY])
    peak = next(s for s in at.sidebar.slider if s.key == "w.hardware.peak_tflops")
    peak.set_value(peak.value + 10).run()  # a config derived from the upload holds the trace's lists too: counted
    derived_cfg = at.session_state[CFG_KEY]
    assert derived_cfg.workload.trace == cfg.workload.trace and ledger.holds(derived_cfg)
    monkeypatch.setattr(ledger, "max_bytes", 1)  # (the server is full)
    other = make_config("engine-orca", seed=11)
    trace = cfg.workload.trace.model_dump()
    other = other.model_copy(update={"workload": other.workload.model_copy(update={"trace": type(cfg.workload.trace)(**trace),
                                                                                   "num_requests": 300})})
    _uploader(at, "w.upload_config").set_value(("another.json", other.model_dump_json().encode(), "application/json"))
    at.run()
    assert not at.exception and at.session_state[CFG_KEY] is derived_cfg  # nothing the user had is lost
    said = " ".join(e.value for e in at.sidebar.error)
    assert "the server setting uploads.max_bytes" in said and "your current config is unchanged" in said, said
    monkeypatch.setattr(ledger, "max_bytes", 1 << 40)
    _uploader(at, "w.upload_config").set_value(("again.json", other.model_dump_json().encode(), "application/json"))
    at.run()
    assert not at.exception and at.session_state[CFG_KEY] == other


def test_a_links_trace_is_counted_as_an_uploads_is_and_refused_past_the_servers_limit(monkeypatch):
    # audit 80: a link's cfg= may carry a trace (a 324 KB link held a 100,000-row trace, ~66 MB) that Simulate and
    # Compare kept without counting it under [uploads] max_bytes, and decoded in the server's interpreter (~1 s)
    from app.components import runner
    from tests.conftest import trace_config

    cfg = trace_config([64 + i % 50 for i in range(300)], [8] * 300, [0.05 * i for i in range(300)], seed=3)
    ledger = runner.server().uploads
    monkeypatch.setattr(ledger, "max_bytes", 1)  # (the server is full)
    at = app(open_sections=False, cfg=encode_config(cfg)).run()
    assert not at.exception and at.session_state[CFG_KEY].workload.trace is None  # the default scenario
    said = " ".join(w.value for w in at.warning)
    assert "The link's trace was not loaded" in said and "uploads.max_bytes" in said and "default scenario" in said, said
    at.switch_page("app_pages/compare.py")
    at.query_params["a_cfg"] = encode_config(cfg)
    at.query_params["b_preset"] = "engine-orca"
    at.run()
    assert not at.exception
    side_cfg, _, side_warning = at.session_state["cmp.parsed_a"][1]  # (Compare's side A, as it read the link)
    assert side_cfg.workload.trace is None and "The link's trace was not loaded" in side_warning
    monkeypatch.setattr(ledger, "max_bytes", 1 << 40)
    parsed = []  # a large config is parsed where an upload is checked (a worker, when the server has them)
    check_upload = runner.check_upload
    monkeypatch.setattr(runner, "check_upload", lambda fn, *args, what: parsed.append((fn.__name__, what)) or check_upload(fn, *args, what=what))
    at = app(open_sections=False, cfg=encode_config(cfg)).run()  # (300 rows: ~9 KB of JSON, parsed inline)
    assert not at.exception and at.session_state[CFG_KEY] == cfg and ledger.holds(at.session_state[CFG_KEY])
    assert parsed == []
    held = ledger.num_bytes
    again = app(open_sections=False, cfg=encode_config(cfg)).run()  # another session on the same link: one config, held once
    assert again.session_state[CFG_KEY] is at.session_state[CFG_KEY] and ledger.num_bytes == held
    monkeypatch.setattr(runner, "MAX_INLINE_LINK_JSON_BYTES", 1000)  # (by its JSON's size: 300 equal rows compress to little)
    at = app(open_sections=False, cfg=encode_config(cfg.model_copy(update={"seed": 4}))).run()
    assert not at.exception and at.session_state[CFG_KEY].seed == 4 and parsed == [("config_from_inflated", "link")]


@pytest.mark.parametrize("page", ["app_pages/compare.py", "app_pages/sweep.py", "app_pages/plan.py", "app_pages/learn.py",
                                  "app_pages/glossary.py", "app_pages/about.py"])  # fmt: skip
def test_every_page_keeps_presenter_mode_in_its_address_and_a_way_out(page):
    # (a review: Compare and Sweep rewrote their address without present=1, Plan, About and Glossary lost it as
    # Streamlit clears the address on the way to a page, so a reload left presenter mode; and only Simulate and Learn
    # had a way out of it: the toggle is in Simulate's sidebar)
    from app.state import PRESENTER_KEY

    at = app(open_sections=False, present="1").run()
    at.query_params.clear()  # (as Streamlit clears it on the way to another page; AppTest's switch_page keeps it)
    at.switch_page(page).run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.query_params["present"] == "1"
    at.button(key="ui.leave_presenter").click().run()
    assert not at.exception and not at.session_state[PRESENTER_KEY] and "present" not in at.query_params


def test_compare_reruns_with_an_uploaded_config_as_a_neither_serialise_nor_validate_it():
    # Compare with the session's uploaded trace as A and B on A's workload: every rerun dumped A's workload into B and
    # validated the result, and compressed both for the address bar (seconds of the server's interpreter per rerun)
    at, cfg = _with_uploaded_trace()
    at.switch_page("app_pages/compare.py")
    at.session_state["cmp.a"] = "(current settings from Simulate)"  # (compare.CURRENT: the page runs on import)
    at.run()
    at.run()  # (the first run with these setups derives B, the keys and the links once)
    assert not at.exception and at.session_state["cmp.on_workload_of"][2][0].workload == cfg.workload
    with pytest.MonkeyPatch.context() as mp:
        calls = _count_whole_config_work(mp)
        at.run()
        assert not at.exception
        assert calls == {"model_dump": 0, "model_validate": 0}
    # B's own setup still changes B
    at.selectbox(key="cmp.b").set_value("chat-h100-llama8b-vllm-v0").run()
    assert at.session_state["cmp.on_workload_of"][2][0].scheduler == load_preset("chat-h100-llama8b-vllm-v0").scheduler


def test_the_sweep_page_of_offline_arrivals_says_the_rate_knob_cannot_apply():
    # it swept the offline preset's rate as one queue at t = 0 at every point and said "capacity below 2.5 req/s
    # (even the lowest rate misses the objectives)"
    at = linked_page(PAGES[2], preset="offline-batch-h200-llama8b", sweep="rate")
    assert not at.exception
    said = " ".join(e.value for e in at.error)
    assert "workload.arrival.process = 'offline'" in said and "(Workload: Arrival process, in Simulate's sidebar)" in said, said
    assert not [m.value for m in at.markdown if "capacity" in m.value]
    at.selectbox(key="sw.knob").set_value("max_num_seqs").run()  # the other knobs sweep it
    assert not at.exception and not at.error


def linked_page(page: str, **link) -> AppTest:
    """Open a page from a link whose config is not the default (`open_page` loads the default first)."""
    at = app(**link).run()
    at.switch_page(page)
    for k, v in link.items():
        at.query_params[k] = v
    return at.run()


@pytest.mark.parametrize("field,value,box,opens_on", [
    ("workload.arrival.rate_per_s", "100000", "plan.rate", 100_000.0), ("workload.arrival.rate_per_s", "1e-06", "plan.rate", 6.4e-5),
    ("slo.ttft_s", "0.001", "plan.ttft", 0.001), ("slo.tpot_s", "0.0001", "plan.tpot", 0.1),
])  # fmt: skip
def test_the_plan_page_opens_on_any_rate_or_slo_a_link_may_hold(field, value, box, opens_on):
    # each raised StreamlitValueAboveMaxError / BelowMinError in the browser: the target rate box (0.1-100,000) opened on
    # 4x the linked rate, the SLO boxes (from 10 ms and 1 ms) on the linked SLOs. (4x 1e-6 is below the plan's lowest
    # rate, 1e-6 times the most replicas: the box opens there.)
    at = linked_page(PAGES[5], preset="chat-h100-llama8b", **{field: value})
    assert not at.exception, [e.value for e in at.exception]
    assert at.number_input(key=box).value == pytest.approx(opens_on)


def test_the_sweep_page_of_a_disaggregated_deployment_says_the_replicas_knob_cannot_apply():
    at = linked_page(PAGES[2], preset="cluster-dynamo-llama70b-fp8-8xh100-3p1d", sweep="replicas")
    assert not at.exception
    said = " ".join(e.value for e in at.error)
    assert "must be 1 with disaggregation" in said and "(Serving: replicas, in Simulate's sidebar)" in said, said
    assert not at.warning  # (not one warning per point)


def test_the_sweep_page_says_once_that_no_pool_runs_with_a_knob_both_pools_set():
    # DistServe's pools set their own TP degrees: a num_gpus sweep warned "no instance of this deployment runs with the
    # top-level hardware.num_gpus" for every point but the config's own (fuzz39)
    at = linked_page(PAGES[2], preset="cluster-distserve-opt13b-3xa100-p2d1", sweep="num_gpus")
    assert not at.exception
    said = " ".join(e.value for e in at.error)
    assert "no instance of this deployment runs with it" in said and "(Serving: disaggregated, in Simulate's sidebar)" in said, said
    assert not at.warning


def test_the_plan_pages_boxes_take_their_ranges_and_defaults_from_the_models():
    # (they restated them: rate 0.1-100,000 req/s, TTFT from 10 ms, TPOT from 1 ms, most replicas 1-64 opening on 16,
    # the P99 rule as index 2, "90 %" in a label and a help text)
    from sim_core.config import MAX_REPLICAS, SLOConfig, field_bounds
    from sim_core.planner import PlanSpec
    from sim_core.sweep import DISTSERVE_ATTAINMENT, CapacityObjective

    at = open_page("app_pages/plan.py")
    assert not at.exception
    box = at.number_input
    assert (box(key="plan.rate").min, box(key="plan.rate").max) == field_bounds(("target_rate_per_s",), PlanSpec)
    assert (box(key="plan.ttft").min, box(key="plan.ttft").max) == field_bounds(("ttft_s",), SLOConfig)
    assert (box(key="plan.tpot").min, box(key="plan.tpot").max) == tuple(b * 1e3 for b in field_bounds(("tpot_s",), SLOConfig))
    assert (box(key="plan.replicas").min, box(key="plan.replicas").max) == (1, MAX_REPLICAS)
    assert box(key="plan.replicas").value == PlanSpec.model_fields["max_replicas"].default
    rule = at.selectbox(key="plan.rule")
    assert rule.value == f"P{CapacityObjective().percentile}"
    assert f"≥ {DISTSERVE_ATTAINMENT * 100:g} % meet both" in rule.options


def test_a_plan_slo_the_config_refuses_is_named_and_nothing_is_searched(tmp_path, monkeypatch):
    monkeypatch.setenv("SIM_CORE_CACHE_DIR", str(tmp_path))
    at = open_page("app_pages/plan.py")
    at.number_input(key="plan.ttft").set_value(0.0).run()
    assert not at.exception
    said = " ".join(e.value for e in at.error)
    assert "TTFT SLO (s) = 0.0: out of range; allowed: > 0 and <= 3600" in said, said
    assert not any(b.key == "plan.go" for b in at.button)  # (no search on a config the SLOs refuse)
    # the TPOT box is in ms, and so is what it is told (it read "TPOT SLO (s: the box's ms / 1000) = 0.0 ... <= 60")
    at.number_input(key="plan.ttft").set_value(2.0).run()
    at.number_input(key="plan.tpot").set_value(0.0).run()
    said = " ".join(e.value for e in at.error)
    assert "TPOT SLO (ms) = 0: out of range; allowed: > 0 and <= 60,000 ms" in said and "tpot_s" not in said, said


def test_the_steady_window_and_attainment_rule_are_worded_from_sim_core(monkeypatch):
    # Simulate's steady-state line and Sweep's capacity caption typed out "10 %" and Sweep its own 0.9: with other
    # fractions they would have said what the summary does not do
    import sim_core.metrics as metrics

    monkeypatch.setattr(metrics, "STEADY_WARMUP_FRACTION", 0.2)
    at = app().run()
    assert not at.exception
    assert any("first 20 % and last 10 % excluded" in c.value for c in at.caption)
    at.switch_page("app_pages/sweep.py").run()
    assert any("but the first 20 % and last 10 %" in c.value for c in at.caption)


def test_a_sweep_link_under_the_memory_knobs_older_name_opens_it():
    at = open_page(PAGES[2], preset="chat-h100-llama8b", sweep="memory_gb")
    assert not at.exception and not at.warning
    assert at.selectbox(key="sw.knob").value == "memory_gib"


def test_a_one_tick_limit_says_tick_not_ticks():
    # limits.max_ticks = 1 warned "The run did not finish: stopped after 1 ticks (limits.max_ticks)"
    at = app(open_sections=False, preset="chat-h100-llama8b", **{"limits.max_ticks": "1"}).run()
    assert not at.exception
    said = " ".join(w.value for w in at.warning)
    assert "stopped after 1 tick (limits.max_ticks)" in said and "1 ticks" not in said, said


def test_a_single_request_and_a_single_tick_are_singular():
    # one request: the caption read "workload chat, 1 requests" and the timeline "1 requests alive in this window"; of
    # one output token, a run of one tick: the headline read "1 ticks · 41.4 ms" and its whole-run timeline "Requests 0–0"
    at = app(open_sections=False, preset="chat-h100-llama8b", **{"workload.num_requests": "1"}).run()
    assert not at.exception
    assert any("workload chat, 1 request, seed" in c.value for c in at.caption), [c.value for c in at.caption]
    body = next(h.proto.body for h in at.get("html") if 'data-testid="timeline-html"' in h.proto.body)
    assert ">Request 0<" in body  # (a run of few ticks opens on the whole run: timeline.opening_window)
    from app.components.timeline import window_requests_title

    assert window_requests_title(np.array([0]), 1, 0) == "1 request alive in this window"
    at = app(open_sections=False, preset="chat-h100-llama8b", **{"workload.num_requests": "1",
             "workload.output_tokens": '{"dist": "fixed", "mean": 1}'}).run()  # fmt: skip
    assert not at.exception
    finished = next(m for m in at.metric if m.label == "Finished")
    assert finished.proto.delta.startswith("1 tick · "), finished.proto.delta
    body = next(h.proto.body for h in at.get("html") if 'data-testid="timeline-html"' in h.proto.body)
    assert ">Request 0<" in body and "Requests 0–0" not in body


@pytest.mark.parametrize("preset, speculative", [("spec-decode-offline-h200-llama8b", True), ("chat-h100-llama8b", False)])
def test_the_roofline_caption_says_where_speculative_decode_ticks_sit(preset, speculative):
    # it said "decode-only ticks sit far left (memory-bound)" under lesson 13's chart, whose decode dots reach ~600
    # FLOP/byte with speculation at saturation (browser review)
    at = app(open_sections=False, preset=preset)
    at.session_state["ui.tab"] = "Roofline"
    at.run()
    assert not at.exception
    caption = next(c.value for c in at.caption if c.value.startswith("Each dot is a tick"))
    assert ("speculative decoding widens each decode to k + 1 tokens per request" in caption) == speculative, caption
    assert "decode-only ticks sit far left (memory-bound)" in caption


def test_the_headlines_third_row_fills_from_the_left():
    # speculative decoding alone: "Tokens per decode step" stood in the third of four columns, two empty ones to its left
    at = app(open_sections=False, preset="spec-decode-h100-llama8b").run()
    assert not at.exception
    cols = list(at.columns)
    first = next(i for i, c in enumerate(cols) if [m.label for m in c.metric] == ["Output throughput"])
    rows = [cols[i:i + 4] for i in range(first, first + 12, 4)]  # the headline: rows of four columns
    filled = [[bool(c.metric) for c in row] for row in rows]
    assert filled == [[True] * 4, [True] * 4, [True, False, False, False]], filled
    assert [m.label for m in rows[2][0].metric] == ["Tokens per decode step"]


ONE_TOKEN = {"preset": "chat-h100-llama8b", "workload.num_requests": "30",
             "workload.output_tokens": '{"dist": "fixed", "mean": 1, "min": 1, "max": 1}'}


def test_the_headline_says_why_one_token_outputs_have_no_tpot():
    # the TPOT box read "–" with "p99 – · ITL p99 –" under it, and the steady caption "TPOT p99 –" (the CLI: "nan ms")
    at = app(**ONE_TOKEN).run()
    assert not at.exception
    box = next(m for m in at.metric if m.label == "TPOT p50")
    assert box.value == "n/a" and "one-token outputs have no TPOT" in str(box.proto.delta), box.proto
    ttft = next(m for m in at.metric if m.label == "TTFT p50")
    assert ttft.value not in ("n/a", "–")
    said = " ".join(c.value for c in at.caption)
    assert "TPOT p99 –" not in said


def test_compare_says_why_a_sides_tpot_is_n_a():
    # Compare's TPOT and ITL rows read "–" for one-token outputs, without a why (B runs A's requests: both sides)
    at = open_page(PAGES[1], **{f"a_{k}": v for k, v in ONE_TOKEN.items()}, b_preset="engine-sglang")
    assert not at.exception
    table = at.table[0].value
    assert (table.loc["TPOT p50", ["A", "B"]] == "n/a").all() and (table.loc["ITL p99", ["A", "B"]] == "n/a").all()
    assert "n/a" not in set(table.loc["TTFT p50", ["A", "B"]])
    said = " ".join(c.value for c in at.caption)
    for side in "AB":
        assert f"{side}: TPOT, ITL n/a (one-token outputs have no TPOT; one-token outputs have no gap between tokens)." in said, said


def test_the_sweep_table_says_why_its_tpot_cells_are_empty():
    # the TPOT p99 column read "–" at every point of a sweep of one-token outputs, without a why
    at = linked_page(PAGES[2], **ONE_TOKEN, sweep="rate", start="4", stop="8", n="2")
    assert not at.exception
    rows = at.dataframe[0].value
    assert rows["TPOT p99 (ms)"].isna().all() and rows["TTFT p99 (ms)"].notna().all()
    said = [c.value for c in at.caption]
    assert "– in TPOT p99 at rate = 4, 8: one-token outputs have no TPOT." in said, said


@pytest.mark.parametrize("knob,ends,vs_header,header", [("tflops", ("500", "1000"), "TF/s", "TFLOP/s"),
                                                         ("kv_compression", ("0.5", "1"), "kept", "KV kept"),
                                                         ("replicas", ("1", "2"), "repl.", "replicas")])  # fmt: skip
def test_the_sweep_tables_knob_header_is_short_enough_head_to_head(knob, ends, vs_header, header):
    # head to head on a phone the knob's column holds 40 px of header: "TFLOP/s", "KV kept" and "replicas" were cut
    # ("TFLOP/"); one setup's column holds 52 px, where they fit whole (tests/app/test_browser.py measures both)
    import json

    link = {"preset": "chat-h100-llama8b", "workload.num_requests": "20"}
    for vs, want in (({"vs": "sarathi-serve"}, vs_header), ({}, header)):
        at = sweep_of(link, sweep=knob, start=ends[0], stop=ends[1], n="2", **vs)
        assert not at.exception
        assert json.loads(at.dataframe[0].proto.columns)[knob]["label"] == want


def test_compare_gives_steady_state_throughput_beside_the_whole_runs():
    # The default pair both keep up with their load (100 % SLO attainment each), yet goodput read 1.10x: the whole-run
    # figures divide by the makespan, so the ratio was their drain tails'. The steady-state rows say what each sustains.
    at = open_page(PAGES[1])
    assert not at.exception
    df = at.table[0].value
    steady = df.loc["Goodput, steady state"]
    whole = df.loc["Goodput"]
    # (both sustain the offered 8.49 req/s; over the makespan, drain tail included, 6.08 and 6.10 req/s since vllm-v0's
    # refit in session 74, whose ratio then happens to round alike)
    assert steady["A"] != whole["A"] and steady["B"] != whole["B"] and steady["B / A"] == "1.00×", (steady, whole)
    assert any("drain" in c.value for c in at.caption)


def test_compare_leaves_out_the_steady_rows_of_a_side_whose_run_cannot_settle():
    # the router preset at 2 replicas read "Goodput, steady state 44.25 req/s" where 6.7 req/s finished: its window
    # cannot say (Simulate does not show it); the rows read "–" and the caption gives the side's note
    at = open_page(PAGES[1], a_preset="cluster-router-4xh100-llama8b", **{"a_deployment.replicas": "2"},
                   b_preset="cluster-router-4xh100-llama8b")  # fmt: skip
    assert not at.exception
    df = at.table[0].value
    for row in ("Goodput, steady state", "Output throughput, steady state"):
        assert df.loc[row]["A"] == "–" and df.loc[row]["B / A"] == "–", df.loc[row]
    said = " ".join(c.value for c in at.caption)
    assert "A's steady-state rows: " in said and "B's steady-state rows: " in said  # (both 400-request runs too short)


def test_compare_says_when_its_two_sides_are_the_same_setup():
    # a link whose two sides both fell back to the default compared a setup with itself, every ratio 1.00x, unsaid
    at = open_page(PAGES[1], a_preset="doesnotexist", **{"b_scheduler.max_num_seqs": "0"})
    assert not at.exception
    assert any(i.value.startswith("A and B are the same setup") for i in at.info)
    assert not any(i.value.startswith("A and B are the same setup") for i in open_page(PAGES[1]).info)


def test_compare_opens_a_link_that_names_one_side():
    # ?b_preset=engine-orca alone was dropped without a word: B opened on its default, and the address was rewritten
    at = open_page(PAGES[1], b_preset="engine-orca")
    assert not at.exception
    linked = [m.value for m in at.markdown if "(from the link)" in m.value]
    assert len(linked) == 1 and "Setup B" in linked[0] and "engine-orca" in linked[0], linked
    assert at.query_params["b_preset"] == "engine-orca"  # (B as chosen: the toggle runs it on A's workload)


def test_compare_names_what_b_changes_and_keeps_its_link_readable():
    # B swapped where A recomputed: both were named "kv-pressure-a100-llama8b · vLLM V0", swap was said nowhere, and
    # the address became b_cfg=eNqNV…
    at = open_page(PAGES[1], a_preset="kv-pressure-a100-llama8b", b_preset="kv-pressure-a100-llama8b",
                   **{"b_scheduler.preemption": "swap"})
    assert not at.exception
    assert any("scheduler.preemption recompute → swap" in c.value for c in at.caption), [c.value for c in at.caption]
    assert at.query_params["b_preset"] == "kv-pressure-a100-llama8b" and at.query_params["b_scheduler.preemption"] == "swap"
    assert "b_cfg" not in at.query_params


def test_compare_says_what_a_bare_config_parameter_did():
    # ?preset=engine-orca on Compare became the session's settings, which neither side used, without a word
    at = open_page(PAGES[1], preset="engine-orca")
    assert not at.exception
    assert any("Compare reads a" in w.value and "'preset'" in w.value for w in at.warning), [w.value for w in at.warning]


def test_a_sweeps_fell_behind_note_reads_the_window_that_judged_it_and_agrees_with_the_capacity():
    # (a review: "capacity 20 req/s" sat under "at most 19.6 req/s finish over the run", the point at 21's whole run with
    # its queue's drain; in its steady window, where falling behind is judged, it completed 20.41 of 21.29 req/s)
    import re

    at = open_page(PAGES[2], preset="chat-h100-llama8b", sweep="rate", start="17", stop="21", n="5")
    assert not at.exception
    said = next(i.value for i in at.info if "arrive faster than they finish" in i.value)
    done, offered = map(float, re.search(r"\(it completed ([\d.]+) of ([\d.]+) req/s offered in its steady window\)", said).groups())
    answer = next(m.value for m in at.markdown if "capacity" in m.value)
    capacity = float(re.search(r"capacity ([\d.]+) req/s", answer).group(1))
    assert capacity <= done < offered, (said, answer)


def test_a_replica_sweep_of_a_short_run_is_not_called_overloaded_where_it_keeps_up():
    # The router preset's 400 requests arrive in ~7 s and take ~6 s each: every point's window finished fewer requests
    # than arrived, and all 7 were said to have "requests arrive faster than they finish", 8 replicas too, whose
    # requests all met the SLOs (4,000 requests: 57.6 of 59.7 req/s finish). Only the points that miss the objective
    # in their window, or whose note finds them overloaded (4 replicas: its median TTFT rose 36 ms -> 998 ms; run long
    # enough to settle it completes 52.1 of 60.3 req/s), fell behind; the answer says it comes from a run too short to
    # settle.
    at = app(preset="cluster-router-4xh100-llama8b").run()
    at.switch_page(PAGES[2])
    at.query_params["sweep"] = "replicas"
    at.run()
    assert not at.exception
    behind = [i.value for i in at.info if "arrive faster than they finish" in i.value]
    assert len(behind) == 1 and "replicas = 2, 3, 4)" in behind[0], behind
    table = at.dataframe[0].value
    assert dict(zip(table["replicas"], table["steady state"]))[4] == "no: looks overloaded", table
    said = next(m.value for m in at.markdown if "most goodput" in m.value)
    assert "too short to settle" in said, said


def test_a_knob_sweep_where_the_knob_never_binds_says_so_and_names_the_load():
    # max_num_seqs 128-512 on the default scenario at 8 req/s: three flat lines, "most goodput at 128 (the same at 320,
    # 512)", and a caption defining capacity, a figure the page does not give for this knob
    at = open_page(PAGES[2], preset="chat-h100-llama8b", sweep="max_num_seqs", start="128", stop="512", n="3")
    assert not at.exception
    said = next(m.value for m in at.markdown if "does not bind" in m.value)
    assert "every swept value serves the same" in said and "raise the arrival rate" in said, said
    captions = " ".join(c.value for c in at.caption)
    assert "at 8 req/s" in captions and "Capacity = the highest swept rate" not in captions, captions


def test_a_knob_sweep_overloaded_at_every_value_says_so_not_that_the_knob_does_not_bind():
    # kv-pressure-a100-llama8b's max_num_seqs: every point overloaded (its KV the limit), and the sentence said
    # "max_num_seqs does not bind; raise the arrival rate"
    at = linked_page(PAGES[2], preset="kv-pressure-a100-llama8b", sweep="max_num_seqs", start="64", stop="256", n="2")
    assert not at.exception
    said = next(m.value for m in at.markdown if "swept value" in m.value)
    assert "overloaded at every swept value" in said and "lower the arrival rate" in said, said
    assert "does not bind" not in said and "raise the arrival rate" not in said
    # its flat rate panels start at zero (autorange read goodput from -0.5 to 1, throughput from 644 to 645.5)
    import json

    layouts = [json.loads(c.proto.spec)["layout"] for c in at.get("plotly_chart")]
    assert [lay["yaxis"].get("rangemode") for lay in layouts[:2]] == ["tozero", "tozero"], layouts


def test_the_headline_shows_the_mean_batch_the_lessons_ask_for():
    # lessons 9 and 17 say to watch the mean batch "in the headline"; it was only on the command line's GPU line
    from sim_core import run_simulation

    at = app(preset="chat-h100-llama8b").run()
    busy = next(m for m in at.metric if m.label == "GPU busy")
    s = run_simulation(load_preset("chat-h100-llama8b")).summary
    assert f"mean batch {s.mean_batch_size:,.1f}" in busy.proto.delta, busy.proto.delta
    from sim_core.words import percent  # (the CLI's words: "prefill 60% of busy time" read as prefill work)

    assert busy.proto.delta.startswith(f"{percent(s.prefill_time_fraction)} in ticks that prefill · "), busy.proto.delta
    # 100 % busy at 8 req/s read as saturated, where Sweep finds a capacity of 18: its help says how hard the ticks work
    assert "Busy is not saturated" in busy.help and f"{s.mbu_mean:.0%} of the memory bandwidth (MBU)" in busy.help


def test_a_sweep_link_sets_its_seeds_and_keeps_them():
    # lesson 15 sends the room to "Sweep with the rate knob and 3 seeds", which no link could set
    at = open_page(PAGES[2], preset="chat-h100-llama8b", sweep="rate", start="4", stop="8", n="2", seeds="2")
    assert not at.exception and not at.warning
    assert at.number_input(key="sw.seeds").value == 2 and at.query_params["seeds"] == "2"
    bad = open_page(PAGES[2], preset="chat-h100-llama8b", sweep="rate", start="4", stop="8", n="2", seeds="9")
    assert any("seeds = 9: out of range; allowed: 1 to 5" in w.value for w in bad.warning), [w.value for w in bad.warning]
    assert bad.number_input(key="sw.seeds").value == 1


def test_compare_names_a_linked_sides_scheduler_as_simulate_does():
    # "Setup A (from the link): kv-pressure-a100-llama8b · vLLM V0" beside "A · ... custom (from vLLM V0)" and the
    # Simulate header's "scheduler custom (from vLLM V0)": one label for one scheduler
    from app.components.sidebar import scheduler_label

    at = open_page(PAGES[1], a_preset="kv-pressure-a100-llama8b", b_preset="chat-h100-llama8b")
    assert not at.exception
    label = scheduler_label(load_preset("kv-pressure-a100-llama8b"))
    linked = next(m.value for m in at.markdown if m.value.startswith("**Setup A** (from the link)"))
    assert f"· {label} ·" in linked.replace("\\", ""), (label, linked)


def test_the_sidebar_names_the_whole_preset_above_its_description():
    # a review: the box cut "cluster-dynamo-llama70b-fp8-8xh100-3p1d" to "cluster-dynamo-llama70b-fp", and the end is
    # what tells the pair apart (-3p1d, -colocated)
    from sim_core.presets import describe_preset

    name = "cluster-dynamo-llama70b-fp8-8xh100-3p1d"
    at = app(preset=name).run()
    assert not at.exception
    said = [c.value for c in at.sidebar.caption if c.value.startswith(name)]
    assert len(said) == 1 and describe_preset("scenarios", name)[:40] in said[0].replace("\\", ""), said


def test_learn_in_presenter_mode_has_its_way_out_and_keeps_instructor_text_off_the_screen():
    # a review: /learn?present=1 had no way out (the toggle is Simulate's sidebar) and projected the instructors' foot
    # ("add ?workshop=1 ... &reveal=1 to reveal them")
    at = open_page(PAGES[3], lesson="prefill-first-stalls", present="1")
    assert not at.exception
    assert not any("reveal them" in c.value for c in at.caption)
    at.button(key="ui.leave_presenter").click().run()
    assert not at.exception and not at.session_state["ui.presenter"]
    assert any("reveal them" in c.value for c in at.caption)  # (out of presenter mode: the foot for instructors again)
    assert not [b for b in at.button if b.key == "ui.leave_presenter"]


def test_a_sweeps_capacity_names_the_next_rate_and_rows_past_the_knee_say_they_are_whole_runs():
    # "capacity 18 req/s" read as exact on a grid of 4 req/s; the compact table's rows past the knee (no "steady
    # state" column there) read as steady figures
    at = open_page(PAGES[2], preset="chat-h100-llama8b", sweep="rate")
    assert not at.exception
    said = " ".join(m.value for m in at.markdown if "capacity" in m.value)
    assert "; the next rate swept, " in said and "req/s, misses the objectives" in said
    captions = " ".join(c.value for c in at.caption)
    assert "Rows with no steady state (rate = " in captions and "show their whole runs' figures" in captions
    # a swept rate, said as the CLI's sweep says it; head to head, two capacities in one gap are said to be so (vLLM V1's
    # 19.98 and SGLang's 18.42 req/s both read "capacity 18 req/s" on this grid, a review)
    assert "A capacity here is a rate swept" in captions and "bisects it to within 1%" in captions
    assert "between the same two rates swept" not in captions
    both = open_page(PAGES[2], preset="chat-h100-llama8b", sweep="rate", vs="sglang")
    said = " ".join(m.value for m in both.markdown if "capacity" in m.value)
    assert said.count("capacity 18 req/s;") == 2, said
    assert "falls between the same two rates swept: narrow From and To" in " ".join(c.value for c in both.caption)


def test_sweep_keeps_its_range_across_a_visit_to_another_page():
    # a review: Streamlit clears the address and the page's widgets on the way to another page, and a sweep of 50-65
    # req/s in 4 points came back as the default range; with the settings changed it takes the new defaults
    at = open_page(PAGES[2], preset="chat-h100-llama8b", sweep="rate", start="4", stop="10", n="2")
    assert not at.exception and at.number_input(key="sw.start.rate").value == 4
    at.switch_page(PAGES[0])
    at.query_params.clear()
    at.run()
    at.switch_page(PAGES[2])
    at.query_params.clear()
    at.run()
    assert not at.exception
    assert (at.number_input(key="sw.start.rate").value, at.number_input(key="sw.stop.rate").value, at.number_input(key="sw.n").value) == (4, 10, 2)
    assert at.query_params["start"] == "4" and at.query_params["n"] == "2"
    at.switch_page(PAGES[0])  # the settings changed meanwhile: the page's own defaults for them
    at.query_params.clear()
    at.run()
    at.number_input(key="w.seed").set_value(3).run()
    at.switch_page(PAGES[2])
    at.query_params.clear()
    at.run()
    assert not at.exception and at.number_input(key="sw.n").value != 2


def test_compare_runs_both_sides_long_enough_to_settle_when_asked():
    # at 18 req/s both sides' 300 requests are too short: the steady rows read "–" and the note said "Run about 1,000
    # requests or more" on a page with no way to; the toggle runs the Sweep page's steady-state length at each side's rate
    from sim_core.sweep import steady_run_length

    at = open_page(PAGES[1], a_preset="chat-h100-llama8b-vllm-v0", b_preset="chat-h100-llama8b",
                   **{"a_workload.arrival.rate_per_s": "18", "b_workload.arrival.rate_per_s": "18"})  # fmt: skip
    assert not at.exception
    assert at.table[0].value.loc["Goodput, steady state"]["A"] == "–"
    assert "Switch on “Steady-state run length” above" in " ".join(c.value for c in at.caption)
    # which rows are whole runs (a review: TTFT p99 201 ms beside Plan's 202 ms for the same row, no word of which window)
    assert "Every row but the two steady-state ones is over the whole run" in " ".join(c.value for c in at.caption)
    at.toggle(key="cmp.steady").set_value(True).run()
    assert not at.exception
    row = at.table[0].value.loc["Goodput, steady state"]
    assert row["A"] != "–" and row["B"] != "–", row
    n = steady_run_length(at.session_state["cmp.steady_a"][0], 18.0)
    assert at.query_params["a_workload.num_requests"] == str(n) and n > 1_000  # (the link keeps the count)
    assert "Switch on" not in " ".join(c.value for c in at.caption)


def test_the_plan_rate_box_says_it_opens_at_a_multiple_of_the_current_rate():
    # it opened at 32 req/s for the default 8 with no word of why
    at = open_page(PAGES[5])
    assert not at.exception
    box = at.number_input(key="plan.rate")
    assert box.value == 32.0 and "opens at 4× the current settings' 8 req/s" in box.help, box.help


def test_a_sweep_link_whose_range_cannot_be_used_opens_on_the_same_range_as_no_link():
    # ?sweep=rate&start=-5&stop=1e9 fell back to 2-16 req/s, short of the capacity, where the page with no range in its
    # link sweeps 2-30: the fallback did not read the saturation rate the default reads
    plain_link = open_page(PAGES[2], preset="chat-h100-llama8b", sweep="rate")
    bad = open_page(PAGES[2], preset="chat-h100-llama8b", sweep="rate", start="-5", stop="1e9")
    assert not bad.exception and any("cannot be used" in w.value for w in bad.warning)
    for key in ("sw.start.rate", "sw.stop.rate"):
        assert bad.number_input(key=key).value == plain_link.number_input(key=key).value


def test_the_preemptions_help_says_smart_preemptions_suspensions_are_not_counted():
    # engine-article-smart-preemption read "Pre-emptions 0" where its suspensions had lifted TTFT p99 from 0.42 to 1.8 s
    at = app(preset="engine-article-smart-preemption").run()
    pre = next(m for m in at.metric if m.label == "Pre-emptions")
    assert pre.value == "0" and "suspended prefills (article §5.3) keep their KV and are not counted" in pre.help
    plain_run = next(m for m in app(preset="chat-h100-llama8b").run().metric if m.label == "Pre-emptions")
    assert "evicted from the KV cache" in plain_run.help and "suspended" not in plain_run.help


def test_the_goodput_help_says_an_offline_jobs_ttfts_are_its_queue():
    # offline-batch-h200-llama8b read "34% meet SLOs" with nothing saying that every request was queued at t = 0
    help_of = lambda preset: next(m for m in app(preset=preset).run().metric if m.label == "Goodput").help  # noqa: E731
    assert "Offline arrivals queue every request at t = 0" in help_of("offline-batch-h200-llama8b")
    assert "Offline" not in help_of("chat-h100-llama8b")


def test_a_long_preset_description_shows_its_lead_and_the_rest_behind_an_expander():
    # the DistServe pair's 1,400-1,700 characters of artifact paths and commit ids filled the sidebar (a review)
    from sim_core.presets import describe_preset

    at = app(preset="cluster-distserve-opt13b-3xa100-p2d1").run()
    lead = [c.value for c in at.sidebar.caption if c.value.startswith("cluster-distserve-opt13b-3xa100-p2d1: ")]
    assert len(lead) == 1 and "DistServe reports 2.0-3.41x the goodput per GPU" in lead[0] and "20a1633" not in lead[0]
    more = [e for e in at.sidebar.expander if e.label == "More about this preset"]
    assert len(more) == 1 and any("20a1633" in c.value for c in more[0].caption)
    assert len(describe_preset("scenarios", "chat-h100-llama8b")) < 600  # a short one: whole, no expander
    assert not [e for e in app(preset="chat-h100-llama8b").run().sidebar.expander if e.label == "More about this preset"]


def test_a_run_that_fails_keeps_the_last_result_below_its_error():
    # a deployment over the server's memory budget replaced the result on the page with "Nothing to show" alone; the
    # brief: nothing the user had is lost. An out-of-memory config stands for any failed run here.
    at = app(preset="prefill-oom-l4-llama8b").run()
    before = {m.label: m.value for m in at.metric}
    at.select_slider(key="w.scheduler.max_num_batched_tokens").set_value(65536).run()
    assert not at.exception
    assert len(at.error) == 1 and at.error[0].value.startswith("Out of memory")
    kept = [i.value for i in at.info if i.value.startswith("Your settings are kept in the sidebar. Below is the last run")]
    assert len(kept) == 1 and "Llama-3.1-8B on 1× L4" in kept[0], [i.value for i in at.info]
    assert {m.label: m.value for m in at.metric} == before  # the last run's figures, not a blank page
    assert at.select_slider(key="w.scheduler.max_num_batched_tokens").value == 65536  # the user's setting kept
    fresh = app(preset="prefill-oom-l4-llama8b", **{"scheduler.max_num_batched_tokens": "65536"}).run()
    assert not fresh.metric and not [i for i in fresh.info if "last run that worked" in i.value]  # nothing to keep


def test_the_plan_page_states_the_lengths_and_precision_its_costs_rest_on(monkeypatch, tmp_path):
    # a review: "the current settings (chat traffic, Llama-3.1-8B)" gave neither the lengths nor the weights' precision
    # that the $ per million tokens depends on
    from sim_core.planner import mean_lengths

    monkeypatch.setenv("SIM_CORE_CACHE_DIR", str(tmp_path))
    at = open_page("app_pages/plan.py")
    prompt, output = mean_lengths(at.session_state[CFG_KEY])
    said = next(c.value for c in at.caption if c.value.startswith("Traffic and model"))
    assert f"prompts of {prompt:,.0f} and outputs of {output:,.0f} tokens on average; Llama-3.1-8B, BF16 weights" in said
    # (a review: its "sglang" rows ran on vLLM V1's calibration and memory rule, the current settings')
    assert "Each engine is taken whole, as choosing it in Simulate does: its scheduler, and its memory rule and" in said
    assert 100 < prompt < 5000 and 10 < output < 5000


def test_a_goodput_under_a_hundredth_shows_its_digits_not_zero():
    # a review: lesson 9's 12 ms side read "Goodput 0.00 req/s" above "0.5% meet SLOs"
    from app.components import runner
    from app.components.units import fmt_number

    at = app(preset="engine-article-dynamic-batch", **{"scheduler.dynamic_batch.target_tick_ms": "12"}).run()
    assert not at.exception
    goodput = next(m for m in at.metric if m.label == "Goodput")
    s = runner.run(at.session_state[CFG_KEY]).result.summary
    assert 0 < s.goodput_requests_per_s < 0.01 and s.slo_attainment > 0
    assert goodput.value == f"{fmt_number(s.goodput_requests_per_s, 2)} req/s" and goodput.value != "0.00 req/s"
