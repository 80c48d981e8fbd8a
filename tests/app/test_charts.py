"""Chart builders are pure functions of a SimResult, and stay small for large runs."""

import re

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as hs

from app.components import charts, timeline
from app.components.colors import PHASE_COLORS
from app.components.units import fmt_number
from sim_core import load_preset, run_simulation
from sim_core.sweep import with_value
from sim_core.types import Phase
from tests.conftest import make_config, trace_config


@pytest.fixture(scope="module")
def small():
    return run_simulation(make_config("kv-pressure-a100-llama8b", workload__num_requests=60))


@pytest.fixture(scope="module")
def large():
    return run_simulation(make_config(workload__num_requests=10_000, workload__arrival__rate_per_s=12.0))


def test_gantt_segments_cover_the_run_without_gaps(small):
    seg = timeline.gantt_segments(small)
    assert seg["ticks"].sum() == small.timeline.num_ticks
    assert np.allclose(seg["start"][1:], seg["end"][:-1])
    assert np.all(seg["phase"][1:] != seg["phase"][:-1])  # adjacent runs of one phase are merged


def test_gantt_hover_explains_a_bar(small):
    fig = timeline.timeline_figure(small)
    bars = [t for t in fig.data if t.type == "bar" and t.name in ("prefill", "decode", "mixed") and t.yaxis == "y"]
    assert bars and re.fullmatch(r"\d+ ticks? from tick \d+", str(bars[0].customdata[0][0])) and "bound" in str(bars[0].customdata[0][5])
    window = timeline.opening_window(small)
    per_tick = [t for t in timeline.timeline_figure(small, window=window).data if t.yaxis == "y" and t.name == "decode"]
    assert str(per_tick[0].customdata[0][0]).startswith("tick ")  # a readable window: one bar and one hover per tick
    assert all(t.marker.color == PHASE_COLORS[t.legendgroup] for t in fig.data if t.type == "bar")


def test_a_gantt_bar_of_one_tick_says_tick_on_hover(small):
    # a run of ticks merged into one bar read "1 ticks from tick 12" where the run was one tick long
    fig = timeline.timeline_figure(small)
    said = [str(row[0]) for t in fig.data if t.type == "bar" and t.yaxis == "y" for row in t.customdata]
    assert any(x.startswith("1 tick from tick ") for x in said) and not any(x.startswith("1 ticks") for x in said), said[:10]


def test_request_segments_follow_the_events():
    res = run_simulation(trace_config([100, 100], [5, 5], arrivals=[0.0, 2.0]))
    segs = timeline.request_segments(res, 0, 2)
    states = [s[1] for s in segs if s[0] == 1]
    assert states == ["prefill", "decode"]  # arrives to an idle server: scheduled at once
    start_decode = [s for s in segs if s[0] == 1 and s[1] == "decode"][0]
    assert start_decode[2] == res.requests.first_token_s[1] and start_decode[3] == res.requests.finish_s[1]


def test_preempted_requests_show_preempted_segments(small):
    segs = timeline.request_segments(small, 0, 60)
    assert any(s[1] == "preempted" for s in segs)


def test_large_run_figures_are_bounded(large):
    assert large.requests.arrival_s.size == 10_000
    fig = timeline.timeline_figure(large, 0, 60)
    assert timeline.count_points(fig) <= timeline.MAX_TIMELINE_POINTS
    gantt_bars = sum(len(t.x) for t in fig.data if t.type == "bar" and t.legendgroup in ("prefill", "decode", "mixed", "idle", "swap") and t.y[0] == "GPU")
    assert gantt_bars <= timeline.MAX_GANTT_BARS
    for metric in charts.METRICS:
        dist = charts.distribution_figure(large, metric)
        assert timeline.count_points(dist) <= charts.HIST_BINS + charts.CDF_POINTS + 20
    assert timeline.count_points(charts.roofline_figure(large)) <= charts.MAX_ROOFLINE_POINTS + 600


def test_binned_gantt_keeps_the_dominant_phase(large):
    seg = timeline.gantt_data(large)
    assert seg["start"].size <= timeline.MAX_GANTT_BARS
    assert set(np.unique(seg["phase"])) <= {int(p) for p in Phase}


def test_reduce_series_keeps_the_peak():
    t = np.linspace(0, 1, 100_000)
    y = np.zeros_like(t)
    y[54_321] = 7.0
    tt, yy = timeline.reduce_series(t, y, 500)
    assert tt.size <= 500 and yy.max() == 7.0


def test_distribution_marks_percentiles_and_slo(small):
    fig = charts.distribution_figure(small, charts.METRICS[0])
    names = [t.name for t in fig.data if t.name]
    assert any(n.startswith("p50") for n in names) and any(n.startswith("p99") for n in names)
    assert "objective" in charts.distribution_summary(small, charts.METRICS[0])


@pytest.fixture(scope="module")
def stalls():
    """Lesson 3's prefill-first side: ITL p99 ~164 ms, past the 100 ms TPOT objective, while every request meets it."""
    return run_simulation(make_config("chat-h100-llama8b-vllm-v0", scheduler__enable_chunked_prefill=True,
                                      scheduler__max_num_batched_tokens=512))  # fmt: skip


def test_distribution_titles_fit_a_narrow_chart_and_the_facts_wrap_beside_it(stalls):
    # At 800 px (sidebar open) the chart is ~470 px wide and Plotly cuts a long title: "ITL: every gap between tokens ·
    # 64,300 gaps · 97% within the 100 ms objecti". The facts go to a caption, which wraps; the title is the metric's name.
    for metric in charts.METRICS:
        fig = charts.distribution_figure(stalls, metric)
        assert len(fig.layout.title.text) <= 45, fig.layout.title.text
        assert "fraction ≤ x" not in (fig.layout.yaxis2.title.text or "")  # its rotated title sat on the histogram's bars
        assert any("fraction ≤ x" in a.text for a in fig.layout.annotations)  # named in the CDF panel's title instead
    assert "64,300 gaps" in charts.distribution_summary(stalls, charts.METRICS[2])


def test_the_itl_chart_names_the_tpot_objective_it_draws(stalls):
    # The ITL chart drew "SLO 100 ms" and said "97% within the 100 ms objective" while the headline said 100% meet the
    # SLOs: the 100 ms is the TPOT objective, which bounds each request's mean gap, not every gap.
    itl = charts.METRICS[2]
    assert {t.name for t in charts.distribution_figure(stalls, itl).data if t.legendgroup == "slo" and t.name} == {"TPOT SLO 100 ms"}
    said = charts.distribution_summary(stalls, itl)
    assert "of gaps within the 100 ms TPOT objective" in said and "mean" in said, said
    assert float(np.mean(stalls.requests.tpot_s <= stalls.config.slo.tpot_s)) == 1.0  # every request meets it
    compare = charts.cdf_overlay_figure({"A": stalls, "B": stalls}, itl)  # Compare's ITL panel drew "SLO 100 ms" too
    assert {t.name for t in compare.data if t.name and "SLO" in t.name} == {"TPOT SLO 100 ms"}
    own = charts.distribution_summary(stalls, charts.METRICS[1])
    assert "within the 100 ms objective" in own and "mean" not in own


