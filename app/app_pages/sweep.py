"""Sweep: one knob over a range, one simulation per point and seed, optionally for two strategies
head to head. Steady-state throughput, goodput and latency percentiles against the knob (bands
across seeds); for the arrival rate, the capacity under the chosen rule is marked (an interval
across seeds)."""

from __future__ import annotations

import math

import plotly.graph_objects as go
import streamlit as st

from app.components import charts, tables, workshop
from app.components.pool_backend import PointFailed
from app.components.runner import PageBudget, points_backend
from app.components.setup_notes import calibration_difference
from app.components.sidebar import describe_where
from app.components.text import choices_hint, plain, plotly_text
from app.components.units import MISSING, fmt_number
from app.state import (
    BASE_KEY, CFG_KEY, PRESET_KEY, config_key, link_query, read_query_params, show_link_notices, write_query_params,
)  # fmt: skip
from sim_core import PresetError, SimConfig, list_presets
from sim_core.backend import PointCache, SearchCancelled, default_cache_dir
from sim_core.cluster.knobs import prefill_instances_bounds
from sim_core.inputs import parse_float_text, parse_int_text
from sim_core.metrics import LOOKS_OVERLOADED_NOTE, OVERLOADED_NOTE, UNFINISHED_NOTE, no_value_reason, says_overloaded, steady_exclusion_text
from sim_core.planner import saturation_config
from sim_core.presets import read_preset_data
from sim_core.sweep import (
    CAPACITY_REL_TOL,
    DISTSERVE_ATTAINMENT,
    RATE_SWEEP_PAST_SATURATION,
    SWEEP_KNOBS,
    CapacityObjective,
    SweepPoint,
    band,
    capacity_from_sweep,
    check_range,
    completion_rate_per_s,
    default_range,
    fell_behind,
    knob_bounds,
    knob_name,
    knob_value,
    point_metric,
    rate_applies,
    rounded_points_note,
    run_fell_behind,
    run_sweep,
    shown_field,
    single_value,
    steady_run_length,
    steady_warmup_s,
    sweep_values,
    window_completion,
)

MAX_POINTS = 16
MAX_SEEDS = 5
# Capacity rules: the named percentile of TTFT and TPOT within the SLOs (serving benchmarks) or DistServe's attainment.
RULES = {"P99": CapacityObjective(percentile=99), "P90": CapacityObjective(percentile=90),
         "P50": CapacityObjective(percentile=50),
         f"≥ {DISTSERVE_ATTAINMENT * 100:g} % meet both": CapacityObjective(rule="attainment")}  # fmt: skip
NO_ENGINE = "(none)"
# sprintf-js (Streamlit's number formats): "%g" without a precision prints the whole float (200.00050000000002)
VALUE_FORMAT = "%.6g"
# (config, its saturation rate) behind the rate range's default, for the help of 'To' on the page's later runs
SATURATION_KEY = "sw.saturation"


def _with_engine(cfg: SimConfig, engine: str) -> SimConfig:
    from sim_core.presets import apply_part

    return apply_part(cfg, "engines", engine)


def link_range(params: dict[str, str], knob: str, current: float, cfg: SimConfig | None = None,
               saturation_per_s: float | None = None) -> tuple[float, float, int, str | None]:  # fmt: skip
    """(start, stop, points, warning) from the link's start/stop/n, or defaults around the current
    value (the rate: `default_rate_range`, past the saturation rate when it is known) with a warning naming
    what was wrong (not a number, out of the knob's range, reversed)."""
    try:  # (a link's point count, when usable, sets the default range's round steps: n=5 got 8 points' steps)
        n_link = parse_int_text(params["n"]) if "n" in params else 8
    except ValueError:
        n_link = 8
    points = n_link if 2 <= n_link <= MAX_POINTS else 8
    start_d, stop_d = default_range(knob, current, saturation_per_s, points, cfg=cfg)
    # (a whole-number knob over a short range: as many points as values, not 8 rounded to them, which the page then
    # explained: the P:D split of 1-3 prefill instances opened on 8 points)
    defaults = (start_d, stop_d, max(2, min(8, int(stop_d - start_d) + 1)) if SWEEP_KNOBS[knob][2] else 8)
    if not {"start", "stop", "n"} & set(params):
        return *defaults, None
    # Every problem named, not the first alone (?start=abc&n=99 named start, and n's 99 was replaced without a word);
    # read as numbers: an integer knob's 1.5 is named by check_range with the knob, as the CLI's --start is
    problems: list[str] = []
    values = []
    for name, parse, default in (("start", parse_float_text, start_d), ("stop", parse_float_text, stop_d),
                                 ("n", parse_int_text, 8)):  # fmt: skip
        try:
            values.append(_link_number(params, name, parse, default))
        except ValueError as err:
            problems.append(str(err))
            values.append(None)
    start, stop, n = values
    if n is not None and not 2 <= n <= MAX_POINTS:
        problems.append(f"n = {n}: n must be 2 to {MAX_POINTS}")
    if start is not None and stop is not None:
        try:
            check_range(knob, start, stop, cfg)  # each problem names the parameter and its value
        except ValueError as err:
            problems.append(str(err))
    if problems:
        return *defaults, f"The sweep link's start, stop or n cannot be used ({'; '.join(problems)}); using defaults."
    return start, stop, n, None


def _link_number(params: dict[str, str], name: str, parse, default: float) -> float:
    """The link's `name` read by `parse`, or `default` when the link has none; a ValueError names the parameter
    (?start=abc said only "'abc' is not a number", not which of start, stop or n it was)."""
    if name not in params:
        return default
    try:
        return parse(params[name])
    except ValueError as err:
        raise ValueError(f"{name}: {err}") from None


