"""The Simulate page's timeline drawn on the server as plain HTML: no charting library in the browser.

Plotly's bundle (4.7 MB of JavaScript) costs a fresh browser about a second of parsing before the
first chart appears, longer than everything else on the page. This view draws the same four panels
from the same data as `timeline.timeline_figure` (the GPU Gantt, request rows, KV usage, queues on
one time axis, the same readable window and caps) as absolutely positioned boxes: each bar is a
<div> with a native hover `title`; the lines are an inline SVG image per panel (no text in it) with
a hover column per tick (or per bin of a whole-run view). The Plotly figure stays one toggle away
for zooming with the mouse.

Shown with `st.html`, which sanitises with DOMPurify (HTML profile) and never renders Markdown; on
top of that every text is HTML-escaped here (`esc`), so labels from links or uploads show as typed.
Sizes are in rem/em, so presenter mode's larger root font scales the whole chart; widths are
percentages of the plot area, so a phone gets the same chart narrower.
"""

from __future__ import annotations

import html
from urllib.parse import quote

import numpy as np

from app.components import timeline
from app.components.colors import PHASE_COLORS, PHASE_NAMES
from sim_core.costmodel import CostModel
from sim_core.result import SimResult
from sim_core.types import Phase
from sim_core.words import counted

HTML_GANTT_BARS = 600  # GPU bars over all rows (a plot is ~1,000 px wide: more would be sub-pixel)
HTML_STALL_BARS = 600  # stalled pieces over all request rows (the longest are kept)
HTML_LINE_POINTS = 600  # per line; hover columns per tick up to this, else per bin
GPU_ROW_REM = 1.6
REQUEST_ROW_REM = 0.95
LINE_PANEL_REM = 5.5
CSS = """<style>
.sgt{font-size:.78rem;line-height:1.2;width:100%;user-select:none}
.sgt.pr{font-size:.95rem}
.sgt-t{font-weight:600;margin:.55em 0 .25em 4.6em}
.sgt-r{display:flex;align-items:stretch}
.sgt-l{flex:0 0 4.6em;position:relative;font-size:.9em;text-align:right;padding-right:.4em;box-sizing:border-box;opacity:.8}
.sgt-l span{position:absolute;right:.4em;white-space:nowrap}
.sgt-p{flex:1 1 auto;position:relative;min-width:0;border-left:1px solid rgba(128,128,128,.45);border-bottom:1px solid rgba(128,128,128,.45)}
.sgt-p>div{position:absolute;box-sizing:border-box}
.sgt-p>.g{top:0;bottom:0;width:0;border-left:1px solid rgba(128,128,128,.18)}
.sgt-p>.b{min-width:1px;top:0;height:100%}
.sgt-p>.sw{top:25%;height:50%}
.sgt-p>.rq{height:.75rem}
.sgt-p>.k{border-right:1px solid #fff}
@media (max-width:640px){.sgt-p>.k{border-right-width:0}}
.sgt-p>.b:hover,.sgt-p>.h:hover{outline:2px solid #202124;z-index:2}
.sgt-p>.h{top:0;bottom:0}
.sgt-p>img{position:absolute;left:0;top:0;width:100%;height:100%;pointer-events:none}
.sgt-x{position:relative;height:1.3em;margin-left:4.6em}
.sgt-x span{position:absolute;top:.15em;transform:translateX(-50%);white-space:nowrap;opacity:.8}
.sgt-xt{text-align:center;margin-left:4.6em;opacity:.8}
.sgt-lg{display:flex;flex-wrap:wrap;gap:.2em 1em;margin:.5em 0 0 4.6em}
.sgt-lg.top{margin:0 0 .5em 4.6em}
.sgt-lg span{white-space:nowrap}
.sgt-lg i{display:inline-block;width:.9em;height:.9em;margin-right:.3em;vertical-align:-.1em;border-radius:2px}
.sgt-lg i.ln{height:0;border-top:2px solid;border-radius:0;vertical-align:.25em}
.sgt-lg i.dt{border-top-style:dotted}
""" + "".join(f".sgt .c{i}{{background:{c}}}" for i, c in enumerate(PHASE_COLORS.values())) + "</style>"