def test_roofline_puts_prefill_right_of_decode(small):
    fig = charts.roofline_figure(small)
    x = {t.legendgroup: np.median(t.x) for t in fig.data if t.legendgroup in ("prefill ticks", "decode ticks")}
    assert x["prefill ticks"] > 10 * x["decode ticks"]


def test_roofline_marks_the_calibrated_knee_the_caption_names(small):
    # a review of lesson 1: on an H100 the dashed (calibrated) roof's slope lies on the datasheet's, so the knee the
    # Roofline tab's caption sends students to ("about 220 FLOP/byte: the dashed line's") could not be seen
    import math

    from sim_core.costmodel import CostModel

    cm = CostModel(small.config)
    knee = cm.gemm_flops_per_s / cm.achieved_hbm_bytes_per_s
    (mark,) = [a for a in charts.roofline_figure(small).layout.annotations if a.text.startswith("calibrated knee")]
    assert mark.text == f"calibrated knee {knee:,.0f}" and mark.showarrow
    assert (mark.x, mark.y) == pytest.approx((math.log10(knee), math.log10(cm.gemm_flops_per_s / 1e12)))


def test_roofline_names_each_kind_of_tick_with_its_count_and_draws_the_rarest_on_top():
    # the default preset's few prefill-only ticks were drawn under its ~900 mixed ones: a legend entry, no dot in sight
    from sim_core.engine import run_simulation
    from sim_core.presets import load_preset
    from sim_core.types import Phase

    res = run_simulation(load_preset("chat-h100-llama8b"))
    dots = [t for t in charts.roofline_figure(res).data if t.mode == "markers"]
    tl = res.timeline
    busy = (tl.phase != Phase.IDLE) & (tl.bytes > 0)
    counts = [int(t.name.rsplit("(", 1)[1].rstrip(")").replace(",", "")) for t in dots]
    assert counts == sorted(counts, reverse=True) and sum(counts) == busy.sum() > charts.MAX_ROOFLINE_POINTS  # the run's
    assert [t.name.split(" (")[0] for t in dots][-1] == "prefill ticks" and counts[-1] < 10  # counts, most first
    assert dots[-1].x.size == counts[-1]  # the rarest kind drawn whole, on top: a sample of 4,000 in 4,216 could drop it
    # ... and marked so that one dot among the mixed ones can be seen (on top at 0.6 opacity it still read as lost)
    assert (dots[-1].marker.size, dots[-1].marker.opacity, dots[-1].marker.line.width) == (9, 1.0, 1)
    assert (dots[0].marker.size, dots[0].marker.opacity) == (6, 0.6) and counts[0] > charts.RARE_TICKS


def test_step_figure_shows_the_batch(small):
    tick = int(small.batches.tick[0])
    fig = charts.step_figure(small, tick)
    shown = sum(len(t.y) for t in fig.data if t.name in ("prefill", "decode"))
    assert shown == int((small.batches.tick == tick).sum())


def test_step_figure_titles_fit_a_narrow_chart(small):
    # at 800 px (sidebar open) each panel is ~210 px: "KV blocks held during the tick" ran past the right edge and the
    # right panel's rotated "blocks" sat on the left panel's bars
    fig = charts.step_figure(small, int(small.batches.tick[0]))
    assert all(len(a.text) <= 20 for a in fig.layout.annotations), [a.text for a in fig.layout.annotations]
    assert not fig.layout.yaxis2.title.text


def test_step_figures_count_axes_tick_at_whole_numbers_while_counts_are_few(small):
    # a review: a request's 1-3 blocks read on an axis of 0.2, 0.4, ...; a decode-only tick's one token each likewise
    from sim_core import run_simulation
    from tests.conftest import make_config

    short = run_simulation(make_config(workload__num_requests=30, workload__prompt_tokens={"dist": "fixed", "mean": 40},
                                       workload__output_tokens={"dist": "fixed", "mean": 20}))  # (1-4 blocks a request)
    seen = set()
    for res, tick in [(small, t) for t in np.unique(small.batches.tick)[:60]] + [(short, t) for t in np.unique(short.batches.tick)]:
        b = res.batches
        m = b.tick == tick
        held, new = b.kv_blocks_held[m], b.num_new_tokens[m]
        fig = charts.step_figure(res, int(tick))
        few = held.max() <= charts.WHOLE_TICKS_UP_TO
        assert (fig.layout.yaxis2.dtick == 1) == few, (tick, held.max(), fig.layout.yaxis2.dtick)
        if new.max() <= charts.WHOLE_TICKS_UP_TO:  # (a linear axis: few tokens, none 50 times another)
            assert fig.layout.yaxis.dtick == 1, (tick, new)
            seen.add("tokens")
        seen.add(few)
    assert seen == {True, False, "tokens"}, seen  # (each case met in the run)


def test_step_figures_legend_keeps_clear_of_a_busy_ticks_request_labels(small):
    # 390 px, tick 2,000 of the default run (26 requests): the legend, placed on the plots' scale (y=-0.15), sat on the
    # request labels stood on end ("req 165"); it has a strip of its own at the figure's foot and the labels push the
    # plots up (automargin) instead
    fig = charts.step_figure(small, int(small.batches.tick[0]))
    assert fig.layout.legend.yref == "container" and fig.layout.legend.y == 0 and fig.layout.legend.yanchor == "bottom"
    assert fig.layout.xaxis.automargin is True and fig.layout.xaxis2.automargin is True


def test_cdf_overlay_has_one_curve_per_run(small):
    fig = charts.cdf_overlay_figure({"A": small, "B": small}, charts.METRICS[0])
    assert [t.name for t in fig.data if t.type == "scatter"][:2] == ["A", "B"]


def test_request_rows_are_in_request_order(small):
    fig = timeline.timeline_figure(small, 5, 10)
    assert list(fig.layout.yaxis2.categoryarray) == [f"req {i}" for i in range(5, 15)]


