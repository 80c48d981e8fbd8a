"""Compare: two setups on the same workload (same seed): side-by-side Gantts on one time axis,
overlaid latency CDFs, and a table of headline metrics with difference and ratio. The pair travels
in one link (?a=…&b=…, each a preset name or an encoded config)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import streamlit as st

from app.components import charts, cluster_timeline, runner, timeline, workshop
from app.components.config_form import sidebar_words
from app.components.setup_notes import calibration_difference, setup_differences
from app.components.sidebar import describe_where, scheduler_label
from app.components.text import plain
from app.components.units import fmt_count, fmt_seconds
from app.state import (BASE_KEY, CFG_KEY, compare_params, config_from_query, config_key, derived, ignored_params,
                       is_config_param, link_query, preset_matching, read_query_params, show_link_notices,
                       write_query_params)  # fmt: skip
from sim_core import PresetError, SimConfig, config_from_dict, config_with, list_presets, load_preset
from sim_core.metrics import class_metrics, no_value_reason
from sim_core.sweep import rate_applies, steady_run_length
from sim_core.words import counted, percent

CURRENT = "(current settings from Simulate)"
METRIC_ROWS = [  # (label, summary field, kind): kind formats the value (s: ms or s; count: integer)
    ("Output throughput", "output_tokens_per_s", "tok/s"),
    ("Goodput", "goodput_requests_per_s", "req/s"),
    ("SLO attainment", "slo_attainment", "%"),
    ("TTFT p50", "ttft_p50_s", "s"),
    ("TTFT p99", "ttft_p99_s", "s"),
    ("TPOT p50", "tpot_p50_s", "s"),
    ("TPOT p99", "tpot_p99_s", "s"),
    ("ITL p99", "itl_p99_s", "s"),
    ("E2E p50", "e2e_p50_s", "s"),
    ("GPU busy", "gpu_busy_fraction", "%"),
    ("Mean batch", "mean_batch_size", "seqs"),
    ("Pre-emptions", "num_preemptions", "count"),
    ("Swaps", "num_swap_outs", "count"),  # (recompute and swap read the same pre-emption count)
    ("Finished", "num_finished", "count"),
]
# Over the steady-state window (warm-up and drain left out): the whole-run throughput and goodput divide by the makespan,
# so two setups that both keep up read as a ratio of their drain tails (the default pair: goodput 1.10x at 100 % each)
STEADY_ROWS = [
    ("Output throughput, steady state", "output_tokens_per_s", "tok/s"),
    ("Goodput, steady state", "goodput_requests_per_s", "req/s"),
]
CLASS_ROWS = [("TTFT p99", "ttft_p99_s", "s"), ("TPOT p99", "tpot_p99_s", "s"), ("meet SLOs", "slo_attainment", "%")]
# Which way is better for a row's field (the ratio's cell says "better" or "worse": a reader flipped the direction row
# by row, TTFT p99 1.62x worse beside goodput 2.04x better); fields not named (GPU busy, mean batch) are neither
HIGHER_IS_BETTER = frozenset({"output_tokens_per_s", "goodput_requests_per_s", "slo_attainment", "num_finished"})
LOWER_IS_BETTER = frozenset({"ttft_p50_s", "ttft_p99_s", "tpot_p50_s", "tpot_p99_s", "itl_p99_s", "e2e_p50_s",
                             "num_preemptions", "num_swap_outs"})  # fmt: skip


def ratio_text(ratio: float, field: str) -> str:
    """B / A as its cell shows it: the ratio, and whether B is better or worse where a field has a better way."""
    if np.isnan(ratio):
        return "–"
    shown = f"{ratio:.2f}×"
    if shown == "1.00×" or field not in HIGHER_IS_BETTER | LOWER_IS_BETTER:
        return shown
    return f"{shown} {'better' if (ratio > 1) == (field in HIGHER_IS_BETTER) else 'worse'}"


def fmt_value(value: float, kind: str) -> str:
    if value is None or np.isnan(value):
        return "–"
    # (seconds with their trailing zeros: A's "1.9 s" beside B's "2.11 s" read as a less precise figure)
    return {"s": lambda v: fmt_seconds(v, strip_zeros=False), "count": fmt_count, "%": percent, "seqs": lambda v: f"{v:,.1f}",
            "tok/s": lambda v: f"{v:,.0f} tok/s", "req/s": lambda v: f"{v:,.2f} req/s"}[kind](value)  # fmt: skip


def side_label(cfg: SimConfig) -> str:
    """A side's name that stays true: the preset while unmodified, else 'modified: <scheduler>'."""
    # (once per config object, `derived`: scheduler_label validates the whole config, an uploaded trace's for a second)
    return derived(cfg, "side_label", lambda c: preset_matching(c) or f"modified · {scheduler_label(c)}")


