"""Simulate: controls in the sidebar; headline numbers, the shared-time-axis timeline, latency
distributions, roofline, step-through, request table and exports in the main area."""

from __future__ import annotations

from urllib.parse import urlencode

import numpy as np
import plotly.graph_objects as go
import streamlit as st

from app.components import charts, runner, timeline
from app.components.text import plain
from app.components.sidebar import draw_sidebar
from app.state import BASE_KEY, CFG_KEY, MAX_LINK_CHARS, PRESENTER_KEY, PRESET_KEY, config_to_query, show_link_notices, write_query_params
from sim_core import SimConfig, SimResult, list_presets, load_preset
from sim_core.budget import is_budget_stop
from sim_core.types import Phase


def _show(fig, key: str, **kwargs) -> None:
    """Draw a figure; in presenter mode a copy with projector-sized text (cached figures stay as built)."""
    if st.session_state.get(PRESENTER_KEY):
        fig = go.Figure(fig).update_layout(font=dict(size=17), height=(fig.layout.height or 450) + 120)
    st.plotly_chart(fig, key=key, **kwargs)


def _headline(res: SimResult) -> None:
    s = res.summary
    ms = lambda v: "–" if np.isnan(v) else f"{v * 1e3:,.0f} ms" if v >= 0.1 else f"{v * 1e3:,.1f} ms"  # noqa: E731
    row1 = st.columns(4)
    kw = dict(delta_color="off", delta_arrow="off")
    row1[0].metric("Output throughput", f"{s.output_tokens_per_s:,.0f} tok/s", f"{s.total_tokens_per_s:,.0f} tok/s incl. prompts",
                   help="Output tokens per second over the makespan.", **kw)  # fmt: skip
    row1[1].metric("TTFT p50", ms(s.ttft_p50_s), f"p99 {ms(s.ttft_p99_s)}", help="Time to first token, finished requests.", **kw)
    row1[2].metric("TPOT p50", ms(s.tpot_p50_s), f"p99 {ms(s.tpot_p99_s)} · ITL p99 {ms(s.itl_p99_s)}",
                   help="(E2E − TTFT) / (output tokens − 1); ITL is every gap between two tokens.", **kw)  # fmt: skip
    row1[3].metric("Goodput", f"{s.goodput_requests_per_s:,.2f} req/s", f"{s.slo_attainment:.0%} meet SLOs",
                   help="Requests per second that meet both the TTFT and the TPOT objective (DistServe).", **kw)  # fmt: skip
    row2 = st.columns(4)
    row2[0].metric("GPU busy", f"{s.gpu_busy_fraction:.0%}", f"prefill {s.prefill_time_fraction:.0%} of busy time", **kw)
    row2[1].metric("Pre-emptions", f"{s.num_preemptions:,}", f"{s.num_swap_outs:,} swaps · {s.num_recomputed_tokens:,} tok recomputed", **kw)
    row2[2].metric("KV cache peak", f"{s.kv_peak_usage:.0%}", f"of {s.kv_capacity_tokens:,} tokens", **kw)
    row2[3].metric("Finished", f"{s.num_finished:,} / {s.num_requests:,}", f"{s.num_ticks:,} ticks · {s.makespan_s:,.1f} s", **kw)


def _steady_caption(res: SimResult) -> None:
    """The steady-state window (warm-up and drain excluded) and, when the run is too short, why."""
    st_ = res.summary.steady
    if st_ is None:
        return
    st.caption(f"Steady state (requests {st_.window_first_request:,}–{st_.window_last_request:,} by arrival: first and last "
               f"10 % excluded): {st_.output_tokens_per_s:,.0f} output tok/s, goodput {st_.goodput_requests_per_s:,.2f} req/s "
               f"of {st_.arrival_rate_per_s:,.2f} offered ({st_.slo_attainment:.0%} meet SLOs), TTFT p99 "
               f"{st_.ttft_p99_s * 1e3:,.0f} ms, TPOT p99 {st_.tpot_p99_s * 1e3:,.1f} ms.")  # fmt: skip
    if st_.note:
        st.info(st_.note, icon=":material/hourglass_empty:")


