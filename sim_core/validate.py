"""Replay measurements through the cost model: GPU operator profiles and published end-to-end rows.

`python -m sim_core validate` prints predicted vs measured for every row the model can express, then
a table per calibration profile and per source with fit rows and held-out rows reported separately.
`python -m sim_core validate --fit` refits every constant and prints the values to store
(sim_core/config.py `CalibrationConfig` defaults and presets/calibration/*.json).

All data ships in the repository (presets/calibration/data/, sources in its README.md):
  * vidur_mlp_ops.csv, vidur_attention_a100.csv, vidur_all_reduce.csv: Vidur (MLSys'24) operator
    profiles measured on A100/H100 (medians per configuration), trimmed to the columns used here;
  * published_measurements.csv: TensorRT-LLM v0.5 tables, gpt-fast, the Sarathi-Serve artifact.

What is fitted on what (never on a held-out row):
  * GPU constants, shared by every profile (`operators`):
      gemm_efficiency, memory_efficiency, gemm_fixed_us: Vidur linear-op rows of Llama-2-7B/70B (A100, H100, TP1-8);
        held out: every Meta-Llama-3-8B row (a model the fit never sees);
      attention_efficiency, layer_fixed_us: attention + elementwise rows of the Llama-2-70B layer at TP2
        on A100 (decode batches x contexts, prefill lengths), alternate rows fit / held out;
      interconnect_efficiency, allreduce_latency_us: Vidur all-reduce rows (A100 and H100 DGX, TP2/4/8,
        2 KiB-64 MiB), alternate sizes fit / held out.
  * CPU overheads (tick_overhead_ms, per_seq_overhead_us) per engine family profile, on that family's
    rows listed in PROFILE_FIT_ROWS; every other row of the family is held out.
"""

from __future__ import annotations

import csv
import functools
import itertools
import json
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from sim_core.config import CalibrationConfig, SimConfig, max_memory_efficiency
from sim_core.costmodel import ACT_BYTES, GEMMS_PER_LAYER, CostModel, achieved_hbm_bytes_per_s
from sim_core.engine import run_simulation
from sim_core.presets import PRESETS_DIR, config_from_dict, read_preset_data

DATA_DIR = PRESETS_DIR / "calibration" / "data"
CALIBRATION_CSV = DATA_DIR / "published_measurements.csv"
MEASUREMENTS_FILE = DATA_DIR / "published_measurements.md"  # the rows' ids, sources and trust grades, as a table
MEASUREMENTS_FILE_SHOWN = str(MEASUREMENTS_FILE.relative_to(PRESETS_DIR.parent))  # (as `validate` and `trends` name it)
PROFILES_DIR = PRESETS_DIR / "calibration"

GPU_CONSTANTS = ("gemm_efficiency", "memory_efficiency", "gemm_fixed_us", "attention_efficiency", "layer_fixed_us",
                 "interconnect_efficiency", "allreduce_latency_us")  # fmt: skip
# Engine family profiles: which published rows each is fitted on (>= 3 each), and which sections it replays.
PROFILE_SECTIONS = {"tensorrt-llm-classic": "A", "fastertransformer": "F", "sarathi-serve-artifact": "H", "compiled-pytorch": "E",
                    "tensorrt-llm-pytorch": "T", "sglang": "S", "vllm-v0": "V", "vllm-v1": "W"}
# Families whose rows are priced by running the simulator (offline benchmark runs), not by one formula:
# slower, so tests cover them behind SIM_CORE_SLOW_TESTS=1 (see tests/sim_core/test_validate.py).
SIMULATED_FAMILIES = ("tensorrt-llm-pytorch", "sglang", "vllm-v0", "vllm-v1")
# Their grids (coarse: every point is a few simulations). All start from compiled-pytorch's kernel costs.
SIMULATED_GRIDS = {
    "tensorrt-llm-pytorch": {"tick_overhead_ms": np.arange(0, 3.01, 0.25), "per_seq_overhead_us": np.arange(0, 20.1, 1.0),
                             "fp8_gemm_efficiency": np.arange(0.50, 0.91, 0.04)},
    "sglang": {"tick_overhead_ms": np.arange(0, 5.01, 0.5), "per_seq_overhead_us": np.arange(0, 60.1, 5.0),
               "allreduce_latency_us": np.arange(0, 80.1, 5.0)},
    "vllm-v0": {"tick_overhead_ms": np.arange(0, 5.01, 0.5), "per_seq_overhead_us": np.arange(0, 60.1, 5.0),
                "allreduce_latency_us": np.arange(0, 80.1, 5.0)},
    "vllm-v1": {"tick_overhead_ms": np.arange(0, 5.01, 0.5), "per_seq_overhead_us": np.arange(0, 60.1, 5.0),
                "allreduce_latency_us": np.arange(0, 80.1, 5.0)},
}  # fmt: skip
PROFILE_FIT_ROWS = {
    # TensorRT-LLM v0.5 (C++ runtime, in-flight batching era): static batch 64 at 128/128 for Llama-2-7B on
    # H100 FP8, A100 FP16, L40S FP8, Llama-2-70B TP4 on H100 and A100, GPT-J on A100; batch-1 prefill of 128 and
    # 2,048 tokens (Llama-2-7B, H100 and A100).
    "tensorrt-llm-classic": ("A005", "A021", "A031", "A039", "A032", "A040", "A009", "A025", "A013", "A017"),
    # FasterTransformer's own latency tables (docs/gpt_guide.md, 8xA100-80GB, FP16 static batches), chosen before any
    # prediction was looked at: GPT-6.7B at batch 1 and 64 of 128/8 and batch 1 and 16 of 512/32 (TP1); GPT-20B at
    # batch 1 and 64 of 80/200 at TP2 (long generation); GPT-175B at TP8, batch 1 of 128/8 and batch 16 of 512/32.
    # Every other row of those tables in the set (59) is held out.
    "fastertransformer": ("F001", "F007", "F008", "F012", "F040", "F044", "F055", "F067"),
    # (plus layer_fixed_us: fused kernels.)
    # Sarathi-Serve artifact (vLLM 0.2-based Python engine; the paper's vLLM and Orca baselines ran in the
    # same code): decode batch 1 and 128, prefill of 512 and 16,384 tokens.
    "sarathi-serve-artifact": ("H487", "H494", "H497", "H502"),
    # gpt-fast (torch.compile + CUDA graphs, the execution style of vLLM V1 and SGLang): batch-1 decode of
    # Llama-2-7B at three weight precisions and Llama-2-70B at TP2, all on A100.
    "compiled-pytorch": ("E425", "E426", "E427", "E433"),
    # TensorRT-LLM 1.0, PyTorch backend (trtllm-bench offline throughput): Llama-3.1-8B FP8 on H100 at
    # 128/128, 128/2048, 1000/1000 and 2048/128. It starts from compiled-pytorch's kernel costs (same
    # execution style: PyTorch, CUDA graphs) and fits its own CPU costs per tick and per sequence and its
    # FP8 GEMM efficiency.
    "tensorrt-llm-pytorch": ("T001", "T002", "T005", "T007"),
    # SGLang 0.3.0 and vLLM 0.6.0 (V0, multi-step 10) on ShareGPT with sglang.bench_serving: median TPOT at
    # 4 req/s and offline output throughput of Llama-3.1-8B on an A100, median TPOT at 4 req/s of
    # Llama-3.1-70B at TP4 on H100. CPU costs per tick and per sequence, and the all-reduce latency.
    "sglang": ("S002", "S005", "S007"),
    "vllm-v0": ("V001", "V003", "V004"),
    # vLLM 0.7.0 with the V1 engine (vLLM's V1 announcement, figure v1_llama.png): mean end-to-end latency on
    # ShareGPT at 1 and 40 req/s for Llama-3.1-8B on one H100, and at 1 and 15 req/s for Llama-3.3-70B at TP4:
    # light and medium load on both models; the heavier loads (the knee) are held out.
    "vllm-v1": ("W001", "W003", "W007", "W010"),
}
# The defaults of CalibrationConfig: operator-fitted GPU constants plus this family's CPU overheads.
DEFAULT_FAMILY = "tensorrt-llm-classic"