def _side_from_link(prefix: str, params: dict[str, str]) -> tuple[SimConfig | None, str | None, str | None]:
    sub = {k.removeprefix(prefix + "_"): v for k, v in params.items() if k.startswith(prefix + "_")}
    if not sub:
        return None, None, None
    # (the same parameters parse to the same side: the page writes each side's link back, so every rerun read them again)
    memo = st.session_state.get(f"cmp.parsed_{prefix}")
    if memo is not None and memo[0] == sub:
        return memo[1]
    cfg, preset, warning = config_from_query(sub, decode=runner.decode_link_config)
    unused = ignored_params(sub)
    if unused:
        names = ", ".join(repr(f"{prefix}_{k}"[:40]) for k in unused[:8])
        warning = (warning + " " if warning else "") + f"Ignored link parameter(s) {names}."
    st.session_state[f"cmp.parsed_{prefix}"] = (sub, (cfg, preset, warning))
    return cfg, preset, warning


def _pick(label: str, key: str, default: str) -> SimConfig:
    options = [CURRENT, *list_presets()]
    if key not in st.session_state:
        st.session_state[key] = default if default in options else CURRENT
    choice = st.selectbox(label, options, key=key)
    return st.session_state[CFG_KEY] if choice == CURRENT else load_preset(choice)



ON_WORKLOAD_KEY = "cmp.on_workload_of"  # (A, B's own config, what `_on_workload_of` made of them)


def _on_workload_of(a: SimConfig, own: SimConfig) -> tuple[SimConfig | None, str | None]:
    """B's setup on A's workload, seed and objectives (or the error), validated: A's workload can break one of B's rules
    (a trace longer than B's max_model_len, say). Kept for the session while A and B are the same objects (the session's
    config and `load_preset`'s are): an uploaded trace as A was dumped and validated again on every rerun, seconds of the
    server's interpreter."""
    memo = st.session_state.get(ON_WORKLOAD_KEY)
    if memo is not None and memo[0] is a and memo[1] is own:
        return memo[2]
    try:
        out = (config_from_dict(own.model_dump(mode="python") | {"workload": a.workload.model_dump(mode="python"),
                                                                 "seed": a.seed, "slo": a.slo.model_dump(mode="python")},
                                "B on A's workload"), None)  # fmt: skip
    except PresetError as err:
        out = (None, str(err))
    st.session_state[ON_WORKLOAD_KEY] = (a, own, out)
    return out

def _at_steady_length(cfg: SimConfig, side: str) -> SimConfig:
    """`cfg` with as many requests as a steady state at its rate needs (`sweep.steady_run_length`, the Sweep page's
    rule; its other settings as they are, so a link of it reads as one changed count), or as it is when its arrivals
    follow no rate (a trace, a closed loop). Kept per side while the config object is the same: a rerun (a tab, a
    toggle) did not change it."""
    memo = st.session_state.get(f"cmp.steady_{side}")
    if memo is not None and memo[0] is cfg:
        return memo[1]
    out = cfg
    if cfg.workload.trace is None and rate_applies(cfg):
        n = steady_run_length(cfg, cfg.workload.arrival.rate_per_s)
        out = config_with(cfg, {"workload.num_requests": n}, "steady-state run length")
    st.session_state[f"cmp.steady_{side}"] = (cfg, out)
    return out


def missing_latencies_text(a, b) -> str | None:
    """Why a side's latency rows read n/a (`no_value_reason`: one-token outputs have no TPOT or ITL, a run that
    finished nothing no latency at all), one sentence per side; None when every latency has a value."""
    said = []
    for side, res in (("A", a), ("B", b)):
        s = res.summary
        gone = [m for m in ("TTFT", "TPOT", "ITL", "E2E") if np.isnan(getattr(s, f"{m.lower()}_p50_s"))]
        if gone:
            reasons = dict.fromkeys(no_value_reason(m, s.num_finished) for m in gone)
            said.append(f"{side}: {', '.join(gone)} n/a ({'; '.join(reasons)}).")
    return " ".join(said) or None