def _saturation_per_s(cfg: SimConfig, page: PageBudget) -> float | None:
    """The setup's saturation rate (an offline run's completion rate: the planner's probe, cached like any run),
    for a default rate range that reaches the knee; None when the probe cannot run or say."""
    try:
        probe = saturation_config(cfg)
    except PresetError:
        return None
    with st.spinner("Finding where this setup saturates…"):
        out = page.run(probe)
    return completion_rate_per_s(out.result) if out.result is not None else None


def _run(cfg: SimConfig, knob: str, values: list[float], bar, offset: int, total: int, seeds: int = 1,
         steady: bool = False, page: PageBudget | None = None) -> list[SweepPoint]:
    """The sweep on the default backend (a local process pool, or Ray when RAY_ADDRESS is set); finished
    points come from / go to the bounded on-disk cache, so leaving the page mid-sweep loses nothing.
    Each run is under the server's budget and the whole page view under its page budget (`page`)."""

    def progress(done: int, _: int) -> None:
        bar.progress((offset + done) / total, text=f"{knob}: {offset + done}/{total} runs")

    with points_backend() as backend:
        return run_sweep(cfg, knob, values, progress, num_seeds=seeds, backend=backend, cache=PointCache(default_cache_dir()),
                         steady_length=steady, cancelled=page.exhausted if page else None,
                         budget=page.run_budget if page else None)  # fmt: skip


def _steady(field: str) -> str:
    """Steady-window version of a Summary field (warm-up and drain excluded)."""
    return f"steady.{field}"


def _band_trace(x, lo, hi, color: str, group: str, fig: go.Figure) -> None:
    """The min-max band across seeds: a filled polygon under the median line."""
    fig.add_trace(go.Scatter(x=list(x) + list(x)[::-1], y=list(hi) + list(lo)[::-1], fill="toself", fillcolor=color,
                             opacity=0.18, line=dict(width=0), hoverinfo="skip", showlegend=False, legendgroup=group))  # fmt: skip


UNSETTLED_LEGEND = "open: no steady state (note above)"  # (the notes are drawn above the charts)
SWEEP_PANEL_TITLES = ("Throughput (tok/s)", "Goodput (req/s)", "Latency (ms, log)")
# Each panel's series: (Summary field, scale, dash, name); one figure per panel
SWEEP_SERIES = (
    (("steady.output_tokens_per_s", 1, "solid", "throughput"),),
    (("steady.goodput_requests_per_s", 1, "solid", "goodput"),),
    (("steady.ttft_p50_s", 1e3, "dot", "TTFT p50"), ("steady.ttft_p99_s", 1e3, "solid", "TTFT p99"),
     ("steady.tpot_p99_s", 1e3, "dash", "TPOT p99")),
)
# The capacity line's dash: its legend sample is ~30 px, where "longdash" drew one short stroke that read as a solid
# line; dash-dot shows its pattern there and is none of the series' styles (solid, dot, dash)
CAPACITY_DASH = "dashdot"
SWEEP_FIGURE_HEIGHT_PX = 440
SWEEP_MARGIN_PX = (40, 170)  # top (the title), bottom (tick labels, the axis title, up to five legend rows: a point without a steady state adds one)
SWEEP_AXIS_TITLE_PX = 48  # tick labels and the axis title, under the plot