def test_tensor_parallel_runs_get_one_gantt_row_per_gpu():
    res = run_simulation(make_config("chat-2xh100-mixtral", workload__num_requests=60))
    fig = timeline.timeline_figure(res)
    gpu_bars = [t for t in fig.data if t.type == "bar" and str(t.y[0]).startswith("GPU")]
    rows = {y for t in gpu_bars for y in t.y}
    assert rows == {"GPU 0", "GPU 1"}
    assert sum(len(t.x) for t in gpu_bars) <= timeline.MAX_GANTT_BARS


def test_kv_panel_draws_cached_but_free_blocks_only_with_prefix_caching(small):
    assert not [t for t in timeline.timeline_figure(small).data if t.name == "KV cached, free (%)"]
    res = run_simulation(make_config(workload__num_requests=80, kv_cache__enable_prefix_caching=True,
                                     workload__shared_prefix={"num_system_prompts": 2, "share_ratio": 1.0}))  # fmt: skip
    line = [t for t in timeline.timeline_figure(res).data if t.name == "KV cached, free (%)"]
    assert line and max(line[0].y) > 0


def test_the_opening_window_is_readable_and_shows_interleaving():
    res = run_simulation(make_config("chat-h100-llama8b-vllm-v0", workload__num_requests=120))
    window = timeline.opening_window(res)
    lo, hi = timeline.tick_range(res, window)
    t0, t1 = timeline.run_span(res)
    assert window is not None and window[1] - window[0] < (t1 - t0) / 5
    assert 20 <= hi - lo <= timeline.PER_TICK_BARS  # a few pixels per tick, one bar each
    phases = res.timeline.phase[lo:hi]
    assert {int(Phase.PREFILL), int(Phase.DECODE)} <= set(phases.tolist())  # the mechanism is in view
    fig = timeline.timeline_figure(res, window=window)
    assert timeline.count_points(fig) < timeline.count_points(timeline.timeline_figure(res)) / 2
    assert list(fig.layout.xaxis.range) == list(window)


def test_the_opening_window_of_a_run_without_interleaving_shows_its_full_batch_not_its_tail():
    # a review: lesson 17's 1,024 side (an offline batch that decodes nearly throughout) opened on its last second,
    # 3 requests finishing in many short ticks, since busy ticks were counted, which outscored its one phase change in
    # the full batch; busy time is weighed now
    from sim_core.presets import config_with

    res = run_simulation(config_with(load_preset("offline-batch-h200-llama8b"), {"scheduler.max_num_seqs": 1024}))
    window = timeline.opening_window(res)
    lo, hi = timeline.tick_range(res, window)
    t0, t1 = timeline.run_span(res)
    running = res.timeline.num_running
    assert window[1] < t0 + (t1 - t0) / 2
    assert running[lo:hi].mean() > 2 * running[running > 0].mean()  # the batch near its fullest, not its tail


def test_a_decoding_request_is_stalled_while_another_prompt_prefills():
    # request 0 decodes; request 1 arrives and prefill-first runs its 2,000-token prompt alone
    res = run_simulation(trace_config([100, 2000], [40, 5], arrivals=[0.0, 0.05], base="chat-h100-llama8b-vllm-v0"))
    segs = timeline.request_segments(res, 0, 2)
    stalled = [s for s in segs if s[0] == 0 and s[1] == "stalled"]
    prefill_1 = [s for s in segs if s[0] == 1 and s[1] == "prefill"]
    assert len(stalled) == 1 and stalled[0][2:] == pytest.approx(prefill_1[0][2:])
    s0, s1 = timeline.stall_intervals(res)
    assert s0.size == 2  # request 0's own prefill tick also ran no decode (nobody was decoding yet)
    decode_first = run_simulation(trace_config([100, 2000], [40, 5], arrivals=[0.0, 0.05], base="chat-h100-llama8b"))
    assert not any(s[1] == "stalled" and s[0] == 0 for s in timeline.request_segments(decode_first, 0, 2))


def test_swap_time_is_drawn_in_the_gpu_row():
    res = run_simulation(make_config("kv-pressure-a100-llama8b", workload__num_requests=60, scheduler__preemption="swap"))
    assert (res.timeline.swap_blocks > 0).any()
    fig = timeline.timeline_figure(res)
    swap = [t for t in fig.data if t.yaxis == "y" and t.legendgroup == "swap"]
    assert swap and all("PCIe" in t.hovertemplate or t.name == "swap" for t in swap)
    swap_bar = next(t for t in swap if t.name == "swap (PCIe)")
    assert float(np.max(swap_bar.x)) > 0 and swap_bar.marker.color == PHASE_COLORS["swap"]


def test_tensor_parallel_hover_gives_the_all_reduce_time():
    res = run_simulation(make_config("chat-2xh100-mixtral", workload__num_requests=30))
    fig = timeline.timeline_figure(res, window=timeline.opening_window(res))
    bar = next(t for t in fig.data if t.yaxis == "y" and t.name == "decode")
    assert "all-reduce" in bar.hovertemplate and float(bar.customdata[0][6]) > 0


def test_latency_units_switch_to_seconds_and_itl_counts_are_on_a_log_axis():
    slow = run_simulation(make_config("engine-fastertransformer", workload__num_requests=60))
    assert np.median(slow.requests.ttft_s[slow.requests.is_finished]) >= 1.0
    fig = charts.distribution_figure(slow, charts.METRICS[0])
    assert fig.layout.xaxis.title.text == "TTFT (s)" and "ms" not in fig.layout.title.text
    fast = run_simulation(make_config(workload__num_requests=60))
    assert charts.distribution_figure(fast, charts.METRICS[1]).layout.xaxis.title.text == "TPOT (ms)"
    assert charts.distribution_figure(fast, charts.METRICS[2]).layout.yaxis.type == "log"


def test_log_axes_label_decades_only(small):
    fig = charts.roofline_figure(small)
    assert fig.layout.xaxis.type == "log" and fig.layout.xaxis.dtick == 1 and fig.layout.yaxis.dtick == 1


def test_a_log_axis_of_decades_writes_them_in_full():
    # Plotly's own decade labels: "1000" beside "10k" and "100k" (Sweep's latency panel over five decades, the roofline)
    wide = charts.log_ladder_axis([12.0, 161_607.0])
    assert wide["type"] == "log" and wide["dtick"] == 1 and wide["tickformat"] == ","  # 1,000, 10,000, 100,000
    assert charts.LOG_AXIS["tickformat"] == ","


def test_runs_a_and_b_never_share_a_colour_with_a_phase(small):
    from app.components.colors import RUN_COLORS

    assert not set(RUN_COLORS.values()) & set(PHASE_COLORS.values())
    fig = charts.cdf_overlay_figure({"A": small, "B": small}, charts.METRICS[0])
    a, b = fig.data[0], fig.data[1]
    assert a.line.color == RUN_COLORS["A"] and b.line.color == RUN_COLORS["B"] and a.line.dash != b.line.dash