GPU_PRESETS = {
    "H100-SXM-80GB": ("h100-sxm", {}), "L40S-48GB": ("l40s", {}), "A100-SXM-80GB": ("a100-80gb", {}),
    "A100-SXM-80GB (330 W cap)": ("a100-80gb", {"hbm_bandwidth_gb_per_s": 1700}),
    "A100-80GB (DGX)": ("a100-80gb", {}), "H100-80GB (DGX)": ("h100-sxm", {}),
    "A100-PCIe-80GB (pairwise NVLink, Azure NC96ads v4)": ("a100-80gb-pcie-nvlink-bridge", {}),  # Sarathi-Serve
    "H200-SXM-141GB": ("h200", {}),
}  # fmt: skip
MODEL_PRESETS = {"GPT-J-6B": "gpt-j-6b", "Llama-2-7B": "llama-2-7b", "Llama-2-70B": "llama-2-70b",
                 "Yi-34B": "yi-34b", "Llama-3-8B": "llama-3.1-8b", "Llama-3.1-8B": "llama-3.1-8b",
                 "Llama-3.3-70B": "llama-3.1-70b", "Llama-3.1-70B": "llama-3.1-70b",
                 "GPT-6.7B": "gpt-6.7b", "GPT-20B": "gpt-20b", "GPT-175B": "gpt-175b"}  # Llama 3.3 70B has Llama 3.1 70B's architecture  # fmt: skip
DTYPES = {"FP8 (W+KV)": ("fp8", "fp8"), "FP16": ("fp16", "fp16"), "BF16": ("bf16", "bf16"),
          "INT8 weight-only": ("int8", "bf16"), "INT4 g32 weight-only": ("int4", "bf16")}  # fmt: skip
VIDUR_GPU = {"a100": "a100-80gb", "h100": "h100-sxm"}
VIDUR_SYSTEM = {"a100_dgx": "a100-80gb", "h100_dgx": "h100-sxm"}


@dataclass(frozen=True)
class Row:
    id: str
    what: str
    measured: float
    unit: str
    predict: Callable[[dict[str, float]], float]  # calibration values -> predicted value
    group: str  # vidur-gemm, vidur-layer, vidur-allreduce, or a profile name
    source: str
    held_out: bool


def load_rows(path: Path = CALIBRATION_CSV) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def _read_csv(name: str) -> list[dict[str, str]]:
    with open(DATA_DIR / name, newline="") as f:
        return list(csv.DictReader(f))


# ---------------------------------------------------------------- operator rows (Vidur profiles)
def _soft(compute_s: float, memory_s: float) -> float:
    """The cost model's soft roofline (sim_core/costmodel.py `CostModel.tick`)."""
    return math.sqrt(compute_s * compute_s + memory_s * memory_s)


def _hbm_scale(cal: dict[str, float], gpu: str) -> float:
    """A Vidur GPU's hbm_efficiency_scale: the value being fitted (cal["hbm_scale_<gpu>"]) or its hardware preset's."""
    return cal.get(f"hbm_scale_{gpu}") or read_preset_data("hardware", VIDUR_GPU[gpu]).get("hbm_efficiency_scale", 1.0)


