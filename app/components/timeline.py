"""The shared-time-axis figure: GPU occupancy Gantt, request timelines, KV usage and queues.

Pure builders (SimResult -> plotly Figure), testable without Streamlit. The figure opens on a
readable *window* (about READABLE_TICKS ticks, placed where the phases interleave most), so each
tick is a few pixels wide and one bar per tick can be drawn and hovered; the whole run is one
choice away. Large views are aggregated for drawing so a figure stays small; the data stays exact:
  * the Gantt draws one bar per tick up to PER_TICK_BARS ticks, else merges adjacent ticks of one
    phase; past MAX_GANTT_BARS it bins time and shows the phase that took most of each bin;
  * request rows are at most MAX_REQUEST_ROWS requests (those active in the window);
  * KV and queue lines are reduced to MAX_LINE_POINTS per series (max per bin keeps the peaks).

Request rows show *stalled* stretches: a tick that computed no decode token (a prefill-only or
swap-only tick) while the request was decoding, i.e. a gap between two of its tokens. Ticks that
move KV over PCIe show their swap time as a red bar at the end of the tick in the GPU row, and the
hover of every tick gives its tensor-parallel all-reduce time.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from app.components.charts import readable_numbers
from app.components.colors import PHASE_COLORS, PHASE_NAMES
from sim_core.costmodel import CostModel
from sim_core.result import SimResult
from sim_core.types import Event, Phase
from sim_core.words import counted

MAX_GANTT_BARS = 1500  # bars over all GPU rows
PER_TICK_BARS = 500  # up to this many ticks in view, one bar (and one hover) per tick
MAX_GPU_ROWS = 8
MAX_REQUEST_ROWS = 60
MAX_LINE_POINTS = 2000
# Cached-but-free KV blocks, dotted beside the solid green of the blocks in use: teal, not the pale #81c995 that a
# projector washed out (lesson 10, a review)
KV_CACHED_COLOR = "#00897b"
MAX_STALL_BARS = 3000  # stalled pieces over all request rows (the longest are kept)
MAX_TIMELINE_POINTS = 30_000  # bound on all data points in the figure (checked by tests)
READABLE_TICKS = 150  # the opening window holds about this many busy ticks (a few px each)
WIDTH_CHOICES_S = (0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0, 2000.0, 5000.0)

Window = tuple[float, float] | None  # (start_s, end_s); None = the whole run
# Plotly labels every row of a category axis only with about 1.2 x its tick font per row (plotly.js prepTicks,
# Lib.bigFont), else every other one: request rows get this font and these pixels (a little slack for the legend,
# which takes its room from the plot)
REQUEST_TICK_FONT_PX = 11
REQUEST_ROW_PX = 15


def request_axis(rows: list[str]) -> dict:
    """The request panel's y axis: rows in request order, first on top, each labelled. The range is set, not
    autoranged: a marker on a row (a KV transfer's) would pad the range by its size, and Plotly would then label
    every other row."""
    # nticks = one per row: every row labelled even where a legend wrapped over many lines (a phone) took some of
    # the room fit_request_rows gave (Plotly would thin to every other label below 13 px per row)
    axis = dict(categoryorder="array", categoryarray=rows, tickfont_size=REQUEST_TICK_FONT_PX, nticks=max(len(rows), 1))
    return axis | (dict(range=[len(rows) - 0.5, -0.5], autorange=False) if rows else dict(autorange="reversed"))


def fit_request_rows(height: int, margin_px: int, row_heights: list[float], spacing: float, panel: int,
                     num_rows: int) -> tuple[int, list[float], float]:  # fmt: skip
    """(height, row_heights, vertical_spacing) of a make_subplots figure so that panel `panel` gives each of its
    `num_rows` category rows REQUEST_ROW_PX: the figure grows by what that panel lacks, the other panels and the
    gaps keep their pixels. Unchanged when it has the room."""
    plot = height - margin_px
    usable = plot * (1 - spacing * (len(row_heights) - 1))
    px = [usable * h / sum(row_heights) for h in row_heights]
    extra = num_rows * REQUEST_ROW_PX - px[panel]
    if extra <= 0:
        return height, row_heights, spacing
    px[panel] += extra
    return int(np.ceil(height + extra)), px, spacing * plot / (plot + extra)


def run_span(res: SimResult) -> tuple[float, float]:
    tl = res.timeline
    return (float(tl.t_start_s[0]), float(tl.t_end_s[-1])) if tl.num_ticks else (0.0, 0.0)


def readable_width_s(res: SimResult) -> float:
    """The window width (one of WIDTH_CHOICES_S) that holds about READABLE_TICKS typical busy ticks."""
    tl = res.timeline
    busy = tl.phase != Phase.IDLE
    if not busy.any():
        return WIDTH_CHOICES_S[-1]
    want = float(np.median(tl.duration_s[busy])) * READABLE_TICKS
    return min(WIDTH_CHOICES_S, key=lambda w: abs(np.log(w / want)))


def opening_window(res: SimResult, width_s: float | None = None) -> Window:
    """A readable window around the busiest moment: the one with most phase changes between busy
    ticks (prefill/decode interleaving), pre-emptions and swaps, a busy window before an idle one. None when the
    whole run is already that short, or (no width asked for) when each of its ticks still gets a bar of its own
    over the whole run: a small run's point is its whole shape (a static batch's holes and the next batch: a
    readable window of mechanism-static-batch showed 2 s of one decoding request out of 4.6 s)."""
    tl = res.timeline
    t0, t1 = run_span(res)
    if width_s is None and tl.num_ticks <= PER_TICK_BARS:
        return None
    width = width_s or readable_width_s(res)
    if tl.num_ticks < 2 or width >= (t1 - t0):
        return None
    phase = tl.phase
    busy = phase != Phase.IDLE
    change = np.r_[False, (phase[1:] != phase[:-1]) & busy[1:] & busy[:-1]]
    # Busy time counts a little (each busy tick 0.01 x its duration over the busy ticks' mean: 0.01 a tick on average),
    # so a busy window beats an idle one with as many events. A count of busy ticks favoured short ticks: it chose the
    # end of lesson 17's 1,024-batch run, 3 requests finishing in many short ticks, over the phase change at 7.8 s in
    # its full batch. (Weighing requests x time instead outscored the pre-emptions lessons 5 and 16 show.)
    busy_s = (tl.t_end_s - tl.t_start_s) * busy
    mean_busy_s = busy_s.sum() / max(int(busy.sum()), 1)
    score = change + 2.0 * (tl.swap_blocks > 0) + 2.0 * (tl.num_preempted > 0) + 0.01 * busy_s / max(mean_busy_s, 1e-12)
    cum = np.r_[0.0, np.cumsum(score)]
    starts = tl.t_start_s
    ends = np.searchsorted(starts, starts + width, side="left")  # (T,) first tick past each window
    best = int(np.argmax(cum[ends] - cum[: starts.size]))
    start = float(starts[best]) - 0.05 * width  # a little lead-in before the first interesting tick
    start = min(max(start, t0), t1 - width)
    return (start, start + width)


def tick_range(res: SimResult, window: Window) -> tuple[int, int]:
    """[lo, hi) of the ticks that overlap the window."""
    tl = res.timeline
    if window is None or tl.num_ticks == 0:
        return 0, tl.num_ticks
    lo = int(np.searchsorted(tl.t_end_s, window[0], side="right"))
    hi = int(np.searchsorted(tl.t_start_s, window[1], side="left"))
    return lo, max(lo, hi)


def _tick_costs(res: SimResult, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
    """(all-reduce s, PCIe swap s) of ticks [lo, hi), from the cost model's own terms."""
    tl = res.timeline
    cost = CostModel(res.config)
    tokens = tl.num_prefill_tokens[lo:hi] + tl.num_decode_tokens[lo:hi]
    comm = cost.comm_time_s(tokens) * (tl.phase[lo:hi] != Phase.IDLE)
    swap = cost.swap_time_s(tl.swap_blocks[lo:hi] * res.memory.block_bytes)
    return comm, swap


