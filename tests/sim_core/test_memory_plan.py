"""The memory plan against KV capacities engines have published (vLLM's "# GPU blocks" log lines, one SGLang and one
TensorRT-LLM start-up log)."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim_core.costmodel import (GIB, MemoryPlanError, draft_memory_per_gpu, plan_memory, weight_bytes_per_gpu,
                                workspace_bytes_per_gpu)
from sim_core.presets import PresetError, config_from_dict
from sim_core.sweep import with_value

SMALL = {"num_requests": 1, "prompt_tokens": {"dist": "fixed", "mean": 16}, "output_tokens": {"dist": "fixed", "mean": 16}}
# RTX 3090: 24 GiB (nvidia-smi 24,576 MiB); only its memory matters for the plan.
RTX_3090 = {"name": "RTX 3090", "peak_tflops": 71, "peak_fp8_tflops": None, "hbm_bandwidth_gb_per_s": 936,
            "memory_gib": 24, "interconnect": "pcie", "interconnect_gb_per_s": 32, "pcie_gb_per_s": 32}  # fmt: skip


def vllm_config(hardware, model, num_gpus, batched_tokens, max_model_len, **kv):
    return config_from_dict({
        "hardware": hardware | {"num_gpus": num_gpus}, "model": {"preset": model, "max_model_len": max_model_len},
        "engine": "vllm-v0", "workload": SMALL, "kv_cache": {"gpu_memory_utilization": 0.9, **kv},
        "scheduler": {"max_num_batched_tokens": batched_tokens, "max_num_seqs": 256},
    })  # fmt: skip


# (hardware, model, TP, max_num_batched_tokens, max_model_len, published # GPU blocks, source)
PUBLISHED = [
    ({"preset": "a100-80gb"}, "llama-2-7b", 1, 4096, 4096, 7351,
     "vllm-project/vllm PR #2031 (WoosukKwon, 2023-12-12): Llama2-7B TP1 1xA100-80GB, '# GPU blocks: 7351'"),
    ({"preset": "a100-80gb"}, "llama-2-70b", 4, 4096, 4096, 31615,
     "vllm-project/vllm PR #2031: Llama2-70B TP4 4xA100-80GB, main before the PR: '# GPU blocks: 31615' "
     "(the PR's profiler counts another ~13 GiB of non-PyTorch memory per GPU: 20865)"),
    ({"preset": "h100-sxm"}, "llama-3.1-8b", 1, 8192, 8192, 27284,
     "vllm-project/vllm PR #10511 (youkaichao, 2024-12-14, sanity check): 'vllm serve meta-llama/Meta-Llama-3-8B' on an "
     "H100-80GB: total_gpu_memory 79.22GiB, weights 14.96GiB, non_torch_memory 1.79GiB, activation peak 1.26GiB, "
     "available_kv_cache_memory 53.29GiB = 27,284 blocks of 16 x 128 KiB (the model: 28,203, +3.4 %)"),
    (RTX_3090, "llama-3.1-8b", 1, 20000, 20000, 1952,
     "vllm-project/vllm issue #10517 (comment 2024-12-02): Llama-3.1-8B on an RTX 3090, max_model_len 20k, "
     "'GPU blocks: 1952'"),
    (RTX_3090, "llama-3.1-8b", 1, 29000, 29000, 1478,
     "vllm-project/vllm issue #10517: same, max_model_len 29k, '# GPU blocks: 1478'"),
]  # fmt: skip


@pytest.mark.parametrize("hardware, model, tp, tokens, max_len, published, source", PUBLISHED)
def test_kv_blocks_match_vllm_logs_within_10_percent(hardware, model, tp, tokens, max_len, published, source):
    plan = plan_memory(vllm_config(hardware, model, tp, tokens, max_len))
    assert plan.num_blocks == pytest.approx(published, rel=0.10), source


# SGLang (0.4.x, February 2025): DeepSeek-R1-Distill-Qwen-7B (Qwen2.5-7B's architecture, BF16) on one RTX 3090 under
# WSL2, mem_fraction_static 0.88, chunked_prefill_size 2048. jerryzsj/my-deepseek-r1 README.md (its server log):
# "Load weight begin. avail mem=22.76 GB", "Load weight end. ... avail mem=8.37 GB", "KV Cache is allocated. K size:
# 2.82 GB, V size: 2.82 GB", "max_total_num_tokens=105531". SGLang's rule (ModelRunner.profile_max_num_token): the
# memory free after the weights less (1 - mem_fraction_static) of the memory free before them, 8.37 - 0.12 x 22.76 =
# 5.64 GiB of 56 KiB tokens. The GPU had 1.24 GiB in use before the server (its desktop under WSL2), where the model
# reserves 0.5 GiB for CUDA: given the log's free memory at start, the rule is 3.7 % high (the weights took 14.39 GiB
# of the allocator where the model counts 14.19); given the card's 24 GiB, 15.2 % high.
SGLANG_LOG_TOKENS = 105531
# TensorRT-LLM 0.19.0, C++ runtime (trtllm-build: max_batch_size 2048, max_num_tokens 1024, max_seq_len 2048), Llama-3.1-
# 8B-Instruct with FP8 weights and FP8 KV on one RTX 5090, kv_cache_free_gpu_mem_fraction 0.9, 32 tokens a block.
# NVIDIA/TensorRT-LLM issue #4275 (comment 2941155249): "Memory usage when calculating max tokens in paged kv cache:
# total: 31.84 GiB, available: 17.83 GiB", "[MemUsageChange] Allocated 16.05 GiB for max tokens in paged KV cache
# (263008)". The rule holds (16.05 = 0.9 x 17.83); what the model misses is the memory in use before it, 14.01 GiB
# against 10.78 GiB counted (weights 8.46, activations and runtime 1.82, CUDA 0.5): the engine's buffers for a batch of
# 2,048 and a desktop card's own use, which the log does not split. The model reads 310,592 tokens, 18.1 % high.
TRTLLM_LOG_TOKENS = 263008


def sglang_log_config(memory_gib):
    return config_from_dict({
        "hardware": RTX_3090 | {"memory_gib": memory_gib}, "model": {"preset": "qwen2.5-7b", "max_model_len": 4096},
        "engine": "sglang", "workload": SMALL, "kv_cache": {"gpu_memory_utilization": 0.88},
        "scheduler": {"max_num_batched_tokens": 2048},
    })  # fmt: skip


def trtllm_log_config():
    rtx_5090 = RTX_3090 | {"name": "RTX 5090", "memory_gib": 31.84}  # (only its memory matters for the plan)
    return config_from_dict({
        "hardware": rtx_5090, "model": {"preset": "llama-3.1-8b", "weight_dtype": "fp8", "max_model_len": 2048},
        "engine": "tensorrt-llm-no-evict", "workload": SMALL,
        "kv_cache": {"kv_dtype": "fp8", "gpu_memory_utilization": 0.9, "block_size": 32},
        "scheduler": {"max_num_batched_tokens": 1024, "max_num_seqs": 2048},
    })  # fmt: skip


def test_sglangs_kv_rule_matches_its_log_given_the_memory_free_at_start():
    at_start = plan_memory(sglang_log_config(22.76 + 0.5))  # the log's free memory at start, plus the model's CUDA reserve
    datasheet = plan_memory(sglang_log_config(24))
    assert sglang_log_config(24).kv_cache.memory_rule == "sglang"
    assert at_start.kv_capacity_tokens / SGLANG_LOG_TOKENS - 1 == pytest.approx(0.037, abs=0.0005)
    assert datasheet.kv_capacity_tokens / SGLANG_LOG_TOKENS - 1 == pytest.approx(0.152, abs=0.0005)


def test_tensorrt_llms_kv_capacity_against_its_log():
    cfg = trtllm_log_config()
    plan = plan_memory(cfg)
    assert cfg.kv_cache.memory_rule == "tensorrt-llm"
    assert plan.kv_capacity_tokens == 310592
    assert plan.kv_capacity_tokens / TRTLLM_LOG_TOKENS - 1 == pytest.approx(0.181, abs=0.0005)


def test_activation_peak_matches_vllms_profile():
    # vllm#10517: peak_torch_memory - weights = 17.06 - 14.99 GiB at 20,000 tokens, 17.98 - 14.99 at 29,000
    for tokens, measured_gib in ((20000, 2.07), (29000, 2.99)):
        cfg = vllm_config(RTX_3090, "llama-3.1-8b", 1, tokens, tokens)
        assert workspace_bytes_per_gpu(cfg) / GIB == pytest.approx(measured_gib, rel=0.05)


def test_weights_are_in_gib_as_vllm_reports_them():
    cfg = vllm_config(RTX_3090, "llama-3.1-8b", 1, 2048, 4096)
    assert weight_bytes_per_gpu(cfg) / GIB == pytest.approx(14.9888, rel=0.01)  # "Loading model weights took 14.9888 GB"


def test_quantised_weights_keep_16_bit_embeddings_and_lm_head():
    bf16 = vllm_config({"preset": "a100-80gb"}, "llama-3.1-8b", 1, 2048, 4096)
    int4 = bf16.model_copy(update={"model": bf16.model.model_copy(update={"weight_dtype": "int4"})})
    embed_and_head = 2 * 128256 * 4096 * 2  # bytes, 16-bit
    body_bf16 = weight_bytes_per_gpu(bf16) - embed_and_head
    assert weight_bytes_per_gpu(int4) == pytest.approx(body_bf16 / 4 + embed_and_head)


def test_the_issue_case_no_longer_starves_the_kv_cache():
    # Llama-2-70B TP2 on 2x A100-80GB under vllm-v0: 136 blocks with GB-for-GiB; thousands in GiB.
    cfg = config_from_dict({"hardware": {"preset": "a100-80gb", "num_gpus": 2}, "model": "llama-2-70b",
                            "engine": "vllm-v0", "workload": SMALL})  # fmt: skip
    assert plan_memory(cfg).num_blocks > 2000


def test_old_memory_gb_key_loads_as_gib():
    cfg = config_from_dict({"hardware": {"preset": "a100-80gb", "memory_gb": 40}, "workload": SMALL})
    assert cfg.hardware.memory_gib == 40


def test_nvlink_bridge_joins_at_most_two_gpus():
    with pytest.raises(PresetError, match="NVLink bridge"):
        config_from_dict({"hardware": {"preset": "a100-80gb-pcie-nvlink-bridge", "num_gpus": 4}, "workload": SMALL})


def test_memory_rules_order_the_kv_pool_as_engines_do():
    def kv(rule, util):
        return plan_memory(vllm_config({"preset": "h100-sxm"}, "llama-3.1-8b", 1, 8192, 8192,
                                       memory_rule=rule, gpu_memory_utilization=util)).kv_bytes  # fmt: skip

    # TensorRT-LLM takes its fraction of what is free after weights, activations and runtime.
    assert kv("tensorrt-llm", 0.9) == pytest.approx(0.9 * kv("vllm", 1.0))
    # SGLang keeps activations and runtime outside its static fraction: more KV than vLLM at the same fraction.
    cfg = vllm_config({"preset": "h100-sxm"}, "llama-3.1-8b", 1, 8192, 8192)
    assert kv("sglang", 0.88) == pytest.approx(kv("vllm", 0.88) + plan_memory(cfg).workspace_bytes)


@given(seqs=st.integers(1, 4096), tokens=st.integers(256, 65536), model=st.sampled_from(["llama-3.1-8b", "qwen2.5-7b"]))
@settings(max_examples=40, deadline=None)
def test_vllm_v1_profiles_16_bit_logits_of_its_sequences_and_no_sampler(seqs, tokens, model):
    # vLLM 0.7's V1 profile run splits max_num_batched_tokens across max_num_seqs requests, computes the 16-bit logits of
    # each one's last position and runs no sampler (GPUModelRunner.profile_run, "TODO(woosuk): Consider the memory usage
    # of the sampler"); V0 runs its sampler on max_num_seqs sequences: FP32 logits in 3 copies. The MLP peak is the same.
    # (the V0 engine's prefill-first scheduler lets max_num_seqs pass the token budget: the profile's requests are then
    # the budget's tokens, one each)
    def workspace(rule):
        cfg = vllm_config({"preset": "h100-sxm"}, model, 1, tokens, tokens, memory_rule=rule)
        return workspace_bytes_per_gpu(with_value(cfg, "scheduler.max_num_seqs", seqs))

    cfg = vllm_config({"preset": "h100-sxm"}, model, 1, tokens, tokens)
    mlp = workspace_bytes_per_gpu(with_value(cfg, "scheduler.max_num_seqs", 1))
    logits = 2 * min(seqs, tokens) * cfg.model.vocab_size
    assert workspace("vllm-v1") == max(mlp, logits)
    assert workspace("vllm-v1") <= workspace("vllm")


def test_the_vllm_v1_preset_keeps_its_kv_cache_at_1024_sequences():
    # At vLLM 0.7 serve's 2,048 tokens the V1 logits of 1,024 sequences (0.26 GB for Llama-3.1-8B) barely pass the MLP's
    # peak (0.23 GB), where V0's sampler profile would take 1.58 GB: 28,527 blocks at 256 sequences, within 0.1 % at 1,024
    base = config_from_dict({"hardware": "h100-sxm", "model": "llama-3.1-8b", "engine": "vllm-v1", "workload": SMALL})
    at = lambda n: plan_memory(with_value(base, "scheduler.max_num_seqs", n))  # noqa: E731
    assert base.kv_cache.memory_rule == "vllm-v1" and at(256).num_blocks == 28527
    assert at(1024).num_blocks == pytest.approx(28527, rel=0.001)
    v0 = with_value(with_value(base, "kv_cache.memory_rule", "vllm"), "scheduler.max_num_seqs", 1024)
    assert plan_memory(v0).num_blocks < 28000


def test_swap_space_is_per_gpu_as_in_vllm():
    # vLLM's --swap-space is "CPU swap space size (GiB) per GPU" (vllm/engine/arg_utils.py): each TP worker keeps
    # swap_space GiB of its own shard's blocks. vllm-project/vllm#5248: deepseek-coder-6.7b (32 layers, 32 KV heads of
    # 128, FP16: Llama-2-7B's KV shape) at TP2 with the default 4 GiB logs '# CPU blocks: 1024' (4 GiB / (16 tokens x
    # 256 KiB per GPU)); dividing the 4 GiB among the GPUs would give 512.
    for tp in (1, 2, 4):
        plan = plan_memory(vllm_config({"preset": "a100-80gb"}, "llama-2-7b", tp, 4096, 4096, swap_space_gb=4.0))
        assert plan.num_host_blocks == 4 * GIB // plan.block_bytes
    plan = plan_memory(vllm_config({"preset": "a100-80gb"}, "llama-2-7b", 2, 4096, 4096, swap_space_gb=4.0))
    assert plan.num_host_blocks == 1024


def test_a_context_the_kv_cache_cannot_hold_is_noted_as_vllm_would_refuse_it(capsys):
    # vLLM does not start when one max_model_len request does not fit its KV cache (V0 raise_if_cache_size_invalid, V1
    # check_enough_kv_cache_memory); the simulation runs the requests it is given and says so. chat-l4-llama8b at the
    # model's 131,072 tokens of context, 70,000 of KV (the preset caps the context at 32k, as an L4 deployment must).
    from sim_core.cli import main
    from sim_core.costmodel import memory_notes
    from sim_core.presets import load_preset

    assert memory_notes(load_preset("chat-l4-llama8b"), plan_memory(load_preset("chat-l4-llama8b"))) == []
    cfg = with_value(load_preset("chat-l4-llama8b"), "model.max_model_len", 131072)
    (note,) = memory_notes(cfg, plan_memory(cfg))
    assert "131,072" in note and f"{plan_memory(cfg).kv_capacity_tokens:,}" in note and "refuse" in note
    fits = with_value(cfg, "model.max_model_len", plan_memory(cfg).kv_capacity_tokens)
    assert memory_notes(fits, plan_memory(fits)) == []  # exactly its capacity: vLLM starts
    sglang = with_value(cfg, "kv_cache.memory_rule", "sglang")
    assert memory_notes(sglang, plan_memory(sglang)) == []  # (vLLM's check only)
    default = load_preset("chat-h100-llama8b")
    assert memory_notes(default, plan_memory(default)) == []
    assert main(["run", "chat-l4-llama8b", "--set", "workload.num_requests=20", "--set", "model.max_model_len=131072"]) == 0
    assert "NOTE: vLLM would refuse to start this configuration" in capsys.readouterr().out


def test_out_of_memory_says_how_far_short_it_is():
    # 8 GiB for an 8B model's 15.5 GiB read "leave 0.00 GiB for the KV cache", as a few MiB short would
    import re

    from sim_core import load_preset
    from sim_core.cli import apply_overrides
    from sim_core.costmodel import MemoryPlanError, kv_pool_bytes, plan_memory

    for gib in (17.3, 17.5):  # (the weights fit, 14.96 GiB; the workspace leaves no block)
        cfg = apply_overrides(load_preset("chat-h100-llama8b"), [f"hardware.memory_gib={gib}"])
        with pytest.raises(MemoryPlanError) as err:
            plan_memory(cfg)
        short = re.search(r"for the KV cache: one 16-token block \(2.00 MiB\) fits only with ([\d.]+) GiB more", str(err.value))
        assert short, str(err.value)
        kv_bytes = kv_pool_bytes(cfg)[3]
        block_bytes = 16 * 2 * 32 * 8 * 128 * 2  # a block of Llama-3.1-8B: 16 tokens x K and V x 32 layers x 8 heads x 128 x 2 B
        assert float(short.group(1)) == pytest.approx((block_bytes - kv_bytes) / 2**30, abs=0.005)


def spec_config(hardware, num_gpus, draft, utilisation=0.9, **more):
    """Llama-3.1-8B on vLLM V1 speculating with `draft` ("head", "model" or None: no speculation)."""
    speculative = {"enabled": draft is not None, "draft": draft or "head"} | more
    return config_from_dict({
        "hardware": hardware | {"num_gpus": num_gpus}, "model": "llama-3.1-8b", "engine": "vllm-v1", "workload": SMALL,
        "kv_cache": {"gpu_memory_utilization": utilisation}, "scheduler": {"speculative": speculative},
    })  # fmt: skip


@pytest.mark.parametrize("tp", [1, 2])
def test_a_draft_models_weights_and_kv_are_counted_as_vllm_v1_loads_and_caches_them(tp):
    # vLLM V1 loads the draft model inside the target's memory profile, under the target's TP (DraftModelProposer
    # ._raise_if_draft_tp_mismatch), and its attention layers join the target's KV cache group: a block holds both.
    # Llama-3.2-1B by hand (presets/models/llama-3.2-1b.json): d 2048, 16 layers, 32 query / 8 KV heads of 64,
    # MLP 8192 (gated), vocabulary 128,256, tied embeddings, BF16
    attn = 2048 * (32 * 64 + 2 * 8 * 64) + 32 * 64 * 2048
    mlp = 3 * 2048 * 8192
    params = 16 * (attn + mlp) + 128256 * 2048  # (one embedding matrix: tied)
    assert params == 1_235_814_400 - 33 * 2048  # (the checkpoint's 1,235,814,400 less its 33 RMSNorm vectors)
    draft_weights = params * 2 / tp  # 2.47 GB at TP1
    draft_kv = 2 * 16 * 8 * 64 * 2 / tp  # bytes per token per GPU: 32 KiB at TP1 (8 KV heads split over the ranks)
    target_kv = 2 * 32 * 8 * 128 * 2 / tp  # Llama-3.1-8B: 128 KiB at TP1
    assert draft_memory_per_gpu(spec_config({"preset": "h100-sxm"}, tp, "model")) == (draft_weights, draft_kv)
    plain = plan_memory(spec_config({"preset": "h100-sxm"}, tp, None))
    plan = plan_memory(spec_config({"preset": "h100-sxm"}, tp, "model"))
    assert plan.draft_weight_bytes == draft_weights and plan.weight_bytes == plain.weight_bytes + draft_weights
    assert plan.block_bytes == 16 * (target_kv + draft_kv) and plan.draft_block_bytes == 16 * draft_kv
    assert plan.kv_bytes == plain.kv_bytes - draft_weights  # (the workspace is the target's)
    assert plan.num_blocks == int((plain.kv_bytes - draft_weights) // (16 * (target_kv + draft_kv)))
    if tp == 1:  # 28,527 blocks without the draft (the vllm-v1 preset on an H100): 23 % fewer with it
        assert plain.num_blocks == 28527 and plan.num_blocks == 21878


def test_an_eagle_or_mtp_head_counts_one_target_layer_and_its_input_projection():
    # The head shares the target's embedding and LM head (SpecDecodeBaseProposer._maybe_share_embeddings /
    # _maybe_share_lm_head); it brings one decoder layer of the target's shape and a 2d -> d projection, and its one
    # attention layer's KV joins every block. Llama-3.1-8B by hand: d 4096, 32 query / 8 KV heads of 128, MLP 14,336.
    attn = 4096 * (32 * 128 + 2 * 8 * 128) + 32 * 128 * 4096
    layer = attn + 3 * 4096 * 14336
    head_weights = (layer + 2 * 4096 * 4096) * 2  # BF16: 0.50 GB
    head_kv = 2 * 1 * 8 * 128 * 2  # one layer: 4 KiB per token
    cfg = spec_config({"preset": "h100-sxm"}, 1, "head")
    assert draft_memory_per_gpu(cfg) == (head_weights, head_kv)
    plain = plan_memory(spec_config({"preset": "h100-sxm"}, 1, None))
    plan = plan_memory(cfg)
    assert plan.num_blocks == int((plain.kv_bytes - head_weights) // (16 * (128 * 1024 + head_kv))) == 27429
    assert 0.03 < 1 - plan.num_blocks / plain.num_blocks < 0.04  # ~3.8 % fewer blocks
    # no speculation: nothing counted, whatever the draft fields say
    assert draft_memory_per_gpu(spec_config({"preset": "h100-sxm"}, 1, None, draft_model="llama-3.2-3b")) == (0.0, 0.0)


def test_a_config_that_fits_only_without_its_draft_model_is_refused_naming_the_draft_fields():
    # An RTX 3090 (24 GiB) at utilisation 0.75 leaves Llama-3.1-8B ~2 GiB of KV: a 1B draft's 2.3 GiB does not fit
    assert plan_memory(spec_config(RTX_3090, 1, None, 0.75)).num_blocks > 500
    assert plan_memory(spec_config(RTX_3090, 1, "head", 0.75)).num_blocks > 500
    with pytest.raises(MemoryPlanError) as err:
        plan_memory(spec_config(RTX_3090, 1, "model", 0.75))
    text = str(err.value)
    for field in ("scheduler.speculative.draft 'model'", "scheduler.speculative.draft_model 'llama-3.2-1b'",
                  "scheduler.speculative.enabled", "2.30 GiB of weights"):  # fmt: skip
        assert field in text, text


def test_an_sglang_out_of_memory_names_the_activations_limit_it_breaks():
    # Lesson 6's 65,536-token chunk on an L4: SGLang's KV is the static fraction less the weights, so what does not fit
    # is the activation workspace in the 1 - mem_fraction_static left. The message read "leave 0.00 GiB for the KV
    # cache, 0.00 GiB short of one 16-token block", which says it fits and names neither the limit nor the need.
    from sim_core import load_preset
    from sim_core.cli import apply_overrides
    from sim_core.costmodel import CUDA_RESERVED_BYTES, MemoryPlanError, kv_pool_bytes, plan_memory

    cfg = apply_overrides(load_preset("prefill-oom-l4-llama8b"), ["scheduler.max_num_batched_tokens=65536"])
    with pytest.raises(MemoryPlanError) as err:
        plan_memory(cfg)
    text = str(err.value)
    budget, _, workspace, _ = kv_pool_bytes(cfg)
    left = cfg.hardware.memory_gib * 2**30 - CUDA_RESERVED_BYTES - budget
    assert workspace > left
    assert (f"SGLang keeps only 12% of the 21.99 GiB usable (the part outside mem_fraction_static) for activations and runtime, "
            f"{left / 2**30:.2f} GiB per GPU, and the activation workspace and runtime need {workspace / 2**30:.2f} GiB") in text
    assert "short of one" not in text and "kv_cache.gpu_memory_utilization (mem_fraction_static)" in text
    assert f"{left / 2**30:.2f}" == "2.64" and f"{workspace / 2**30:.2f}" == "7.10"  # (lesson 6's ~2.6 and ~7.1 GiB)


def test_weights_that_do_not_fit_alone_are_said_first_with_the_knobs_that_fit_them():
    # hardware.memory_gib=12 for Llama-3.1-8B's 14.96 GiB of weights: the advice led with a smaller token budget, which
    # frees workspace only, and said "5.17 GiB short of one 16-token block"
    from sim_core import load_preset
    from sim_core.cli import apply_overrides
    from sim_core.costmodel import MemoryPlanError, plan_memory

    for gib, higher_util in ((12, False), (16, True)):
        with pytest.raises(MemoryPlanError) as err:
            plan_memory(apply_overrides(load_preset("chat-h100-llama8b"), [f"hardware.memory_gib={gib}"]))
        text = str(err.value)
        assert text.startswith("Out of memory: the weights alone, 14.96 GiB per GPU, do not fit in the "), text
        assert "hardware.num_gpus, now 1" in text and "max_num_batched_tokens" not in text and "short of" not in text
        # (16 GiB: 15.5 usable hold them, the 0.9 the engine may use does not)
        assert ("a higher kv_cache.gpu_memory_utilization (now 0.9)" in text) == higher_util, text
