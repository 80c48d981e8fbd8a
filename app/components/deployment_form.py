"""Sidebar editor for the optional `deployment` section (sim_core/cluster): one engine, N replicas
behind a router, or disaggregated prefill/decode pools with a KV link. Limits and help text come
from the config model. Each pool's GPU kind is the top-level one or a hardware preset (a kind that
matches no preset, from a link or an uploaded config, is kept as it is and offered as such); pools
share the top-level scheduler unless a preset or link gave them their own (kept as they are)."""

from __future__ import annotations

from typing import Any

import streamlit as st
from pydantic import ValidationError

from app.components.config_form import tp_options
from app.components.text import plain
from sim_core import SimConfig
from sim_core.config import ROUTER_SUMMARIES, STATE_ROUTERS, DeploymentConfig, FirstTokenFrom, HardwareSpec, LinkContention, Router, field_bounds, field_info
from sim_core.presets import list_presets, read_preset_data
from sim_core.words import counted

MODES = ("one engine", "replicas", "disaggregated")
KEY = "w.dep."  # widget keys
TP_OPTIONS = (1, 2, 4, 8)
SAME_GPU = "same as Hardware"
FIRST_TOKEN_FROM = FirstTokenFrom.__args__  # ("prefill", "decode")
KEPT = "as loaded: "  # prefix of the option for a pool GPU kind that matches no preset
POOL = ("deployment", "disaggregation")
# Each mode's controls (their KEY suffixes). A mode's values are kept while another mode is shown: Streamlit drops the
# state of a widget a run does not draw, so "replicas" -> "one engine" -> "replicas" opened on 2 replicas where the user
# had set 5, and 3P1D with a 123 GB/s link came back as 1P1D at 50 GB/s (a review).
MODE_FIELDS = {MODES[0]: (), MODES[1]: ("router", "refresh", "replicas"),
               MODES[2]: ("router", "refresh", "prefill", "decode", "prefill_tp", "decode_tp", "prefill_gpu", "decode_gpu",
                          "ideal", "bw", "lat", "pipe", "contention", "first")}  # fmt: skip
KEPT_KEY = "ui.dep.kept."  # + suffix: a control's value when last drawn (not a widget key: it outlives the widget)
LAST_DRAWN_KEY = "ui.dep.last_drawn"  # the controls the last run drew


def _floats(*path: str) -> tuple[float, float]:
    """A float box's range: the config's limits on `deployment.<path>` (the model is where they are written)."""
    return tuple(float(b) for b in field_bounds(("deployment", *path)))


def _preset_hardware(name: str, num_gpus: int) -> dict[str, Any]:
    data = read_preset_data("hardware", name)
    data.pop("description", None)
    return data | {"num_gpus": num_gpus}


def _gpu_choice(pool) -> str:
    """The GPU selector's value for a pool: the top-level kind, the matching preset, or the kind as loaded."""
    if pool is None or pool.hardware is None:
        return SAME_GPU
    hw = pool.hardware
    for name in list_presets("hardware"):
        try:
            if HardwareSpec.model_validate(_preset_hardware(name, hw.num_gpus)) == hw:
                return name
        except ValidationError:  # a kind that cannot have this many GPUs (an NVLink-bridged pair) is not it
            continue
    return KEPT + hw.name


def _gpu_label(cfg: SimConfig, choice: str) -> str:
    """What the selector shows: the GPU's own name (the caption below repeats the kinds in use)."""
    if choice == SAME_GPU:
        return SAME_GPU
    if choice.startswith(KEPT):
        return choice.removeprefix(KEPT) + " (as loaded)"
    return str(read_preset_data("hardware", choice).get("name", choice))


def _gpu_options(role: str) -> list[str]:
    kept = st.session_state.get(KEY + role + "_gpu", "")
    return [SAME_GPU, *list_presets("hardware"), *([kept] if kept.startswith(KEPT) else [])]


def _help(*path: str) -> str:
    info = field_info(("deployment", *path))
    return info.description if info is not None else ""


