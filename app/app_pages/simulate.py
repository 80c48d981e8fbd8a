"""Simulate: controls in the sidebar; headline numbers, the shared-time-axis timeline, latency
distributions, roofline, step-through, request table and exports in the main area."""

from __future__ import annotations

import numpy as np
import pandas as pd
import streamlit as st

from app.components import charts, runner, tables, timeline, timeline_html, workshop
from app.components.config_form import sidebar_words
from app.components.sidebar import describe_config, draw_sidebar, upload_notice
from app.components.text import plain
from app.components.units import MISSING, fmt_number, fmt_seconds
from app.state import (
    BASE_KEY,
    CFG_KEY,
    MAX_LINK_CHARS,
    PRESET_KEY,
    derived,
    link_query,
    read_query_params,
    show_link_notices,
    write_query_params,
)
from sim_core import SimConfig, SimResult, list_presets, load_preset
from sim_core.budget import is_budget_stop, is_load_dependent_stop
from sim_core.costmodel import CostModel
from sim_core.lessons import DEFAULT_VIEW, LESSON_VIEWS
from sim_core.metrics import (MIN_STEADY_REQUESTS, at_kv_link, class_metrics, no_value_reason, not_arrived, steady_exclusion_text,
                              steady_window_share, waiting_for_decode_slot)
from sim_core.notes import run_notes
from sim_core.sweep import with_value
from sim_core.types import Phase, Status
from sim_core.words import counted, percent

_show = workshop.show_chart

# What the Share box says of its link first, whatever the run
SHARE_LEAD = "A link to these settings: copy it with the icon at the box's top right."


def class_table(res: SimResult) -> pd.DataFrame | None:
    """Per-class latency (article §5.2), or None for a single-class run. Text cells: units switch ms/s."""
    rows = class_metrics(res.config, res.requests)
    if not rows:
        return None
    return pd.DataFrame([{
        "class": r["class"], "priority": r["priority"], "finished": f"{r['num_finished']:,} / {r['num_requests']:,}",
        "TTFT p50": fmt_seconds(r["ttft_p50_s"]), "TTFT p99": fmt_seconds(r["ttft_p99_s"]),
        "TPOT p99": fmt_seconds(r["tpot_p99_s"]), "meet SLOs": percent(r['slo_attainment']),
    } for r in rows])  # fmt: skip


def _stuck_at_link(res: SimResult, stop_s: float) -> tuple[int, int] | None:
    """(on the KV link or queued for it, waiting for a decode slot) of a disaggregated run that stopped unfinished, when
    the link holds it up: most of its unfinished requests are between the pools, and the transfers in flight hold at
    least as many decode slots as the requests decoding there (else the decode pool is what is full). None otherwise."""
    start_s, end_s = getattr(res, "kv_transfer_start_s", None), getattr(res, "kv_transfer_end_s", None)
    if start_s is None:
        return None
    req = res.requests
    on_link = at_kv_link(req.status, start_s, end_s, stop_s)
    waiting = waiting_for_decode_slot(req.status, res.kv_wait_start_s, start_s, stop_s)
    decoding = int(((req.status != Status.FINISHED) & (np.nan_to_num(end_s, nan=np.inf) <= stop_s)).sum())
    held, queued = int(on_link.sum()), int(waiting.sum())
    if held and held + queued > res.summary.num_unfinished / 2 and held >= decoding:
        return held, queued
    return None