def gantt_segments(res: SimResult, lo: int = 0, hi: int | None = None, merge: bool = True) -> dict[str, np.ndarray]:
    """Ticks [lo, hi) as bars: one per tick, or (merge) one per run of adjacent ticks of one phase."""
    tl = res.timeline
    hi = tl.num_ticks if hi is None else hi
    keys = ("start", "end", "phase", "ticks", "first", "prefill", "decode", "compute", "batch", "comm_s", "swap_s")
    if hi <= lo:
        return {k: np.empty(0) for k in keys}
    phase = tl.phase[lo:hi]
    n = hi - lo
    starts = np.flatnonzero(np.r_[True, phase[1:] != phase[:-1]]) if merge else np.arange(n)  # (S,) first tick of each bar
    ends = np.r_[starts[1:], n]
    add = lambda col: np.add.reduceat(col[lo:hi], starts)  # noqa: E731
    comm, swap = _tick_costs(res, lo, hi)
    return {
        "start": tl.t_start_s[lo:hi][starts],
        "end": tl.t_end_s[lo:hi][ends - 1],
        "phase": phase[starts],
        "ticks": ends - starts,
        "first": starts + lo,
        "prefill": add(tl.num_prefill_tokens),
        "decode": add(tl.num_decode_tokens),
        "compute": add(tl.is_compute_bound),
        "batch": add(tl.num_prefill_seqs + tl.num_decode_seqs),
        "comm_s": np.add.reduceat(comm, starts),
        "swap_s": np.add.reduceat(swap, starts),
    }


def _binned_segments(res: SimResult, num_bins: int, lo: int, hi: int) -> dict[str, np.ndarray]:
    """Bin the time of ticks [lo, hi) into equal bins; each bin takes the phase with the most time in it."""
    tl = res.timeline
    t_start, dur, phase = tl.t_start_s[lo:hi], tl.duration_s[lo:hi], tl.phase[lo:hi]
    t0, t1 = float(t_start[0]), float(t_start[-1] + dur[-1])
    edges = np.linspace(t0, t1, num_bins + 1)
    mid = t_start + dur / 2
    b = np.clip(np.searchsorted(edges, mid, side="right") - 1, 0, num_bins - 1)  # bin of each tick
    time_by = np.zeros((num_bins, len(Phase)))
    np.add.at(time_by, (b, phase), dur)
    occupied = time_by.sum(axis=1) > 0
    count = np.bincount(b, minlength=num_bins)
    sum_by = lambda col: np.bincount(b, weights=col, minlength=num_bins)  # noqa: E731
    comm, swap = _tick_costs(res, lo, hi)
    first = np.searchsorted(b, np.arange(num_bins)) + lo
    return {
        "start": edges[:-1][occupied],
        "end": edges[1:][occupied],
        "phase": time_by.argmax(axis=1)[occupied],
        "ticks": count[occupied],
        "first": first[occupied],
        "prefill": sum_by(tl.num_prefill_tokens[lo:hi])[occupied],
        "decode": sum_by(tl.num_decode_tokens[lo:hi])[occupied],
        "compute": sum_by(tl.is_compute_bound[lo:hi])[occupied],
        "batch": sum_by(tl.num_prefill_seqs[lo:hi] + tl.num_decode_seqs[lo:hi])[occupied],
        "comm_s": sum_by(comm)[occupied],
        "swap_s": sum_by(swap)[occupied],
        "mix": (time_by / np.maximum(time_by.sum(axis=1, keepdims=True), 1e-30))[occupied],
    }