def _gemm_rows() -> list[Row]:
    """One layer's QKV, O, gate/up and down GEMMs on one GPU (Vidur mlp.csv), priced as in CostModel."""
    rows = []
    keep = {1, 16, 32, 64, 96, 128, 192, 256, 384, 512, 1024, 2048, 4096}
    for r in _read_csv("vidur_mlp_ops.csv"):
        T, t = int(r["num_tokens"]), int(r["num_tensor_parallel_workers"])
        if T not in keep:
            continue
        h, f = int(r["n_embd"]), int(r["n_expanded_embd"])
        q, kv = h, int(r["n_kv_head"]) * h // int(r["n_head"])
        params = (h * (q + 2 * kv) + q * h + 3 * h * f) / t
        act = ACT_BYTES * T * (2 * h + 2 * q + 2 * kv + 2 * h + 3 * f) / t
        hw = read_preset_data("hardware", VIDUR_GPU[r["gpu"]])
        peak, bw_gb = hw["peak_tflops"] * 1e12, hw["hbm_bandwidth_gb_per_s"]
        value = sum(float(r[k + "_ms"]) for k in ("attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj"))

        def pred(cal, fl=2 * params * T, nb=2 * params + act, peak=peak, bw_gb=bw_gb, gpu=r["gpu"]):
            bw_eff = achieved_hbm_bytes_per_s(bw_gb, cal["memory_efficiency"], _hbm_scale(cal, gpu))
            return (_soft(fl / (peak * cal["gemm_efficiency"]), nb / bw_eff) + GEMMS_PER_LAYER * cal["gemm_fixed_us"] * 1e-6) * 1e3

        rid = f"vg-{r['gpu']}-{r['model']}-tp{t}-{T}"
        rows.append(Row(rid, f"{r['model'][:14]} {r['gpu']} TP{t} GEMMs {T} tok", value, "ms", pred, "vidur-gemm",
                        "Vidur mlp.csv", r["model"] == "Meta-Llama-3-8B"))  # fmt: skip
    return rows


LAYER_MODEL = {"h": 8192, "q": 8192, "kv": 1024, "f": 28672, "t": 2}  # Llama-2-70B, TP2 (attention.csv shape)


def _layer_pred(T: int, pairs: int, kv_read: int) -> Callable[[dict[str, float]], float]:
    """Attention + elementwise kernels of one Llama-2-70B layer at TP2 on A100, as in CostModel."""
    m = LAYER_MODEL
    hw = read_preset_data("hardware", "a100-80gb")
    peak = hw["peak_tflops"] * 1e12
    kv_token = 2 * m["kv"] / m["t"] * 2  # K and V, 16-bit, this rank's heads
    attn_fl = 4 * m["q"] / m["t"] * pairs
    attn_b = kv_token * (kv_read + T) + ACT_BYTES * 2 * m["q"] / m["t"] * T
    elem_b = ACT_BYTES * T * (10 * m["h"] + (2 * (m["q"] + m["kv"]) + 3 * m["f"]) / m["t"])

    def pred(cal):
        bw_eff = achieved_hbm_bytes_per_s(hw["hbm_bandwidth_gb_per_s"], cal["memory_efficiency"], _hbm_scale(cal, "a100"))
        return (_soft(attn_fl / (peak * cal["attention_efficiency"]), attn_b / bw_eff) + elem_b / bw_eff
                + cal["layer_fixed_us"] * 1e-6) * 1e3  # fmt: skip

    return pred