def test_a_log_axis_under_three_decades_is_labelled_in_full_at_1_2_5():
    # Plotly labels 12-260 ms as "100" with bare digits "2", "3" beside it (meaning 200, 300): unreadable
    axis = charts.log_ladder_axis([12.0, 30.0, 131.0, 260.0, None, float("nan")])
    assert axis["type"] == "log" and axis["ticktext"] == ["10", "20", "50", "100", "200", "500"]
    assert axis["tickvals"] == pytest.approx([10, 20, 50, 100, 200, 500])
    assert charts.log_ladder_axis([12.0, 28.0])["ticktext"] == ["10", "20", "30", "40", "50"]  # narrow: every digit
    assert charts.log_ladder_axis([180.0, 100_000.0])["ticktext"] == ["100", "300", "1,000", "3,000", "10,000", "30,000",
                                                                      "100,000"]  # three to four decades: 1-3
    assert charts.log_ladder_axis([0.05, 40_000.0]) == charts.LOG_AXIS  # wide: decades only
    assert charts.log_ladder_axis([]) == charts.LOG_AXIS


def test_a_deployment_on_two_gpu_kinds_draws_each_pools_roof():
    # Splitwise-HA decodes on A100s under H100 prefill: against the H100 roof alone its decode ticks looked far
    # below what the hardware allows
    from sim_core import load_preset

    split = run_simulation(load_preset("cluster-splitwise-llama70b-4xdgx-ha-3p1d"))
    names = [t.name for t in charts.roofline_figure(split).data]
    assert "decode pool roof (A100 80GB SXM): 312 TFLOP/s, 2,039 GB/s" in names
    same = run_simulation(load_preset("cluster-distserve-opt13b-3xa100-p2d1"))  # one GPU kind (TP2 and TP1): one roof
    assert not [n for n in (t.name for t in charts.roofline_figure(same).data) if "pool roof" in n]


def test_a_pools_gpu_name_from_a_link_is_text_in_the_roofline_legend():
    # (review) the decode pool's hardware name (free text in a link) went into the legend unescaped: Plotly renders
    # <a href> and <b> there
    from sim_core import config_from_dict

    hostile = '<a href="https://example.com">A100</a> <b>x</b>'
    cfg = config_from_dict({"workload": {"num_requests": 6},
                            "deployment": {"disaggregation": {"decode": {"hardware": {"name": hostile, "peak_tflops": 312.0}}}}})  # fmt: skip
    names = [t.name for t in charts.roofline_figure(run_simulation(cfg)).data]
    pool = [n for n in names if n.startswith("decode pool roof")]
    assert pool and "&lt;a href" in pool[0] and "<a" not in pool[0] and "<b>" not in pool[0]


def test_the_kv_line_shows_no_blocks_in_use_while_the_server_idles():
    # (review 25e: rows that counted the blocks in use during their tick, drawn as steps from each tick's end as the
    # KV panel draws them, showed a finished request's blocks over the idle gap after it; rows are after the tick)
    # Two requests 10 s apart: between the first one's last tick (0.048 s) and the second's arrival nothing holds a block
    cfg = make_config(workload__num_requests=2, workload__arrival__process="constant", workload__arrival__rate_per_s=0.1,
                      workload__prompt_tokens={"dist": "fixed", "mean": 1024, "min": 1024, "max": 1024},
                      workload__output_tokens={"dist": "fixed", "mean": 3, "min": 3, "max": 3})  # fmt: skip
    res = run_simulation(cfg)
    tl = res.timeline
    idle = np.flatnonzero(tl.phase == Phase.IDLE)
    assert idle.size == 1 and tl.duration_s[idle[0]] > 9  # (the set-up: one idle gap of ~10 s)
    kv = timeline.line_series(res, (0.0, float(tl.t_end_s[-1])))[0]
    assert kv.name == "KV in use (%)"
    mid_gap = float(tl.t_start_s[idle[0]] + tl.duration_s[idle[0]] / 2)
    shown = kv.y[np.searchsorted(kv.t, mid_gap, side="right") - 1]  # a step line: y[i] from t[i] until t[i + 1]
    assert shown == 0.0


@pytest.mark.parametrize("rows", [5, 30, 60])
def test_every_request_row_of_the_plotly_timeline_gets_room_for_its_label(rows):
    # Review 26: at 30 rows Plotly labelled every other request row (about 9 px per row at 720 px; a category axis
    # shows every label only with ~1.2 x the tick font per row). The figure grows by what the request panel lacks.
    res = run_simulation(make_config(workload__num_requests=200, workload__arrival__rate_per_s=50.0))
    fig = timeline.timeline_figure(res, 0, rows)
    assert len(fig.layout.yaxis2.categoryarray) == rows
    font = fig.layout.yaxis2.tickfont.size or 12
    plot_px = fig.layout.height - fig.layout.margin.t - fig.layout.margin.b
    dom = fig.layout.yaxis2.domain
    assert plot_px * (dom[1] - dom[0]) / rows >= round(1.2 * font)
    # one tick per row, on a set range: markers on the rows (KV transfers) padded an autorange by their size, and
    # Plotly then labelled every other row again (seen in the browser at 1,400 px)
    assert tuple(fig.layout.yaxis2.range) == (rows - 0.5, -0.5) and fig.layout.yaxis2.nticks == rows
    gpu, kv = fig.layout.yaxis.domain, fig.layout.yaxis3.domain  # the other panels keep their pixels
    base = timeline.timeline_figure(res, 0, 5)
    b_plot = base.layout.height - 80
    assert plot_px * (kv[1] - kv[0]) == pytest.approx(b_plot * (base.layout.yaxis3.domain[1] - base.layout.yaxis3.domain[0]))
    assert plot_px * (gpu[1] - gpu[0]) == pytest.approx(b_plot * (base.layout.yaxis.domain[1] - base.layout.yaxis.domain[0]))
    assert fig.layout.height == 720 if rows == 5 else fig.layout.height > 720


