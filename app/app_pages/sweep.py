"""Sweep: one knob over a range, one simulation per point (same seed), optionally for two
strategies head to head. Throughput, goodput and latency percentiles against the knob; for the
arrival rate, the capacity under the TTFT/TPOT objectives is marked (DistServe / Sarathi-Serve)."""

from __future__ import annotations

import plotly.graph_objects as go
import streamlit as st
from plotly.subplots import make_subplots

from app.components.runner import PageBudget
from app.components.text import plain, plotly_text
from app.state import CFG_KEY, config_to_query, read_query_params, show_link_notices, write_query_params
from sim_core import PresetError, SimConfig, list_presets
from sim_core.config import field_info
from sim_core.inputs import parse_float_text, parse_int_text
from sim_core.presets import read_preset_data
from sim_core.sweep import SWEEP_KNOBS, SweepPoint, capacity_from_sweep, sweep_values, with_value

MAX_POINTS = 16
ATTAINMENT = 0.9
NO_ENGINE = "(none)"


def knob_bounds(knob: str) -> tuple[float, float]:
    """The knob's allowed range, from the config model (one source of truth); open bounds nudged in."""
    path, _, is_int = SWEEP_KNOBS[knob]
    lo, hi = 0.0, float("inf")
    for meta in field_info(tuple(path.split("."))).metadata:
        if getattr(meta, "ge", None) is not None:
            lo = float(meta.ge)
        if getattr(meta, "gt", None) is not None:
            lo = float(meta.gt) + (1 if is_int else 1e-3)
        if getattr(meta, "le", None) is not None:
            hi = float(meta.le)
        if getattr(meta, "lt", None) is not None:
            hi = float(meta.lt) - (1 if is_int else 1e-3)
    return lo, hi


def link_range(params: dict[str, str], knob: str, current: float) -> tuple[float, float, int, str | None]:
    """(start, stop, points, warning) from the link's start/stop/n, or defaults around the current
    value with a warning naming what was wrong (not a number, out of the knob's range, reversed)."""
    lo, hi = knob_bounds(knob)
    is_int = SWEEP_KNOBS[knob][2]
    start_d = min(max(current / 4 if knob == "rate" else current / 2, lo), hi)
    stop_d = min(max(current * 2, lo), hi)
    if is_int:
        start_d, stop_d = float(int(start_d)), float(int(stop_d))
    defaults = (start_d, stop_d, 8)
    if not {"start", "stop", "n"} & set(params):
        return *defaults, None
    try:
        parse = parse_int_text if is_int else parse_float_text
        start = float(parse(params["start"])) if "start" in params else start_d
        stop = float(parse(params["stop"])) if "stop" in params else stop_d
        n = parse_int_text(params["n"]) if "n" in params else 8
        if not (lo <= start <= hi and lo <= stop <= hi):
            raise ValueError(f"{knob} must be between {lo:g} and {hi:g}")
        if not start < stop:
            raise ValueError("start must be below stop")
        if not 2 <= n <= MAX_POINTS:
            raise ValueError(f"n must be 2 to {MAX_POINTS}")
    except ValueError as err:
        return *defaults, f"The sweep link's start, stop or n cannot be used ({err}); using defaults."
    return start, stop, n, None


def _point(cfg: SimConfig, knob: str, value: float, budget: PageBudget) -> SweepPoint:
    try:
        point_cfg = with_value(cfg, SWEEP_KNOBS[knob][0], value)
    except PresetError as err:
        return SweepPoint(value, None, str(err))
    out = budget.run(point_cfg)
    return SweepPoint(value, None if out.result is None else out.result.summary, out.error)


def _with_engine(cfg: SimConfig, engine: str) -> SimConfig:
    from app.components.config_form import apply_part

    return apply_part(cfg, "engines", engine)