def _headline(res: SimResult) -> None:
    s = res.summary
    ms = fmt_seconds
    box = st.container(key="headline")  # its columns wrap two by two on a narrow screen (app CSS) instead of cutting numbers
    row1 = box.columns(4)
    kw = dict(delta_color="off", delta_arrow="off")
    row1[0].metric("Output throughput", f"{s.output_tokens_per_s:,.0f} tok/s", f"{s.total_tokens_per_s:,.0f} tok/s incl. prompts",
                   help="Output tokens per second over the makespan.", **kw)  # fmt: skip
    # (a run of one-token outputs has no TPOT or ITL, one that finished nothing no TTFT: "n/a" and why, not "–")
    na = lambda metric: ("n/a", no_value_reason(metric, s.num_finished))  # noqa: E731
    row1[1].metric("TTFT p50", *(na("TTFT") if np.isnan(s.ttft_p50_s) else (ms(s.ttft_p50_s), f"p99 {ms(s.ttft_p99_s)}")),
                   help="Time to first token, finished requests.", **kw)  # fmt: skip
    row1[2].metric("TPOT p50", *(na("TPOT") if np.isnan(s.tpot_p50_s) else (ms(s.tpot_p50_s), f"p99 {ms(s.tpot_p99_s)} · ITL p99 {ms(s.itl_p99_s)}")),
                   # (mechanism-kv-preemption reads TPOT p99 28.6 ms over ITL p99 17.3 ms, which looked like a bug)
                   help="(E2E − TTFT) / (output tokens − 1): a request's mean gap between tokens. ITL is every gap between two "
                        "tokens, each counted once. A few long gaps (a pre-emption, a wait for KV) raise the means of the "
                        "requests they hit but are too few for ITL's p99, so TPOT's p99 can be above ITL's.", **kw)  # fmt: skip
    # (two decimals, as the tables; a goodput under 0.01 with its own digits: "0.00 req/s" sat above "0.5% meet SLOs")
    goodput = s.goodput_requests_per_s
    row1[3].metric("Goodput", f"{goodput:,.2f} req/s" if goodput == 0 or goodput >= 0.01 else f"{fmt_number(goodput, 2)} req/s",
                   f"{percent(s.slo_attainment)} meet SLOs · whole run",
                   # (the steady line below reads its window's goodput: 8.49 req/s beside this 6.10 on the default, and
                   # nothing said which was which, in the help only since session 66: "whole run" in view, a review)
                   help="Requests per second that meet both the TTFT and the TPOT objective (DistServe), over the whole "
                        "run's makespan as the throughput is (the warm-up and the drain after the last arrival included); "
                        "the steady-state line below gives the goodput of its window of arrivals." + (
                        # (offline-batch-h200 read "34% meet SLOs" with no word that its TTFTs are the queue's)
                        " Offline arrivals queue every request at t = 0, so a TTFT here is mostly the wait for a batch "
                        "slot: the share meeting the TTFT objective says how much of the job starts within it, and the "
                        "throughput is the offline figure." if res.config.workload.arrival.process == "offline"
                        and res.config.workload.trace is None else ""), **kw)  # fmt: skip
    row2 = box.columns(4)
    # (the mean batch: lessons 9 and 17 ask the room to watch it, and it was on the command line's GPU line only)
    deployment = bool(getattr(res, "instances", None))
    row2[0].metric("GPU busy", percent(s.gpu_busy_fraction),
                   # (the CLI's words: "prefill 60% of busy time" read as prefill work where the ticks were mixed)
                   f"{percent(s.prefill_time_fraction)} in ticks that prefill · mean batch {s.mean_batch_size:,.1f}",
                   help=("Busy GPU-seconds over the GPUs × the makespan (each instance weighted by its GPUs); the prefill "
                         "share is of those busy GPU-seconds" if deployment else "Busy time over the "
                         "makespan; the prefill share is of that busy time") + ": the ticks that prefill, a mixed "
                   "tick (a chunk beside decodes) counted whole; the mean batch is the running requests per tick, a mean over "
                   "the ticks" + (" of every instance (of both pools, in a P:D deployment)" if deployment else "") + ". "
                   # (the default run reads 100 % busy at 8 req/s, where Sweep finds a capacity of 18)
                   f"Busy is not saturated: a busy GPU may take a larger batch in each tick. Its ticks used "
                   f"{percent(s.mfu_mean)} of the peak compute (MFU) and {percent(s.mbu_mean)} of the memory bandwidth "
                   "(MBU) over the busy time; the Sweep page finds the rate where it saturates.", **kw)  # fmt: skip
    suspends = res.config.scheduler.smart_preemption.enabled  # (its page read "Pre-emptions 0" and nothing more)
    row2[1].metric("Pre-emptions", f"{s.num_preemptions:,}", f"{counted(s.num_swap_outs, 'swap')} · {s.num_recomputed_tokens:,} tok recomputed",
                   help="Running requests evicted from the KV cache to make room: their KV recomputed later (recompute) or "
                        "moved to host memory and back (swap)." + (" Smart pre-emption's suspended prefills (article §5.3) "
                        "keep their KV and are not counted here: they show in the TTFT tail." if suspends else ""), **kw)  # fmt: skip
    # (one decimal, as the per-instance table and the timeline's "peak in view" write it: "34%" above a row reading
    # 34.5 %, and one engine's "1%" above its KV panel's "peak in view 1.1 %", looked like two figures)
    kv_of, kv_help, kv_peak = f"of {s.kv_capacity_tokens:,} tokens", None, f"{s.kv_peak_usage:.1%}"
    if deployment:  # a deployment's peak is its fullest instance's share of that instance's own pool
        full = res.kv_peak_instance
        kv_of = f"{full.name}, of its {full.result.memory.kv_capacity_tokens:,} tokens"
        kv_help = f"The fullest instance's peak; the deployment's instances hold {s.kv_capacity_tokens:,} tokens in all."
    row2[2].metric("KV cache peak", kv_peak, kv_of, help=kv_help, **kw)
    row2[3].metric("Finished", f"{s.num_finished:,} / {s.num_requests:,}", f"{counted(s.num_ticks, 'tick')} · {fmt_seconds(s.makespan_s)}", **kw)
    # issue 12 features, when on, from the row's left (speculative decoding alone stood in the third column, two empty
    # ones before it)
    extra: list[tuple[str, str, str, str]] = []  # (label, value, under it, help)
    if s.prefix_hit_rate_tokens is not None:
        pct = lambda v: "–" if np.isnan(v) else f"{v:.0%}"  # noqa: E731
        # (the value's share named under it: "43%" beside "43% of full blocks" did not say it was of prompt tokens)
        extra.append(("Prefix cache hits", pct(s.prefix_hit_rate_tokens),
                      f"of prompt tokens; {pct(s.prefix_hit_rate_blocks)} of full blocks",
                      ("Reused prompt tokens / prompt tokens looked up at first admission (as vLLM V1: a request re-admitted "
                       "after a recompute pre-emption is counted apart; what it finds again is in Prefill saved).")))  # fmt: skip
        extra.append(("Prefill saved", f"{s.prefill_tokens_saved:,} tok", f"{counted(s.prefix_blocks_evicted, 'block')} evicted",
                      ("Tokens whose prefill was skipped, re-admissions after a pre-emption included; evictions took least "
                       "recently used cached blocks.")))  # fmt: skip
    if s.spec_tokens_per_step is not None:
        # (its share of the GPU's busy time, which holds the draft steps: "draft 11.18 s" alone read as a riddle)
        busy_s = s.gpu_busy_fraction * s.makespan_s
        share = f" ({s.spec_draft_time_s / busy_s:.0%} of busy time)" if busy_s > 0 else ""
        extra.append(("Tokens per decode step", f"{s.spec_tokens_per_step:.2f}", f"drafting {fmt_seconds(s.spec_draft_time_s)}{share}",
                      ("Speculative decoding: 1 + accepted draft tokens per verified step. Below: the simulated time "
                       "the draft model ran before the verify passes, and its share of the GPU's busy time.")))  # fmt: skip
    if extra:
        for col, (label, value, under, help_text) in zip(box.columns(4), extra):
            col.metric(label, value, under, help=help_text, **kw)
    table = class_table(res)
    if table is not None:
        st.caption("Per request class (the headline mixes them; the priority queue of article §5.2 serves class "
                   "priority 0 first):")  # fmt: skip
        st.dataframe(table, hide_index=True, key="table.classes")


WHOLE_RUN = "whole run"


def _window_keys(res: SimResult) -> tuple[str, str]:
    """Widget keys of the window controls, per config: a new run opens on its own busy moment."""
    from app.state import config_key

    h = config_key(res.config)[:8]  # (the run's key, kept per config: not the whole config serialised on each rerun)
    return f"ui.win_width.{h}", f"ui.win_start.{h}"


def _on_width(res: SimResult) -> None:
    """A new width re-centres on the busiest stretch of that width."""
    k_width, k_start = _window_keys(res)
    width = st.session_state[k_width]
    win = None if width == WHOLE_RUN else timeline.opening_window(res, float(width))
    st.session_state[k_start] = win[0] if win else timeline.run_span(res)[0]


def _shift_window(res: SimResult, k_start: str, width: float, direction: int) -> None:
    t0, t1 = timeline.run_span(res)
    st.session_state[k_start] = min(max(st.session_state[k_start] + direction * 0.8 * width, t0), t1 - width)


def _window_controls(res: SimResult) -> timeline.Window:
    """Width and start of the time window the timeline shows (it opens on a readable, busy one)."""
    t0, t1 = timeline.run_span(res)
    k_width, k_start = _window_keys(res)
    opening = timeline.opening_window(res)
    if k_width not in st.session_state:
        st.session_state[k_width] = WHOLE_RUN if opening is None else timeline.readable_width_s(res)
        st.session_state[k_start] = opening[0] if opening else t0
    widths = [w for w in timeline.WIDTH_CHOICES_S if w < t1 - t0] + [WHOLE_RUN]
    if len(widths) == 1:  # a run shorter than the narrowest window: show it all
        return None
    c1, c2, c3, c4 = st.columns([3, 5, 1, 1], vertical_alignment="bottom")
    width = c1.select_slider("Window (simulated time)", widths, key=k_width, on_change=_on_width, args=(res,),
                             format_func=lambda w: w if w == WHOLE_RUN else fmt_seconds(float(w)),
                             help="How much simulated time the timeline shows. It opens on a few seconds around the "
                                  "busiest moment (most prefill/decode interleaving, pre-emptions, swaps) so every tick "
                                  "is a visible bar; widen it up to the whole run.")  # fmt: skip
    if width == WHOLE_RUN:
        return None
    width = float(width)
    hi = max(t1 - width, t0)
    st.session_state[k_start] = min(max(float(st.session_state[k_start]), t0), hi)
    c2.slider("Window start (s)", t0, hi if hi > t0 else t0 + 1e-9, key=k_start, step=max(width / 20, 1e-4), format="%.2f",
              help="Move the window along the run.")  # fmt: skip
    c3.button("◀", key="ui.win_prev", on_click=_shift_window, args=(res, k_start, width, -1), help="Earlier", width="stretch")
    c4.button("▶", key="ui.win_next", on_click=_shift_window, args=(res, k_start, width, 1), help="Later", width="stretch")
    start = float(st.session_state[k_start])
    return (start, start + width)


