"""Plan: the cheapest deployments (GPU × TP × replicas × engine × knobs) that meet the SLOs at a
target rate, with $/hour, $ per million output tokens, goodput per dollar and headroom; a Pareto
chart of cost against latency; each row opens its replica in Simulate."""

from __future__ import annotations

import math
from typing import get_args
from urllib.parse import urlencode

import plotly.graph_objects as go
import streamlit as st
from pydantic import ValidationError

from app.components import charts, tables, workshop
from app.components.pool_backend import PointFailed
from app.components.runner import PageBudget, points_backend, session_owner
from app.components.text import plain
from app.components.units import MISSING
from app.state import CFG_KEY, compare_query, config_to_query, show_link_notices
from sim_core import PresetError, SimConfig, list_presets
from sim_core.backend import PointCache, SearchCancelled, default_cache_dir
from sim_core.budget import is_budget_stop
from sim_core.config import (STATE_ROUTERS, Router, SLOConfig, allowed_range, field_bounds, format_validation_error,
                             tp_degrees_allowed, tp_rule_text)  # fmt: skip
from sim_core.planner import (DEFAULT_ENGINES, NOT_BISECTED, Plan, PlanSpec, SetupCancelled, default_prices, default_router, default_state_refresh_s,
                             calibration_note, mean_lengths, num_candidates, pareto_front, plan, router_note)  # fmt: skip
from sim_core.presets import config_with, read_preset_data
from sim_core.sweep import DISTSERVE_ATTAINMENT, CapacityObjective
from sim_core.words import usd_text

ATTAINMENT_TEXT = f"{DISTSERVE_ATTAINMENT * 100:g} %"  # (CapacityObjective's attainment rule, DistServe's share)
RULES = {"P50": ("percentile", 50), "P90": ("percentile", 90), "P99": ("percentile", 99),
         f"≥ {ATTAINMENT_TEXT} meet both": ("attainment", 99)}  # fmt: skip
_DEFAULT_OBJECTIVE = CapacityObjective()
DEFAULT_RULE = next(k for k, v in RULES.items() if v == (_DEFAULT_OBJECTIVE.rule, _DEFAULT_OBJECTIVE.percentile))  # the planner's
KNOB_DEFAULT = "engine default"
CLI_PLAN = "`python -m sim_core plan`"  # (Markdown: a command, never inside plain())


def _objective(rule: str) -> CapacityObjective:
    kind, pct = RULES[rule]
    return CapacityObjective(rule=kind, percentile=pct)


def _prices_editor(gpus: list[str]) -> dict[str, float]:
    defaults = default_prices()
    rows = [{"GPU": g, "$ per GPU-hour": defaults[g].usd_per_gpu_hour if g in defaults else None,
             "source": f"{defaults[g].source} ({defaults[g].date})" if g in defaults else "no default: enter a price"}
            for g in gpus]  # fmt: skip
    edited = st.data_editor(rows, key="plan.prices", hide_index=True, disabled=["GPU", "source"], column_config={
        "$ per GPU-hour": st.column_config.NumberColumn(min_value=0.01, max_value=1000.0, format="$%.2f"),
    })  # fmt: skip
    return {r["GPU"]: float(r["$ per GPU-hour"]) for r in edited if r["$ per GPU-hour"] is not None}


# The degrees the planner searches by default (one node's); the page offers those the model's heads split over.
PLAN_TP_DEGREES: tuple[int, ...] = PlanSpec.model_fields["tp_degrees"].default


def plan_tp_degrees(cfg: SimConfig) -> list[int]:
    """The TP degrees Plan offers for `cfg`'s model: the planner's default degrees that its attention heads split
    evenly over (tp_degrees_allowed, as the sidebar's GPU choices): Qwen2.5-7B's 28 heads were offered TP 8, picked by
    default and pruned after the search ("TP degree the model's heads do not split over")."""
    allowed = tp_degrees_allowed(cfg.model.num_heads, cfg.model.num_kv_heads)
    return [t for t in PLAN_TP_DEGREES if t in allowed]


# The target rate the page opens at, in multiples of the current settings' arrival rate (a deployment's load)
PLAN_RATE_MULTIPLE = 4


