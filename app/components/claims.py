"""Check a lesson's claim against a run, on the figures the app actually draws.

`observe` returns the number the claim is about: how many bars/points of the named element the
view shows (the timeline at the window it opens on, or the roofline), or the metric's value. The
Learn page shows the verdicts ("what to look for"); the tests require every claim to hold.
"""

from __future__ import annotations

import math

import numpy as np

from app.components import charts, timeline
from sim_core.lessons import SAME_TOLERANCE, Claim, metric_value
from sim_core.metrics import class_metrics
from sim_core.result import SimResult
from sim_core.types import Phase


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
        by_name = {t.name: t for t in fig.data}
        if claim.metric == "prefill_over_decode_intensity":
            p, d = by_name.get("prefill ticks"), by_name.get("decode ticks")
            return float(np.median(p.x) / np.median(d.x)) if p is not None and d is not None else math.nan
        tr = by_name.get(claim.element)
        return float(len(tr.x)) if tr is not None else 0.0
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