def _p99(window, metric: str, value_s: float) -> str:
    """A steady window's p99, or "n/a" and why (one-token outputs have no TPOT; it read "–")."""
    return f"n/a ({no_value_reason(metric, window.num_finished)})" if np.isnan(value_s) else fmt_seconds(value_s)


def _steady_caption(res: SimResult) -> None:
    """The steady-state window (warm-up and drain excluded) and, when the run is too short, why."""
    st_ = res.summary.steady
    if st_ is None:
        return
    if st_.note and st_.num_requests < MIN_STEADY_REQUESTS and not st_.num_unfinished:
        # A demonstration-sized run (the mechanism presets have 4-24 requests): its steady window's figures say
        # nothing, and a banner telling a class to run 125 requests talked over the lesson. One line says why.
        trace = res.config.workload.trace
        if trace is not None and len(trace.arrival_s) < MIN_STEADY_REQUESTS / steady_window_share():
            # (a replayed trace of 4 requests cannot run 125: a review read "Run at least 125 requests" under one)
            st.caption(f"A demonstration: this scenario replays {len(trace.arrival_s):,} requests ({st_.num_requests:,} in "
                       f"the steady window), too few for steady-state figures (a p99 needs {MIN_STEADY_REQUESTS:,}). The "
                       "figures above cover the whole run.")  # fmt: skip
            return
        st.caption(f"{plain(st_.note)} The figures above cover the whole run.")
        return
    if st_.note:
        # (its window's figures sat above the note saying they cannot be trusted: the router preset's "goodput 59.57
        # req/s of 59.75 offered", which a class quoted, over "Too short to say")
        st.caption(f"Steady state (requests {st_.window_first_request:,}–{st_.window_last_request:,} by arrival): this run "
                   "cannot say what it is (below), so its window's figures are not shown; the figures above cover the "
                   "whole run.")  # fmt: skip
        st.info(plain(st_.note), icon=":material/hourglass_empty:")
        return
    st.caption(f"Steady state (requests {st_.window_first_request:,}–{st_.window_last_request:,} by arrival: "
               f"{steady_exclusion_text()} excluded): {st_.output_tokens_per_s:,.0f} output tok/s, goodput {st_.goodput_requests_per_s:,.2f} req/s "
               f"of {st_.arrival_rate_per_s:,.2f} offered ({percent(st_.slo_attainment)} meet SLOs), TTFT p99 "
               f"{_p99(st_, 'TTFT', st_.ttft_p99_s)}, TPOT p99 {_p99(st_, 'TPOT', st_.tpot_p99_s)}.")  # fmt: skip


def _run_notes(res: SimResult) -> None:
    """What the run did that its settings do not say (the CLI prints the same NOTE lines)."""
    for note in run_notes(res):
        st.caption(f":material/info: {plain(sidebar_words(note))}")  # text, not markdown


INTERACTIVE_KEY = "ui.timeline_plotly"
LAST_RUN_KEY = "ui.last_run_cfg"  # the config of the session's last run that gave a result (shown under a failed run's error)


PRESENTER_ROWS = 12  # request rows a presenter's timeline opens with
PRESENTER_ALL_ROWS = 24  # ... unless the run has at most this many (every mechanism scenario): then all of them
# What presenter mode can put on the screen, one at a time (Requests: lesson 12 asks the room to read its table)
PRESENTER_FOCUS = list(LESSON_VIEWS)
FOCUS_KEY, LAST_FOCUS_KEY = workshop.FOCUS_KEY, workshop.LAST_FOCUS_KEY


def _keep_focus() -> None:
    """The focus row's change: a click on the chosen one cleared it (a double-click on a clicker), and the page showed
    the timeline with nothing marked; it stays chosen."""
    if st.session_state.get(FOCUS_KEY) is None:
        st.session_state[FOCUS_KEY] = st.session_state.get(LAST_FOCUS_KEY, DEFAULT_VIEW)
    st.session_state[LAST_FOCUS_KEY] = st.session_state[FOCUS_KEY]


def _headline_block(res: SimResult) -> None:
    """The headline cards with their steady-state line and notes: the page's top, and presenter mode's Headline focus
    (lesson 11's answer quotes the steady state's 42 % to 100 %, which that focus left out)."""
    _headline(res)
    _steady_caption(res)
    _run_notes(res)


@st.fragment
def _timeline_tab(res: SimResult) -> None:
    """A fragment: moving the window, the rows or the zoom toggle reruns and redraws only this tab
    (the run is the same), not the sidebar and headline (about 100 elements the browser re-renders)."""
    n = res.requests.arrival_s.size
    # (presenter mode: the window, rows and zoom one click away, so the chart starts on the projected screen, not below
    # it: at 1280x720 under a lesson's banner the window's sliders and the expander took the screen's last third)
    with st.expander("Window, rows and zoom") if workshop.presenter_on() else st.container():
        window = _window_controls(res)
        c1, c2, c3 = st.columns([2, 2, 1.2], vertical_alignment="bottom")
        first = c1.number_input("Skip requests", 0, max(n - 1, 0), 0, step=10, key="ui.first_request",
                                help="The request rows show the requests alive in the window: those that arrive in it first, "
                                     "then those still running from before it, latest first (the whole run: by arrival "
                                     "order); skip this many of them.")  # fmt: skip
        # At most the run's requests: a mechanism preset's 6 had a 5-60 slider, 54 of its 56 positions drawing the same rows.
        most = min(timeline.MAX_REQUEST_ROWS, n)
        # (presenter mode: 12 rows, so the four panels fit a 1400x900 projector at its text size; 30 pushed the time
        # axis, the KV and queue panels below the screen, a review)
        # (but every request of a run of at most 24: lesson 17's mechanism has its last 8 of 24 wait for the first 16, and
        # 12 rows hid them, a review)
        shown = (n if n <= PRESENTER_ALL_ROWS else PRESENTER_ROWS) if workshop.presenter_on() else 30
        rows = c2.slider("Requests shown", 5, most, min(shown, n), key="ui.rows") if n > 5 else n
        deployment = bool(getattr(res, "instances", None))
        zoom = c3.toggle(
            "Zoom with the mouse", key=INTERACTIVE_KEY,
            help=("Drag on the timeline to zoom, double-click to reset. Off, a swipe on it scrolls the page (on a phone the "
                  "timeline is taller than the screen) and a tap still shows a bar's hover." if deployment else
                  "Draw the timeline with Plotly: drag to zoom, double-click to reset, hover by tapping on a phone. The first "
                  "time, the browser loads a 4.7 MB charting library (about a second); the plain view shows the same "
                  "bars, hovers and legend without it."))  # fmt: skip
    if deployment or zoom:
        # (a deployment's timeline is always Plotly; without zoom it does not take drags, which on a phone trapped the
        # page's scrolling on a chart taller than the screen, a review)
        _show(_timeline_fig(res, int(first), int(rows), window, zoom), "chart.timeline")
        how = ("drag to zoom, double-click to reset. Hover" if zoom else
               "use the window controls above to move or widen it, or turn on Zoom with the mouse. Hover (on a phone: tap)")
    else:
        st.html(_timeline_html(res, int(first), int(rows), window))
        # (the plain view's hovers are title tooltips, which a touch screen never shows: a phone needs the Plotly view)
        how = "use the window controls above to move or widen it. Rest the pointer (on a phone: turn on Zoom with the mouse, then tap) on"
    if deployment:
        from app.components.cluster_timeline import kv_waits, shown_caption

        st.caption(timeline_caption(how, True, res.is_disaggregated, kv_waits(res), shown_caption(res, window), res.summary.num_requests))
    else:
        st.caption(timeline_caption(how, False))


