"""The typed result of a run: the contract between sim_core and everything that shows it.

Arrays stay NumPy; `to_frames()` is the only place pandas appears, at the edge.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, model_validator

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
    """Headline numbers. Percentiles are over finished requests; NaN (null in JSON) when none."""

    model_config = ConfigDict(frozen=True)

    num_requests: int
    num_finished: int
    num_unfinished: int
    num_preemptions: int
    num_swap_outs: int
    num_recomputed_tokens: int
    num_ticks: int
    makespan_s: float
    simulated_time_s: float
    output_tokens_per_s: float
    total_tokens_per_s: float
    requests_per_s: float
    goodput_requests_per_s: float
    slo_attainment: float
    ttft_p50_s: float
    ttft_p90_s: float
    ttft_p99_s: float
    tpot_p50_s: float
    tpot_p90_s: float
    tpot_p99_s: float
    itl_p50_s: float
    itl_p90_s: float
    itl_p99_s: float
    e2e_p50_s: float
    e2e_p90_s: float
    e2e_p99_s: float
    queue_delay_p50_s: float
    queue_delay_p99_s: float
    normalized_latency_p50_s: float
    gpu_busy_fraction: float
    prefill_time_fraction: float
    mean_batch_size: float
    mfu_mean: float  # over the busy time: FLOPs / busy seconds / the GEMMs' peak FLOP/s (per GPU; NaN: no busy tick)
    mbu_mean: float  # over the busy time: HBM bytes / busy seconds / the datasheet bandwidth
    kv_peak_usage: float
    kv_num_blocks: int
    kv_capacity_tokens: int
    swap_time_s: float
    stopped_reason: str | None
    # Prefix caching (None when off): the hit rate over first admissions (vLLM V1 counts a request re-admitted after a
    # recompute pre-emption apart: it finds its own KV again), the tokens saved over every admission.
    prefix_hit_rate_tokens: float | None = None  # reused prompt tokens / prompt tokens looked up
    prefix_hit_rate_blocks: float | None = None  # reused full blocks / cacheable full blocks looked up
    prefill_tokens_saved: int | None = None  # tokens whose prefill was skipped, a re-admission's included
    prefix_blocks_evicted: int | None = None
    # Speculative decoding (None when off)
    spec_tokens_per_step: float | None = None  # tokens emitted per verified decode step (1 + accepted)
    spec_draft_time_s: float | None = None  # simulated time spent in draft steps
    steady: SteadyState | None = None  # None when the run has too few requests for a window


@dataclass(frozen=True)
class SimResult:
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
