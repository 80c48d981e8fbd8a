"""Replay published measurements (../shared/calibration) through the cost model.

`python -m sim_core validate` prints predicted vs measured for every row the model can express,
then the median and p90 absolute % error over the rows NOT used for fitting.
`python -m sim_core validate --fit` refits the calibration and prints the values to store.

Fitting split (published_measurements.md "How to read / use these" suggests fitting on operator
rows and testing on end-to-end rows):
  * gemm_efficiency, memory_efficiency: Vidur per-layer linear-op timings, rows I522–I546;
  * interconnect_efficiency, allreduce_latency_us: Vidur all-reduce timings, rows I547–I556;
  * attention_efficiency, fp8_gemm_efficiency, tick_overhead_ms, per_seq_overhead_us (default, "optimised engine"
    profile): TensorRT-LLM v0.5 rows A005, A021 (batch 64, 128/128), A031, A039 (batch 1,
    128 tokens), A032, A040 (batch 1, 2,048 tokens);
  * tick_overhead_ms, per_seq_overhead_us of the Sarathi-Serve research-engine profile
    (presets/calibration/sarathi-serve-artifact.json): rows H487 and H494 (decode batch 1 and 128).
Test rows: every other A row (static-batch throughput, first-token latency), the gpt-fast batch-1
decode rows E425–E437 (A100 at its 330 W cap: 1,700 GB/s empirical peak, per the source), and every
other Sarathi-Serve H row (decode, prefill, chunked prefill, hybrid batches).
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

from sim_core.config import CalibrationConfig, SimConfig
from sim_core.costmodel import ACT_BYTES, CostModel, ModelShape
from sim_core.presets import PRESETS_DIR, read_preset_data

CALIBRATION_CSV = Path(__file__).resolve().parent.parent.parent / "shared" / "calibration" / "published_measurements.csv"
RESEARCH_PROFILE = PRESETS_DIR / "calibration" / "sarathi-serve-artifact.json"

FIT_ENGINE_ROWS = ("A005", "A021", "A031", "A039", "A032", "A040")
FIT_RESEARCH_ROWS = ("H487", "H494")

GPU_PRESETS = {
    "H100-SXM-80GB": ("h100-sxm", {}), "L40S-48GB": ("l40s", {}), "A100-SXM-80GB": ("a100-80gb", {}),
    "A100-SXM-80GB (330 W cap)": ("a100-80gb", {"hbm_bandwidth_gb_per_s": 1700}),
    "A100-80GB (DGX)": ("a100-80gb", {}), "H100-80GB (DGX)": ("h100-sxm", {}),
    "A100 DGX (NVSwitch)": ("a100-80gb", {}), "H100 DGX (NVSwitch)": ("h100-sxm", {}),
}  # fmt: skip
MODEL_PRESETS = {"GPT-J-6B": "gpt-j-6b", "Llama-2-7B": "llama-2-7b", "Llama-2-70B": "llama-2-70b",
                 "Yi-34B": "yi-34b", "Llama-3-8B": "llama-3.1-8b"}  # fmt: skip
DTYPES = {"FP8 (W+KV)": ("fp8", "fp8"), "FP16": ("fp16", "fp16"), "BF16": ("bf16", "bf16"),
          "INT8 weight-only": ("int8", "bf16"), "INT4 g32 weight-only": ("int4", "bf16")}  # fmt: skip


@dataclass(frozen=True)
class Row:
    id: str
    what: str
    measured: float
    unit: str
    predict: Callable[[dict[str, float]], float]  # calibration values -> predicted value
    group: str  # "ops", "allreduce", "engine", "research"


def load_rows(path: Path = CALIBRATION_CSV) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def _config(r: dict[str, str], cal: dict[str, float]) -> SimConfig | None:
    gpu = GPU_PRESETS.get(r["gpu"]) or (("a100-80gb-pcie", {}) if r["gpu"].startswith("A100-PCIe") else None)
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


def _linear_layer_time_s(cfg: SimConfig, tokens: int, cal: dict[str, float]) -> float:
    """One layer's QKV/O/MLP GEMMs on one GPU (Vidur's `mlp.csv` 'linear' ops) on the roofline."""
    shape, hw, m = ModelShape.of(cfg), cfg.hardware, cfg.model
    t = hw.num_gpus
    params = (shape.attn_params + shape.expert_params) / t
    flops = 2 * params * tokens
    q = m.num_heads * m.head_dim
    act = ACT_BYTES * tokens * (2 * m.hidden_size + 2 * q + 2 * m.num_kv_heads * m.head_dim + 2 * m.hidden_size + 3 * m.ffn_size) / t
    nbytes = params * 2 + act
    return max(flops / (hw.peak_tflops * 1e12 * cal["gemm_efficiency"]), nbytes / (hw.hbm_bandwidth_gb_per_s * 1e9 * cal["memory_efficiency"]))


def build_rows(raw: list[dict[str, str]]) -> list[Row]:
    rows: list[Row] = []
    for r in raw:
        rid, metric, wl = r["id"], r["metric"], r["workload"]
        try:
            value = float(r["value"])
        except ValueError:
            continue
        if r["trust"] == "C":
            continue
        if metric.startswith("all-reduce"):
            size = int(wl.split()[-2])
            t = int(r["parallelism"].removeprefix("TP"))
            gpu = GPU_PRESETS[r["gpu"]][0]
            link = read_preset_data("hardware", gpu)["interconnect_gb_per_s"] * 1e9

            def pred(cal, size=size, t=t, link=link):
                return (2 * (t - 1) / t * size / (link * cal["interconnect_efficiency"]) + cal["allreduce_latency_us"] * 1e-6) * 1e3

            rows.append(Row(rid, f"all-reduce {size / 2**20:g} MiB TP{t} {r['gpu'][:4]}", value, "ms", pred, "allreduce"))
            continue
        if _config(r, CalibrationConfig().model_dump()) is None:
            continue
        label = f"{r['model']} {r['gpu'][:9]} {r['parallelism']} {r['dtype'][:4]}"
        if metric.startswith("per-layer linear-op"):
            tokens = int(r["batch_or_concurrency"].split()[0])
            rows.append(Row(rid, f"{label} linear ops {tokens} tok", value, "ms",
                            lambda cal, r=r, n=tokens: _linear_layer_time_s(_config(r, cal), n, cal) * 1e3, "ops"))  # fmt: skip
            continue
        group = "research" if r["section"] == "H" else "engine"
        b = int(r["batch_or_concurrency"] or 1)
        isl = int(r["input_len"] or 0)
        if metric.startswith("output throughput"):
            osl = int(r["output_len"])
            fn = lambda cal, r=r, b=b, isl=isl, osl=osl: b * osl / _static_batch_time_s(CostModel(_config(r, cal)), b, isl, osl)  # noqa: E731
            rows.append(Row(rid, f"{label} static B{b} {isl}/{osl} throughput", value, "tok/s", fn, group))
        elif metric.startswith("first-token latency") or metric == "prefill iteration time":
            fn = lambda cal, r=r, isl=isl: CostModel(_config(r, cal)).prefill_time_s(isl) * 1e3  # noqa: E731
            rows.append(Row(rid, f"{label} prefill {isl} tok", value, "ms", fn, group))
        elif metric.startswith("decode tokens/s"):
            ctx = 5 + 100  # gpt-fast: 5-token prompt, 200 new tokens: mean context ~105
            fn = lambda cal, r=r, ctx=ctx: 1.0 / CostModel(_config(r, cal)).decode_time_s(1, ctx)  # noqa: E731
            rows.append(Row(rid, f"{label} batch-1 decode", value, "tok/s", fn, group))
        elif metric == "decode iteration time" or (metric == "batch execution time" and wl.startswith("decode")):
            fn = lambda cal, r=r, b=b, isl=isl: CostModel(_config(r, cal)).decode_time_s(b, isl) * 1e3  # noqa: E731
            rows.append(Row(rid, f"{label} decode B{b} ctx {isl}", value, "ms", fn, group))
        elif metric.startswith("total prefill time"):
            chunk = int(wl.split("chunks of ")[1].split()[0])

            def fn(cal, r=r, isl=isl, chunk=chunk):
                cm = CostModel(_config(r, cal))
                return sum(cm.prefill_time_s(min(chunk, isl - c), c) for c in range(0, isl, chunk)) * 1e3

            rows.append(Row(rid, f"{label} prefill {isl} in chunks of {chunk}", value, "ms", fn, group))
        elif metric == "batch execution time" and wl.startswith("hybrid"):
            def fn(cal, r=r):  # 1,021 prefill tokens + 3 decodes at context 1,024 in one batch
                d, *_ = CostModel(_config(r, cal)).tick(1021 + 3, 4, 1021 * 1022 // 2 + 3 * 1025, 3 * 1024, 4)
                return float(d) * 1e3

            rows.append(Row(rid, f"{label} hybrid 1021 prefill + 3 decode", value, "ms", fn, group))
        elif metric == "batch execution time" and wl.startswith("prefill-only"):
            fn = lambda cal, r=r, isl=isl: CostModel(_config(r, cal)).prefill_time_s(isl) * 1e3  # noqa: E731
            rows.append(Row(rid, f"{label} prefill {isl} tok", value, "ms", fn, group))
    return rows


def abs_pct_error(pred: float, measured: float) -> float:
    return abs(pred - measured) / measured * 100


def _log_loss(rows: list[Row], cal: dict[str, float]) -> float:
    return float(np.mean([abs(math.log(row.predict(cal) / row.measured)) for row in rows]))


def _grid_fit(rows: list[Row], cal: dict[str, float], grids: dict[str, np.ndarray], rounds: int = 3) -> dict[str, float]:
    """Coordinate descent over per-parameter grids, minimising the mean |log error|."""
    cal = dict(cal)
    for _ in range(rounds):
        for name, grid in grids.items():
            losses = [(_log_loss(rows, cal | {name: float(v)}), float(v)) for v in grid]
            cal[name] = min(losses)[1]
    return cal


def fit(rows: list[Row]) -> tuple[dict[str, float], dict[str, float]]:
    """Returns (default calibration, Sarathi-Serve research-engine calibration)."""
    cal = CalibrationConfig().model_dump()
    by = lambda g: [r for r in rows if r.group == g]  # noqa: E731
    cal = _grid_fit(by("ops"), cal, {"gemm_efficiency": np.arange(0.50, 0.96, 0.01), "memory_efficiency": np.arange(0.50, 0.96, 0.01)})
    cal = _grid_fit(by("allreduce"), cal, {"interconnect_efficiency": np.arange(0.30, 1.001, 0.02), "allreduce_latency_us": np.arange(0, 60, 1.0)})
    engine = [r for r in rows if r.id in FIT_ENGINE_ROWS]
    cal = _grid_fit(engine, cal, {"attention_efficiency": np.arange(0.10, 0.96, 0.01),
                                  "fp8_gemm_efficiency": np.arange(0.20, 0.96, 0.01), "tick_overhead_ms": np.arange(0, 5.01, 0.1),
                                  "per_seq_overhead_us": np.arange(0, 101, 2.0)})  # fmt: skip
    research_rows = [r for r in rows if r.id in FIT_RESEARCH_ROWS]
    research = _grid_fit(research_rows, cal, {"tick_overhead_ms": np.arange(0, 60.1, 0.5), "per_seq_overhead_us": np.arange(0, 2001, 10.0)})
    rnd = lambda d: {k: round(v, 4) for k, v in d.items()}  # noqa: E731
    return rnd(cal), rnd(research)


def research_calibration() -> dict[str, float]:
    data = json.loads(RESEARCH_PROFILE.read_text())
    return CalibrationConfig.model_validate({k: v for k, v in data.items() if k != "description"}).model_dump()


def evaluate(rows: list[Row]) -> list[dict[str, Any]]:
    default, research = CalibrationConfig().model_dump(), research_calibration()
    fit_ids = set(FIT_ENGINE_ROWS) | set(FIT_RESEARCH_ROWS)
    out = []
    for row in rows:
        cal = research if row.group == "research" else default
        pred = row.predict(cal)
        used_for_fit = row.group in ("ops", "allreduce") or row.id in fit_ids
        out.append({"id": row.id, "what": row.what, "measured": row.measured, "predicted": pred, "unit": row.unit,
                    "error_pct": abs_pct_error(pred, row.measured), "fit": used_for_fit})  # fmt: skip
    return out


def error_stats(results: list[dict[str, Any]]) -> tuple[int, float, float]:
    errs = np.array([r["error_pct"] for r in results if not r["fit"]])
    return int(errs.size), float(np.median(errs)), float(np.percentile(errs, 90))


def main(fit: bool = False) -> int:
    if not CALIBRATION_CSV.exists():
        print(f"error: calibration data not found at {CALIBRATION_CSV}")
        return 2
    rows = build_rows(load_rows())
    if fit:
        default, research = fit_fn(rows)
        print("Fitted default calibration (sim_core/config.py CalibrationConfig):")
        print(json.dumps(default, indent=2))
        print("Fitted Sarathi-Serve research-engine calibration (presets/calibration/sarathi-serve-artifact.json):")
        print(json.dumps(research, indent=2))
        return 0
    results = evaluate(rows)
    print(f"{'id':6s} {'row':58s} {'measured':>11s} {'predicted':>11s} {'unit':6s} {'error':>7s}")
    for r in results:
        tag = "  (fit)" if r["fit"] else ""
        print(f"{r['id']:6s} {r['what'][:58]:58s} {r['measured']:11.4g} {r['predicted']:11.4g} {r['unit']:6s} {r['error_pct']:6.1f}%{tag}")
    n, med, p90 = error_stats(results)
    print(f"\nHeld-out rows: {n}; absolute error median {med:.1f} %, p90 {p90:.1f} % (target: median <= 15 %, p90 <= 35 %)")
    print("Outputs are modelled by a calibrated roofline, not measured.")
    return 0


fit_fn = fit