def gantt_data(res: SimResult, max_bars: int = MAX_GANTT_BARS, window: Window = None) -> dict[str, np.ndarray]:
    lo, hi = tick_range(res, window)
    if hi - lo <= min(PER_TICK_BARS, max_bars):
        return gantt_segments(res, lo, hi, merge=False)
    seg = gantt_segments(res, lo, hi)
    if seg["start"].size > max_bars:
        seg = _binned_segments(res, max_bars, lo, hi)
    return seg


# What one bar of the GPU row is (gantt_data): its panel's title says it. The whole run titled "one bar per tick" while
# each bar was a run of ticks ("37 ticks from tick 1,204" on hover) or a time bin.
GPU_BAR_TITLES = {"tick": "GPU: one bar per tick", "run": "GPU: one bar per run of ticks in one phase",
                  "bin": "GPU: one bar per time bin (its main phase)"}  # fmt: skip


def bar_kind(seg: dict[str, np.ndarray]) -> str:
    """A key of GPU_BAR_TITLES for `seg` (gantt_data): one tick per bar, runs of one phase merged, or time bins."""
    if "mix" in seg:  # (_binned_segments)
        return "bin"
    return "tick" if bool((seg["ticks"] == 1).all()) else "run"


def gpu_rows(res: SimResult) -> list[str]:
    """One Gantt row per GPU of the tensor-parallel group (they run every tick in lockstep)."""
    tp = res.config.hardware.num_gpus
    return ["GPU"] if tp == 1 else [f"GPU {i}" for i in range(min(tp, MAX_GPU_ROWS))]


def _ms(v: np.ndarray) -> np.ndarray:
    return np.round(np.asarray(v, dtype=float) * 1e3, 2)


# A tick's bar gets a white outline (one bar per tick stays readable) only where a bar is this wide: on Compare's
# half-width charts a 2 s window's ticks are ~2.7 px, and two 0.6 px outlines left decode a pale, striped blue, the
# colour the legend gives "stalled"
MIN_OUTLINED_BAR_PX = 4.0


