"""Sweep: one knob over a range, one simulation per point and seed, optionally for two strategies
head to head. Steady-state throughput, goodput and latency percentiles against the knob (bands
across seeds); for the arrival rate, the capacity under the chosen rule is marked (an interval
across seeds)."""

from __future__ import annotations

import plotly.graph_objects as go
import streamlit as st
from plotly.subplots import make_subplots

from app.state import CFG_KEY, config_to_query, read_query_params, write_query_params
from sim_core import SimConfig, list_presets
from sim_core.backend import PointCache, default_cache_dir, get_backend
from sim_core.presets import read_preset_data
from sim_core.sweep import (SWEEP_KNOBS, CapacityObjective, SweepPoint, band, capacity_from_sweep, knob_value, point_metric,
                            run_sweep, steady_warmup_s, sweep_values)  # fmt: skip

MAX_POINTS = 16
ATTAINMENT = 0.9
MAX_SEEDS = 5
# Capacity rules: the named percentile of TTFT and TPOT within the SLOs (serving benchmarks) or DistServe's attainment.
RULES = {"P99": CapacityObjective(percentile=99), "P90": CapacityObjective(percentile=90),
         "P50": CapacityObjective(percentile=50), f"≥ {ATTAINMENT:.0%} meet both": CapacityObjective(rule="attainment", attainment=ATTAINMENT)}  # fmt: skip
NO_ENGINE = "(none)"


def _with_engine(cfg: SimConfig, engine: str) -> SimConfig:
    from app.components.config_form import apply_part

    return apply_part(cfg, "engines", engine)


def _run(cfg: SimConfig, knob: str, values: list[float], bar, offset: int, total: int, seeds: int = 1,
         steady: bool = False) -> list[SweepPoint]:
    """The sweep on the default backend (a local process pool, or Ray when RAY_ADDRESS is set); finished
    points come from / go to the bounded on-disk cache, so leaving the page mid-sweep loses nothing."""

    def progress(done: int, _: int) -> None:
        bar.progress((offset + done) / total, text=f"{knob}: {offset + done}/{total} runs")

    with get_backend() as backend:
        return run_sweep(cfg, knob, values, progress, num_seeds=seeds, backend=backend, cache=PointCache(default_cache_dir()),
                         steady_length=steady)  # fmt: skip


def _steady(field: str) -> str:
    """Steady-window version of a Summary field (warm-up and drain excluded)."""
    return f"steady.{field}"


def _band_trace(x, lo, hi, color: str, group: str, row: int, col: int, fig: go.Figure) -> None:
    """The min-max band across seeds: a filled polygon under the median line."""
    fig.add_trace(go.Scatter(x=list(x) + list(x)[::-1], y=list(hi) + list(lo)[::-1], fill="toself", fillcolor=color,
                             opacity=0.18, line=dict(width=0), hoverinfo="skip", showlegend=False, legendgroup=group),
                  row=row, col=col)  # fmt: skip


