"""Sidebar editor for the optional `deployment` section (sim_core/cluster): one engine, N replicas
behind a router, or disaggregated prefill/decode pools with a KV link. Limits and help text come
from the config model; the pools share the top-level GPU kind and scheduler (other GPU kinds per
pool: through a preset, a link or an uploaded config, which the editor keeps as they are)."""

from __future__ import annotations

from typing import Any

import streamlit as st

from sim_core import SimConfig
from sim_core.config import Router, field_info

MODES = ("one engine", "replicas", "disaggregated")
KEY = "w.dep."  # widget keys
TP_OPTIONS = (1, 2, 4, 8)


def _help(*path: str) -> str:
    info = field_info(("deployment", *path))
    return info.description if info is not None else ""


def _pool_tp(cfg: SimConfig, pool) -> int:
    """A pool's TP degree: its own, else its GPU kind's num_gpus, else the top-level one."""
    if pool is None:
        return cfg.hardware.num_gpus
    return pool.tensor_parallel or (pool.hardware or cfg.hardware).num_gpus


def seed(cfg: SimConfig) -> None:
    """Write a config's deployment into the widgets (preset change, link, upload)."""
    dep = cfg.deployment
    dis = dep.disaggregation if dep else None
    s = st.session_state
    s[KEY + "mode"] = MODES[0] if dep is None else MODES[2] if dis else MODES[1]
    s[KEY + "replicas"] = dep.replicas if dep else 2
    s[KEY + "router"] = dep.router if dep else "round_robin"
    s[KEY + "prefill"] = dis.prefill.replicas if dis else 1
    s[KEY + "decode"] = dis.decode.replicas if dis else 1
    s[KEY + "prefill_tp"] = _pool_tp(cfg, dis.prefill if dis else None)
    s[KEY + "decode_tp"] = _pool_tp(cfg, dis.decode if dis else None)
    link = dis.link if dis else None
    s[KEY + "ideal"] = bool(link and link.bandwidth_gb_per_s is None)
    s[KEY + "bw"] = float(link.bandwidth_gb_per_s) if link and link.bandwidth_gb_per_s else 50.0
    s[KEY + "lat"] = float(link.latency_us) if link else 20.0
    s[KEY + "pipe"] = link.layerwise_pipelining if link else True


def draw(cfg: SimConfig) -> dict[str, Any] | None:
    """Draw the editor; return the `deployment` value the widgets describe (None = one engine)."""
    if KEY + "mode" not in st.session_state:
        seed(cfg)
    mode = st.radio("Serving", MODES, key=KEY + "mode", horizontal=True,
                    help="One engine; N identical replicas behind a router; or separate prefill and decode pools.")  # fmt: skip
    if mode == MODES[0]:
        return None
    router = st.selectbox("Router", Router.__args__, key=KEY + "router", help=_help("router"))
    if mode == MODES[1]:
        n = st.number_input("Replicas", 1, 64, step=1, key=KEY + "replicas", help=_help("replicas"))
        st.caption(f"{int(n) * cfg.hardware.num_gpus} GPUs = {int(n)} replicas x TP {cfg.hardware.num_gpus}")
        return {"replicas": int(n), "router": router}
    keep = cfg.deployment.disaggregation if cfg.deployment and cfg.deployment.disaggregation else None
    c1, c2 = st.columns(2)
    p = c1.number_input("Prefill instances", 1, 64, step=1, key=KEY + "prefill", help=_help("disaggregation", "prefill"))
    d = c2.number_input("Decode instances", 1, 64, step=1, key=KEY + "decode", help=_help("disaggregation", "decode"))
    opts = lambda k: sorted(set(TP_OPTIONS) | {int(st.session_state.get(KEY + k, 1))})  # noqa: E731
    ptp = c1.select_slider("Prefill TP", opts("prefill_tp"), key=KEY + "prefill_tp", help=_help("disaggregation", "prefill"))
    dtp = c2.select_slider("Decode TP", opts("decode_tp"), key=KEY + "decode_tp", help=_help("disaggregation", "decode"))
    ideal = st.toggle("Ideal link (free KV transfer)", key=KEY + "ideal", help=_help("disaggregation", "link"))
    bw = None
    if not ideal:
        bw = st.number_input("KV link bandwidth (GB/s)", 0.1, 100_000.0, step=10.0, key=KEY + "bw",
                             help=field_info(("deployment", "disaggregation", "link", "bandwidth_gb_per_s")).description)  # fmt: skip
    lat = st.number_input("KV link latency (us)", 0.0, 1_000_000.0, step=5.0, key=KEY + "lat",
                          help=field_info(("deployment", "disaggregation", "link", "latency_us")).description)  # fmt: skip
    pipe = st.toggle("Layer-wise pipelining", key=KEY + "pipe",
                     help=field_info(("deployment", "disaggregation", "link", "layerwise_pipelining")).description)  # fmt: skip
    st.caption(f"{int(p) * ptp + int(d) * dtp} GPUs = {int(p)} x TP {ptp} prefill + {int(d)} x TP {dtp} decode")
    def pool(n, tp, old) -> dict[str, Any]:
        # An unset TP that still equals its default stays unset, so an untouched preset stays that preset.
        same = old is not None and old.tensor_parallel is None and int(tp) == _pool_tp(cfg, old)
        return {"replicas": int(n), "tensor_parallel": None if same else int(tp),
                "hardware": old.hardware.model_dump() if old and old.hardware else None,
                "scheduler": old.scheduler.model_dump() if old and old.scheduler else None}  # fmt: skip

    return {"router": router, "disaggregation": {
        "prefill": pool(p, ptp, keep.prefill if keep else None), "decode": pool(d, dtp, keep.decode if keep else None),
        "link": {"bandwidth_gb_per_s": bw, "latency_us": float(lat), "layerwise_pipelining": bool(pipe)}}}  # fmt: skip