def esc(text: object) -> str:
    """Text for an HTML text node or a quoted attribute (newlines kept: a `title` shows them as line breaks)."""
    return html.escape(str(text), quote=True).replace("\n", "&#10;")


def _pct(v: float) -> str:
    return f"{v:.3f}".rstrip("0").rstrip(".") if v else "0"


class _Axis:
    """Maps simulated time to a percentage of the plot width."""

    def __init__(self, t0: float, t1: float):
        self.t0, self.span = t0, max(t1 - t0, 1e-12)

    def box(self, a: float, b: float) -> tuple[float, float]:
        left = min(max((a - self.t0) / self.span, 0.0), 1.0) * 100
        right = min(max((b - self.t0) / self.span, 0.0), 1.0) * 100
        return left, max(right - left, 0.0)


def nice_ticks(t0: float, t1: float, target: int = 6) -> np.ndarray:
    """Round tick positions (1, 2 or 5 times a power of ten) inside [t0, t1], about `target` of them."""
    span = t1 - t0
    if not np.isfinite(span) or span <= 0:
        return np.array([t0])
    raw = span / target
    mag = 10 ** np.floor(np.log10(raw))
    step = mag * min((1, 2, 5, 10), key=lambda m: abs(m * mag - raw))
    first = np.ceil(t0 / step) * step
    ticks = np.arange(first, t1 + step * 1e-9, step)
    return ticks[(ticks >= t0 - 1e-12) & (ticks <= t1 + 1e-12)]


def _tick_label(t: float, step: float) -> str:
    decimals = max(0, int(-np.floor(np.log10(step))) if step < 1 else 0)
    return f"{t:.{decimals}f}"


def _grid(axis: _Axis, ticks: np.ndarray) -> str:
    return "".join(f'<div class="g" style="left:{_pct(axis.box(t, t)[0])}%"></div>' for t in ticks.tolist())


def _bar(axis: _Axis, a: float, b: float, title: str, cls: str, top: str = "") -> str:
    """A box from time a to b; its colour and height come from its classes (CSS above), `top` places a request row's bar."""
    left, width = axis.box(a, b)
    where = f";top:{top}" if top else ""
    return f'<div class="{cls}" style="left:{_pct(left)}%;width:{_pct(width)}%{where}" title="{esc(title)}"></div>'


def colour_class(name: str) -> str:
    """The CSS class of a phase or request state's colour (colors.PHASE_COLORS; names may hold spaces)."""
    return f"c{list(PHASE_COLORS).index(name)}"