def _pool_tp(cfg: SimConfig, pool) -> int:
    """A pool's TP degree: its own, else its GPU kind's num_gpus, else the top-level one."""
    if pool is None:
        return cfg.hardware.num_gpus
    return pool.tensor_parallel or (pool.hardware or cfg.hardware).num_gpus


def _gpus_before(cfg: SimConfig) -> str:
    """The config before a switch to pools, in words: 'the 4 replicas' or 'one engine'."""
    return f"the {counted(cfg.deployment.replicas, 'replica')}" if cfg.deployment else "one engine"


def seed(cfg: SimConfig) -> None:
    """Write a config's deployment into the widgets (preset change, link, upload)."""
    dep = cfg.deployment
    dis = dep.disaggregation if dep else None
    s = st.session_state
    s[KEY + "mode"] = MODES[0] if dep is None else MODES[2] if dis else MODES[1]
    s[KEY + "replicas"] = dep.replicas if dep else 2
    s[KEY + "router"] = dep.router if dep else "round_robin"
    s[KEY + "refresh"] = float((dep or DeploymentConfig()).state_refresh_s)
    s[KEY + "prefill"] = dis.prefill.replicas if dis else 1
    s[KEY + "decode"] = dis.decode.replicas if dis else 1
    s[KEY + "prefill_tp"] = _pool_tp(cfg, dis.prefill if dis else None)
    s[KEY + "decode_tp"] = _pool_tp(cfg, dis.decode if dis else None)
    s[KEY + "prefill_gpu"] = _gpu_choice(dis.prefill if dis else None)
    s[KEY + "decode_gpu"] = _gpu_choice(dis.decode if dis else None)
    link = dis.link if dis else None
    s[KEY + "ideal"] = bool(link and link.bandwidth_gb_per_s is None)
    s[KEY + "bw"] = float(link.bandwidth_gb_per_s) if link and link.bandwidth_gb_per_s else 50.0
    s[KEY + "lat"] = float(link.latency_us) if link else 20.0
    s[KEY + "pipe"] = link.layerwise_pipelining if link else True
    s[KEY + "contention"] = link.contention if link else "fifo"
    s[KEY + "first"] = dis.first_token_from if dis else "prefill"
    # (a new config's values replace those kept from before it)
    for name in {name for fields in MODE_FIELDS.values() for name in fields}:
        s[KEPT_KEY + name] = s[KEY + name]
    s[LAST_DRAWN_KEY] = _drawn(s[KEY + "mode"])


def _drawn(mode: str) -> tuple[str, ...]:
    """The controls a run in this mode draws (the link's bandwidth only while the link is not ideal)."""
    ideal = st.session_state.get(KEY + "ideal", False)
    return tuple(name for name in MODE_FIELDS[mode] if not (name == "bw" and ideal))


def _keep_values(mode: str) -> tuple[str, ...]:
    """Before the controls are drawn: a control the last run did not draw (the user switched the mode or the ideal
    link, the only change of that run) gets the value it had when last drawn. Returns the controls this run draws."""
    s = st.session_state
    drawn = _drawn(mode)
    before = s.get(LAST_DRAWN_KEY, drawn)
    for name in drawn:
        if name not in before and KEPT_KEY + name in s:
            s[KEY + name] = s[KEPT_KEY + name]
    s[LAST_DRAWN_KEY] = drawn
    return drawn


def _remember(drawn: tuple[str, ...]) -> None:
    """After the controls are drawn: their values, kept for a run that draws them again after one that did not."""
    s = st.session_state
    for name in drawn:
        if KEY + name in s:
            s[KEPT_KEY + name] = s[KEY + name]


# The controls' labels by the setting they edit (config_form.sidebar_words names these settings so in a message)
LABELS = {"deployment.router": "Router", "deployment.state_refresh_s": "Router state refresh (s)",
          "deployment.replicas": "Replicas", "deployment.disaggregation.prefill.replicas": "Prefill instances",
          "deployment.disaggregation.decode.replicas": "Decode instances",
          "deployment.disaggregation.prefill.tensor_parallel": "Prefill TP",
          "deployment.disaggregation.decode.tensor_parallel": "Decode TP",
          "deployment.disaggregation.link.bandwidth_gb_per_s": "KV link bandwidth (GB/s)",
          "deployment.disaggregation.link.latency_us": "KV link latency (µs)",
          "deployment.disaggregation.link.layerwise_pipelining": "Layer-wise pipelining",
          "deployment.disaggregation.link.contention": "Transfers sharing the link",
          "deployment.disaggregation.first_token_from": "First token streamed by"}  # fmt: skip