def sweep_figures(curves: dict[str, list[SweepPoint]], knob: str,
                  capacities: dict[str, tuple[float | None, float | None, bool]], behind: frozenset[int] = frozenset(),
                  total_instances: int | None = None, slo_s: tuple[float, float] | None = None) -> list[go.Figure]:
    """Steady-state throughput, goodput and latency percentiles against the knob, one figure each (median across
    seeds, min-max band when repeated); `capacities` maps a setup to (lowest, highest capacity across seeds, whether a
    swept point beyond it failed the objectives); `behind`: the ids of the points that fell behind (their whole runs'
    figures, `sweep.shown_field`); `total_instances`: P + D of a P:D split sweep, whose ticks name each split (3P1D);
    `slo_s`: the (TTFT, TPOT) objectives, drawn across the latency panel where its curves cross them.

    One figure per metric, each with its own axes, title and legend: three panels of one figure shared its width and
    height, ~87 px wide each on a 390-px phone (page columns put them side by side on a wide page and stack them on
    a narrow one, each the page's width)."""
    label = SWEEP_KNOBS[knob][1]
    palette = ("#1A73E8", "#E8710A")
    values = [p.value for pts in curves.values() for p in pts]
    whole = SWEEP_KNOBS[knob][2] and values and max(values) - min(values) <= 10  # whole instances, not 1.5 (auto ticks)
    figs = []
    plot_px = SWEEP_FIGURE_HEIGHT_PX - sum(SWEEP_MARGIN_PX)
    for title, series in zip(SWEEP_PANEL_TITLES, SWEEP_SERIES):
        fig = go.Figure()
        # A short legend (one colour square per setup, then the line styles in grey) that wraps on a phone: one entry
        # per setup and series overlapped the axis titles at 390 px and scrolled
        for (name, pts), color in zip(curves.items(), palette):
            ok = [p for p in pts if p.summary is not None and p.summary.steady is not None]
            x = [p.value for p in ok]
            shown = plotly_text(name)  # a scheduler name from a link: Plotly would render its HTML
            fig.add_trace(go.Scatter(x=[None], y=[None], mode="markers", marker=dict(color=color, symbol="square", size=11),
                                     name=shown, legendgroup=name))  # fmt: skip
            # a point whose run cannot settle (its window's note) open, not filled; one that fell behind at its whole
            # run's figures (`sweep.shown_field`)
            symbols = ["circle-open" if p.summary.steady.note or id(p) in behind else "circle" for p in ok]
            for field, scale, dash, what in series:
                bands = [band([v * scale for v in point_metric(p, shown_field(field.removeprefix("steady."), id(p) in behind))])
                         for p in ok]  # fmt: skip
                lo, mid, hi = ([b[i] for b in bands] for i in range(3))
                if any(len(p.seeds) > 1 for p in ok):
                    _band_trace(x, lo, hi, color, name, fig)
                fig.add_trace(go.Scatter(x=x, y=mid, mode="lines+markers", name=f"{shown} {what}", showlegend=False,
                                         line=dict(color=color, dash=dash), legendgroup=name,
                                         marker=dict(symbol=symbols, size=8, line=dict(width=1.5, color=color))))  # fmt: skip
            cap_lo = capacities.get(name, (None,))[0]
            if cap_lo is not None:
                fig.add_vline(x=cap_lo, line=dict(color=color, dash=CAPACITY_DASH, width=1.5))
        styles = [(dash, what, 2) for _, _, dash, what in series] if len(series) > 1 else []
        if behind or any(p.summary is not None and p.summary.steady is not None and p.summary.steady.note
                         for pts in curves.values() for p in pts):  # fmt: skip
            fig.add_trace(go.Scatter(x=[None], y=[None], mode="markers", name=UNSETTLED_LEGEND,
                                     marker=dict(symbol="circle-open", size=9, color="#5F6368", line=dict(width=1.5))))  # fmt: skip
        if any(c[0] is not None for c in capacities.values()):
            styles.append((CAPACITY_DASH, "capacity (vertical)", 1.5))
        for dash, what, width in styles:
            fig.add_trace(go.Scatter(x=[None], y=[None], mode="lines", line=dict(color="#5F6368", dash=dash, width=width),
                                     name=what))  # fmt: skip
        fig.update_xaxes(title_text=label, title_standoff=6)
        if knob == "prefill_instances" and total_instances:  # (each split by name: "3" alone left D to work out)
            fig.update_xaxes(**charts.split_ticks(values, total_instances))
        elif whole:
            fig.update_xaxes(dtick=1)
        if title == SWEEP_PANEL_TITLES[-1] and slo_s is not None and values:
            # The objectives as lines labelled on a white ground, not legend rows (the legend's margin holds five):
            # where a curve crosses one is where its percentile misses. A line trace, not add_hline (the
            # log axis takes log10 coordinates); darker than the gridlines, which 100 ms sits on.
            # Each label at the end and side of its line with the fewest plotted points under it (TTFT's above its line
            # and TPOT's below first: at the low end TTFT's percentiles sit just above the TPOT line; a review found the
            # TPOT label over the TTFT p50 markers there). Thin, solid and near-black, as the Latency tab marks an SLO:
            # dotted they read as the TTFT p50 series (and dashed as TPOT p99's), whose legend samples are grey.
            plotted = [(x, y) for tr in fig.data if tr.y is not None for x, y in zip(tr.x, tr.y)]
            line_x = (min(values), max(values))
            for what, slo, first in zip(("TTFT", "TPOT"), slo_s, ("bottom", "top")):
                other = "top" if first == "bottom" else "bottom"
                end, side = charts.line_label_place(plotted, slo * 1e3, ((0, first), (1, first), (0, other), (1, other)))
                fig.add_trace(go.Scatter(x=list(line_x), y=[slo * 1e3] * 2, mode="lines", name=f"{what} SLO",
                                         showlegend=False, line=dict(color="#202124", width=1), hoverinfo="skip"))  # fmt: skip
                fig.add_annotation(x=line_x[end], y=math.log10(slo * 1e3), xanchor=("left", "right")[end], yanchor=side,
                                   showarrow=False, text=f"{what} SLO {fmt_number(slo * 1e3)} ms",
                                   font=dict(size=10, color="#3C4043"), bgcolor="rgba(255,255,255,0.85)", borderpad=1)  # fmt: skip
                # (the label's place as a point: the next label keeps off it)
                plotted.append((line_x[end], slo * 1e3 * (1.2 if side == "bottom" else 1 / 1.2)))
        if title == SWEEP_PANEL_TITLES[-1]:  # latency: a log ladder
            fig.update_yaxes(**charts.log_ladder_axis([y for tr in fig.data if tr.y is not None for y in tr.y]))
        else:  # rates from zero: a flat line's autorange read goodput from -0.5 to 1, throughput from 644 to 645.5
            fig.update_yaxes(rangemode="tozero")
        # The legend in a bottom margin of the same height in every figure, room for its rows at a phone's width: the three
        # plots are as tall as each other (their axes level, side by side on a wide page), the latency one's longer
        # legend does not take its height (a legend larger than the margin would push it, taking some)
        fig.update_layout(title=dict(text=title, font_size=14), height=SWEEP_FIGURE_HEIGHT_PX,
                          margin=dict(l=10, r=10, t=SWEEP_MARGIN_PX[0], b=SWEEP_MARGIN_PX[1]),
                          legend=dict(orientation="h", x=0, y=-SWEEP_AXIS_TITLE_PX / plot_px, yanchor="top", tracegroupgap=0))  # fmt: skip
        figs.append(charts.readable_numbers(fig))
    return figs


def _total_instances(cfg: SimConfig, knob: str) -> int | None:
    """P + D of the deployment a sweep of the P:D split keeps fixed (`cluster.knobs`' range), else None."""
    if knob != "prefill_instances":
        return None
    try:
        return prefill_instances_bounds(cfg)[1] + 1
    except PresetError:  # (no disaggregated deployment: the page says so above)
        return None


def _load_text(cfg: SimConfig) -> str:
    """The base setup's load, for the caption of a sweep of another knob (a knob swept at a load where it never binds
    draws flat lines: 8 req/s on the default scenario, where max_num_seqs 128-512 all serve 8.49 req/s)."""
    arrival = cfg.workload.arrival
    if arrival.process in ("offline", "closed_loop") or cfg.workload.trace is not None:
        return ""
    return f", at {fmt_number(arrival.rate_per_s)} req/s"