def _number_box(col, label: str, lo: float, hi: float, value: float, key: str, help: str | None = None) -> float:
    """A number box over its field's range `lo`-`hi`, opened on `value` held within it: a linked config may hold any
    value its model allows (a rate of 1e-6 or 100,000 req/s, a 1 ms TTFT SLO), and a default past the range (4x a rate
    of 100,000) raised StreamlitValueAboveMaxError, a traceback for the visitor. Every value is written in significant
    digits (the default two decimals showed 4e-06 req/s as 0.00; chosen by the opening value, a rate typed as 0.001
    still read 0.00 above the plan made for it)."""
    lo, hi = float(lo), float(hi)  # (a field's bounds may be an int and a float: the box takes one type)
    value = min(max(value, lo), hi)
    return col.number_input(label, lo, hi, value, key=key, format="%.6g", help=help)


def tpot_range_ms() -> str:
    """The TPOT SLO's allowed range (SLOConfig.tpot_s's, in s) in the Plan box's unit, ms."""
    import re

    ms = lambda m: f"{float(m.group()) * 1e3:,g}"  # noqa: E731
    return re.sub(r"\d+(\.\d+)?(e-?\d+)?", ms, allowed_range(("tpot_s",), SLOConfig)) + " ms"


def _knob_values(label: str, options: list[int], key: str) -> tuple[int | None, ...]:
    chosen = st.multiselect(label, [KNOB_DEFAULT, *options], default=[KNOB_DEFAULT], key=key)
    return tuple(None if c == KNOB_DEFAULT else int(c) for c in chosen) or (None,)


def _simulate_link(cfg: SimConfig) -> str:
    return "./?" + urlencode(config_to_query(cfg, None))


def _compare_link(a: SimConfig, b: SimConfig) -> str | None:
    """Compare with `a` and `b` as its sides, or None (too long for a link): a plan's runner-up was out of reach of
    Compare, whose lists hold presets and the session's settings."""
    query = compare_query(a, b)
    return None if query is None else "./compare?" + urlencode(query)


def pareto_figure(result: Plan) -> go.Figure:
    p = result.spec.objective.percentile
    fig = go.Figure()
    # The misses drawn first: a miss at a front point's price and TTFT (missing on TPOT) covered its blue dot, and the
    # front's ring read as around a miss. The legend keeps "meets" first.
    for ok, color, name in ((False, "#BDC1C6", "misses them (TTFT or TPOT)"), (True, "#1A73E8", "meets the SLOs")):
        rows = [r for r in result.points() if r.meets == ok]
        fig.add_trace(go.Scatter(x=[r.usd_per_hour for r in rows], y=[r.latency_s("ttft", p) * 1e3 for r in rows],
                                 mode="markers", name=name, marker=dict(color=color, size=9), legendrank=1000 + (not ok),
                                 text=[r.label for r in rows], customdata=[r.latency_s("tpot", p) * 1e3 for r in rows],
                                 # (TPOT too: a grey point well under the TTFT objective misses on TPOT, which the
                                 # chart does not draw)
                                 hovertemplate=f"%{{text}}<br>$%{{x:,.2f}}/h · TTFT P{p} %{{y:,.0f}} ms · TPOT P{p} "
                                 "%{customdata:,.1f} ms<extra></extra>"))  # fmt: skip
    front = pareto_front(result.points(), p)
    fig.add_trace(go.Scatter(x=[r.usd_per_hour for r in front], y=[r.latency_s("ttft", p) * 1e3 for r in front],
                             mode="lines+markers", name="Pareto front", line=dict(color="#E8710A", shape="hv"), legendrank=1002,
                             marker=dict(symbol="circle-open", size=15, line=dict(width=2, color="#E8710A")),
                             hoverinfo="skip"))  # rings: a front of one or two configs has no line to see  # fmt: skip
    latency_ms = [y for tr in fig.data for y in tr.y]
    if result.points():  # the TTFT objective as a line (a review: grey "misses" sat far under it, missing on TPOT)
        slo_ms = result.points()[0].config.slo.ttft_s * 1e3
        fig.add_hline(y=slo_ms, line=dict(color="#5F6368", dash="dash", width=1))
        # (placed by hand: on a log axis an annotation's y is the value's log10, which add_hline's own label does not
        # take, and it drew off the chart)
        # (at the end of the line with fewest points under the label: at the left end it covered a config, a review)
        end, side = charts.line_label_place([(r.usd_per_hour, r.latency_s("ttft", p) * 1e3) for r in result.points()],
                                            slo_ms, ((0, "bottom"), (1, "bottom"), (0, "top"), (1, "top")))  # fmt: skip
        fig.add_annotation(x=end, xref="paper", xanchor=("left", "right")[end], y=math.log10(slo_ms), yanchor=side,
                           showarrow=False, text=f"TTFT SLO {slo_ms:,.0f} ms", font=dict(size=11, color="#5F6368"),
                           bgcolor="rgba(255,255,255,0.7)")  # fmt: skip
        latency_ms.append(slo_ms)  # (the axis's range holds the line)
    fig.update_layout(height=380, margin=dict(l=10, r=10, t=30, b=40), xaxis_title="$ per hour (deployment)",
                      yaxis_title=f"TTFT P{p} at the target rate (ms, log)", legend=dict(orientation="h", y=-0.2))  # fmt: skip
    fig.update_yaxes(**charts.log_ladder_axis(latency_ms))
    fig.update_xaxes(tickprefix="$")  # (bare "5.5 6 6.5" ticks, a review)
    return charts.readable_numbers(fig)