@pytest.mark.parametrize("deployment", [None, {"disaggregation": {"prefill": {"replicas": 3}, "decode": {"replicas": 1}}}])
def test_a_crowded_window_shows_the_requests_arriving_in_it_first(deployment):
    # more requests are alive than the rows hold: the rows go to those arriving in the window (their prefill and
    # hand-off are in view), then to the latest of those still running from before it, not to the oldest decodes
    cfg = make_config(workload__num_requests=400, workload__arrival__rate_per_s=12.0,
                      workload__output_tokens={"dist": "fixed", "mean": 300, "min": 300, "max": 300})  # fmt: skip
    if deployment is not None:
        cfg = with_value(cfg, "deployment", deployment)
    res = run_simulation(cfg)
    req, window = res.requests, (10.0, 12.0)
    alive = np.flatnonzero((req.arrival_s < window[1]) & (np.nan_to_num(req.finish_s, nan=np.inf) > window[0]))
    arriving = alive[req.arrival_s[alive] >= window[0]]
    assert alive.size > 30 and 5 < arriving.size < 30  # (the case in question: crowded, a few arrive in it)
    ids = timeline.requests_in_window(res, window, 0, 30)
    earlier = np.setdiff1d(alive, arriving)
    assert ids.tolist() == sorted(arriving.tolist() + earlier[-(30 - arriving.size):].tolist())
    assert timeline.requests_in_window(res, window, 30, 30).tolist() == earlier[-(60 - arriving.size):-(30 - arriving.size)].tolist()
    assert timeline.requests_in_window(res, window, 0, 500).tolist() == alive.tolist()  # room for all: all, in order


def test_a_static_batch_window_shows_the_batch_the_gpu_runs_before_its_queue():
    # lesson 2's FasterTransformer side: the window opened with 71 requests alive, 30 rows, all of them requests
    # queued behind the static batch (grey throughout) while the GPU row decoded the batch, which no row showed
    res = run_simulation(make_config("engine-fastertransformer"))
    req = res.requests
    window = timeline.opening_window(res)
    end = np.nan_to_num(req.finish_s, nan=np.inf)
    alive = np.flatnonzero((req.arrival_s < window[1]) & (end > window[0]))
    served = alive[req.first_scheduled_s[alive] < window[1]]
    assert alive.size > 30 and 0 < served.size < 30  # (the case in question: a crowded queue behind a running batch)
    ids = timeline.requests_in_window(res, window, 0, 30)
    assert set(served.tolist()) <= set(ids.tolist())
    assert ids.tolist() == sorted(ids.tolist(), key=lambda r: (req.arrival_s[r], r))  # (rows stay in arrival order)


@given(hs.floats(-1e9, 1e9, allow_nan=False))
def test_numbers_for_people_never_use_exponents_and_keep_three_significant_digits(x):
    text = fmt_number(x)
    assert text != "-0"
    assert "e" not in text and "E" not in text
    back = float(text.replace(",", ""))
    assert back == pytest.approx(x, rel=5e-3, abs=5e-7 if abs(x) < 1e-3 else 0)  # (below 10^-3: decimals run out)


@given(hs.floats(1e-4, 1e5, allow_nan=False))
def test_figures_read_side_by_side_keep_their_trailing_zeros(x):
    # Compare's table read "1.9 s" beside "2.11 s": with strip_zeros=False a decimal keeps three significant digits
    from app.components.units import fmt_seconds

    text = fmt_number(x, strip_zeros=False)
    assert float(text.replace(",", "")) == float(fmt_number(x).replace(",", ""))  # the same figure
    if "." in text:
        assert len(text.replace(",", "").replace(".", "").lstrip("0")) == 3, text
    assert fmt_seconds(1.9, strip_zeros=False) == "1.90 s" and fmt_seconds(1.9) == "1.9 s"


def test_numbers_for_people_say_what_is_not_a_number():
    # fmt_number(nan) raised ValueError (int(floor(log10(nan)))) and -0.0 printed as "-0"
    assert [fmt_number(v) for v in (float("nan"), float("inf"), -float("inf"), -0.0)] == ["–", "∞", "−∞", "0"]


def test_a_percentile_over_a_thousand_ms_is_labelled_in_plain_digits():
    # the TTFT legend of the Dynamo 3P1D preset read "p99 1.14e+03 ms" (Python's '.3g'); hovers used d3's '.3g' too
    res = run_simulation(trace_config([64] * 40 + [30000] * 3, [4] * 43, arrivals=[0.01 * i for i in range(43)]))
    ttft = res.requests.ttft_s
    assert np.median(ttft) < 1.0 < np.percentile(ttft, 99)  # (drawn in ms, with a p99 past 1,000 ms)
    fig = charts.distribution_figure(res, charts.METRICS[0])
    names = [t.name for t in fig.data if t.name and t.name.startswith("p99")]
    assert names and "e+" not in names[0] and "," in names[0] and names[0].endswith(" ms")
    assert all(".3g" not in (t.hovertemplate or "") for t in fig.data)


def test_fp8_weights_on_fp8_tensor_cores_are_drawn_under_the_fp8_roof():
    # the roofline drew the BF16 peak (989.4 TFLOP/s on an H100) for an FP8 model the cost model prices on the FP8
    # tensor cores (1,978.9): the chart's roof was not the one its ticks run under
    cfg = make_config(workload__num_requests=40, model__weight_dtype="fp8")
    res = run_simulation(cfg)
    fig = charts.roofline_figure(res)
    roof = next(t for t in fig.data if t.name.startswith("roof: "))
    assert roof.name == f"roof: {cfg.hardware.peak_fp8_tflops:,g} TFLOP/s FP8, {cfg.hardware.hbm_bandwidth_gb_per_s:,g} GB/s"
    assert float(np.max(roof.y)) == pytest.approx(cfg.hardware.peak_fp8_tflops)
    for t in fig.data:  # no tick computes faster than the peak of the cores the model runs its GEMMs on
        if t.name.endswith(" ticks"):
            assert float(np.max(t.y)) <= cfg.hardware.peak_fp8_tflops
    bf16 = charts.roofline_figure(run_simulation(make_config(workload__num_requests=40)))
    assert next(t.name for t in bf16.data if t.name.startswith("roof: ")) == f"roof: {cfg.hardware.peak_tflops:,g} TFLOP/s, 3,350 GB/s"


def test_a_crowded_window_of_multi_turn_sessions_follows_arrival_not_request_ids():
    # closed-loop sessions: a later turn's id follows the open-loop order, it arrives when the previous reply is done
    # (ids and arrivals disagree); the rows take the latest arrivals from before the window and are drawn by arrival
    cfg = make_config(workload__num_requests=300, workload__arrival__rate_per_s=6.0,
                      workload__sessions={"turns": 4, "think_time_s": 2.0})  # fmt: skip
    res = run_simulation(cfg)
    req = res.requests
    end = np.nan_to_num(req.finish_s, nan=np.inf)
    checked = 0
    for t0 in np.arange(5.0, 40.0, 1.0):
        window = (float(t0), float(t0) + 1.0)
        alive = np.flatnonzero((req.arrival_s < window[1]) & (end > window[0]))
        by_arrival = alive[np.argsort(req.arrival_s[alive], kind="stable")]
        arriving = by_arrival[req.arrival_s[by_arrival] >= window[0]]
        earlier = by_arrival[req.arrival_s[by_arrival] < window[0]]
        if not 0 < arriving.size < 5 < alive.size:
            continue
        checked += 1
        ids = timeline.requests_in_window(res, window, 0, 5)
        want = set(arriving.tolist()) | set(earlier[::-1][: 5 - arriving.size].tolist())
        assert set(ids.tolist()) == want, window
        assert np.all(np.diff(req.arrival_s[ids]) >= 0), window  # drawn in arrival order
        all_ids = timeline.requests_in_window(res, window, 0, 500)
        assert all_ids.tolist() == by_arrival.tolist()
    assert checked > 5
    assert np.any(np.diff(req.arrival_s[np.isfinite(req.arrival_s)]) < 0)  # (the case in question: ids out of arrival order)