def _run(cfg: SimConfig, knob: str, values: list[float], bar, offset: int, total: int, budget: PageBudget) -> list[SweepPoint]:
    out = []
    for i, v in enumerate(values):
        out.append(_point(cfg, knob, v, budget))
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
        shown = plotly_text(name)  # a scheduler name from a link: Plotly would render its HTML
        fig.add_trace(go.Scatter(x=x, y=[v.output_tokens_per_s for v in s], mode="lines+markers", name=shown,
                                 line_color=color, legendgroup=name), row=1, col=1)  # fmt: skip
        fig.add_trace(go.Scatter(x=x, y=[v.goodput_requests_per_s for v in s], mode="lines+markers", showlegend=False,
                                 line_color=color, legendgroup=name), row=1, col=2)  # fmt: skip
        for field, dash in (("ttft_p50_s", "dot"), ("ttft_p99_s", "solid"), ("tpot_p99_s", "dash")):
            fig.add_trace(go.Scatter(x=x, y=[getattr(v, field) * 1e3 for v in s], mode="lines+markers",
                                     name=f"{shown} {field.removesuffix('_s').replace('_', ' ')}", line=dict(color=color, dash=dash),
                                     legendgroup=name), row=1, col=3)  # fmt: skip
        if name in capacities:
            cap, saturated = capacities[name]
            if cap is not None:
                label_cap = f"{shown} capacity {'' if saturated else '≥ '}{cap:g}"
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
    problems = []
    if "sw.knob" not in st.session_state:
        wanted = params.get("sweep")
        if wanted is not None and wanted not in knobs:
            problems.append(f"The link names an unknown sweep knob {wanted[:40]!r}; sweeping the arrival rate.")
        st.session_state["sw.knob"] = wanted if wanted in knobs else "rate"
    c1, c2, c3, c4 = st.columns([2, 1, 1, 1])
    knob = c1.selectbox("Knob", knobs, key="sw.knob", format_func=lambda k: SWEEP_KNOBS[k][1])
    path, _, is_int = SWEEP_KNOBS[knob]
    current = cfg.model_dump()
    for part in path.split("."):
        current = current[part]
    start_default, stop_default, n_default, warning = link_range(params, knob, float(current))
    if warning and f"sw.start.{knob}" not in st.session_state:
        problems.append(warning)
    vs_default = params.get("vs", NO_ENGINE)
    engines = [NO_ENGINE, *list_presets("engines")]
    if vs_default not in engines and "sw.vs" not in st.session_state:
        problems.append(f"The link names an unknown engine {vs_default[:40]!r} to compare; none chosen.")
    show_link_notices(("sweep", "start", "stop", "n", "vs"), problems=tuple(problems))
    lo, hi = knob_bounds(knob)
    num = int if is_int else float  # integer knobs get integer widgets
    start = c2.number_input("From", value=num(start_default), min_value=num(lo), max_value=num(hi), key=f"sw.start.{knob}")
    stop = c3.number_input("To", value=num(stop_default), min_value=num(lo), max_value=num(hi), key=f"sw.stop.{knob}")
    n = c4.number_input("Points", 2, MAX_POINTS, min(max(n_default, 2), MAX_POINTS), key="sw.n")
    vs = st.selectbox("Also sweep this strategy (head to head)", engines, index=engines.index(vs_default) if vs_default in engines else 0,
                      key="sw.vs", format_func=lambda e: e if e == NO_ENGINE else read_preset_data("engines", e)["scheduler"]["name"])  # fmt: skip
    st.caption(f"Base setup: the current settings ({plain(cfg.scheduler.name)}, {plain(cfg.model.name)} on "
               f"{plain(cfg.hardware.name)}). "
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
    budget = PageBudget()  # a link cannot make this page run 32 simulations past the server's budget
    curves = {name: _run(c, knob, values, bar, i * len(values), total, budget) for i, (name, c) in enumerate(setups.items())}
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
        st.markdown(" · ".join(f"**{plain(k)}**: capacity {says(*v)}" for k, v in caps.items()))
    errors = [(name, p) for name, pts in curves.items() for p in pts if p.error]
    for name, p in errors[:3]:
        st.warning(plain(f"{name} at {knob} = {p.value:g}: {p.error}"))
    if len(errors) > 3:
        st.warning(f"{len(errors) - 3} more point(s) have no result (see the table).")
    rows = [{"setup": name, knob: p.value, **({} if p.summary is None else {
        "output tok/s": p.summary.output_tokens_per_s, "goodput req/s": p.summary.goodput_requests_per_s,
        "TTFT p99 (ms)": p.summary.ttft_p99_s * 1e3, "TPOT p99 (ms)": p.summary.tpot_p99_s * 1e3,
        "finished": p.summary.num_finished, "stopped": p.summary.stopped_reason or ""}), "error": p.error or ""}
        for name, pts in curves.items() for p in pts]  # fmt: skip
    st.dataframe(rows, hide_index=True, key="sw.table", column_config={
        c: st.column_config.NumberColumn(format="%.1f") for c in ("output tok/s", "TTFT p99 (ms)", "TPOT p99 (ms)")
    } | {"goodput req/s": st.column_config.NumberColumn(format="%.2f"), knob: st.column_config.NumberColumn(format="%g")})


main()