def _timeline_tab(res: SimResult) -> None:
    n = res.requests.arrival_s.size
    c1, c2 = st.columns([1, 1])
    first = c1.number_input("First request shown", 0, max(n - 1, 0), 0, step=10, key="ui.first_request",
                            help="The request rows show a window of requests (by arrival order).")  # fmt: skip
    rows = c2.slider("Requests shown", 5, timeline.MAX_REQUEST_ROWS, min(30, n), key="ui.rows") if n > 5 else n
    _show(_timeline_fig(res, int(first), int(rows)), "chart.timeline", config={"displaylogo": False})
    st.caption("All four panels share one time axis: drag to zoom, double-click to reset. Hover a bar for the batch "
               "composition, tokens, duration and whether the tick was compute- or memory-bound.")  # fmt: skip


@st.cache_resource(max_entries=32, show_spinner=False)
def _timeline_fig_cached(cfg_json: str, first: int, rows: int):
    return timeline.timeline_figure(runner.run(SimConfig.model_validate_json(cfg_json)).result, first, rows)


def _timeline_fig(res: SimResult, first: int, rows: int):
    from app.state import canonical_json

    return _timeline_fig_cached(canonical_json(res.config), first, rows)


def _frames(res: SimResult):
    """Per-request and per-tick tables, built once per config (shared read-only, bounded in bytes)."""
    return runner.frames(res)


def _latency_tab(res: SimResult) -> None:
    tabs = st.tabs([m.label.split(":")[0] for m in charts.METRICS])
    for tab, metric in zip(tabs, charts.METRICS):
        with tab:
            _show(charts.distribution_figure(res, metric), f"chart.dist.{metric.key}")


def _roofline_tab(res: SimResult) -> None:
    st.caption("Each dot is a tick. Prefill ticks sit right of the ridge (compute-bound), decode ticks left "
               "(memory-bound): the article's §1 in one picture.")  # fmt: skip
    _show(charts.roofline_figure(res), "chart.roof")


def _step_tab(res: SimResult) -> None:
    busy = np.unique(res.batches.tick)  # recorded ticks that ran a batch (idle ticks have none)
    if busy.size == 0:
        st.info("No batches were recorded (limits.num_recorded_batches is 0).")
        return
    tick = int(st.select_slider("Tick", options=busy.tolist(), key="ui.step_tick",
                                help=f"Step through the first {busy.size:,} busy ticks (limits.num_recorded_batches "
                                     "keeps the batch of the first ticks of a run)."))  # fmt: skip
    tl = res.timeline
    phase = Phase(int(tl.phase[tick])).name.lower()
    st.markdown(
        f"**Tick {tick}** at t = {tl.t_start_s[tick]:.4f} s · {tl.duration_s[tick] * 1e3:.2f} ms · **{phase}** · "
        f"{tl.num_prefill_tokens[tick]:,} prefill + {tl.num_decode_tokens[tick]:,} decode tokens · "
        f"{'compute' if tl.is_compute_bound[tick] else 'memory'}-bound · KV {tl.kv_blocks_used[tick]:,} / "
        f"{res.memory.num_blocks:,} blocks · {tl.num_waiting[tick]} waiting"
    )
    _show(charts.step_figure(res, tick), "chart.step")