def _settles_text(p: SweepPoint, behind: frozenset[int] = frozenset()) -> str:
    """Whether a point's run has a steady state its figures stand for, in a word or two (the table's column; the
    reason in full is the note above the charts). `behind`: ids of the points that fell behind (`sweep.fell_behind`)."""
    note = p.summary.steady.note if p.summary is not None and p.summary.steady is not None else None
    if p.summary is None or p.summary.steady is None:
        return "none"
    if not note:
        return "no: fell behind" if id(p) in behind else "yes"
    # (metrics._steady_note's kinds: overloaded, requests unfinished at the run's end, a window too short, and too
    # short but its queue grew across the window)
    return ("no: overloaded" if note.startswith(OVERLOADED_NOTE) else "no: unfinished" if note.startswith(UNFINISHED_NOTE)
            else "no: looks overloaded" if note.startswith(LOOKS_OVERLOADED_NOTE) else "no: too short")  # fmt: skip


def _steady_metric(p: SweepPoint, field: str, behind: frozenset[int] = frozenset()) -> float:
    """A point's figure as the table and the charts show it (its first seed's): its steady window's, or its whole run's
    where it fell behind (`behind`: ids of such points, `sweep.shown_field`); NaN when it has no steady window."""
    if p.summary is None or p.summary.steady is None:
        return float("nan")
    return point_metric(p, shown_field(field, id(p) in behind))[0]


# The table's latency columns and the metric each is of (no_value_reason's names)
LATENCY_COLUMNS = {"TTFT p99": ("ttft_p99_s", "TTFT"), "TPOT p99": ("tpot_p99_s", "TPOT")}


def missing_values_sentence(curves: dict[str, list[SweepPoint]], knob: str, behind: frozenset[int] = frozenset()) -> str | None:
    """Why a latency cell of the table reads "–" at a point that has a steady window (one-token outputs have no TPOT;
    no request finished in the window), in a sentence; None when none does. (A point without a steady window or
    without a result is said above the table.)"""
    where: dict[tuple[str, str], list[str]] = {}
    for name, pts in curves.items():
        for p in pts:
            window = p.summary.steady if p.summary is not None else None
            if window is None:
                continue
            if id(p) in behind:  # (its figures are the whole run's: `sweep.shown_field`)
                window = p.summary
            for column, (field, metric) in LATENCY_COLUMNS.items():
                if math.isnan(getattr(window, field)):
                    at = f"{p.value:g}" if len(curves) == 1 else f"{p.value:g} ({name})"
                    where.setdefault((column, no_value_reason(metric, window.num_finished)), []).append(at)
    if not where:
        return None
    return "; ".join(f"{MISSING} in {column} at {knob} = {', '.join(at)}: {why}" for (column, why), at in where.items()) + "."


def most_goodput_sentence(curves: dict[str, list[SweepPoint]], knob: str, behind: frozenset[int] = frozenset()) -> str:
    """The answer of a sweep of a knob other than the rate, in a sentence that wraps (Markdown): for each setup, the
    swept value with the most goodput and its latencies (the phone's table opens on a few columns)."""
    said = []
    for name, pts in curves.items():
        goodput = {p.value: _steady_metric(p, "goodput_requests_per_s", behind) for p in pts}
        valued = [p for p in pts if not math.isnan(goodput[p.value])]
        # the settled points when there are any: a run that cannot settle reads more goodput than it has (the router
        # preset's 3 replicas, 58 req/s in a window where 9 finished, beside 8 replicas' 60)
        ok = [p for p in valued if not p.summary.steady.note and id(p) not in behind] or valued
        best = max(ok, key=lambda p: goodput[p.value], default=None)
        if best is None or goodput[best.value] <= 0:
            said.append(f"**{plain(name)}**: no swept value served a request within the SLOs")
            continue
        # (a knob past where it binds gives the same runs: max_num_seqs = 96, 176 and 256 all served 8.49 req/s, and
        # naming 96 alone read as if 96 were the best setting)
        same = [f"{p.value:g}" for p in ok if p is not best and goodput[p.value] == goodput[best.value]]
        if len(valued) > 1 and all(goodput[p.value] == goodput[best.value] for p in valued):  # (the knob never binds)
            if all(id(p) in behind or says_overloaded(p.summary.steady.note) for p in valued):
                # (kv-pressure-a100-llama8b's max_num_seqs: overloaded at every value, its KV the limit, and the
                # sentence said the knob "does not bind; raise the arrival rate")
                said.append(f"**{plain(name)}**: overloaded at every swept value (fewer requests finish than arrive), each "
                            f"serving {fmt_number(goodput[best.value])} req/s within the SLOs: {knob} does not relieve it "
                            "at this load; lower the arrival rate (Workload) or add capacity")  # fmt: skip
                continue
            said.append(f"**{plain(name)}**: every swept value serves the same {fmt_number(goodput[best.value])} req/s "
                        f"within the SLOs: at this load {knob} does not bind; raise the arrival rate (Workload) to see "
                        "where it does")  # fmt: skip
            continue
        # (a window with a note is a run too short to settle: its goodput is that run's, which a longer run can lower)
        short = (" in a run that fell behind its arrivals (its whole run's)" if id(best) in behind
                 else " in a run too short to settle" if best.summary.steady.note else "")  # fmt: skip
        said.append(f"**{plain(name)}**: most goodput at {knob} = {best.value:g}"
                    + (f" (the same at {', '.join(same)})" if same else "")
                    + f", {fmt_number(goodput[best.value])} req/s{short} (TTFT p99 {fmt_number(_steady_metric(best, 'ttft_p99_s', behind) * 1e3)} "
                    f"ms, TPOT p99 {fmt_number(_steady_metric(best, 'tpot_p99_s', behind) * 1e3)} ms)")  # fmt: skip
    return " · ".join(said) + "."