def unsettled_text(a, b, steady: bool = False) -> str | None:
    """Why a side's steady-state rows read "–": its run cannot say what its steady state is (the window's note, as
    Simulate gives it), one sentence per side, and the page's way to a longer run unless `steady` (it is taken);
    None when both settle."""
    said = [f"{side}'s steady-state rows: {res.summary.steady.note}" for side, res in (("A", a), ("B", b))
            if res.summary.steady is not None and res.summary.steady.note]  # fmt: skip
    if said and not steady:  # (the note said "Run about 1,000 requests or more" on a page with no such control)
        said.append(f"Switch on “{STEADY_LABEL}” above to run each side as long as the Sweep page does at its rate.")
    return " ".join(said) or None


STEADY_LABEL = "Steady-state run length"


def metrics_table(a, b) -> pd.DataFrame:
    """Headline metrics of A and B, then per-class latency when either run has classes. Text cells
    (units switch ms/s, counts are integers); four narrow columns so a phone need not scroll."""
    rows = []

    def add(label: str, va: float, vb: float, kind: str, field: str) -> None:
        ratio = vb / va if va not in (0, 0.0) and not np.isnan(va) and not np.isnan(vb) else np.nan
        cell = lambda v: "n/a" if kind == "s" and np.isnan(v) else fmt_value(v, kind)  # (why: under the table)  # noqa: E731
        rows.append({"metric": label, "A": cell(va), "B": cell(vb), "B / A": ratio_text(ratio, field)})

    for label, field, kind in METRIC_ROWS:
        add(label, float(getattr(a.summary, field)), float(getattr(b.summary, field)), kind, field)
        if label == "Goodput" and a.summary.steady is not None and b.summary.steady is not None:
            # A window with a note cannot be trusted (Simulate does not show its figures): "–", and why under the
            # table. The router preset at 2 replicas read "Goodput, steady state 44.25 req/s" where 6.7 req/s finished.
            settled = lambda res, field: math.nan if res.summary.steady.note else float(getattr(res.summary.steady, field))  # noqa: E731
            for s_label, s_field, s_kind in STEADY_ROWS:
                add(s_label, settled(a, s_field), settled(b, s_field), s_kind, s_field)
    ca, cb = class_metrics(a.config, a.requests), class_metrics(b.config, b.requests)
    by_b = {r["class"]: r for r in cb}
    for r in ca:
        if r["class"] in by_b:
            for label, field, kind in CLASS_ROWS:
                add(f"{label} · {r['class']}", r[field], by_b[r["class"]][field], kind, field)
    return pd.DataFrame(rows)