# The columns the table opens on: which deployment, what it costs, how much traffic it has to spare, and the link to it.
# At 390 px (a phone) all eleven columns scrolled sideways (927 px in a 356-px box) with the configuration, the link,
# GPUs and $/hour in view; these four fit, the link as an icon (the width of the browser is not known here). "All
# columns" brings the rest back, the configuration pinned while the numbers scroll; the data is the same either way.
# (widths in px: 350 of a phone's ~356; a longer configuration, with knobs or a P:D split, ends in "…" there and is
# written in full in the sentence above the table for the cheapest and in All columns.)
COMPACT_PLAN_COLUMNS = {"configuration": 170, "$/hour": 58, "headroom": 74, "open": 48}


def cheapest_sentence(result: Plan) -> str:
    """The answer in a sentence that wraps (Markdown): the cheapest configuration meeting the SLOs, written in full
    (the table's compact view may end a long one in "…"), its cost and headroom."""
    t = result.table()
    best = t[0]
    ties = sum(r["usd_per_hour"] == best["usd_per_hour"] for r in t) - 1
    headroom = "n/a (see the note under the table)" if best["headroom"] is None else f"{best['headroom'] * 100:+.0f}%"
    tail = f" ({ties:,} more at the same price below)" if ties else ""
    if ties and unbisected(result):  # (rows at one price go by headroom: without it, the first named is no choice)
        tail = (f" ({ties:,} more at the same price below; which of them has the most headroom is not known until the "
                "headroom bisection runs)")
    lead = "Cheapest meeting the SLOs"
    if result.stopped is not None and best["usd_per_hour"] >= result.stopped.frontier_usd_per_hour:
        # (the page's budget stopped a search below this price: a cheaper candidate may not have been tried; the
        # headline named a $108/h answer in bold while the split search had settled only up to $9/h)
        lead = "Cheapest found so far, not final (the search stopped before it tried every cheaper candidate: see below)"
    return f"**{lead}:** " + plain(f"{best['config']}, ${best['usd_per_hour']:,.2f} per hour, "
                                                     f"{usd_text(best['usd_per_million_output_tokens'])} per million output "
                                                     f"tokens, headroom {headroom}{tail}.")  # fmt: skip


def unbisected(result: Plan) -> bool:
    """Whether the page's budget stopped the headroom bisection: the rows meet the SLOs, their capacities are unknown."""
    return any(r.capacity_note == NOT_BISECTED for r in result.rows)


def unbisected_text(page_s: float) -> str:
    """What a plan whose headroom bisection the page's budget stopped has settled, and how to go on (plain text)."""
    return (f"This page's budget ({page_s:g} s of server time) ran out before the headroom bisection: every row meets the "
            "SLOs at the target rate, but its capacity and headroom are not known, so among rows at one price the order "
            "(by headroom) is not settled. Press Plan again to go on from there (finished points are kept for this "
            "session), or run python -m sim_core plan, which has no such limit.")