# The columns the table opens on, px (a phone's box is ~356): the knob's value, goodput and the latencies, the units in
# the cells so the headers stay short, each wide enough for its longest likely value ("10.67", "999.9 req/s",
# "999,999 ms": a right-aligned number too wide for its cell loses its first digits, 50.50 req/s read "50 req/s", and a
# name too long for its cell is cut without an ellipsis); head to head the setup too, "Sarathi-Serve" whole (a longer
# name is cut: the sentence above the table names each in full). "All columns" adds
# the rest (throughput, plotted above; requests finished; why a run stopped); the data is the same either way.
COMPACT_SWEEP_COLUMNS = {"knob": 60, "goodput req/s": 84, "TTFT p99 (ms)": 84, "TPOT p99 (ms)": 76}
COMPACT_SWEEP_COLUMNS_VS = {"setup": 86, "knob": 48, "goodput req/s": 72, "TTFT p99 (ms)": 74, "TPOT p99 (ms)": 70}
# The knob's value in the compact view: four significant digits (a rate range of 4-24 in 4 points, 10.6667, filled its
# 48 px); all columns, six, as the From and To inputs write them
COMPACT_VALUE_FORMAT = "%.4g"
# The knob's column header, short enough for its ~50 px ("max_num_seqs" read "max_nu"); its help has the knob's label.
# Where a word and a unit do not both fit, the unit: "rate" and "chunk" said which knob (the page says so above the
# table) but not in what, beside goodput in req/s; head to head the column's 48 px leave a header 40 px of text
# (tests/app/test_browser.py measures them)
KNOB_HEADERS = {"rate": "req/s", "max_num_seqs": "batch", "chunk": "tokens", "memory_gib": "GiB", "bandwidth": "GB/s",
                "tflops": "TFLOP/s", "num_gpus": "GPUs", "kv_compression": "KV kept", "replicas": "replicas",
                "prefill_instances": "prefill"}  # fmt: skip
# Head to head, the headers above that pass those 40 px (Chromium at 14 px: "TFLOP/s" 48, "replicas" 46, "KV kept" 44;
# each read cut on a phone, "TFLOP/" and "replica") in the shortest form that still says the unit or the thing
# counted; the single-setup column's 60 px (52 of text) hold the full ones. The help names the knob in full either way.
KNOB_HEADERS_HEAD_TO_HEAD = KNOB_HEADERS | {"tflops": "TF/s", "kv_compression": "kept", "replicas": "repl."}


@st.fragment
def _results_table(rows: list[dict], knob: str, head_to_head: bool) -> None:
    """A fragment: the "All columns" toggle redraws the table of the same sweep, not the page (its sweep)."""
    all_columns = tables.all_columns_toggle("sw.all_columns", "Throughput, whether each run settles, requests finished, why a run stopped")
    compact = COMPACT_SWEEP_COLUMNS_VS if head_to_head else COMPACT_SWEEP_COLUMNS
    num = st.column_config.NumberColumn
    # thousands separators (an overloaded point's TTFT p99 read 466455.2 ms); a point without a result: "–", not "None"
    tables.dataframe(rows, key="sw.table", placeholder=MISSING, all_columns=all_columns,
                     compact_px={knob if k == "knob" else k: px for k, px in compact.items()}, column_config={
        "setup": st.column_config.TextColumn(),
        knob: num((KNOB_HEADERS_HEAD_TO_HEAD if head_to_head else KNOB_HEADERS).get(knob, knob),
                  format=VALUE_FORMAT if all_columns else COMPACT_VALUE_FORMAT,
                  help=f"{knob}: {SWEEP_KNOBS[knob][1]}"),
        "output tok/s": num("throughput", format="%,.0f tok/s", help="Output tokens per second, steady state"),
        "goodput req/s": num("goodput", format="%,.1f req/s", help="Requests meeting both SLOs per second, steady state"),
        "TTFT p99 (ms)": num("TTFT p99", format="%,.0f ms", help="Time to first token, 99th percentile, steady state"),
        "TPOT p99 (ms)": num("TPOT p99", format="%,.1f ms", help="Time per output token, 99th percentile, steady state"),
        "steady state": st.column_config.TextColumn(help="Whether the run settles: its figures are a steady state's "
                                                     "(open markers in the charts: they are not)"),
        "finished": num(format="localized", help="Requests finished in the run"),
        "stopped": st.column_config.TextColumn(help="Why the run ended before its last request finished (in full under the table)"),
    })  # fmt: skip


# The sweep's own address parameters, and the last ones this page wrote with the settings they were for: Streamlit
# clears the address and this page's widgets on the way to another page, and a sweep of 50-65 req/s in 4 points came
# back as the default 12-117 in 8 (a review)
SWEEP_PARAMS = ("sweep", "start", "stop", "n", "vs", "seeds")
KEPT_KEY = "sw.kept"


