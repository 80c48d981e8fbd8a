"""Latency distributions, the roofline and the step-through view. Pure builders: SimResult -> Figure.

Distributions are binned in NumPy (never raw samples to the browser): a histogram of at most
HIST_BINS bars and a CDF of at most CDF_POINTS points, whatever the number of requests.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from app.components.colors import NEUTRAL, PHASE_COLORS, PHASE_NAMES, RUN_COLORS, RUN_DASHES
from app.components.text import plotly_text
from app.components.units import fmt_number, time_unit
from sim_core.config import SimConfig
from sim_core.costmodel import CostModel
from sim_core.words import percent
from sim_core.result import SimResult
from sim_core.types import Phase

HIST_BINS = 60
CDF_POINTS = 400
MAX_ROOFLINE_POINTS = 4000
RARE_TICKS = 50  # a kind of tick with at most this many in a run is drawn whole (not sampled out of sight)
PERCENTILES = (50, 90, 99)
PCT_COLORS = {50: "#188038", 90: "#F9AB00", 99: "#D93025"}
# and a dash each: green p50 and red p99 were one brown-olive under red-green colour blindness (an accessibility review)
PCT_DASHES = {50: "dot", 90: "dash", 99: "dashdot"}
# labels at decades only, in full: 1, 10, 100, 1,000 (Plotly's own wrote "1000" beside "10k" and "100k")
LOG_AXIS = dict(type="log", dtick=1, tickformat=",", minor=dict(ticks="", showgrid=False))
# Linear axes as the tables and log axes write numbers: d3-format "," is Plotly's own default (~g, 12 digits: 0.5,
# 0.05, 1.5 stay as they are) with thousands separators (Plotly wrote "2000" and "12k"). Plotly's hover reads an
# axis's tickformat when it has no hoverformat, and "," there printed 12 digits (123.456789 ms): hovers get six
# significant digits, trimmed, never an exponent (",~g" wrote 1,234,567 as 1.23457e+6).
NUMBER_TICKFORMAT = ","
NUMBER_HOVERFORMAT = ",.6~r"


TEXT_COLOR = "#3C4043"  # a chart's text: 10.4:1 on white


def readable_numbers(fig: go.Figure) -> go.Figure:
    """Every numeric axis of `fig` (in place) with thousands separators in its tick labels and hover values, as the
    tables write numbers, and its text (ticks, titles, legend, notes without a colour of their own) in TEXT_COLOR:
    every chart builder ends with it. An axis with a format of its own (percentages, a log
    ladder's ticktext) keeps it; category and date axes are left alone (Plotly ignores a number format on a category
    axis, and a date axis's tickformat is a time format)."""

    def fix(axis) -> None:
        # (its text dark: Streamlit's chart theme draws ticks and titles in #808495, 3.7:1 on white, under the 4.5:1
        # small text needs: an accessibility review)
        axis.tickfont.color = axis.tickfont.color or TEXT_COLOR
        axis.title.font.color = axis.title.font.color or TEXT_COLOR
        if axis.type in ("category", "multicategory", "date") or axis.tickformat not in (None, NUMBER_TICKFORMAT):
            return
        axis.tickformat = NUMBER_TICKFORMAT
        if axis.hoverformat is None:
            axis.hoverformat = NUMBER_HOVERFORMAT

    fig.for_each_xaxis(fix)
    fig.for_each_yaxis(fix)
    fig.layout.font.color = fig.layout.font.color or TEXT_COLOR
    fig.layout.legend.font.color = fig.layout.legend.font.color or TEXT_COLOR
    fig.for_each_annotation(lambda a: a.update(font_color=a.font.color or TEXT_COLOR))  # (subplot titles, notes)
    return fig


# The most P:D split labels an axis writes ("3P1D" is 4-5 characters): past them Plotly turned them upright and the
# axis title under them ran into the legend (a P:D sweep of 16 instances, 15 points, a review)
MAX_SPLIT_LABELS = 6


def split_ticks(prefill_counts, total_instances: int) -> dict:
    """A P:D sweep's x axis: each split by name ("3P1D": "3" alone left D to work out), at most MAX_SPLIT_LABELS of
    them (spread evenly, the first and the largest kept: the points still mark every split), level."""
    ticks = sorted({int(v) for v in prefill_counts})
    k = min(len(ticks), MAX_SPLIT_LABELS)
    # (evenly spread by index: every k-th with the last put in its place left two labels side by side, 13P2D 14P1D)
    shown = [ticks[round(i * (len(ticks) - 1) / (k - 1))] for i in range(k)] if k > 1 else ticks
    return dict(tickvals=shown, ticktext=[f"{v}P{total_instances - v}D" for v in shown], tickangle=0)


def line_label_place(points, y_line: float, options: tuple[tuple[int, str], ...], width_frac: float = 0.3,
                     height_factor: float = 1.6) -> tuple[int, str]:
    """Where a horizontal line's label goes on a log-y chart: of `options`, (end, side) pairs, end 0 (the left end,
    label anchored left) or 1 (right end, anchored right) and side "bottom" (the label's foot on the line: above it) or
    "top" (below it), the one whose box holds the fewest of the chart's `points` ((x, y) pairs), then the one with the
    most room on its side (up to a decade to the nearest point of that stretch), then the first. The box: `width_frac`
    of the points' x range from that end, a factor `height_factor` above or below the line (a label's height on a
    few-decade log axis). A review: the Plan chart's SLO label covered a config at its left end, the Sweep chart's TPOT
    label the TTFT p50 markers under it; and then, on a free but narrow gap, sat squeezed between two curves where the
    other end had decades of room."""
    pts = [(float(x), float(y)) for x, y in points if x is not None and y is not None and np.isfinite([x, y]).all()]
    if not pts:
        return options[0]
    lo = min(x for x, _ in pts)
    span = (max(x for x, _ in pts) - lo) or 1.0

    def near(end: int, x: float) -> bool:
        return (x - lo) / span <= width_frac if end == 0 else (x - lo) / span >= 1 - width_frac

    def covered(option: tuple[int, str]) -> int:
        end, side = option
        ys = (y_line, y_line * height_factor) if side == "bottom" else (y_line / height_factor, y_line)
        return sum(ys[0] <= y <= ys[1] and near(end, x) for x, y in pts)

    def room_decades(option: tuple[int, str]) -> float:
        end, side = option
        if y_line <= 0:
            return 0.0
        gaps = [abs(math.log10(y / y_line)) for x, y in pts if y > 0 and near(end, x) and (y >= y_line) == (side == "bottom")]
        return min([1.0, *gaps])

    return min(options, key=lambda o: (covered(o), -room_decades(o), options.index(o)))


def log_ladder_axis(values) -> dict:
    """A log axis labelled at 1, 2, 5 × 10^k (1, 3 × 10^k over three or four decades) over the positive values'
    span, each label in full ("20", "200", "2,000"). Plotly's own labels on a span under two decades are the decade plus bare digits ("2", "3" beside
    "100", meaning 200 and 300), crowded together and unreadable as numbers."""
    v = np.asarray([x for x in values if x is not None and np.isfinite(x) and x > 0], dtype=float)
    if v.size == 0:
        return dict(LOG_AXIS)
    lo_exp, hi_exp = int(np.floor(np.log10(v.min()))), int(np.ceil(np.log10(v.max())))
    if hi_exp - lo_exp > 4:  # over four decades any ladder would crowd: decades only
        return dict(LOG_AXIS)
    # 1-2-5 up to two decades (every digit when that gives under three labels), 1-3 up to four
    ladders = ((1, 2, 5), range(1, 10)) if hi_exp - lo_exp <= 2 else ((1, 3),)
    for ladder in ladders:
        ticks = [m * 10.0**e for e in range(lo_exp, hi_exp + 1) for m in ladder]
        if sum(v.min() <= t <= v.max() for t in ticks) >= 3:
            break
    ticks = [t for t in ticks if v.min() / 2 <= t <= v.max() * 2] or [10.0**lo_exp]
    return dict(type="log", tickmode="array", tickvals=ticks, ticktext=[f"{t:,.0f}" if t >= 1 else f"{t:g}" for t in ticks],
                minor=dict(ticks="", showgrid=False))


@dataclass(frozen=True)
class Metric:
    key: str
    label: str
    slo_field: str | None  # which SLO line to draw


METRICS = (
    Metric("ttft", "TTFT: time to first token", "ttft_s"),
    Metric("tpot", "TPOT: time per output token", "tpot_s"),
    Metric("itl", "ITL: every gap between tokens", "tpot_s"),
    Metric("e2e", "E2E: request latency", None),
)


def metric_values_s(res: SimResult, key: str) -> np.ndarray:
    """Finished requests' values of a latency metric, seconds (ITL: every gap)."""
    req = res.requests
    done = req.is_finished
    values = {"ttft": lambda: req.ttft_s[done], "tpot": lambda: req.tpot_s[done], "e2e": lambda: req.e2e_s[done],
              "itl": lambda: res.itl_s}[key]()  # fmt: skip
    return values[~np.isnan(values)]


def _cdf_points(v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    probs = np.linspace(0, 1, min(CDF_POINTS, max(v.size, 2)))
    return np.quantile(v, probs), probs


@dataclass(frozen=True)
class _Distribution:
    """What the histogram/CDF pair of one metric shows: values in `unit`, percentiles, the SLO and the x range."""

    v: np.ndarray
    unit: str
    pct: dict[int, float]
    slo: float | None  # in `unit`
    upper: float  # the x axis ends here
    beyond: int  # values past `upper`, counted in the summary instead of drawn


def _distribution(res: SimResult, metric: Metric) -> _Distribution:
    """The x axis ends a little past p99 (or the SLO when that is near) so the bulk stays readable."""
    raw = metric_values_s(res, metric.key)
    scale, unit = time_unit(raw)
    v = raw * scale
    if v.size == 0:
        return _Distribution(v, unit, {}, None, 1.0, 0)
    pct = {q: float(np.percentile(v, q)) for q in PERCENTILES}
    slo = getattr(res.config.slo, metric.slo_field) * scale if metric.slo_field else None
    upper = pct[99] * 1.25 if pct[99] > 0 else float(v.max()) or 1.0
    if slo is not None and slo <= 2 * upper:
        upper = max(upper, slo * 1.08)
    upper = min(upper, float(v.max()) * 1.02) if float(v.max()) > 0 and slo is None else upper
    return _Distribution(v, unit, pct, slo, upper, int((v > upper).sum()))


def _borrowed_slo(metric: Metric) -> str | None:
    """The name of the objective a metric's chart draws when it is another metric's (ITL draws TPOT's), else None."""
    own = metric.slo_field is None or metric.slo_field == f"{metric.key}_s"
    return None if own else metric.slo_field.removesuffix("_s").upper()


def _slo_name(metric: Metric, value: float, unit: str) -> str:
    """The SLO line's legend entry: 'SLO 2,000 ms', or 'TPOT SLO 100 ms' on a chart whose objective is another metric's."""
    borrowed = _borrowed_slo(metric)
    return f"{borrowed} SLO {fmt_number(value)} {unit}" if borrowed else f"SLO {fmt_number(value)} {unit}"


def distribution_summary(res: SimResult, metric: Metric) -> str:
    """The facts beside a distribution chart (how many values, the share within the objective, how many are past the
    x axis): a caption, which wraps, not the chart title, which Plotly cuts at the chart's width (~470 px at 800 px)."""
    d = _distribution(res, metric)
    count = res.num_itl_gaps if metric.key == "itl" else d.v.size
    text = f"{count:,} {'gaps' if metric.key == 'itl' else 'requests'}"
    if metric.key == "itl" and d.v.size < count:
        text += f" (drawn from an even sample of {d.v.size:,})"
    if d.slo is not None and d.v.size:
        met = float((d.v <= d.slo).mean())
        off = "" if d.slo <= d.upper else " (off the chart, right)"
        borrowed = _borrowed_slo(metric)
        if borrowed:  # ITL has no objective of its own: the line is TPOT's, which bounds a request's mean gap
            text += (f" · {percent(met)} of gaps within the {fmt_number(d.slo)} {d.unit} {borrowed} objective{off}, which bounds each "
                     "request's mean gap, not every gap")  # fmt: skip
        else:
            # (words.percent, the headline's rule: 1 of 200 requests within read "0%" beside "0.5% meet SLOs")
            text += f" · {percent(met)} within the {fmt_number(d.slo)} {d.unit} objective{off}"
    if d.beyond:
        text += f" · {d.beyond:,} beyond {fmt_number(d.upper)} {d.unit} not shown"
    return text + "."


def distribution_figure(res: SimResult, metric: Metric, height: int = 360) -> go.Figure:
    """Histogram and CDF side by side, in ms (or s when the median is a second or more), with
    p50/p90/p99 lines and the SLO line. ITL counts are on a log axis so the stall tail shows.
    The title is the metric's name; the facts are in `distribution_summary` (show it beside the chart)."""
    d = _distribution(res, metric)
    v, unit, upper = d.v, d.unit, d.upper
    # the CDF's axis name in its panel title: as a rotated y-axis title it sat on the histogram's bars in a narrow window
    # (spacing: at 0.08 a phone left the panels ~26 px apart, the CDF's "100%" labels stood on the histogram's right
    # edge and "80%" read "30%" behind its SLO line; the histogram's last x label ran into the CDF's first)
    fig = make_subplots(rows=1, cols=2, subplot_titles=("Histogram", "CDF (fraction ≤ x)"), horizontal_spacing=0.15)
    if v.size == 0:
        fig.add_annotation(text="no finished requests", showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper")
        return readable_numbers(fig.update_layout(height=height))
    # values past the axis are left out (the summary counts them as "not shown"): clamped, they piled up in the last bar
    # as a spike of stalls that was not there (engine-vllm-v0-swap's ITL: 245 gaps beyond 149 ms in one bar)
    counts, edges = np.histogram(v, bins=HIST_BINS, range=(0, upper))
    fig.add_trace(go.Bar(x=(edges[:-1] + edges[1:]) / 2, y=counts, width=np.diff(edges), marker_color=NEUTRAL,
                         name="count", showlegend=False,
                         hovertemplate=f"%{{x:,.3r}} {unit}: %{{y:,}}<extra></extra>"), row=1, col=1)  # fmt: skip
    x, p = _cdf_points(v)
    fig.add_trace(go.Scatter(x=x, y=p, mode="lines", line_color=NEUTRAL, showlegend=False,
                             hovertemplate=f"%{{x:,.3r}} {unit}: %{{y:.0%}} below<extra></extra>"), row=1, col=2)  # fmt: skip
    top = float(counts.max()) * 1.05
    for q, val in d.pct.items():
        style = dict(color=PCT_COLORS[q], dash=PCT_DASHES.get(q, "dot"), width=2)
        fig.add_trace(go.Scatter(x=[val, val], y=[0, top], mode="lines", line=style, name=f"p{q} {fmt_number(val)} {unit}",
                                 legendgroup=f"p{q}", hoverinfo="skip"), row=1, col=1)  # fmt: skip
        fig.add_trace(go.Scatter(x=[val, val], y=[0, 1], mode="lines", line=style, showlegend=False,
                                 legendgroup=f"p{q}", hoverinfo="skip"), row=1, col=2)  # fmt: skip
    if d.slo is not None and d.slo <= upper:
        name = _slo_name(metric, d.slo, unit)
        for col, y1 in ((1, top), (2, 1)):
            fig.add_trace(go.Scatter(x=[d.slo, d.slo], y=[0, y1], mode="lines", line=dict(color="#202124", width=3),
                                     name=name, showlegend=col == 1, legendgroup="slo", hoverinfo="skip"), row=1, col=col)  # fmt: skip
    # at most ~4 labelled ticks (minor grid lines between): a phone's ~120 px panels labelled 0, 500, 1,000, 1,500,
    # 2,000 and Plotly turned them on end, over the axis title and the legend
    fig.update_xaxes(title_text=f"{metric.key.upper()} ({unit})", range=[0, upper], nticks=4, minor=dict(showgrid=True))
    if metric.key == "itl":  # most gaps are one tick; the stalls are a thin tail a linear axis hides
        fig.update_yaxes(title_text="count (log)", **LOG_AXIS, row=1, col=1)
    else:
        fig.update_yaxes(title_text="count", row=1, col=1)
    fig.update_yaxes(tickformat=".0%", range=[0, 1.02], row=1, col=2)
    fig.update_layout(title=dict(text=metric.label, font=dict(size=14)), height=height, margin=dict(l=10, r=10, t=70, b=40),
                      bargap=0, legend=dict(orientation="h", y=-0.22))  # fmt: skip
    return readable_numbers(fig)


def cdf_overlay_figure(results: dict[str, SimResult], metric: Metric, height: int = 320) -> go.Figure:
    """CDFs of one metric for several runs (Compare page). The SLO is drawn when it is near the
    data, else named in the title, so a far objective does not squash the curves."""
    fig = go.Figure()
    upper = 0.0
    scale, unit = time_unit(np.concatenate([metric_values_s(r, metric.key) for r in results.values()]))
    for label, res in results.items():
        v = metric_values_s(res, metric.key) * scale
        if v.size:
            x, p = _cdf_points(v)
            upper = max(upper, float(np.percentile(v, 99.5)) * 1.1)
            fig.add_trace(go.Scatter(x=x, y=p, mode="lines", name=label,
                                     line=dict(color=RUN_COLORS.get(label, NEUTRAL), dash=RUN_DASHES.get(label, "dot"), width=2.5),
                                     hovertemplate=f"{label}: %{{x:,.3r}} {unit}, %{{y:.0%}}<extra></extra>"))  # fmt: skip
    title = metric.label
    if metric.slo_field:
        slo_ms = getattr(next(iter(results.values())).config.slo, metric.slo_field) * scale
        if slo_ms <= 2 * upper:
            upper = max(upper, slo_ms * 1.08)
            fig.add_trace(go.Scatter(x=[slo_ms, slo_ms], y=[0, 1], mode="lines", line=dict(color="#202124", width=3),
                                     name=_slo_name(metric, slo_ms, unit), hoverinfo="skip"))  # fmt: skip
        else:  # on a line of its own: Plotly does not wrap a title, and one line was cut at "(off the chart, righ" on a phone
            title += f"<br><span style='font-size:12px'>{_slo_name(metric, slo_ms, unit)} (off the chart, right)</span>"
    # the legend under the plot, as the distribution chart's: on its right (Plotly's default) "TPOT SLO 100 ms" took
    # ~130 of a phone's ~360 px and left the ITL curves ~170
    fig.update_layout(title=dict(text=title, font=dict(size=14)), height=height, margin=dict(l=10, r=10, t=60, b=40),
                      legend=dict(orientation="h", yanchor="top", y=-0.3, x=0),
                      xaxis=dict(title=f"{metric.key.upper()} ({unit})", range=[0, upper or None]),
                      yaxis=dict(title="fraction ≤ x", tickformat=".0%", range=[0, 1.02]))  # fmt: skip
    return readable_numbers(fig)


def _roof(cfg: SimConfig) -> tuple[str, float, float, bool]:
    """(GPU name, GEMM peak TFLOP/s, HBM GB/s, FP8 tensor cores?) per GPU: the peak the cost model prices GEMMs at
    (FP8 weights on a GPU with FP8 tensor cores run at its FP8 peak), not the TP degree."""
    cm = CostModel(cfg)
    return cfg.hardware.name, cm.peak_flops_per_s / 1e12, cfg.hardware.hbm_bandwidth_gb_per_s, cm.uses_fp8_cores


def _roof_name(peak_tflops: float, hbm_gb_per_s: float, fp8: bool) -> str:
    return f"{peak_tflops:,g} TFLOP/s{' FP8' if fp8 else ''}, {hbm_gb_per_s:,g} GB/s"  # 1,978.9 and 3,350 as the sidebar


def _other_roofs(res: SimResult) -> list[tuple[str, tuple[str, float, float, bool]]]:
    """(pool name, roof) for each pool of a deployment on a GPU other than the config's Hardware (Splitwise-HA:
    H100 prefill, A100 decode); empty for one engine or one GPU kind."""
    out, seen = [], {_roof(res.config)}
    for inst in getattr(res, "instances", None) or ():
        roof = _roof(inst.result.config)
        if roof not in seen:
            seen.add(roof)
            out.append((f"{inst.role} pool", roof))
    return out


ROOFLINE_X_TITLE = "arithmetic intensity (FLOP/byte, per GPU)"


def _roofline_ticks(tl) -> tuple[np.ndarray, dict[int, int]]:
    """The ticks the roofline places (busy, with HBM traffic) and each kind's count among them: the legend's counts,
    before the chart samples MAX_ROOFLINE_POINTS of them."""
    busy = np.flatnonzero((tl.phase != Phase.IDLE) & (tl.bytes > 0))
    return busy, {ph: int(np.count_nonzero(tl.phase[busy] == ph)) for ph in (Phase.PREFILL, Phase.MIXED, Phase.DECODE, Phase.SWAP)}


def roofline_tick_count(res: SimResult, kind: str) -> int:
    """How many ticks of a kind ("prefill ticks") the roofline's legend counts: every one in the run, drawn or sampled
    (Learn's "What to look for" read 330 sampled prefill dots beside the legend's "prefill ticks (542)")."""
    name = kind.removesuffix(" ticks")
    return next((n for ph, n in _roofline_ticks(res.timeline)[1].items() if PHASE_NAMES[ph] == name), 0)


def calibrated_knee_flop_per_byte(cm: CostModel) -> float:
    """Where the calibrated roof turns flat: achievable GEMM FLOP/s over achievable HBM bytes/s (the roofline marks it,
    the Roofline tab's caption names it; one statement of it)."""
    return cm.gemm_flops_per_s / cm.achieved_hbm_bytes_per_s


# Each kind of tick its own marker as well as its colour (decode and mixed dots were one shape, and their colours
# close under red-green colour blindness: an accessibility review)
TICK_SYMBOLS = {"prefill": "square", "decode": "circle", "mixed": "diamond", "swap": "triangle-up"}


def roofline_figure(res: SimResult, height: int = 460) -> go.Figure:
    """The hardware roof and every tick (sampled) at its arithmetic intensity and achieved FLOP/s."""
    tl, hw, cm = res.timeline, res.config.hardware, CostModel(res.config)
    busy, num_of = _roofline_ticks(tl)  # (each kind's count in the run: the legend's, before sampling)
    if busy.size > MAX_ROOFLINE_POINTS:  # deterministic, evenly spaced sample, and every tick of a rare kind (a few
        rare = [ph for ph, n in num_of.items() if 0 < n <= RARE_TICKS]  # prefill-only ticks among thousands: none sampled)
        keep = busy[np.linspace(0, busy.size - 1, MAX_ROOFLINE_POINTS).astype(int)]
        busy = np.union1d(keep, busy[np.isin(tl.phase[busy], rare)]) if rare else keep
    intensity = tl.flops[busy] / tl.bytes[busy]
    achieved = tl.flops[busy] / tl.duration_s[busy] / 1e12
    peak, bw = cm.peak_flops_per_s / 1e12, hw.hbm_bandwidth_gb_per_s * 1e9 / 1e12  # (FP8 weights: the FP8 peak)
    lo = min(float(intensity.min()) if busy.size else 1.0, 1.0) / 2
    hi = max(float(intensity.max()) if busy.size else 1e3, peak / bw * 4) * 2
    xs = np.geomspace(lo, hi, 200)
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=xs, y=np.minimum(peak, bw * xs), mode="lines", line=dict(color="#202124", width=2),
                             name=f"roof: {_roof_name(peak, hw.hbm_bandwidth_gb_per_s, cm.uses_fp8_cores)}"))  # fmt: skip
    bw_eff = cm.achieved_hbm_bytes_per_s / 1e12  # (the cost model's achievable rates: one statement of them)
    fig.add_trace(go.Scatter(x=xs, y=np.minimum(cm.gemm_flops_per_s / 1e12, bw_eff * xs), mode="lines",
                             line=dict(color="#5F6368", dash="dash"), name="calibrated roof (achievable)"))  # fmt: skip
    for pool, (o_name, o_peak, o_hbm, o_fp8) in _other_roofs(res):  # a deployment whose pools run on other GPUs
        o_bw = o_hbm * 1e9 / 1e12  # (their ticks sit under their roof)
        # (its GPU name may come from a link: escaped, or Plotly renders its tags and links in the legend)
        fig.add_trace(go.Scatter(x=xs, y=np.minimum(o_peak, o_bw * xs), mode="lines", line=dict(color="#8E24AA", width=2, dash="dashdot"),
                                 name=f"{pool} roof ({plotly_text(o_name)}): {_roof_name(o_peak, o_hbm, o_fp8)}"))  # fmt: skip
    # Each kind of tick with its count, the most numerous drawn first: the default run's few prefill-only ticks were
    # drawn under ~900 mixed ones, a legend entry with no dot in sight
    for ph in sorted(num_of, key=lambda p: -num_of[p]):
        m = tl.phase[busy] == ph
        if m.any():
            name = PHASE_NAMES[ph]
            fig.add_trace(go.Scatter(
                x=intensity[m], y=achieved[m], mode="markers", name=f"{name} ticks ({num_of[ph]:,})",
                legendgroup=f"{name} ticks",  # (what Learn's claims look the kind up by: the name holds a count)
                # (a rare kind larger, opaque and outlined: drawn last, the default run's one prefill-only tick still
                # sat lost among the mixed ones at 0.6 opacity, a review)
                marker=(dict(color=PHASE_COLORS[name], size=9, opacity=1.0, line=dict(color="#202124", width=1))
                        if num_of[ph] <= RARE_TICKS else dict(color=PHASE_COLORS[name], size=6, opacity=0.6))
                | {"symbol": TICK_SYMBOLS.get(name, "circle")},
                customdata=np.column_stack([busy[m], tl.num_prefill_tokens[busy][m], tl.num_decode_tokens[busy][m], tl.duration_s[busy][m] * 1e3]),
                hovertemplate=("tick %{customdata[0]}: %{customdata[1]:,} prefill + %{customdata[2]:,} decode tok"
                               "<br>%{x:,.1f} FLOP/byte · %{y:,.0f} TFLOP/s · %{customdata[3]:,.1f} ms<extra></extra>"),
            ))  # fmt: skip
    # The calibrated roof's knee marked: where the achievable bandwidth is the datasheet's (an H100: 0.93 x its 1.07
    # scale) the dashed roof's slope lies on the solid one, and the knee the Roofline tab's caption names was nowhere to
    # be seen (a review of lesson 1). Log axes: an annotation's x and y are log10 of the values.
    knee = calibrated_knee_flop_per_byte(cm)
    fig.add_annotation(x=float(np.log10(knee)), y=float(np.log10(cm.gemm_flops_per_s / 1e12)), text=f"calibrated knee {knee:,.0f}",
                       showarrow=True, arrowhead=2, arrowsize=1, arrowwidth=1, arrowcolor="#5F6368", ax=-50, ay=-28,
                       font=dict(size=11, color="#3C4043"), bgcolor="rgba(255,255,255,0.8)")  # fmt: skip
    ridge = peak / bw  # a line trace, not add_vline: annotations on log axes take log10 coordinates
    fig.add_trace(go.Scatter(x=[ridge, ridge], y=[float(np.min(np.minimum(peak, bw * xs))), peak * 1.5], mode="lines",
                             line=dict(color="#9AA0A6", dash="dot"), name=f"ridge point {ridge:,.0f} FLOP/byte",
                             hoverinfo="skip"))  # fmt: skip
    fig.update_layout(
        height=height, margin=dict(l=10, r=10, t=30, b=40), legend=dict(orientation="h", y=-0.2),
        # (short: the long title ran past a phone's ~340 px plot as "…per byte of HBM traffic, per G"; the Roofline
        # tab's caption says what a byte is)
        xaxis=dict(**LOG_AXIS, title=ROOFLINE_X_TITLE),
        yaxis=dict(**LOG_AXIS, title="achieved TFLOP/s per GPU"),
    )
    return readable_numbers(fig)


WHOLE_TICKS_UP_TO = 8  # (past it Plotly's steps are whole: 0, 2, 4, ...)


def _whole_ticks(counts: np.ndarray) -> dict:
    """Axis settings for counts of whole things (tokens, blocks): a tick at every whole number while they are few, where
    Plotly's own steps read 0.2, 0.4, ... (a decode-only tick's one token each, a request's 1-3 blocks; a review)."""
    return {"dtick": 1} if counts.size and counts.max() <= WHOLE_TICKS_UP_TO else {}


def step_figure(res: SimResult, tick: int, height: int = 360, req_ids: np.ndarray | None = None) -> go.Figure:
    """One tick's batch: tokens each request computed (prefill chunk or decode) and KV blocks it holds.
    `req_ids`: the deployment-wide id of each of this engine's requests (an instance of a deployment), so
    the bars name the requests as the timeline's rows do."""
    b = res.batches
    m = b.tick == tick
    req, new, dec, held = b.req[m], b.num_new_tokens[m], b.is_decode[m], b.kv_blocks_held[m]
    order = np.argsort(req)
    req, new, dec, held = req[order], new[order], dec[order], held[order]
    labels = [f"req {r}" for r in (req if req_ids is None else req_ids[req])]
    # short panel titles, no axis title on the right (its title names the unit): at 800 px each panel is ~210 px wide
    fig = make_subplots(rows=1, cols=2, subplot_titles=("Tokens computed", "KV blocks held"), horizontal_spacing=0.1)
    for is_dec, name in ((False, "prefill"), (True, "decode")):
        k = dec == is_dec
        if k.any():
            fig.add_trace(go.Bar(x=[labels[i] for i in np.flatnonzero(k)], y=new[k], marker_color=PHASE_COLORS[name], name=name,
                                 hovertemplate="%{x}: %{y:,} tokens<extra>" + name + "</extra>"), row=1, col=1)  # fmt: skip
    fig.add_trace(go.Bar(x=labels, y=held, marker_color="#188038", name="KV blocks", showlegend=True,
                         hovertemplate="%{x}: %{y:,} blocks<extra></extra>"), row=1, col=2)  # fmt: skip
    if new.size and new.max() > 50 * max(new.min(), 1):
        fig.update_yaxes(title_text="tokens (log)", **LOG_AXIS, row=1, col=1)
    else:
        fig.update_yaxes(title_text="tokens", row=1, col=1, **_whole_ticks(new))
    fig.update_yaxes(row=1, col=2, **_whole_ticks(held))
    # The legend in its own strip at the figure's foot, under the request labels: placed on the plot's scale, it sat on
    # a busy tick's labels (26 requests, "req 165" stood on end) on a phone; the labels push the plots up instead
    fig.update_xaxes(automargin=True)
    fig.update_layout(height=height, margin=dict(l=10, r=10, t=40, b=10), barmode="relative",
                      legend=dict(orientation="h", yref="container", y=0, yanchor="bottom"))  # fmt: skip
    return readable_numbers(fig)