def _gantt_rows(res: SimResult, axis: _Axis, window: timeline.Window, seg: dict[str, np.ndarray], gpus: list[str],
                ticks: np.ndarray) -> tuple[str, list[str]]:  # fmt: skip
    """The GPU panel of `seg` (timeline.gantt_data; every GPU of a tensor-parallel group runs each tick: one identical
    row each)."""
    per_tick = bool(seg["ticks"].size) and bool((seg["ticks"] == 1).all())
    tp = len(gpus) > 1
    bars, names = [], []
    for ph in Phase:
        if (seg["phase"] == ph).any():
            names.append(PHASE_NAMES[ph])
    titles = []
    for i in range(seg["start"].size):
        ph = Phase(int(seg["phase"][i]))
        n = int(seg["ticks"][i])
        what = f"tick {int(seg['first'][i]):,}" if per_tick else f"{counted(n, 'tick')} from tick {int(seg['first'][i]):,}"
        bound = "-" if ph == Phase.IDLE else ("compute-bound" if seg["compute"][i] * 2 > n else "memory-bound")
        dur_ms = (seg["end"][i] - seg["start"][i]) * 1e3
        lines = [f"{PHASE_NAMES[ph]} · {what}",
                 f"prefill {int(seg['prefill'][i]):,} tok · decode {int(seg['decode'][i]):,} tok · batch "
                 f"{seg['batch'][i] / max(n, 1):.1f} seqs", f"{dur_ms:.2f} ms"]  # fmt: skip
        if tp:
            lines.append(f"of which TP all-reduce {seg['comm_s'][i] * 1e3:.2f} ms")
        if seg["swap_s"][i] > 0:
            lines.append(f"of which PCIe swap {seg['swap_s'][i] * 1e3:.2f} ms")
        lines.append(f"{bound} · t = {seg['start'][i]:.3f} s")
        titles.append("\n".join(lines))
    cls = "b k" if per_tick else "b"
    one_row = "".join(_bar(axis, float(seg["start"][i]), float(seg["end"][i]), titles[i],
                           f"{cls} {colour_class(PHASE_NAMES[Phase(int(seg['phase'][i]))])}") for i in range(seg["start"].size))  # fmt: skip
    swaps = _swap_bars(res, axis, window, len(gpus))
    one_row += swaps
    if swaps and "swap" not in names:
        names.append("swap")
    grid = _grid(axis, ticks)
    for g in gpus:
        bars.append(f'<div class="sgt-r"><div class="sgt-l"><span style="top:.3em">{esc(g)}</span></div>'
                    f'<div class="sgt-p" style="height:{GPU_ROW_REM}rem">{grid}{one_row}</div></div>')  # fmt: skip
    return "".join(bars), names


def _swap_bars(res: SimResult, axis: _Axis, window: timeline.Window, num_rows: int) -> str:
    """The PCIe part of ticks that also computed, as a red bar at the end of the tick (swap-only ticks are red already)."""
    tl = res.timeline
    lo, hi = timeline.tick_range(res, window)
    idx = np.flatnonzero((tl.swap_blocks[lo:hi] > 0) & (tl.phase[lo:hi] != Phase.SWAP)) + lo
    if idx.size == 0:
        return ""
    swap = CostModel(res.config).swap_time_s(tl.swap_blocks[idx] * res.memory.block_bytes)
    limit = HTML_GANTT_BARS // (2 * num_rows)
    if idx.size > limit:  # keep the longest transfers visible
        keep = np.sort(np.argsort(-swap, kind="stable")[:limit])
        idx, swap = idx[keep], swap[keep]
    out = []
    for i, s in zip(idx.tolist(), swap.tolist()):
        end = float(tl.t_end_s[i])
        out.append(_bar(axis, end - s, end, f"swap (PCIe) in tick {i:,}: {int(tl.swap_blocks[i]):,} KV blocks over PCIe, "
                        f"{s * 1e3:.2f} ms", f"b sw {colour_class('swap')}"))  # fmt: skip
    return "".join(out)


def _request_rows(res: SimResult, axis: _Axis, window: timeline.Window, ids: np.ndarray, ticks: np.ndarray) -> tuple[str, list[str]]:
    bars = timeline.request_bars(res, ids, window, HTML_STALL_BARS)
    row_of = {int(r): i for i, r in enumerate(ids.tolist())}
    req = res.requests
    out = [_grid(axis, ticks)]
    for r, state, a, b in zip(bars["req"].tolist(), bars["state"].tolist(), bars["start"].tolist(), bars["end"].tolist()):
        label = timeline.request_state_label(state)
        title = (f"request {r:,} · {label}\nprompt {int(req.prompt_tokens[r]):,} · output {int(req.output_tokens[r]):,} tok\n"
                 f"{(b - a) * 1e3:.2f} ms from t = {a:.3f} s")  # fmt: skip
        out.append(_bar(axis, a, b, title, f"b rq {colour_class(state)}", top=f"{row_of[r] * REQUEST_ROW_REM + 0.1:.2f}rem"))
    labels = "".join(f'<span style="top:{i * REQUEST_ROW_REM:.2f}rem">req {int(r)}</span>' for i, r in enumerate(ids.tolist()))
    height = max(len(ids), 1) * REQUEST_ROW_REM
    states = [s for s in timeline.REQUEST_STATES if (bars["state"] == s).any()]  # drawn (the legend picks: timeline_html)
    return (f'<div class="sgt-r"><div class="sgt-l" style="font-size:.8em">{labels}</div>'
            f'<div class="sgt-p" style="height:{height:.2f}rem">{"".join(out)}</div></div>'), states  # fmt: skip


