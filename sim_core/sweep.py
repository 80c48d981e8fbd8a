"""Sweeps of one knob and capacity search: the Sarathi-Serve / DistServe way of comparing systems.

Capacity is the highest request rate whose run finishes and meets the objective; runs share the
seed, so every point sees the same request lengths (workload.py draws lengths independently of
arrivals).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from sim_core.config import SimConfig
from sim_core.costmodel import MemoryPlanError
from sim_core.engine import run_simulation
from sim_core.presets import PresetError, config_from_dict
from sim_core.result import Summary

# knob name -> (dotted config path, label with unit, integer?)
SWEEP_KNOBS: dict[str, tuple[str, str, bool]] = {
    "rate": ("workload.arrival.rate_per_s", "arrival rate (requests/s)", False),
    "max_num_seqs": ("scheduler.max_num_seqs", "max batch size (sequences)", True),
    "chunk": ("scheduler.max_num_batched_tokens", "token budget / chunk (tokens)", True),
    "memory_gb": ("hardware.memory_gib", "GPU memory (GiB)", False),
    "bandwidth": ("hardware.hbm_bandwidth_gb_per_s", "HBM bandwidth (GB/s)", False),
    "tflops": ("hardware.peak_tflops", "peak compute (TFLOP/s)", False),
    "num_gpus": ("hardware.num_gpus", "GPUs (tensor parallel)", True),
    "kv_compression": ("kv_cache.kv_compression", "KV compression (fraction kept)", False),
}


def with_value(cfg: SimConfig, path: str, value: Any) -> SimConfig:
    data = cfg.model_dump(mode="python")
    node = data
    *parts, last = path.split(".")
    for p in parts:
        node = node[p]
    node[last] = value
    return config_from_dict(data, f"sweep point {path}={value}")


@dataclass(frozen=True)
class SweepPoint:
    value: float
    summary: Summary | None
    error: str | None


def sweep_values(knob: str, start: float, stop: float, num: int) -> list[float]:
    _, _, is_int = SWEEP_KNOBS[knob]
    vals = np.linspace(start, stop, num)
    return sorted({int(round(v)) for v in vals}) if is_int else [float(v) for v in vals]


def run_sweep(
    cfg: SimConfig, knob: str, values: Sequence[float], on_progress: Callable[[int, int], None] | None = None
) -> list[SweepPoint]:
    """One simulation per value; a value the config rejects becomes a point with its error."""
    path = SWEEP_KNOBS[knob][0]
    out = []
    for i, v in enumerate(values):
        try:
            out.append(SweepPoint(v, run_simulation(with_value(cfg, path, v)).summary, None))
        except (PresetError, MemoryPlanError) as err:
            out.append(SweepPoint(v, None, str(err)))
        if on_progress:
            on_progress(i + 1, len(values))
    return out


def meets_slo(s: Summary, cfg: SimConfig, attainment: float = 0.9) -> bool:
    """DistServe-style: the run finished and at least `attainment` of requests met TTFT and TPOT."""
    return s.stopped_reason is None and s.slo_attainment >= attainment


def capacity_from_sweep(points: Sequence[SweepPoint], cfg: SimConfig, attainment: float = 0.9) -> float | None:
    """Largest swept value such that it and every smaller value meet the objectives."""
    best = None
    for p in points:
        if p.summary is None or not meets_slo(p.summary, cfg, attainment):
            break
        best = p.value
    return best


def capacity_search(
    cfg: SimConfig, meets: Callable[[Summary], bool], lo: float, hi: float, iters: int = 10, max_rate: float = 1000.0
) -> tuple[float, list[tuple[float, Summary]]]:
    """Bisection on the arrival rate for the highest rate that `meets`. Returns (rate, probes);
    the rate is `max_rate` when even that meets the objective (a workload too small to saturate)."""
    probes = []

    def ok(rate: float) -> bool:
        s = run_simulation(with_value(cfg, "workload.arrival.rate_per_s", rate)).summary
        probes.append((rate, s))
        return meets(s)

    if not ok(lo):
        return 0.0, probes
    while ok(hi):
        if hi >= max_rate:
            return max_rate, probes
        lo, hi = hi, min(hi * 2, max_rate)
    for _ in range(iters):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if ok(mid) else (lo, mid)
    return lo, probes
