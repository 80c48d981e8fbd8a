"""A deployment's timeline: a Gantt row per instance, request rows naming their instance, KV transfers;
and the app opens a deployment link without error."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import plotly.graph_objects as go
import pytest
from hypothesis import given
from hypothesis import strategies as hs
from streamlit.testing.v1 import AppTest

from app.components import timeline
from app.components.cluster_timeline import (
    KV_COLORS,
    KV_DASHES,
    MAX_INSTANCE_ROWS,
    ROW_LABEL_CSS,
    cluster_timeline_figure,
    instance_names,
    instance_rows,
    kv_line_style,
    kv_waits,
    busy_s,
    shown_caption,
    shown_instances,
    request_labels,
    request_names,
    responsive_label,
)
from app.components.text import plain
from app.components.timeline import MAX_TIMELINE_POINTS, count_points
from app.state import encode_config
from sim_core import load_preset, run_simulation
from sim_core.sweep import with_value
from sim_core.types import Phase
from tests.conftest import make_config

APP = str(Path(__file__).resolve().parents[2] / "app" / "streamlit_app.py")


def _disagg():
    cfg = with_value(make_config(workload__num_requests=40, hardware__num_gpus=2), "deployment",
                     {"disaggregation": {"prefill": {"replicas": 2}, "decode": {"replicas": 1}}})  # fmt: skip
    return run_simulation(cfg)


def test_one_gantt_row_per_instance_with_tp_collapsed_and_requests_name_their_instances():
    res = _disagg()
    assert instance_names(res) == ["prefill 0 · 2 GPUs", "prefill 1 · 2 GPUs", "decode 0 · 2 GPUs"]
    labels = request_names(res, np.arange(3))
    assert labels[0] == "req 0 · P0→D0" and labels[1] == "req 1 · P1→D0"
    fig = cluster_timeline_figure(res, 0, 20)
    gantt_rows = {y for tr in fig.data if tr.type == "bar" for y in tr.y}
    assert set(instance_rows(res)) <= gantt_rows
    assert any(tr.name == "kv transfer" for tr in fig.data)  # each request's KV transfer is drawn
    assert count_points(fig) <= MAX_TIMELINE_POINTS


def test_an_instance_bars_hover_counts_its_ticks_in_words():
    # the hover read "prefill · 1 tick(s)": each bar's count is "1 tick" or "n ticks", its other fields numbers still
    res = _disagg()
    bars = [tr for tr in cluster_timeline_figure(res, 0, 20).data if tr.type == "bar" and tr.yaxis == "y"]
    assert bars and not any("tick(s)" in tr.hovertemplate for tr in bars)
    counts = [row[0] for tr in bars for row in tr.customdata]
    assert "1 tick" in counts and any(c.endswith(" ticks") and c != "1 ticks" for c in counts), counts
    assert all(isinstance(row[1], (int, np.integer)) for tr in bars for row in tr.customdata)  # (formatted by the hover)


def test_row_labels_have_a_narrow_form_a_phone_shows():
    # At 390 px the rows' labels ("prefill 0 · 2 GPUs", "req 350 · P2→D0", "req 41 · replica 1") took a third of the
    # chart: each row's label carries a narrow form too, in the xPyD notation the request rows use, and the app's CSS
    # shows it under 640 px (test_browser: test_a_deployments_timeline_labels_its_rows_compactly_on_a_phone)
    res = _disagg()
    assert instance_names(res, narrow=True) == ["P0 · 2 GPUs", "P1 · 2 GPUs", "D0 · 2 GPUs"]
    assert request_names(res, np.arange(2), narrow=True) == ["0 · P0→D0", "1 · P1→D0"]
    assert instance_rows(res)[0] == responsive_label("prefill 0 · 2 GPUs", "P0 · 2 GPUs")
    assert request_labels(res, np.arange(1)) == [responsive_label("req 0 · P0→D0", "0 · P0→D0")]
    replicas = run_simulation(with_value(make_config(workload__num_requests=10), "deployment", {"replicas": 2}))
    assert instance_names(replicas) == ["replica 0", "replica 1"] and instance_names(replicas, narrow=True) == ["R0", "R1"]
    r = int(np.flatnonzero(replicas.instance_of == 1)[0])
    assert request_names(replicas, np.array([r])) == [f"req {r} · replica 1"]
    assert request_names(replicas, np.array([r]), narrow=True) == [f"{r} · R1"]
    # the wide form is the one shown without the app's CSS (a PNG download): the narrow one is hidden inline
    label = responsive_label("wide", "narrow")
    assert "display:none'>narrow" in label and "display:none'>wide" not in label
    assert "max-width: 640px" in ROW_LABEL_CSS and "--row-label:narrow" in ROW_LABEL_CSS and "--row-label:wide" in label


def test_request_rows_draw_decode_from_the_kv_arrival_to_the_finish_with_stalls_of_the_decode_instance():
    # Regression: stalls were cut on the deployment's merged ticks, where every prefill instance's tick has no decode
    # token, so each decode segment read as stalled, and the rows (which drew no stalls) were empty after the transfer.
    res = _disagg()
    fig = cluster_timeline_figure(res, 0, 20)
    spans: dict[str, dict[str, float]] = {}
    for tr in fig.data:
        if tr.type == "bar" and tr.yaxis == "y2":
            for y, base, width in zip(tr.y, tr.base, tr.x):
                per = spans.setdefault(y, {})
                per[tr.name] = per.get(tr.name, 0.0) + width
                if tr.name == "kv transfer":
                    per["kv done"] = max(per.get("kv done", 0.0), base + width)
    labels = request_labels(res, np.arange(20))
    decoding = stalled = 0.0
    for r, label in enumerate(labels):
        per = spans[label]
        assert per["decode"] + per.get(timeline.request_state_label("stalled"), 0.0) == pytest.approx(res.requests.finish_s[r] - per["kv done"], abs=1e-9)
        decoding, stalled = decoding + per["decode"], stalled + per.get(timeline.request_state_label("stalled"), 0.0)
    # the decode instance decodes in almost every tick (only its own prefill-free ticks could stall a request)
    assert decoding > 4 * stalled


def test_a_window_shows_the_requests_alive_in_it_and_opens_on_it():
    cfg = with_value(make_config(workload__num_requests=300, workload__arrival__rate_per_s=20.0), "deployment",
                     {"replicas": 3, "router": "least_outstanding"})  # fmt: skip
    res = run_simulation(cfg)
    window = (8.0, 10.0)
    fig = cluster_timeline_figure(res, 0, 30, window=window)
    drawn = {int(y.split("req ")[1].split(" ")[0]) for tr in fig.data if tr.type == "bar" and tr.yaxis == "y2" for y in tr.y}
    req = res.requests
    alive = (req.arrival_s < window[1]) & (np.nan_to_num(req.finish_s, nan=np.inf) > window[0])
    assert drawn and all(alive[r] for r in drawn)  # every row drawn is alive in the window (not requests 0-29)
    assert not alive[:30].all()  # (which the window would not all show)
    assert tuple(fig.layout.xaxis.range) == window
    assert "alive in this window" in fig.layout.annotations[1].text


def test_in_a_window_the_instance_rows_draw_the_windows_ticks():
    # a review: binned over the whole run, a 1 s window showed 2-3 solid decode bars a replica under ~30 prefills in the
    # request rows; the rows now draw the window's ticks, as one engine's GPU row does
    cfg = with_value(make_config(workload__num_requests=300, workload__arrival__rate_per_s=20.0), "deployment",
                     {"replicas": 3, "router": "least_outstanding"})  # fmt: skip
    res = run_simulation(cfg)
    window = (8.0, 9.0)
    bars = [(tr.name, b, b + x) for tr in cluster_timeline_figure(res, 0, 30, window=window).data
            if tr.type == "bar" and tr.yaxis == "y" for b, x in zip(tr.base, tr.x)]  # fmt: skip
    ticks = sum(int(((i.result.timeline.t_end_s > window[0]) & (i.result.timeline.t_start_s < window[1])).sum()) for i in res.instances)
    assert all(e > window[0] and b < window[1] for _, b, e in bars)  # (each bar a tick or run of ticks in the window)
    assert len(bars) > 100 and len(bars) <= ticks and "mixed" in {n for n, _, _ in bars}
    whole = [b for tr in cluster_timeline_figure(res, 0, 30).data if tr.type == "bar" and tr.yaxis == "y" for b in tr.base]
    assert min(whole) == 0.0  # (without a window, the whole run)


def test_the_kv_panel_names_its_peak_in_the_window_and_where():
    # on the panel's fixed 0-100 % axis lesson 14's 4-5.5 % was a line on the floor, four replicas one band (a review)
    cfg = with_value(make_config(workload__num_requests=300, workload__arrival__rate_per_s=20.0), "deployment",
                     {"replicas": 3, "router": "least_outstanding"})  # fmt: skip
    res = run_simulation(cfg)
    window = (8.0, 10.0)
    title = cluster_timeline_figure(res, 0, 30, window=window).layout.annotations[2].text
    peaks = _drawn_peaks_in_view(cluster_timeline_figure(res, 0, 30, window=window), window)
    k = int(np.argmax(peaks))
    assert title == "KV cache in use per instance"  # (the title stays short: a narrow chart clips a long one)
    said = [a.text for a in cluster_timeline_figure(res, 0, 30, window=window).layout.annotations if a.text.startswith("peak")]
    assert said == [f"peak in view {peaks[k]:,.1f} % · R{k}"], said  # ("in view": not the headline's peak, a review)
    whole = next(a.text for a in cluster_timeline_figure(res, 0, 30).layout.annotations if a.text.startswith("peak"))
    assert float(whole.split("peak in view ")[1].split(" %")[0]) >= round(max(peaks), 1)  # (no window: the whole run's peak)


def _drawn_peaks_in_view(fig, window) -> list[float]:
    """Each KV line's highest value drawn in the window, read off the figure: a step line (hv) holds y[i] from x[i] to
    x[i+1], the last one on."""
    out = []
    for tr in (tr for tr in fig.data if tr.type == "scatter" and tr.name.startswith("KV ")):
        x, y = np.asarray(tr.x, dtype=float), np.asarray(tr.y, dtype=float)
        until = np.append(x[1:], np.inf)
        out.append(float(y[(x <= window[1]) & (until > window[0])].max()))
    return out


def test_the_kv_peak_in_view_is_on_the_line_it_names_with_many_instances():
    # 12 replicas: "peak in view 10.4 % · R10" above an R10 line that reached 10.0 % in view, its lines binned over the
    # whole run (a bin wider than the window), the note counting the last tick, whose value is drawn past the window
    cfg = with_value(make_config(workload__num_requests=600, workload__arrival__rate_per_s=60.0), "deployment",
                     {"replicas": 12, "router": "least_outstanding"})  # fmt: skip
    res = run_simulation(cfg)
    assert min(x.result.timeline.num_ticks for x in res.instances) > timeline.MAX_LINE_POINTS // 12  # (lines reduced)
    for window in [(3.0, 4.0), (3.5, 4.5), (4.5, 5.5), (5.0, 6.0)]:
        fig = cluster_timeline_figure(res, 0, 30, window=window)
        peaks = _drawn_peaks_in_view(fig, window)
        said = next(a.text for a in fig.layout.annotations if a.text.startswith("peak"))
        k = int(np.argmax(peaks))
        assert said == f"peak in view {peaks[k]:,.1f} % · R{k}", (said, peaks)


def test_the_kv_panel_scales_to_the_peak_in_view_until_an_instance_passes_sixty_percent():
    # a review: four replicas between 3 and 10 % of their blocks were four lines at the foot of a 0-105 % axis
    cfg = with_value(make_config(workload__num_requests=300, workload__arrival__rate_per_s=20.0), "deployment",
                     {"replicas": 3, "router": "least_outstanding"})  # fmt: skip
    res = run_simulation(cfg)
    for window in ((8.0, 10.0), (0.0, 2.0), None):
        fig = cluster_timeline_figure(res, 0, 30, window=window)
        said = next(a.text for a in fig.layout.annotations if a.text.startswith("peak in view"))
        peak = float(said.split("peak in view ")[1].split(" %")[0])  # (the panel's note: the peak in view)
        top = fig.layout.yaxis3.range[1]
        assert peak < 40 and peak * 1.25 <= top < peak * 1.25 + 5.1 and top % 5 == 0, (window, peak, top)
    assert timeline.kv_axis_top_pct(0.0) == 5 and timeline.kv_axis_top_pct(12.1) == 20 and timeline.kv_axis_top_pct(48.0) == 60
    assert timeline.kv_axis_top_pct(60.1) == timeline.kv_axis_top_pct(100.0) == 105  # (a cache that fills keeps the whole scale)


def _legend(fig) -> list:
    """The entries Plotly lists, in its order: rank (default 1000), then the order the traces came."""
    entries = [(1000 if t.legendrank is None else t.legendrank, k, t) for k, t in enumerate(fig.data) if t.showlegend is not False]
    return [t for _, _, t in sorted(entries, key=lambda e: e[:2])]


def test_the_legend_lists_phases_and_states_in_one_order_whatever_the_run():
    # Plotly lists entries in the order their traces came: "idle, decode, prefill, waiting" in one run and "idle,
    # prefill, decode, mixed, waiting" in the next (a review), as the first instances drawn happened to run
    from plotly.subplots import make_subplots

    from app.components.cluster_timeline import _fixed_legend_order
    from app.components.colors import PHASE_NAMES

    fig = make_subplots(rows=3, cols=1, shared_xaxes=True)
    for name, row in [("decode", 1), ("idle", 1), ("kv wait", 2), ("mixed", 1), ("waiting", 2), ("prefill", 1), ("prefill", 2)]:
        fig.add_trace(go.Bar(x=[1], y=["r"], name=name, legendgroup=name), row=row, col=1)
    fig.add_trace(go.Scatter(x=[1], y=[1], name="KV R0"), row=3, col=1)
    _fixed_legend_order(fig)
    assert [(t.name, t.yaxis) for t in _legend(fig)] == [
        ("idle", "y"), ("prefill", "y"), ("decode", "y"), ("mixed", "y"), ("waiting", "y2"), ("prefill", "y2"),
        ("kv wait", "y2"), ("KV R0", "y3")]  # fmt: skip
    # and on a real run's figure: its instances' phases in Phase's order, then the requests', then the KV lines
    cfg = with_value(make_config(workload__num_requests=200, workload__arrival__rate_per_s=20.0), "deployment",
                     {"replicas": 3, "router": "least_outstanding"})  # fmt: skip
    listed = _legend(cluster_timeline_figure(run_simulation(cfg), 0, 30, window=(5.0, 7.0)))
    phases = [t.name for t in listed if t.yaxis == "y"]
    assert phases and phases == [PHASE_NAMES[ph] for ph in Phase if PHASE_NAMES[ph] in phases]
    assert [t.yaxis for t in listed] == sorted(t.yaxis for t in listed)


def test_replicas_timeline_is_bounded_with_many_instances():
    cfg = with_value(make_config(workload__num_requests=200, workload__arrival__rate_per_s=80.0), "deployment",
                     {"replicas": 24, "router": "least_outstanding"})  # fmt: skip
    res = run_simulation(cfg)
    fig = cluster_timeline_figure(res, 0, 60)
    assert count_points(fig) <= MAX_TIMELINE_POINTS
    assert len(instance_rows(res)) == 16  # 16 rows, the busiest; all instances are in the tables
    busiest = sorted(range(24), key=lambda i: (-busy_s(res.instances[i]), i))[:16]
    assert [x.index for x in shown_instances(res)] == sorted(busiest)
    assert shown_caption(res).endswith(" of 24 drawn (the busiest in the run)")
    kv = [tr for tr in fig.data if tr.type == "scatter" and tr.name.startswith("KV ")]
    assert len({(tr.line.color, tr.line.dash) for tr in kv}) == len(kv) == 16  # line 8 looked like line 0
    assert fig.layout.yaxis.nticks == 16  # every row labelled (Plotly thinned 16 to every other one)


@pytest.mark.parametrize("window", [None, (1.0, 2.0)])
def test_with_many_instances_the_request_rows_are_of_requests_on_the_instances_drawn(window):
    # at 64 replicas, 18 of 30 request rows named replicas the Gantt (16 rows, the busiest) did not draw
    cfg = with_value(make_config(workload__num_requests=200, workload__arrival__rate_per_s=80.0), "deployment",
                     {"replicas": 24, "router": "round_robin"})  # fmt: skip
    res = run_simulation(cfg)
    fig = cluster_timeline_figure(res, 0, 30, window=window)
    drawn = {f"{x.role} {x.index}" for x in shown_instances(res, window)}
    shown = [tr for tr in fig.data if tr.type == "bar" and tr.yaxis == "y2"]
    names = {str(y) for tr in shown for y in tr.y}
    assert len(names) >= 10 and all(n.split(" · ")[1] in drawn for n in (plain_name(n) for n in names)), names
    assert "on the instances drawn" in fig.layout.annotations[1].text
    # every instance drawn (4 replicas): every request alive may have a row, and the title says nothing of it
    few = run_simulation(with_value(cfg, "deployment.replicas", 4))
    assert "drawn" not in cluster_timeline_figure(few, 0, 30, window=window).layout.annotations[1].text


def plain_name(label: str) -> str:
    """A request row's wide name from its responsive label ('req 7 · replica 2')."""
    import re

    return re.search(r">(req [^<]+)<", label).group(1)


