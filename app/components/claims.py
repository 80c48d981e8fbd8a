"""Check a lesson's claim against a run, on the figures the app actually draws.

`observe` returns the number the claim is about: how many bars/points of the named element the
view shows (the timeline at the window it opens on, or the roofline), or the metric's value; `shows`
says it in words with units. The Learn page shows the verdicts ("what to look for") with what each run
shows; the tests require every claim to hold.
"""

from __future__ import annotations

import math

import numpy as np

from app.components import charts, timeline
from app.components.units import MISSING, fmt_count, fmt_number, fmt_seconds
from sim_core.config import SimConfig
from sim_core.lessons import CLASS_METRICS, SAME_TOLERANCE, Claim, metric_value
from sim_core.metrics import class_metrics
from sim_core.result import SimResult
from sim_core.types import Phase
from sim_core.words import counted, percent


def _timeline_view(res: SimResult):
    return timeline.timeline_figure(res, window=timeline.opening_window(res))


def observe(claim: Claim, res: SimResult | None) -> float:
    """The claim's quantity in this run (NaN when the run does not exist, e.g. did not fit)."""
    if claim.view == "headline":
        return metric_value(claim.metric or "", res)
    if res is None:
        return math.nan
    if claim.view == "gantt":
        if claim.element == "swap":  # red in the GPU row: swap-only ticks or the PCIe part of a tick
            fig = _timeline_view(res)
            return float(sum(len(t.x) for t in fig.data if t.yaxis == "y" and t.legendgroup == "swap"))
        lo, hi = timeline.tick_range(res, timeline.opening_window(res))
        phase = Phase[claim.element.upper()]
        fig_has = any(t.yaxis == "y" and t.legendgroup == claim.element for t in _timeline_view(res).data)
        return float((res.timeline.phase[lo:hi] == phase).sum()) if fig_has else 0.0
    if claim.view == "requests":
        fig = _timeline_view(res)
        return float(sum(len(t.x) for t in fig.data if t.yaxis == "y2" and t.legendgroup == claim.element))
    if claim.view == "roofline":
        fig = charts.roofline_figure(res)
        by_name = {t.legendgroup or t.name: t for t in fig.data}  # (a kind of tick by its group: "prefill ticks")
        if claim.metric == "prefill_over_decode_intensity":
            p, d = by_name.get("prefill ticks"), by_name.get("decode ticks")
            return float(np.median(p.x) / np.median(d.x)) if p is not None and d is not None else math.nan
        # (the legend's count of that kind, every tick of the run: a run past MAX_ROOFLINE_POINTS draws a sample)
        return float(charts.roofline_tick_count(res, claim.element)) if claim.element in by_name else 0.0
    if claim.view == "classes":
        prio = int(claim.element or 0)
        row = next((r for r in class_metrics(res.config, res.requests) if r["priority"] == prio), None)
        return float(row[claim.metric]) if row is not None else math.nan
    raise ValueError(f"unknown view {claim.view!r}")


def holds(claim: Claim, value: float, other: float | None = None) -> bool:
    """Whether the observed value backs the claim (`other`: the same quantity at the other step)."""
    if math.isnan(value):
        return False
    ok = True
    if claim.at_least is not None or (claim.at_most is None and claim.than_other_step is None):
        ok &= value >= (claim.at_least if claim.at_least is not None else 1)
    if claim.at_most is not None:
        ok &= value <= claim.at_most
    if claim.than_other_step is not None:
        if other is None or math.isnan(other):
            return False
        ok &= {"higher": value > other, "lower": value < other,
               "same": abs(value - other) <= SAME_TOLERANCE * max(abs(other), 1e-12)}[claim.than_other_step]  # fmt: skip
    return bool(ok)