def main() -> None:
    workshop.page_title("Compare two setups")
    page = runner.PageBudget()  # the seed bands' new runs stop when this page view has spent the server's page budget
    params = read_query_params()
    link_a, _, warn_a = _side_from_link("a", params)
    link_b, _, warn_b = _side_from_link("b", params)
    problems = [f"Setup {s}: {w}" for s, w in (("A", warn_a), ("B", warn_b)) if w]
    bare = [k for k in params if is_config_param(k)]
    if bare:  # (?preset=engine-orca here became the session's settings, which neither side used, without a word)
        names = ", ".join(repr(k[:40]) for k in bare[:8]) + (" …" if len(bare) > 8 else "")
        problems.append(f"Compare reads a_… and b_… link parameters (a_preset=…, b_scheduler.max_num_seqs=…); the link's "
                        f"{names} set the session's settings, offered below as {CURRENT!r}.")  # fmt: skip
    show_link_notices(page_prefixes=("a_", "b_"), problems=tuple(problems))
    if (link_a is not None or link_b is not None) and "cmp.loaded" not in st.session_state:
        # (a side the link does not name opens on its default: ?b_preset=engine-orca alone was dropped without a word)
        for side, link in (("a", link_a), ("b", link_b)):
            if link is not None:
                st.session_state[f"cmp.link_{side}"], st.session_state[f"cmp.{side}"] = link, "(from link)"
                named = params.get(f"{side}_preset")  # (the preset its readable link is written against)
                st.session_state[f"cmp.base_{side}"] = named if named in list_presets() else None
    st.session_state["cmp.loaded"] = True
    c1, c2 = st.columns(2)
    with c1:
        a = _pick_or_link("A", "cmp.a", "chat-h100-llama8b-vllm-v0", "cmp.link_a")
    with c2:
        b = _pick_or_link("B", "cmp.b", "chat-h100-llama8b", "cmp.link_b")
    same = st.toggle("Run B on A's workload and seed", value=True, key="cmp.same_workload",
                     help="Keeps the requests identical so only the setup differs.")  # fmt: skip
    steady = st.toggle(STEADY_LABEL, key="cmp.steady",
                       help="Run each side long enough for its steady-state rows to settle, at its own rate: the Sweep "
                       "page's rule (a run 4× longer moves capacity by < 5 %). The link keeps the request count.")  # fmt: skip
    if steady:
        a, b = _at_steady_length(a, "a"), _at_steady_length(b, "b")
    own = b  # (B as chosen: its link; with the toggle on it runs on A's workload, which the toggle says, not the link)
    if same:
        b, error = _on_workload_of(a, own)
        if error:
            st.error(plain(f"{error}. Switch off “Run B on A's workload and seed” to run B on its own workload."),
                     icon=":material/error:")  # fmt: skip
            return
        if (own.workload, own.seed, own.slo) != (a.workload, a.seed, a.slo):
            st.caption(f"B's own workload ({plain(own.workload.name)}, {counted(own.workload.num_requests, 'request')}, seed {own.seed}) "
                       "and objectives are replaced by A's. Switch this off to run B on its own.")  # fmt: skip
    # readable links (?b_preset=…&b_scheduler.preemption=swap) against the preset each side was opened from: a modified
    # side had been written as an opaque b_cfg=… a room could not read
    write_query_params(compare_params(link_query(a, preset_matching(a), _base_of("a")),
                                      link_query(own, preset_matching(own), _base_of("b"))))  # fmt: skip

    with st.spinner("Simulating A and B…"):
        out_a, out_b = runner.run(a), runner.run(b)
    for name, out in (("A", out_a), ("B", out_b)):
        if out.error:
            st.error(f"{name}: {plain(sidebar_words(out.error))}")
    if out_a.error or out_b.error:
        return
    ra, rb = out_a.result, out_b.result
    st.markdown(f"**A** · {plain(side_label(a))} — **B** · {plain(side_label(b))}")  # a linked name is text
    # (kept per pair by B's key: a config's settings are too large to keep with an uploaded trace; the line is small)
    if (differ := derived(a, ("differences", config_key(b)), lambda c: setup_differences(c, b))) is not None:
        st.caption(plain(differ))
    else:  # (a link whose two sides both fell back to the default compared a setup with itself, every ratio 1.00x)
        st.info("A and B are the same setup, so every ratio below is 1.00×: change a setting of one side (below, or "
                "a link's a_… and b_… values).", icon=":material/info:")  # fmt: skip
    if (note := calibration_difference(a, b)) is not None:  # (an engine preset brings its family's measured overheads)
        st.info(plain(note), icon=":material/info:")
    # (static and wrapping: no sideways scroll on a phone; st.table renders Markdown in its cells, and a row names a
    # request class, the link's or file's text: escaped)
    st.table(metrics_table(ra, rb).set_index("metric").rename(index=plain))
    if said := missing_latencies_text(ra, rb):  # (one-token outputs: the TPOT and ITL rows read "–" without a why)
        st.caption(plain(said))
    if said := unsettled_text(ra, rb, steady):
        st.caption(plain(said))
    # (a ratio alone does not say which side did better: for latencies lower is, for throughput higher is)
    st.caption("B / A is B's value over A's, and whether B is better or worse. Below 1× B is lower: better for the latencies "
               "(TTFT, TPOT, ITL, E2E) and pre-emptions, worse for throughput, goodput, SLO attainment and finished requests; "
               "GPU busy and mean batch are neither. Every row but the two steady-state ones is over the whole run: "
               "output throughput and goodput over each run's makespan, its drain included, and the latencies over "
               "every request (Plan's latencies, and Sweep's where a point keeps up, are the steady window's); the "
               "steady-state rows leave out warm-up and drain, which is where two setups that both keep up with the "
               "load differ.")  # fmt: skip
    whole = st.toggle("Whole run in the Gantts", key="cmp.whole", help="They open on the same readable window around "
                      "A's busiest moment, so single ticks are visible.")  # fmt: skip
    _seed_table(a, b, page)
    end = max(float(ra.timeline.t_end_s[-1]), float(rb.timeline.t_end_s[-1]))
    window = None if whole else timeline.opening_window(ra)
    g1, g2 = st.container(key="cmp_gantts").columns(2)  # side by side; stacked on a narrow screen (app CSS)
    # Each side's name above its chart, where it wraps: as the chart's title (Plotly does not wrap one) a preset's name
    # was cut on a phone ("A · cluster-dynamo-llama70b-fp8-8xh100-colocatec")
    with g1:
        st.markdown(f"**A** · {plain(side_label(a))}")
        workshop.show_chart(cluster_timeline.gantt_kv_figure(ra, (0, end), window=window), key="cmp.gantt_a")
    with g2:
        st.markdown(f"**B** · {plain(side_label(b))}")
        workshop.show_chart(cluster_timeline.gantt_kv_figure(rb, (0, end), window=window), key="cmp.gantt_b")
    box = st.container(key="cmp_cdfs")
    for i, metric in enumerate(charts.METRICS):
        if i % 2 == 0:  # a row of two: stacked on a narrow screen they keep the metrics' order
            cols = box.columns(2)
        with cols[i % 2]:
            workshop.show_chart(charts.cdf_overlay_figure({"A": ra, "B": rb}, metric), key=f"cmp.cdf.{metric.key}")