def timeline_caption(how: str, deployment: bool, disaggregated: bool = False, waits: tuple[int, int] = (0, 0),
                     omitted: str = "", num_requests: int = 0) -> str:  # fmt: skip
    """What the timeline's panels are and how to read them: a deployment draws three (instances, requests,
    KV per instance), one engine four (GPU, requests, KV, queues). Only a disaggregated deployment's request rows
    have the KV transfer marks, and the waits (`waits`: how many of the run's `num_requests` waited for a decode slot,
    for the link) only where the run had them (replicas' rows name one replica and have neither); `omitted`: the
    instances the Gantt leaves out (`cluster_timeline.shown_caption`)."""
    if deployment:
        where = ("a request row names where it ran (P0→D0: prefill 0, then decode 0)" if disaggregated
                 else "a request row names the replica it ran on (req 7 · replica 2, on a phone 7 · R2)")  # fmt: skip
        marks = ""
        if disaggregated:
            slot, link = waits
            # (how many: the legend names only the window's marks, and a run's few waits may lie outside it)
            of = lambda n: f" ({n:,} of the run's {num_requests:,} requests)"  # noqa: E731
            if slot:
                marks += f" Waiting for a decode slot (amber){of(slot)}: its prefill is done and its KV waits for a decode slot (every decode instance's KV cache or its max_num_seqs sequences are full)."
            if link:
                marks += f" Waiting for the KV link (pale amber){of(link)}: its decode slot is reserved and its KV waits for the link, which earlier transfers hold."
            marks += (" KV transfer (cyan): its KV crossing to the decode instance after its prefill (with layer-wise "
                      "pipelining most of it crossed during the prefill, layer by layer: the bar is the rest); a diamond marks a transfer "
                      "too short to see as a bar (its hover has the bar's true duration).")  # fmt: skip
        rows = (f" With many instances the Gantt draws some of each pool ({omitted}), and the request rows are of requests "
                "that ran on those; the tables list them all." if omitted else "")
        # (a decode instance runs no prefill: "behind a prefill" named a cause its rows cannot have, a review)
        stall_cause = "a swap: decode instances run no prefill" if disaggregated else "a prefill or a swap"
        return (f"All three panels (instances, requests, KV cache per instance) share one time axis: {how} an instance "
                "bar for its ticks and tokens, a request bar for the request and its phase. An instance is one row, its "
                f"tensor-parallel GPUs together; {where}. Stalled (pale blue) in a request row: the request was decoding but its "
                f"instance's tick gave it no token (stalled behind {stall_cause}).{marks}{rows}")
    return (f"All four panels share one time axis: {how} a bar for the tick's batch, tokens, duration (with "
            "tensor-parallel all-reduce and PCIe swap time) and whether it was compute- or memory-bound. Stalled (pale blue) in "
            "a request row: the request was decoding but the tick gave it no token (stalled behind a prefill or a "
            "swap).")  # fmt: skip


# The drawings below are kept per config (across sessions) like the runs, except for a run a busy server stopped
# (runner.is_load_dependent): the runner runs that config again when asked later, so its drawing is made from the run
# itself, not kept under the config (a kept one would show the stopped run beside the new run's figures).
# Keyed by the run's config key; the run itself is passed unhashed (`_res`: the key names it). They took the config's
# JSON and validated it again on every miss, seconds for an uploaded trace each time the window moved.
@st.cache_resource(max_entries=32, show_spinner=False)
def _timeline_html_cached(cfg_key: str, first: int, rows: int, window: timeline.Window, presenter: bool, _res: SimResult) -> str:
    return timeline_html.timeline_html(_res, first, rows, window=window, presenter=presenter)


def _timeline_html(res: SimResult, first: int, rows: int, window: timeline.Window = None) -> str:
    from app.state import config_key

    if runner.is_load_dependent(res):
        return timeline_html.timeline_html(res, first, rows, window=window, presenter=workshop.presenter_on())
    return _timeline_html_cached(config_key(res.config), first, rows, window, workshop.presenter_on(), res)


def _timeline_fig_of(res: SimResult, first: int, rows: int, window: timeline.Window):
    if getattr(res, "instances", None):  # a deployment: a Gantt row per instance, KV transfers (issue 13)
        from app.components.cluster_timeline import cluster_timeline_figure

        return cluster_timeline_figure(res, first, rows, window=window)  # opens on the same window as one engine
    return timeline.timeline_figure(res, first, rows, window=window)


@st.cache_resource(max_entries=32, show_spinner=False)
def _timeline_fig_cached(cfg_key: str, first: int, rows: int, window: timeline.Window, zoom: bool, _res: SimResult):
    return _zoomable(_timeline_fig_of(_res, first, rows, window), zoom)


def _zoomable(fig: go.Figure, zoom: bool) -> go.Figure:
    """Drag to zoom, or no drag at all: hovers and taps only, and a swipe on the chart scrolls the page."""
    return fig if zoom else fig.update_layout(dragmode=False)


def _timeline_fig(res: SimResult, first: int, rows: int, window: timeline.Window = None, zoom: bool = True):
    from app.state import config_key

    if runner.is_load_dependent(res):
        return _zoomable(_timeline_fig_of(res, first, rows, window), zoom)
    return _timeline_fig_cached(config_key(res.config), first, rows, window, zoom, res)


def _frames(res: SimResult):
    """Per-request and per-tick tables, built once per config (shared read-only, bounded in bytes)."""
    return runner.frames(res)