def _gantt_traces(res: SimResult, rows: list[str], window: Window = None, seg: dict[str, np.ndarray] | None = None,
                  plot_px: float = 800.0) -> list[go.Bar]:  # fmt: skip
    """The GPU rows' bars; `plot_px`: about how wide the plot draws them (the outline's test, MIN_OUTLINED_BAR_PX)."""
    seg = gantt_data(res, MAX_GANTT_BARS // len(rows), window) if seg is None else seg
    per_tick = bool(seg["ticks"].size) and bool((seg["ticks"] == 1).all())
    outlined = per_tick
    if per_tick:
        span = float(seg["end"].max() - seg["start"].min())
        bar_px = plot_px * float(np.median(seg["end"] - seg["start"])) / span if span > 0 else plot_px
        outlined = bar_px >= MIN_OUTLINED_BAR_PX
    tp = len(rows) > 1
    traces = []
    for ph in Phase:
        m = seg["phase"] == ph
        if not m.any():
            continue
        ticks = seg["ticks"][m]
        comp = seg["compute"][m]
        bound = np.where(comp * 2 > ticks, "compute-bound", "memory-bound")
        if ph == Phase.IDLE:
            bound = np.full(ticks.size, "-")
        what = (np.char.add("tick ", seg["first"][m].astype(int).astype(str)) if per_tick
                else np.array([f"{counted(int(n), 'tick')} from tick {int(f)}" for n, f in zip(ticks, seg["first"][m])]))  # fmt: skip
        custom = np.column_stack([what, seg["prefill"][m].astype(int), seg["decode"][m].astype(int),
                                  _ms(seg["end"][m] - seg["start"][m]), np.round(seg["batch"][m] / np.maximum(ticks, 1), 1),
                                  bound, _ms(seg["comm_s"][m]), _ms(seg["swap_s"][m])])  # fmt: skip
        name = PHASE_NAMES[ph]
        extra = ("<br>of which TP all-reduce %{customdata[6]:,} ms" if tp else "") + (
            "<br>of which PCIe swap %{customdata[7]:,} ms" if seg["swap_s"][m].any() else "")  # fmt: skip
        traces.append(go.Bar(
            x=np.tile(seg["end"][m] - seg["start"][m], len(rows)), base=np.tile(seg["start"][m], len(rows)),
            y=np.repeat(rows, int(m.sum())), orientation="h", marker_color=PHASE_COLORS[name],
            marker_line=dict(width=0.6 if outlined else 0, color="white"), name=name, legendgroup=name,
            customdata=np.tile(custom, (len(rows), 1)),
            hovertemplate=(f"<b>{name}</b> · %{{customdata[0]}}<br>prefill %{{customdata[1]:,}} tok · decode "
                           "%{customdata[2]:,} tok · batch %{customdata[4]:,} seqs<br>%{customdata[3]:,} ms" + extra +
                           "<br>%{customdata[5]} · t = %{base:,.3f} s<extra></extra>"),
        ))  # fmt: skip
    swap_bars = _swap_traces(res, rows, window)
    return traces + swap_bars


def _swap_traces(res: SimResult, rows: list[str], window: Window) -> list[go.Bar]:
    """Red bars for the PCIe part of ticks that also computed (swap-only ticks are red already)."""
    tl = res.timeline
    lo, hi = tick_range(res, window)
    idx = np.flatnonzero((tl.swap_blocks[lo:hi] > 0) & (tl.phase[lo:hi] != Phase.SWAP)) + lo
    if idx.size == 0:
        return []
    swap = CostModel(res.config).swap_time_s(tl.swap_blocks[idx] * res.memory.block_bytes)
    limit = MAX_GANTT_BARS // (2 * len(rows))
    if idx.size > limit:  # keep the longest transfers visible
        keep = np.sort(np.argsort(-swap, kind="stable")[:limit])
        idx, swap = idx[keep], swap[keep]
    end = tl.t_end_s[idx]
    custom = np.column_stack([idx, tl.swap_blocks[idx], _ms(swap)])
    return [go.Bar(
        x=np.tile(swap, len(rows)), base=np.tile(end - swap, len(rows)), y=np.repeat(rows, idx.size),
        orientation="h", width=0.5, marker_color=PHASE_COLORS["swap"], marker_line_width=0, name="swap (PCIe)",
        legendgroup="swap", customdata=np.tile(custom, (len(rows), 1)),
        hovertemplate="<b>swap</b> in tick %{customdata[0]}: %{customdata[1]:,} KV blocks over PCIe, "
                      "%{customdata[2]:,} ms<extra></extra>",
    )]  # fmt: skip


def stall_intervals(res: SimResult, lo: int = 0, hi: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(start_s, end_s) of runs of busy ticks in [lo, hi) that computed no decode token: every
    request that is decoding then waits for its next token."""
    tl = res.timeline
    hi = tl.num_ticks if hi is None else hi
    stalled = (tl.phase[lo:hi] != Phase.IDLE) & (tl.num_decode_tokens[lo:hi] == 0)
    edges = np.diff(np.r_[0, stalled.astype(np.int8), 0])
    first, last = np.flatnonzero(edges == 1) + lo, np.flatnonzero(edges == -1) + lo - 1
    return tl.t_start_s[first], tl.t_end_s[last]


def alive_in_window(res: SimResult, window: tuple[float, float]) -> np.ndarray:
    """Ids of the requests alive during the window: arrived before its end, not finished before its start."""
    req = res.requests
    end = np.where(np.isnan(req.finish_s), np.inf, req.finish_s)
    return np.flatnonzero((req.arrival_s < window[1]) & (end > window[0]))


def requests_in_window(res: SimResult, window: Window, skip: int = 0, count: int = 30,
                       among: np.ndarray | None = None) -> np.ndarray:  # fmt: skip
    """Ids (arrival order) of the requests to show: those alive during the window (arrived before
    its end, not finished before its start), after skipping `skip` of them; at most `count`; `among`: a mask of the
    requests that may be shown (a deployment's on the instances drawn), default all.

    When more are alive than the rows hold, the rows go first to the requests the GPU serves in the
    window (scheduled before its end), and of those first to the ones that arrive in it (in arrival
    order), whose waiting, prefill, KV transfer and first decodes are in view, then to those still
    running from before it, latest arrival first: the oldest requests alive are long decodes that would
    fill the rows with one colour (a disaggregated deployment's decode pool holds several seconds of
    them). Requests that only wait through the window come last: a static batch's queue filled every
    row with grey while the batch the GPU was running went unshown (lesson 2's FasterTransformer side)."""
    req = res.requests
    n = req.arrival_s.size
    if window is None:
        return np.arange(min(skip, n), min(skip + count, n)) if among is None else np.flatnonzero(among)[skip : skip + count]
    alive = alive_in_window(res, window)
    if among is not None:
        alive = alive[among[alive]]
    # by arrival, not by id: a closed-loop session's later turn arrives when the previous reply is done, after
    # requests with higher ids (stable: equal arrivals by id)
    alive = alive[np.argsort(req.arrival_s[alive], kind="stable")]
    before = req.arrival_s[alive] < window[0]
    served = req.first_scheduled_s[alive] < window[1]  # (NaN: never scheduled)
    order = np.concatenate([alive[~before & served], alive[before & served][::-1],
                            alive[~before & ~served], alive[before & ~served][::-1]])[skip : skip + count]  # fmt: skip
    return order[np.lexsort((order, req.arrival_s[order]))]


def request_segments(res: SimResult, first: int, count: int, ids: np.ndarray | None = None,
                     split_stalls: bool = True) -> list[tuple[int, str, float, float]]:  # fmt: skip
    """(request, state, start_s, end_s) for requests `ids` (default [first, first+count)): waiting,
    prefill, decode, stalled (decoding, but the tick gave it no token), preempted (pre-empted: waiting to
    recompute), swapped and, in a disaggregated deployment, kv wait (prefill done, waiting for a decode
    slot: back-pressure), kv link wait (slot reserved, earlier transfers hold the link) and kv transfer, from the
    request events (and a deployment's `kv_link_start_s`: no event marks where a transfer starts moving)."""
    req, ev = res.requests, res.events
    link_start = getattr(res, "kv_link_start_s", None)  # (ClusterResult's; none for one engine)
    end_of_run = float(res.timeline.t_end_s[-1]) if res.timeline.num_ticks else 0.0
    if ids is None:
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
                   Event.FINISHED: None, Event.KV_WAIT: "kv wait", Event.KV_TRANSFER_START: "kv transfer",
                   Event.KV_TRANSFER_DONE: "decode"}[k]  # fmt: skip
            if state == "kv link wait" and t > link_start[r]:  # (queued, then moving: one state each)
                state, since = _link_wait(out, r, since, float(link_start[r]))
            if t > since:
                out.append((r, state, since, t))
            state, since = nxt, t
            if nxt == "kv transfer" and link_start is not None and link_start[r] > t:
                state = "kv link wait"
            if nxt is None:
                break
        if state == "kv link wait" and end_of_run > link_start[r]:
            state, since = _link_wait(out, r, since, float(link_start[r]))
        if state is not None and end_of_run > since:
            out.append((r, state, since, end_of_run))  # unfinished: drawn up to the end of the run
    return stall_split(res, out) if split_stalls else out


def _link_wait(out: list, r: int, since: float, moves_s: float) -> tuple[str, float]:
    """Request r's KV transfer waited for the link from `since` to `moves_s`: that segment, and its moving state."""
    out.append((r, "kv link wait", since, moves_s))
    return "kv transfer", moves_s


def stall_split(res: SimResult, segs: list[tuple[int, str, float, float]]) -> list[tuple[int, str, float, float]]:
    """Cut decode segments where a tick of `res` (the engine the requests decode on) gave no decode token into
    decode and stalled pieces."""
    s0, s1 = stall_intervals(res)
    if s0.size == 0:
        return segs
    out: list[tuple[int, str, float, float]] = []
    for r, state, a, b in segs:
        if state != "decode":
            out.append((r, state, a, b))
            continue
        i, j = int(np.searchsorted(s1, a, side="right")), int(np.searchsorted(s0, b, side="left"))
        t = a
        for x0, x1 in zip(s0[i:j].tolist(), s1[i:j].tolist()):
            x0, x1 = max(x0, a), min(x1, b)
            if x1 <= x0:
                continue
            if x0 > t:
                out.append((r, "decode", t, x0))
            out.append((r, "stalled", x0, x1))
            t = x1
        if b > t:
            out.append((r, "decode", t, b))
    return out


REQUEST_STATES = ("waiting", "prefill", "decode", "stalled", "preempted", "swapped", "kv wait", "kv link wait", "kv transfer")
# prefill/decode: the GPU row's entries
LEGEND_STATES = ("waiting", "stalled", "preempted", "swapped", "kv wait", "kv link wait", "kv transfer")
# A state's word where its key is not spelled as the text spells it: the README, the docs, the lessons and the headline
# write "pre-empted" (the key, an identifier the lessons' claims name, stays "preempted")
STATE_WORDS = {"preempted": "pre-empted"}
# legend and hover names where the state's key is not clear enough
STATE_LABELS = {"stalled": "stalled (no token this tick)", "kv wait": "waiting for a decode slot",
                "kv link wait": "waiting for the KV link"}  # fmt: skip
# one more hover line for a state whose name alone does not say what holds the request
STATE_HOVER = {"kv wait": "prefill done; its KV stays on the prefill instance until a decode instance has free blocks",
               "kv link wait": "decode slot reserved; earlier transfers hold its prefill or decode instance's side of "
               "the link"}  # fmt: skip


def request_legend_states(drawn: set[str] | list[str], gpu_entries: set[str] | list[str]) -> list[str]:
    """The request states the legend names: those only request rows have, and prefill/decode when the GPU
    row shows no bar of that phase (a window of mixed ticks only still has orange prefill in its request rows:
    its colour was in no legend entry)."""
    return [s for s in REQUEST_STATES if s in drawn and (s in LEGEND_STATES or s not in gpu_entries)]


def request_bars(res: SimResult, ids: np.ndarray, window: Window, max_stall_bars: int = MAX_STALL_BARS) -> dict[str, np.ndarray]:
    """The request rows' bars (request id, state, start_s, end_s), clipped to the window; past
    `max_stall_bars` stalled pieces only the longest stay stalled, the rest read as decode."""
    segs = request_segments(res, 0, 0, ids=ids)
    if window is not None:  # clip to the window: bars outside it are not sent
        segs = [(r, s, max(a, window[0]), min(b, window[1])) for r, s, a, b in segs if b > window[0] and a < window[1]]
    r = np.array([s[0] for s in segs], dtype=np.int64)
    state = np.array([s[1] for s in segs], dtype=object)
    start = np.array([s[2] for s in segs], dtype=float)
    end = np.array([s[3] for s in segs], dtype=float)
    stalled = np.flatnonzero(state == "stalled")
    if stalled.size > max_stall_bars:  # whole-run view of a long run: keep the longest stalls
        drop = stalled[np.argsort(-(end[stalled] - start[stalled]), kind="stable")[max_stall_bars:]]
        state[drop] = "decode"
    return {"req": r, "state": state, "start": start, "end": end}


def request_state_word(state: str) -> str:
    """A request state as a sentence writes it ("pre-empted")."""
    return STATE_WORDS.get(state, state)


def request_state_label(state: str) -> str:
    """A request state as the legend and the hover name it."""
    return STATE_LABELS.get(state, request_state_word(state))


def request_state_hover(state: str) -> str:
    """The state as a request bar's hover names it: its label and, for some, what it waits for (one line each)."""
    note = STATE_HOVER.get(state)
    return request_state_label(state) + (f"<br>{note}" if note else "")


def _request_traces(res: SimResult, ids: np.ndarray, window: Window, gpu_entries: set[str]) -> list[go.Bar]:
    bars = request_bars(res, ids, window)
    r, state, start, end = bars["req"], bars["state"], bars["start"], bars["end"]
    req = res.requests
    legend = request_legend_states(set(state.tolist()), gpu_entries)
    traces = []
    for name in REQUEST_STATES:
        m = state == name
        if not m.any():
            continue
        rr = r[m]
        custom = np.column_stack([rr, req.prompt_tokens[rr], req.output_tokens[rr], _ms(end[m] - start[m])])
        label = request_state_label(name)
        traces.append(go.Bar(
            x=end[m] - start[m], base=start[m], y=[f"req {i}" for i in rr], orientation="h",
            marker_color=PHASE_COLORS[name], marker_line_width=0, name=label, legendgroup=name,
            showlegend=name in legend, customdata=custom,
            hovertemplate=(f"<b>request %{{customdata[0]}}</b> · {request_state_hover(name)}<br>prompt %{{customdata[1]:,}} · output "
                           "%{customdata[2]:,} tok<br>%{customdata[3]:,} ms from t = %{base:,.3f} s<extra></extra>"),
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


def values_in_view(t_end_s: np.ndarray, window: tuple[float, float]) -> slice:
    """The step values (each from its tick's end `t_end_s` to the next one's) drawn in the window: the one in force at
    its start to the last that starts in it (at least one). The KV note's peak and the reduced lines both read it."""
    lo = max(int(np.searchsorted(t_end_s, window[0], side="right")) - 1, 0)
    return slice(lo, max(int(np.searchsorted(t_end_s, window[1], side="right")), lo + 1))


def reduce_series_in_view(t: np.ndarray, y: np.ndarray, window: Window, max_points: int = MAX_LINE_POINTS
                          ) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """`reduce_series` over the whole run with most of the points in the window (from the value in force at its start
    to the last that starts in it): a deployment's KV lines cover the run, to zoom out, and binned over the whole of it a
    bin wider than the window drew in view a peak from outside it (12 replicas: the note's "peak in view 10.4 % · R10"
    above an R10 line that reached 10.0 % in view, a review)."""
    if window is None or t.size <= max_points:
        return reduce_series(t, y, max_points)
    # (one past the window, binned with its values, drew its value from inside it; the next part's first point ends the
    # last one's step at its own time)
    view = values_in_view(t, window)
    lo, hi = view.start, view.stop
    # each side at most an eighth of the points, and no more than it has (one engine's lines take a tick either side of
    # the window: a fixed eighth each left the window three quarters of its points, a review)
    side = max(max_points // 8, 2)
    before, after = min(lo, side), min(t.size - hi, side)
    parts = [reduce_series(t[:lo], y[:lo], side), reduce_series(t[lo:hi], y[lo:hi], max_points - before - after),
             reduce_series(t[hi:], y[hi:], side)]  # fmt: skip
    return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])


def _line_slice(res: SimResult, window: Window) -> slice:
    lo, hi = tick_range(res, window)
    return slice(max(lo - 1, 0), min(hi + 1, res.timeline.num_ticks))  # one point either side: lines reach the edges


@dataclass(frozen=True)
class LineSeries:
    """One step line (value y[i] from t[i] until t[i+1]) of the KV panel (3) or the queue panel (4)."""

    panel: int
    name: str  # legend entry
    color: str
    dash: str  # "solid" | "dot"
    unit: str  # what the value counts, for the hover ("% of blocks", "waiting")
    decimals: int
    tag: str  # short panel name for the hover box
    t: np.ndarray
    y: np.ndarray
    reduced: bool  # each value is the peak of a time bin (too many ticks to draw one by one)


def _queue_during_next_tick(res: SimResult, col: str) -> np.ndarray:
    """A queue count as its line draws it: the value at tick i's end holds until tick i + 1's end, so it is the count
    during tick i + 1 (the last: after the run). A tick's row counts its queues after the tick (admissions at its start
    and finishes at its end done), so tick i + 1's running requests are its row's and those that finished at its end:
    drawn from the rows as they are, the running line fell to 0 through every prefill tick that followed a finished
    batch (mechanism-priority's batches of 2, exclusive execution's every request) while the Gantt showed that batch
    prefilling."""
    tl = res.timeline
    y = tl.columns[col].astype(np.int64)
    if col == "num_running":
        finish = res.requests.finish_s
        finish = finish[np.isfinite(finish)]
        tick = np.searchsorted(tl.t_end_s, finish, side="left")  # (a request finishes at its last tick's end)
        y = y + np.bincount(tick[tick < y.size], minlength=y.size)
    return np.r_[y[1:], tl.columns[col][-1:]]


def line_series(res: SimResult, window: Window, max_points: int = MAX_LINE_POINTS) -> list[LineSeries]:
    """KV usage (and, with prefix caching, cached-but-free blocks) and queue lengths over the window,
    each reduced to at most `max_points` (peaks kept); all share one time base."""
    tl = res.timeline
    if not tl.num_ticks:
        return []
    sl = _line_slice(res, window)
    t = tl.t_end_s[sl]
    blocks = res.memory.num_blocks
    out = []
    red = t.size > max_points
    tt, yy = reduce_series_in_view(t, tl.kv_blocks_used[sl] / blocks * 100, window, max_points)
    out.append(LineSeries(3, "KV in use (%)", PHASE_COLORS["kv"], "solid", "% of blocks", 1, "KV", tt, yy, red))
    if "kv_blocks_cached" in tl.columns:  # prefix caching: free blocks that still hold a reusable prefix
        tt, yy = reduce_series_in_view(t, tl.columns["kv_blocks_cached"][sl] / blocks * 100, window, max_points)
        out.append(LineSeries(3, "KV cached, free (%)", KV_CACHED_COLOR, "dot", "% of blocks cached but free (evictable)", 1, "KV", tt, yy, red))
    # Running first, waiting and swapped dotted over it: where two counts are equal (a KV-bound run holds as many waiting,
    # or swapped, as running) a solid line hid the other, and the panel showed one line of two (a review)
    for col, name in (("num_running", "running"), ("num_waiting", "waiting"), ("num_swapped", "swapped")):
        y = _queue_during_next_tick(res, col)[sl]
        if name == "swapped" and not y.any():
            continue
        tt, yy = reduce_series_in_view(t, y.astype(float), window, max_points)
        color = PHASE_COLORS["waiting line" if name == "waiting" else name]
        out.append(LineSeries(4, f"{name} requests", color, "solid" if name == "running" else "dot", name, 0, "", tt, yy, red))
    return out


def window_requests_title(ids: np.ndarray, num_alive: int, first_request: int) -> str:
    """The request rows' title in a window: how many rows of how many requests alive ("30 of the 34 requests alive
    in this window": it said "30 requests alive" where 34 were, the rows' count, not the window's)."""
    skipped = f" (after skipping {first_request})" if first_request else ""
    if ids.size == num_alive:
        return f"{counted(num_alive, 'request')} alive in this window"
    return f"{ids.size:,} of the {num_alive:,} requests alive in this window{skipped}"


def panel_titles(gpus: list[str], ids: np.ndarray, window: Window, first_request: int,
                 bars: str = "tick", num_alive: int | None = None) -> tuple[str, str, str, str]:  # fmt: skip
    """The four panels' titles (Plotly figure and the HTML timeline); `bars`: what a GPU bar is (bar_kind);
    `num_alive`: the requests alive in the window (`alive_in_window`)."""
    tp_note = f" · tensor parallel {len(gpus)}: every GPU runs each tick" if len(gpus) > 1 else ""
    if window is None:
        req_title = (f"Requests {ids[0]}–{ids[-1]}" if ids.size > 1 else f"Request {ids[0]}" if ids.size else "Requests")
    else:
        req_title = window_requests_title(ids, ids.size + first_request if num_alive is None else num_alive, first_request)
    return f"{GPU_BAR_TITLES[bars]}{tp_note}", req_title, "KV cache in use", "Queues"


def kv_peak_in_view_pct(res: SimResult, window: Window) -> float | None:
    """The most KV blocks in use in the window (a window of None: the whole run), as the KV panel draws them: each
    tick's count after its frees, from its end to the next tick's (the headline's peak is the run's, in a tick), so the
    value in force at the window's start and those of the ticks ending in it; in % of the pool; None when no tick ran.
    (Counting every tick that overlaps the window took in the last one's value, drawn from its end past the window.)"""
    tl = res.timeline
    used = tl.kv_blocks_used
    if window is not None:
        if not tl.num_ticks or tl.t_end_s[0] > window[1]:
            return None  # (nothing drawn in it yet)
        used = used[values_in_view(tl.t_end_s, window)]
    return float(used.max()) / res.memory.num_blocks * 100 if used.size else None


def kv_peak_text(pct: float, where: str = "") -> str:
    """'peak in view 12.0 %' (and where: ' · R2'): on the KV panel's fixed 0-100 % axis a few percent is a line on the
    floor (reviews of lesson 14, 4-5.5 %, and of the default run, 12 %). Short, as the panel titles (a narrow chart
    clips a long one)."""
    return f"peak in view {pct:,.1f} %" + (f" · {where}" if where else "")


def kv_peak_note(fig: go.Figure, pct: float, where: str, row: int) -> None:
    """`kv_peak_text` inside the KV panel of row `row`, at its top right."""
    fig.add_annotation(text=kv_peak_text(pct, where), xref=f"x{row} domain",
                       yref=f"y{row} domain", x=0.995, y=0.97, xanchor="right", yanchor="top", showarrow=False,
                       font=dict(size=11), bgcolor="rgba(255,255,255,0.75)")  # fmt: skip


def kv_axis_top_pct(peak_pct: float) -> float:
    """A KV panel's top: 0-105 % once a line passes 60 % in view, else the peak of its lines in view with a quarter's
    headroom, in steps of 5. On a fixed 0-100 axis a run whose cache held 0.5-12 % drew a line on the floor, an empty
    panel to a room asked to watch it (lessons 2-4, 6, 8, 17), and four replicas at 3-10 % one band (a review). The
    panel's note says its peak in view; a drag past the window may show a higher stretch clipped: the window controls,
    which the caption points to, rescale."""
    if peak_pct > 60:
        return 105.0
    return float(max(5, math.ceil(peak_pct * 1.25 / 5) * 5))


def kv_lines_peak_pct(lines: list[LineSeries]) -> float:
    """The highest value of a figure's KV-panel lines (in use, and cached but free with the prefix cache), 0 if none."""
    return max((float(ln.y.max()) for ln in lines if ln.panel == 3 and ln.y.size), default=0.0)


def timeline_figure(res: SimResult, first_request: int = 0, num_requests: int = 30, height: int = 720,
                    window: Window = None) -> go.Figure:  # fmt: skip
    """GPU Gantt, request rows, KV usage and queue lengths on one zoomable time axis. With a window,
    only that stretch is drawn and the request rows are the requests alive in it (`first_request`
    of them skipped); without, the whole run and requests [first_request, first_request+num)."""
    count = max(1, min(num_requests, MAX_REQUEST_ROWS))
    ids = requests_in_window(res, window, first_request, count)
    gpus = gpu_rows(res)
    height, heights, spacing = fit_request_rows(height, 80, [0.1 + 0.02 * (len(gpus) - 1), 0.5, 0.2, 0.2], 0.05, 1, ids.size)
    seg = gantt_data(res, MAX_GANTT_BARS // len(gpus), window)
    fig = make_subplots(
        rows=4, cols=1, shared_xaxes=True, vertical_spacing=spacing, row_heights=heights,
        subplot_titles=panel_titles(gpus, ids, window, first_request, bar_kind(seg),
                                    None if window is None else alive_in_window(res, window).size),
    )  # fmt: skip
    gantt = _gantt_traces(res, gpus, window, seg)
    for tr in gantt:
        fig.add_trace(tr, row=1, col=1)
    for tr in _request_traces(res, ids, window, {tr.name for tr in gantt}):
        fig.add_trace(tr, row=2, col=1)
    lines = line_series(res, window)
    for line in lines:
        fig.add_trace(go.Scatter(
            x=line.t, y=line.y, mode="lines", line_shape="hv", line_color=line.color, line_dash=line.dash, name=line.name,
            hovertemplate=f"%{{y:,.{line.decimals}f}} {line.unit}<br>t = %{{x:,.3f}} s<extra>{line.tag}</extra>",
        ), row=line.panel, col=1)  # fmt: skip
    fig.update_layout(
        barmode="overlay", height=height, bargap=0.15, margin=dict(l=10, r=10, t=40, b=40),
        # legend under the chart: on a phone it wraps downwards instead of over the titles
        legend=dict(orientation="h", yanchor="top", y=-0.09, x=0), hoverlabel=dict(align="left"),
    )
    fig.update_yaxes(autorange="reversed", categoryorder="array", categoryarray=gpus, row=1, col=1)  # GPU 0 on top
    # Rows in request order (plotly would order categories by first appearance across traces).
    fig.update_yaxes(request_axis([f"req {i}" for i in ids]), row=2, col=1)
    fig.update_yaxes(title_text="% blocks", range=[0, kv_axis_top_pct(kv_lines_peak_pct(lines))], row=3, col=1)
    if (peak := kv_peak_in_view_pct(res, window)) is not None:
        kv_peak_note(fig, peak, "", row=3)
    fig.update_yaxes(title_text="requests", rangemode="tozero", row=4, col=1)
    fig.update_xaxes(title_text="simulated time (s)", row=4, col=1)
    if window is not None:
        fig.update_xaxes(range=list(window))
    return readable_numbers(fig)


def count_points(fig: go.Figure) -> int:
    """Data points a figure sends to the browser (for the size bound)."""
    total = 0
    for tr in fig.data:
        x = getattr(tr, "x", None)
        total += len(x) if x is not None else 0
    return total


COMPARE_PLOT_PX = 400.0  # (each of Compare's two Gantts: half the page, less its axis labels)


def gantt_kv_figure(res: SimResult, x_range: tuple[float, float] | None = None, title: str = "", height: int = 300,
                    window: Window = None) -> go.Figure:  # fmt: skip
    """Compact GPU Gantt and KV usage (Compare page); `x_range` puts two runs on one time axis,
    `window` draws only that stretch (both runs get the same one)."""
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.16, row_heights=[0.3, 0.7],
                        subplot_titles=("GPU", "KV cache in use (%)"))  # fmt: skip
    for tr in _gantt_traces(res, gpu_rows(res), window, plot_px=COMPARE_PLOT_PX):
        fig.add_trace(tr, row=1, col=1)
    tl = res.timeline
    if tl.num_ticks:
        sl = _line_slice(res, window)
        tt, yy = reduce_series_in_view(tl.t_end_s[sl], tl.kv_blocks_used[sl] / res.memory.num_blocks * 100, window)
        fig.add_trace(go.Scatter(x=tt, y=yy, mode="lines", line_shape="hv", line_color=PHASE_COLORS["kv"], name="KV in use (%)",
                                 showlegend=False), row=2, col=1)  # fmt: skip
    # the legend hangs from its top (anchored by its bottom, a legend wrapped to two rows on a phone rose over the
    # time axis's title)
    fig.update_layout(barmode="overlay", height=height, title=dict(text=title, font=dict(size=14)),
                      margin=dict(l=10, r=10, t=60 if title else 30, b=30), legend=dict(orientation="h", y=-0.3, yanchor="top"))  # fmt: skip
    fig.update_yaxes(range=[0, 105], row=2, col=1)
    fig.update_xaxes(title_text="simulated time (s)", row=2, col=1)
    if window is not None:
        fig.update_xaxes(range=list(window))
    elif x_range:
        fig.update_xaxes(range=list(x_range))
    return readable_numbers(fig)
