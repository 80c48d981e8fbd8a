"""Analytic anchors for the roofline: hand-computed numbers, independent of CostModel's code paths."""

import numpy as np
import pytest

from sim_core import MemoryPlanError, config_from_dict, run_simulation
from sim_core.costmodel import CostModel, ModelShape, kv_bytes_per_token, plan_memory, workspace_bytes_per_gpu
from sim_core.presets import list_presets
from sim_core.sweep import with_value
from tests.conftest import make_config, trace_config

REL = 1e-9


def test_llama31_8b_bf16_kv_is_128_kib_per_token(default_cfg):
    assert kv_bytes_per_token(default_cfg) == 128 * 1024


def test_fp8_kv_and_compression_scale_kv_bytes():
    cfg = make_config(kv_cache__kv_dtype="fp8", kv_cache__kv_compression=0.75)
    assert kv_bytes_per_token(cfg) == 128 * 1024 * 0.5 * 0.75


def test_decode_tick_matches_the_formula(default_cfg):
    cfg, cal, hw, m = default_cfg, default_cfg.calibration, default_cfg.hardware, default_cfg.model
    b, ctx = 8, 1000
    shape = ModelShape.of(cfg)
    params_streamed = shape.total_params - m.vocab_size * m.hidden_size  # input embedding is a gather
    gemm_flops = 2 * (shape.total_params - 2 * m.vocab_size * m.hidden_size) * b + 2 * m.hidden_size * m.vocab_size * b
    act = 2 * m.num_layers * (2 * 4096 + 4096 + 2 * 1024 + 4096 + 2 * 4096 + 3 * 14336) * b
    gemm_bytes = params_streamed * 2 + act
    attn_flops = 4 * 4096 * m.num_layers * b * (ctx + 1)
    attn_bytes = 128 * 1024 * (b * ctx + b) + 2 * 2 * 4096 * m.num_layers * b
    # norms 4d + residual adds 6d + rotary 2(q + kv) + SiLU-mul 3 d_ff, 2 bytes each, per layer
    elem_bytes = 2 * m.num_layers * (10 * 4096 + 2 * (4096 + 1024) + 3 * 14336) * b
    bw = hw.hbm_bandwidth_gb_per_s * 1e9 * cal.memory_efficiency * hw.hbm_efficiency_scale
    soft = lambda c, mem: (c * c + mem * mem) ** 0.5  # noqa: E731
    expected = (
        soft(gemm_flops / (hw.peak_tflops * 1e12 * cal.gemm_efficiency), gemm_bytes / bw)
        + soft(attn_flops / (hw.peak_tflops * 1e12 * cal.attention_efficiency), attn_bytes / bw)
        + elem_bytes / bw + m.num_layers * (cal.layer_fixed_us + 4 * cal.gemm_fixed_us) * 1e-6  # 4 GEMM kernels a layer
        + cal.tick_overhead_ms * 1e-3 + cal.per_seq_overhead_us * 1e-6 * b
    )
    assert CostModel(cfg).decode_time_s(b, ctx) == pytest.approx(expected, rel=REL)


