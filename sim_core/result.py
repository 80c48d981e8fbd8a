"""The typed result of a run: the contract between sim_core and everything that shows it.

Arrays stay NumPy; `to_frames()` is the only place pandas appears, at the edge.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from sim_core.config import SimConfig
from sim_core.costmodel import MemoryPlan, utilisation_peaks
from sim_core.types import FloatArray, IntArray

TICK_COLUMNS = (
    "t_start_s", "duration_s", "phase", "num_prefill_tokens", "num_decode_tokens", "num_prefill_seqs",
    "num_decode_seqs", "num_running", "num_waiting", "num_swapped", "kv_blocks_used", "flops", "bytes",
    "is_compute_bound", "num_preempted", "swap_blocks", "batch_cap",
)  # fmt: skip
INT_TICK_COLUMNS = frozenset(TICK_COLUMNS) - {"t_start_s", "duration_s", "flops", "bytes"}


@dataclass(frozen=True)
class Timeline:
    """One row per tick (idle gaps included, phase IDLE). Per GPU for FLOPs and bytes."""

    columns: dict[str, np.ndarray]

    def __getattr__(self, name: str) -> np.ndarray:
        try:
            return self.__dict__["columns"][name]
        except KeyError:
            raise AttributeError(name) from None

    @property
    def num_ticks(self) -> int:
        return int(self.columns["t_start_s"].shape[0])

    @property
    def t_end_s(self) -> FloatArray:
        return self.columns["t_start_s"] + self.columns["duration_s"]

    def utilisation(self, peak_flops_per_s: float, hbm_bytes_per_s: float) -> tuple[FloatArray, FloatArray]:
        """(MFU, MBU) per tick: achieved FLOP/s and bytes/s over the GPU's peaks; 0 for idle rows."""
        busy_s = np.where(self.columns["phase"] != 0, self.columns["duration_s"], np.inf)
        return self.columns["flops"] / busy_s / peak_flops_per_s, self.columns["bytes"] / busy_s / hbm_bytes_per_s


@dataclass(frozen=True)
class RequestTable:
    """Final per-request state; index = request id (arrival order)."""

    arrival_s: FloatArray
    prompt_tokens: IntArray
    output_tokens: IntArray  # target, per sample
    num_emitted: IntArray  # per sample; == output_tokens when finished
    priority: IntArray
    class_idx: IntArray
    status: np.ndarray  # Status values
    first_scheduled_s: FloatArray
    first_token_s: FloatArray
    finish_s: FloatArray
    num_preemptions: IntArray
    num_recomputed_tokens: IntArray
    max_itl_s: FloatArray

    @property
    def is_finished(self) -> np.ndarray:
        return ~np.isnan(self.finish_s)

    @property
    def ttft_s(self) -> FloatArray:
        return self.first_token_s - self.arrival_s

    @property
    def e2e_s(self) -> FloatArray:
        return self.finish_s - self.arrival_s

    @property
    def tpot_s(self) -> FloatArray:
        """(E2E − TTFT) / (output − 1); NaN for single-token outputs (vLLM benchmark definition)."""
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(self.output_tokens > 1, (self.finish_s - self.first_token_s) / (self.output_tokens - 1), np.nan)

    @property
    def queue_delay_s(self) -> FloatArray:
        return self.first_scheduled_s - self.arrival_s


@dataclass(frozen=True)
class Events:
    """Request events (types.Event) in time order: the segments of the request timeline."""

    req: IntArray
    time_s: FloatArray
    kind: np.ndarray


@dataclass(frozen=True)
class BatchLog:
    """Batch membership of the first `limits.num_recorded_batches` ticks (step-through view).

    A run's log is `deferred`: its arrays are built when one is first read (the step-through view), so
    the many runs nobody steps through (sweeps, plans, benchmarks) skip building ~40k entries each.
    """

    tick: IntArray
    req: IntArray
    num_new_tokens: IntArray
    is_decode: np.ndarray
    kv_blocks_held: IntArray  # blocks the request holds during the tick

    @classmethod
    def deferred(cls, build: Callable[[], tuple[IntArray, IntArray, IntArray, np.ndarray, IntArray]]) -> BatchLog:
        """A log whose fields `build()` returns (in field order) when one is first read."""
        log = object.__new__(cls)
        object.__setattr__(log, "_build", build)
        return log

    def __getattr__(self, name: str):  # only for attributes not set: a deferred log's fields before they are built
        build = self.__dict__.get("_build")
        if build is None or name not in BATCH_FIELDS:
            raise AttributeError(name)
        for field, values in zip(BATCH_FIELDS, build()):
            object.__setattr__(self, field, values)
        object.__setattr__(self, "_build", None)  # (a second thread building at once sets the same values)
        return self.__dict__[name]

    def __getstate__(self) -> dict:
        return {name: getattr(self, name) for name in BATCH_FIELDS}