LINE_INSET = 2.0  # of the line box's 100 units, kept clear above and below so a 2 px stroke shows whole


def _polyline(axis: _Axis, line: timeline.LineSeries, y_max: float) -> str:
    """An `hv` step line in a 1000 x 100 box, stretched to the panel (strokes keep their width). Values span y = 98
    (zero) to 2 (the panel's top value): a line at zero sat on the box's bottom edge, half its stroke cut off, and an
    empty queue's line could not be seen (LINE_INSET)."""
    t, y = line.t, line.y
    x = np.clip((t - axis.t0) / axis.span, 0, 1) * 1000
    yy = (100 - LINE_INSET) - np.clip(y / max(y_max, 1e-12), 0, 1) * (100 - 2 * LINE_INSET)
    px = np.repeat(x, 2)[1:]
    py = np.repeat(yy, 2)[:-1]
    pts = " ".join(f"{a:.1f},{b:.1f}" for a, b in zip(px.tolist(), py.tolist()))
    dash = ' stroke-dasharray="3 3"' if line.dash == "dot" else ""
    return (f'<polyline points="{pts}" fill="none" stroke="{line.color}" stroke-width="2" '
            f'vector-effect="non-scaling-stroke"{dash}/>')  # fmt: skip


def _line_panel(axis: _Axis, lines: list[timeline.LineSeries], y_max: float, y_label: str, ticks: np.ndarray) -> str:
    svg = ('<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 1000 100" preserveAspectRatio="none">'
           + "".join(_polyline(axis, ln, y_max) for ln in lines) + "</svg>")  # fmt: skip
    img = f'<img alt="" src="data:image/svg+xml,{quote(svg, safe=" =:/,.-")}">'
    hover = []
    t = lines[0].t
    for j in range(t.size - 1):  # all lines of a panel share one time base (timeline.line_series)
        a, b = float(t[j]), float(t[j + 1])
        if b <= a:
            continue
        lines_txt = "\n".join(f"{ln.y[j]:,.{ln.decimals}f} {ln.unit}" for ln in lines)
        span = f"t = {a:.3f}–{b:.3f} s" + (" (peak of this stretch)" if lines[0].reduced else "")
        hover.append(_bar(axis, a, b, f"{lines_txt}\n{span}", "h"))
    fmt = "{:,.0f}"
    # (each value label centred on its value: with its top at the panel's top and its bottom at the floor, "0" sat half
    # a line above zero, and a waiting count of 1 was drawn level with the "0")
    labels = (f'<span style="top:0;transform:translateY(-50%)">{esc(fmt.format(y_max))}</span>'
              f'<span style="bottom:0;transform:translateY(50%)">0</span><span style="top:40%">{esc(y_label)}</span>')  # fmt: skip
    return (f'<div class="sgt-r"><div class="sgt-l">{labels}</div><div class="sgt-p" style="height:{LINE_PANEL_REM}rem">'
            f'{_grid(axis, ticks)}{img}{"".join(hover)}</div></div>')  # fmt: skip