SECTION = "Deployment"  # (the sidebar expander's first word)


def _label(*parts: str) -> str:
    """The label of the pools' (or the link's) control for the setting at deployment.disaggregation.<parts>."""
    return LABELS[".".join((*POOL, *parts))]


def draw(cfg: SimConfig) -> dict[str, Any] | None:
    """Draw the editor; return the `deployment` value the widgets describe (None = one engine)."""
    if KEY + "mode" not in st.session_state:
        seed(cfg)
    mode = st.radio("Serving", MODES, key=KEY + "mode", horizontal=True,
                    help="One engine; N identical replicas behind a router; or separate prefill and decode pools.")  # fmt: skip
    drawn = _keep_values(mode)
    try:
        return _draw_mode(cfg, mode)
    finally:
        _remember(drawn)


def _draw_mode(cfg: SimConfig, mode: str) -> dict[str, Any] | None:
    if mode == MODES[0]:
        return None
    router = st.selectbox(LABELS["deployment.router"], Router.__args__, key=KEY + "router", help=_help("router"))
    st.caption(ROUTER_SUMMARIES[router])  # (the chosen one in a sentence; the help has every rule in full)
    # kept (not hidden) for the other routers, so switching back and forth keeps the value a link gave
    refresh = st.number_input(LABELS["deployment.state_refresh_s"], *_floats("state_refresh_s"), step=0.05, format="%.3f",
                              key=KEY + "refresh", help=_help("state_refresh_s"), disabled=router not in STATE_ROUTERS)  # fmt: skip
    if mode == MODES[1]:
        n = st.number_input(LABELS["deployment.replicas"], *field_bounds(("deployment", "replicas")), step=1, key=KEY + "replicas",
                            help=_help("replicas"))  # fmt: skip
        st.caption(f"{counted(int(n) * cfg.hardware.num_gpus, 'GPU')} = {counted(int(n), 'replica')} x TP {cfg.hardware.num_gpus}")
        return {"replicas": int(n), "router": router, "state_refresh_s": float(refresh)}
    keep = cfg.deployment.disaggregation if cfg.deployment and cfg.deployment.disaggregation else None
    c1, c2 = st.columns(2)
    p = c1.number_input(_label("prefill", "replicas"), *field_bounds((*POOL, "prefill", "replicas")), step=1, key=KEY + "prefill",
                        help=_help("disaggregation", "prefill"))  # fmt: skip
    d = c2.number_input(_label("decode", "replicas"), *field_bounds((*POOL, "decode", "replicas")), step=1, key=KEY + "decode",
                        help=_help("disaggregation", "decode"))  # fmt: skip
    # (only degrees the model's heads split evenly over, and the pool's own: config_form.tp_options, the sidebar's rule)
    opts = lambda k: tp_options(TP_OPTIONS, int(st.session_state.get(KEY + k, 1)), cfg)  # noqa: E731
    ptp = c1.select_slider(_label("prefill", "tensor_parallel"), opts("prefill_tp"), key=KEY + "prefill_tp",
                           help=_help("disaggregation", "prefill"))  # fmt: skip
    dtp = c2.select_slider(_label("decode", "tensor_parallel"), opts("decode_tp"), key=KEY + "decode_tp",
                           help=_help("disaggregation", "decode"))  # fmt: skip
    gpu_help = field_info(("deployment", "disaggregation", "prefill", "hardware")).description
    label = lambda choice: _gpu_label(cfg, choice)  # noqa: E731
    pgpu = st.selectbox("Prefill GPU", _gpu_options("prefill"), key=KEY + "prefill_gpu", help=gpu_help, format_func=label)
    dgpu = st.selectbox("Decode GPU", _gpu_options("decode"), key=KEY + "decode_gpu", help=gpu_help, format_func=label)
    ideal = st.toggle("Ideal link (free KV transfer)", key=KEY + "ideal", help=_help("disaggregation", "link"))
    bw = None
    if not ideal:
        # (the config's range: a box narrower than it would clamp a linked 0.05 GB/s and run, and re-link, another config)
        # (significant digits: a linked 1e-06 GB/s read "0.00" in the box beside "KV link 1e-06 GB/s" in the headline)
        bw = st.number_input(_label("link", "bandwidth_gb_per_s"), *_floats("disaggregation", "link", "bandwidth_gb_per_s"), step=10.0,
                             format="%g", key=KEY + "bw", help=field_info(("deployment", "disaggregation", "link", "bandwidth_gb_per_s")).description)  # fmt: skip
    lat = st.number_input(_label("link", "latency_us"), *_floats("disaggregation", "link", "latency_us"), step=5.0, key=KEY + "lat",
                          help=field_info(("deployment", "disaggregation", "link", "latency_us")).description)  # fmt: skip
    pipe = st.toggle(_label("link", "layerwise_pipelining"), key=KEY + "pipe",
                     help=field_info(("deployment", "disaggregation", "link", "layerwise_pipelining")).description)  # fmt: skip
    contention = st.radio(_label("link", "contention"), LinkContention.__args__, key=KEY + "contention", horizontal=True,
                          help=field_info(("deployment", "disaggregation", "link", "contention")).description)  # fmt: skip
    first = st.radio(_label("first_token_from"), FIRST_TOKEN_FROM, key=KEY + "first", horizontal=True,
                     help=field_info(("deployment", "disaggregation", "first_token_from")).description)  # fmt: skip
    kind = lambda choice: cfg.hardware.name if choice == SAME_GPU else choice.removeprefix(KEPT) if choice.startswith(KEPT) \
        else _gpu_label(cfg, choice)  # noqa: E731
    total = int(p) * ptp + int(d) * dtp
    # Switching a deployment of 4 replicas (8 GPUs) to pools opened on 1P1D (2 GPUs) and said nothing of the 6 GPUs gone:
    # the GPUs the config ran on before the switch are named while the count differs
    before = "" if keep is not None else _gpus_before(cfg)
    st.caption(f"{total} GPUs = {int(p)} x TP {ptp} {plain(kind(pgpu))} prefill + "
               f"{int(d)} x TP {dtp} {plain(kind(dgpu))} decode"  # GPU names from a link: text, not markdown
               + (f"; {before} ran on {counted(cfg.num_gpus_total, 'GPU')}: set the instances to compare on as many" if before and cfg.num_gpus_total != total else ""))  # fmt: skip

    def pool(n, tp, gpu, old) -> dict[str, Any]:
        # An unset TP that still equals its default stays unset, so an untouched preset stays that preset.
        same = old is not None and old.tensor_parallel is None and int(tp) == _pool_tp(cfg, old)
        if gpu == SAME_GPU:
            hardware = None
        elif gpu.startswith(KEPT):
            hardware = old.hardware.model_dump() if old is not None and old.hardware is not None else None
        elif old is not None and old.hardware is not None and _gpu_choice(old) == gpu:
            hardware = old.hardware.model_dump()  # unchanged: keep it exactly (its own num_gpus too)
        else:
            hardware = _preset_hardware(gpu, int(tp))
        return {"replicas": int(n), "tensor_parallel": None if same else int(tp), "hardware": hardware,
                "scheduler": old.scheduler.model_dump() if old and old.scheduler else None}  # fmt: skip

    return {"router": router, "state_refresh_s": float(refresh), "disaggregation": {
        "prefill": pool(p, ptp, pgpu, keep.prefill if keep else None),
        "decode": pool(d, dtp, dgpu, keep.decode if keep else None),
        "link": {"bandwidth_gb_per_s": bw, "latency_us": float(lat), "layerwise_pipelining": bool(pipe), "contention": contention},
        "first_token_from": first}}  # fmt: skip