def test_the_rooflines_axis_title_and_legend_fit_a_phone_and_write_thousands_with_separators():
    # At 390 px the x title "arithmetic intensity (FLOP per byte of HBM traffic, per GPU)" (60 characters) ran past the
    # ~340 px plot, cut at "per G"; the FP8 roof read "1978.9 TFLOP/s FP8, 3350 GB/s" beside the sidebar's 1,978.9 and 3,350
    cfg = make_config(workload__num_requests=40, model__weight_dtype="fp8")
    fig = charts.roofline_figure(run_simulation(cfg))
    assert len(fig.layout.xaxis.title.text) <= 42 and "FLOP/byte" in fig.layout.xaxis.title.text
    assert next(t.name for t in fig.data if t.name.startswith("roof: ")) == "roof: 1,978.9 TFLOP/s FP8, 3,350 GB/s"


def test_compares_cdf_title_puts_a_far_objective_on_a_line_of_its_own():
    # On a phone the title "TTFT: time to first token · SLO 2000 ms (off the chart, right)" (62 characters on one line:
    # Plotly does not wrap titles) was cut at "(off the chart, righ"; and 2000 had no separator
    import re

    res = run_simulation(make_config(workload__num_requests=60))
    fig = charts.cdf_overlay_figure({"A": res, "B": res}, charts.METRICS[0])
    lines = [re.sub(r"<[^>]+>", "", line) for line in fig.layout.title.text.split("<br>")]
    assert lines == [charts.METRICS[0].label, "SLO 2,000 ms (off the chart, right)"]
    assert max(len(line) for line in lines) <= 40
    assert "within the 2,000 ms objective (off the chart, right)" in charts.distribution_summary(res, charts.METRICS[0])


def numeric_axes_without_separators(layout: dict) -> list[str]:
    """Names of a figure layout's (as JSON) numeric axes whose tick labels or hovers would print 2000 or 12k, not
    2,000 and 12,000: no d3 format with ',' (a percent or a log ladder's own ticktext is a format of its own)."""
    bad = []
    for name, axis in layout.items():
        if not (name.startswith("xaxis") or name.startswith("yaxis")) or axis.get("type") in ("category", "date"):
            continue
        fmt = axis.get("tickformat")
        if axis.get("tickvals") is not None or (fmt and "%" in fmt):
            continue
        if fmt is None or "," not in fmt or "," not in axis.get("hoverformat", fmt):
            bad.append(name)
    return bad


def raw_numbers_in_hover(template: str) -> list[str]:
    """A hovertemplate's numbers that print without thousands separators: a d3 number format without ',' (percent
    formats aside), or a value with a unit (ms, s, tok) and no format at all (Plotly prints it as it comes)."""
    import re

    bad = [m.group(0) for m in re.finditer(r"%\{[^}:]+:([^}]*)\}", template) if "%" not in m.group(1) and "," not in m.group(1)]
    return bad + re.findall(r"%\{[^}:]+\} (?:ms|s|tok|seqs)\b", template)


def test_every_charts_numeric_axes_write_thousands_with_separators(small):
    # Plotly's linear axes printed "2000", "5k" and "12k" (and hovers "12.34568k") beside the tables' and the log axes'
    # "2,000"; every builder's axes now say "2,000" and "12,000", and 0.5 stays 0.5 (d3-format ',' keeps Plotly's ~g)
    from app.components.cluster_timeline import cluster_timeline_figure

    deployment = run_simulation(load_preset("cluster-dynamo-llama70b-fp8-8xh100-3p1d").model_copy(
        update={"workload": load_preset("cluster-dynamo-llama70b-fp8-8xh100-3p1d").workload.model_copy(update={"num_requests": 30})}))
    window = timeline.opening_window(small)
    figures = {
        "timeline": timeline.timeline_figure(small, window=window), "timeline, whole run": timeline.timeline_figure(small),
        "compare gantt": timeline.gantt_kv_figure(small, (0, 10), "A"), "roofline": charts.roofline_figure(small),
        "step": charts.step_figure(small, int(small.batches.tick[0])),
        "cdf overlay": charts.cdf_overlay_figure({"A": small, "B": small}, charts.METRICS[0]),
        "deployment timeline": cluster_timeline_figure(deployment, 0, 10),
        "deployment compare gantt": timeline.gantt_kv_figure(deployment, (0, 10), "B"),
        "deployment roofline": charts.roofline_figure(deployment),
        **{f"distribution {m.key}": charts.distribution_figure(small, m) for m in charts.METRICS},
    }
    for name, fig in figures.items():
        layout = fig.to_plotly_json()["layout"]
        assert not numeric_axes_without_separators(layout), (name, numeric_axes_without_separators(layout))
        for trace in fig.data:  # hovers: "12345.67 ms from t = 1234.567 s" read as the axes did
            assert not raw_numbers_in_hover(trace.hovertemplate or ""), (name, trace.name, trace.hovertemplate)
    dist = charts.distribution_figure(small, charts.METRICS[0]).layout
    assert dist.yaxis2.tickformat == ".0%"  # (an axis's own format is kept: the CDF's percent)
    assert charts.roofline_figure(small).layout.xaxis.tickformat == ","  # (log axes: decades in full, as before)
    assert charts.NUMBER_TICKFORMAT == ","  # not ",~g" (1,234,567 as "1.23457e+6") nor ",d" (0.5 as "1")


