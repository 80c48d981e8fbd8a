"""About: what is simulated, how a tick is priced, where the numbers come from."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from app.components import workshop
from app.components.text import plain
from app.components.units import MISSING
from app.state import CFG_KEY, PRESET_KEY, show_link_notices
from sim_core import list_presets
from sim_core.config import pool_config
from sim_core.costmodel import MemoryPlanError, ModelShape, draft_model_config, kv_bytes_per_token, plan_memory
from sim_core.planner import calibration_band
from sim_core.presets import engine_label, read_preset_data

workshop.page_title("About the model")
show_link_notices()
cfg = st.session_state[CFG_KEY]
st.markdown(
    """
**What is simulated.** An inference server, one *tick* (one forward pass over one batch) at a time.
Each tick the scheduler picks which requests run and how many tokens each computes (a prefill chunk,
a whole prompt, or one decode token), who is pre-empted, swapped out or swapped in. The roofline cost
model prices the tick; the clock advances; tokens are emitted; KV blocks are allocated and freed.
When nothing can run, the clock jumps to the next arrival.

**The cost of a tick.** For the GEMMs and for attention separately, a soft roofline:
`√(compute² + memory²)` with compute = FLOPs / (peak × efficiency) and memory = bytes / (HBM bandwidth ×
efficiency). The hard roofline, the larger of the two, is its lower bound; measured GEMMs leave the memory
roof well before they reach the compute roof, and the blend follows them. On top: the elementwise kernels
(norms, rotary, activations) as bytes over bandwidth, a fixed time per layer and per GEMM, the tensor-parallel
all-reduces, a fixed overhead per tick (scheduler, kernel launches, sampling) and per sequence, and PCIe time
for swapped KV. A prefill chunk of more than a few hundred tokens does many FLOPs per byte (compute-bound);
a decode step reads all weights and every sequence's KV for one token each (memory-bound).

**Where the numbers come from.** Hardware presets cite their datasheets; model shapes come from
each model's `config.json` (the GPT-6.7B, 20B and 175B shapes from FasterTransformer's GPT guide, the
models its published rows ran). The efficiencies and overheads are fitted on operator-level GPU timings
(Vidur) and a few published end-to-end rows per engine family (each engine profile on its own engine's rows);
`python -m sim_core validate` replays the other published
measurements (TensorRT-LLM, gpt-fast, Sarathi-Serve and others), which were not fitted on: """
    + calibration_band().text()  # computed, as the Plan page quotes it (a written-in figure went stale)
    + """. **Results are modelled, not measured**: use them to understand and compare, and confirm
sizing decisions on real hardware.
"""
)
st.subheader("Hardware presets and their sources")
# A static table whose cells wrap: in a scrolling data grid the sources (a sentence each, the point of the table) were
# cut at the page's edge, and names such as "a100-80gb-pcie-nvlink-bridge" at their column's. st.table renders
# Markdown in its cells: the presets' text is escaped (shown as typed).
num = lambda v: MISSING if v is None else f"{v:,g}"  # noqa: E731  (2,250 and 8,000 as the sidebar writes them)
st.container(key="about_hardware").table(pd.DataFrame(
    [{"preset": plain(name), "GPU": plain(d.get("name", name)), "dense BF16 TFLOP/s": num(d.get("peak_tflops")),
      "HBM GB/s": num(d.get("hbm_bandwidth_gb_per_s")), "source": plain(d.get("source", ""))}
     for name in list_presets("hardware") for d in [read_preset_data("hardware", name)]]).set_index("preset"),
)  # fmt: skip
st.subheader("This configuration")
# (what it describes: the page named no model or GPU, and sits seven screens below Simulate's on a phone)
st.caption(plain(f"{cfg.model.name} on {cfg.hardware.num_gpus}× {cfg.hardware.name} (tensor parallel {cfg.hardware.num_gpus}), "
                 f"{engine_label(cfg)}; preset {st.session_state.get(PRESET_KEY) or 'none (settings changed)'}"))  # fmt: skip
shape = ModelShape.of(cfg)
spec = cfg.scheduler.speculative
draft = draft_model_config(cfg) if spec.enabled and spec.draft == "model" else None
c1, c2, c3 = st.container(key="about_config").columns(3)  # they wrap on a narrow screen (app CSS) instead of cutting numbers
c1.metric("Parameters", f"{shape.total_params / 1e9:.2f} B",
          None if draft is None else f"+ {ModelShape.of(draft).total_params / 1e9:.2f} B of the draft", delta_color="off",
          delta_arrow="off")  # fmt: skip
# KV per token counts the draft's layers too (a head's one layer, a draft model's all), in the memory plan's own share of
# a block: 128 KiB beside 43 GiB for 70,720 tokens read as a page that did not add up with Llama-2-7B drafting
target_kv = kv_bytes_per_token(cfg)
try:
    top_plan = plan_memory(cfg)
    draft_kv = target_kv * top_plan.draft_block_bytes / (top_plan.block_bytes - top_plan.draft_block_bytes)
except MemoryPlanError:  # (said below, where the plan is given)
    top_plan, draft_kv = None, 0
c2.metric("KV per token", f"{(target_kv + draft_kv) / 1024:.0f} KiB",
          None if not draft_kv else f"target {target_kv / 1024:.0f} + draft {draft_kv / 1024:.0f} KiB", delta_color="off",
          delta_arrow="off")  # fmt: skip
# A P:D deployment's pools may differ in GPU and TP (Splitwise-HA: H100 prefill, A100 decode): one memory line per pool,
# each its own engine's (the page showed the top-level hardware's alone, "Per GPU", for both)
dis = cfg.deployment.disaggregation if cfg.deployment is not None else None
pools = [(None, cfg)] if dis is None else [(role, pool_config(cfg, role)) for role in ("prefill", "decode")]
gib = 2**30  # the memory plan's unit (nvidia-smi's)
for role, pool_cfg in pools:
    try:
        plan = top_plan if role is None and top_plan is not None else plan_memory(pool_cfg)  # (one engine: planned above)
    except MemoryPlanError as err:
        st.error(plain(err))
        continue
    if role is None:
        c3.metric("KV capacity (tokens)", f"{plan.kv_capacity_tokens:,}")
        lead = "Per GPU"
    else:
        pool = dis.prefill if role == "prefill" else dis.decode
        if role == "decode":  # (what back-pressure fills: the decode side's cache)
            c3.metric("KV capacity per decode instance (tokens)", f"{plan.kv_capacity_tokens:,}")
        lead = plain(f"{role.capitalize()} pool ({pool.replicas}x {pool_cfg.hardware.name}, TP {pool_cfg.hardware.num_gpus}), "
                     f"per GPU")  # fmt: skip
    # the speculative draft's part, where memory went (its weights; its layers' share of every block)
    drafted = (f" (of which the speculative draft's **{plan.draft_weight_bytes / gib:.2f} GiB**)"
               if plan.draft_weight_bytes else "")
    drafted_kv = (f", {plan.draft_block_bytes / plan.block_bytes:.0%} of each block holding the draft's KV"
                  if plan.draft_block_bytes else "")
    st.markdown(f"{lead}: weights **{plan.weight_bytes / gib:.2f} GiB**{drafted}, activation workspace and runtime "
                f"**{plan.workspace_bytes / gib:.2f} GiB**, KV cache **{plan.kv_bytes / gib:.2f} GiB** "
                f"({plan.num_blocks:,} blocks{'' if role is None else ' per instance'}{drafted_kv}).")  # fmt: skip
