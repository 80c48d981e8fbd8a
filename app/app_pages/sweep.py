"""Sweep: one knob over a range, one simulation per point (same seed), optionally for two
strategies head to head. Throughput, goodput and latency percentiles against the knob; for the
arrival rate, the capacity under the TTFT/TPOT objectives is marked (DistServe / Sarathi-Serve)."""

from __future__ import annotations

import plotly.graph_objects as go
import streamlit as st
from plotly.subplots import make_subplots

from app.state import CFG_KEY, canonical_json, config_to_query, read_query_params, write_query_params
from sim_core import MemoryPlanError, PresetError, SimConfig, list_presets, run_simulation
from sim_core.presets import read_preset_data
from sim_core.sweep import SWEEP_KNOBS, SweepPoint, apply_knob, capacity_from_sweep, knob_value, sweep_values

MAX_POINTS = 16
ATTAINMENT = 0.9
NO_ENGINE = "(none)"


@st.cache_data(max_entries=512, show_spinner=False)
def _point(cfg_json: str, knob: str, value: float) -> tuple[dict | None, str | None]:
    cfg = SimConfig.model_validate_json(cfg_json)
    try:
        return run_simulation(apply_knob(cfg, knob, value)).summary.model_dump(), None
    except (PresetError, MemoryPlanError) as err:
        return None, str(err)


def _with_engine(cfg: SimConfig, engine: str) -> SimConfig:
    from app.components.config_form import apply_part

    return apply_part(cfg, "engines", engine)


def _run(cfg: SimConfig, knob: str, values: list[float], bar, offset: int, total: int) -> list[SweepPoint]:
    from sim_core.result import Summary

    out = []
    cfg_json = canonical_json(cfg)
    for i, v in enumerate(values):
        summary, err = _point(cfg_json, knob, v)
        out.append(SweepPoint(v, Summary(**summary) if summary else None, err))
        bar.progress((offset + i + 1) / total, text=f"{knob} = {v:g} ({offset + i + 1}/{total})")
    return out


def sweep_figure(curves: dict[str, list[SweepPoint]], knob: str, capacities: dict[str, tuple[float | None, bool]]) -> go.Figure:
    """Throughput, goodput and latency percentiles against the knob; `capacities` maps a setup to
    (capacity, whether a swept point beyond it failed the objectives)."""
    label = SWEEP_KNOBS[knob][1]
    fig = make_subplots(rows=1, cols=3, subplot_titles=("Throughput (output tok/s)", "Goodput (req/s meeting SLOs)",
                                                        "Latency percentiles (ms, log)"), horizontal_spacing=0.07)  # fmt: skip
    palette = ("#1A73E8", "#E8710A")
    for (name, pts), color in zip(curves.items(), palette):
        ok = [p for p in pts if p.summary is not None]
        x = [p.value for p in ok]
        s = [p.summary for p in ok]
        fig.add_trace(go.Scatter(x=x, y=[v.output_tokens_per_s for v in s], mode="lines+markers", name=f"{name}",
                                 line_color=color, legendgroup=name), row=1, col=1)  # fmt: skip
        fig.add_trace(go.Scatter(x=x, y=[v.goodput_requests_per_s for v in s], mode="lines+markers", showlegend=False,
                                 line_color=color, legendgroup=name), row=1, col=2)  # fmt: skip
        for field, dash in (("ttft_p50_s", "dot"), ("ttft_p99_s", "solid"), ("tpot_p99_s", "dash")):
            fig.add_trace(go.Scatter(x=x, y=[getattr(v, field) * 1e3 for v in s], mode="lines+markers",
                                     name=f"{name} {field.removesuffix('_s').replace('_', ' ')}", line=dict(color=color, dash=dash),
                                     legendgroup=name), row=1, col=3)  # fmt: skip
        if name in capacities:
            cap, saturated = capacities[name]
            if cap is not None:
                label_cap = f"{name} capacity {'' if saturated else '≥ '}{cap:g}"
                for col in (1, 2, 3):
                    fig.add_vline(x=cap, line=dict(color=color, dash="dash", width=1.5), row=1, col=col)
                fig.add_trace(go.Scatter(x=[None], y=[None], mode="lines", line=dict(color=color, dash="dash"),
                                         name=label_cap), row=1, col=1)  # legend entry for the dashed lines
    fig.update_xaxes(title_text=label)
    fig.update_yaxes(type="log", row=1, col=3)
    fig.update_layout(height=430, margin=dict(l=10, r=10, t=70, b=40), legend=dict(orientation="h", y=-0.25))
    return fig