def _latency_tab(res: SimResult) -> None:
    tabs = st.tabs([m.label.split(":")[0] for m in charts.METRICS])
    for tab, metric in zip(tabs, charts.METRICS):
        with tab:
            st.caption(charts.distribution_summary(res, metric))
            _show(charts.distribution_figure(res, metric), f"chart.dist.{metric.key}")


def _roofline_tab(res: SimResult) -> None:
    tl = res.timeline
    busy = tl.phase != Phase.IDLE
    busy_s = float(tl.duration_s[busy].sum())
    # the figures a lesson quotes (spec decoding: "compute-bound ticks go from about 22 % to 60 % … MFU 8 % → 18 %")
    share = f"{float(tl.duration_s[busy & tl.is_compute_bound.astype(bool)].sum()) / busy_s:.0%}" if busy_s > 0 else "–"
    util = lambda v: "–" if np.isnan(v) else f"{v:.0%}"  # noqa: E731
    # (a tick counts as compute-bound by the cost model's achievable rates: dots left of the datasheet's ridge counted,
    # with nothing drawn to say why; the calibrated roof's knee is where they turn)
    knee = charts.calibrated_knee_flop_per_byte(CostModel(res.config))
    # (it said "Prefill ticks sit right of the ridge": on the default vLLM V1 run the orange prefill dots are one or two
    # and the purple mixed ticks are the ones that reach it, spread from 40 to 1,000 FLOP/byte by their prompt tokens)
    # (with speculative decoding a decode tick verifies k + 1 tokens per request, and at a large batch it crosses the
    # ridge: "decode-only ticks sit far left" under lesson 13's chart, whose decode dots reach ~600 FLOP/byte)
    decode = ("decode-only ticks sit far left (memory-bound) unless their batch verifies many draft tokens: speculative "
              "decoding widens each decode to k + 1 tokens per request, which moves a large batch's decode ticks right"
              if res.config.scheduler.speculative.enabled else "decode-only ticks sit far left (memory-bound)")
    st.caption("Each dot is a tick, at its FLOP per byte of HBM traffic. The more prompt tokens a tick computes (prefill and "
               f"mixed ticks), the further right it sits, up to the ridge and past it (compute-bound); {decode}: "
               f"the article's §1 in one picture. This run: {share} of the busy time in compute-bound "
               f"ticks (those past the calibrated roof's knee, about {knee:,.0f} FLOP/byte: the dashed line's, not the "
               f"datasheet's dotted ridge); MFU {util(res.summary.mfu_mean)} and MBU {util(res.summary.mbu_mean)} over "
               "the busy time (Glossary).")  # fmt: skip
    _show(charts.roofline_figure(res), "chart.roof")


def _step(key: str, delta: int, last: int) -> None:
    st.session_state[key] = min(max(int(st.session_state.get(key, 1)) + delta, 1), last)


def _recorded(res: SimResult, tick: int, instance: int | None = None) -> SimResult:
    """The run whose batch log holds `tick`: this one, or the same config re-run with a longer record
    (recording does not change the result; cached like every run). In a deployment `instance` names the
    engine and `tick` is that engine's own tick; the answer is that engine's run."""
    log_of = (lambda r: r) if instance is None else (lambda r: r.instances[instance].result)  # noqa: E731
    if (log_of(res).batches.tick == tick).any() or tick >= 100_000:
        return log_of(res)
    longer = with_value(res.config, "limits.num_recorded_batches", min(100_000, max(tick + 1, 2 * res.config.limits.num_recorded_batches)))
    out = runner.run(longer)
    return log_of(out.result if out.result is not None else res)


def _tick_instance(res: SimResult, tick: int) -> tuple[int, int] | None:
    """In a deployment, the merged timeline's row `tick` is (instance index, that engine's own tick): each
    engine's ticks enter the merge in their own order. None for one engine."""
    if not getattr(res, "instances", None):
        return None
    of = res.timeline.columns["instance"]
    k = int(of[tick])
    return k, int(np.count_nonzero(of[:tick] == k))


def _step_tab(res: SimResult) -> None:
    tl = res.timeline
    busy = np.flatnonzero(tl.phase != Phase.IDLE)
    if busy.size == 0:
        st.info("The run has no busy ticks.")
        return
    if getattr(res, "instances", None):
        # (a deployment's merged rows are in the order the ticks end; stepped in that order, the heading's start time
        # went back, 0.1410 s then 0.1047 s, at 681 of 7,742 steps of four replicas, a review. By start, each engine's
        # ticks still come in its own order; ticks that start together keep the merge's order)
        busy = busy[np.argsort(tl.t_start_s[busy], kind="stable")]
    key = "ui.step_index"
    last = int(busy.size)
    st.session_state[key] = min(max(int(st.session_state.get(key, 1)), 1), last)
    c1, c2, c3 = st.columns([4, 1, 1], vertical_alignment="bottom")  # (6:1:1 left each button under its 7.5rem minimum below ~1,450 px: Next wrapped alone)
    c1.number_input(f"Busy tick (1–{last:,})", 1, last, key=key, step=1,
                    help="Step through every tick that ran a batch, in the order they start (idle gaps skipped; in a "
                         "deployment every instance's ticks, interleaved).")  # fmt: skip
    c2.button("◀ Previous", key="ui.step_prev", on_click=_step, args=(key, -1, last), width="stretch")
    c3.button("Next ▶", key="ui.step_next", on_click=_step, args=(key, 1, last), width="stretch")
    tick = int(busy[int(st.session_state[key]) - 1])
    phase = Phase(int(tl.phase[tick])).name.lower()
    at = _tick_instance(res, tick)  # a deployment: whose tick it is; its KV pool and batch log are that engine's
    inst = res.instances[at[0]] if at else None
    num_blocks = (inst.result if inst else res).memory.num_blocks
    own = at[1] if at else tick  # a deployment's tick as its engine numbers it (the merged row's number is shown nowhere)
    # (the picker's busy tick first: "Busy tick (1-8,056)" at 1 was headed "Tick 0", and its last at "Tick 9,342",
    # the run's own numbering, idle ticks included, which the Ticks CSV and the batch chart use)
    num = int(st.session_state[key])
    st.markdown(
        f"**Busy tick {num:,} of {last:,}** (tick {own:,} of {plain(inst.label) if inst else 'the run'}, idle ticks "
        f"counted) at t = {tl.t_start_s[tick]:.4f} s · "
        f"{fmt_seconds(float(tl.duration_s[tick]))} · **{phase}** · "
        f"{tl.num_prefill_tokens[tick]:,} prefill + {tl.num_decode_tokens[tick]:,} decode tokens · "
        f"{'compute' if tl.is_compute_bound[tick] else 'memory'}-bound · KV {tl.kv_blocks_used[tick]:,} / "
        f"{num_blocks:,} blocks · {tl.num_waiting[tick]:,} waiting"
    )
    with st.spinner("Recording this tick's batch…"):
        rec = _recorded(res, own, at[0] if at else None)
    if (rec.batches.tick == own).any():
        _show(charts.step_figure(rec, own, req_ids=inst.request_ids if inst else None), "chart.step")
    else:
        st.info("Batches are recorded for the first 100,000 ticks; this tick's totals are above.")


