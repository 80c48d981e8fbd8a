"""The timeline of a deployment (sim_core/cluster): one Gantt row per instance (a TP group is one row
with its GPU count), request rows named after the instance(s) they ran on, each request's wait for a
decode slot and KV transfer, and KV usage per instance; same shared time axis as `timeline`.

Pure builder (ClusterResult -> plotly Figure), bounded like the single-engine figure: the Gantt
bars are split between instances, request rows are a window, lines are reduced.
"""

from __future__ import annotations

import re

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from app.components import timeline
from app.components.charts import readable_numbers
from app.components.colors import PHASE_COLORS, PHASE_NAMES
from app.components.text import plotly_text
from sim_core.cluster import ClusterResult
from sim_core.types import Phase
from sim_core.words import counted

MIN_BAR_FRACTION = 1 / 200  # a KV transfer shorter than this share of the view also gets a marker (a bar is ~5 px or less)
MAX_INSTANCE_ROWS = 16  # more instances: 16 are drawn, shared between the pools (`shown_instances`; all are in the tables)
# KV lines per instance: greens, browns and greys that no phase, request state or A/B run uses
# (a KV line in prefill orange would read as prefill), told apart by dash as well as colour
KV_COLORS = ("#188038", "#795548", "#202124", "#827717", "#3E2723", "#33691E", "#5F6368", "#A1887F")
KV_DASHES = ("solid", "dash", "dot", "dashdot", "longdash", "longdashdot", "solid", "dash")


