"""Known results, as trends: each paper's setup reproduced, simulated ratio vs the published one.

`python -m sim_core trends` runs capacity searches with the stored calibration profiles (the cost
model is NOT tuned to hit these numbers) and prints paper vs simulated. A trend holds when the
simulated ratio lies within 1.5x of the published range: [low / 1.5, high x 1.5].

1. Sarathi-Serve vs vLLM (OSDI'24, row K573): Mistral-7B on one A100-80GB PCIe, openchat_sharegpt4
   lengths (the artifact's trace, microsoft/sarathi-serve data/processed_traces/
   sharegpt_8k_filtered_stats_llama2_tokenizer.csv at commit 72339db, 30,731 requests: median prompt 1,730
   tokens, P90 5,696, mean 2,340; output median 415, P90 834, mean 439, max 1,024; total <= 8k; the paper's
   Table 2 quotes the same median prompt),
   capacity = highest Poisson rate with P99 TBT <= 100 ms (strict SLO, Table 3) and median scheduling
   delay (TTFT here) <= 2 s; vLLM max batch 128; Sarathi-Serve token budget 512. Both engines ran in the
   same vLLM-based code base: both use the `sarathi-serve-artifact` calibration profile.
   Paper: 2.6x ("up to"; Figure 10a: 2.15x on openchat_sharegpt4).
2. vLLM vs Orca (Max) (SOSP'23, row K570): LLaMA-13B on one A100-40GB, ShareGPT lengths (Figure 11:
   mean 161 prompt / 338 output tokens, max model length 2,048), sustainable rate = highest rate whose
   median normalised latency stays <= 0.2 s/token. Orca (Max) reserves max_model_len per request.
   Paper: 2.7-8x over Orca (Max) (1.7-2.7x over Orca (Oracle), which knows the output lengths).
3. vLLM vs FasterTransformer, same setup, FasterTransformer batching statically with contiguous KV and
   its own C++ engine costs (its preset's `fastertransformer` profile). Paper abstract: 2-4x over
   "state-of-the-art systems such as FasterTransformer and Orca" (Figure 12 reaches 22x in one setting).
"""

from __future__ import annotations

from dataclasses import dataclass

from sim_core.config import SimConfig
from sim_core.presets import config_from_dict
from sim_core.result import Summary
from sim_core.sweep import capacity_search

BAND = 1.5  # a trend holds within 1.5x of the published range
NO_TIME_LIMIT = {"max_sim_time_s": 100_000}  # low rates x hundreds of requests outlast the default hour

# openchat_sharegpt4 as the Sarathi-Serve artifact samples it (median / P90 computed from its trace file, see the
# docstring): lognormal with that median and P90 (sigma = ln(P90 / median) / 1.2816; LengthDist takes the mean =
# median x exp(sigma^2 / 2)). Sampled: prompt median 1,723 / P90 5,673, output median 416 / P90 835 (within 0.5 %).
OPENCHAT_SHAREGPT4 = {
    "prompt_tokens": {"dist": "lognormal", "mean": 2666, "min": 16, "max": 7168, "sigma": 0.93},
    "output_tokens": {"dist": "lognormal", "mean": 481, "min": 1, "max": 1024, "sigma": 0.545},
}
# vLLM paper Figure 11, ShareGPT: mean 161 prompt / 338 output tokens (8.4x and 5.8x Alpaca's).
SHAREGPT_VLLM_PAPER = {
    "prompt_tokens": {"dist": "lognormal", "mean": 161, "min": 4, "max": 1024, "sigma": 1.0},
    "output_tokens": {"dist": "lognormal", "mean": 338, "min": 4, "max": 1024, "sigma": 1.0},
}


def range_text(low: float, high: float) -> str:
    """A published ratio or range as printed: "2-4x", and one figure as "1.3x", not "1.3-1.3x"."""
    return f"{low:g}x" if low == high else f"{low:g}-{high:g}x"


@dataclass(frozen=True)
class Trend:
    name: str
    claim: str
    paper_low: float
    paper_high: float
    baseline: str
    contender: str
    baseline_capacity: float
    contender_capacity: float

    @property
    def ratio(self) -> float:
        return self.contender_capacity / self.baseline_capacity if self.baseline_capacity else float("inf")

    @property
    def band(self) -> tuple[float, float]:
        return self.paper_low / BAND, self.paper_high * BAND

    @property
    def holds(self) -> bool:
        lo, hi = self.band
        return lo <= self.ratio <= hi

    @property
    def verdict(self) -> str:
        """What `trends` prints: in the paper's own range, or only within the band around it (a review: 4.84x against
        the paper's 2-4x printed "holds", as one inside it does), or out of the band."""
        # (the paper's range named: "2.07x ... [1.43-3.90] below the paper's range" read as a contradiction, the bracket
        # being the band, a review)
        paper = range_text(self.paper_low, self.paper_high)
        if self.paper_low <= self.ratio <= self.paper_high:
            return f"holds (in the paper's {paper})"
        if self.holds:
            return f"{'above' if self.ratio > self.paper_high else 'below'} the paper's {paper}, within {BAND:g}x of it"
        return "OUT OF BAND"