@pytest.mark.parametrize(("num_prefill", "num_decode", "drawn"), [(64, 64, (8, 8)), (40, 2, (14, 2)), (3, 1, (3, 1)),
                                                                  (15, 15, (8, 8)), (17, 0, (16, 0))])  # fmt: skip
def test_a_large_xpyd_gantt_draws_both_pools(num_prefill, num_decode, drawn):
    # the first 16 of 64P64D were all prefill instances: the decoding on D10-D25 had no row
    from types import SimpleNamespace

    idle = SimpleNamespace(timeline=SimpleNamespace(num_ticks=0))  # (equally busy: the lowest indices)
    instances = [SimpleNamespace(role="prefill", index=i, result=idle) for i in range(num_prefill)]
    instances += [SimpleNamespace(role="decode", index=i, result=idle) for i in range(num_decode)]
    shown = shown_instances(SimpleNamespace(instances=instances))
    assert len(shown) == min(MAX_INSTANCE_ROWS, len(instances))
    assert (sum(x.role == "prefill" for x in shown), sum(x.role == "decode" for x in shown)) == drawn
    assert all(x.index < n for x in shown for n in [drawn[0] if x.role == "prefill" else drawn[1]])  # lowest indices
    assert [x for x in instances if x in shown] == shown  # in the deployment's order