def sweep_figure(curves: dict[str, list[SweepPoint]], knob: str, capacities: dict[str, tuple[float | None, float | None, bool]]) -> go.Figure:
    """Steady-state throughput, goodput and latency percentiles against the knob (median across seeds,
    min-max band when repeated); `capacities` maps a setup to (lowest, highest capacity across seeds,
    whether a swept point beyond it failed the objectives)."""
    label = SWEEP_KNOBS[knob][1]
    fig = make_subplots(rows=1, cols=3, subplot_titles=("Throughput (output tok/s, steady state)", "Goodput (req/s meeting SLOs)",
                                                        "Latency percentiles (ms, log)"), horizontal_spacing=0.07)  # fmt: skip
    palette = ("#1A73E8", "#E8710A")
    for (name, pts), color in zip(curves.items(), palette):
        ok = [p for p in pts if p.summary is not None and p.summary.steady is not None]
        x = [p.value for p in ok]
        series = [("steady.output_tokens_per_s", 1, 1, 1, "solid", name, True),
                  ("steady.goodput_requests_per_s", 1, 1, 2, "solid", name, False),
                  ("steady.ttft_p50_s", 1e3, 1, 3, "dot", f"{name} TTFT p50", True),
                  ("steady.ttft_p99_s", 1e3, 1, 3, "solid", f"{name} TTFT p99", True),
                  ("steady.tpot_p99_s", 1e3, 1, 3, "dash", f"{name} TPOT p99", True)]  # fmt: skip
        for field, scale, row, col, dash, trace_name, legend in series:
            bands = [band([v * scale for v in point_metric(p, field)]) for p in ok]
            lo, mid, hi = ([b[i] for b in bands] for i in range(3))
            if any(len(p.seeds) > 1 for p in ok):
                _band_trace(x, lo, hi, color, name, row, col, fig)
            fig.add_trace(go.Scatter(x=x, y=mid, mode="lines+markers", name=trace_name, showlegend=legend,
                                     line=dict(color=color, dash=dash), legendgroup=name), row=row, col=col)  # fmt: skip
        if name in capacities:
            cap_lo, cap_hi, saturated = capacities[name]
            if cap_lo is not None:
                span = f"{cap_lo:g}" if cap_lo == cap_hi else f"{cap_lo:g}–{cap_hi:g}"
                label_cap = f"{name} capacity {'' if saturated else '≥ '}{span}"
                for col in (1, 2, 3):
                    fig.add_vline(x=cap_lo, line=dict(color=color, dash="dash", width=1.5), row=1, col=col)
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
    r1, r2 = st.columns([1, 1])
    rule = r1.selectbox("Capacity rule", list(RULES), key="sw.rule",
                        help="Serving benchmarks: the named percentile of TTFT and of TPOT within the SLOs, over the "
                        "steady-state window. DistServe: that share of requests meets both.")  # fmt: skip
    seeds = int(r2.number_input("Seeds", 1, MAX_SEEDS, 1, key="sw.seeds",
                                help="Repeat every point with this many seeds: the charts draw the min–max band, "
                                "capacity becomes an interval."))  # fmt: skip
    objective = RULES[rule]
    steady = knob == "rate" and st.checkbox(
        "Steady-state run length", value=True, key="sw.steady",
        help="Each rate runs long enough that a 4× longer run moves the capacity by < 5 % (a warm-up of "
        f"{steady_warmup_s(cfg):,.0f} s for this traffic and these SLOs, then 8× that), instead of the current "
        f"{cfg.workload.num_requests:,} requests.")  # fmt: skip
    engines = [NO_ENGINE, *list_presets("engines")]
    vs_default = params.get("vs", NO_ENGINE)
    vs = st.selectbox("Also sweep this strategy (head to head)", engines, index=engines.index(vs_default) if vs_default in engines else 0,
                      key="sw.vs", format_func=lambda e: e if e == NO_ENGINE else read_preset_data("engines", e)["scheduler"]["name"])  # fmt: skip
    st.caption(f"Base setup: the current settings ({cfg.scheduler.name}, {cfg.model.name} on {cfg.hardware.name}). "
               f"Capacity = the highest swept rate at which {objective.describe(cfg)} (requests ranked 10 %–90 % by "
               "arrival; throughput and goodput over that window's span, not the makespan).")  # fmt: skip
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
    total = len(values) * len(setups) * seeds
    bar = st.progress(0.0, text="Simulating…")
    curves = {name: _run(c, knob, values, bar, i * len(values) * seeds, total, seeds, steady)
              for i, (name, c) in enumerate(setups.items())}  # fmt: skip
    bar.empty()
    caps = {}
    if knob == "rate":
        for name, pts in curves.items():
            per_seed = [capacity_from_sweep(pts, setups[name], objective=objective, seed_index=k) for k in range(seeds)]
            found = [c for c in per_seed if c is not None]
            lo, hi = (min(found), max(found)) if len(found) == seeds else (None, None)
            caps[name] = (lo, hi, hi is None or hi < pts[-1].value)
    notes = [(name, p) for name, pts in curves.items() for p in pts
             if p.summary is not None and p.summary.steady is not None and p.summary.steady.note]  # fmt: skip
    if notes:
        name, p = notes[0]
        st.info(f"{len(notes)} of {sum(len(v) for v in curves.values())} points cannot say what the steady state is. "
                f"At {knob} = {p.value:g} ({name}): {p.summary.steady.note}")  # fmt: skip
    st.plotly_chart(sweep_figure(curves, knob, caps), key="sw.fig")
    if caps:
        def says(lo, hi, saturated):
            if lo is None:
                return f"below {values[0]:g} req/s (even the lowest rate misses the objectives)"
            span = f"{lo:g} req/s" if lo == hi else f"{lo:g}–{hi:g} req/s over {seeds} seeds"
            return span if saturated else f"at least {span} (every point met the objectives: raise 'To')"
        st.markdown(" · ".join(f"**{k}**: capacity {says(*v)}" for k, v in caps.items()))
    errors = [(name, p) for name, pts in curves.items() for p in pts if p.error]
    for name, p in errors[:3]:
        st.warning(f"{name} at {knob} = {p.value:g}: {p.error}")
    steady = lambda s, f: getattr(s.steady, f) if s.steady is not None else float("nan")  # noqa: E731
    rows = [{"setup": name, knob: p.value, **({} if p.summary is None else {
        "output tok/s": steady(p.summary, "output_tokens_per_s"), "goodput req/s": steady(p.summary, "goodput_requests_per_s"),
        "TTFT p99 (ms)": steady(p.summary, "ttft_p99_s") * 1e3, "TPOT p99 (ms)": steady(p.summary, "tpot_p99_s") * 1e3,
        "finished": p.summary.num_finished, "stopped": p.summary.stopped_reason or ""})}
        for name, pts in curves.items() for p in pts]  # fmt: skip
    st.dataframe(rows, hide_index=True, key="sw.table", column_config={
        c: st.column_config.NumberColumn(format="%.1f") for c in ("output tok/s", "TTFT p99 (ms)", "TPOT p99 (ms)")
    } | {"goodput req/s": st.column_config.NumberColumn(format="%.2f"), knob: st.column_config.NumberColumn(format="%g")})


main()
