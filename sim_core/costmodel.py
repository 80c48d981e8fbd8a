"""Roofline cost of one tick, and the memory plan. Pure arithmetic, no scheduling.

NOTE: every input of `CostModel.tick` is an integer aggregate of the batch (tokens, sampled
sequences, attention pairs, KV tokens read), and the formula is elementwise. So a run of ticks
priced as arrays gives bit-identical durations to the same ticks priced one by one: this is what
lets the engine coalesce identical decode ticks (engine.py) without changing any result.

Formulas: linear FLOPs 2·P·T (Kaplan et al. 2020; nanoGPT `estimate_mfu`);
attention FLOPs 4·h·d_h·L per (query, key) pair. Each op group (GEMMs, attention) costs
sqrt(compute² + memory²) with compute = FLOPs / (peak·η_c), memory = bytes / (BW·η_m): a soft
roofline (Williams et al. 2009 is the hard max). Measured GEMMs leave the memory roof well before
the compute roof is reached (Vidur operator profiles, presets/calibration/data/vidur_mlp_ops.csv:
Llama-2-70B TP2 on A100 takes 0.73 ms per layer at 128 tokens where max() gives 0.55 ms); the
quadratic blend follows them within a few % from 1 to 4,096 tokens (tests/sim_core/test_operators.py)
and keeps `tick` exact under IEEE (sqrt is correctly rounded in math and NumPy alike). Plus:
elementwise kernels (norms, rotary, activation, residual adds) as bytes / BW and a fixed time per
layer, ring all-reduce α + 2(t−1)/t · bytes / link (fitted on Vidur's all_reduce.csv), CPU
overheads, and swap bytes / PCIe.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from sim_core.config import DTYPE_BYTES, SimConfig

ACT_BYTES = 2  # activations in BF16/FP16
EMBED_BYTES = 2  # embeddings and LM head stay 16-bit under quantised weights (vLLM, TensorRT-LLM, AutoAWQ/GPTQ)
GB = 1e9
GEMMS_PER_LAYER = 4  # QKV, O, gate/up (one fused GEMM), down
GIB = 2**30
# A tick's context-free terms are kept per (tokens, samples) (`CostModel._make_scalar_tick`); False: computed at every
# tick, the reference for tests (the same values either way)
MEMO_TOKEN_TERMS = True
# At most this many kept entries per cost model and kind (~0.5 KB each: an 8-tuple of floats and its dict slot, so
# ~2 MB for a full memo of either kind); past it a tick's terms are computed and not kept. An engine has a few hundred
# (all-decode ticks: one per batch size; composed ticks: a run's distinct chunk mixes)
MEMO_MAX_ENTRIES = 2048
# Memory CUDA keeps for itself: PyTorch reports "79.15 GiB total capacity" on an 80 GiB A100,
# "39.59 GiB" on a 40 GiB A100 (meta-llama/llama#52), 23.58 GiB on a 24 GiB RTX 3090
# (vllm-project/vllm#10517): 0.4–0.85 GiB. One value for all cards.
CUDA_RESERVED_BYTES = 0.5 * GIB
# Memory outside PyTorch's allocator per GPU (CUDA context, cuBLAS workspace, NCCL): vLLM's
# "non_torch_memory=0.35GiB" (vllm-project/vllm#10517, Llama-3.1-8B, vLLM 0.6.4).
RUNTIME_BYTES = 0.35 * GIB


def achieved_hbm_bytes_per_s(hbm_bandwidth_gb_per_s: float, memory_efficiency: float, hbm_efficiency_scale: float) -> float:
    """The HBM bandwidth kernels stream at: the datasheet's, times the profile's memory_efficiency, times the GPU's
    hbm_efficiency_scale. The one place this product is formed (CostModel, the fit's operator rows, the roofline)."""
    return hbm_bandwidth_gb_per_s * GB * memory_efficiency * hbm_efficiency_scale


@dataclass(frozen=True, slots=True)
class ModelShape:
    """Per-layer parameter counts and byte sizes derived from a ModelSpec, per GPU after TP sharding."""

    attn_params: int  # Q, K, V, O projections of one layer
    expert_params: int  # one MLP expert of one layer (the whole MLP when dense)
    embed_params: int  # input embedding
    lm_head_params: int  # output projection (0 extra bytes when tied)
    total_params: int

    @classmethod
    def of(cls, cfg: SimConfig) -> ModelShape:
        m = cfg.model
        q = m.num_heads * m.head_dim
        kv = m.num_kv_heads * m.head_dim
        attn = m.hidden_size * (q + 2 * kv) + q * m.hidden_size
        expert = (3 if m.gated_mlp else 2) * m.hidden_size * m.ffn_size
        router = m.hidden_size * m.num_experts if m.num_experts > 1 else 0
        embed = m.vocab_size * m.hidden_size
        lm_head = 0 if m.tied_embeddings else embed
        total = m.num_layers * (attn + expert * m.num_experts + router) + embed + lm_head
        return cls(attn, expert, embed, lm_head, total)


def kv_bytes_per_token(cfg: SimConfig) -> float:
    """K and V of one token across all layers, whole model."""
    m = cfg.model
    return 2 * m.num_layers * m.num_kv_heads * m.head_dim * DTYPE_BYTES[cfg.kv_cache.kv_dtype] * cfg.kv_cache.kv_compression


def kv_bytes_per_token_per_gpu(cfg: SimConfig) -> float:
    """KV heads are split across TP ranks; with fewer KV heads than ranks each rank keeps a replica."""
    m = cfg.model
    heads_per_gpu = max(m.num_kv_heads / cfg.hardware.num_gpus, 1.0)
    return kv_bytes_per_token(cfg) * heads_per_gpu / m.num_kv_heads


def workspace_bytes_per_gpu(cfg: SimConfig) -> float:
    """Peak activation memory of the largest tick, as the engines size it at start-up.

    vLLM runs a dummy forward pass over `max_num_batched_tokens` tokens split across `max_num_seqs`
    sequences and records PyTorch's peak (vllm/worker/worker.py `determine_num_available_blocks`);
    TensorRT-LLM allocates its execution context for `max_num_tokens`. The peak sits in the MLP, where
    the residual stream, the MLP input and its output (3·d, replicated on every TP rank) live with the
    gate/up projection (2·d_ff) and the activation output (d_ff), both sharded:

        tokens × 2 B × (3·d + 3·d_ff·k / t)        (k = experts per token)

    Checked on vLLM's own profile: Llama-3.1-8B at 20,000 and 29,000 batched tokens peaks at
    2.07 GiB and 2.99 GiB above the weights (vllm-project/vllm#10517), 111 kB per token; the formula
    gives 110.6 kB. The logits come after the MLP buffers are freed, so the peak is the larger of the
    two, not their sum. What the profile holds of them depends on the engine (`kv_cache.memory_rule`):
    vLLM V0 runs its sampler on `max_num_seqs` sequences, FP32 logits [sequences, vocab] in 3 copies
    (`ModelRunner.profile_run` executes the model with sampling); vLLM 0.7's V1 splits the tokens
    across `max_num_seqs` requests, computes the 16-bit logits of each one's last position and runs no
    sampler (`GPUModelRunner.profile_run`: "TODO(woosuk): Consider the memory usage of the sampler";
    a sampler run came in later versions). So V1's peak grows far less with `max_num_seqs`: Llama-3.1-8B
    at 2,048 tokens and 1,024 sequences holds 0.26 GB of logits beside the MLP's 0.23 GB, where V0's
    sampler would take 1.58 GB.
    """
    m, t = cfg.model, cfg.hardware.num_gpus
    tokens = cfg.scheduler.max_num_batched_tokens
    per_token = ACT_BYTES * (3 * m.hidden_size + 3 * m.ffn_size * m.num_experts_per_token / t)
    if cfg.kv_cache.memory_rule == "vllm-v1":
        logits = ACT_BYTES * min(cfg.scheduler.max_num_seqs, tokens) * m.vocab_size
    else:
        sampled = min(cfg.scheduler.max_num_seqs * cfg.workload.num_samples, tokens)
        logits = 3 * 4 * sampled * m.vocab_size
    return max(tokens * per_token, logits)


def weight_bytes_per_gpu(cfg: SimConfig) -> float:
    """Transformer weights in `weight_dtype`, embeddings and LM head in 16 bits, sharded by TP (the target's alone: the
    speculative draft's are `draft_memory_per_gpu`'s)."""
    shape, m = ModelShape.of(cfg), cfg.model
    body = shape.total_params - shape.embed_params - shape.lm_head_params
    return (body * DTYPE_BYTES[m.weight_dtype] + (shape.embed_params + shape.lm_head_params) * EMBED_BYTES) / cfg.hardware.num_gpus


def draft_model_config(cfg: SimConfig) -> SimConfig:
    """`cfg` with its model replaced by the speculative draft model's preset (`scheduler.speculative.draft_model`): the
    copy that prices the draft's steps (`Speculator`) and sizes its weights and KV (`draft_memory_per_gpu`). Same
    hardware, so the same TP: vLLM V1 refuses a draft TP other than the target's (DraftModelProposer.
    _raise_if_draft_tp_mismatch, vllm/v1/spec_decode/draft_model.py), and the same kv_cache section (one cache_config:
    the draft's layers take the pool's kv_dtype and block size).

    Not config_with: this copy is never run; its model is validated here as a model, and a run's checks across sections
    (the workload's longest request within model.max_model_len, TP over the heads) are the target's, which `cfg` passed:
    the draft is not held to them (tests/sim_core/test_config.py lists the copies left)."""
    from sim_core.config import ModelSpec
    from sim_core.presets import read_preset_data  # (presets imports config; this module is imported by both)

    data = read_preset_data("models", cfg.scheduler.speculative.draft_model)
    data.pop("description", None)
    return cfg.model_copy(update={"model": ModelSpec.model_validate(data)})


def draft_memory_per_gpu(cfg: SimConfig) -> tuple[float, float]:
    """(weight bytes, KV bytes per token) per GPU of the speculative draft, (0, 0) without speculation: the one rule the
    memory plan reads (`kv_pool_bytes`, `plan_memory`, so the About page, the "vLLM would refuse" note and the planner's
    fit check). vLLM V1 loads the drafter inside the same memory profile as the target (GPUModelRunner.load_model calls
    drafter.load_model under its DeviceMemoryProfiler), so the KV budget is what is left after both; and the drafter's
    attention layers are in the same KV cache spec (GPUModelRunner.get_kv_cache_spec walks every attention layer, the
    draft's marked is_draft "excluded from equality so it never affects grouping"): with the target's they form one
    group (UniformTypeKVCacheSpecs when their head sizes differ, whose page_size_bytes is the sum over its layers), so
    every block holds its tokens' KV in the target's layers and the draft's, and the pool has fewer blocks.

      draft "model": the draft preset's weights (`weight_bytes_per_gpu` of `draft_model_config`: its own dtype, its
        own embedding and LM head, which DraftModelProposer never shares) and its KV per token
        (`kv_bytes_per_token_per_gpu` of the same copy), both under the target's TP. Llama-3.2-1B beside Llama-3.1-8B:
        2.47 GB of weights, KV per token 128 -> 160 KiB.
      draft "head" (EAGLE / MTP): one decoder layer of the target (attention, MLP or experts and router) in its
        weight_dtype, plus the head's input projection of the token's embedding and the target's hidden state
        (2·d x d: EAGLE's fc, MTP's eh_proj); the embedding and LM head are the target's (SpecDecodeBaseProposer.
        _maybe_share_embeddings / _maybe_share_lm_head: always for MTP, for EAGLE when its checkpoint has none or the
        same ones). Its KV: one layer of the target's, 1 / num_layers of the target's per token. Llama-3.1-8B: 0.50 GB,
        KV per token 128 -> 132 KiB. (Left out: an EAGLE-3 head's own LM head over its reduced vocabulary, its wider
        first layer, and a BF16 head beside FP8 target weights.)
    """
    spec = cfg.scheduler.speculative
    if not spec.enabled:
        return 0.0, 0.0
    kv_cfg, num_layers_over = _draft_kv_layers(cfg)
    kv_per_token = kv_bytes_per_token_per_gpu(kv_cfg) / num_layers_over
    if spec.draft == "model":
        return weight_bytes_per_gpu(kv_cfg), kv_per_token
    shape, m = ModelShape.of(cfg), cfg.model
    layer_params = (shape.total_params - shape.embed_params - shape.lm_head_params) // m.num_layers  # (layers alike)
    projection_params = 2 * m.hidden_size * m.hidden_size
    weights = (layer_params + projection_params) * DTYPE_BYTES[m.weight_dtype] / cfg.hardware.num_gpus
    return weights, kv_per_token


def _draft_kv_layers(cfg: SimConfig) -> tuple[SimConfig, int]:
    """Whose KV the speculative draft's layers hold per token, as (config, divisor): a draft model's own (its preset,
    all its layers: divisor 1), an EAGLE/MTP head's one layer of the target's (divisor num_layers). The one statement
    of the draft's KV that the memory plan (per GPU) and a P/D transfer (whole model) both read."""
    if cfg.scheduler.speculative.draft == "model":
        return draft_model_config(cfg), 1
    return cfg, cfg.model.num_layers


def draft_kv_bytes_per_token(cfg: SimConfig) -> float:
    """The speculative draft's K and V of one token across its layers, whole model (0 without speculation): what a
    prefill instance sends with the target's KV in a P/D transfer. vLLM V1 keeps the draft's layers in the target's KV
    cache group (`draft_memory_per_gpu`), its NIXL connector registers every layer of that cache, and a prefill
    instance runs the drafter over the prompt before the transfer is finalised (vllm-project/vllm#35158, "Fix KV transfer
    in PD + speculative decoding": otherwise "drafter KV is never copied and acceptance length degrades")."""
    if not cfg.scheduler.speculative.enabled:
        return 0.0
    kv_cfg, num_layers_over = _draft_kv_layers(cfg)
    return kv_bytes_per_token(kv_cfg) / num_layers_over


class MemoryPlanError(ValueError):
    """The config cannot run: weights, workspace and KV do not fit. The message names the numbers."""


@dataclass(frozen=True, slots=True)
class MemoryPlan:
    budget_bytes: float  # per GPU: what the engine's memory rule lets weights + workspace + KV use
    weight_bytes: float  # per GPU, the speculative draft's included
    workspace_bytes: float  # per GPU: activation peak + runtime (CUDA context, NCCL)
    kv_bytes: float  # per GPU, what is left for KV blocks
    block_bytes: float  # one block, per GPU
    num_blocks: int
    num_host_blocks: int  # swap space in blocks
    block_size: int  # tokens per block
    draft_weight_bytes: float = 0.0  # per GPU: the speculative draft's part of weight_bytes (`draft_memory_per_gpu`)
    draft_block_bytes: float = 0.0  # per GPU: the draft's layers' part of block_bytes

    @property
    def kv_capacity_tokens(self) -> int:
        return self.num_blocks * self.block_size


def memory_notes(cfg: SimConfig, memory: MemoryPlan) -> list[str]:
    """What the engine would do at start-up that the simulation does not (plain text, one sentence each): vLLM refuses
    to start when one request of max_model_len tokens does not fit its KV cache (V0 `raise_if_cache_size_invalid`, V1
    `check_enough_kv_cache_memory`); the simulation runs the workload it is given, each request checked to fit
    (`plan_memory`)."""
    if cfg.kv_cache.memory_rule not in ("vllm", "vllm-v1") or cfg.model.max_model_len <= memory.kv_capacity_tokens:
        return []
    return [f"vLLM would refuse to start this configuration: model.max_model_len ({cfg.model.max_model_len:,} tokens) is "
            f"more than its KV cache holds ({memory.kv_capacity_tokens:,} tokens); lower model.max_model_len or raise "
            "kv_cache.gpu_memory_utilization. The run simulates the workload anyway: each of its requests fits."]


DISTSERVE_RUNTIME_FRACTION = 0.01  # DistServe's peak_runtime_memory: total_gpu_memory * 0.01 + the weights


def kv_pool_bytes(cfg: SimConfig) -> tuple[float, float, float, float]:
    """(budget, weights, workspace, KV bytes) per GPU under the engine's memory rule (KVCacheConfig.memory_rule); the
    weights are the target's and the speculative draft's (`draft_memory_per_gpu`). The activation peak is the target's:
    the draft runs after the target's forward, over the same tokens, with smaller buffers.

    usable = memory_gib − CUDA's reservation; u = gpu_memory_utilization.
      vllm, vllm-v1: KV = u·usable − weights − activation peak − runtime   (vLLM ≥ 0.6.4 worker.py; the peak as
                     V0 or V1 profiles it: `workspace_bytes_per_gpu`)
      sglang:        KV = u·usable − weights; activations and runtime use the other 1 − u
                     (`mem_fraction_static`, sglang/srt/model_executor/model_runner.py)
      tensorrt-llm:  KV = u·(usable − weights − activations − runtime)
                     (`kv_cache_free_gpu_mem_fraction` of the memory free after the engine loads)
      distserve:     KV = u·memory − 1 % of memory − weights, of the whole memory torch reports and with no activation
                     profile (DistServe's `ParaWorker._profile_num_available_blocks`, distserve/worker.py; its
                     "workspace" is that 1 %). Under vLLM's rule its decode instance's 65,536-token budget reserved
                     9.72 GiB of activations it does not, 18 % fewer KV tokens (docs/cluster.md)
    """
    hw, kv = cfg.hardware, cfg.kv_cache
    usable = hw.memory_gib * GIB - CUDA_RESERVED_BYTES
    weights = weight_bytes_per_gpu(cfg) + draft_memory_per_gpu(cfg)[0]  # (the draft's: loaded before the profile)
    workspace = workspace_bytes_per_gpu(cfg) + RUNTIME_BYTES
    u = kv.gpu_memory_utilization
    if kv.memory_rule == "sglang":
        budget = u * usable
        if workspace > usable - budget:  # activations only get the 1 − u SGLang leaves: it OOMs mid-prefill
            return budget, weights, workspace, 0.0
        return budget, weights, workspace, budget - weights
    if kv.memory_rule == "tensorrt-llm":
        return usable, weights, workspace, u * (usable - weights - workspace)
    if kv.memory_rule == "distserve":
        total = hw.memory_gib * GIB
        runtime = DISTSERVE_RUNTIME_FRACTION * total
        return u * total, weights, runtime, u * total - runtime - weights
    budget = u * usable
    return budget, weights, workspace, budget - weights - workspace


def plan_memory(cfg: SimConfig, names: Callable[[str], str] | None = None) -> MemoryPlan:
    """Split GPU memory into weights, activation workspace and KV blocks (the engine's start-up profile). `names`:
    the field the user sets for each of `cfg`'s dotted fields the advice names, when `cfg` is a pool's engine
    (config.pool_field: deployment.disaggregation.prefill.tensor_parallel for hardware.num_gpus); default: itself.

    Raises:
        MemoryPlanError: with the numbers and the knobs that would make it fit.
    """
    hw, kv = cfg.hardware, cfg.kv_cache
    f = names or (lambda path: path)
    budget, weights, workspace, kv_bytes = kv_pool_bytes(cfg)
    draft_weights, draft_kv_per_token = draft_memory_per_gpu(cfg)
    draft_block_bytes = kv.block_size * draft_kv_per_token
    # (a block holds its tokens' KV in every attention layer, the draft's included: vLLM V1's one KV cache group)
    block_bytes = kv.block_size * kv_bytes_per_token_per_gpu(cfg) + draft_block_bytes
    gib = lambda x: f"{x / GIB:.2f} GiB"  # noqa: E731
    spec = cfg.scheduler.speculative
    # the draft's part, named with the fields that set it, when it is counted (a config that fits without it)
    drafted = ("" if not spec.enabled else
               f" (the speculative draft's {gib(draft_weights)} of weights and {draft_block_bytes / kv.block_size / 1024:.0f} "
               f"KiB of KV per token included: {f('scheduler.speculative.draft')} {spec.draft!r}"
               + (f", {f('scheduler.speculative.draft_model')} {spec.draft_model!r}" if spec.draft == "model" else "")
               + f"; a smaller draft, an EAGLE/MTP head or {f('scheduler.speculative.enabled')} false frees it)")
    if kv_bytes <= block_bytes:
        usable = hw.memory_gib * GIB - CUDA_RESERVED_BYTES
        memory = (f"{f('hardware.memory_gib')} = {hw.memory_gib:g} GiB per GPU less {CUDA_RESERVED_BYTES / GIB:g} GiB for "
                  f"the CUDA context, {f('kv_cache.gpu_memory_utilization')} {kv.gpu_memory_utilization:g}, memory rule "
                  f"{kv.memory_rule!r}")  # fmt: skip
        if kv.memory_rule == "sglang" and workspace > usable - budget:
            # (SGLang's KV is the static fraction less the weights: what does not fit is the activations, in the rest.
            # "leave 0.00 GiB for the KV cache, 0.00 GiB short of one block" named neither that nor the limit)
            why = (f"SGLang keeps only {1 - kv.gpu_memory_utilization:.0%} of the {gib(usable)} usable (the part outside "
                   f"mem_fraction_static) for activations and runtime, {gib(usable - budget)} per GPU, and the activation "
                   f"workspace and runtime need {gib(workspace)}: it runs out of memory in its first large prefill "
                   f"(weights {gib(weights)}, {memory}). ")
        elif weights >= budget:
            # (the weights alone do not fit: the advice led with a smaller token budget, which frees workspace only,
            # hardware.memory_gib=12 for Llama-3.1-8B's 14.96 GiB)
            why = (f"the weights alone, {gib(weights)} per GPU, do not fit in the {gib(budget)} the memory rule gives "
                   f"({memory}): split them over more GPUs ({f('hardware.num_gpus')}, now {hw.num_gpus}), use FP8/INT4 "
                   f"weights (model.weight_dtype), or a GPU with more memory ({f('hardware.memory_gib')})"
                   + (f"; a higher {f('kv_cache.gpu_memory_utilization')} (now {kv.gpu_memory_utilization:g}) lets the "
                      f"engine use more of the {gib(usable)} usable" if weights < usable and kv.memory_rule != "tensorrt-llm"
                      else "") + ".")  # fmt: skip
            raise MemoryPlanError(f"Out of memory{drafted}: {why}")
        else:
            why = (f"weights {gib(weights)} + activation workspace and runtime {gib(workspace)} per GPU leave "
                   # (how far short: "leave 0.00 GiB" read the same for 8 GiB of an 8B model's 15.5 as for a few MiB)
                   # ("60.96 GiB short of one 16-token block" read as if a block were 61 GiB: the block's size is
                   # said apart)
                   f"{gib(max(kv_bytes, 0))} for the KV cache: one {kv.block_size}-token block "
                   f"({block_bytes / 2**20:.2f} MiB) fits only with {gib(block_bytes - kv_bytes)} more ({memory}). ")
        raise MemoryPlanError(
            f"Out of memory{drafted}: {why}"
            + f"The workspace grows with {f('scheduler.max_num_batched_tokens')} ({cfg.scheduler.max_num_batched_tokens}): "
            f"lower it (a smaller prefill chunk, article §5.1), add GPUs ({f('hardware.num_gpus')}, now "
            f"{hw.num_gpus}), use FP8/INT4 weights (model.weight_dtype), or a GPU with more memory "
            f"({f('hardware.memory_gib')})"
            + (f"; or a lower {f('kv_cache.gpu_memory_utilization')} (mem_fraction_static), which leaves the activations "
               "more" if kv.memory_rule == "sglang" else "") + "."
        )
    num_blocks = int(kv_bytes // block_bytes)
    per_req = _max_request_blocks(cfg)
    if num_blocks < per_req:
        raise MemoryPlanError(
            f"KV cache too small{drafted}: {num_blocks} blocks of {kv.block_size} tokens ({gib(kv_bytes)} per GPU) but the "
            f"longest request needs {per_req} blocks"
            + (" (contiguous layout reserves model.max_model_len per sequence). " if kv.layout == "contiguous" else ". ")
            + f"Lower {f('scheduler.max_num_batched_tokens')}, use an FP8 KV cache (kv_cache.kv_dtype) or "
            f"kv_cache.kv_compression, add GPUs ({f('hardware.num_gpus')}), or shorten the workload's lengths / model.max_model_len."
        )
    # vLLM's swap_space is per GPU ("CPU swap space size (GiB) per GPU"): each TP worker swaps its own shard.
    num_host_blocks = int(kv.swap_space_gb * GIB // block_bytes)
    return MemoryPlan(budget, weights, workspace, kv_bytes, block_bytes, num_blocks, num_host_blocks, kv.block_size,
                      draft_weights, draft_block_bytes)


def _max_request_blocks(cfg: SimConfig) -> int:
    bs, n = cfg.kv_cache.block_size, cfg.workload.num_samples
    if cfg.kv_cache.layout == "contiguous":
        return n * -(-cfg.model.max_model_len // bs)
    wl = cfg.workload
    if wl.trace is not None:  # the largest request (a trace's longest prompt and longest output may be two rows)
        prompt = np.asarray(wl.trace.prompt_tokens[: wl.num_requests], dtype=np.int64)
        out = np.asarray(wl.trace.output_tokens[: wl.num_requests], dtype=np.int64)
    else:
        prompt, out = wl.max_prompt_tokens, wl.max_output_tokens
    return int(np.max(prompt // bs + n * -(-(prompt % bs + out) // bs)))


def uses_fp8_cores(cfg: SimConfig) -> bool:
    """FP8 weights on a GPU with FP8 tensor cores run their GEMMs there (W8A8, as vLLM's FP8 on Hopper)."""
    return cfg.model.weight_dtype == "fp8" and cfg.hardware.peak_fp8_tflops is not None


def gemm_peak_flops_per_s(cfg: SimConfig) -> float:
    """The datasheet peak per GPU of the cores the GEMMs run on: the roof the cost model prices them under, the
    roofline draws and MFU divides by (FP8 weights on FP8 tensor cores: the FP8 peak; else the dense 16-bit one)."""
    hw = cfg.hardware
    return (hw.peak_fp8_tflops if uses_fp8_cores(cfg) else hw.peak_tflops) * 1e12


def utilisation_peaks(cfg: SimConfig) -> tuple[float, float]:
    """(FLOP/s, bytes/s) per GPU that MFU and MBU divide by: the GEMMs' peak and the datasheet HBM bandwidth."""
    return gemm_peak_flops_per_s(cfg), cfg.hardware.hbm_bandwidth_gb_per_s * GB


def swap_bytes_per_s(cfg: SimConfig) -> float:
    """The host link's rate for moving KV blocks per GPU, bytes/s: what a tick's swap term and a run's swap time
    (metrics.summarize) divide by (the summary restated it with 1e9 for GB)."""
    return cfg.hardware.pcie_gb_per_s * GB


class CostModel:
    """Prices a tick from integer batch aggregates. Works on Python scalars or NumPy arrays alike."""

    def __init__(self, cfg: SimConfig):
        hw, m, cal = cfg.hardware, cfg.model, cfg.calibration
        t = hw.num_gpus
        shape = ModelShape.of(cfg)
        w_bytes = DTYPE_BYTES[m.weight_dtype]
        use_fp8_cores = uses_fp8_cores(cfg)
        gemm_peak = gemm_peak_flops_per_s(cfg)
        self.num_gpus = t
        self.uses_fp8_cores = use_fp8_cores
        self.peak_flops_per_s = gemm_peak  # the GEMMs' datasheet peak per GPU (FP8 tensor cores for FP8 weights)
        self.hbm_bytes_per_s = hw.hbm_bandwidth_gb_per_s * GB
        self.gemm_flops_per_s = gemm_peak * (cal.fp8_gemm_efficiency if use_fp8_cores else cal.gemm_efficiency)  # (also the roofline's calibrated roof)
        self._attn_flops_per_s = hw.peak_tflops * 1e12 * cal.attention_efficiency
        self.achieved_hbm_bytes_per_s = achieved_hbm_bytes_per_s(hw.hbm_bandwidth_gb_per_s, cal.memory_efficiency, hw.hbm_efficiency_scale)
        L = m.num_layers
        self._L = L
        self._E, self._k = m.num_experts, m.num_experts_per_token
        # Linear FLOPs per token (per GPU): 2 FLOPs per multiply-add of every active weight.
        self._gemm_flops_per_token = 2 * L * (shape.attn_params + self._k * shape.expert_params) / t
        self._lm_head_flops_per_sample = 2 * m.hidden_size * m.vocab_size / t
        # Weight bytes streamed once per tick; experts counted separately (only touched ones are read).
        # The LM head stays 16-bit under quantised weights.
        self._dense_weight_bytes = (L * shape.attn_params * w_bytes + m.vocab_size * m.hidden_size * EMBED_BYTES) / t
        self._expert_bytes_per_layer = shape.expert_params * w_bytes / t
        # Weight-only quantised GEMMs (INT8/INT4 weights with 16-bit activations; FP8 weights on a GPU without FP8
        # tensor cores) unpack and rescale every weight they stream on CUDA cores before the 16-bit MMA: a cost per
        # weight element, independent of the batch, on the compute side of the GEMM roofline. Fitted on gpt-fast's
        # Llama-2-7B INT8/INT4 decode rows; the 70B rows at TP1 and TP8 are held out (sim_core/validate.py).
        dequantised = w_bytes < ACT_BYTES and not use_fp8_cores
        self._body_weight_bytes = L * shape.attn_params * w_bytes / t  # quantised weights other than the experts
        self._dequant_s_per_weight_byte = (
            cal.dequant_flops_per_weight / w_bytes / (hw.peak_tflops * 1e12) if dequantised else 0.0)
        q = m.num_heads * m.head_dim
        # GEMM input/output activations per token per layer: QKV, O, MLP in/out (ACT_BYTES each).
        mlp_io = m.hidden_size * 2 + m.ffn_size * (3 if m.gated_mlp else 2) * self._k
        self._gemm_act_bytes_per_token = ACT_BYTES * L * (2 * m.hidden_size + q + 2 * m.num_kv_heads * m.head_dim + q + mlp_io) / t
        self._attn_flops_per_pair = 4 * q * L / t
        self._kv_bytes_per_token = kv_bytes_per_token_per_gpu(cfg)
        # GQA decode kernels that read KV per query head. TensorRT-LLM 0.5's masked MHA
        # (decoderMaskedMultiheadAttentionTemplate.h) runs one thread block per (sequence, query head) and loads
        # the cache of KV head hi / qhead_per_kv: each cached byte is read by every query head of its group, the
        # repeats mostly from L2. NVIDIA's GQA generation kernels (XQA) later read a KV head once per group,
        # "up to 2.4x" faster on Llama-70B than v0.5 (TensorRT-LLM docs/source/blogs/Falcon180B-H200.md). The
        # repeats cost `gqa_kv_reread_fraction` of the HBM time of the same bytes (a profile constant fitted on
        # that family's rows); group size per GPU after TP (KV heads replicate when fewer than ranks).
        q_heads_per_gpu = m.num_heads / t
        group = q_heads_per_gpu / max(m.num_kv_heads / t, 1.0)
        self._kv_read_bytes_per_token = self._kv_bytes_per_token * (1.0 + (group - 1.0) * cal.gqa_kv_reread_fraction)
        self._attn_act_bytes_per_token = ACT_BYTES * 2 * q * L / t  # read Q, write O
        # Elementwise kernels per token per layer: 2 RMSNorms (read + write d each), 2 residual adds
        # (read 2d, write d), rotary on Q and K (read + write), SiLU·mul (read 2·d_ff, write d_ff).
        kv_dim = m.num_kv_heads * m.head_dim
        elem = 4 * m.hidden_size + 6 * m.hidden_size + (2 * (q + kv_dim) + 3 * m.ffn_size * self._k) / t
        self._elem_bytes_per_token = ACT_BYTES * L * elem
        # A fixed time per layer (small kernels at their minimum duration) plus one per GEMM kernel: Vidur's batch-1
        # GEMM profiles (presets/calibration/data/vidur_mlp_ops.csv, A100) stream a 940 MB weight at 1,620 GB/s but a
        # 4 MB one at 700 GB/s, i.e. bytes / ~1.65 TB/s plus ~5 us per kernel: small per-GPU shards (TP8, small models)
        # are slower than bytes / bandwidth. Four GEMM kernels per layer (QKV, O, gate/up, down).
        self._layer_fixed_s = L * (cal.layer_fixed_us + GEMMS_PER_LAYER * cal.gemm_fixed_us) * 1e-6
        # Ring all-reduce after attention and after the MLP: 2 per layer (Megatron-LM TP).
        self._ar_bytes_per_token = 2 * L * 2 * (t - 1) / t * m.hidden_size * ACT_BYTES if t > 1 else 0.0
        self._ar_fixed_s = 2 * L * cal.allreduce_latency_us * 1e-6 if t > 1 else 0.0
        self._link_bytes_per_s = hw.interconnect_gb_per_s * GB * cal.interconnect_efficiency
        self._pcie_bytes_per_s = swap_bytes_per_s(cfg)
        self._tick_overhead_s = cal.tick_overhead_ms * 1e-3
        self._per_seq_overhead_s = cal.per_seq_overhead_us * 1e-6
        self._tick_scalar = self._make_scalar_tick()

    def expert_bytes(self, num_tokens):
        """MoE: weight bytes of the experts the batch touches. Uniform routing: a layer touches
        E·(1 − (1 − k/E)^T) experts on average for T tokens.

        Evaluated with math.pow per distinct T, so a run of ticks priced as an array rounds exactly
        like the same ticks priced one by one (NumPy's vector pow may differ in the last bit).
        """
        if self._E == 1:
            return self._L * self._expert_bytes_per_layer
        keep = 1.0 - self._k / self._E
        per_layer = self._L * self._expert_bytes_per_layer * self._E
        if np.ndim(num_tokens) == 0:
            return per_layer * (1.0 - math.pow(keep, float(num_tokens)))
        uniq, inv = np.unique(np.asarray(num_tokens), return_inverse=True)
        vals = np.array([per_layer * (1.0 - math.pow(keep, float(t))) for t in uniq.tolist()])
        return vals[inv]

    def tick(self, num_tokens, num_samples, attn_pairs, kv_read_tokens, num_seqs, swap_bytes=0.0):
        """Price one tick (or an array of ticks, elementwise).

        Args:
            num_tokens: tokens whose KV is computed this tick (prefill chunks + one per decoding sample).
            num_samples: sequences that sample a token (LM head rows).
            attn_pairs: causal (query, key) pairs over the batch.
            kv_read_tokens: cached tokens whose KV is read, summed over sequences.
            num_seqs: sequences in the batch (CPU overhead per sequence).
            swap_bytes: KV bytes moved over PCIe this tick (swap out + in), per GPU.

        Returns:
            (duration_s, flops, bytes, is_compute_bound), per GPU; each scalar or array like the inputs.
        """
        if isinstance(attn_pairs, int) and isinstance(num_tokens, int):
            return self._tick_scalar(num_tokens, num_samples, attn_pairs, kv_read_tokens, num_seqs, swap_bytes)
        T = np.asarray(num_tokens, dtype=np.float64)
        gemm_flops = self._gemm_flops_per_token * T + self._lm_head_flops_per_sample * np.asarray(num_samples, dtype=np.float64)
        # A tick that computes no token but moves swapped KV runs no forward pass: no weight is streamed (an empty
        # tick without swap, the deployment's shortest-tick lookahead, still prices one)
        swap = np.asarray(swap_bytes, dtype=np.float64)
        streams = (T > 0) | (swap == 0)
        gemm_bytes = np.where(streams, self._dense_weight_bytes + self.expert_bytes(T), 0.0) + self._gemm_act_bytes_per_token * T
        attn_flops = self._attn_flops_per_pair * np.asarray(attn_pairs, dtype=np.float64)
        attn_bytes = (self._kv_read_bytes_per_token * np.asarray(kv_read_tokens, dtype=np.float64) + self._kv_bytes_per_token * T
                      + self._attn_act_bytes_per_token * T)
        gemm_compute_s = gemm_flops / self.gemm_flops_per_s + np.where(streams, self._dequant_s_per_weight_byte * (
            self._body_weight_bytes + self.expert_bytes(T)), 0.0)
        attn_compute_s = attn_flops / self._attn_flops_per_s
        gemm_mem_s = gemm_bytes / self.achieved_hbm_bytes_per_s
        attn_mem_s = attn_bytes / self.achieved_hbm_bytes_per_s
        # soft roofline per op group; elementwise kernels and fixed per-layer time on top
        busy_s = (np.sqrt(gemm_compute_s * gemm_compute_s + gemm_mem_s * gemm_mem_s)
                  + np.sqrt(attn_compute_s * attn_compute_s + attn_mem_s * attn_mem_s)
                  + np.where(T > 0, self._elem_bytes_per_token * T / self.achieved_hbm_bytes_per_s + self._layer_fixed_s, 0.0))
        comm_s = np.where(T > 0, self._ar_bytes_per_token * T / self._link_bytes_per_s + self._ar_fixed_s, 0.0)
        overhead_s = self._tick_overhead_s + self._per_seq_overhead_s * np.asarray(num_seqs, dtype=np.float64)
        duration_s = busy_s + comm_s + overhead_s + swap / self._pcie_bytes_per_s
        is_compute = (gemm_compute_s + attn_compute_s) > (gemm_mem_s + attn_mem_s)
        return duration_s, gemm_flops + attn_flops, gemm_bytes + attn_bytes, is_compute

    def _make_scalar_tick(self):
        """`tick` for one tick in plain Python floats: the same IEEE operations in the same order as
        the array path (so results are bit-identical), without NumPy's per-call overhead. Constants
        are bound as locals of a closure because this runs once per simulated tick (the scalar core
        and every planned tick call it).

        Inputs are Python ints (or floats): `c * x` with a float constant `c` converts `x` exactly as
        `float(x)` does, so no explicit conversion is needed. For a dense model the expert bytes are a
        constant, so the terms built only from constants are folded here, once, with the operations
        of the array path (same values); `x + 0.0` is `x` for the positive durations, so a tick
        without swap skips that term."""
        gft, lmh, act = self._gemm_flops_per_token, self._lm_head_flops_per_sample, self._gemm_act_bytes_per_token
        expert_bytes, dense = self.expert_bytes, self._dense_weight_bytes
        afp, kvb, aab = self._attn_flops_per_pair, self._kv_bytes_per_token, self._attn_act_bytes_per_token
        kvr = self._kv_read_bytes_per_token
        gfs, afs, bps = self.gemm_flops_per_s, self._attn_flops_per_s, self.achieved_hbm_bytes_per_s
        arb, link, arf = self._ar_bytes_per_token, self._link_bytes_per_s, self._ar_fixed_s
        tov, pso, pcie = self._tick_overhead_s, self._per_seq_overhead_s, self._pcie_bytes_per_s
        elb, lfx, sqrt = self._elem_bytes_per_token, self._layer_fixed_s, math.sqrt
        dqb, body = self._dequant_s_per_weight_byte, self._body_weight_bytes

        moe = self._E > 1  # MoE: the touched experts depend on the tokens; dense: a constant, folded here once
        dense_expert = dense + expert_bytes(1)  # the array path's (dense + expert)
        dense_dequant_s = dqb * (body + expert_bytes(1))

        def token_terms(num_tokens, num_samples, swap_bytes):
            """The terms of a tick that read neither its context nor its sequence count: (T, gemm flops, gemm bytes,
            gemm compute time, gemm memory time, the GEMMs' soft roofline, the elementwise and per-layer time,
            communication), each the operations of the array path."""
            T = float(num_tokens)
            if moe:
                experts = expert_bytes(num_tokens)
                gemm_bytes = (dense + experts) + act * T  # (dense + expert) + act·T: the array path's order
                dequant_s = dqb * (body + experts)
            else:
                gemm_bytes, dequant_s = dense_expert + act * T, dense_dequant_s
            if swap_bytes and not num_tokens:  # swaps only: no forward pass, no weight streamed (as the array path)
                gemm_bytes, dequant_s = 0.0, 0.0
            gemm_flops = gft * T + lmh * num_samples
            gemm_compute_s = gemm_flops / gfs + dequant_s
            gemm_mem_s = gemm_bytes / bps
            return (T, gemm_flops, gemm_bytes, gemm_compute_s, gemm_mem_s,
                    sqrt(gemm_compute_s * gemm_compute_s + gemm_mem_s * gemm_mem_s),
                    elb * T / bps + lfx if T > 0 else 0.0, arb * T / link + arf if T > 0 else 0.0)

        # Every tick of the same tokens and samples has the same context-free terms, so they are kept (issue 11: a
        # speculative tick's k draft steps and its verify pass, a chunked-prefill engine's composed ticks; issue 13:
        # the decode instances of 2P2D price ~8 ticks between two joins one by one) and a tick prices only its
        # attention and its per-sequence overhead. An all-decode tick (as many tokens as samples: one per decoding
        # sample, or per verified position) is kept under its token count, the others under (tokens, samples); a tick
        # that swaps is not kept (few, and its terms read the swap). `MEMO_TOKEN_TERMS` False: computed every tick
        # (the reference for tests)
        by_tokens: dict[int, tuple] = {}
        by_pair: dict[tuple[int, int], tuple] = {}
        self._token_terms = (by_tokens, by_pair)  # (tests read what was kept)

        def kept_terms(memo, key, num_tokens, num_samples):
            """The terms of a tick without swap that `memo` lacks under `key`: computed, and kept while there is room."""
            terms = token_terms(num_tokens, num_samples, 0.0)
            if len(memo) < MEMO_MAX_ENTRIES:
                memo[key] = terms
            return terms

        def tick_scalar(num_tokens, num_samples, attn_pairs, kv_read_tokens, num_seqs, swap_bytes=0.0):
            # (each memo is read inline and a call only fills it: a composed tick's hit makes no call, ~600 instructions
            # less, issue 11 session 48; an all-decode tick's already made none)
            if swap_bytes or not MEMO_TOKEN_TERMS:
                terms = token_terms(num_tokens, num_samples, swap_bytes)
            elif num_tokens == num_samples:
                terms = by_tokens.get(num_tokens)
                if terms is None:
                    terms = kept_terms(by_tokens, num_tokens, num_tokens, num_samples)
            else:
                key = (num_tokens, num_samples)
                terms = by_pair.get(key)
                if terms is None:
                    terms = kept_terms(by_pair, key, num_tokens, num_samples)
            T, gemm_flops, gemm_bytes, gemm_compute_s, gemm_mem_s, gemm_s, elem_s, comm_s = terms
            attn_flops = afp * attn_pairs
            attn_bytes = kvr * kv_read_tokens + kvb * T + aab * T
            attn_compute_s = attn_flops / afs
            attn_mem_s = attn_bytes / bps
            busy_s = gemm_s + sqrt(attn_compute_s * attn_compute_s + attn_mem_s * attn_mem_s) + elem_s
            duration_s = busy_s + comm_s + (tov + pso * num_seqs)
            if swap_bytes:
                duration_s += swap_bytes / pcie
            is_compute = (gemm_compute_s + attn_compute_s) > (gemm_mem_s + attn_mem_s)
            return duration_s, gemm_flops + attn_flops, gemm_bytes + attn_bytes, is_compute

        return tick_scalar

    @property
    def tick_overhead_s(self) -> float:
        """The fixed CPU time of every tick (scheduler, launch, sampling set-up), without the per-sequence part."""
        return self._tick_overhead_s

    def comm_time_s(self, num_tokens):
        """Tensor-parallel all-reduce time inside a tick of `num_tokens` tokens (0 without TP): the
        same term `tick` adds, exposed for the UI's hover. Scalar or array."""
        T = np.asarray(num_tokens, dtype=np.float64)
        return np.where(T > 0, self._ar_bytes_per_token * T / self._link_bytes_per_s + self._ar_fixed_s, 0.0)

    def swap_time_s(self, swap_bytes):
        """PCIe time inside a tick that moves `swap_bytes` of KV per GPU (the term `tick` adds)."""
        return np.asarray(swap_bytes, dtype=np.float64) / self._pcie_bytes_per_s

    def prefill_time_s(self, prompt_tokens: int, cached_tokens: int = 0) -> float:
        """One prefill chunk of one sequence, as a single tick (used by tests and the validator)."""
        d, *_ = self.prefill_tick(prompt_tokens, cached_tokens)
        return float(d)

    def prefill_tick(self, chunk_tokens, cached_tokens):
        """`tick` of a lone prefill chunk of one sequence (its first token sampled) after `cached_tokens` of context:
        the aggregates `Engine._advance_tick` sums for one chunk and no decodes. Scalar or array (the batch-of-one
        chain's price tables, solo.py)."""
        n, c = chunk_tokens, cached_tokens
        return self.tick(n, 1, n * c + n * (n + 1) // 2, c, 1, 0.0)

    def decode_time_s(self, batch_size: int, context_tokens: int) -> float:
        """One decode tick of `batch_size` sequences that each have `context_tokens` cached."""
        b, c = batch_size, context_tokens
        d, *_ = self.tick(b, b, b * (c + 1), b * c, b)
        return float(d)