def _export_tab(res: SimResult, cfg: SimConfig, link_params: dict[str, str] | None) -> None:
    st.markdown("**Share this run.** The link holds the whole configuration; opening it reproduces these numbers.")
    if link_params is None:  # (its length is not known: a long config is compressed only until it is too long)
        st.warning(f"This configuration is more than {MAX_LINK_CHARS:,} characters as a link (an uploaded trace?), too "
                   "long to share safely. Download the config JSON below and upload it instead.")  # fmt: skip
    else:
        st.code(workshop.full_url(link_params), language=None, wrap_lines=True)
        st.caption("The whole address: paste it anywhere. The address bar is kept in sync; the copy icon on the box "
                   "copies it.")  # fmt: skip
    c1, c2, c3 = st.columns(3)
    # CSVs are built only when clicked (a callable), not on every rerun
    c1.download_button("Config (JSON)", cfg.model_dump_json(indent=2), "config.json", "application/json", key="dl.cfg")
    c2.download_button("Requests (CSV)", lambda: _frames(res)["requests"].to_csv(index=False), "requests.csv", "text/csv",
                       key="dl.req", on_click="ignore")  # fmt: skip
    c3.download_button("Ticks (CSV)", lambda: _frames(res)["ticks"].to_csv(index=False), "ticks.csv", "text/csv",
                       key="dl.ticks", on_click="ignore")  # fmt: skip
    if getattr(res, "instances", None):  # a deployment: the CLI's instances.csv too (the page offered no such file)
        from sim_core.cluster.report import instance_rows

        c1.download_button("Instances (CSV)", lambda: pd.DataFrame(instance_rows(res)).to_csv(index=False), "instances.csv",
                           "text/csv", key="dl.instances", on_click="ignore")  # fmt: skip


# A deployment's instance table opens on the columns a phone shows (at 390 px its eleven, 849 px, scrolled sideways
# with busy, KV peak and the latencies out of view): which instance, how busy, how full its KV cache got, its TTFT and
# TPOT, the ms in the cells so the headers stay short; 326 px in all. "All columns" adds the rest.
COMPACT_INSTANCE_COLUMNS = {"instance": 76, "busy": 54, "kv_peak": 64, "ttft_p50_ms": 66, "tpot_p50_ms": 66}


def _requests_tab(res: SimResult) -> None:
    all_columns = tables.all_columns_toggle("ui.requests_all_columns", "Every column of the Requests CSV: arrival, "
                                            "scheduling, first-token and finish times, queue delay, longest gap, pre-emptions "
                                            "(and a deployment's instance and KV transfer); a deployment's instances: requests, "
                                            "prompt tokens, ticks, GPUs")  # fmt: skip
    if getattr(res, "instances", None):  # a deployment: what each instance served (the CLI's table, instances.csv)
        from sim_core.cluster.report import instance_rows

        in_ms = {"ttft_p50_s": "ttft_p50_ms", "tpot_p50_s": "tpot_p50_ms"}  # (shown in ms: the keys say so)
        # busy and KV peak as percentages with one decimal each: Streamlit's "percent" format printed as many as the
        # value has ("77.9%" beside "77.27%")
        scale = {"ttft_p50_s": 1e3, "tpot_p50_s": 1e3, "busy": 100.0, "kv_peak": 100.0}
        rows = [{in_ms.get(k, k): v * scale[k] if k in scale else v for k, v in r.items()} for r in instance_rows(res)]
        dis = res.config.deployment.disaggregation if res.config.deployment else None
        # Streamed by the decode side, the user's first token comes after the KV transfer and the decode instance's first
        # tick: a prefill instance's TTFT is its prefill's end, earlier (the 3P1D preset's 416-443 ms under a headline
        # p50 of 468 ms read as a contradiction while the caption called them the instances that emit first tokens).
        on_decode = dis is not None and dis.first_token_from == "decode"
        ttft_where = ("TTFT on a prefill instance: arrival to its prefill's end (the decode side streams the user's first "
                      "token, after the KV transfer: the headline's TTFT)" if on_decode else
                      "TTFT on the instances that emit first tokens")  # fmt: skip
        st.caption(("Per instance: the requests routed to it (decode instances: handed to it), its" if all_columns else
                    "Per instance (All columns: the requests routed to it, their prompt tokens, its ticks and GPUs): its")
                   + f" GPU busy time over the run's makespan and its KV cache peak; {ttft_where}; TPOT on the "
                   "instances that decode.")  # fmt: skip
        ttft_help = ("Arrival to the end of its prefill on the instance that prefilled the requests; the user's first token "
                     "comes later, from the decode side (the headline's TTFT)" if on_decode else
                     "On the instance that prefilled the requests")  # fmt: skip
        num = st.column_config.NumberColumn
        # (a pool's instances have no TTFT or TPOT of their own: NaN, shown as "–", not "None")
        ms = ("(ms)", "%.1f", "%.1f") if all_columns else ("", "%,.0f ms", "%.1f ms")  # (compact: the unit in the cells)
        tables.dataframe(rows, key="table.instances", placeholder=MISSING, all_columns=all_columns,
                         compact_px=COMPACT_INSTANCE_COLUMNS, column_config={
            "instance": st.column_config.TextColumn(),
            "busy": num(format="%.1f%%"), "kv_peak": num("KV peak", format="%.1f%%"),
            "prompt_tokens": num("prompt tokens", format="localized"), "ticks": num(format="localized"),
            "ttft_p50_ms": num(f"TTFT p50 {ms[0]}".strip(), format=ms[1],
                               help=f"{ttft_help}; {MISSING} on a decode instance (its requests arrive prefilled)"),
            "tpot_p50_ms": num(f"TPOT p50 {ms[0]}".strip(), format=ms[2],
                               help=f"On the instances that decode; {MISSING} on a prefill instance (it hands each request on after its prefill)")})  # fmt: skip
        # (a heading for the second table, and room for its toolbar: on a touch screen the toolbar always shows, and
        # with the tables back to back it covered the instance table's last row, lesson 12's figures)
        ran = "the instance it ran on" + (" and its KV transfer" if dis is not None else "")  # (a split's requests only)
        st.caption(f"Per request: one row each, with {ran}." if all_columns else
                   f"Per request: one row each (All columns: {ran}).")  # fmt: skip
    table = requests_view(_frames(res)["requests"], all_columns)
    # (unfinished requests have no finish, TTFT or E2E; one-token outputs no TPOT; a short run's table no blank rows)
    st.dataframe(table, hide_index=True, key="table.requests", height=tables.fitted_height_px(len(table), 420), placeholder=MISSING,
                 column_config=_request_columns(table.columns))  # fmt: skip