def test_a_real_large_xpyd_run_draws_decode_rows_and_says_what_it_leaves_out():
    cfg = with_value(make_config(workload__num_requests=40, workload__arrival__rate_per_s=40.0), "deployment",
                     {"disaggregation": {"prefill": {"replicas": 20}, "decode": {"replicas": 4}}})  # fmt: skip
    res = run_simulation(cfg)
    fig = cluster_timeline_figure(res, 0, 20)
    rows = {y for tr in fig.data if tr.type == "bar" and tr.yaxis == "y" for y in tr.y}
    assert any("decode" in r for r in rows) and len(instance_rows(res)) == 16
    assert shown_caption(res).startswith("prefill ") and shown_caption(res).endswith(
        " of 20 and decode 0-3 of 4 drawn (each pool's busiest in the run)")
    assert "16 of 24 drawn" in fig.layout.annotations[0].text


def test_a_large_xpyd_draws_the_instances_busy_in_its_window():
    # 64P64D drew P0-P7 and D0-D7, all idle in the window it opened on, whose requests ran on P10-P39 and D10-D39
    cfg = with_value(load_preset("cluster-dynamo-llama70b-fp8-8xh100-3p1d"), "deployment.disaggregation.prefill.replicas", 64)
    res = run_simulation(with_value(cfg, "deployment.disaggregation.decode.replicas", 64))
    window = (19.3, 24.3)
    shown = shown_instances(res, window)
    assert len(shown) == MAX_INSTANCE_ROWS
    for role in ("prefill", "decode"):
        drawn = [busy_s(x, window) for x in shown if x.role == role]
        left = [busy_s(x, window) for x in res.instances if x.role == role and x not in shown]
        assert len(drawn) == 8 and min(drawn) > 0 and min(drawn) >= max(left), role
    fig = cluster_timeline_figure(res, 0, 30, window=window)
    rows = {y for tr in fig.data if tr.type == "bar" and tr.yaxis == "y" for y in tr.y}
    assert rows == set(instance_rows(res, window))
    caption = shown_caption(res, window)
    assert caption.endswith(" of 64 drawn (each pool's busiest in this window)") and "prefill 0-7 of 64" not in caption


def test_kv_line_styles_are_sixteen_different_pairs():
    assert len({tuple(kv_line_style(k).values()) for k in range(MAX_INSTANCE_ROWS)}) == MAX_INSTANCE_ROWS
    assert [kv_line_style(k) for k in range(8)] == [dict(color=c, dash=d) for c, d in zip(KV_COLORS, KV_DASHES)]


def test_simulate_page_opens_a_deployment_link():
    cfg = with_value(make_config(workload__num_requests=30), "deployment", {"replicas": 2, "router": "least_kv"})
    at = AppTest.from_file(APP, default_timeout=120)
    at.query_params["cfg"] = encode_config(cfg)
    at.run()
    assert not at.exception
    assert not at.error, [e.value for e in at.error]


def test_compare_draws_instances_for_a_deployment():
    from app.components.cluster_timeline import gantt_kv_figure

    res = _disagg()
    fig = gantt_kv_figure(res, (0, 10), "A")
    rows = {y for tr in fig.data if tr.type == "bar" for y in tr.y}
    assert {responsive_label("prefill 0 · 2 GPUs", "P0 · 2 GPUs"), responsive_label("decode 0 · 2 GPUs", "D0 · 2 GPUs")} <= rows
    single = gantt_kv_figure(run_simulation(make_config(workload__num_requests=10)), (0, 10), "B")
    assert single.data  # a single engine still gets the existing figure


def test_compares_kv_lines_of_a_deployment_say_which_instance_each_is():
    # Compare drew one KV line per instance, told apart by colour and dash, with no legend for them: the 3-replica
    # DistServe side had three unnamed lines. Each is in the legend, which sits in its own strip at the figure's foot
    # (hung from the plot, its extra rows covered the time axis's title)
    from app.components.cluster_timeline import gantt_kv_figure

    fig = gantt_kv_figure(_disagg(), (0, 10), "A")
    kv = [tr for tr in fig.data if tr.type == "scatter"]
    assert [tr.name for tr in kv] == [f"KV {row}" for row in instance_rows(_disagg())] and all(tr.showlegend is not False for tr in kv)
    assert instance_names(_disagg()) == ["prefill 0 · 2 GPUs", "prefill 1 · 2 GPUs", "decode 0 · 2 GPUs"]
    assert fig.layout.legend.yref == "container" and fig.layout.legend.y == 0 and fig.layout.legend.yanchor == "bottom"