def _seed_table(a: SimConfig, b: SimConfig, page: runner.PageBudget) -> None:
    """Each metric as min–max over k seeds for both setups (issue 14: is the difference bigger than the noise?)."""
    from app.components.pool_backend import PointFailed
    from sim_core.backend import PointCache, SearchCancelled, default_cache_dir
    from sim_core.sweep import seed_bands

    k = int(st.number_input("Repeat over seeds", 1, 5, 1, key="cmp.seeds",
                            help="Run A and B with seeds s, s+1, …: each metric becomes a min–max band."))  # fmt: skip
    if k == 1:
        return
    fields = [f for _, f, _ in METRIC_ROWS]
    try:
        with st.spinner(f"Simulating A and B over {k} seeds…"), runner.points_backend() as backend:
            bands = [seed_bands(c, fields, k, backend, PointCache(default_cache_dir()), budget=page.run_budget,
                                cancelled=page.exhausted) for c in (a, b)]  # each seed's run under the server's budget
    except PresetError as err:
        st.error(plain(err))
        return
    except PointFailed as err:  # (a run's process killed by its backstop; finished runs are kept)
        st.error(plain(f"The seed bands stopped: {err}. Finished runs are kept."))
        return
    except SearchCancelled as err:
        st.warning(f"The seed bands stopped ({err}): this page may spend {page.max_wall_s:g} s of server time on new "
                   "simulations. Finished runs are kept: reload the page to continue, or repeat over fewer seeds or "
                   "requests.", icon=":material/timer:")  # fmt: skip
        return
    fmt = lambda lo, hi, kind: f"{fmt_value(lo, kind)} – {fmt_value(hi, kind)}"  # noqa: E731
    st.dataframe([{"metric": label, f"A (min – max, {k} seeds)": fmt(bands[0][f][0], bands[0][f][2], kind),
                   f"B (min – max, {k} seeds)": fmt(bands[1][f][0], bands[1][f][2], kind),
                   "bands overlap": "yes" if bands[0][f][0] <= bands[1][f][2] and bands[1][f][0] <= bands[0][f][2] else "no"}
                  for label, f, kind in METRIC_ROWS], hide_index=True, key="cmp.seed_table")  # fmt: skip


def _base_of(side: str) -> str | None:
    """The preset side "a" or "b" was opened from: its link's, the session's (current settings) or the one picked."""
    choice = st.session_state.get(f"cmp.{side}")
    if choice == "(from link)":
        return st.session_state.get(f"cmp.base_{side}")
    if choice == CURRENT:
        return st.session_state.get(BASE_KEY)
    return choice


def _pick_or_link(label: str, key: str, default: str, link_key: str) -> SimConfig:
    if st.session_state.get(key) == "(from link)" and st.session_state.get(link_key) is not None:
        cfg = st.session_state[link_key]
        # (the scheduler as the Simulate header and the A-B line name it: "custom (from vLLM V0)" when its knobs differ
        # from the engine preset's; the bare name said "vLLM V0" there)
        st.markdown(f"**Setup {label}** (from the link): {plain(cfg.name)} · {plain(scheduler_label(cfg))} · "
                    f"{plain(cfg.model.name)} on {plain(describe_where(cfg))}")  # a deployment: its replicas or pools  # fmt: skip
        if st.button(f"Choose {label} from presets instead", key=key + ".reset"):
            st.session_state.pop(key)
            st.rerun()
        return st.session_state[link_key]
    return _pick(f"Setup {label}", key, default)


main()