def main() -> None:
    st.title("Sweep a knob")
    cfg: SimConfig = st.session_state[CFG_KEY]
    params = read_query_params()
    knobs = list(SWEEP_KNOBS)
    if "sw.knob" not in st.session_state:
        st.session_state["sw.knob"] = params.get("sweep", "rate") if params.get("sweep") in knobs else "rate"
    c1, c2, c3, c4 = st.columns([2, 1, 1, 1])
    knob = c1.selectbox("Knob", knobs, key="sw.knob", format_func=lambda k: SWEEP_KNOBS[k][1])
    current = knob_value(cfg, knob)
    try:
        start_default = float(params.get("start", current / 4 if knob == "rate" else current / 2))
        stop_default = float(params.get("stop", current * 2))
        n_default = int(params.get("n", 8))
    except ValueError:
        st.warning("The sweep link has a non-numeric start, stop or n; using defaults.")
        start_default, stop_default, n_default = current / 2, current * 2, 8
    start = c2.number_input("From", value=start_default, min_value=0.0, key=f"sw.start.{knob}")
    stop = c3.number_input("To", value=stop_default, min_value=0.0, key=f"sw.stop.{knob}")
    n = c4.number_input("Points", 2, MAX_POINTS, min(max(n_default, 2), MAX_POINTS), key="sw.n")
    engines = [NO_ENGINE, *list_presets("engines")]
    vs_default = params.get("vs", NO_ENGINE)
    vs = st.selectbox("Also sweep this strategy (head to head)", engines, index=engines.index(vs_default) if vs_default in engines else 0,
                      key="sw.vs", format_func=lambda e: e if e == NO_ENGINE else read_preset_data("engines", e)["scheduler"]["name"])  # fmt: skip
    st.caption(f"Base setup: the current settings ({cfg.scheduler.name}, {cfg.model.name} on {cfg.hardware.name}). "
               f"Capacity = the highest swept rate at which ≥ {ATTAINMENT:.0%} of requests meet TTFT ≤ {cfg.slo.ttft_s:g} s "
               f"and TPOT ≤ {cfg.slo.tpot_s * 1e3:g} ms.")  # fmt: skip
    if stop <= start:
        st.error(f"'To' ({stop:g}) must be larger than 'From' ({start:g}).")
        return
    values = sweep_values(knob, start, stop, int(n))
    write_query_params(config_to_query(cfg, st.session_state.get("sim.preset"))
                       | {"sweep": knob, "start": f"{start:g}", "stop": f"{stop:g}", "n": str(int(n))}
                       | ({"vs": vs} if vs != NO_ENGINE else {}))  # fmt: skip
    setups = {cfg.scheduler.name: cfg}
    if vs != NO_ENGINE:
        other = _with_engine(cfg, vs)
        setups[other.scheduler.name if other.scheduler.name != cfg.scheduler.name else f"{vs}"] = other
    total = len(values) * len(setups)
    bar = st.progress(0.0, text="Simulating…")
    curves = {name: _run(c, knob, values, bar, i * len(values), total) for i, (name, c) in enumerate(setups.items())}
    bar.empty()
    caps = {}
    if knob == "rate":
        for name, pts in curves.items():
            cap = capacity_from_sweep(pts, setups[name], ATTAINMENT)
            caps[name] = (cap, cap is None or cap < pts[-1].value)
    st.plotly_chart(sweep_figure(curves, knob, caps), key="sw.fig")
    if caps:
        def says(cap, saturated):
            if cap is None:
                return f"below {values[0]:g} req/s (even the lowest rate misses the objectives)"
            return f"{cap:g} req/s" if saturated else f"at least {cap:g} req/s (every point met the objectives: raise 'To')"
        st.markdown(" · ".join(f"**{k}**: capacity {says(*v)}" for k, v in caps.items()))
    errors = [(name, p) for name, pts in curves.items() for p in pts if p.error]
    for name, p in errors[:3]:
        st.warning(f"{name} at {knob} = {p.value:g}: {p.error}")
    rows = [{"setup": name, knob: p.value, **({} if p.summary is None else {
        "output tok/s": p.summary.output_tokens_per_s, "goodput req/s": p.summary.goodput_requests_per_s,
        "TTFT p99 (ms)": p.summary.ttft_p99_s * 1e3, "TPOT p99 (ms)": p.summary.tpot_p99_s * 1e3,
        "finished": p.summary.num_finished, "stopped": p.summary.stopped_reason or ""})}
        for name, pts in curves.items() for p in pts]  # fmt: skip
    st.dataframe(rows, hide_index=True, key="sw.table", column_config={
        c: st.column_config.NumberColumn(format="%.1f") for c in ("output tok/s", "TTFT p99 (ms)", "TPOT p99 (ms)")
    } | {"goodput req/s": st.column_config.NumberColumn(format="%.2f"), knob: st.column_config.NumberColumn(format="%g")})


main()