def test_sidebar_deployment_editor_round_trips_presets_and_turns_on_replicas():
    at = AppTest.from_file(APP, default_timeout=120)
    at.query_params["preset"] = "cluster-dynamo-llama70b-fp8-8xh100-3p1d"
    at.run()
    assert not at.exception and not at.error
    assert at.query_params["preset"] == "cluster-dynamo-llama70b-fp8-8xh100-3p1d"  # untouched: still the preset
    assert at.radio(key="w.dep.mode").value == "disaggregated"
    at.number_input(key="w.dep.decode").set_value(2).run()
    assert not at.exception and not at.error
    # modified: a readable link, the preset plus the one deployment change
    assert dict(at.query_params) == {"preset": "cluster-dynamo-llama70b-fp8-8xh100-3p1d",
                                     "deployment.disaggregation.decode.replicas": "2"}  # fmt: skip
    at2 = AppTest.from_file(APP, default_timeout=120)
    at2.query_params["preset"] = "chat-h100-llama8b"
    at2.run()
    at2.radio(key="w.dep.mode").set_value("replicas").run()
    at2.number_input(key="w.dep.replicas").set_value(3).run()
    assert not at2.exception and not at2.error, [e.value for e in at2.error]
    assert "3 replicas" in " ".join(c.value for c in at2.caption)


def test_switching_replicas_to_pools_names_the_gpus_the_replicas_ran_on():
    # 4 replicas of 2 GPUs switched to pools opened on 1P1D (4 GPUs here) and said nothing of the GPUs gone
    at = AppTest.from_file(APP, default_timeout=120)
    at.query_params["preset"] = "cluster-router-4xh100-llama8b"
    at.run()
    before = at.radio(key="w.dep.mode").value
    at.radio(key="w.dep.mode").set_value("disaggregated").run()
    assert before == "replicas" and not at.exception and not at.error
    shown = " ".join(c.value for c in at.caption)
    assert "2 GPUs = 1 x TP 1 H100 SXM prefill + 1 x TP 1 H100 SXM decode; the 4 replicas ran on 4 GPUs" in shown, shown
    at.number_input(key="w.dep.prefill").set_value(3).run()  # 3P1D: as many GPUs, nothing more to say
    assert "replicas ran on" not in " ".join(c.value for c in at.caption)


@pytest.mark.parametrize("key, preset_value, new_value, field", [
    # the Dynamo preset counts the KV transfer in TTFT (its clients read the decode worker's stream); switching the
    # editor to the prefill side makes a link with that one change
    ("w.dep.first", "decode", "prefill", "deployment.disaggregation.first_token_from"),
    # transfers share the link in dispatch order by default; `none` gives each the whole link (the old model)
    ("w.dep.contention", "fifo", "none", "deployment.disaggregation.link.contention"),
])  # fmt: skip
def test_a_disaggregation_radio_in_the_editor_makes_a_link_with_that_one_change(key, preset_value, new_value, field):
    at = AppTest.from_file(APP, default_timeout=120)
    at.query_params["preset"] = "cluster-dynamo-llama70b-fp8-8xh100-3p1d"
    at.run()
    assert at.radio(key=key).value == preset_value
    at.radio(key=key).set_value(new_value).run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert dict(at.query_params) == {"preset": "cluster-dynamo-llama70b-fp8-8xh100-3p1d", field: new_value}


def test_learn_page_shows_the_disaggregation_lesson_with_readable_sides():
    at = AppTest.from_file(APP, default_timeout=120)
    at.query_params["lesson"] = "split-prefill-decode"
    at.run()
    at.switch_page("app_pages/learn.py")
    at.query_params["lesson"] = "split-prefill-decode"
    at.run()
    assert not at.exception and not at.error
    text = " ".join(m.value for m in at.markdown)
    assert "4 co-located replicas (TP2)" in text and "3 prefill + 1 decode (TP2)" in text


def test_sidebar_sets_each_pool_gpu_kind_from_a_hardware_preset():
    # Splitwise-HA: the decode pool's A100 is recognised as the a100-80gb preset; another preset for it runs,
    # and a kind the model cannot fit on is refused with a message naming the pool
    at = AppTest.from_file(APP, default_timeout=120)
    at.query_params["preset"] = "cluster-splitwise-llama70b-4xdgx-ha-3p1d"
    at.run()
    assert not at.exception and not at.error
    assert at.selectbox(key="w.dep.prefill_gpu").value == "same as Hardware"
    assert at.selectbox(key="w.dep.decode_gpu").value == "a100-80gb"
    assert at.query_params["preset"] == "cluster-splitwise-llama70b-4xdgx-ha-3p1d"  # untouched: still the preset
    at.selectbox(key="w.dep.decode_gpu").set_value("h200").run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert "preset" not in at.query_params  # the link now carries the edited config
    assert "H200" in " ".join(c.value for c in at.caption)
    at.selectbox(key="w.dep.decode_gpu").set_value("l4")
    at.select_slider(key="w.dep.decode_tp").set_value(1).run()
    assert not at.exception  # a 70B model on one 24 GB L4: a message naming the pool, not a traceback
    shown = " ".join(e.value for e in at.error)
    assert "decode pool" in shown, shown


def test_simulate_page_opens_replicas_with_prefix_caching():
    cfg = with_value(with_value(make_config(workload__num_requests=60), "kv_cache.enable_prefix_caching", True),
                     "workload.shared_prefix", {"num_system_prompts": 2, "share_ratio": 0.9,
                                                "system_prompt_tokens": {"dist": "fixed", "mean": 512}})  # fmt: skip
    cfg = with_value(cfg, "deployment", {"replicas": 2, "router": "prefix_affinity"})
    at = AppTest.from_file(APP, default_timeout=120)
    at.query_params["cfg"] = encode_config(cfg)
    at.run()
    assert not at.exception
    assert not at.error, [e.value for e in at.error]
    assert at.selectbox(key="w.dep.router").value == "prefix_affinity"
    # the chosen router in a sentence under the box (its help is every router's rule in full)
    from sim_core.config import ROUTER_SUMMARIES, Router

    assert ROUTER_SUMMARIES["prefix_affinity"] in [c.value for c in at.sidebar.caption]
    assert set(ROUTER_SUMMARIES) == set(Router.__args__)


def test_sidebar_keeps_and_edits_the_router_state_refresh():
    cfg = with_value(make_config(workload__num_requests=30), "deployment",
                     {"replicas": 2, "router": "least_kv", "state_refresh_s": 0.0})  # fmt: skip
    at = AppTest.from_file(APP, default_timeout=120)
    at.query_params["cfg"] = encode_config(cfg)
    at.run()
    assert not at.exception and not at.error
    assert at.number_input(key="w.dep.refresh").value == 0.0  # a link's exact routing is not reset to the default
    at.number_input(key="w.dep.refresh").set_value(1.5).run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    from app.state import decode_config

    assert decode_config(at.query_params["cfg"]).deployment.state_refresh_s == 1.5


def _captions(preset: str) -> str:
    """The Simulate page's captions on a preset, joined (it ran without an error)."""
    at = AppTest.from_file(APP, default_timeout=120)
    at.query_params["preset"] = preset
    at.run()
    assert not at.exception and not at.error
    return " ".join(c.value for c in at.caption)


def test_the_timeline_caption_counts_the_panels_a_deployment_draws():
    # a deployment draws three panels (instances, requests, KV per instance), one engine four; the caption said four
    shown = _captions("cluster-distserve-opt13b-3xa100-p2d1")
    assert "All three panels (instances, requests, KV cache per instance)" in shown and "All four panels" not in shown
    assert "diamond marks a transfer" in shown  # review 26: the new marks
    # the waits it names are the run's: DistServe's transfers queue for the link, none waits for a decode slot (the
    # caption spoke of amber where none was drawn, and not of the link's wait, which the legend showed)
    assert "waits for the link" in shown and "waits for a decode slot" not in shown
    # a decode instance runs no prefill: its rows stall behind a swap only (a review read "behind a prefill")
    assert "stalled behind a swap: decode instances run no prefill" in shown and "behind a prefill" not in shown
    one = AppTest.from_file(APP, default_timeout=120).run()
    assert "All four panels share one time axis" in " ".join(c.value for c in one.caption)
    assert "stalled behind a prefill or a swap" in " ".join(c.value for c in one.caption)


@pytest.mark.parametrize(("preset", "waits"), [("cluster-splitwise-llama70b-4xdgx-ha-3p1d", (True, True)),
                                               ("cluster-dynamo-llama70b-fp8-8xh100-3p1d", (False, True))])  # fmt: skip