def stopped_text(result: Plan, page_s: float) -> str:
    """What a search the page's budget stopped part-way settled, what it did not, and how to go on (plain text)."""
    st_ = result.stopped
    settled = (f" Rows under ${st_.frontier_usd_per_hour:,.2f}/h are final; a dearer one may yet be beaten by a split not "
               "tried." if result.rows and st_.frontier_usd_per_hour > 0 else "")  # fmt: skip
    return (f"This page's budget ({page_s:g} s of server time) ran out: {st_.text()}.{settled} Press Plan again to go on "
            "from there (finished and stopped candidates are kept for this session), narrow the search, or run "
            "python -m sim_core plan --pd, which has no such limit.")  # fmt: skip


@st.fragment
def _results_table(result: Plan) -> None:
    """A fragment: the "All columns" toggle redraws the table of the same plan (a rerun of the page would need the
    Plan button pressed again)."""
    p = result.spec.objective.percentile
    all_columns = tables.all_columns_toggle("plan.all_columns", "$ per million output tokens, requests meeting the SLOs "
                                            "per $, GPUs, TTFT and TPOT at the target rate, capacity and robustness")  # fmt: skip
    rows = []
    for row, t in zip(result.rows, result.table()):
        rows.append({"configuration": t["config"], "open": _simulate_link(row.config), "GPUs": t["gpus"],
                     "$/hour": t["usd_per_hour"], "$/M out tok": t["usd_per_million_output_tokens"],
                     "good req/$": t["good_requests_per_usd"], f"TTFT P{p} (ms)": t[f"ttft_p{p}_s"] * 1e3,
                     f"TPOT P{p} (ms)": t[f"tpot_p{p}_s"] * 1e3, "capacity": t["capacity_per_s"],
                     "headroom": None if t["headroom"] is None else t["headroom"] * 100,
                     "robust": {True: "yes", False: "no", None: MISSING}[t["robust_to_calibration_error"]]})  # fmt: skip
    # Short headers, the long names as help. The link beside the configuration it opens: last, it sat past the right
    # edge of a 1,400-px-wide page (eleven columns need ~980 px, the page has ~920) and of any phone, behind a
    # horizontal scroll nothing pointed to. The configuration stays pinned while the numbers scroll.
    num = st.column_config.NumberColumn
    tables.dataframe(rows, key="plan.table", placeholder=MISSING,  # (headroom: None when unknown)
                     all_columns=all_columns, compact_px=COMPACT_PLAN_COLUMNS, column_config={
        "configuration": st.column_config.TextColumn(),
        "open": st.column_config.LinkColumn("open", display_text="Simulate ↗" if all_columns else ":material/open_in_new:",
                                            help="The deployment, in Simulate"),
        "$/hour": num(format="$%.2f", help="USD per hour for the deployment's GPUs"),
        "$/M out tok": num(format="$%,.3f", help="USD per million output tokens at the target rate. Every row serves the "
                           "same traffic, so its output rate is about the same and this follows $/hour"),
        "good req/$": num(format="%,.0f", help="Requests meeting both SLOs per USD (goodput × 3600 / $ per hour). At one "
                          "target rate, rows that meet the SLOs have about the same goodput, so this follows $/hour too"),
        f"TTFT P{p} (ms)": num(format="%,.0f", help="At the target rate over the steady-state window, as the SLOs are "
                               "judged (the caption under the chart); Simulate's headline gives the whole run's"),
        f"TPOT P{p} (ms)": num(format="%.1f", help="At the target rate over the steady-state window, as the SLOs are judged"),
        "capacity": num(format="%.1f req/s", help="The highest rate found to meet the SLOs: a lower bound (the caption "
                        "under the chart)"),
        "headroom": num(format="%+.0f%%", help="capacity / target − 1"),
        "robust": st.column_config.TextColumn(help="Headroom at least the cost model's median held-out error"),
    })  # fmt: skip