# The requests table's columns, what each shows and how: (header, format, width px, help). At 390 px (a phone) all 17
# columns scrolled sideways with only request_id, arrival_s, prompt_tokens and output_tokens in view, latencies in
# seconds to four places ("0.0419"); the width of the browser is not known here, so the table opens on the six columns
# a question about one request starts from (which, how long it waited and took, how long its prompt and answer were;
# an unfinished one shows "–" for what it has not done), latencies in ms as the headline writes them, 334 px in all
# (a phone's page is ~358); "All columns" adds the rest, status first (the CSV has them all). Headers are short, each
# says its unit, its help what it is: token counts "in tok" and "out tok", the pricing words ("prompt tok" needs ~78 px
# of its 58: the header read "prompt to"; it read "prompt", 1,524 of what not said).
REQUEST_COLUMNS = {
    "request_id": ("id", "%d", 40, "The request's number, in arrival order of the workload"),
    "status": ("status", None, None, "Where the request was when the run ended (unfinished: no E2E, TTFT or TPOT yet)"),
    "ttft_ms": ("TTFT ms", "%,.1f", 62, "Time to first token: arrival to its first output token"),
    "tpot_ms": ("TPOT ms", "%,.1f", 64, "Time per output token after the first: (E2E − TTFT) / (output tokens − 1)"),
    "e2e_s": ("E2E s", "%,.2f", 52, "Request latency: arrival to its last token"),
    "prompt_tokens": ("in tok", "localized", 58, "Input tokens: the prompt's length"),
    "output_tokens": ("out tok", "localized", 58, "Output tokens the request asks for"),
    "arrival_s": ("arrival s", "%,.3f", None, "Arrival time, simulated seconds from the start of the run"),
    "num_emitted": ("emitted tok", "localized", None, "Output tokens emitted when the run ended"),
    "priority": ("priority", "%d", None, "Its class's priority (0 is served first by the priority scheduler)"),
    "first_scheduled_s": ("scheduled s", "%,.3f", None, "When its prefill first ran, simulated seconds"),
    "first_token_s": ("first token s", "%,.3f", None, "When its first output token came, simulated seconds"),
    "finish_s": ("finish s", "%,.3f", None, "When its last token came, simulated seconds"),
    "queue_delay_ms": ("queue ms", "%,.1f", None, "Arrival to its first scheduled prefill"),
    "max_itl_ms": ("longest gap ms", "%,.1f", None, "Its longest gap between two output tokens (a stall)"),
    "num_preemptions": ("pre-emptions", "localized", None, "Times it was pre-empted (swapped out or recomputed)"),
    "num_recomputed_tokens": ("recomputed tok", "localized", None, "Tokens computed again after a recompute pre-emption"),
    "instance": ("instance", None, None, "The instance it ran on (prefill -> decode in a disaggregated deployment)"),
    "kv_wait_ms": ("KV wait ms", "%,.1f", None, "Prefill done to its KV transfer starting (waiting for a decode slot)"),
    "kv_link_wait_ms": ("link wait ms", "%,.1f", None, "Its KV transfer waiting for the link"),
    "kv_transfer_ms": ("KV transfer ms", "%,.2f", None, "From its decode slot's reservation to its KV's arrival: any wait "
                       "for the link (link wait ms) and the link's time after its prefill (with layer-wise pipelining, what "
                       "was left to send: the rest crossed during the prefill)"),
    "kv_transfer_bytes": ("KV bytes", "localized", None, "Bytes of KV cache moved to the decode instance"),
}
COMPACT_REQUEST_COLUMNS = ("request_id", "ttft_ms", "tpot_ms", "e2e_s", "prompt_tokens", "output_tokens")


def requests_view(requests: pd.DataFrame, all_columns: bool) -> pd.DataFrame:
    """The requests table as shown: latencies of a request in ms (`_ms`, as the headline writes them), E2E and the
    timestamps in s; the compact columns first, then (all_columns) every other column of the CSV, none dropped."""
    in_ms = [c for c in ("ttft_s", "tpot_s", "queue_delay_s", "max_itl_s", "kv_wait_s", "kv_link_wait_s", "kv_transfer_s") if c in requests]
    view = requests.assign(**{c: requests[c] * 1e3 for c in in_ms}).rename(columns={c: c.removesuffix("_s") + "_ms" for c in in_ms})
    order = list(COMPACT_REQUEST_COLUMNS)
    if all_columns:
        order += ["status"] + [c for c in view.columns if c not in order and c != "status"]
    return view[order]


def _request_columns(columns) -> dict:
    num = st.column_config.NumberColumn
    config = {}
    for col in columns:
        label, fmt, width, help_text = REQUEST_COLUMNS.get(col, (col, None, None, None))
        kind = st.column_config.TextColumn if fmt is None else num
        config[col] = kind(label, help=help_text, width=width, **({"format": fmt} if fmt else {}),
                           **({"pinned": True} if col == "request_id" else {}))  # fmt: skip
    return config