def test_an_xpyd_timeline_caption_names_the_waits_its_run_had(preset, waits):
    # Splitwise-HA's decode pool fills (amber: a decode slot) and its transfers queue on the link (pale amber); Dynamo's
    # 3P1D never fills its decode pool, and its caption said "Amber: ... waits for a decode slot" with nothing amber
    # drawn (one of its 600 transfers waits for the link since vllm-v1's session-75 refit: pale amber, named)
    res = run_simulation(load_preset(preset))
    counts = kv_waits(res)
    assert tuple(n > 0 for n in counts) == waits
    shown = _captions(preset)
    assert ("its prefill is done and its KV waits" in shown, "its decode slot is reserved" in shown) == waits
    # how many of the run's requests had each mark: the legend names only the window's marks (a caption on pale amber
    # over a window without any read as a mark the chart lacked)
    R = res.summary.num_requests
    # each by the legend's label first, its colour after (a caption naming a state only by colour: an accessibility review)
    for name, n in zip(("Waiting for a decode slot (amber)", "Waiting for the KV link (pale amber)"), counts):
        if n:
            assert f"{name} ({n:,} of the run's {R:,} requests): " in shown, shown
    if counts[0]:  # Splitwise-HA's decode KV peaks at 24 % while 196 requests wait: its 256 sequences are what is full
        assert "decode slot (every decode instance's KV cache or its max_num_seqs sequences are full)" in shown
    assert "KV transfer (cyan): its KV crossing" in shown


def test_a_replicas_timeline_caption_names_only_the_marks_its_rows_have():
    # replicas' request rows name one replica and have no KV wait or transfer: the caption said P0→D0, amber and diamonds
    shown = _captions("cluster-router-2xh100-agent-pairs")
    assert "All three panels" in shown and "names the replica it ran on" in shown
    assert "on a phone 7 · R2" in shown  # the rows' narrow labels (R0, 7 · R2) are said too
    assert "P0→D0" not in shown and "decode slot" not in shown and "diamond" not in shown
    assert "stalled behind a prefill or a swap" in shown  # (replicas prefill and decode on one instance)


def _open_tab(preset: str, tab: str) -> AppTest:
    """The Simulate page on a preset, opened on one tab; it ran without an error."""
    at = AppTest.from_file(APP, default_timeout=120)
    at.query_params["preset"] = preset
    at.session_state["ui.tab"] = tab
    at.run()
    assert not at.exception and not at.error
    return at


def _busy_by_start(res) -> np.ndarray:
    busy = np.flatnonzero(res.timeline.phase != Phase.IDLE)
    return busy[np.argsort(res.timeline.t_start_s[busy], kind="stable")]


def test_step_through_in_a_deployment_goes_forward_in_time():
    # the merged rows are in the order ticks end: stepped in that order, "Busy tick 10 ... at t = 0.1410 s" was followed
    # by "Busy tick 11 ... at t = 0.1047 s" (681 of 7,742 steps of the 4-replica router preset went back, a review)
    preset = "cluster-router-4xh100-llama8b"
    res = run_simulation(load_preset(preset))
    busy = np.flatnonzero(res.timeline.phase != Phase.IDLE)
    back = int(np.flatnonzero(np.diff(res.timeline.t_start_s[busy]) < 0)[0]) + 1  # (1-based: the step before one back)
    at = _open_tab(preset, "Step through")
    starts = []
    for step in (back, back + 1):
        at.number_input(key="ui.step_index").set_value(step).run()
        line = next(m.value for m in at.markdown if m.value.startswith("**Busy tick "))
        starts.append(float(line.split(" at t = ")[1].split(" s ")[0]))
    assert starts[0] <= starts[1], starts
    assert starts == [round(float(t), 4) for t in res.timeline.t_start_s[_busy_by_start(res)[back - 1 : back + 1]]]


def test_step_through_in_a_deployment_shows_the_ticks_instance_and_its_batch():
    # the merged timeline's ticks belong to different engines: the line names the instance, its KV pool is that
    # engine's, and the batch chart is read from that engine's log (a deployment's own log is empty: it said
    # "recorded for the first 100,000 ticks" on tick 1). The tick is numbered as that engine numbers it, the tick its
    # chart draws: the merged timeline's row ("Tick 2 on prefill 0" for the dynamo 3P1D preset's first busy tick, its
    # last "Tick 2,972" under a headline of 2,736 ticks) was a number shown nowhere else.
    at = _open_tab("cluster-distserve-opt13b-3xa100-p2d1", "Step through")
    res = run_simulation(load_preset("cluster-distserve-opt13b-3xa100-p2d1"))
    for step in (1, 2):
        if step == 2:
            at.button(key="ui.step_next").click().run()
        tick = int(_busy_by_start(res)[step - 1])
        inst = res.instances[int(res.timeline.columns["instance"][tick])]
        own = int(np.count_nonzero(res.timeline.columns["instance"][:tick] == res.timeline.columns["instance"][tick]))
        t_own = inst.result.timeline.t_start_s[own]  # the engine's own row `own` is this tick
        assert t_own == res.timeline.t_start_s[tick] and inst.result.timeline.phase[own] != Phase.IDLE
        line = next(m.value for m in at.markdown if m.value.startswith("**Busy tick "))
        last = int(np.count_nonzero(res.timeline.phase != Phase.IDLE))
        assert line.startswith(f"**Busy tick {step} of {last:,}** (tick {own:,} of {inst.label}, idle ticks counted) at t = ")
        assert f"/ {inst.result.memory.num_blocks:,} blocks" in line, line
        assert not [i.value for i in at.info if "Batches are recorded" in i.value]
        b = inst.result.batches
        expected = {f"req {r}" for r in inst.request_ids[b.req[b.tick == own]]}  # deployment-wide ids, as the rows
        fig = json.loads(at.get("plotly_chart")[-1].proto.spec)
        assert expected and {x for tr in fig["data"] for x in tr["x"]} == expected


def test_compare_names_a_linked_deployment_by_its_pools_and_opens_its_gantt_on_the_window():
    # a linked deployment was described as "on 1× A100 80GB SXM", and its Gantt showed the whole run whatever
    # the "Whole run in the Gantts" toggle said
    at = AppTest.from_file(APP, default_timeout=120).run()
    at.switch_page("app_pages/compare.py")
    at.query_params["a_preset"] = "cluster-distserve-opt13b-3xa100-colocated"
    at.query_params["b_preset"] = "cluster-distserve-opt13b-3xa100-p2d1"
    at.run()
    assert not at.exception and not at.error
    setups = [m.value for m in at.markdown if "(from the link)" in m.value]
    assert len(setups) == 2 and "3 replicas" in setups[0] and "prefill" in setups[1] and "1× A100" not in " ".join(setups)
    a = run_simulation(load_preset("cluster-distserve-opt13b-3xa100-colocated"))
    window = timeline.opening_window(a)
    fig = json.loads(at.get("plotly_chart")[0].proto.spec)
    assert window is not None and fig["layout"]["xaxis"]["range"] == pytest.approx(list(window))
    at.toggle(key="cmp.whole").set_value(True).run()
    fig = json.loads(at.get("plotly_chart")[0].proto.spec)
    assert fig["layout"]["xaxis"]["range"][0] == 0


def test_the_deployment_timelines_panel_titles_fit_a_narrow_chart():
    # "Instances (8 GPUs; a row per instance, its TP group collapsed)" was clipped at 800 px; the caption says it
    res = run_simulation(load_preset("cluster-dynamo-llama70b-fp8-8xh100-3p1d"))
    fig = cluster_timeline_figure(res, 0, 30, window=timeline.opening_window(res))
    titles = [a.text for a in fig.layout.annotations]
    assert titles[:2] == ["Instances (8 GPUs)", "Requests alive in this window"] and max(map(len, titles)) <= 32