def _layer_rows() -> list[Row]:
    ops = {int(r["num_tokens"]): r for r in _read_csv("vidur_mlp_ops.csv")
           if r["gpu"] == "a100" and r["model"] == "Llama-2-70b-hf" and r["num_tensor_parallel_workers"] == "2"}  # fmt: skip
    other = lambda T: sum(float(ops[T][k + "_ms"]) for k in  # noqa: E731
                          ("input_layernorm", "post_attention_layernorm", "attn_rope", "mlp_act", "add"))  # fmt: skip
    rows, i = [], 0
    for r in _read_csv("vidur_attention_a100.csv"):
        decode = r["is_prefill"] == "False"
        if decode:
            b, c = int(r["batch_size"]), int(r["kv_cache_size"])
            if b not in (1, 2, 4, 8, 16, 32, 48, 64, 96, 128) or c not in (256, 512, 1024, 2048, 4096) or b not in ops:
                continue
            value = float(r["attn_decode_ms"]) + float(r["attn_reshape_ms"]) + other(b)
            pred, what = _layer_pred(b, b * (c + 1), b * c), f"70B TP2 A100 attn+elementwise decode B{b} ctx {c}"
        else:
            n = int(r["prefill_chunk_size"])
            if int(r["kv_cache_size"]) != 0 or n not in (128, 256, 512, 1024, 2048, 4096) or n not in ops:
                continue
            value = float(r["attn_prefill_ms"]) + float(r["attn_reshape_ms"]) + other(n)
            pred, what = _layer_pred(n, n * (n + 1) // 2, 0), f"70B TP2 A100 attn+elementwise prefill {n}"
        rows.append(Row(f"vl-{i}", what, value, "ms", pred, "vidur-layer", "Vidur attention.csv + mlp.csv", i % 2 == 1))
        i += 1
    return rows


def _allreduce_rows() -> list[Row]:
    data = _read_csv("vidur_all_reduce.csv")
    rows = []
    for system in ("a100_dgx", "h100_dgx"):
        link = read_preset_data("hardware", VIDUR_SYSTEM[system])["interconnect_gb_per_s"] * 1e9
        for t in (2, 4, 8):
            sel = [r for r in data if r["system"] == system and int(r["num_workers"]) == t and int(r["devices_per_node"]) == t]
            for k in range(11, 27):  # 2 KiB .. 64 MiB: the median over profiled sizes within a factor sqrt(2)
                near = [r for r in sel if 2 ** (k - 0.5) <= int(r["size"]) < 2 ** (k + 0.5)]  # (single runs jitter 2x)
                if not near:  # profiled sizes step by 8 KiB: none between 2.9 and 5.8 KiB
                    continue
                size = int(np.median([int(r["size"]) for r in near]))
                value = float(np.median([float(r["all_reduce_ms"]) for r in near]))

                def pred(cal, size=size, t=t, link=link):
                    return (2 * (t - 1) / t * size / (link * cal["interconnect_efficiency"]) + cal["allreduce_latency_us"] * 1e-6) * 1e3

                rows.append(Row(f"ar-{system}-tp{t}-{size}", f"all-reduce {size / 2**20:.3g} MiB TP{t} {system}",
                                value, "ms", pred, "vidur-allreduce", "Vidur all_reduce.csv", k % 2 == 1))  # fmt: skip
    return rows


# ---------------------------------------------------------------- published end-to-end rows
def _config(r: dict[str, str], cal: dict[str, float]) -> SimConfig | None:
    gpu = GPU_PRESETS.get(r["gpu"])
    model = MODEL_PRESETS.get(r["model"])
    dt = DTYPES.get(r["dtype"])
    if gpu is None or model is None or dt is None:
        return None
    hw = read_preset_data("hardware", gpu[0]) | gpu[1] | {"num_gpus": int(r["parallelism"].removeprefix("TP") or 1)}
    m = read_preset_data("models", model) | {"weight_dtype": dt[0]}
    small = {"dist": "fixed", "mean": 16, "min": 1, "max": 16}
    return SimConfig.model_validate({
        "hardware": hw, "model": m, "kv_cache": {"kv_dtype": dt[1]},
        "workload": {"num_requests": 1, "prompt_tokens": small, "output_tokens": small},
        "scheduler": {"max_num_seqs": 1, "max_num_batched_tokens": 16}, "calibration": cal,
    })  # fmt: skip


def _static_batch_time_s(cm: CostModel, batch: int, isl: int, osl: int) -> float:
    """gptSessionBenchmark: prefill B×ISL in one pass, then OSL−1 lock-step decode steps."""
    pre, *_ = cm.tick(batch * isl, batch, batch * isl * (isl + 1) // 2, 0, batch)
    ctx = isl + np.arange(1, osl)  # (OSL-1,) context before each decode step
    dec, *_ = cm.tick(batch, batch, batch * (ctx + 1), batch * ctx, batch)
    return float(pre) + float(np.sum(dec))


def _trtllm_bench_output_tok_s(r: dict[str, str], cal: dict[str, float]) -> float:
    """trtllm-bench throughput: all requests queued at once, fixed ISL/OSL; total output tokens / makespan."""
    isl, osl = int(r["input_len"]), int(r["output_len"])
    gpu = GPU_PRESETS[r["gpu"]][0]
    fixed = lambda n: {"dist": "fixed", "mean": n, "min": 1, "max": n}  # noqa: E731
    cfg = config_from_dict({
        "hardware": {"preset": gpu, "num_gpus": int(r["num_gpus"])},
        "model": {"preset": MODEL_PRESETS[r["model"]], "weight_dtype": "fp8", "max_model_len": isl + osl},
        "engine": "tensorrt-llm-pytorch", "kv_cache": {"kv_dtype": "fp8"}, "calibration": cal,
        "workload": {"num_requests": int(r["batch_or_concurrency"]), "arrival": {"process": "offline"},
                     "prompt_tokens": fixed(isl), "output_tokens": fixed(osl)},
        "limits": {"max_sim_time_s": 1e6, "num_recorded_batches": 0},
    })  # fmt: skip
    return run_simulation(cfg).summary.output_tokens_per_s


# sglang.bench_serving's ShareGPT sample: mean output 194 tokens (the table's output / request throughput);
# prompts as vLLM's ShareGPT sample (K578: mean 202). Lognormal means 210 / 204 give those after clipping.
BENCH_SERVING_SHAREGPT = {
    "prompt_tokens": {"dist": "lognormal", "mean": 210, "min": 4, "max": 1024, "sigma": 1.0},
    "output_tokens": {"dist": "lognormal", "mean": 204, "min": 4, "max": 1024, "sigma": 1.0},
}
BENCH_ENGINES = {"S": ("sglang", {1: 0.88, 4: 0.85}), "V": ("vllm-v0", {1: 0.9, 4: 0.9}), "W": ("vllm-v1", {1: 0.9, 4: 0.9})}
# A benchmark's measured value is one run on its own sample of ShareGPT; the model's is the mean over these seeds' draws
# of lengths and arrivals, so that no one draw decides a fit. On seed 0 alone vLLM V1's rows read 10-17 points higher
# than on seeds 1-4 (its draw has longer requests; `scripts/seed_spread.py`), and its fit moved with it: 1.5 ms a tick
# on seed 0, 2.5 ms on the mean of five (session 75).
BENCH_SEEDS = (0, 1, 2, 3, 4)


def offered_rate_per_s(r: dict[str, str]) -> float:
    """A serving row's Poisson arrival rate, from its workload text ("ShareGPT, Poisson request rate 8/s")."""
    return float(r["workload"].split("request rate ")[1].split("/")[0])


def _bench_serving(r: dict[str, str], cal: dict[str, float], seed: int = 0) -> float:
    """sglang.bench_serving (or vLLM's benchmark_serving, which it copies) on ShareGPT: Poisson arrivals at the
    row's rate (or all at once), the row's metric, on `seed`'s draw of lengths and arrivals. The profiles are fitted and
    graded on the mean over `BENCH_SEEDS` (`_bench_serving_mean`); `scripts/seed_spread.py` prints each seed's."""
    engine, util = BENCH_ENGINES[r["section"]]
    tp = int(r["num_gpus"])
    offline = "request rate inf" in r["workload"] or "all requests at once" in r["workload"]
    if offline and r["section"] == "S":
        util = {1: 0.88, 4: 0.88}  # the offline SGLang runs set --mem-frac 0.88 at TP4 too
    arrival = {"process": "offline"} if offline else {
        "process": "poisson", "rate_per_s": offered_rate_per_s(r)}
    cfg = config_from_dict({
        "hardware": {"preset": GPU_PRESETS[r["gpu"]][0], "num_gpus": tp},
        "model": {"preset": MODEL_PRESETS[r["model"]], "max_model_len": 4096}, "engine": engine,
        "kv_cache": {"gpu_memory_utilization": util[tp]}, "calibration": cal, "seed": seed,
        "workload": {"preset": "chat", "num_requests": int(r["batch_or_concurrency"]), "arrival": arrival,
                     **BENCH_SERVING_SHAREGPT},
        "limits": {"max_sim_time_s": 1e6, "num_recorded_batches": 0},
    })  # fmt: skip
    res = run_simulation(cfg)
    s = res.summary
    if r["metric"].startswith("mean E2E latency"):
        return float(np.nanmean(res.requests.e2e_s))
    if r["metric"].startswith("median TTFT"):
        return s.ttft_p50_s * 1e3
    if r["metric"].startswith("median TPOT"):
        return s.tpot_p50_s * 1e3
    return s.output_tokens_per_s


def _bench_serving_mean(r: dict[str, str], cal: dict[str, float]) -> float:
    """A `bench_serving` row's prediction: the mean of `_bench_serving` over `BENCH_SEEDS`."""
    return float(np.mean([_bench_serving(r, cal, seed) for seed in BENCH_SEEDS]))


def _profile_of(r: dict[str, str]) -> str | None:
    return next((p for p, sec in PROFILE_SECTIONS.items() if r["section"] == sec), None)


def build_rows(raw: list[dict[str, str]]) -> list[Row]:
    rows: list[Row] = _gemm_rows() + _layer_rows() + _allreduce_rows()
    for r in raw:
        rid, metric, wl = r["id"], r["metric"], r["workload"]
        try:
            value = float(r["value"])
        except ValueError:
            continue
        profile = _profile_of(r)
        if r["trust"] == "C" or profile is None or _config(r, CalibrationConfig().model_dump()) is None:
            continue
        held_out = rid not in PROFILE_FIT_ROWS[profile]
        src = r["source"]  # (whole: the report writes it last; cut to 48 characters it told two sources apart by a letter)
        # (the GPU's name without its notes: cut at 9 characters, "H100-SXM-80GB" read "H100-SXM-")
        label = f"{r['model']} {r['gpu'].split(' (')[0]} {r['parallelism']} {r['dtype'][:4]}"
        b = int(r["batch_or_concurrency"] or 1)
        isl = int(r["input_len"] or 0)
        fn: Callable[[dict[str, float]], float] | None = None
        if metric.endswith(("(bench_serving)", "benchmark_serving)")):  # sglang.bench_serving, vLLM benchmark_serving
            fn = lambda cal, r=r: _bench_serving_mean(r, cal)  # noqa: E731
            what = f"{label} {r['framework']} {metric.split(' (')[0]}, {r['workload'].split(', ')[1].split(' (')[0]}"
        elif metric == "offline output throughput (trtllm-bench)":
            fn = lambda cal, r=r: _trtllm_bench_output_tok_s(r, cal)  # noqa: E731
            what = f"{label} trtllm-bench {isl}/{r['output_len']}"
        elif metric.startswith("batch latency (static batch"):  # FasterTransformer: the whole batch's latency
            osl = int(r["output_len"])
            fn = lambda cal, r=r, b=b, isl=isl, osl=osl: _static_batch_time_s(CostModel(_config(r, cal)), b, isl, osl) * 1e3  # noqa: E731
            what = f"{label} static B{b} {isl}/{osl} latency"
        elif metric.startswith("output throughput"):
            osl = int(r["output_len"])
            per = int(r["num_gpus"]) if "per GPU" in metric else 1  # TensorRT-LLM 0.6.1 tables report tok/s per GPU
            fn = lambda cal, r=r, b=b, isl=isl, osl=osl, per=per: b * osl / _static_batch_time_s(CostModel(_config(r, cal)), b, isl, osl) / per  # noqa: E731
            what = f"{label} static B{b} {isl}/{osl} throughput" + (" per GPU" if per > 1 else "")
        elif metric.startswith("first-token latency") or metric == "prefill iteration time" or (
            metric == "batch execution time" and wl.startswith("prefill-only")
        ):
            fn = lambda cal, r=r, isl=isl: CostModel(_config(r, cal)).prefill_time_s(isl) * 1e3  # noqa: E731
            what = f"{label} prefill {isl} tok"
        elif metric.startswith("decode tokens/s"):
            ctx = 5 + 100  # gpt-fast: 5-token prompt, 200 new tokens: mean context ~105
            fn = lambda cal, r=r, ctx=ctx: 1.0 / CostModel(_config(r, cal)).decode_time_s(1, ctx)  # noqa: E731
            what = f"{label} batch-1 decode"
        elif metric == "decode iteration time" or (metric == "batch execution time" and wl.startswith("decode")):
            fn = lambda cal, r=r, b=b, isl=isl: CostModel(_config(r, cal)).decode_time_s(b, isl) * 1e3  # noqa: E731
            what = f"{label} decode B{b} ctx {isl}"
        elif metric.startswith("total prefill time"):
            chunk = int(wl.split("chunks of ")[1].split()[0])

            def fn(cal, r=r, isl=isl, chunk=chunk):
                cm = CostModel(_config(r, cal))
                return sum(cm.prefill_time_s(min(chunk, isl - c), c) for c in range(0, isl, chunk)) * 1e3

            what = f"{label} prefill {isl} in chunks of {chunk}"
        elif metric == "batch execution time" and wl.startswith("hybrid"):
            def fn(cal, r=r):  # 1,021 prefill tokens + 3 decodes at context 1,024 in one batch
                d, *_ = CostModel(_config(r, cal)).tick(1021 + 3, 4, 1021 * 1022 // 2 + 3 * 1025, 3 * 1024, 4)
                return float(d) * 1e3

            what = f"{label} hybrid 1021 prefill + 3 decode"
        if fn is not None:
            unit = "tok/s" if "tok/s" in r["unit"] or metric.startswith(("output throughput", "decode tokens/s")) else (
                "s" if r["unit"] == "s" else "ms")
            rows.append(Row(rid, what, value, unit, fn, profile, src, held_out))
    return rows


# ---------------------------------------------------------------- fitting
def abs_pct_error(pred: float, measured: float) -> float:
    return abs(pred - measured) / measured * 100


def _log_loss(rows: list[Row], cal: dict[str, float]) -> float:
    return float(np.mean([abs(math.log(row.predict(cal) / row.measured)) for row in rows]))


def _grid_fit(rows: list[Row], cal: dict[str, float], grids: dict[str, np.ndarray], rounds: int = 3,
              loss: Callable[[dict[str, float]], float] | None = None) -> dict[str, float]:
    """Coordinate descent over per-parameter grids, minimising the mean |log error| (`loss`, default `_log_loss` on
    `rows`): at most `rounds` sweeps, stopping early once a sweep changes nothing (a coordinate-wise minimum on the
    grids)."""
    loss = loss or functools.partial(_log_loss, rows)
    cal = dict(cal)
    for _ in range(rounds):
        before = dict(cal)
        for name, grid in grids.items():
            losses = [(loss(cal | {name: float(v)}), float(v)) for v in grid]
            cal[name] = min(losses)[1]
        if cal == before:
            break
    return cal


def _product_then_descent(rows: list[Row], cal: dict[str, float], grids: dict[str, np.ndarray], stride: int = 2,
                          rounds: int = 20) -> dict[str, float]:
    """The best point of the grids' product taken at every `stride`-th value, then coordinate descent on the whole grids
    from it (`_grid_fit`). Descent alone stops at the first coordinate-wise minimum on its path: from compiled-pytorch's
    constants it left vllm-v0 at 5.0 ms a tick, 5 us a sequence and 5 us an all-reduce (fit loss 0.070), where the
    grid's best point, 2.5 ms, 25 us and 20 us, has 0.009 (an exhaustive search of its 2,431 points, session 74)."""
    names = list(grids)
    # Each point's loss is simulated once (five seeds a row: seconds a point): the descent revisits its current point in
    # every sweep and the product's points on its way. Keyed by the grids' values alone, since the rest of `cal` is
    # fixed here; the memo lives for this call only (a few thousand floats).
    memo: dict[tuple[float, ...], float] = {}

    def loss(point_cal: dict[str, float]) -> float:
        key = tuple(point_cal[name] for name in names)
        if key not in memo:
            memo[key] = _log_loss(rows, point_cal)
        return memo[key]

    coarse = [grid[::stride] for grid in grids.values()]
    best = min(itertools.product(*coarse), key=lambda point: loss(cal | dict(zip(names, map(float, point)))))
    return _grid_fit(rows, cal | dict(zip(names, map(float, best))), grids, rounds=rounds, loss=loss)


def _memory_efficiency_grid(hbm_scales: Iterable[float]) -> np.ndarray:
    """The memory_efficiency values a fit tries. A profile runs on every GPU, at memory_efficiency x that GPU's
    hbm_efficiency_scale of its datasheet bandwidth: the grid stops where the largest scale would pass the datasheet
    (the grid's old top, 0.95, ran the profiles fitted to it at 1.016 x an H100's)."""
    grid = np.arange(0.50, 0.96, 0.01)
    return grid[grid <= max_memory_efficiency(max(hbm_scales))]


def _fit_rows(rows: list[Row], group: str) -> list[Row]:
    return [r for r in rows if r.group == group and not r.held_out]


def fit(rows: list[Row], families: tuple[str, ...] | None = None) -> dict[str, dict[str, float]]:
    """Returns {profile name: calibration values}; 'default' is what CalibrationConfig's defaults must be.

    `families`: the engine families to fit (default: all; the simulated ones take minutes)."""
    cal = CalibrationConfig().model_dump()
    # A100 and H100 stream different fractions of their datasheet bandwidth: a scale per GPU (hardware presets'
    # hbm_efficiency_scale), A100's fitted and H100's its inverse, so the profiles' memory_efficiency is their mean.
    gemm_rows = _fit_rows(rows, "vidur-gemm")
    cal |= {"hbm_scale_a100": _hbm_scale({}, "a100")}
    cal["hbm_scale_h100"] = 1 / cal["hbm_scale_a100"]
    for _ in range(20):
        before = dict(cal)
        memory_grid = _memory_efficiency_grid((cal["hbm_scale_a100"], cal["hbm_scale_h100"]))
        cal = _grid_fit(gemm_rows, cal, {"gemm_efficiency": np.arange(0.50, 0.96, 0.01), "memory_efficiency": memory_grid,
                                         "gemm_fixed_us": np.arange(0, 20.1, 0.5)}, rounds=20)  # fmt: skip
        # (and no scale that would take the fitted memory_efficiency past the datasheet)
        losses = [(_log_loss(gemm_rows, cal | {"hbm_scale_a100": float(a), "hbm_scale_h100": float(1 / a)}), float(a))
                  for a in np.arange(0.80, 1.001, 0.005) if cal["memory_efficiency"] <= max_memory_efficiency(max(a, 1 / a))]
        cal["hbm_scale_a100"] = min(losses)[1]
        cal["hbm_scale_h100"] = 1 / cal["hbm_scale_a100"]
        if cal == before:
            break
    scales = {"a100": round(cal.pop("hbm_scale_a100"), 4), "h100": round(cal.pop("hbm_scale_h100"), 4)}
    cal = _grid_fit(_fit_rows(rows, "vidur-layer"), cal | {"hbm_scale_a100": scales["a100"]}, {"attention_efficiency": np.arange(0.05, 0.61, 0.01),
                                                          "layer_fixed_us": np.arange(0, 101, 1.0)}, rounds=20)  # fmt: skip
    cal.pop("hbm_scale_a100")
    cal = _grid_fit(_fit_rows(rows, "vidur-allreduce"), cal, {"interconnect_efficiency": np.arange(0.30, 1.001, 0.02),
                                                              "allreduce_latency_us": np.arange(0, 80, 1.0)}, rounds=20)  # fmt: skip
    gpu = {k: cal[k] for k in GPU_CONSTANTS}
    out: dict[str, dict[str, float]] = {}
    for profile in families or tuple(PROFILE_SECTIONS):
        if profile in SIMULATED_FAMILIES:
            continue
        grids = {"tick_overhead_ms": np.arange(0, 60.1, 0.1), "per_seq_overhead_us": np.arange(0, 2001, 5.0)}
        # Fused-kernel engines do not pay the eager per-layer kernel time Vidur measured: refit it per family.
        grids["layer_fixed_us"] = np.arange(0, 51, 1.0)
        # Engines' own kernels stream weights and KV at their own fraction of HBM bandwidth.
        grids["memory_efficiency"] = _memory_efficiency_grid(scales.values())
        if profile != "compiled-pytorch":  # its batch-1 decode rows carry almost no attention work
            grids["attention_efficiency"] = np.arange(0.01, 0.61, 0.01)
        if profile == "fastertransformer":  # TP2 and TP8 fit rows: its own (NCCL) all-reduce latency
            grids["allreduce_latency_us"] = np.arange(0, 80, 1.0)
        if profile == "tensorrt-llm-classic":
            grids["fp8_gemm_efficiency"] = np.arange(0.20, 0.96, 0.01)
            # its masked-MHA decode kernel re-reads KV per query head (sim_core/costmodel.py): the cost of the re-reads
            grids["gqa_kv_reread_fraction"] = np.arange(0.0, 1.001, 0.05)
        if profile == "compiled-pytorch":  # batch-1 rows only: a per-sequence cost is not identifiable;
            grids.pop("per_seq_overhead_us")  # CUDA-graph collectives: all-reduce latency refitted on a TP2 row
            grids["allreduce_latency_us"] = np.arange(0, 40, 1.0)
        # every family starts from the operator-fitted constants and zero CPU costs (not from stored values): the fit
        # is a function of the data alone
        start = cal | gpu | {"profile": profile, "tick_overhead_ms": 0.0, "per_seq_overhead_us": 0.0,
                             "gqa_kv_reread_fraction": 0.0}
        if profile == "fastertransformer":
            # Its masked-MHA decode kernel is the one TensorRT-LLM 0.5 inherited (one thread block per query head); its
            # rows are all MHA models, so the GQA re-read cost comes from the TensorRT-LLM classic fit.
            classic = out.get("tensorrt-llm-classic") or profile_calibration("tensorrt-llm-classic")
            start["gqa_kv_reread_fraction"] = classic["gqa_kv_reread_fraction"]
        if profile == "compiled-pytorch":  # first stage: kernel and CPU costs as if weights were 16-bit
            start["dequant_flops_per_weight"] = 0.0
        fitted = _grid_fit(_fit_rows(rows, profile), start, grids, rounds=20)
        if profile == "compiled-pytorch":
            # Second stage: its INT8/INT4 weight-only fit rows (the only such rows in the set) fit the dequantisation
            # cost with the first stage's constants held (the BF16 kernel and CPU costs other families start from).
            quantised = [r for r in _fit_rows(rows, profile) if "INT" in r.what]
            fitted = _grid_fit(quantised, fitted, {"dequant_flops_per_weight": np.arange(0, 301, 5.0)}, rounds=1)
        out[profile] = {k: (round(v, 4) if isinstance(v, float) else v) for k, v in fitted.items()}
    for profile in families or tuple(PROFILE_SECTIONS):
        if profile in SIMULATED_FAMILIES:
            start = (out.get("compiled-pytorch") or profile_calibration("compiled-pytorch")) | {"profile": profile}
            # (a coarse product of the grids, then coordinate descent to a minimum: descent alone stopped where its path
            # first met one, far from the grid's best for vllm-v0; `_product_then_descent`)
            fitted = _product_then_descent(_fit_rows(rows, profile), start, SIMULATED_GRIDS[profile])
            out[profile] = {k: (round(v, 4) if isinstance(v, float) else v) for k, v in fitted.items()}
    # default: the operator-fitted GPU constants with the CPU costs (and FP8 GEMM efficiency) of DEFAULT_FAMILY
    family = out.get(DEFAULT_FAMILY) or profile_calibration(DEFAULT_FAMILY)
    out["default"] = cal | gpu | {"profile": "default", "tick_overhead_ms": family["tick_overhead_ms"],
                                  "per_seq_overhead_us": family["per_seq_overhead_us"],
                                  "fp8_gemm_efficiency": family["fp8_gemm_efficiency"]}  # fmt: skip
    out["default"] = {k: (round(v, 4) if isinstance(v, float) else v) for k, v in out["default"].items()}
    # the hardware presets' hbm_efficiency_scale (A100 presets and H100 SXM; presets/hardware/*.json)
    out["hbm_efficiency_scale"] = scales
    return out


def profile_calibration(name: str) -> dict[str, Any]:
    """A calibration profile's values as stored in presets/calibration/<name>.json ('default' = CalibrationConfig())."""
    if name == "default":
        return CalibrationConfig().model_dump()
    data = json.loads((PROFILES_DIR / f"{name}.json").read_text())
    return CalibrationConfig.model_validate({k: v for k, v in data.items() if k != "description"}).model_dump()


# ---------------------------------------------------------------- evaluation and report
def evaluate(rows: list[Row]) -> list[dict[str, Any]]:
    cals = {p: profile_calibration(p) for p in PROFILE_SECTIONS} | {"default": CalibrationConfig().model_dump()}
    out = []
    for row in rows:
        profile = row.group if row.group in PROFILE_SECTIONS else "default"
        pred = row.predict(cals[profile])
        out.append({"id": row.id, "what": row.what, "measured": row.measured, "predicted": pred, "unit": row.unit,
                    "error_pct": abs_pct_error(pred, row.measured), "fit": not row.held_out, "group": row.group,
                    "profile": profile if row.group in PROFILE_SECTIONS else "operators", "source": row.source})  # fmt: skip
    return out


def error_stats(results: list[dict[str, Any]], engine_only: bool = False) -> tuple[int, float, float]:
    """(rows, median, p90) absolute % error over held-out rows (engine-level rows only when asked)."""
    errs = np.array([r["error_pct"] for r in results if not r["fit"] and (not engine_only or r["profile"] != "operators")])
    return int(errs.size), float(np.median(errs)), float(np.percentile(errs, 90))


@functools.lru_cache(maxsize=1)  # one small tuple: the shipped data never changes while running
def engine_error_band() -> tuple[int, float, float]:
    """(rows, median, p90) absolute % error over the held-out published engine-level rows priced in closed
    form (under a second; the simulated families' rows are left to `python -m sim_core validate`).
    What other modules quote as the cost model's error band (e.g. the planner)."""
    rows = [r for r in build_rows(load_rows()) if r.group in PROFILE_SECTIONS and r.group not in SIMULATED_FAMILIES]
    return error_stats(evaluate(rows), engine_only=True)


# What a held-out row measures, in the order `validate` prints them: the closed-form rows have no arrivals and no
# queue (a static batch, one iteration, batch-1 decode), so their error is the cost model's; an offline run is
# scheduled but has no arrivals; the serving rows' latencies include queueing, which the scheduling rules decide.
ROW_KINDS = ("static batch or one iteration (closed form)", "offline throughput (simulated)",
             "serving latency under arrivals (simulated)")  # fmt: skip


def row_kind(result: dict[str, Any]) -> str:
    """Which of ROW_KINDS an `evaluate` result is (a review: the held-out median was three-quarters static batches,
    and the serving rows, which scheduling decides, err twice as much)."""
    if result["profile"] not in SIMULATED_FAMILIES:
        return ROW_KINDS[0]
    return ROW_KINDS[1] if result["unit"] == "tok/s" else ROW_KINDS[2]


def error_stats_by_kind(results: list[dict[str, Any]]) -> dict[str, tuple[int, float, float]]:
    """ROW_KINDS -> (rows, median, p90) absolute % error over its held-out published engine-level rows."""
    engine = [r for r in results if r["profile"] != "operators"]
    return {kind: error_stats(sel) for kind in ROW_KINDS if (sel := [r for r in engine if row_kind(r) == kind and not r["fit"]])}


def summary_table(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (profile, source): fit rows and held-out rows with their median and p90 absolute % error."""
    keys = sorted({(r["profile"], r["source"]) for r in results})
    table = []
    for profile, source in keys:
        sel = [r for r in results if r["profile"] == profile and r["source"] == source]
        entry: dict[str, Any] = {"profile": profile, "source": source}
        for split, want in (("fit", True), ("held_out", False)):
            errs = np.array([r["error_pct"] for r in sel if r["fit"] == want])
            entry[f"{split}_n"] = int(errs.size)
            entry[f"{split}_median"] = float(np.median(errs)) if errs.size else float("nan")
            entry[f"{split}_p90"] = float(np.percentile(errs, 90)) if errs.size else float("nan")
        table.append(entry)
    return table


def summary_lines(table: list[dict[str, Any]]) -> list[str]:
    """The report's table of `summary_table`: each profile and source's fit and held-out errors, the source last and
    whole (cut to 50 characters, "Figure 2 data (d" and "(p" told two of Sarathi-Serve's apart by one letter, a review);
    a split without rows has no error, "–" (it printed "nan")."""
    pct = lambda v: f"{v:6.1f}" if math.isfinite(v) else f"{'–':>6s}"  # noqa: E731
    return ["", "Absolute error per profile and source, %:",
            f"{'profile':24s} {'fit n':>5s} {'median':>6s} {'p90':>6s} | {'held-out n':>10s} {'median':>6s} {'p90':>6s}  source",
            *(f"{e['profile']:24s} {e['fit_n']:5d} {pct(e['fit_median'])} {pct(e['fit_p90'])} | "
              f"{e['held_out_n']:10d} {pct(e['held_out_median'])} {pct(e['held_out_p90'])}  {e['source']}" for e in table)]  # fmt: skip


def main(fit: bool = False) -> int:
    rows = build_rows(load_rows())
    if fit:
        for name, values in fit_fn(rows).items():
            where = ("sim_core/config.py CalibrationConfig defaults" if name == "default" else
                     "presets/hardware/a100-*.json and h100-sxm.json" if name == "hbm_efficiency_scale" else
                     f"presets/calibration/{name}.json")  # fmt: skip
            print(f"Profile {name} ({where}):")
            print(json.dumps(values, indent=2))
        return 0
    results = evaluate(rows)
    shown = [r for r in results if r["profile"] != "operators"]  # hundreds of operator rows: summarised below
    # the row column as wide as its longest row (cut at a fixed 54 characters, "median TTFT" and "median TPOT" rows
    # both read "median T")
    width = max((len(r["what"]) for r in shown), default=3)
    print(f"{'id':10s} {'row':{width}s} {'measured':>10s} {'predicted':>10s} {'unit':6s} {'error':>7s}")
    for r in shown:
        tag = "  (fit)" if r["fit"] else ""
        print(f"{r['id']:10s} {r['what']:{width}s} {r['measured']:10.4g} {r['predicted']:10.4g} {r['unit']:6s} {r['error_pct']:6.1f}%{tag}")
    print(f"The rows, by id, with their sources and trust grades: {MEASUREMENTS_FILE_SHOWN}")
    print("\n".join(summary_lines(summary_table(results))))
    n, med, p90 = error_stats(results)
    ne, mede, p90e = error_stats(results, engine_only=True)
    print(f"\nHeld-out rows, all: {n}; absolute error median {med:.1f} %, p90 {p90:.1f} %")
    print(f"Held-out rows, engine-level (published): {ne}; median {mede:.1f} %, p90 {p90e:.1f} % (target: median <= 8 %, p90 <= 20 %)")
    for kind, (nk, medk, p90k) in error_stats_by_kind(results).items():
        print(f"  {kind}: {nk}; median {medk:.1f} %, p90 {p90k:.1f} %")
    from sim_core.cluster.measured_runs import compare_all, format_table

    print("\nDistServe's measured serving runs (OPT-13B, A100-80GB, ShareGPT), replayed request by request "
          "(sim_core/cluster/measured_runs.py):")
    print("\n".join(format_table(compare_all())))
    print("Outputs are modelled by a calibrated roofline, not measured.")
    return 0


fit_fn = fit