def _show(result: Plan, elapsed_s: float, stopped: int = 0, base: SimConfig | None = None) -> None:
    """The plan's answer for the config `base`; `stopped`: candidates the server's budget per run stopped or refused
    (then an empty answer is this server's limit, not the search space's)."""
    spec = result.spec
    band = result.band.text()  # ("cost-model error on …": it starts a sentence here)
    st.caption(f"{result.num_candidates:,} candidate configurations, {result.runs_text()} in {elapsed_s:,.1f} s; "
               f"skipped: {plain(result.pruned_text())}. " + band[:1].upper() + band[1:] + ".")  # fmt: skip
    if not result.rows:
        if stopped:
            st.warning(f"No configuration met the SLOs here, and {stopped:,} candidate(s) were stopped or refused by this "
                       f"server's budget per run (above): {CLI_PLAN} searches them without that limit.")  # fmt: skip
        else:
            said = result.no_answer_text()
            st.warning(plain(said[:1].upper() + said[1:] + "."))
        return
    st.markdown(cheapest_sentence(result))
    _results_table(result)
    if len(result.rows) >= 2:
        if (link := _compare_link(result.rows[0].config, result.rows[1].config)) is not None:
            st.link_button("Compare the first two rows", link, icon=":material/compare_arrows:",
                           help="Opens Compare in a new tab with rows 1 and 2 as its sides")
        else:
            st.caption("The first two rows are too long for a Compare link (their trace's requests): open each in "
                       "Simulate with its row's link.")
    fragile = [t for t in result.table() if t["robust_to_calibration_error"] is False]
    if fragile:  # (only "All columns" showed it: "1× h100-sxm TP2, headroom +0 %" sat beside +31 % rows at one price)
        named = "; ".join(f"{t['config']} ({t['headroom'] * 100:+.0f}%)" for t in fragile)
        st.caption(plain(f"Less headroom than the cost model's median error, so a modelling error that size could make "
                         f"it miss the SLOs: {named}. Prefer a row with more headroom, or a larger deployment."))
    for rows, note in result.row_notes():  # (the table's "–" said nothing of why)
        st.caption(plain(f"Note ({rows}): {note}."))
    workshop.show_chart(pareto_figure(result), key="plan.pareto")  # (presenter mode scales its text, as every chart's)
    st.caption("Cost per million output tokens = $/hour × 10⁶ / (output tokens/s × 3600) at the target rate; headroom = "
               f"capacity / target − 1; {spec.capacity_text()}; 'robust' = headroom at least the cost model's "
               f"median error. Candidates: {spec.describe_evaluation(base)}; the chart shows each configuration once, by "
               "its last run.")  # fmt: skip