def test_sweep_names_a_deployments_gpus_in_its_base_setup():
    # it said "on A100 80GB SXM" for three A100s split into a TP2 prefill and a decode instance
    at = AppTest.from_file(APP, default_timeout=120)
    at.query_params["preset"] = "cluster-distserve-opt13b-3xa100-p2d1"
    at.run()
    at.switch_page("app_pages/sweep.py")
    at.query_params.update({"sweep": "rate", "start": "1", "stop": "2", "n": "2"})
    at.session_state["sw.steady"] = False
    at.run()
    assert not at.exception
    base = next(c.value for c in at.caption if c.value.startswith("Base setup"))
    assert "1 prefill of 2x A100 80GB SXM + 1 decode of A100 80GB SXM (3 GPUs)" in base, base


def test_sidebar_keeps_a_linked_kv_link_bandwidth_below_the_editors_step():
    # Regression: the editor's bandwidth box started at 0.1 GB/s while the config takes any bandwidth > 0, so a link
    # with 0.05 GB/s (a slow cross-site path) was clamped to 0.1 by the widget and the page ran, and re-linked, 0.1.
    cfg = with_value(make_config(workload__num_requests=20), "deployment",
                     {"disaggregation": {"link": {"bandwidth_gb_per_s": 0.05}}})  # fmt: skip
    at = AppTest.from_file(APP, default_timeout=120)
    at.query_params["cfg"] = encode_config(cfg)
    at.run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert at.number_input(key="w.dep.bw").value == 0.05
    assert at.session_state["sim.cfg"].deployment.disaggregation.link.bandwidth_gb_per_s == 0.05
    from app.state import decode_config

    assert decode_config(at.query_params["cfg"]) == cfg  # the link is the one opened


def test_requests_tab_of_a_deployment_has_one_row_per_instance_as_the_run_has():
    # The CLI printed (and wrote instances.csv) a row per instance, the app none: the router lesson asks how the requests
    # and the work split between the replicas, and the Requests tab only had the per-request instance column to count.
    from sim_core.cluster.report import instance_rows as report_rows

    at = _open_tab("cluster-router-2xh100-agent-pairs", "Requests")
    res = run_simulation(load_preset("cluster-router-2xh100-agent-pairs"))
    table = next(d.value for d in at.dataframe if "instance" in d.value.columns and "busy" in d.value.columns)
    rows = report_rows(res)
    assert table["instance"].tolist() == [r["instance"] for r in rows] == ["replica 0", "replica 1"]
    assert table["requests"].tolist() == [48, 48] == [r["requests"] for r in rows]
    assert table["busy"].tolist() == pytest.approx([100 * r["busy"] for r in rows])  # (shown as a percentage)
    assert table["prompt_tokens"].tolist() == [153_600, 9_600]  # the lesson's split, summed per instance
    one = AppTest.from_file(APP, default_timeout=120)
    one.session_state["ui.tab"] = "Requests"
    one.run()
    assert not one.exception and not [d for d in one.dataframe if "busy" in d.value.columns]  # one engine: no such table


def _back_pressured():
    """xPyD whose decode pool is short of KV blocks: hand-offs wait for a decode slot (the cluster digest's config)."""
    cfg = make_config(workload__num_requests=60, workload__arrival__rate_per_s=10.0,
                      workload__prompt_tokens={"dist": "lognormal", "mean": 1500, "min": 100, "max": 3000},
                      workload__output_tokens={"dist": "lognormal", "mean": 300, "min": 1, "max": 600})  # fmt: skip
    hw = cfg.hardware.model_dump()
    dep = {"disaggregation": {"prefill": {"replicas": 1, "hardware": hw | {"memory_gib": 19.0}},
                              "decode": {"replicas": 2, "hardware": hw | {"memory_gib": 19.5}}}}  # fmt: skip
    return run_simulation(with_value(cfg, "deployment", dep))


def _request_bars(fig) -> dict[str, list[tuple[str, float, float]]]:
    """Request-row bars per trace name: (row, start, end)."""
    out: dict[str, list[tuple[str, float, float]]] = {}
    for tr in fig.data:
        if tr.type == "bar" and tr.yaxis == "y2":
            out.setdefault(tr.name, []).extend((y, b, b + w) for y, b, w in zip(tr.y, tr.base, tr.x))
    return out


def test_a_wait_for_a_decode_slot_is_its_own_request_state_not_queue_waiting():
    # Review 26: the back-pressure wait (prefill done, KV held until a decode instance has blocks) was drawn as
    # "waiting", the grey of a request queued before its prefill, with the same legend entry and hover.
    from app.components.colors import PHASE_COLORS

    res = _back_pressured()
    wait = res.kv_transfer_start_s - res.kv_wait_start_s
    waited = np.flatnonzero(wait > 0)
    assert waited.size >= 5  # the reproducer does back-pressure
    label = timeline.request_state_label("kv wait")
    assert "decode" in label and label != "waiting"
    assert PHASE_COLORS["kv wait"] not in {c for k, c in PHASE_COLORS.items() if k != "kv wait"}  # its own colour
    ids = waited[:20]
    segs = timeline.request_segments(res, 0, 0, ids=ids, split_stalls=False)
    for r in ids.tolist():
        mine = [(s, a, b) for q, s, a, b in segs if q == r]
        assert ("kv wait", res.kv_wait_start_s[r], res.kv_transfer_start_s[r]) in mine
        assert all(s != "waiting" or b <= res.kv_wait_start_s[r] for s, a, b in mine)  # grey only before its prefill
    fig = cluster_timeline_figure(res, 0, 60)
    bars = _request_bars(fig)
    assert label in bars and "waiting" in bars
    trace = next(tr for tr in fig.data if tr.name == label and tr.type == "bar")
    assert trace.marker.color == PHASE_COLORS["kv wait"] and trace.showlegend
    assert "decode" in trace.hovertemplate and "waiting for" in trace.hovertemplate
    labels = dict(zip(range(60), request_labels(res, np.arange(60))))
    for r in waited[waited < 60].tolist():
        assert (labels[r], res.kv_wait_start_s[r], res.kv_transfer_start_s[r]) in bars[label]
        assert not any(y == labels[r] and b > res.kv_wait_start_s[r] for y, a, b in bars["waiting"])
    # the other states keep their colours
    assert {tr.name: tr.marker.color for tr in fig.data if tr.type == "bar" and tr.name in ("waiting", "prefill", "decode")} == {
        k: PHASE_COLORS[k] for k in ("waiting", "prefill", "decode")}


def test_gantt_rows_name_the_gpu_kind_when_the_pools_differ():
    # Review 26: Splitwise-HA's rows read "prefill 0 · 8 GPUs" and "decode 0 · 8 GPUs", H100s and A100s alike.
    cfg = with_value(load_preset("cluster-splitwise-llama70b-4xdgx-ha-3p1d"), "workload.num_requests", 20)
    res = run_simulation(cfg)
    assert instance_names(res) == ["prefill 0 · 8× H100", "prefill 1 · 8× H100", "prefill 2 · 8× H100", "decode 0 · 8× A100"]
    fig = cluster_timeline_figure(res, 0, 10)
    assert {y for tr in fig.data if tr.type == "bar" and tr.yaxis == "y" for y in tr.y} == set(instance_rows(res))
    hover = next(tr.hovertemplate for tr in fig.data if tr.type == "bar" and tr.yaxis == "y" and tr.y[0] == instance_rows(res)[-1])
    assert "A100 80GB SXM" in hover  # the full name on hover
    # one kind: today's labels
    assert instance_names(_disagg()) == ["prefill 0 · 2 GPUs", "prefill 1 · 2 GPUs", "decode 0 · 2 GPUs"]
    # a GPU name from a link is text, not markup (Plotly renders tags in tick labels and hovers)
    hw = load_preset("cluster-splitwise-llama70b-4xdgx-ha-3p1d").deployment.disaggregation.decode.hardware.model_dump()
    odd = run_simulation(with_value(cfg, "deployment.disaggregation.decode.hardware", hw | {"name": "<a href='x'>A100</a> <b>"}))
    assert instance_names(odd)[-1] == "decode 0 · 8× &lt;a" and instance_names(odd, narrow=True)[-1] == "D0 · 8× &lt;a"  # its first word, escaped
    fig = cluster_timeline_figure(odd, 0, 5)
    assert not any("<a" in (tr.hovertemplate or "") + (tr.name or "") for tr in fig.data)