def main() -> None:
    workshop.page_title("Sweep a knob")
    cfg: SimConfig = st.session_state[CFG_KEY]
    params = read_query_params()
    kept = st.session_state.get(KEPT_KEY)
    if kept is not None and kept[0] == config_key(cfg) and not any(k in params for k in SWEEP_PARAMS):
        params = {**params, **kept[1]}  # (back on the page, the settings unchanged: the sweep it left)
    knobs = list(SWEEP_KNOBS)
    problems = []
    linked = params.get("sweep")
    linked = knob_name(linked) if linked is not None else None  # (a link saved under a knob's older name)
    if "sw.knob" not in st.session_state:
        wanted = linked
        if wanted is not None and wanted not in knobs:
            problems.append(f"The link names an unknown sweep knob {wanted[:40]!r}{choices_hint(wanted, knobs)}; sweeping the "
                            "arrival rate.")  # fmt: skip
        st.session_state["sw.knob"] = wanted if wanted in knobs else "rate"
    c1, c2, c3, c4 = st.columns([2, 1, 1, 1])
    knob = c1.selectbox("Knob", knobs, key="sw.knob", format_func=lambda k: SWEEP_KNOBS[k][1])
    _, _, is_int = SWEEP_KNOBS[knob]
    current = knob_value(cfg, knob)
    try:
        lo, hi = knob_bounds(knob, cfg)
        if (one := single_value(knob, cfg)) is not None:  # (1P1D's P:D knob: From and To both pinned at 1)
            raise PresetError(one.removesuffix("."))
    except PresetError as err:  # said once, not as a warning per point
        show_link_notices(("sweep", "start", "stop", "n", "vs", "seeds"), problems=tuple(problems))
        # (a knob both pools of a disaggregated deployment set is changed there: it was said to be the arrival process)
        where = {"rate": "Workload: Arrival process", "replicas": "Serving: replicas"}.get(knob, "Serving: disaggregated")
        st.error(plain(f"{err} ({where}, in Simulate's sidebar)."))
        return
    page = PageBudget()  # a link cannot make this page run 32 (or 160) simulations past the server's budget
    # The link's start, stop and n are its knob's (the page writes them with `sweep`): another knob picked in the page
    # takes its own defaults (a rate sweep's start = 0.5 was read as the token budget's, "cannot be used", unasked)
    if (linked or "rate") != knob:
        params = {k: v for k, v in params.items() if k not in ("start", "stop", "n")}
    saturation = None
    # (a link whose start and stop cannot be used opens on the default range too, which reads the saturation rate:
    # ?start=-5&stop=1e9 swept 2-16 where the page with no link sweeps 2-30, past this setup's capacity of 18)
    unusable = knob == "rate" and link_range(params, knob, float(current), cfg, None)[3] is not None
    if knob == "rate" and (not {"start", "stop"} <= set(params) or unusable) and f"sw.start.{knob}" not in st.session_state:
        # (only for the range's first default: the widgets keep theirs; a link with start alone takes the default stop)
        saturation = _saturation_per_s(cfg, page)
        st.session_state[SATURATION_KEY] = (cfg, saturation)
    elif knob == "rate" and st.session_state.get(SATURATION_KEY, (None,))[0] == cfg:
        # the range's widgets still hold the default it set: 'To' keeps saying why (its help went with the first
        # interaction, when the page wrote start and stop into the link and the widgets had values of their own)
        saturation = st.session_state[SATURATION_KEY][1]
    start_default, stop_default, n_default, warning = link_range(params, knob, float(current), cfg, saturation)
    if warning and f"sw.start.{knob}" not in st.session_state:
        problems.append(warning)
    vs_default = params.get("vs", NO_ENGINE)
    engines = [NO_ENGINE, *list_presets("engines")]
    if vs_default not in engines and "sw.vs" not in st.session_state:
        problems.append(f"The link names an unknown engine {vs_default[:40]!r} to compare"
                        f"{choices_hint(vs_default, engines[1:], 'the list Also sweep this strategy')}; none chosen.")
    if "seeds" in params and "sw.seeds" not in st.session_state:
        # (lesson 15 sends the room to "Sweep with the rate knob and 3 seeds", which no link could set)
        try:
            seeds_link = int(_link_number(params, "seeds", parse_int_text, 1))
            if not 1 <= seeds_link <= MAX_SEEDS:
                raise ValueError(f"seeds = {seeds_link}: out of range; allowed: 1 to {MAX_SEEDS}")
            st.session_state["sw.seeds"] = seeds_link
        except ValueError as err:
            problems.append(f"The link's {err}; running 1 seed.")
    show_link_notices(("sweep", "start", "stop", "n", "vs", "seeds"), problems=tuple(problems))
    num = int if is_int else float  # integer knobs get integer widgets
    # six significant digits, as the link writes them: the default "%0.2f" showed a 0.001 req/s start as 0.00
    fmt = None if is_int else VALUE_FORMAT
    start = c2.number_input("From", value=num(start_default), min_value=num(lo), max_value=num(hi), key=f"sw.start.{knob}", format=fmt)
    stop = c3.number_input("To", value=num(stop_default), min_value=num(lo), max_value=num(hi), key=f"sw.stop.{knob}", format=fmt,
                           help=None if saturation is None else f"This setup completes at most {fmt_number(saturation)} req/s with every "
                           f"request queued (an offline run): the range first runs to {RATE_SWEEP_PAST_SATURATION:g}× that, "
                           "past the knee.")  # fmt: skip
    n = c4.number_input("Points", 2, MAX_POINTS, min(max(n_default, 2), MAX_POINTS), key="sw.n")
    r1, r2 = st.columns([1, 1])
    rule = r1.selectbox("Capacity rule", list(RULES), key="sw.rule",
                        help="Serving benchmarks: the named percentile of TTFT and of TPOT within the SLOs, over the "
                        "steady-state window. DistServe: that share of requests meets both.")  # fmt: skip
    seeds = int(r2.number_input("Seeds", 1, MAX_SEEDS, key="sw.seeds",  # (its default is 1, the least: a link may set it)
                                help="Repeat every point with this many seeds: the charts draw the min–max band, "
                                "capacity becomes an interval."))  # fmt: skip
    objective = RULES[rule]
    # Another knob's points run the current length unless asked: a replica sweep of the router preset's 400 requests
    # settles at no point (they arrive in 7 s); its steady length, 38,280 requests a point, is slower but says it.
    steady = rate_applies(cfg) and st.toggle(  # (a toggle, as Compare's of the same name)
        "Steady-state run length", value=knob == "rate", key="sw.steady" if knob == "rate" else "sw.steady_other",
        help=f"Each {'rate' if knob == 'rate' else 'point'} runs long enough that a 4× longer run moves the capacity by "
        f"< 5 % (a warm-up of {steady_warmup_s(cfg):,.0f} s for this traffic and these SLOs, then 8× that: "
        f"{steady_run_length(cfg, cfg.workload.arrival.rate_per_s):,} requests at the current rate), instead of the "
        f"current {cfg.workload.num_requests:,} requests.")  # fmt: skip
    vs = st.selectbox("Also sweep this strategy (head to head)", engines, index=engines.index(vs_default) if vs_default in engines else 0,
                      key="sw.vs", format_func=lambda e: e if e == NO_ENGINE else read_preset_data("engines", e)["scheduler"]["name"])  # fmt: skip
    # (capacity is a rate sweep's answer: beside another knob's it defined a figure the page does not give; the rule
    # still says there when a point has fallen behind)
    rule_said = (f"Capacity = the highest swept rate at which {objective.describe(cfg)}" if knob == "rate" else
                 f"A point has fallen behind when its window misses the rule: {objective.describe(cfg)}")  # fmt: skip
    st.caption(f"Base setup: the current settings ({plain(cfg.scheduler.name)}, {plain(cfg.model.name)} on "
               f"{plain(describe_where(cfg))}{_load_text(cfg)}; change them in Simulate). "
               f"{rule_said} (requests by arrival but the "
               f"{steady_exclusion_text()}; throughput and goodput over that window's span, not the makespan; a point that fell behind "
               "shows its whole run). Throughput counts output tokens; goodput, requests meeting the SLOs.")  # fmt: skip
    if stop <= start:
        st.error(f"'To' ({stop:g}) must be larger than 'From' ({start:g}).")
        return
    try:
        values = sweep_values(knob, start, stop, int(n), cfg)
    except PresetError as err:  # (GPUs: a range holding no TP degree the model's heads split evenly over)
        st.error(plain(err))
        return
    if (note := rounded_points_note(knob, start, stop, int(n), values)) is not None:
        st.caption(plain(note + "."))  # (python -m sim_core sweep prints the same NOTE)
    # (readable against the preset the settings came from, as Simulate's and Compare's: without it a link of
    # ?preset=…&scheduler.max_num_seqs=64 was rewritten as an opaque ?cfg=…)
    own = ({"sweep": knob, "start": f"{start:g}", "stop": f"{stop:g}", "n": str(int(n))}
           | ({"vs": vs} if vs != NO_ENGINE else {}) | ({"seeds": str(seeds)} if seeds > 1 else {}))  # fmt: skip
    st.session_state[KEPT_KEY] = (config_key(cfg), own)
    write_query_params((link_query(cfg, st.session_state.get(PRESET_KEY), st.session_state.get(BASE_KEY)) or {}) | own)
    setups = {cfg.scheduler.name: cfg}
    if vs != NO_ENGINE:
        other = _with_engine(cfg, vs)
        setups[other.scheduler.name if other.scheduler.name != cfg.scheduler.name else f"{vs}"] = other
    if len(setups) == 2 and (note := calibration_difference(*setups.values(), names=tuple(setups))) is not None:
        st.info(plain(note), icon=":material/info:")  # (the strategy's preset brings its family's measured overheads)
    total = len(values) * len(setups) * seeds
    bar = st.progress(0.0, text="Simulating…")
    try:
        curves = {name: _run(c, knob, values, bar, i * len(values) * seeds, total, seeds, steady, page)
                  for i, (name, c) in enumerate(setups.items())}  # fmt: skip
    except PointFailed as err:  # (a point's process killed by its backstop: said, and the finished points kept)
        bar.empty()
        st.error(plain(f"The sweep stopped: {err}. Finished points are kept."))
        return
    except SearchCancelled as err:
        bar.empty()
        st.warning(f"The sweep stopped ({err}): this page may spend {page.max_wall_s:g} s of server time on new "
                   "simulations. Finished points are kept: reload the page to continue, or sweep fewer points, "
                   "seeds or requests.", icon=":material/timer:")  # fmt: skip
        return
    bar.empty()
    caps = {}
    if knob == "rate":
        for name, pts in curves.items():
            per_seed = [capacity_from_sweep(pts, setups[name], objective=objective, seed_index=k) for k in range(seeds)]
            found = [c for c in per_seed if c is not None]
            lo, hi = (min(found), max(found)) if len(found) == seeds else (None, None)
            caps[name] = (lo, hi, hi is None or hi < pts[-1].value)
    notes = [(name, p) for name, pts in curves.items() for p in pts
             if p.summary is not None and p.summary.steady is not None and p.summary.steady.note]  # fmt: skip
    # A point whose requests arrive faster than they finish is overloaded (`sweep.fell_behind`): its queue grows for as
    # long as it runs and no length of run settles. The default sweep's two points past the knee said "Run about 15,200
    # requests or more" (each finished 21.6 req/s of 26 and 30 arriving), advice that cannot help there.
    behind = [(name, p) for name, pts in curves.items() for p in pts if fell_behind(p, knob, setups[name], objective)]
    behind_ids = frozenset(id(p) for _, p in behind)
    # The answer first, above its notes and the charts, as Simulate's headline is (below them it was 2.5 screens down
    # at 1280x720, a review)
    if caps:
        def says(lo, hi, saturated):
            if lo is None:
                return f"below {values[0]:g} req/s (even the lowest rate misses the objectives)"
            span = f"{lo:g} req/s" if lo == hi else f"{lo:g}–{hi:g} req/s over {seeds} seeds"
            if not saturated:
                return f"at least {span} (every point met the objectives: raise 'To')"
            # (the knee lies between the last rate that met them and the next one swept: "18 req/s" read as exact)
            above = next((v for v in values if v > hi), None)
            return span if above is None else f"{span}; the next rate swept, {above:g} req/s, misses the objectives"
        st.markdown(" · ".join(f"**{plain(k)}**: capacity {says(*v)}" for k, v in caps.items()))
        # (a swept rate, as the CLI's sweep says: head to head, vLLM V1's 19.98 and SGLang's 18.42 req/s both read
        # "capacity 18 req/s" on the default grid, with nothing to say they may differ, a review)
        same = (len(caps) > 1 and len({v[:2] for v in caps.values()}) == 1 and next(iter(caps.values()))[0] is not None
                and all(saturated for _, _, saturated in caps.values()))  # (each knee between a rate and the next)
        st.caption("A capacity here is a rate swept: the highest that met the objectives, the knee lying before the next "
                   f"one; python -m sim_core capacity bisects it to within {CAPACITY_REL_TOL:.0%}."
                   + (" Every setup's capacity falls between the same two rates swept: narrow From and To around them to "
                      "tell them apart." if same else ""))  # fmt: skip
    else:
        st.markdown(most_goodput_sentence(curves, knob, behind_ids))
    if behind:
        n, total = len(behind), sum(len(v) for v in curves.values())
        # In the steady window, where falling behind is judged (`sweep.objective_miss` says the same per row), of the run
        # closest to keeping up among those that fell behind: over the whole run, the queue's drain included, "at most
        # 19.6 req/s finish" sat beside a capacity of 20 req/s whose point had kept up, a review
        run, at_name, at_value = max(((s, name, p.value) for name, p in behind for s in (p.seeds or (p.summary,))
                                      if run_fell_behind(s, knob, setups[name], objective)),
                                     key=lambda c: c[0].steady.requests_per_s / c[0].steady.arrival_rate_per_s)  # fmt: skip
        at = f"at {knob} = {at_value:g}" + (f", {plain(at_name)}" if len(curves) > 1 else "")
        closest = f"{at}, the closest to keeping up, it " if n > 1 or seeds > 1 else "it "
        by_setup: dict[str, list[str]] = {}
        for name, p in behind:
            by_setup.setdefault(name, []).append(f"{p.value:g}")
        # head to head, each strategy's own points ("400, 400, 700" listed both strategies' values as one list)
        where = (f"{knob}: " + "; ".join(f"{plain(name)} at {', '.join(v)}" for name, v in by_setup.items())
                 if len(curves) > 1 else f"{knob} = " + ", ".join(v for vs in by_setup.values() for v in vs))  # fmt: skip
        st.info(f"{n} of {total} points {'have' if n > 1 else 'has'} no steady state ({where}): requests arrive faster "
                f"than they finish ({closest}{window_completion(run.steady)}), "
                "so the queue grows for as long as the run lasts. Their figures "
                "(open markers) are their whole runs', those of a run this long: a window of such a run counts "
                "arrivals met before the queue built up.")  # fmt: skip
    settled = [(name, p) for name, p in notes if not any(p is q for _, q in behind)]
    if settled:
        name, p = settled[0]
        longer = (" Switch on “Steady-state run length” to run every point long enough to settle." if knob != "rate" and not steady
                  and rate_applies(cfg) else "")  # fmt: skip
        st.info(f"{len(settled)} of {sum(len(v) for v in curves.values())} points cannot say what the steady state is "
                f"(open markers). At {knob} = {p.value:g} ({plain(name)}): {plain(p.summary.steady.note)}{longer}")  # fmt: skip
    # side by side on a wide page, stacked (each the page's width) on a phone or a narrow window (app CSS)
    figs = sweep_figures(curves, knob, caps, behind_ids, _total_instances(cfg, knob), (cfg.slo.ttft_s, cfg.slo.tpot_s))
    for col, fig, key in zip(st.container(key="sw_figs").columns(3), figs, ("tput", "goodput", "latency")):
        with col:
            workshop.show_chart(fig, key=f"sw.fig.{key}")  # (presenter mode scales its text, as every chart's)
    errors = [(name, p) for name, pts in curves.items() for p in pts if p.error]
    for name, p in errors[:3]:
        st.warning(plain(f"{name} at {knob} = {p.value:g}: {p.error}"))
    rows = [{"setup": name, knob: p.value, **({} if p.summary is None else {
        "output tok/s": _steady_metric(p, "output_tokens_per_s", behind_ids),
        "goodput req/s": _steady_metric(p, "goodput_requests_per_s", behind_ids),
        "TTFT p99 (ms)": _steady_metric(p, "ttft_p99_s", behind_ids) * 1e3,
        "TPOT p99 (ms)": _steady_metric(p, "tpot_p99_s", behind_ids) * 1e3,
        "steady state": _settles_text(p, behind_ids), "finished": p.summary.num_finished, "stopped": p.summary.stopped_reason or ""})}
        for name, pts in curves.items() for p in pts]  # fmt: skip
    _results_table(rows, knob, head_to_head=len(curves) > 1)
    if behind:  # (the compact table has no "steady state" column: its rows past the knee read as steady figures)
        st.caption(f"Rows with no steady state ({where}) show their whole runs' figures, as their open markers do: "
                   "their queues grow for as long as they run.")  # (`where` as the note above writes it, its setup names escaped)
    if (said := missing_values_sentence(curves, knob, behind_ids)) is not None:  # (the cells read "–" with no word of why)
        st.caption(plain(said))
    # A stop reason is a sentence: its cell, the last column, showed "decode 0: stoppe…" on a 1,400-px page
    stopped = [(name, p) for name, pts in curves.items() for p in pts if p.summary is not None and p.summary.stopped_reason]
    if stopped:
        name, p = stopped[0]
        at = ", ".join(f"{q.value:g}" for _, q in stopped)
        st.caption(plain(f"{len(stopped)} of {len(rows)} runs stopped before their last request finished ({knob} = {at}). "
                         f"At {knob} = {p.value:g} ({name}): {p.summary.stopped_reason}"))  # fmt: skip


main()