def test_decode_is_memory_bound_and_long_prefill_compute_bound(default_cfg):
    cm = CostModel(default_cfg)
    *_, dec_compute = cm.tick(16, 16, 16 * 1001, 16 * 1000, 16)
    *_, pre_compute = cm.tick(4096, 1, 4096 * 4097 // 2, 0, 1)
    assert not dec_compute and pre_compute


def test_lone_request_ttft_is_prefill_time_plus_overhead():
    cfg = trace_config([1000], [1], arrivals=[0.5])
    res = run_simulation(cfg)
    expected = CostModel(cfg).prefill_time_s(1000)  # includes the per-tick overhead
    assert res.requests.ttft_s[0] == pytest.approx(expected, rel=REL)


def test_tensor_parallel_adds_allreduce_and_splits_work():
    one = CostModel(make_config())
    two = CostModel(make_config(hardware__num_gpus=2))
    t1, f1, *_ = one.tick(2048, 1, 2048 * 2049 // 2, 0, 1)
    t2, f2, *_ = two.tick(2048, 1, 2048 * 2049 // 2, 0, 1)
    assert f2 == pytest.approx(f1 / 2, rel=REL)
    assert float(t1) / 2 < float(t2) < float(t1)


def test_moe_reads_only_touched_experts():
    cfg = make_config("chat-2xh100-mixtral")
    cm = CostModel(cfg)
    one_token = cm.expert_bytes(1)
    many = cm.expert_bytes(10_000)
    assert one_token == pytest.approx(many * 2 / 8, rel=1e-6)  # top-2 of 8 at T=1; all 8 at large T


def test_block_count_follows_from_memory(default_cfg):
    plan = plan_memory(default_cfg)
    gib = 2**30
    budget = (79.65 * gib - 0.5 * gib) * 0.9  # H100 in GiB, less CUDA's reservation, x gpu_memory_utilization
    weights = ModelShape.of(default_cfg).total_params * 2
    kv = budget - weights - workspace_bytes_per_gpu(default_cfg) - 0.35 * gib  # runtime outside PyTorch
    assert plan.num_blocks == int(kv // (16 * 128 * 1024))


def test_huge_chunk_on_small_gpu_is_an_oom_that_names_the_knob():
    cfg = make_config("chat-l4-llama8b", scheduler__max_num_batched_tokens=65536)
    with pytest.raises(MemoryPlanError) as err:
        plan_memory(cfg)
    assert "max_num_batched_tokens" in str(err.value) and "GiB" in str(err.value)
    plan_memory(make_config("chat-l4-llama8b", scheduler__max_num_batched_tokens=256))


def test_kv_too_small_for_the_longest_request_is_explained():
    cfg = make_config(kv_cache__gpu_memory_utilization=0.21)  # (565 blocks; the longest request needs 640)
    with pytest.raises(MemoryPlanError, match="longest request"):
        plan_memory(cfg)


def test_comm_and_swap_terms_are_the_parts_of_a_tick_they_name():
    tp2 = CostModel(make_config("chat-h100-llama8b", hardware__num_gpus=2))
    fast_link = CostModel(make_config("chat-h100-llama8b", hardware__num_gpus=2, hardware__interconnect_gb_per_s=5000.0,
                                      calibration__allreduce_latency_us=0.0))
    d_slow, *_ = tp2.tick(512, 1, 512 * 513 // 2, 0, 1)
    d_fast, *_ = fast_link.tick(512, 1, 512 * 513 // 2, 0, 1)
    assert float(tp2.comm_time_s(512)) - float(fast_link.comm_time_s(512)) == pytest.approx(d_slow - d_fast, rel=1e-9)
    assert float(CostModel(make_config("chat-h100-llama8b")).comm_time_s(512)) == 0.0  # one GPU: no all-reduce
    d0, *_ = tp2.tick(8, 8, 8 * 100, 8 * 99, 8)
    d1, *_ = tp2.tick(8, 8, 8 * 100, 8 * 99, 8, swap_bytes=1e9)
    assert float(tp2.swap_time_s(1e9)) == pytest.approx(d1 - d0, rel=1e-9)


@pytest.mark.parametrize("gpu", list_presets("hardware"))
def test_no_profile_streams_hbm_faster_than_a_gpus_datasheet(gpu):
    # memory_efficiency x hbm_efficiency_scale is the fraction of the datasheet bandwidth the kernels reach: above 1
    # is impossible (H100 SXM kernels reach ~90-93 % of 3.35 TB/s). vllm-v1, vllm-v0, sglang, compiled-pytorch and
    # tensorrt-llm-pytorch (0.95, the top of the fit's grid) on an H100 (1.0695) streamed at 1.016 x its datasheet.
    for profile in (*list_presets("calibration"), "default"):
        cm = CostModel(config_from_dict({"hardware": gpu} | ({} if profile == "default" else {"calibration": profile})))
        assert cm.achieved_hbm_bytes_per_s <= cm.hbm_bytes_per_s, profile


@pytest.mark.parametrize("overrides", [{}, {"model": "mixtral-8x7b", "hardware__num_gpus": 2},
                                       {"model__weight_dtype": "int4", "calibration__dequant_flops_per_weight": 90.0}])
def test_a_tick_that_only_swaps_kv_costs_its_overhead_and_pcie_time_no_weight_read(overrides):
    # A swap-only tick (pre-emption by swapping, nothing computed) runs no forward pass: it streamed every weight (and
    # paid INT4 dequantisation, MoE experts) before; an empty tick without swap still prices one (the lookahead)
    cm = CostModel(make_config(**overrides))
    swap = 3 * 2**20
    zero = np.array(0)
    for dur, flops, nbytes, _ in (cm.tick(0, 0, 0, 0, 0, swap), cm.tick(zero, zero, zero, zero, zero, np.array(float(swap)))):
        assert float(dur) == cm.tick_overhead_s + float(cm.swap_time_s(swap))
        assert float(flops) == 0.0 and float(nbytes) == 0.0
    assert float(cm.tick(0, 0, 0, 0, 0)[0]) > cm.tick_overhead_s  # (the empty forward pass reads the weights)
    assert float(cm.tick(1, 1, 1, 0, 1, swap)[2]) > float(cm.tick(0, 0, 0, 0, 0, swap)[2])  # (computing tokens reads them)


def test_weight_only_quantised_gemms_pay_a_dequantisation_cost_per_weight():
    # INT4 weights with 16-bit activations: every streamed weight is unpacked on CUDA cores (compute side of the
    # GEMM roofline); 16-bit weights and FP8 weights on FP8 tensor cores pay nothing; FP8 weights on an A100 do.
    def decode_s(preset, dtype, dequant):
        cfg = make_config(hardware={"preset": preset}, model__weight_dtype=dtype, calibration__dequant_flops_per_weight=dequant)
        assert cfg.hardware.name.lower().startswith(preset[:4])
        return float(CostModel(cfg).decode_time_s(1, 100))

    assert decode_s("a100-80gb", "int4", 90.0) - decode_s("a100-80gb", "int4", 0.0) > 1e-4  # > 0.1 ms per step
    assert decode_s("a100-80gb", "bf16", 90.0) == decode_s("a100-80gb", "bf16", 0.0)
    assert decode_s("h100-sxm", "fp8", 90.0) == decode_s("h100-sxm", "fp8", 0.0)
    assert decode_s("a100-80gb", "fp8", 90.0) > decode_s("a100-80gb", "fp8", 0.0)


def test_dequantisation_cost_is_the_same_priced_as_array_or_scalar():
    cfg = make_config(model__weight_dtype="int8")
    cm = CostModel(cfg)
    tokens = [1, 7, 64, 300]
    arr, *_ = cm.tick(np.array(tokens), np.array(tokens), np.array(tokens) * 50, np.array(tokens) * 49, np.array(tokens))
    assert [cm.tick(t, t, t * 50, t * 49, t)[0] for t in tokens] == arr.tolist()


def test_kernels_that_read_kv_per_query_head_pay_the_gqa_rereads_in_attention_bytes():
    # Llama-3.1-8B: 32 query heads, 8 KV heads, a group of 4 per KV head. With a re-read fraction f the cached KV
    # is charged (1 + 3 f) times; the KV written for the new tokens and MHA models (group 1) are unchanged.
    def decode_bytes(kv_heads, f, b=8, ctx=1000):
        cm = CostModel(make_config(model__num_kv_heads=kv_heads, calibration__gqa_kv_reread_fraction=f))
        return float(cm.tick(b, b, b * (ctx + 1), b * ctx, b)[2]), cm._kv_bytes_per_token * b * ctx

    with_reads, cached = decode_bytes(8, 0.5)
    without, _ = decode_bytes(8, 0.0)
    assert with_reads - without == pytest.approx(cached * 3 * 0.5, rel=1e-9)
    assert decode_bytes(32, 0.5)[0] == decode_bytes(32, 0.0)[0]  # MHA: nothing to re-read


def test_gqa_reread_cost_is_the_same_priced_as_array_or_scalar():
    cm = CostModel(make_config(calibration__gqa_kv_reread_fraction=0.55))
    tokens = [1, 7, 64, 300]
    arr, *_ = cm.tick(np.array(tokens), np.array(tokens), np.array(tokens) * 50, np.array(tokens) * 49, np.array(tokens))
    assert [cm.tick(t, t, t * 50, t * 49, t)[0] for t in tokens] == arr.tolist()


def test_each_gemm_kernel_adds_its_fixed_time_to_a_tick():
    # Vidur's batch-1 GEMMs: bytes / bandwidth plus a time per kernel; four GEMM kernels per layer
    def tick_s(fixed_us):
        return float(CostModel(make_config(calibration__gemm_fixed_us=fixed_us)).decode_time_s(4, 100))

    m = make_config().model
    assert tick_s(6.0) - tick_s(0.0) == pytest.approx(m.num_layers * 4 * 6.0e-6, rel=1e-9)


def test_a_gpus_hbm_efficiency_scale_scales_its_streaming_bandwidth():
    # A batch-1 decode is almost all weight streaming: a 10 % lower scale makes it nearly 10 % slower
    def decode_s(scale):
        cfg = make_config(hardware__hbm_efficiency_scale=scale, calibration__tick_overhead_ms=0.0,
                          calibration__layer_fixed_us=0.0, calibration__gemm_fixed_us=0.0)
        return float(CostModel(cfg).decode_time_s(1, 100))

    assert 1.09 < decode_s(0.9) / decode_s(1.0) <= 1 / 0.9 + 1e-9


@pytest.mark.parametrize("overrides", [
    {},  # dense BF16, one GPU
    {"model": "mixtral-8x7b", "hardware__num_gpus": 2},  # MoE: touched experts depend on the tokens
    {"model__weight_dtype": "int4", "calibration__dequant_flops_per_weight": 90.0},  # dequantised GEMMs
    {"hardware__num_gpus": 4},  # tensor parallel: all-reduce terms
])  # fmt: skip
def test_the_scalar_tick_is_bit_identical_to_the_array_tick(overrides):
    # The scalar core and planned ticks use the scalar function, coalesced runs the array one: the engine's
    # fast paths are only exact if every output agrees to the last bit, for empty, swap-only and mixed ticks.
    from hypothesis import given, settings
    from hypothesis import strategies as hs

    cm = CostModel(make_config(**overrides))

    @settings(max_examples=200, deadline=None)
    @given(hs.lists(hs.tuples(hs.integers(0, 70_000), hs.integers(0, 600), hs.integers(0, 2**40), hs.integers(0, 2**31),
                              hs.integers(0, 600), hs.sampled_from([0, 0.0, 1, 3 * 2**20, 7.5e8])), min_size=1, max_size=8))
    def check(rows):
        cols = [np.array([r[i] for r in rows], dtype=np.int64) for i in range(5)]
        swap = np.array([float(r[5]) for r in rows])
        arr = cm.tick(*cols, swap)
        for i, row in enumerate(rows):
            one = cm._tick_scalar(*row)
            assert [float(x) for x in one[:3]] == [float(a[i]) for a in arr[:3]]
            assert bool(one[3]) == bool(arr[3][i])

    check()


def test_mfu_divides_by_the_peak_of_the_cores_the_gemms_run_on():
    # an FP8 model on an H100 is priced on the FP8 tensor cores (1,978.9 TFLOP/s), but MFU divided by the BF16 peak
    # (989.4): twice the utilisation of those cores, next to a roofline drawn at the FP8 peak
    from sim_core.costmodel import gemm_peak_flops_per_s

    fp8 = make_config(workload__num_requests=30, model__weight_dtype="fp8")
    res = run_simulation(fp8)
    assert gemm_peak_flops_per_s(fp8) == fp8.hardware.peak_fp8_tflops * 1e12 == CostModel(fp8).peak_flops_per_s
    tl = res.timeline
    busy = tl.phase != 0
    peak = fp8.hardware.peak_fp8_tflops * 1e12
    want = tl.flops[busy].sum() / tl.duration_s[busy].sum() / peak  # (the run's: its FLOPs over its busy time)
    assert res.summary.mfu_mean == pytest.approx(want, rel=1e-12)
    per_tick = res.to_frames()["ticks"]["mfu"].to_numpy()[busy]
    assert per_tick == pytest.approx(tl.flops[busy] / tl.duration_s[busy] / peak, rel=1e-12)
    # over the busy time, not a plain mean of the ticks' own ratios (short decode ticks outvoted long prefill ones)
    assert np.average(per_tick, weights=tl.duration_s[busy]) == pytest.approx(want, rel=1e-12)
    assert res.summary.mfu_mean > 1.2 * per_tick.mean()
    no_fp8_cores = with_value(fp8, "hardware.peak_fp8_tflops", None)  # (an A100-like GPU: FP8 weights dequantised)
    assert gemm_peak_flops_per_s(no_fp8_cores) == fp8.hardware.peak_tflops * 1e12