def kv_line_style(k: int) -> dict:
    """The k-th KV line's colour and dash: the first 8 pair colour k with dash k; the next 8 shift the dash by one, so
    the 16 lines drawn at most are 16 different pairs (line 8 read as line 0 when both went by k % 8)."""
    return dict(color=KV_COLORS[k % len(KV_COLORS)], dash=KV_DASHES[(k + k // len(KV_COLORS)) % len(KV_DASHES)])


def short_gpu_names(names: list[str]) -> dict[str, str]:
    """Each GPU name cut after its first words, as few as keep the names apart ('H100 SXM' and 'A100 80GB SXM' ->
    'H100', 'A100'; 'A100 40GB SXM' and 'A100 80GB SXM' -> 'A100 40GB', 'A100 80GB'): a row label stays short."""
    kinds = sorted(set(names))
    ends = {n: [m.end() for m in re.finditer(r"[^\s,()]+", n)] or [len(n)] for n in kinds}  # where each word ends
    for k in range(1, max(len(e) for e in ends.values()) + 1) if kinds else ():
        short = {n: n[: e[min(k, len(e)) - 1]] for n, e in ends.items()}
        if len(set(short.values())) == len(kinds):
            return short
    return {n: n for n in kinds}  # names that differ only in punctuation or spaces: whole


# A row label has a wide form and a narrow one, each in a <span style> that Plotly draws as an SVG tspan with that
# style; the app's CSS (ROW_LABEL_CSS) shows the narrow one on a phone. At 390 px the wide labels ("prefill 0 · 2 GPUs",
# "req 350 · P2→D0") took a third of the chart and the KV lines' legend as much. The narrow form is hidden inline too:
# a figure drawn without the app's CSS (a PNG download) reads the wide one.
_WIDE_STYLE, _NARROW_STYLE = "--row-label:wide", "--row-label:narrow;display:none"
ROW_LABEL_CSS = ("@media (max-width: 640px) { tspan[style*='--row-label:wide'] { display: none !important; } "
                 "tspan[style*='--row-label:narrow'] { display: inline !important; } }")  # fmt: skip


def responsive_label(wide: str, narrow: str) -> str:
    """`wide` on a wide screen, `narrow` on a phone (ROW_LABEL_CSS); both Plotly text already."""
    return f"<span style='{_WIDE_STYLE}'>{wide}</span><span style='{_NARROW_STYLE}'>{narrow}</span>"


def _code(x) -> str:
    """An instance in two characters or so: 'R2', 'P0', 'D1' (the xPyD notation of the request rows)."""
    return f"{x.role[0].upper()}{x.index}"


def busy_s(inst, window: timeline.Window = None) -> float:
    """An instance's busy time (its non-idle ticks), within the window when one is given, s."""
    tl = inst.result.timeline
    if not tl.num_ticks:
        return 0.0
    lo, hi = window if window is not None else (-np.inf, np.inf)
    overlap = np.clip(np.minimum(tl.t_end_s, hi) - np.maximum(tl.t_start_s, lo), 0.0, None)
    return float(overlap[tl.phase != Phase.IDLE].sum())


def shown_instances(res: ClusterResult, window: timeline.Window = None) -> list:
    """The instances that get a Gantt row and a KV line, in the deployment's order: all of them up to MAX_INSTANCE_ROWS;
    past it the rows are shared between the pools, so that both pools of a large xPyD stay in view (the first 16 of
    64P64D were all prefill instances, and its decoding had no row): each pool gets an equal share or its whole size if
    smaller, and what a small pool leaves goes to the others in turn. A pool's share goes to its busiest instances in
    the window (the whole run without one; ties: the lowest index): its lowest indices drew 64P64D's P0-P7 and D0-D7 idle
    in a window whose requests ran on P10-P39 and D10-D39."""
    instances = list(res.instances)
    if len(instances) <= MAX_INSTANCE_ROWS:
        return instances
    pools: dict[str, list] = {}
    for x in instances:
        pools.setdefault(x.role, []).append(x)
    take = dict.fromkeys(pools, 0)
    left = MAX_INSTANCE_ROWS
    while left:  # one row at a time to each pool that has more, in pool order: equal shares, a small pool's rest shared
        for role, members in pools.items():
            if left and take[role] < len(members):
                take[role] += 1
                left -= 1
    keep = set()
    for role, members in pools.items():
        order = sorted(range(len(members)), key=lambda k: (-busy_s(members[k], window), k))  # (stable: index breaks ties)
        keep |= {id(members[k]) for k in order[: take[role]]}
    return [x for x in instances if id(x) in keep]


def _ranges(indices: list[int]) -> str:
    """Sorted indices as runs: [0, 1, 2, 5, 7, 8] -> '0-2, 5, 7-8'."""
    runs: list[list[int]] = []
    for i in indices:
        if runs and i == runs[-1][1] + 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    return ", ".join(f"{a}-{b}" if b > a else f"{a}" for a, b in runs)


def shown_caption(res: ClusterResult, window: timeline.Window = None) -> str:
    """What the Gantt leaves out, in words ('' when every instance has a row): e.g. 'prefill 0-7 of 64 and decode 0-7 of
    64 drawn', or the busiest in the window: 'prefill 12-15, 20-23 of 64 (the busiest in this window) and ...'."""
    shown = shown_instances(res, window)
    if len(shown) == len(res.instances):
        return ""
    drawn: dict[str, list[int]] = {}
    sizes: dict[str, int] = {}
    for x in res.instances:
        sizes[x.role] = sizes.get(x.role, 0) + 1
        drawn.setdefault(x.role, [])
    for x in shown:
        drawn[x.role].append(x.index)
    where = "this window" if window is not None else "the run"
    return " and ".join(f"{role} {_ranges(sorted(drawn[role]))} of {n}" for role, n in sizes.items()) + (
        f" drawn (each pool's busiest in {where})" if len(sizes) > 1 else f" drawn (the busiest in {where})")


def kv_waits(res) -> tuple[int, int]:
    """How many requests of a disaggregated run waited for a decode slot, and how many for the KV link: the caption
    explains the marks the run has (it spoke of amber where none was drawn, and not of the link's wait), and how many
    there are, since the legend names only the current window's (a caption on pale amber over a window without any
    read as a mark the chart lacked)."""
    if res.kv_transfer_start_s is None:
        return 0, 0
    with np.errstate(invalid="ignore"):
        slot = np.nan_to_num(res.kv_transfer_start_s - res.kv_wait_start_s) > 0
        link = np.nan_to_num(res.kv_link_start_s - res.kv_transfer_start_s) > 0
    return int(slot.sum()), int(link.sum())


def instance_names(res: ClusterResult, narrow: bool = False, window: timeline.Window = None, shown: list | None = None) -> list[str]:
    """Gantt row name per instance drawn (`shown`, default `shown_instances(res, window)`): 'replica 0', 'prefill 1 · 2
    GPUs', ... (TP groups collapsed); when the pools run on different GPU kinds, the kind too: 'decode 0 · 8× A100'.
    Narrow: 'R0', 'P1 · 2 GPUs', 'D0 · 8× A100'."""
    shown = shown_instances(res, window) if shown is None else shown
    kinds = short_gpu_names([x.hardware for x in res.instances])
    out = []
    for x in shown:
        if len(kinds) > 1:
            gpus = f" · {x.num_gpus}× {plotly_text(kinds[x.hardware])}"  # a GPU name from a link: text, not markup
        else:
            gpus = f" · {x.num_gpus} GPUs" if x.num_gpus > 1 else ""
        out.append(f"{_code(x) if narrow else f'{x.role} {x.index}'}{gpus}")
    return out


def instance_rows(res: ClusterResult, window: timeline.Window = None, shown: list | None = None) -> list[str]:
    """The Gantt's row labels: each instance's name, narrow on a phone (responsive_label). (`shown`: the instances
    drawn, when the caller has them: choosing them ranks every instance's busy time in the window.)"""
    shown = shown_instances(res, window) if shown is None else shown
    return [responsive_label(w, n) for w, n in zip(instance_names(res, shown=shown), instance_names(res, True, shown=shown))]


def request_names(res: ClusterResult, ids: np.ndarray, narrow: bool = False) -> list[str]:
    """'req 7 · replica 2' or 'req 7 · P0→D1' for the request rows; narrow: '7 · R2', '7 · P0→D1'."""
    short = [f"{x.role} {x.index}" if x.role == "replica" and not narrow else _code(x) for x in res.instances]
    out = []
    for r in ids.tolist():
        a, b = int(res.instance_of[r]), int(res.decode_instance_of[r])
        where = "-" if a < 0 else short[a] + (f"→{short[b]}" if b >= 0 else "")
        out.append(f"{r} · {where}" if narrow else f"req {r} · {where}")
    return out


def request_labels(res: ClusterResult, ids: np.ndarray) -> list[str]:
    """The request rows' labels: each request's name, narrow on a phone (responsive_label)."""
    return [responsive_label(w, n) for w, n in zip(request_names(res, ids), request_names(res, ids, narrow=True))]


def _gantt(fig: go.Figure, res: ClusterResult, rows: list[str], instances: list, window: timeline.Window = None) -> set[str]:
    """The rows of the instances drawn (`instances`, labelled `rows`), the window's ticks when there is one (as one
    engine's GPU row); returns the phases drawn (each one legend entry). Binned over the whole run, a 1 s window of four
    replicas showed 2-3 solid decode bars a row under ~30 prefills in the request rows (bins of ~0.26 s, a review)."""
    per = max(timeline.MAX_GANTT_BARS // len(rows), 20)
    shown: set[str] = set()
    for inst, row in zip(instances, rows):
        seg = timeline.gantt_data(inst.result, per, window)
        for ph in Phase:
            m = seg["phase"] == ph
            if not m.any():
                continue
            name = PHASE_NAMES[ph]
            ticks = seg["ticks"][m]
            # (the bar's tick count in words: "1 tick", "3 ticks"; the hover said "3 tick(s)")
            custom = np.empty((ticks.size, 4), dtype=object)  # (numbers stay numbers beside the text: their hover formats)
            custom[:, 0] = [counted(int(n), "tick") for n in ticks]
            custom[:, 1], custom[:, 2], custom[:, 3] = seg["prefill"][m], seg["decode"][m], (seg["end"][m] - seg["start"][m]) * 1e3
            fig.add_trace(go.Bar(
                x=seg["end"][m] - seg["start"][m], base=seg["start"][m], y=[row] * int(m.sum()), orientation="h",
                marker_color=PHASE_COLORS[name], marker_line_width=0, name=name, legendgroup=name,
                showlegend=name not in shown, customdata=custom,
                hovertemplate=(f"<b>{plotly_text(inst.label)}</b> · {name} · %{{customdata[0]}}<br>prefill %{{customdata[1]:,}} tok · "
                               "decode %{customdata[2]:,} tok<br>%{customdata[3]:,.1f} ms from t = %{base:,.3f} s<extra></extra>"),
            ), row=1, col=1)  # fmt: skip
            shown.add(name)
    return shown


def _stalls_per_instance(res: ClusterResult, segs: list[tuple[int, str, float, float]]) -> list[tuple[int, str, float, float]]:
    """A request's decode stalls on the ticks of the instance it decodes on (its decode instance in xPyD, its replica
    otherwise), never on the deployment's merged ticks: there a prefill instance's tick has no decode token, so every
    decode segment would read as stalled."""
    where = res.instance_of if res.decode_instance_of is None else np.where(res.decode_instance_of >= 0, res.decode_instance_of, res.instance_of)
    by_instance: dict[int, list] = {}
    for seg in segs:
        by_instance.setdefault(int(where[seg[0]]), []).append(seg)
    out: list[tuple[int, str, float, float]] = []
    for i, part in by_instance.items():
        out += timeline.stall_split(res.instances[i].result, part) if i >= 0 else part
    return out


def on_instances(res: ClusterResult, drawn: list) -> np.ndarray | None:
    """Mask of the requests that ran on an instance drawn (`drawn`; first or decode instance), None when every instance
    is drawn: at 64 replicas, 18 of 30 request rows named replicas the Gantt, 16 rows, did not draw."""
    if len(drawn) == len(res.instances):
        return None
    keep = np.zeros(len(res.instances) + 1, dtype=bool)  # (the last slot: -1, never routed or no decode instance)
    ids = {id(x) for x in drawn}
    keep[[k for k, x in enumerate(res.instances) if id(x) in ids]] = True
    return keep[res.instance_of] | keep[res.decode_instance_of]


def _requests(fig: go.Figure, res: ClusterResult, first: int, count: int, window: timeline.Window = None,
              gpu_entries: set[str] = frozenset(), among: np.ndarray | None = None) -> list[str]:  # fmt: skip
    # the same rows as one engine's timeline: with a window, the requests alive in it (`first` skipped), of those in
    # `among` (`on_instances`: on the instances drawn when the Gantt draws some)
    ids = timeline.requests_in_window(res, window, first, min(count, timeline.MAX_REQUEST_ROWS), among)
    labels = dict(zip(ids.tolist(), request_labels(res, ids)))
    segs = _stalls_per_instance(res, timeline.request_segments(res, first, ids.size, ids=ids, split_stalls=False))
    if segs:
        r = np.array([s[0] for s in segs])
        state = np.array([s[1] for s in segs])
        start = np.array([s[2] for s in segs])
        end = np.array([s[3] for s in segs])
        legend = timeline.request_legend_states(set(state.tolist()), gpu_entries)
        for name in ("waiting", "prefill", "kv wait", "kv link wait", "kv transfer", "decode", "stalled", "preempted", "swapped"):
            m = state == name
            if not m.any():
                continue
            rr = r[m]
            custom = np.column_stack([rr, res.requests.prompt_tokens[rr], (end[m] - start[m]) * 1e3])
            fig.add_trace(go.Bar(
                x=end[m] - start[m], base=start[m], y=[labels[i] for i in rr.tolist()], orientation="h",
                marker_color=PHASE_COLORS[name], marker_line_width=0, name=timeline.request_state_label(name),
                legendgroup=name, showlegend=name in legend, customdata=custom,
                hovertemplate=(f"<b>request %{{customdata[0]}}</b> · {timeline.request_state_hover(name)}<br>prompt "
                               "%{customdata[1]:,} tok<br>%{customdata[2]:,.2f} ms from t = %{base:,.3f} s<extra></extra>"),
            ), row=2, col=1)  # fmt: skip
    _short_transfers(fig, res, ids, labels, window)
    return [labels[i] for i in ids.tolist()]


def _short_transfers(fig: go.Figure, res: ClusterResult, ids: np.ndarray, labels: dict[int, str], window: timeline.Window) -> None:
    """A marker on each KV transfer of the rows shown that is shorter than MIN_BAR_FRACTION of the view: its bar (true
    width) would be under a pixel or two (Splitwise-HA's 400 GB/s transfers take ~0.5 ms, a 5 s window is ~1,000 px).
    A marker keeps its size at any zoom; its hover gives the true duration."""
    if res.kv_transfer_start_s is None or not ids.size:
        return
    span = (window[1] - window[0]) if window is not None else float(np.subtract(*timeline.run_span(res)[::-1]))
    # (its moving part, as its bar: from `kv_link_start_s`, after any wait for the link, which has its own bar)
    t0, t1 = res.kv_link_start_s[ids], res.kv_transfer_end_s[ids]
    short = np.isfinite(t0) & np.isfinite(t1) & (t1 - t0 < MIN_BAR_FRACTION * span)
    if not short.any():
        return
    rr = ids[short]
    a, b = t0[short], t1[short]
    queued_ms = ((a - res.kv_transfer_start_s[rr]) * 1e3).tolist()
    custom = [[r, x, mb, t, f", after {q:.3f} ms waiting for the link" if q > 0 else ""]
              for r, x, mb, t, q in zip(rr.tolist(), ((b - a) * 1e3).tolist(), (res.kv_transfer_bytes[rr] / 1e6).tolist(), a.tolist(), queued_ms)]  # fmt: skip
    fig.add_trace(go.Scatter(
        x=(a + b) / 2, y=[labels[i] for i in rr.tolist()], mode="markers", name="kv transfer", legendgroup="kv transfer",
        showlegend=False, customdata=custom,
        marker=dict(symbol="diamond", size=7, color=PHASE_COLORS["kv transfer"], line=dict(color="#202124", width=1)),
        hovertemplate=("<b>request %{customdata[0]}</b> · kv transfer<br>%{customdata[1]:,.3f} ms, %{customdata[2]:,.1f} MB "
                       "from t = %{customdata[3]:,.4f} s%{customdata[4]}<br>"
                       "(a marker: too short to see as a bar here)<extra></extra>"),
    ), row=2, col=1)  # fmt: skip


def cluster_timeline_figure(res: ClusterResult, first_request: int = 0, num_requests: int = 30, height: int = 760,
                            window: timeline.Window = None) -> go.Figure:  # fmt: skip
    """Instances' Gantt rows, request rows (with KV transfers), KV usage per instance, on one time axis. With a
    window the axis opens on it, the instance rows draw its ticks and the request rows are those alive in it (the KV
    lines cover the whole run)."""
    drawn = shown_instances(res, window)
    rows = instance_rows(res, shown=drawn)
    more = len(res.instances) - len(rows)
    among = on_instances(res, drawn)
    ids = timeline.requests_in_window(res, window, first_request, min(num_requests, timeline.MAX_REQUEST_ROWS), among)
    height, heights, spacing = timeline.fit_request_rows(height, 80, [0.12 + 0.025 * len(rows), 0.5, 0.2], 0.05, 1, ids.size)
    fig = make_subplots(
        rows=3, cols=1, shared_xaxes=True, vertical_spacing=spacing, row_heights=heights,
        # short titles: Plotly clips a centred title wider than the chart (a phone, a narrow window); a row's label
        # ("prefill 0 · 2 GPUs") already says its TP group is one row, the request rows name their instance
        subplot_titles=(f"Instances ({counted(res.num_gpus, 'GPU')})" + (f", {len(rows)} of {len(res.instances)} drawn" if more else ""),
                        "Requests" + (" alive in this window" if window is not None else "")
                        + (" on the instances drawn" if among is not None else ""),
                        "KV cache in use per instance"),
    )  # fmt: skip
    phases = _gantt(fig, res, rows, drawn, window)
    shown_rows = _requests(fig, res, first_request, num_requests, window, phases, among)
    for k, (inst, row) in enumerate(zip(drawn, rows)):
        tl = inst.result.timeline
        if not tl.num_ticks:
            continue
        tt, yy = timeline.reduce_series_in_view(tl.t_end_s, tl.kv_blocks_used / inst.result.memory.num_blocks * 100,
                                                window, max(timeline.MAX_LINE_POINTS // len(rows), 50))  # fmt: skip
        fig.add_trace(go.Scatter(x=tt, y=yy, mode="lines", line_shape="hv", line=kv_line_style(k),
                                 name=f"KV {row}", hovertemplate="%{y:,.1f} % of blocks<br>t = %{x:,.3f} s<extra></extra>"),
                      row=3, col=1)  # fmt: skip
    _fixed_legend_order(fig)
    if (peak := kv_peak_label(drawn, window)) is not None:  # (inside the KV panel, at its top right)
        timeline.kv_peak_note(fig, *peak, row=3)
    # The legend at the figure's foot, as one engine's and Compare's: over the top panel the mode bar, shown on hover at
    # the top right, covered its last entries (KV of the last instances, at 1,400 px)
    fig.update_layout(barmode="overlay", height=height, bargap=0.15, margin=dict(l=10, r=10, t=40, b=10),
                      legend=dict(orientation="h", yref="container", y=0, yanchor="bottom", x=0),
                      hoverlabel=dict(align="left"))  # fmt: skip
    # (nticks: every instance labelled; Plotly thinned 16 rows to every other label)
    fig.update_yaxes(autorange="reversed", categoryorder="array", categoryarray=rows, nticks=len(rows), row=1, col=1)
    fig.update_yaxes(timeline.request_axis(shown_rows), row=2, col=1)
    # (the peak in view with headroom: four replicas at 3-10 % were one band on 0-105 %, `timeline.kv_axis_top_pct`)
    fig.update_yaxes(title_text="% blocks", range=[0, timeline.kv_axis_top_pct(peak[0] if peak is not None else 0.0)], row=3, col=1)
    fig.update_xaxes(title_text="simulated time (s)", row=3, col=1)
    if window is not None:
        fig.update_xaxes(range=list(window))
    return readable_numbers(fig)


# The legend's order: the instances' phases, then the request rows' states, each in one order whatever the run (a review:
# Plotly lists entries in the order their traces came, which followed the phases the first instances drawn happened to
# run, "idle, decode, prefill, waiting" in one run and "idle, prefill, decode, mixed, waiting" in the next)
_PHASE_RANK = {PHASE_NAMES[ph]: k for k, ph in enumerate(Phase)}
_STATE_RANK = {name: 100 + k for k, name in enumerate(("waiting", "prefill", "kv wait", "kv link wait", "kv transfer", "decode",
                                                        "stalled", "preempted", "swapped"))}  # fmt: skip


def _fixed_legend_order(fig: go.Figure) -> None:
    """Rank each legend entry: an instance's phase (top panel) by `_PHASE_RANK`, then a request's state by `_STATE_RANK`
    (by its legend group: its entry is named in words); the KV lines keep Plotly's default rank, after them, in
    instance order."""
    for tr in fig.data:
        rank = (_PHASE_RANK if tr.yaxis in (None, "y") else _STATE_RANK).get(tr.legendgroup)
        if rank is not None:
            tr.legendrank = rank


def kv_peak_label(drawn: list, window: timeline.Window) -> tuple[float, str] | None:
    """The KV panel's peak in the window (`timeline.kv_peak_in_view_pct`, each drawn instance of its own pool) and
    where, when more than one is drawn ("R1"); None: nothing ran. (The headline's peak is the run's, in a tick: 34.5 %
    beside "peak 10.1 %" read as a contradiction, a review: the note says "in view".)"""
    best, where = -1.0, None
    for inst in drawn:
        if (pct := timeline.kv_peak_in_view_pct(inst.result, window)) is not None and pct > best:
            best, where = pct, inst
    if where is None:
        return None
    return best, _code(where) if len(drawn) > 1 else ""


def gantt_kv_figure(res, x_range: tuple[float, float] | None = None, title: str = "", height: int = 300,
                    window: timeline.Window | None = None) -> go.Figure:
    """Compare page: `timeline.gantt_kv_figure` for one engine; for a deployment, a Gantt row per
    instance and KV usage per instance (same arguments)."""
    if not isinstance(res, ClusterResult):
        return timeline.gantt_kv_figure(res, x_range, title, height, window=window)
    drawn = shown_instances(res, window)
    rows = instance_rows(res, shown=drawn)
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.16, row_heights=[0.5, 0.5],
                        subplot_titles=(f"Instances ({counted(res.num_gpus, 'GPU')})" + (f", {len(rows)} of {len(res.instances)} drawn" if len(rows) < len(res.instances) else ""),
                                        "KV cache in use (%)"))  # fmt: skip
    _gantt(fig, res, rows, drawn, window)
    for k, (inst, row) in enumerate(zip(drawn, rows)):
        tl = inst.result.timeline
        if tl.num_ticks:
            tt, yy = timeline.reduce_series_in_view(tl.t_end_s, tl.kv_blocks_used / inst.result.memory.num_blocks * 100,
                                                    window, max(timeline.MAX_LINE_POINTS // len(rows), 50))  # fmt: skip
            fig.add_trace(go.Scatter(x=tt, y=yy, mode="lines", line_shape="hv", line=kv_line_style(k),
                                     name=f"KV {row}"), row=2, col=1)  # (in the legend: one line per instance, told apart by colour and dash)  # fmt: skip
    # The legend in its own strip at the figure's foot (as the step-through chart's): with a line per instance it wraps to
    # two or three rows, and hung from the plot (y=-0.25) it covered the time axis's title
    fig.update_xaxes(automargin=True)
    fig.update_layout(barmode="overlay", height=max(height, 140 + 24 * len(rows)) + 40, title=title,
                      margin=dict(l=10, r=10, t=60 if title else 30, b=10),
                      legend=dict(orientation="h", yref="container", y=0, yanchor="bottom"))  # fmt: skip
    fig.update_yaxes(autorange="reversed", categoryorder="array", categoryarray=rows, nticks=len(rows), row=1, col=1)
    fig.update_yaxes(range=[0, 105], row=2, col=1)
    fig.update_xaxes(title_text="simulated time (s)", row=2, col=1)
    if window is not None or x_range:  # the window when given (as for one engine), else the run's range
        fig.update_xaxes(range=list(window if window is not None else x_range))
    return readable_numbers(fig)
