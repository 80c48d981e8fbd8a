"""The shared-time-axis figure: GPU occupancy Gantt, request timelines, KV usage and queues.

Pure builders (SimResult -> plotly Figure), testable without Streamlit. Large runs are aggregated
for drawing so a figure stays small whatever the run size; the data behind it stays exact:
  * the Gantt merges adjacent ticks of one phase; past MAX_GANTT_BARS it bins time and shows the
    phase that took most of each bin (hover gives the mix);
  * request rows are a window of at most MAX_REQUEST_ROWS requests;
  * KV and queue lines are reduced to MAX_LINE_POINTS per series (max per bin keeps the peaks).
"""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from app.components.colors import PHASE_COLORS, PHASE_NAMES
from sim_core.result import SimResult
from sim_core.types import Event, Phase

MAX_GANTT_BARS = 1500  # bars over all GPU rows
MAX_GPU_ROWS = 8
MAX_REQUEST_ROWS = 60
MAX_LINE_POINTS = 2000
MAX_TIMELINE_POINTS = 30_000  # bound on all data points in the figure (checked by tests)


def gantt_segments(res: SimResult) -> dict[str, np.ndarray]:
    """Merge runs of adjacent ticks with the same phase. Returns per-segment columns."""
    tl = res.timeline
    phase = tl.phase
    if tl.num_ticks == 0:
        return {k: np.empty(0) for k in ("start", "end", "phase", "ticks", "prefill", "decode", "compute", "batch")}
    starts = np.flatnonzero(np.r_[True, phase[1:] != phase[:-1]])  # (S,) first tick of each segment
    ends = np.r_[starts[1:], tl.num_ticks]
    add = lambda col: np.add.reduceat(col, starts)  # noqa: E731
    return {
        "start": tl.t_start_s[starts],
        "end": tl.t_end_s[ends - 1],
        "phase": phase[starts],
        "ticks": ends - starts,
        "prefill": add(tl.num_prefill_tokens),
        "decode": add(tl.num_decode_tokens),
        "compute": add(tl.is_compute_bound),
        "batch": add(tl.num_prefill_seqs + tl.num_decode_seqs),
    }


def _binned_segments(res: SimResult, num_bins: int) -> dict[str, np.ndarray]:
    """Bin time into equal bins; each bin takes the phase with the most time in it."""
    tl = res.timeline
    t0, t1 = float(tl.t_start_s[0]), float(tl.t_end_s[-1])
    edges = np.linspace(t0, t1, num_bins + 1)
    mid = tl.t_start_s + tl.duration_s / 2
    b = np.clip(np.searchsorted(edges, mid, side="right") - 1, 0, num_bins - 1)  # (T,) bin of each tick
    time_by = np.zeros((num_bins, len(Phase)))
    np.add.at(time_by, (b, tl.phase), tl.duration_s)
    occupied = time_by.sum(axis=1) > 0
    count = np.bincount(b, minlength=num_bins)
    sum_by = lambda col: np.bincount(b, weights=col, minlength=num_bins)  # noqa: E731
    return {
        "start": edges[:-1][occupied],
        "end": edges[1:][occupied],
        "phase": time_by.argmax(axis=1)[occupied],
        "ticks": count[occupied],
        "prefill": sum_by(tl.num_prefill_tokens)[occupied],
        "decode": sum_by(tl.num_decode_tokens)[occupied],
        "compute": sum_by(tl.is_compute_bound)[occupied],
        "batch": sum_by(tl.num_prefill_seqs + tl.num_decode_seqs)[occupied],
        "mix": (time_by / np.maximum(time_by.sum(axis=1, keepdims=True), 1e-30))[occupied],
    }


def gantt_data(res: SimResult, max_bars: int = MAX_GANTT_BARS) -> dict[str, np.ndarray]:
    seg = gantt_segments(res)
    if seg["start"].size > max_bars:
        seg = _binned_segments(res, max_bars)
    return seg


def gpu_rows(res: SimResult) -> list[str]:
    """One Gantt row per GPU of the tensor-parallel group (they run every tick in lockstep)."""
    tp = res.config.hardware.num_gpus
    return ["GPU"] if tp == 1 else [f"GPU {i}" for i in range(min(tp, MAX_GPU_ROWS))]