def test_gpu_kinds_are_shortened_only_as_far_as_they_stay_distinct():
    from app.components.cluster_timeline import short_gpu_names

    assert short_gpu_names(["H100 SXM", "A100 80GB SXM"]) == {"H100 SXM": "H100", "A100 80GB SXM": "A100"}
    assert short_gpu_names(["A100 40GB SXM", "A100 80GB SXM"]) == {"A100 40GB SXM": "A100 40GB", "A100 80GB SXM": "A100 80GB"}
    assert short_gpu_names(["A100 80GB PCIe", "A100 80GB PCIe, NVLink-bridged pair"]) == {
        "A100 80GB PCIe": "A100 80GB PCIe", "A100 80GB PCIe, NVLink-bridged pair": "A100 80GB PCIe, NVLink-bridged"}
    assert short_gpu_names(["H100 SXM"]) == {"H100 SXM": "H100"} and short_gpu_names([]) == {}
    assert short_gpu_names(["X  Y", "X Y"]) == {"X  Y": "X  Y", "X Y": "X Y"}  # apart only by spacing: whole
    assert short_gpu_names(["B200 (HGX, 1000 W)", "H200 SXM"]) == {"B200 (HGX, 1000 W)": "B200", "H200 SXM": "H200"}


def test_a_kv_transfer_too_short_to_draw_gets_a_marker_with_its_true_duration():
    # Review 26: at the opening 5 s window, Splitwise-HA's 400 GB/s transfers (~0.5 ms, a tenth of a pixel) were bars
    # nobody could see or hover.
    res = run_simulation(load_preset("cluster-splitwise-llama70b-4xdgx-ha-3p1d"))
    window = timeline.opening_window(res)
    assert window is not None and window[1] - window[0] >= 2.0
    fig = cluster_timeline_figure(res, 0, 30, window=window)
    bars = [tr for tr in fig.data if tr.type == "bar" and tr.name == "kv transfer"]
    marks = [tr for tr in fig.data if tr.type == "scatter" and tr.legendgroup == "kv transfer"]
    assert bars and len(marks) == 1
    true_ms = {y: w * 1e3 for tr in bars for y, w in zip(tr.y, tr.x)}  # bars keep the true width
    m = marks[0]
    assert m.mode == "markers" and len(m.x) == sum(w < (window[1] - window[0]) * 1e3 / 200 for w in true_ms.values()) > 0
    for y, x, custom in zip(m.y, m.x, m.customdata):
        assert custom[1] == pytest.approx(true_ms[y])  # the hover gives the true duration
    assert "ms" in m.hovertemplate and "%{customdata[1]" in m.hovertemplate
    assert count_points(fig) <= MAX_TIMELINE_POINTS
    # a transfer wide enough to see is a bar only (these take ~36 us: layer-wise, only the last layer's share waits)
    assert max(true_ms.values()) < 0.1
    wide = cluster_timeline_figure(res, 0, 30, window=(window[0], window[0] + 0.002))
    assert not [tr for tr in wide.data if tr.type == "scatter" and tr.legendgroup == "kv transfer" and len(tr.x)]


@pytest.mark.parametrize("rows", [30, 60])
def test_every_request_row_gets_room_for_its_label(rows):
    # Review 26: at 30 rows Plotly labelled every other request row: a category axis shows every label only with
    # about 1.2 x the tick font size per row (plotly.js prepTicks: Lib.bigFont), and the panel had ~11 px per row.
    res = run_simulation(load_preset("cluster-splitwise-llama70b-4xdgx-ha-3p1d"))
    fig = cluster_timeline_figure(res, 0, rows, window=timeline.opening_window(res))
    shown = fig.layout.yaxis2.categoryarray
    assert len(shown) == rows
    font = fig.layout.yaxis2.tickfont.size or 12
    plot_px = fig.layout.height - fig.layout.margin.t - fig.layout.margin.b
    dom = fig.layout.yaxis2.domain
    assert plot_px * (dom[1] - dom[0]) / rows >= round(1.2 * font)
    # one tick per row, on a set range: markers on the rows (KV transfers) padded an autorange by their size, and
    # Plotly then labelled every other row again (seen in the browser at 1,400 px)
    assert tuple(fig.layout.yaxis2.range) == (rows - 0.5, -0.5) and fig.layout.yaxis2.nticks == rows


def test_simulate_page_says_prefix_affinity_without_prefix_caching_routes_as_least_outstanding():
    # Review 26: the run silently behaved as least_outstanding
    from app.components.config_form import sidebar_words
    from sim_core.cluster.report import routing_notes

    cfg = with_value(make_config(workload__num_requests=30), "deployment", {"replicas": 2, "router": "prefix_affinity"})
    at = AppTest.from_file(APP, default_timeout=120)
    at.query_params["cfg"] = encode_config(cfg)
    at.run()
    assert not at.exception and not at.error
    note = routing_notes(cfg)[0]
    shown = [c.value for c in at.caption if "least outstanding" in c.value]
    assert len(shown) == 1 and "least outstanding" in shown[0] and "kv\\_cache" not in shown[0]  # escaped as text only where needed
    assert shown[0].endswith(plain(sidebar_words(note)))  # (settings by the sidebar's labels)
    assert "(“Prefix caching” (KV cache" in shown[0]
    cfg = with_value(cfg, "kv_cache.enable_prefix_caching", True)
    at = AppTest.from_file(APP, default_timeout=120)
    at.query_params["cfg"] = encode_config(cfg)
    at.run()
    assert not [c.value for c in at.caption if "least outstanding" in c.value]


def test_one_replica_reads_singular_in_the_page_and_the_editor():
    # Review 26: "1 replicas of H100 SXM (1 GPUs)" and "1 GPUs = 1 replicas x TP 1"
    cfg = with_value(make_config(workload__num_requests=10), "deployment", {"replicas": 1})
    at = AppTest.from_file(APP, default_timeout=120)
    at.query_params["cfg"] = encode_config(cfg)
    at.run()
    assert not at.exception and not at.error
    text = " ".join(c.value for c in at.caption) + " ".join(c.value for c in at.sidebar.caption)
    assert "1 replica of H100 SXM (1 GPU)" in text and "1 GPU = 1 replica x TP 1" in text
    assert "replicas (" not in text and "1 GPUs" not in text and "1 replicas" not in text
    res = run_simulation(cfg)
    assert cluster_timeline_figure(res, 0, 5).layout.annotations[0].text == "Instances (1 GPU)"


def test_a_transfer_that_waited_for_the_link_shows_its_wait_then_its_move():
    # Issue 13: transfers share a side of the link (link.contention = fifo); a transfer behind others drew as one
    # cyan bar from its start, as if moving all along. Four prompts prefilled in one tick over a 2 GB/s link: the
    # second to fourth wait for the earlier ones' bytes, drawn pale cyan up to `kv_link_start_s`, then cyan.
    from app.components.colors import PHASE_COLORS

    cfg = with_value(make_config(workload__num_requests=4, workload__arrival__process="offline",
                                 workload__prompt_tokens={"dist": "fixed", "mean": 500, "min": 1, "max": 500},
                                 workload__output_tokens={"dist": "fixed", "mean": 5, "min": 1, "max": 5}),
                     "deployment", {"disaggregation": {"link": {"bandwidth_gb_per_s": 2.0, "layerwise_pipelining": False}}})  # fmt: skip
    res = run_simulation(cfg)
    queued = np.flatnonzero(res.kv_link_start_s > res.kv_transfer_start_s)
    assert queued.size == 3
    label = timeline.request_state_label("kv link wait")
    assert "link" in label and PHASE_COLORS["kv link wait"] not in {c for k, c in PHASE_COLORS.items() if k != "kv link wait"}
    segs = timeline.request_segments(res, 0, 0, ids=np.arange(4), split_stalls=False)
    for r in range(4):
        mine = [(s, a, b) for q, s, a, b in segs if q == r]
        start, moves, end = res.kv_transfer_start_s[r], res.kv_link_start_s[r], res.kv_transfer_end_s[r]
        assert ("kv transfer", moves, end) in mine
        assert (("kv link wait", start, moves) in mine) == (r in queued.tolist())
    fig = cluster_timeline_figure(res, 0, 4)
    bars = _request_bars(fig)
    labels = dict(zip(range(4), request_labels(res, np.arange(4))))
    assert sorted(bars[label]) == sorted((labels[r], res.kv_transfer_start_s[r], res.kv_link_start_s[r]) for r in queued.tolist())
    trace = next(tr for tr in fig.data if tr.name == label and tr.type == "bar")
    assert trace.marker.color == PHASE_COLORS["kv link wait"] and trace.showlegend and "earlier transfers" in trace.hovertemplate
    # the moving part is the transfer's bar (and a marker's span, when too short to see)
    assert sorted(bars["kv transfer"]) == sorted((labels[r], res.kv_link_start_s[r], res.kv_transfer_end_s[r]) for r in range(4))
    # the HTML timeline draws the same states from the same segments
    assert "kv link wait" in timeline.request_bars(res, np.arange(4), None)["state"].tolist()