def sarathi_configs(num_requests: int = 400) -> tuple[SimConfig, SimConfig]:
    base = {"hardware": "a100-80gb-pcie", "model": {"preset": "mistral-7b", "max_model_len": 8192},
            "workload": {"preset": "chat", "num_requests": num_requests, **OPENCHAT_SHAREGPT4},
            "limits": NO_TIME_LIMIT}  # fmt: skip
    # the paper ran both in its vLLM-based code base: the artifact's CPU costs for both
    vllm = config_from_dict(base | {"engine": "vllm-v0", "scheduler": {"max_num_seqs": 128}, "calibration": "sarathi-serve-artifact"})
    sarathi = config_from_dict(base | {"engine": "sarathi-serve", "calibration": "sarathi-serve-artifact"})
    return vllm, sarathi


def paging_configs(num_requests: int = 400) -> tuple[SimConfig, SimConfig, SimConfig]:
    base = {"hardware": "a100-40gb", "model": {"preset": "llama-2-13b", "max_model_len": 2048},
            "workload": {"preset": "chat", "num_requests": num_requests, **SHAREGPT_VLLM_PAPER},
            "limits": NO_TIME_LIMIT}  # fmt: skip
    budget = {"max_num_seqs": 256, "max_num_batched_tokens": 2048}  # batch bounded by memory, not a cap
    # vLLM and Orca as the paper ran them (Python engines without CUDA graphs, like the Sarathi-Serve artifact);
    # FasterTransformer is NVIDIA's C++ engine (its preset's own `fastertransformer` profile)
    research = {"calibration": "sarathi-serve-artifact"}
    orca = config_from_dict(base | {"engine": "orca", "scheduler": budget} | research)
    ft = config_from_dict(base | {"engine": "fastertransformer", "scheduler": budget})
    vllm = config_from_dict(base | {"engine": "vllm-v0", "scheduler": budget} | research)
    return orca, ft, vllm


def _strict_tbt(s: Summary) -> bool:
    return s.stopped_reason is None and s.itl_p99_s <= 0.1 and s.ttft_p50_s <= 2.0


def _normalised(s: Summary) -> bool:
    return s.stopped_reason is None and s.normalized_latency_p50_s <= 0.2


def run_trends(num_requests: int = 400) -> list[Trend]:
    vllm, sarathi = sarathi_configs(num_requests)
    orca, ft, paged = paging_configs(num_requests)
    cap = lambda cfg, meets: capacity_search(cfg, meets, 0.1, 1.0, iters=8)[0]  # noqa: E731
    paged_cap = cap(paged, _normalised)
    return [
        Trend("Sarathi-Serve vs vLLM, Mistral-7B, 1x A100-80GB PCIe, P99 TBT <= 100 ms",
              "2.6x (Sarathi-Serve OSDI'24 abstract, K573; Fig. 10a 2.15x)", 2.15, 2.6,
              "vLLM V0 (prefill-first, batch 128)", "Sarathi-Serve (budget 512)",
              cap(vllm, _strict_tbt), cap(sarathi, _strict_tbt)),
        Trend("vLLM vs Orca (Max), LLaMA-13B, 1x A100-40GB, ShareGPT, normalised latency <= 0.2 s/token",
              "2.7-8x (vLLM SOSP'23 Sec. 6.2, K570)", 2.7, 8.0, "Orca (max-length reservation)", "vLLM (paged)",
              cap(orca, _normalised), paged_cap),
        Trend("vLLM vs FasterTransformer, same setup",
              "2-4x vs FasterTransformer and Orca (vLLM SOSP'23 abstract; up to 22x in Fig. 12, K570)", 2.0, 4.0,
              "FasterTransformer (static batch)", "vLLM (paged)", cap(ft, _normalised), paged_cap),
    ]  # fmt: skip


def main() -> int:
    print(f"{'trend':92s} {'baseline':>9s} {'contender':>9s} {'simulated':>9s}  paper, its {BAND:g}x band, verdict")
    for t in run_trends():
        lo, hi = t.band
        print(f"{t.name[:92]:92s} {t.baseline_capacity:9.3f} {t.contender_capacity:9.3f} {t.ratio:8.2f}x  "
              f"{t.claim}; band {lo:.2f}-{hi:.2f}x: {t.verdict}")  # fmt: skip
    from sim_core.validate import MEASUREMENTS_FILE_SHOWN

    print("Capacities in requests/s; ratios contender / baseline. Simulated with the stored calibration profiles. Row ids "
          f"(K573, ...): {MEASUREMENTS_FILE_SHOWN}, with their sources.")
    from sim_core.cluster.trends import format_trend, run_cluster_trends  # disaggregation claims (issue 13)

    for ct in run_cluster_trends():
        print(format_trend(ct))
    return 0