def test_the_pre_empted_state_is_spelled_as_the_text_spells_it(small):
    # the legend, the hover and the lessons' "what the run shows" wrote "preempted" where the README, the docs, the
    # headline ("Pre-emptions") and the lessons' own claims ("dark-red pre-empted rows") write "pre-empted"
    from app.components import claims, cluster_timeline, timeline_html
    from sim_core.lessons import Claim

    fig = timeline.timeline_figure(small, 0, 60)
    names = {t.name for t in fig.data if t.legendgroup == "preempted"}
    assert names == {"pre-empted"}, names
    assert all("pre-empted" in (t.hovertemplate or "") for t in fig.data if t.legendgroup == "preempted")
    both = cluster_timeline.gantt_kv_figure(small, (0.0, float(small.timeline.t_end_s[-1])))
    assert {t.name for t in both.data if t.legendgroup == "preempted"} <= {"pre-empted"}
    html = timeline_html.timeline_html(small, 0, 60)
    assert "pre-empted" in html and "preempted<" not in html and ">preempted" not in html
    said = claims.shows(Claim(says="x", step=0, view="requests", element="preempted"), 3.0)
    assert said.startswith("3 pre-empted stretches in the request rows"), said
    assert timeline.request_state_label("preempted") == "pre-empted" and timeline.request_state_word("stalled") == "stalled"


def test_the_histogram_leaves_out_what_its_summary_calls_not_shown(stalls):
    # The values past the axis were clamped into the last bar: a spike of stalls at the axis' edge that the caption
    # said was not shown (engine-vllm-v0-swap's ITL: 245 gaps beyond 149 ms, all in the last bar).
    itl = charts.METRICS[2]
    said = charts.distribution_summary(stalls, itl)
    beyond = int(re.search(r"([\d,]+) beyond", said).group(1).replace(",", ""))
    assert beyond > 0, said
    bars = next(t for t in charts.distribution_figure(stalls, itl).data if t.name == "count")
    drawn = int(np.sum(bars.y))
    assert drawn == stalls_gaps_drawn(stalls, itl) - beyond


def stalls_gaps_drawn(res, metric) -> int:
    """The values the distribution chart draws from (all, or an even sample of the gaps)."""
    return int(charts._distribution(res, metric).v.size)


def test_compare_draws_narrow_tick_bars_without_outlines(small):
    # Compare's half-width Gantts drew a 2 s window's ticks ~2.7 px wide with two 0.6 px white outlines: decode read
    # as a pale, striped blue, the legend's "stalled". Simulate's full-width chart keeps one outlined bar per tick.
    window = timeline.opening_window(small)
    half = timeline.gantt_kv_figure(small, window=window)
    bars = [t for t in half.data if t.type == "bar" and t.name == "decode"]
    assert bars and all((t.marker.line.width or 0) == 0 for t in bars)
    traces = timeline._gantt_traces(small, timeline.gpu_rows(small), window, plot_px=800.0)
    assert any(t.name == "decode" and t.marker.line.width == 0.6 for t in traces)
    assert any("tick " in str(t.customdata[0][0]) for t in bars)  # (the hover still names its tick)


def test_a_run_of_few_ticks_opens_whole_with_a_bar_per_tick():
    # mechanism-static-batch (350 ticks over 4.6 s) opened on a 2 s window of one decoding request: its holes and its
    # second batch were out of view. A run whose every tick gets its own bar over the whole run opens whole.
    res = run_simulation(load_preset("mechanism-static-batch"))
    assert res.timeline.num_ticks <= timeline.PER_TICK_BARS
    assert timeline.opening_window(res) is None
    bars = [t for t in timeline.timeline_figure(res).data if t.type == "bar" and t.yaxis == "y"]
    assert sum(len(t.x) for t in bars if t.name in ("prefill", "decode", "mixed")) == res.timeline.num_ticks
    width = timeline.WIDTH_CHOICES_S[0]  # a width asked for is still a window of that width
    window = timeline.opening_window(res, width)
    assert window is not None and window[1] - window[0] == pytest.approx(width)
    default = run_simulation(load_preset("chat-h100-llama8b"))  # 4,217 ticks: a readable window
    assert default.timeline.num_ticks > timeline.PER_TICK_BARS and timeline.opening_window(default) is not None


def test_a_distributions_share_within_its_objective_is_rounded_as_the_headlines():
    # engine-exclusive: the TTFT chart said "0% within the 2 s objective" beside the headline's "0.5% meet SLOs"
    from sim_core.words import percent

    res = run_simulation(load_preset("engine-exclusive"))
    ttft = res.requests.first_token_s - res.requests.arrival_s
    met = float((ttft[np.isfinite(ttft)] <= res.config.slo.ttft_s).mean())
    assert 0 < met < 0.01  # (1 of 200: "0%" by :.0%)
    said = charts.distribution_summary(res, charts.METRICS[0])
    assert f" · {percent(met)} within the " in said and " · 0% within" not in said, said


def test_the_running_line_holds_a_batch_through_the_prefill_tick_that_starts_it():
    # mechanism-priority (batches of 2): the queue panel's running line fell to 0 through each prefill tick after a
    # finished batch, while the Gantt showed that batch prefilling; a line's value holds until the next tick's end, so
    # it is drawn as the count during that tick
    res = run_simulation(load_preset("mechanism-priority"))
    tl = res.timeline
    running = next(s for s in timeline.line_series(res, None) if s.name == "running requests")
    assert running.t.size == tl.num_ticks and np.array_equal(running.t, tl.t_end_s)
    after_batch = np.flatnonzero((tl.phase[1:] == Phase.PREFILL) & (tl.num_running[:-1] == 0))  # ticks before them
    assert after_batch.size >= 3  # (the run has such prefill ticks: the batches turn over)
    during = running.y[after_batch]  # each held through the prefill tick that follows
    assert np.array_equal(during, tl.num_prefill_seqs[after_batch + 1]), during
    assert running.y[:-1].min() > 0 and running.y[-1] == tl.num_running[-1] == 0  # (after the run: none)
    waiting = next(s for s in timeline.line_series(res, None) if s.name == "waiting requests")
    assert np.array_equal(waiting.y[:-1], tl.num_waiting[1:])  # (the count after each next tick's admissions)