def _gantt_traces(res: SimResult, rows: list[str]) -> list[go.Bar]:
    seg = gantt_data(res, MAX_GANTT_BARS // len(rows))
    traces = []
    for ph in Phase:
        m = seg["phase"] == ph
        if not m.any():
            continue
        ticks = seg["ticks"][m]
        dur_ms = (seg["end"][m] - seg["start"][m]) * 1e3
        comp = seg["compute"][m]
        bound = np.where(comp * 2 > ticks, "compute-bound", "memory-bound")
        if ph == Phase.IDLE:
            bound = np.full(ticks.size, "-")
        mean_batch = seg["batch"][m] / np.maximum(ticks, 1)
        custom = np.column_stack([ticks, seg["prefill"][m], seg["decode"][m], dur_ms, mean_batch, bound])
        name = PHASE_NAMES[ph]
        traces.append(go.Bar(
            x=np.tile(seg["end"][m] - seg["start"][m], len(rows)), base=np.tile(seg["start"][m], len(rows)),
            y=np.repeat(rows, int(m.sum())), orientation="h",
            marker_color=PHASE_COLORS[name], marker_line_width=0, name=name, legendgroup=name, customdata=np.tile(custom, (len(rows), 1)),
            hovertemplate=(f"<b>{name}</b> · %{{customdata[0]}} tick(s)<br>prefill %{{customdata[1]:,}} tok · decode "
                           "%{customdata[2]:,} tok<br>%{customdata[3]:.1f} ms · mean batch %{customdata[4]:.1f} seqs"
                           "<br>%{customdata[5]}<br>t = %{base:.3f} s<extra></extra>"),
        ))  # fmt: skip
    return traces


def request_segments(res: SimResult, first: int, count: int) -> list[tuple[int, str, float, float]]:
    """(request, state, start_s, end_s) for requests [first, first+count): waiting, prefill, decode,
    preempted (waiting to recompute) and swapped, from the request events."""
    req, ev = res.requests, res.events
    end_of_run = float(res.timeline.t_end_s[-1]) if res.timeline.num_ticks else 0.0
    ids = np.arange(first, min(first + count, req.arrival_s.size))
    in_window = np.isin(ev.req, ids)
    ev_req, ev_t, ev_k = ev.req[in_window], ev.time_s[in_window], ev.kind[in_window]
    out = []
    for r in ids.tolist():
        arrival = float(req.arrival_s[r])
        if not np.isfinite(arrival) or arrival > end_of_run:
            continue
        state, since = "waiting", arrival
        for t, k in zip(ev_t[ev_req == r].tolist(), ev_k[ev_req == r].tolist()):
            nxt = {Event.SCHEDULED: "prefill", Event.FIRST_TOKEN: "decode", Event.PREFILL_DONE: "decode",
                   Event.PREEMPTED: "preempted", Event.SWAPPED_OUT: "swapped", Event.SWAPPED_IN: "decode",
                   Event.FINISHED: None, Event.KV_WAIT: "waiting", Event.KV_TRANSFER_START: "kv transfer",
                   Event.KV_TRANSFER_DONE: "decode"}[k]  # fmt: skip
            if t > since:
                out.append((r, state, since, t))
            state, since = nxt, t
            if nxt is None:
                break
        if state is not None and end_of_run > since:
            out.append((r, state, since, end_of_run))  # unfinished: drawn up to the end of the run
    return out


def _request_traces(res: SimResult, first: int, count: int) -> list[go.Bar]:
    segs = request_segments(res, first, min(count, MAX_REQUEST_ROWS))
    if not segs:
        return []
    r = np.array([s[0] for s in segs])
    state = np.array([s[1] for s in segs])
    start = np.array([s[2] for s in segs])
    end = np.array([s[3] for s in segs])
    req = res.requests
    traces = []
    for name in ("waiting", "prefill", "decode", "preempted", "swapped", "kv transfer"):
        m = state == name
        if not m.any():
            continue
        rr = r[m]
        custom = np.column_stack([rr, req.prompt_tokens[rr], req.output_tokens[rr], (end[m] - start[m]) * 1e3])
        traces.append(go.Bar(
            x=end[m] - start[m], base=start[m], y=[f"req {i}" for i in rr], orientation="h",
            marker_color=PHASE_COLORS[name], marker_line_width=0, name=name, legendgroup=name,
            showlegend=name in ("waiting", "preempted", "swapped", "kv transfer"), customdata=custom,
            hovertemplate=(f"<b>request %{{customdata[0]}}</b> · {name}<br>prompt %{{customdata[1]:,}} · output "
                           "%{customdata[2]:,} tok<br>%{customdata[3]:.1f} ms from t = %{base:.3f} s<extra></extra>"),
        ))  # fmt: skip
    return traces


def reduce_series(t: np.ndarray, y: np.ndarray, max_points: int = MAX_LINE_POINTS) -> tuple[np.ndarray, np.ndarray]:
    """At most max_points (time, value) pairs: the max of each of max_points/2 time bins at its start
    and end, so peaks survive (used for step lines)."""
    if t.size <= max_points:
        return t, y
    bins = max_points // 2
    edges = np.linspace(t[0], t[-1], bins + 1)
    b = np.clip(np.searchsorted(edges, t, side="right") - 1, 0, bins - 1)
    peak = np.full(bins, -np.inf)
    np.maximum.at(peak, b, y)
    ok = np.isfinite(peak)
    tt = np.column_stack([edges[:-1], edges[1:]])[ok].ravel()
    return tt, np.repeat(peak[ok], 2)


def timeline_figure(res: SimResult, first_request: int = 0, num_requests: int = 30, height: int = 720) -> go.Figure:
    """GPU Gantt, request rows, KV usage and queue lengths on one zoomable time axis."""
    n_rows = max(1, min(num_requests, MAX_REQUEST_ROWS, res.requests.arrival_s.size - first_request))
    gpus = gpu_rows(res)
    tp_note = f", tensor parallel {len(gpus)}: every GPU runs each tick" if len(gpus) > 1 else ""
    fig = make_subplots(
        rows=4, cols=1, shared_xaxes=True, vertical_spacing=0.04, row_heights=[0.1 + 0.02 * (len(gpus) - 1), 0.5, 0.2, 0.2],
        subplot_titles=(f"GPU occupancy (one bar per tick or run of ticks{tp_note})",
                        f"Requests {first_request}-{first_request + n_rows - 1}", "KV cache in use", "Queues"),
    )  # fmt: skip
    for tr in _gantt_traces(res, gpus):
        fig.add_trace(tr, row=1, col=1)
    for tr in _request_traces(res, first_request, n_rows):
        fig.add_trace(tr, row=2, col=1)
    tl = res.timeline
    if tl.num_ticks:
        t = tl.t_end_s
        kv_pct = tl.kv_blocks_used / res.memory.num_blocks * 100
        tt, yy = reduce_series(t, kv_pct)
        fig.add_trace(go.Scatter(x=tt, y=yy, mode="lines", line_shape="hv", line_color="#188038", name="KV in use (%)",
                                 hovertemplate="%{y:.1f} % of blocks<br>t = %{x:.3f} s<extra>KV</extra>"), row=3, col=1)  # fmt: skip
        if "kv_blocks_cached" in tl.columns:  # prefix caching: free blocks that still hold a reusable prefix
            tt, yy = reduce_series(t, tl.kv_blocks_cached / res.memory.num_blocks * 100)
            fig.add_trace(go.Scatter(x=tt, y=yy, mode="lines", line_shape="hv", line_color="#81c995", line_dash="dot",
                                     name="KV cached, free (%)",
                                     hovertemplate="%{y:.1f} % of blocks cached but free (evictable)<br>t = %{x:.3f} s"
                                     "<extra>KV</extra>"), row=3, col=1)  # fmt: skip
        for col, name, color in (("num_waiting", "waiting", PHASE_COLORS["waiting"]),
                                 ("num_running", "running", "#202124"),
                                 ("num_swapped", "swapped", PHASE_COLORS["swapped"])):  # fmt: skip
            y = tl.columns[col]
            if name == "swapped" and not y.any():
                continue
            tt, yy = reduce_series(t, y.astype(float))
            fig.add_trace(go.Scatter(x=tt, y=yy, mode="lines", line_shape="hv", line_color=color, name=f"{name} requests",
                                     hovertemplate=f"%{{y:.0f}} {name}<br>t = %{{x:.3f}} s<extra></extra>"), row=4, col=1)  # fmt: skip
    fig.update_layout(
        barmode="overlay", height=height, bargap=0.15, margin=dict(l=10, r=10, t=40, b=40),
        legend=dict(orientation="h", yanchor="bottom", y=1.04, x=0), hoverlabel=dict(align="left"),
    )
    fig.update_yaxes(autorange="reversed", categoryorder="array", categoryarray=gpus, row=1, col=1)  # GPU 0 on top
    # Rows in request order (plotly would order categories by first appearance across traces).
    rows_shown = [f"req {i}" for i in range(first_request, first_request + n_rows)]
    fig.update_yaxes(autorange="reversed", categoryorder="array", categoryarray=rows_shown, row=2, col=1)
    fig.update_yaxes(title_text="% blocks", range=[0, 105], row=3, col=1)
    fig.update_yaxes(title_text="requests", rangemode="tozero", row=4, col=1)
    fig.update_xaxes(title_text="simulated time (s)", row=4, col=1)
    return fig


def count_points(fig: go.Figure) -> int:
    """Data points a figure sends to the browser (for the size bound)."""
    total = 0
    for tr in fig.data:
        x = getattr(tr, "x", None)
        total += len(x) if x is not None else 0
    return total


def gantt_kv_figure(res: SimResult, x_range: tuple[float, float] | None = None, title: str = "", height: int = 300) -> go.Figure:
    """Compact GPU Gantt and KV usage (Compare page); `x_range` puts two runs on one time axis."""
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.16, row_heights=[0.3, 0.7],
                        subplot_titles=("GPU occupancy", "KV cache in use (%)"))  # fmt: skip
    for tr in _gantt_traces(res, gpu_rows(res)):
        fig.add_trace(tr, row=1, col=1)
    tl = res.timeline
    if tl.num_ticks:
        tt, yy = reduce_series(tl.t_end_s, tl.kv_blocks_used / res.memory.num_blocks * 100)
        fig.add_trace(go.Scatter(x=tt, y=yy, mode="lines", line_shape="hv", line_color="#188038", name="KV in use (%)",
                                 showlegend=False), row=2, col=1)  # fmt: skip
    fig.update_layout(barmode="overlay", height=height, title=title, margin=dict(l=10, r=10, t=60, b=30),
                      legend=dict(orientation="h", y=-0.25))  # fmt: skip
    fig.update_yaxes(range=[0, 105], row=2, col=1)
    fig.update_xaxes(title_text="simulated time (s)", row=2, col=1)
    if x_range:
        fig.update_xaxes(range=list(x_range))
    return fig
