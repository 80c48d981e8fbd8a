"""Published disaggregation claims as trends: disaggregated prefill/decode vs co-located replicas on the
same GPUs, with the default calibration (nothing here is tuned to reproduce a claim).

Method (DistServe's "goodput"): capacity = the highest arrival rate at which >= 90 % of requests meet
both the TTFT and the TPOT objective (bisection, `sweep.capacity_search`). Co-located: N replicas of
one engine behind a round-robin router. Disaggregated: the best of every xPyD split of the same N
instances (x + y = N, same TP and engine), as DistServe's placement search and Dynamo's planner do.
The ratio compares capacity per GPU (or per unit of cost, for Splitwise's heterogeneous claim).

1. DistServe (OSDI'24, row K575): OPT-13B on A100-80GB, chatbot (ShareGPT-like lengths, K578),
   SLO TTFT 0.25 s / TPOT 0.1 s (DistServe's chatbot objectives), vs vLLM (prefill-first).
   Published: 2.0-3.41x goodput per GPU for the chatbot workload.
2. Splitwise (ISCA'24, row K576): Llama-2-70B on DGX machines (TP8), Azure conversation trace lengths
   (published_measurements.md §3: prompt mean 1,155, output mean 211), prompt machines H100, token
   machines A100 (Splitwise-HA) vs H100 co-located; cost per GPU H100 : A100 = 2.16 : 1 (the paper's
   ratio, md §1). Published: 1.4x throughput at 20 % lower cost, i.e. 1.75x throughput per cost.
3. Dynamo (ai-dynamo docs, "Disaggregated serving"): R1-Distilled Llama-70B FP8 on one node of
   H100s with vLLM, 3K input / 150 output tokens: 30 % more throughput per GPU from disaggregation
   on a single node (over 2x on two nodes). Here: Llama-3.1-70B FP8 (same architecture), 8 GPUs as
   4 instances of TP2, SLO TTFT 2 s / TPOT 50 ms (20 tokens/s per user).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from sim_core.config import SimConfig
from sim_core.presets import PRESETS_DIR, config_from_dict
from sim_core.result import Summary
from sim_core.sweep import capacity_search

ATTAINMENT = 0.9  # DistServe's goodput: the fraction of requests meeting both objectives
SHAREGPT_LIKE = {  # vLLM v0.6 blog sample of ShareGPT: mean 202 in / 179 out (K578)
    "prompt_tokens": {"dist": "lognormal", "mean": 202, "min": 4, "max": 1024, "sigma": 0.9},
    "output_tokens": {"dist": "lognormal", "mean": 179, "min": 4, "max": 1024, "sigma": 0.9},
}
AZURE_CONV = {  # Azure LLM inference trace 2023, conversation (md §3): prompt mean 1,155, output mean 211
    "prompt_tokens": {"dist": "lognormal", "mean": 1155, "min": 16, "max": 3000, "sigma": 0.6},
    "output_tokens": {"dist": "lognormal", "mean": 211, "min": 1, "max": 1000, "sigma": 0.9},
}
H100_PER_A100_COST = 2.16  # Splitwise's hardware cost ratio (md §1 notes)


@dataclass(frozen=True)
class Comparison:
    name: str
    claim: str
    claim_low: float  # published ratio (range), disaggregated / co-located, per GPU or per cost
    claim_high: float
    base: dict[str, Any]  # scenario dict without deployment
    num_instances: int
    link_gb_per_s: float
    decode_hardware: str | None = None  # a different GPU kind for the decode pool (Splitwise-HA)
    rate_lo: float = 0.5
    rate_hi: float = 8.0


@dataclass(frozen=True)
class ClusterTrend:
    comparison: Comparison
    colocated_capacity: float
    best_split: tuple[int, int]
    disaggregated_capacity: float
    ratio: float  # per GPU (same GPUs) or per cost

    @property
    def within_band(self) -> bool:
        """Same direction as the claim and within 1.5x of its published range."""
        return self.ratio > 1.0 and self.comparison.claim_low / 1.5 <= self.ratio <= self.comparison.claim_high * 1.5


def comparisons(num_requests: int = 300) -> list[Comparison]:
    wl = lambda extra: {"preset": "chat", "num_requests": num_requests, **extra}  # noqa: E731
    return [
        Comparison("DistServe: OPT-13B, 4x A100-80GB, chatbot, TTFT 0.25 s / TPOT 0.1 s",
                   "2.0-3.41x goodput per GPU vs vLLM (DistServe OSDI'24, row K575)", 2.0, 3.41,
                   {"hardware": "a100-80gb", "model": "opt-13b", "engine": "vllm-v0", "workload": wl(SHAREGPT_LIKE),
                    "slo": {"ttft_s": 0.25, "tpot_s": 0.1}}, 4, 300.0, rate_lo=2.0, rate_hi=16.0),
        Comparison("Splitwise-HA: Llama-2-70B, 4 DGX machines (TP8), conversation, H100 prompt / A100 token",
                   "1.4x throughput at 20% lower cost = 1.75x per cost (Splitwise ISCA'24, row K576)", 1.75, 1.75,
                   {"hardware": {"preset": "h100-sxm", "num_gpus": 8}, "model": "llama-2-70b", "engine": "vllm-v1",
                    "workload": wl(AZURE_CONV), "slo": {"ttft_s": 1.0, "tpot_s": 0.05}}, 4, 400.0,
                   decode_hardware="a100-80gb", rate_lo=1.0, rate_hi=16.0),
        Comparison("Dynamo: Llama-70B FP8, 8x H100 (4 instances of TP2), 3K in / 150 out, TTFT 2 s / TPOT 50 ms",
                   "1.3x throughput per GPU on one node (ai-dynamo docs, disaggregated serving)", 1.3, 1.3,
                   {"hardware": {"preset": "h100-sxm", "num_gpus": 2},
                    "model": {"preset": "llama-3.1-70b", "weight_dtype": "fp8", "max_model_len": 8192},
                    "engine": "vllm-v1", "kv_cache": {"kv_dtype": "fp8"},
                    "workload": wl({"prompt_tokens": {"dist": "fixed", "mean": 3000, "min": 1, "max": 3000},
                                    "output_tokens": {"dist": "fixed", "mean": 150, "min": 1, "max": 150}}),
                    "slo": {"ttft_s": 2.0, "tpot_s": 0.05}}, 4, 450.0, rate_lo=1.0, rate_hi=8.0),
    ]  # fmt: skip


def colocated_config(c: Comparison) -> SimConfig:
    return config_from_dict(c.base | {"deployment": {"replicas": c.num_instances}})


def disaggregated_config(c: Comparison, num_prefill: int) -> SimConfig:
    decode: dict[str, Any] = {"replicas": c.num_instances - num_prefill}
    if c.decode_hardware:
        hw = json.loads((PRESETS_DIR / "hardware" / f"{c.decode_hardware}.json").read_text())
        hw.pop("description", None)
        decode["hardware"] = hw | {"num_gpus": colocated_config(c).hardware.num_gpus}
    dis = {"prefill": {"replicas": num_prefill}, "decode": decode, "link": {"bandwidth_gb_per_s": c.link_gb_per_s}}
    return config_from_dict(c.base | {"deployment": {"disaggregation": dis}})


def _meets(s: Summary) -> bool:
    return s.stopped_reason is None and s.slo_attainment >= ATTAINMENT


def _cost(cfg: SimConfig, decode_hardware: str | None) -> float:
    """GPUs weighted by price (A100 = 1, H100 = 2.16) when the claim is per cost; else GPU count."""
    dep = cfg.deployment
    if decode_hardware is None or dep is None or dep.disaggregation is None:
        return cfg.num_gpus_total * (H100_PER_A100_COST if decode_hardware else 1.0)
    dis, tp = dep.disaggregation, cfg.hardware.num_gpus
    return dis.prefill.replicas * tp * H100_PER_A100_COST + dis.decode.replicas * tp * 1.0


def run_comparison(c: Comparison, iters: int = 6) -> ClusterTrend:
    cap = lambda cfg: capacity_search(cfg, _meets, c.rate_lo, c.rate_hi, iters=iters)[0]  # noqa: E731
    colo = colocated_config(c)
    base_cap = cap(colo)
    best = (0.0, 0.0, (0, 0))  # (per-cost capacity, capacity, split)
    for x in range(1, c.num_instances):
        cfg = disaggregated_config(c, x)
        got = cap(cfg)
        per = got / _cost(cfg, c.decode_hardware)
        if per > best[0]:
            best = (per, got, (x, c.num_instances - x))
    base_per = base_cap / _cost(colo, c.decode_hardware)
    ratio = best[0] / base_per if base_per else float("inf")
    return ClusterTrend(c, base_cap, best[2], best[1], ratio)


def run_cluster_trends(num_requests: int = 300, iters: int = 6) -> list[ClusterTrend]:
    return [run_comparison(c, iters) for c in comparisons(num_requests)]


def format_trend(t: ClusterTrend) -> str:
    c = t.comparison
    x, y = t.best_split
    per = "per cost" if c.decode_hardware else "per GPU"
    verdict = "same direction, within 1.5x of the claim" if t.within_band else "DISAGREES with the claim"
    return (f"{c.name}\n  co-located ({c.num_instances} replicas)        {t.colocated_capacity:6.2f} req/s\n"
            f"  disaggregated (best split {x}P{y}D)   {t.disaggregated_capacity:6.2f} req/s\n"
            f"  simulated ratio {per} {t.ratio:.2f}x; published: {c.claim} -> {verdict}")