def test_a_lines_label_goes_to_the_end_and_side_with_fewest_points_under_it():
    # a review: the Plan chart's "TTFT SLO" label covered a config at its left end, Sweep's TPOT label the TTFT p50
    # markers under its line; the label now takes the end and side of its line that the data leaves free
    order = ((0, "bottom"), (1, "bottom"), (0, "top"), (1, "top"))
    assert charts.line_label_place([], 100.0, order) == (0, "bottom")  # nothing drawn: the first choice
    assert charts.line_label_place([(0, 10), (10, 1000)], 100.0, order) == (0, "bottom")  # nothing near the line
    left_above = [(0.0, 120.0), (1.0, 150.0), (9.0, 10.0)]
    assert charts.line_label_place(left_above, 100.0, order) == (1, "bottom")
    both_above = left_above + [(10.0, 110.0)]
    assert charts.line_label_place(both_above, 100.0, order) == (0, "top")
    # a point just outside the box's factor, or past its third of the range, does not count, though the label then
    # takes the end with more room: there only (10, 0), off a log axis
    assert charts.line_label_place([(0.0, 161.0), (5.0, 120.0), (10.0, 0.0)], 100.0, order) == (1, "bottom")
    edges = [(0.0, 170.0), (0.0, 60.0), (10.0, 170.0), (10.0, 60.0)]  # (outside every box; a little more room above)
    assert charts.line_label_place(edges, 100.0, order) == (0, "bottom")
    assert charts.line_label_place([(0.0, 120.0), (0.0, 90.0), (10.0, 120.0), (10.0, 90.0), (5, 1)], 100.0, order) == (0, "bottom")
    # Sweep's default latency chart (vLLM V1 at 2-30 req/s, TPOT SLO 100 ms): the label sat under its line at the left,
    # free but squeezed between TTFT p99 (~130 ms) and TTFT p50 (~45 ms); the right end has decades of room above
    rates = (2, 6, 10, 14, 18, 22, 26, 30)
    curves = {"ttft_p99": (130, 140, 180, 220, 320, 40_000, 120_000, 210_000), "ttft_p50": (35, 38, 45, 55, 90, 15_000, 60_000, 100_000),
              "tpot_p99": (11, 15, 20, 30, 50, 70, 70, 70)}  # fmt: skip
    plotted = [(x, y) for ys in curves.values() for x, y in zip(rates, ys)]
    tpot_order = ((0, "top"), (1, "top"), (0, "bottom"), (1, "bottom"))
    assert charts.line_label_place(plotted, 100.0, tpot_order) == (1, "bottom")
    # missing and non-finite values (a point that did not run) are not points
    assert charts.line_label_place([(0.0, None), (None, 120.0), (0.0, float("nan")), (10.0, 1.0)], 100.0, order) == (0, "bottom")


def test_the_kinds_of_tick_stay_apart_for_colour_blind_readers():
    # The GPU row tells its ticks apart by colour alone; decode blue and mixed purple (#9334E6) were ΔE 1.8 under
    # deuteranopia (an accessibility review): one blue strip. Every pair stays 10 apart under each simulation.
    import itertools

    from tests.app.colour_vision import MACHADO_2009, delta_e_2000, delta_e_2000_lab, seen

    # (the formula as published: Sharma et al.'s test pairs 1, 2 and 7)
    assert round(delta_e_2000_lab((50, 2.6772, -79.7751), (50, 0, -82.7485)), 4) == 2.0425
    assert round(delta_e_2000_lab((50, 3.1571, -77.2803), (50, 0, -82.7485)), 4) == 2.8615
    assert round(delta_e_2000_lab((50, 0, 0), (50, -1, 2)), 4) == 2.3669
    kinds = ("prefill", "decode", "mixed", "swap", "idle")
    for vision in (None, *MACHADO_2009):
        for a, b in itertools.combinations(kinds, 2):
            de = delta_e_2000(seen(PHASE_COLORS[a], vision), seen(PHASE_COLORS[b], vision))
            assert de >= 10, (vision, a, b, round(de, 1))
    # and on the roofline each kind has its own marker too
    assert len({charts.TICK_SYMBOLS[k] for k in ("prefill", "decode", "mixed", "swap")}) == 4


def test_chart_text_is_dark_enough_to_read():
    # Streamlit's chart theme drew ticks, titles and legends in #808495 (3.7:1 on white, under WCAG's 4.5:1 for small
    # text): every builder's readable_numbers sets the text's colour, leaving a colour a builder chose itself
    import plotly.graph_objects as go

    from tests.app.colour_vision import relative_luminance

    fig = go.Figure(go.Scatter(x=[1, 2], y=[3, 4], name="a"))
    fig.add_annotation(text="note", x=1, y=3)
    fig.add_annotation(text="kept", x=2, y=4, font=dict(color="#D93025"))
    charts.readable_numbers(fig.update_xaxes(title_text="x"))
    assert fig.layout.xaxis.tickfont.color == fig.layout.yaxis.title.font.color == charts.TEXT_COLOR
    assert fig.layout.legend.font.color == fig.layout.font.color == charts.TEXT_COLOR
    assert [a.font.color for a in fig.layout.annotations] == [charts.TEXT_COLOR, "#D93025"]
    assert (1.05 / (relative_luminance(charts.TEXT_COLOR) + 0.05)) >= 4.5  # (WCAG contrast on white)


@given(num=hs.integers(1, 64), first=hs.integers(1, 3))
def test_a_pd_sweeps_axis_names_a_few_splits_level_first_and_last_included(num, first):
    # a P:D sweep of 16 instances over 15 points: Plotly turned the 15 labels upright and the axis title under them ran
    # into the legend (a review)
    total = first + num
    axis = charts.split_ticks(range(first, first + num), total)
    vals = axis["tickvals"]
    assert axis["tickangle"] == 0 and len(vals) <= charts.MAX_SPLIT_LABELS and vals == sorted(set(vals))
    assert vals[0] == first and vals[-1] == first + num - 1
    assert axis["ticktext"] == [f"{v}P{total - v}D" for v in vals]
    if num <= charts.MAX_SPLIT_LABELS:
        assert vals == list(range(first, first + num))  # (few: every split named)
    gaps = [b - a for a, b in zip(vals, vals[1:])]
    assert not gaps or max(gaps) - min(gaps) <= 1  # (spread evenly: 14 splits named 13P2D beside 14P1D)
    assert charts.split_ticks([], 4)["tickvals"] == []


@given(w0=hs.floats(0.0, 0.9), width=hs.floats(0.01, 0.1), points=hs.integers(20, 120))
def test_a_reduced_line_of_one_engine_draws_in_view_the_values_in_force_in_it(large, w0, width, points):
    # the lines take one tick either side of the window, to reach its edges; reduced, the ticks past its end were
    # binned with its own and drew their values in it, above the note's "peak in view" (a leftover of session 78's
    # review, where the deployments' lines had the same fault)
    tl = large.timeline
    t0 = float(tl.t_end_s[0])
    window = (t0 + w0 * float(tl.t_end_s[-1] - t0), t0 + (w0 + width) * float(tl.t_end_s[-1] - t0))
    kv = timeline.line_series(large, window, points)[0]
    assert kv.name == "KV in use (%)" and kv.reduced
    until = np.append(kv.t[1:], np.inf)
    drawn = kv.y[(kv.t <= window[1]) & (until > window[0])]
    assert drawn.max() == pytest.approx(timeline.kv_peak_in_view_pct(large, window), abs=1e-9)
    assert kv.t.size >= 0.85 * points  # (the window's own points: a fixed eighth kept for each one-tick side took 25 %)