def _legend(phases: list[str], states: list[str], lines: list[timeline.LineSeries], top: bool = False) -> str:
    items = [f'<span><i class="{colour_class(p)}"></i>{esc(p)}</span>' for p in phases]
    items += [f'<span><i class="{colour_class(s)}"></i>{esc(timeline.request_state_label(s))}</span>' for s in states]
    items += [f'<span><i class="ln{" dt" if ln.dash == "dot" else ""}" style="border-color:{ln.color}"></i>{esc(ln.name)}</span>'
              for ln in lines]  # fmt: skip
    return f'<div class="sgt-lg{" top" if top else ""}">{"".join(items)}</div>'


def timeline_html(res: SimResult, first_request: int = 0, num_requests: int = 30, window: timeline.Window = None,
                  presenter: bool = False) -> str:  # fmt: skip
    """The four panels of `timeline.timeline_figure` as HTML (same arguments, same data); `presenter`:
    projector-sized text (at least 18 px on presenter mode's 20 px root font)."""
    count = max(1, min(num_requests, timeline.MAX_REQUEST_ROWS))
    ids = timeline.requests_in_window(res, window, first_request, count)
    gpus = timeline.gpu_rows(res)
    seg = timeline.gantt_data(res, max(HTML_GANTT_BARS // len(gpus), 20), window)
    titles = timeline.panel_titles(gpus, ids, window, first_request, timeline.bar_kind(seg),
                                   None if window is None else timeline.alive_in_window(res, window).size)
    t0, t1 = window if window is not None else timeline.run_span(res)
    axis = _Axis(t0, t1)
    ticks = nice_ticks(t0, t1)
    step = float(ticks[1] - ticks[0]) if ticks.size > 1 else max(t1 - t0, 1e-3)
    gantt, phases = _gantt_rows(res, axis, window, seg, gpus, ticks)
    req_rows, states = _request_rows(res, axis, window, ids, ticks)
    lines = timeline.line_series(res, window, HTML_LINE_POINTS)
    kv = [ln for ln in lines if ln.panel == 3]
    queues = [ln for ln in lines if ln.panel == 4]
    parts = [CSS, f'<div class="sgt{" pr" if presenter else ""}" data-testid="timeline-html">',
             f'<div class="sgt-t">{esc(titles[0])}</div>', gantt,
             f'<div class="sgt-t">{esc(titles[1])}</div>', req_rows]  # fmt: skip
    if kv:  # (its peak in view in the title: the Plotly figure's note inside the panel, `timeline.kv_peak_note`)
        peak = timeline.kv_peak_in_view_pct(res, window)
        kv_title = titles[2] + (f" · {timeline.kv_peak_text(peak)}" if peak is not None else "")
        # (its top: the peak of its lines in view with headroom, at most 100, `timeline.kv_axis_top_pct`)
        kv_top = min(100.0, timeline.kv_axis_top_pct(timeline.kv_lines_peak_pct(kv)))
        parts += [f'<div class="sgt-t">{esc(kv_title)}</div>', _line_panel(axis, kv, kv_top, "% blocks", ticks)]
    if queues:
        q_max = max(float(max(ln.y.max() for ln in queues)), 1.0)
        parts += [f'<div class="sgt-t">{esc(titles[3])}</div>', _line_panel(axis, queues, q_max, "requests", ticks)]
    x_labels = "".join(f'<span style="left:{_pct(axis.box(t, t)[0])}%">{esc(_tick_label(t, step))}</span>' for t in ticks.tolist())
    # (presenter mode: above the panels, under the opening tag; at 1280x720 under a lesson's banner the key to the
    # colours its answer names was below the screen, a review)
    legend = _legend(phases, timeline.request_legend_states(states, phases), lines, top=presenter)
    parts += [f'<div class="sgt-x">{x_labels}</div>', '<div class="sgt-xt">simulated time (s)</div>']
    if presenter:
        parts.insert(2, legend)
    else:
        parts.append(legend)
    return "".join(parts) + "</div>"