BATCH_FIELDS = ("tick", "req", "num_new_tokens", "is_decode", "kv_blocks_held")


class _Metrics(BaseModel):
    """Metrics that JSON carries: it writes an undefined one (NaN: TPOT of 1-token outputs, a percentile of no
    finished request) as null, and null is read back as NaN for a float field. Before, null was refused: a
    worker's payload (sweep, capacity, plan) ended in a ValidationError traceback, and summary.json of
    `run --out` could not be read back as a Summary."""

    model_config = ConfigDict(frozen=True)

    @model_validator(mode="before")
    @classmethod
    def _null_is_nan(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        nulls = [k for k, v in data.items() if v is None and k in cls.model_fields and cls.model_fields[k].annotation is float]
        return data | {k: math.nan for k in nulls} if nulls else data


class SteadyState(_Metrics):
    """Metrics over the steady-state window (sim_core.metrics.steady_window says which requests):
    warm-up and drain excluded, throughput over the window's span instead of the makespan."""

    model_config = ConfigDict(frozen=True)

    # Ranks by arrival (0 = the first request to arrive), not request ids: with sessions ids are not in arrival
    # order, and the window's ids (e.g. 31 and 266 for ranks 30 and 269) read as a range of 236 requests of 240.
    window_first_request: int  # arrival rank of the first request in the window
    window_last_request: int  # arrival rank of the last request in the window (inclusive)
    window_start_s: float  # arrival time of the window's first request
    window_end_s: float  # arrival time of the window's last request
    num_requests: int  # requests that arrived in the window
    num_unfinished: int  # of those, not finished when the run ended
    arrival_rate_per_s: float  # (num_requests - 1) / (end - start): the offered load in the window
    output_tokens_per_s: float  # output tokens emitted during [start, end] / (end - start)
    requests_per_s: float  # requests finished during [start, end] / (end - start)
    goodput_requests_per_s: float  # slo_attainment × arrival_rate_per_s
    slo_attainment: float  # window requests meeting both SLOs / window requests (unfinished: missed)
    ttft_p50_s: float
    ttft_p90_s: float
    ttft_p99_s: float
    tpot_p50_s: float
    tpot_p90_s: float
    tpot_p99_s: float
    warmup_s: float  # first arrival to window start: how long the system had to fill up
    mean_e2e_s: float  # mean end-to-end latency of the finished window requests
    note: str | None  # why this run is too short (or too overloaded) to give a steady-state answer

    @property
    def num_finished(self) -> int:
        """Window requests finished when the run ended (derived, not stored: what `metrics.no_value_reason` reads)."""
        return self.num_requests - self.num_unfinished


class Summary(_Metrics):
    """Headline numbers of a run (`SimResult.summary`; `python -m sim_core run --json` prints them). Percentiles are over
    finished requests; NaN (null in JSON) when none. Each field's description (`Summary.model_fields`, the JSON schema)
    says what it measures and in what unit; the whole-run rates divide by the makespan, `steady` gives them over the
    steady-state window."""

    model_config = ConfigDict(frozen=True)

    num_requests: int = Field(description="Requests in the workload.")
    num_finished: int = Field(description="Requests that finished by the run's end.")
    num_unfinished: int = Field(
        description="Requests not finished when the run ended (queued, running, or not yet arrived at a limit).")
    num_preemptions: int = Field(
        description="Pre-emptions (recompute and swap), counted per pre-empted request each time.")
    num_swap_outs: int = Field(description="Pre-emptions that swapped a request's KV to host memory.")
    num_recomputed_tokens: int = Field(
        description="Tokens prefilled again after recompute pre-emptions.")
    num_ticks: int = Field(description="Busy ticks (engine steps); the timeline also holds the idle ones.")
    makespan_s: float = Field(
        description="First arrival to the last tick's end, s: the span the whole-run rates divide by.")
    simulated_time_s: float = Field(description="The clock at the last tick's end, s.")
    output_tokens_per_s: float = Field(
        description="Output tokens / makespan, tokens/s (warm-up and drain included: `steady` leaves them out).")
    total_tokens_per_s: float = Field(description="Prompt plus output tokens / makespan, tokens/s.")
    requests_per_s: float = Field(description="Finished requests / makespan, requests/s.")
    goodput_requests_per_s: float = Field(
        description="Finished requests meeting both SLOs (slo.ttft_s, slo.tpot_s) / makespan, requests/s (vLLM "
                    "benchmark_serving's request goodput; DistServe's is the capacity at 90 % attainment).")
    slo_attainment: float = Field(
        description="Requests that finished meeting both SLOs / the workload's requests (those that had arrived, when a "
                    "limit stopped the run), 0 to 1: an unfinished one missed.")
    ttft_p50_s: float = Field(
        description="Time to first token (arrival to first output token), median over finished requests, s.")
    ttft_p90_s: float = Field(description="Time to first token, 90th percentile, s.")
    ttft_p99_s: float = Field(description="Time to first token, 99th percentile, s.")
    tpot_p50_s: float = Field(
        description="Time per output token after the first ((end-to-end − TTFT) / (output − 1)), median, s; NaN for 1-token "
                    "outputs.")
    tpot_p90_s: float = Field(description="Time per output token, 90th percentile, s.")
    tpot_p99_s: float = Field(description="Time per output token, 99th percentile, s.")
    itl_p50_s: float = Field(
        description="Inter-token latency (every gap between a request's consecutive output tokens), median, s.")
    itl_p90_s: float = Field(description="Inter-token latency, 90th percentile, s.")
    itl_p99_s: float = Field(
        description="Inter-token latency, 99th percentile, s: the stalls a prefill causes show here.")
    e2e_p50_s: float = Field(description="End-to-end latency (arrival to last token), median, s.")
    e2e_p90_s: float = Field(description="End-to-end latency, 90th percentile, s.")
    e2e_p99_s: float = Field(description="End-to-end latency, 99th percentile, s.")
    queue_delay_p50_s: float = Field(
        description="Arrival to first admission into the batch, median over finished requests, s.")
    queue_delay_p99_s: float = Field(description="Arrival to first admission, 99th percentile, s.")
    normalized_latency_p50_s: float = Field(
        description="End-to-end latency / output tokens, median, s per token (vLLM's and Orca's normalized latency).")
    gpu_busy_fraction: float = Field(description="Busy time / makespan, 0 to 1.")
    prefill_time_fraction: float = Field(
        description="Time of ticks that prefill (mixed ones included) / busy time, 0 to 1.")
    mean_batch_size: float = Field(description="Requests per busy tick (prefilling plus decoding), mean.")
    mfu_mean: float = Field(
        description="Model FLOPs utilisation over the busy time: FLOPs / busy seconds / the GEMMs' peak FLOP/s (per GPU); NaN"
                    " without a busy tick.")
    mbu_mean: float = Field(
        description="Memory bandwidth utilisation over the busy time: HBM bytes / busy seconds / the datasheet bandwidth; NaN"
                    " without a busy tick.")
    kv_peak_usage: float = Field(
        description="Most KV blocks in use during a tick (its finishing requests' included) / kv_num_blocks, 0 to 1.")
    kv_num_blocks: int = Field(description="KV blocks in the pool the memory plan leaves (kv_cache.gpu_memory_utilization).")
    kv_capacity_tokens: int = Field(description="Tokens the KV blocks hold (kv_num_blocks × block size).")
    swap_time_s: float = Field(description="Simulated time spent copying KV over PCIe for swaps, s.")
    stopped_reason: str | None = Field(
        description="Why the run stopped before its last request finished (a limit, the server's budget), or None.")
    # Prefix caching (None when off): the hit rate over first admissions (vLLM V1 counts a request re-admitted after a
    # recompute pre-emption apart: it finds its own KV again), the tokens saved over every admission.
    prefix_hit_rate_tokens: float | None = Field(None,
        description="Prefix caching: reused prompt tokens / prompt tokens looked up at first admission, 0 to 1; None when "
                    "off.")
    prefix_hit_rate_blocks: float | None = Field(None,
        description="Prefix caching: reused full blocks / cacheable full blocks looked up, 0 to 1; None when off.")
    prefill_tokens_saved: int | None = Field(None,
        description="Prefix caching: tokens whose prefill was skipped, re-admissions included; None when off.")
    prefix_blocks_evicted: int | None = Field(None,
        description="Prefix caching: cached blocks evicted to make room; None when off.")
    spec_tokens_per_step: float | None = Field(None,
        description="Speculative decoding: tokens emitted per verified decode step (1 + accepted); None when off.")
    spec_draft_time_s: float | None = Field(None,
        description="Speculative decoding: simulated time spent in draft steps, s; None when off.")
    steady: SteadyState | None = Field(None,
        description="The same figures over the steady-state window (warm-up and drain left out); None when the run has too "
                    "few requests for a window.")


@dataclass(frozen=True)
class SimResult:
    """What `run_simulation` returns: the config it ran, the memory plan, per-request and per-tick arrays (`requests`,
    `timeline`; `to_frames()` gives them as pandas tables), the request events, every inter-token gap, the batch log of
    the first ticks (the app's step-through), and the headline `summary` (each field described in `Summary`)."""

    config: SimConfig
    memory: MemoryPlan
    requests: RequestTable
    timeline: Timeline
    events: Events
    itl_s: FloatArray  # every inter-token gap, or (over 2M gaps) an evenly strided sample of them
    batches: BatchLog
    summary: Summary
    # Every inter-token gap the run recorded (itl_s may hold a sample of them). None (a result pickled before it was
    # kept): one per token after a request's first, which overcounts speculative decoding (one gap per verify step).
    itl_gaps_total: int | None = None

    @property
    def num_itl_gaps(self) -> int:
        """All inter-token gaps of the run (itl_s may hold a sample of them): one per emission after a request's
        first, where a speculative verify step that emits several tokens is one emission (a streamed chunk)."""
        if self.itl_gaps_total is not None:
            return self.itl_gaps_total
        return int(np.maximum(self.requests.num_emitted - 1, 0).sum())

    @property
    def stopped_reason(self) -> str | None:
        return self.summary.stopped_reason

    def to_frames(self):
        """{'requests': DataFrame, 'ticks': DataFrame} with derived latency columns."""
        import pandas as pd

        from sim_core.types import Phase, Status

        r = self.requests
        requests = pd.DataFrame({
            "request_id": np.arange(r.arrival_s.size), "arrival_s": r.arrival_s, "prompt_tokens": r.prompt_tokens,
            "output_tokens": r.output_tokens, "num_emitted": r.num_emitted, "priority": r.priority,
            "status": [Status(s).name.lower() for s in r.status], "first_scheduled_s": r.first_scheduled_s,
            "first_token_s": r.first_token_s, "finish_s": r.finish_s, "ttft_s": r.ttft_s, "tpot_s": r.tpot_s,
            "e2e_s": r.e2e_s, "queue_delay_s": r.queue_delay_s, "max_itl_s": r.max_itl_s,
            "num_preemptions": r.num_preemptions, "num_recomputed_tokens": r.num_recomputed_tokens,
        })  # fmt: skip
        ticks = pd.DataFrame(self.timeline.columns)
        ticks.insert(0, "tick", np.arange(len(ticks)))
        ticks["phase"] = [Phase(p).name.lower() for p in self.timeline.phase]
        ticks["is_compute_bound"] = self.timeline.is_compute_bound.astype(bool)
        ticks["mfu"], ticks["mbu"] = self.timeline.utilisation(*self.tick_peaks())
        return {"requests": requests, "ticks": ticks}

    def tick_peaks(self) -> tuple[Any, Any]:
        """(GEMM peak FLOP/s, HBM bytes/s) per GPU that each tick's MFU and MBU divide by: the config's GPU (a
        deployment's ticks: their instance's)."""
        return utilisation_peaks(self.config)