def main() -> None:
    workshop.page_title("Plan a deployment")
    show_link_notices()
    cfg: SimConfig = st.session_state[CFG_KEY]
    prompt, output = mean_lengths(cfg)  # (the $ per token rests on them, and on the weights' precision: said)
    st.caption(f"Traffic and model: the current settings ({plain(cfg.workload.name)} traffic, prompts of "
               f"{prompt:,.0f} and outputs of {output:,.0f} tokens on average; {plain(cfg.model.name)}, "
               f"{cfg.model.weight_dtype.upper()} weights); "
               "change them in Simulate (workload preset, trace upload or classes). Each engine is taken whole, as "
               "choosing it in Simulate does: its scheduler, and its memory rule and calibration profile where its preset "
               "names them.")  # fmt: skip
    c1, c2, c3, c4 = st.columns(4)
    # (each box's range is its field's: the plan's target rate, the config's SLOs; a value the SLOs refuse, a 0 s TTFT,
    # is named below)
    # (it opens at a multiple of the current rate, a deployment's load: 32 for the default 8 req/s, with no word of why)
    current = float(cfg.workload.arrival.rate_per_s)
    rate = _number_box(c1, "Target rate (req/s)", *field_bounds(("target_rate_per_s",), PlanSpec),
                       current * PLAN_RATE_MULTIPLE, "plan.rate",
                       help=f"The whole deployment's rate. It opens at {PLAN_RATE_MULTIPLE}× the current settings' "
                       f"{current:g} req/s, a load for several replicas.")  # fmt: skip
    ttft = _number_box(c2, "TTFT SLO (s)", *field_bounds(("ttft_s",), SLOConfig), float(cfg.slo.ttft_s), "plan.ttft")
    tpot_ms = _number_box(c3, "TPOT SLO (ms)", *(b * 1e3 for b in field_bounds(("tpot_s",), SLOConfig)),
                          float(cfg.slo.tpot_s * 1e3), "plan.tpot")  # fmt: skip
    rule = c4.selectbox("Percentile", list(RULES), index=list(RULES).index(DEFAULT_RULE), key="plan.rule",
                        help="Capacity holds the chosen percentile of TTFT and of TPOT to the SLOs over the steady-state "
                        f"window, or (DistServe) requires {ATTAINMENT_TEXT} of requests to meet both.")  # fmt: skip
    hardware = list(list_presets("hardware"))
    priced = [g for g in hardware if g in default_prices()]
    with st.expander("Search space and prices", expanded=False):
        gpus = st.multiselect("GPUs", hardware, default=priced, key="plan.gpus")
        prices = _prices_editor(gpus)
        d1, d2 = st.columns(2)
        tps = d1.multiselect("Tensor-parallel degrees", tp_choices := plan_tp_degrees(cfg), default=tp_choices, key="plan.tp",
                             help=plain(f"{tp_rule_text(cfg.model)}. Offered: which of {', '.join(map(str, PLAN_TP_DEGREES[:-1]))} "
                                        f"and {PLAN_TP_DEGREES[-1]} GPUs (one node) they split over; ") +
                                  "`python -m sim_core plan --tp` searches any degree.")  # fmt: skip
        max_replicas = d2.number_input("Most replicas", *field_bounds(("max_replicas",), PlanSpec),
                                       PlanSpec.model_fields["max_replicas"].default, key="plan.replicas")  # fmt: skip
        f1, f2 = st.columns(2)
        pd_split = f1.checkbox("Also search P:D splits (xPyD)", False, key="plan.pd",
                               help="x prefill + y decode instances (x + y ≤ most replicas), per-pool TP from the "
                               "degrees above, priced by total GPUs. Slower: splits have no saturation bound.")  # fmt: skip
        routers = get_args(Router)  # (it opened on round robin whatever the config's deployment routed by)
        router = f2.selectbox("Router", routers, index=routers.index(default_router(cfg)), key="plan.router")
        refresh_s = f2.number_input("Router state refresh (s)", *field_bounds(("state_refresh_s",), PlanSpec),
                                    default_state_refresh_s(cfg), step=0.05, format="%.3f", key="plan.refresh",
                                    help=PlanSpec.model_fields["state_refresh_s"].description,
                                    disabled=router not in STATE_ROUTERS)  # (the config's own: it was always 0.05 s)
        engines = st.multiselect("Engines", list(list_presets("engines")), default=list(DEFAULT_ENGINES), key="plan.engines",
                                 format_func=lambda e: read_preset_data("engines", e)["scheduler"]["name"])  # fmt: skip
        e1, e2 = st.columns(2)
        with e1:
            budgets = _knob_values("Token budgets", [512, 2048, 8192], "plan.budgets")
        with e2:
            batches = _knob_values("Max batch", [64, 128, 256], "plan.batches")
    try:  # (validated on their own first, to name the boxes: config_with below would call them slo.ttft_s, slo.tpot_s)
        slo = SLOConfig.model_validate({"ttft_s": float(ttft), "tpot_s": tpot_ms / 1e3})
    except ValidationError as err:
        said = [line for line in format_validation_error(err, "SLOs", SLOConfig, names={"ttft_s": "TTFT SLO (s)"}).splitlines()
                if not line.lstrip().startswith("tpot_s")]  # fmt: skip
        if any(e["loc"] == ("tpot_s",) for e in err.errors()):  # (in the box's unit: it read "(s: the box's ms / 1000) =
            said.append(f"  TPOT SLO (ms) = {tpot_ms:g}: out of range; allowed: {tpot_range_ms()}")  # 0.0 ... <= 60")
        st.error(plain("\n".join(said)))
        return
    try:  # (the SLOs with the rest of the config: a check across sections is named too)
        slo_cfg = config_with(cfg, {"slo": slo}, "SLOs")
    except PresetError as err:
        st.error(plain(err))
        return
    missing = [g for g in gpus if g not in prices]
    if missing:
        st.error(f"Enter a price per GPU-hour for {', '.join(missing)} (or remove it from the GPUs).")
        return
    if not (gpus and tps and engines):
        st.info("Pick at least one GPU, tensor-parallel degree and engine.")
        return
    try:
        spec = PlanSpec(target_rate_per_s=rate, objective=_objective(rule), gpus=tuple(gpus), tp_degrees=tuple(tps),
                        max_replicas=int(max_replicas), engines=tuple(engines), token_budgets=budgets,
                        max_batches=batches, prices_usd_per_gpu_hour=prices, disaggregated=pd_split,
                        router=router, state_refresh_s=float(refresh_s))  # fmt: skip
    except ValueError as err:
        st.error(plain(err))
        return
    said = router_note(cfg, spec)  # (the config's own router: used, replaced by the box's, or not used, and why)
    if (calibrated := calibration_note(cfg, spec)) is not None:  # (a calibration changed in Simulate: not used, said)
        st.caption(plain(f"Calibration: {calibrated}."))
    # (the space outside `plain`, which strips a leading one: "…window.Router: …")
    st.caption(f"{num_candidates(spec):,} candidate configurations ({spec.describe_evaluation(slo_cfg)}). "
               f"Objective: {spec.objective.describe(slo_cfg)}." + (" " + plain(f"Router: {said}.") if said else ""))  # fmt: skip
    if not st.button("Plan", type="primary", key="plan.go"):
        return
    import time

    bar = st.progress(0.0, text="Planning…")
    backend = points_backend()
    t0 = time.monotonic()
    page = PageBudget()  # the server's time per page view (app/server.toml): no click may hold it longer
    reached: list = []  # the search's progress reports: where a stopped search got to (the bar goes with the error)
    try:
        # (the candidates this server's budget stopped are kept for this session: pressing Plan again goes on past them)
        cache = PointCache(default_cache_dir(), stops_scope=f"session {session_owner()}")
        result = plan(slo_cfg, spec, backend=backend, cache=cache,
                      on_progress=lambda p: (bar.progress(p.fraction, text=p.text()), reached.append(p)),  # 100 % once the last phase is done
                      cancelled=lambda: page.spent_s > page.max_wall_s, budget=page.run_budget)  # each run under the server's budget  # fmt: skip
    except SetupCancelled as err:  # pressing Plan again would meet the same setup: say to narrow the space
        # (the command outside plain(), which wrote its backticks as typed)
        st.error(plain(f"This search space is too large to set up within this server's budget per page view "
                       f"({page.max_wall_s:g} s): {err}. Narrow it (fewer GPUs, TP degrees, engines or knob values, fewer "
                       "replicas, or no P:D splits), or run ") + f"{CLI_PLAN}, which has no such limit.",
                 icon=":material/timer:")  # fmt: skip
        return
    except SearchCancelled:
        # (how far it got: an impossible SLO took ~8 presses, each saying only "press Plan again", its progress gone
        # with the bar)
        got = f" It had reached {reached[-1].text()}." if reached else ""
        st.error(plain(f"The search stopped after {page.spent_s:.0f} s, this server's budget per page view "
                       f"({page.max_wall_s:g} s).{got} Finished points are cached: press Plan again to continue, narrow the "
                       "search (fewer GPUs, engines or knob values), or run ") + f"{CLI_PLAN}, which has no such limit.",
                 icon=":material/timer:")  # fmt: skip
        return
    except PresetError as err:
        st.error(plain(err))
        return
    except PointFailed as err:  # (a point's process killed by its backstop; finished points are cached)
        st.error(plain(f"The search stopped: {err}. Finished points are cached: press Plan again to continue."))
        return
    finally:
        backend.close()
        bar.empty()
    # candidates whose run (or whose family's saturation probe) the server's budget stopped, or refused to start
    stopped = sum(is_budget_stop(r.summary.stopped_reason) for r in result.evaluated)
    stopped += sum(n for why, n in result.pruned.items() if is_budget_stop(why))
    # The budget's warnings above the answer they qualify: under the chart, a screen or two below the table, a room of
    # students pressing Plan at once saw every headroom "–" and the rows tied at one price in another order, and no
    # word of why (a review with two sessions at once)
    if result.stopped:
        st.warning(plain(stopped_text(result, page.max_wall_s)), icon=":material/timer:")
    elif unbisected(result):  # (only a grey note under the table said so, and the first press named an arbitrary row)
        st.warning(plain(unbisected_text(page.max_wall_s)), icon=":material/timer:")
    if stopped:
        st.warning(f"{stopped:,} candidate configuration(s) were stopped by this server's budget per run "
                   f"({page.run_budget.describe()}) and count as missing the SLOs: a larger deployment may look needed. "
                   f"{CLI_PLAN} has no such limit.", icon=":material/timer:")  # fmt: skip
    _show(result, time.monotonic() - t0, stopped, slo_cfg)


main()