def _export_tab(res: SimResult, cfg: SimConfig, link_params: dict[str, str]) -> None:
    query = urlencode(link_params)
    st.markdown("**Share this run.** The link holds the whole configuration; opening it reproduces these numbers.")
    if len(query) > MAX_LINK_CHARS:
        st.warning(f"This configuration is {len(query):,} characters as a link (an uploaded trace?), too long to "
                   "share safely. Download the config JSON below and upload it instead.")  # fmt: skip
    else:
        st.code("?" + query, language=None, wrap_lines=True)
        st.caption("Append this to the app's address, or copy the address bar: it is kept in sync. "
                   "The copy icon on the box copies it.")  # fmt: skip
    c1, c2, c3 = st.columns(3)
    # CSVs are built only when clicked (a callable), not on every rerun
    c1.download_button("Config (JSON)", cfg.model_dump_json(indent=2), "config.json", "application/json", key="dl.cfg")
    c2.download_button("Requests (CSV)", lambda: _frames(res)["requests"].to_csv(index=False), "requests.csv", "text/csv",
                       key="dl.req", on_click="ignore")  # fmt: skip
    c3.download_button("Ticks (CSV)", lambda: _frames(res)["ticks"].to_csv(index=False), "ticks.csv", "text/csv",
                       key="dl.ticks", on_click="ignore")  # fmt: skip


def main() -> None:
    new_cfg, error = draw_sidebar()
    cfg: SimConfig = st.session_state[CFG_KEY]
    if error:
        st.sidebar.error(plain(error))
    elif new_cfg != cfg:
        preset = st.session_state.get(PRESET_KEY)
        st.session_state[PRESET_KEY] = preset if preset in list_presets() and load_preset(preset) == new_cfg else None
        st.session_state[CFG_KEY] = cfg = new_cfg
    link_params = config_to_query(cfg, st.session_state.get(PRESET_KEY), st.session_state.get(BASE_KEY))
    if len(urlencode(link_params)) <= MAX_LINK_CHARS:
        write_query_params(link_params)

    st.title("LLM serving scheduler explorer")
    hw = cfg.hardware
    st.caption(f"**{plain(cfg.model.name)}** on {hw.num_gpus}× **{plain(hw.name)}** · scheduler **{plain(cfg.scheduler.name)}** "
               f"({cfg.scheduler.prefill_mode}, {cfg.scheduler.batching}) · workload **{plain(cfg.workload.name)}**, "
               f"{cfg.workload.num_requests:,} requests, seed {cfg.seed}. Results are modelled by a calibrated "
               "roofline, not measured.")  # fmt: skip
    show_link_notices()
    if error:
        st.info("The settings in the sidebar are not valid (see the message there); showing the last valid configuration.")

    with st.spinner("Simulating…"):
        outcome = runner.run(cfg)
    if outcome.error:
        st.error(plain(outcome.error), icon=":material/memory:")
        st.markdown("Nothing was simulated. Change the knob named above; your other settings are kept.")
        return
    res = outcome.result
    if res.summary.stopped_reason:
        reason = res.summary.stopped_reason
        advice = ("This app limits what one run may cost; make the run smaller (fewer requests, shorter outputs, "
                  "fewer recorded batches) or run it with the command line, which has no such limit."
                  if is_budget_stop(reason) else
                  "The server cannot keep up with this load: lower the arrival rate or the number of requests, add "
                  "GPUs, or raise the limits in *Objectives & run*.")  # fmt: skip
        st.warning(f"**The run did not finish:** {plain(reason)}. {advice} Partial results below.", icon=":material/warning:")
    _headline(res)
    _steady_caption(res)
    names = ["Timeline", "Latency", "Roofline", "Step through", "Requests", "Share & export"]
    if st.session_state.get(PRESENTER_KEY):
        focus = st.segmented_control("Focus on", names[:4], default="Timeline", key="ui.focus")
        {"Timeline": _timeline_tab, "Latency": _latency_tab, "Step through": _step_tab,
         "Roofline": _roofline_tab}[focus or "Timeline"](res)  # fmt: skip
        return
    # Lazy tabs: only the open tab's figures are built and sent (a rerun when the user switches).
    tabs = st.tabs(names, key="ui.tab", on_change="rerun")
    bodies = [
        lambda: _timeline_tab(res),
        lambda: _latency_tab(res),
        lambda: _roofline_tab(res),
        lambda: _step_tab(res),
        lambda: st.dataframe(_frames(res)["requests"], hide_index=True, key="table.requests", height=420),
        lambda: _export_tab(res, cfg, link_params),
    ]
    for tab, body in zip(tabs, bodies):
        if tab.open:
            with tab:
                body()

main()
