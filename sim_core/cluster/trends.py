"""Published disaggregation claims as trends: disaggregated prefill/decode vs co-located replicas on the
same GPUs, each side at the calibration its preset names (nothing here is tuned to reproduce a claim).

Method (DistServe's "goodput"): capacity = the highest arrival rate at which >= 90 % of requests meet
both the TTFT and the TPOT objective (bisection, `sweep.capacity_search`). Co-located: N replicas of
one engine behind a round-robin router. Disaggregated: the best of every xPyD split of the
disaggregated preset's instances (x + y fixed, each pool keeps its TP), as DistServe's placement search and Dynamo's planner do.
The ratio compares capacity per GPU (or per unit of cost, for Splitwise's heterogeneous claim).

The setups are the scenario presets named below (presets/scenarios/cluster-*.json).

1. DistServe (OSDI'24, row K575), as in its artifact (LLMServe/DistServe, evaluation/2-benchmark-serving/
   2-start-api-server.py and ae-scripts/e2e/_plot.py, Fig. 8): OPT-13B on A100-80GB, chatbot, SLO TTFT
   0.25 s / TPOT 0.1 s, 90 % attainment; vLLM TP1 (prefill-first, 16,384 batched tokens, 1,024 sequences,
   95 % memory) vs DistServe's placement prefill TP2 + decode TP1 (3 GPUs; decode batches up to 1,024),
   compared per GPU, on the artifact's own requests (the first 300 of the ShareGPT list its runs replay). Each
   side runs at its engine's calibration (vllm-2023-distserve, distserve-2023), fitted on DistServe's measured
   serving runs of that engine and checked on the runs held out (measured_runs.py). Published: 2.0-3.41x
   goodput per GPU for the chatbot workload. Not reproduced: one A100 running the 2023 vLLM cannot give the
   longest ~8 % of those prompts their first token within 0.25 s even when idle, so the co-located side meets
   90 % only when almost idle (92 % at 0.05 req/s per GPU, 88 % at 1 req/s per GPU; none of DistServe's
   measured vLLM runs, 1-4 req/s, reaches 90 %, though at light load the model is pessimistic: 77 % on its 1 req/s
   run where 86 % was measured), and its goodput sits on a cliff in its
   prefill speed (scripts/distserve_sensitivity.py, docs/cluster.md).
2. Splitwise (ISCA'24, row K576): Llama-2-70B on DGX machines (TP8), Azure conversation trace lengths
   (published_measurements.md §3: prompt mean 1,155, output mean 211), prompt machines H100, token
   machines A100 (Splitwise-HA) vs H100 co-located, both on vLLM V0 (Splitwise ran on 2023 vLLM: no
   chunked prefill); cost per GPU H100 : A100 = 2.16 : 1 (the paper's ratio, published_measurements.md §1). Published: 1.4x
   throughput at 20 % lower cost, i.e. 1.75x throughput per cost.
3. Dynamo (ai-dynamo docs, "Disaggregated serving", row K582): R1-Distilled Llama-70B FP8 on one node of
   H100s with vLLM, 3K input / 150 output tokens: 30 % more throughput per GPU from disaggregation
   on a single node (over 2x on two nodes). Here: Llama-3.1-70B FP8 (same architecture), 8 GPUs as
   4 instances of TP2, SLO TTFT 2 s / TPOT 50 ms (20 tokens/s per user).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from sim_core.config import SimConfig
from sim_core.presets import load_preset
from sim_core.result import Summary
from sim_core.sweep import DISTSERVE_ATTAINMENT, capacity_search, with_value
from sim_core.trends import BAND, range_text  # (the single-engine trends' band: it was restated here as 1.5, four times)

ATTAINMENT = DISTSERVE_ATTAINMENT  # DistServe's goodput: the fraction of requests meeting both objectives
H100_PER_A100_COST = 2.16  # Splitwise's hardware cost ratio (published_measurements.md §1 notes)


@dataclass(frozen=True)
class Comparison:
    """Two scenario presets (the setups live there, with their sources): co-located and disaggregated."""

    name: str
    claim: str
    claim_low: float  # published ratio (range), disaggregated / co-located, per GPU or per cost
    claim_high: float
    colocated: str  # scenario preset: N replicas
    disaggregated: str  # scenario preset: xPyD on the same N instances (the split is searched)
    per_cost: bool = False  # compare per unit of cost (H100 = 2.16 A100) instead of per GPU
    rate_lo_per_s: float = 0.5  # the capacity bisection's starting bracket, requests/s
    rate_hi_per_s: float = 8.0
    # why the simulated ratio is outside the band, where it is known (printed under it: "41.89x ... outside 1.5x" came
    # with no word of why, a review; docs/cluster.md has the whole account)
    known_gap: str = ""


@dataclass(frozen=True)
class ClusterTrend:
    comparison: Comparison
    colocated_capacity: float
    colocated_gpus: int
    disaggregated_gpus: int
    best_split: tuple[int, int]
    disaggregated_capacity: float
    ratio: float  # per GPU (same GPUs) or per cost

    @property
    def direction_holds(self) -> bool:
        """Disaggregation serves more per GPU (or per cost) than co-location, as every claim says."""
        return self.ratio > 1.0

    @property
    def within_band(self) -> bool:
        """Same direction as the claim and within BAND (1.5x) of its published range."""
        return self.ratio > 1.0 and self.comparison.claim_low / BAND <= self.ratio <= self.comparison.claim_high * BAND


COMPARISONS = (
    Comparison("DistServe: OPT-13B, 3x A100-80GB, chatbot, TTFT 0.25 s / TPOT 0.1 s, prefill TP2 + decode TP1",
               "2.0-3.41x goodput per GPU vs vLLM (DistServe OSDI'24, row K575)", 2.0, 3.41,
               "cluster-distserve-opt13b-3xa100-colocated", "cluster-distserve-opt13b-3xa100-p2d1", rate_lo_per_s=0.15, rate_hi_per_s=8.0,
               known_gap="the co-located vLLM meets 90 % of SLOs only when almost idle (one A100 cannot give the longest "
                         "prompts their first token within 0.25 s), as none of DistServe's measured vLLM runs reaches 90 % "
                         "(`validate`); docs/cluster.md, DistServe"),
    Comparison("Splitwise-HA: Llama-2-70B, 4 DGX machines (TP8), conversation, H100 prompt / A100 token",
               "1.4x throughput at 20% lower cost = 1.75x per cost (Splitwise ISCA'24, row K576)", 1.75, 1.75,
               "cluster-splitwise-llama70b-4xdgx-colocated", "cluster-splitwise-llama70b-4xdgx-ha-3p1d", per_cost=True,
               rate_lo_per_s=1.0, rate_hi_per_s=16.0),
    Comparison("Dynamo: Llama-70B FP8, 8x H100 (4 instances of TP2), 3K in / 150 out, TTFT 2 s / TPOT 50 ms",
               "1.3x throughput per GPU on one node (ai-dynamo docs, disaggregated serving)", 1.3, 1.3,
               "cluster-dynamo-llama70b-fp8-8xh100-colocated", "cluster-dynamo-llama70b-fp8-8xh100-3p1d", rate_lo_per_s=1.0),
)  # fmt: skip


def comparisons() -> tuple[Comparison, ...]:
    return COMPARISONS


def colocated_config(c: Comparison, num_requests: int) -> SimConfig:
    return with_value(load_preset(c.colocated), "workload.num_requests", num_requests)


def disaggregated_config(c: Comparison, num_prefill: int, num_requests: int) -> SimConfig:
    cfg = with_value(load_preset(c.disaggregated), "workload.num_requests", num_requests)
    dis = cfg.deployment.disaggregation
    total = dis.prefill.replicas + dis.decode.replicas
    cfg = with_value(cfg, "deployment.disaggregation.prefill.replicas", num_prefill)
    return with_value(cfg, "deployment.disaggregation.decode.replicas", total - num_prefill)


def _meets(s: Summary) -> bool:
    return s.stopped_reason is None and s.slo_attainment >= ATTAINMENT


def _cost(cfg: SimConfig) -> float:
    """GPUs weighted by price: an A100 counts 1, any other GPU (H100) 2.16 (Splitwise's ratio)."""
    dep = cfg.deployment
    price = lambda hw: 1.0 if hw.name.startswith("A100") else H100_PER_A100_COST  # noqa: E731
    if dep is None or dep.disaggregation is None:
        return cfg.num_gpus_total * price(cfg.hardware)
    dis = dep.disaggregation
    total = 0.0
    for pool in (dis.prefill, dis.decode):
        hw = pool.hardware or cfg.hardware
        total += pool.replicas * (pool.tensor_parallel or hw.num_gpus) * price(hw)
    return total


def run_comparison(c: Comparison, num_requests: int = 300, iters: int = 6) -> ClusterTrend:
    cap = lambda cfg: capacity_search(cfg, _meets, c.rate_lo_per_s, c.rate_hi_per_s, iters=iters)[0]  # noqa: E731
    norm = (lambda cfg: _cost(cfg)) if c.per_cost else (lambda cfg: float(cfg.num_gpus_total))  # noqa: E731
    colo = colocated_config(c, num_requests)
    base_cap = cap(colo)
    dis = load_preset(c.disaggregated).deployment.disaggregation
    n = dis.prefill.replicas + dis.decode.replicas  # instances of the disaggregated setup (its TP per pool)
    best = (0.0, 0.0, (0, 0), 0)  # (capacity per GPU or cost, capacity, split, GPUs)
    for x in range(1, n):
        cfg = disaggregated_config(c, x, num_requests)
        got = cap(cfg)
        if got / norm(cfg) > best[0] or best[3] == 0:
            best = (got / norm(cfg), got, (x, n - x), cfg.num_gpus_total)
    base = base_cap / norm(colo)
    ratio = best[0] / base if base else float("inf")
    return ClusterTrend(c, base_cap, colo.num_gpus_total, best[3], best[2], best[1], ratio)


def run_cluster_trends(num_requests: int = 300, iters: int = 6) -> list[ClusterTrend]:
    return [run_comparison(c, num_requests, iters) for c in COMPARISONS]


def format_trend(t: ClusterTrend) -> str:
    c = t.comparison
    x, y = t.best_split
    per = "per cost" if c.per_cost else "per GPU"
    verdict = (f"same direction, within {BAND:g}x of the claim" if t.within_band else
               f"same direction, outside {BAND:g}x of the claim" if t.direction_holds else "DISAGREES with the claim's direction")  # fmt: skip
    colo, dis = f"co-located ({t.colocated_gpus} GPUs)", f"disaggregated ({x}P{y}D, {t.disaggregated_gpus} GPUs)"
    colo_cap = (f"{t.colocated_capacity:7.2f} req/s" if t.colocated_capacity > 0
                else f"   none: under {100 * ATTAINMENT:g} % at {c.rate_lo_per_s:g} req/s already")
    ratio = f"{t.ratio:.2f}x" if math.isfinite(t.ratio) else "unbounded"
    paper = range_text(c.claim_low, c.claim_high)
    return (f"{c.name}\n  {colo:<34}{colo_cap}\n  {dis:<34}{t.disaggregated_capacity:7.2f} req/s\n"
            f"  paper {paper} vs simulated {ratio} {per} ({c.claim}) -> {verdict}"
            + (f"\n  why: {c.known_gap}" if c.known_gap and not t.within_band else ""))