# A claim's metric as the Learn page names it, and the kind of its value (`fmt_metric_value`). A claim quoted alone
# read "✓ “from about 49% to 100%”" without saying what went from 49 % to 100 % or what the run measured.
CLAIM_METRICS: dict[str, tuple[str, str]] = {
    "ttft_p50_s": ("TTFT p50", "s"), "ttft_p90_s": ("TTFT p90", "s"), "ttft_p99_s": ("TTFT p99", "s"),
    "ttft_p99_priority0_s": ("priority-0 class TTFT p99", "s"), "ttft_p99_priority1_s": ("priority-1 class TTFT p99", "s"),
    "tpot_p50_s": ("TPOT p50", "s"),
    "tpot_p99_s": ("TPOT p99", "s"), "itl_p99_s": ("ITL p99", "s"), "e2e_p99_s": ("E2E p99", "s"),
    "queue_delay_p99_s": ("queue delay p99", "s"), "makespan_s": ("makespan", "s"),
    "output_tokens_per_s": ("output throughput", "tok/s"), "mean_batch_size": ("mean batch", "seqs"),
    "spec_tokens_per_step": ("tokens per decode step", "tokens"),
    "slo_attainment": ("SLO attainment", "share"), "goodput_requests_per_s": ("goodput", "req/s"), "prefill_time_fraction": ("prefill share of the busy time", "share"),
    "prefix_hit_rate_tokens": ("prefix cache hits", "share"), "gpu_busy_fraction": ("GPU busy", "share"),
    "mfu_mean": ("MFU over the busy time", "share"),
    "num_preemptions": ("pre-emptions", "count"), "num_recomputed_tokens": ("recomputed tokens", "count"),
    "num_swap_outs": ("swap-outs", "count"),
    "prefix_blocks_evicted": ("prefix blocks evicted", "count"), "prefill_tokens_saved": ("prefill tokens saved", "count"),
    "kv_capacity_tokens": ("KV pool", "tokens"),
}  # fmt: skip
# The Learn page's Run-both panel: a lesson's metric and those its question weighs against it (`also_show`), named as
# the claims name them, but for three a side-by-side number needs said otherwise. (Its own list lacked lesson 11's
# TTFT p90 and TPOT p99, which read "ttft_p90_s" under their numbers once the panel showed them.)
PANEL_METRICS: dict[str, tuple[str, str]] = CLAIM_METRICS | {
    "fits": ("in GPU memory", "fits"),  # (under "does not fit", the label "fits in memory" read as the opposite)
    "ttft_p99_priority0_s": ("TTFT p99 of the priority-0 class", "s"),
    "ttft_p99_priority1_s": ("TTFT p99 of the priority-1 class", "s"),
    "slo_attainment": ("requests meeting the SLOs", "share"),
}  # fmt: skip
def panel_label(metric: str, cfg: SimConfig) -> str:
    """A metric's name in Learn's Run-both panel; a class's by the workload's name for it ("TTFT p99 of the batch class
    (priority 1)": "of the priority-1 class" left the student to work out which class pays in the priority lesson)."""
    if metric in CLASS_METRICS:
        priority = CLASS_METRICS[metric]
        names = [c.name for c in cfg.workload.classes if c.priority == priority]
        if names:
            return f"TTFT p99 of the {' / '.join(names)} class (priority {priority})"
    return PANEL_METRICS.get(metric, (metric,))[0]


_UNIT_FORMATS = {"tok/s": ",.0f", "req/s": ",.2f", "seqs": ",.1f"}  # (other units: about three significant digits)


def fmt_metric_value(kind: str, v: float, strip_zeros: bool = True) -> str:
    """A lesson metric's value by its kind (the Learn page's claims and its expected-result cards): "s" (ms or s),
    "share" (a fraction, as %), "count", "fits" (1: it fits), "number", or a unit written after the number.
    `strip_zeros=False` keeps a time's or a number's trailing zeros, for two values side by side ("9.17 ms" beside
    "9.00 ms", not "9 ms", as Compare writes them)."""
    if kind == "fits":
        return "fits" if v == 1 else "does not fit"
    if math.isnan(v):
        return MISSING
    if kind == "s":
        return fmt_seconds(v, strip_zeros=strip_zeros)
    if kind == "share":
        return percent(v)
    if kind == "count":
        return fmt_count(v)
    if kind == "number":
        return fmt_number(v, strip_zeros=strip_zeros)
    spec = _UNIT_FORMATS.get(kind)
    return f"{v:{spec}} {kind}" if spec else f"{fmt_number(v)} {kind}"


def _count(value: float, noun: str, plural: str) -> str:
    """A counted claim's value and its noun ("1 prefill tick", "12 prefill ticks"); "–" and the plural without a run."""
    return f"{MISSING} {plural}" if math.isnan(value) else counted(round(value), noun, plural)


def shows(claim: Claim, value: float, other: float | None = None) -> str:
    """What the run shows for the claim, in words with units ("meeting the SLOs 49%", "12 prefill ticks in the
    timeline's opening window"); with the other side's value when the claim compares the two."""
    if claim.view in ("headline", "classes") and claim.metric == "fits":
        return "fits in memory" if value == 1 else "does not fit in memory"
    if claim.view in ("headline", "classes"):
        label, kind = CLAIM_METRICS.get(claim.metric or "", (claim.metric or "", "number"))
        if claim.view == "classes":
            label = f"priority-{claim.element or 0} class {label}"
        text = f"{label} {fmt_metric_value(kind, value)}"
        return text + (f" ({fmt_metric_value(kind, other)} on the other side)" if other is not None else "")
    if claim.view == "roofline" and claim.metric == "prefill_over_decode_intensity":
        said = f"prefill dots at {fmt_number(value)}× the decode dots' FLOP per byte (medians)"
    elif claim.view == "roofline":
        said = f"{fmt_count(value)} {claim.element} on the roofline"
    elif claim.view == "gantt":  # (a claim holds from one: "1 prefill tick", not "1 prefill ticks")
        noun = "swap bar" if claim.element == "swap" else f"{claim.element} tick"
        said = f"{_count(value, noun, noun + 's')} in the GPU row (the timeline's opening window)"
    else:  # requests
        stretch = f"{timeline.request_state_word(claim.element)} stretch"  # ("3 pre-empted stretches", as the legend)
        said = f"{_count(value, stretch, stretch + 'es')} in the request rows (the timeline's opening window)"
    return said + (f" ({fmt_number(other)} on the other side)" if other is not None else "")