def main() -> None:
    new_cfg, error = draw_sidebar()
    cfg: SimConfig = st.session_state[CFG_KEY]
    if not error and new_cfg != cfg:
        preset = st.session_state.get(PRESET_KEY)
        st.session_state[PRESET_KEY] = preset if preset in list_presets() and load_preset(preset) == new_cfg else None
        runner.hold_config(new_cfg)  # (a config derived from an upload holds its trace's lists: the server counts them)
        st.session_state[CFG_KEY] = cfg = new_cfg
    # derived once per config (app.state.derived): an uploaded trace's config took seconds to describe and encode
    preset, base = st.session_state.get(PRESET_KEY), st.session_state.get(BASE_KEY)
    link_params = link_query(cfg, preset, base)
    # the lesson banner a link names (a reload, a shared address), then the address names the banner open now
    banner_problems = workshop.take_banner_from_link(read_query_params())
    if link_params is not None:
        banner = workshop.banner_link_params()
        # A lesson side as it opened whose settings only a whole `cfg=` can say (lesson 11's deployment: 2.7k
        # characters): the banner's own short address instead (`?lesson=11&lesson_step=1`, what the Links box gives and
        # an instructor types), which opens that same side. A preset and its few changes stay readable in the address.
        side = "cfg" in link_params and bool(banner) and derived(
            cfg, ("lesson_side", *(st.session_state.get(workshop.ACTIVE_LESSON_KEY) or ())),
            lambda c: workshop.banner_side_config() == c)  # fmt: skip
        link_params = banner if side else {**link_params, **banner}

    presenter = workshop.presenter_on()
    if not presenter:
        st.title("LLM serving scheduler explorer")
    workshop.lesson_banner(cfg)
    # (presenter mode: its way out beside Share, not a row of its own above the chart: a 1400x900 projector lost the
    # timeline's axis and lower panels below the screen, a review)
    c1, c2, *leave = st.columns([4, 1, 1.6] if presenter else [5, 1], vertical_alignment="center")
    if leave:
        workshop.leave_presenter_button(leave[0])
    if presenter:  # (the focus row in the caption's place: a line less above the chart, which the banner names)
        with c1:
            # (its value set in the session, not as a default: a lesson's link sets it, `workshop.open_on_view`, and a
            # widget given both warns)
            st.session_state.setdefault(FOCUS_KEY, DEFAULT_VIEW)
            focus = st.segmented_control("Focus on", PRESENTER_FOCUS, key=FOCUS_KEY,
                                         label_visibility="collapsed", on_change=_keep_focus)  # fmt: skip
    else:
        c1.caption(plain(f"{derived(cfg, 'description', describe_config)}. Results are modelled by a calibrated roofline, not measured."))
    with c2.popover("Share", icon=":material/share:", width="stretch", key="ui.share"):  # reachable on a phone, where tabs overflow
        share_note = st.empty()  # (said once the run is known: a run the server's load stopped is not what they see)
        if link_params is not None:  # (a bare URL box, its copy icon shown only on hover: a review asked what it was)
            share_note.caption(f"{SHARE_LEAD} Whoever opens it sees this run.")
            st.code(workshop.full_url(link_params), language=None, wrap_lines=True)
        else:
            st.text("Too long for a link (an uploaded trace?): download the config in Share & export.")
    show_link_notices(("present", *workshop.LESSON_LINK_PARAMS), problems=banner_problems)
    # after the notices, which read the address: written first, it had lost the parameters they name (a mistyped
    # ?sheduler.max_num_seqs=64 was dropped without a word on this page alone)
    # (without the config, and the banner, when it is too long for a link; present=1 is written in presenter mode)
    write_query_params(link_params or {})
    if error:
        st.error(f"**Not a valid setting:** {plain(error)} (also shown next to the control in the sidebar). The results "
                 "below are for the last valid settings.", icon=":material/error:")  # fmt: skip
    if (refused := upload_notice()) is not None:
        kind, message = refused
        st.error(f"**The uploaded {kind} was not used:** {plain(message)} (also under the upload in the sidebar). The "
                 "results below are for the settings before it.", icon=":material/error:")  # fmt: skip

    with st.spinner("Simulating…"):
        outcome = runner.run(cfg)
    if outcome.error:
        st.error(plain(sidebar_words(outcome.error)), icon=":material/memory:")
        # Nothing the user had is lost: the last run that gave a result is shown below the error (a deployment over the
        # memory budget replaced the result on the page with the error alone), fetched again by its config from the
        # byte-bounded result cache, or run again, so the session keeps no result of its own
        last = st.session_state.get(LAST_RUN_KEY)
        kept = runner.run(last) if last is not None and last != cfg else None
        if kept is None or kept.result is None:
            st.markdown("Nothing was simulated. Change a setting named above in the sidebar; your other settings are kept.")
            return
        st.info(f"Your settings are kept in the sidebar. Below is the last run that worked, not these settings: "
                f"{plain(describe_config(kept.result.config))}.", icon=":material/history:")  # fmt: skip
        outcome, cfg = kept, kept.result.config
        link_params = link_query(cfg, None, None)  # (Share & export: the shown run's config, which reproduces it)
    else:
        st.session_state[LAST_RUN_KEY] = cfg
    res = outcome.result
    if res.summary.stopped_reason:
        reason = res.summary.stopped_reason
        req = res.requests
        stop_s = float(res.timeline.t_end_s[-1]) if res.timeline.num_ticks else 0.0
        later = int(not_arrived(req.status, req.arrival_s, stop_s).sum())
        if is_budget_stop(reason):
            # (a review: lesson 14 under prefix_affinity, stopped at 55-98 s of its 183 s, headed 2,732 tok/s against a
            # finished run's 1,191: its busy first part alone. The figures' span said beside them)
            done = res.summary.num_requests - res.summary.num_unfinished
            advice = (f"The figures below cover its first {stop_s:,.1f} s of simulated time and {done:,} of its "
                      f"{res.summary.num_requests:,} requests, so they do not compare with a finished run's. This app limits "
                      "what one run may cost; make the run smaller (fewer requests, shorter outputs, fewer recorded "
                      "batches) or run it with the command line, which has no such limit.")  # fmt: skip
            if is_load_dependent_stop(reason):
                # (a review: the same link stopped at 13,533 of 20,000 requests, and finished a few minutes later with
                # other figures; the Share box said "whoever opens it sees this run")
                advice += (" Where a time or memory budget stops a run depends on how busy the server is: run again "
                           "later, or opened from a link, it may get further or finish, with other figures.")
                if link_params is not None:
                    share_note.caption(f"{SHARE_LEAD} This run stopped at the server's time or memory budget; whoever "
                                       "opens the link runs it again, and may get further or finish, with other figures.")  # fmt: skip
        elif stuck := _stuck_at_link(res, stop_s):
            # (a KV link of 1e-6 GB/s was told to lower the arrival rate or add GPUs; at 0.001 GB/s, with most of the
            # unfinished waiting for the decode slots the transfers on the link hold, it still was)
            held, queued = stuck
            link = res.config.deployment.disaggregation.link
            behind = (f", and {queued:,} more were prefilled and waiting for a decode slot, which the transfers on the link "
                      "hold until they land" if queued else "")
            advice = (f"Of the {res.summary.num_unfinished:,} unfinished requests, {held:,} were waiting for the KV link or "
                      f"crossing it{behind}: the link between the pools ({link.bandwidth_gb_per_s:g} GB/s) is the "
                      "bottleneck. Raise `deployment.disaggregation.link.bandwidth_gb_per_s` (NVLink within a node: "
                      "hundreds of GB/s).")
        elif later > res.summary.num_unfinished / 2:  # (it said "the server cannot keep up" of a server keeping up)
            advice = (f"Most of the unfinished requests ({later:,}) had not arrived yet: the workload runs past the "
                      "simulated-time limit. Run fewer requests, or raise the limit in *Objectives & run*; the figures "
                      "below cover the requests that arrived.")
        else:
            advice = ("The server cannot keep up with this load: lower the arrival rate or the number of requests, add "
                      "GPUs, or raise the limits in *Objectives & run*.")
        st.warning(f"**The run did not finish:** {plain(reason)}. {advice} Partial results below.", icon=":material/warning:")
    views = {"Headline": _headline_block, "Timeline": _timeline_tab, "Latency": _latency_tab, "Roofline": _roofline_tab,
             "Step through": _step_tab, "Requests": _requests_tab}  # (by LESSON_VIEWS' names: a lesson opens on one)
    if presenter:  # one chart fills the screen; the headline would push it down
        views[focus or DEFAULT_VIEW](res)
        return
    _headline_block(res)
    # Lazy tabs: only the open tab's figures are built and sent (a rerun when the user switches).
    names = [v for v in LESSON_VIEWS if v != "Headline"] + ["Share & export"]  # (the headline is above every tab)
    tabs = st.tabs(names, key=workshop.TAB_KEY, on_change="rerun")
    bodies = [lambda view=view: views[view](res) for view in names[:-1]] + [lambda: _export_tab(res, cfg, link_params)]
    for tab, body in zip(tabs, bodies, strict=True):
        if tab.open:
            with tab:
                body()


main()