def _unfinished_warning(preset: str, **params: str) -> str:
    """The Simulate page's warnings for a preset with link values (dotted names as keys, `__` for `.`)."""
    at = AppTest.from_file(APP, default_timeout=120)
    at.query_params["preset"] = preset
    for key, value in params.items():
        at.query_params[key.replace("__", ".")] = value
    at.run()
    assert not at.exception and not at.error
    return " ".join(w.value for w in at.warning)


def test_a_run_stuck_at_a_slow_kv_link_is_told_to_raise_the_link_not_to_add_gpus():
    # 1e-6 GB/s: no request finished, and the page said "lower the arrival rate ... add GPUs"
    text = _unfinished_warning("cluster-distserve-opt13b-3xa100-p2d1", deployment__disaggregation__link__bandwidth_gb_per_s="0.000001",
                               workload__num_requests="20")  # fmt: skip
    assert "The run did not finish" in text and "waiting for the KV link or crossing it" in text, text
    assert "deployment.disaggregation.link.bandwidth_gb_per_s" in text and "add GPUs" not in text


def test_requests_waiting_for_the_slots_a_slow_link_holds_are_the_links_too():
    # 0.001 GB/s on Dynamo's 3P1D: 160 of the 593 unfinished crossing the link (each holding its decode slot) and 320
    # prefilled and waiting for one of those slots; the page said "lower the arrival rate ... add GPUs"
    text = _unfinished_warning("cluster-dynamo-llama70b-fp8-8xh100-3p1d", deployment__disaggregation__link__bandwidth_gb_per_s="0.001")
    assert ("Of the 593 unfinished requests, 160 were waiting for the KV link or crossing it, and 320 more were "
            "prefilled and waiting for a decode slot") in text, text
    assert "deployment.disaggregation.link.bandwidth_gb_per_s" in text and "add GPUs" not in text


def test_a_run_stuck_at_its_decode_pool_is_not_told_to_raise_the_link():
    # one decode sequence at a time, stopped at 30 s: the requests wait for the decode slot its decoding request holds,
    # with the link idle; the link is not the advice
    text = _unfinished_warning("cluster-dynamo-llama70b-fp8-8xh100-3p1d", deployment__disaggregation__decode__scheduler__max_num_seqs="1",
                               limits__max_sim_time_s="30")  # fmt: skip
    assert "The run did not finish" in text and "link.bandwidth_gb_per_s" not in text, text


def test_share_and_export_offers_a_deployments_instances_csv():
    # the CLI writes instances.csv for a deployment; the page offered only config, requests and ticks
    at = _open_tab("cluster-router-2xh100-agent-pairs", "Share & export")
    labels = [e.proto.label for e in at.get("download_button")]
    assert "Instances (CSV)" in labels and "Requests (CSV)" in labels
    one = _open_tab("chat-h100-llama8b", "Share & export")
    assert "Instances (CSV)" not in [e.proto.label for e in one.get("download_button")]


def test_step_through_heads_a_tick_with_the_pickers_busy_tick_and_the_runs_own_number():
    # "Busy tick (1-8,056)" at 1 was headed "Tick 0", and in a run with idle ticks its last at "Tick 9,342": the
    # heading now says both, the picker's number first (browser review)
    at = _open_tab("trace-mooncake-h100-llama8b", "Step through")
    res = run_simulation(load_preset("trace-mooncake-h100-llama8b"))
    busy = np.flatnonzero(res.timeline.phase != Phase.IDLE)
    line = next(m.value for m in at.markdown if m.value.startswith("**Busy tick "))
    assert line.startswith(f"**Busy tick 1 of {busy.size:,}** (tick {int(busy[0]):,} of the run, idle ticks counted) at t = "), line


@given(seed=hs.integers(0, 2**32 - 1), w0=hs.floats(0.0, 9.0), width=hs.floats(0.01, 3.0), points=hs.integers(20, 200))
def test_a_reduced_line_draws_in_view_exactly_the_values_in_force_in_it(seed, w0, width, points):
    # binned over the whole run, a bin wider than the window drew in view a peak from outside it; and a point just past
    # the window, binned with the window's own, drew its value from inside it (the stop review)
    rng = np.random.default_rng(seed)
    t = np.cumsum(rng.uniform(0.001, 0.02, 2000))
    y = rng.uniform(0, 100, t.size)
    window = (w0, w0 + width)
    if t[0] > window[1]:
        return  # (nothing drawn yet in the window)
    tt, yy = timeline.reduce_series_in_view(t, y, window, points)
    assert tt.size <= points + 4
    until = np.append(tt[1:], np.inf)
    drawn = yy[(tt <= window[1]) & (until > window[0])]
    lo = max(int(np.searchsorted(t, window[0], side="right")) - 1, 0)
    true = y[lo : max(int(np.searchsorted(t, window[1], side="right")), lo + 1)]
    assert drawn.max() == true.max()


def test_each_deployment_mode_keeps_its_values_while_another_is_shown():
    # Streamlit drops a widget's state in a run that does not draw it: replicas -> one engine -> replicas opened on 2
    # replicas where 5 were set, and 3P1D with a 123 GB/s link came back as 1P1D at 50 GB/s (a review)
    at = AppTest.from_file(APP, default_timeout=120)
    at.query_params["preset"] = "chat-h100-llama8b"
    at.run()
    at.radio(key="w.dep.mode").set_value("replicas").run()
    at.number_input(key="w.dep.replicas").set_value(5).run()
    at.radio(key="w.dep.mode").set_value("one engine").run()
    at.radio(key="w.dep.mode").set_value("replicas").run()
    assert at.number_input(key="w.dep.replicas").value == 5
    assert "5 replicas" in " ".join(c.value for c in at.caption)
    at.radio(key="w.dep.mode").set_value("disaggregated").run()
    at.number_input(key="w.dep.prefill").set_value(3).run()
    at.number_input(key="w.dep.bw").set_value(123.0).run()
    at.toggle(key="w.dep.ideal").set_value(True).run()
    at.toggle(key="w.dep.ideal").set_value(False).run()  # (the bandwidth box is not drawn under an ideal link)
    at.radio(key="w.dep.mode").set_value("replicas").run()
    assert at.number_input(key="w.dep.replicas").value == 5
    at.radio(key="w.dep.mode").set_value("disaggregated").run()
    assert (at.number_input(key="w.dep.prefill").value, at.number_input(key="w.dep.bw").value) == (3, 123.0)
    assert not at.exception and not at.error
    # a new preset's values replace the kept ones
    at.selectbox(key="w.preset").set_value("cluster-router-4xh100-llama8b").run()
    assert at.radio(key="w.dep.mode").value == "replicas" and at.number_input(key="w.dep.replicas").value == 4
