"""The one config model: hardware, model, workload, KV cache, scheduler, calibration, SLOs, limits.

Presets, the URL codec, the CLI and the UI all validate through `SimConfig`. Defaults and limits
live here and nowhere else; `description=` strings double as the UI's help text.
"""

from __future__ import annotations

import copy
import math
import re
import typing
from collections.abc import Callable, Collection, Iterable
from types import MappingProxyType
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic_core import InitErrorDetails, PydanticCustomError

from sim_core.inputs import did_you_mean

SCHEMA_VERSION = 3  # 2: optional `deployment` section; 3: memory_efficiency x hbm_efficiency_scale <= 1; see MIGRATIONS

Dtype = Literal["fp32", "fp16", "bf16", "fp8", "int8", "int4"]
DTYPE_BYTES: dict[str, float] = {"fp32": 4, "fp16": 2, "bf16": 2, "fp8": 1, "int8": 1, "int4": 0.5}


MIN_RATE = 1e-6  # smallest GPU rate or capacity (TFLOP/s, GB/s, efficiency scale) and run time limit (s)
MAX_TP = 64  # most GPUs of one engine instance (hardware.num_gpus, a pool's tensor_parallel)
MAX_SEED = 2**32 - 1  # the largest seed (32-bit unsigned): a config's, a trace sample's, a seed band's wrap
# prefix_affinity / cache_aware: SGLang's router as people launch it, whose defaults are its launchers' (sgl-router's CLI,
# src/main.rs `CliArgs` and `parse_policy`, sglang commit 0129b02; the Python launcher's `RouterArgs`, py_src/sglang_router/
# router_args.py, commit 083d601: 0.3, 64, 1.5, max_tree_size 2**26 characters), not the library's `CacheAwareConfig::
# default()` (src/policies/mod.rs, commit 08fc574: 0.5, 32, 1.1, 10,000), which only code building the policy itself gets.
# The router reads them, the router's description states them.
CACHE_THRESHOLD = 0.3  # the share of a prompt's full blocks a cached prefix must exceed for the router to follow it
BALANCE_ABS_THRESHOLD = 64  # outstanding requests: max - min above this ...
BALANCE_REL_THRESHOLD = 1.5  # ... and max above this x min: imbalanced, route by load
# weighted_score: llm-d's default endpoint-picker profile (llm-d-inference-scheduler config/charts/epplib/templates/
# _config.yaml, commit 520af47): the max-score picker takes the highest weighted sum of three scores in [0, 1]. The
# router reads them, the router's description states them.
QUEUE_SCORE_WEIGHT = 2  # queue-scorer: min-max normalised waiting-queue length, fewer is better
KV_SCORE_WEIGHT = 2  # kv-cache-utilization-scorer: 1 - KV usage
PREFIX_SCORE_WEIGHT = 3  # prefix-cache-scorer: matched prompt blocks / prompt blocks
MAX_PREFIX_BLOCKS = 256  # the prefix scorer hashes at most this many leading blocks (approximateprefix defaultMaxPrefixBlocks)
# the longest run (limits.max_sim_time_s's largest value), s; a trace's arrival times share the bound, since a request
# arriving later than any run can last is never simulated (1e300 s ran to the time limit and only then said so)
MAX_SIM_TIME_S = 1e7
# Longest name or label of a config (the scenario's, a section's: hardware.name, model.name, ...), and longest free text
# (a description, a section's source): a 15 MB hardware.name in a config file was accepted and printed back whole
MAX_NAME_LEN = 120
MAX_TEXT_LEN = 2000
MAX_REPLICAS = 64  # most instances of one kind in a deployment (deployment.replicas, a pool's replicas, the planner's)


class StrictModel(BaseModel):
    """Unknown fields are errors; instances are immutable (a config is a value, hashable by JSON).

    Strict types: `true` is not a number, `"12"` is not an integer, `12.0` is not an integer, NaN and
    infinity are not numbers (JSON integers are still accepted for float fields). Text must be
    encodable (no lone UTF-16 surrogates), so every config can be written to a link, a file or a terminal.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True, strict=True, allow_inf_nan=False)

    @field_validator("*", mode="after")
    @classmethod
    def _encodable_text(cls, value: Any) -> Any:
        if isinstance(value, str):
            bad = next((ch for ch in value if "\ud800" <= ch <= "\udfff"), None)
            if bad is not None:
                raise ValueError(f"contains a lone UTF-16 surrogate (U+{ord(bad):04X}); text must be valid Unicode")
            # (a config's name of "x\x1b[2J\x1b]0;pwned\x07" cleared the terminal of whoever ran it and set its title:
            # a workshop hands out config files)
            if (ctrl := _CONTROL.search(value)) is not None:
                raise ValueError(f"contains the control character U+{ord(ctrl.group()):04X}; text may hold tabs and line "
                                 "breaks but no other control characters")  # fmt: skip
        return value


_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")  # C0 (but tab, line feed, carriage return), DEL, C1


def field_error(field: str | tuple[str | int, ...], value: Any, message: str, names: Iterable[str] = ()) -> ValidationError:
    """The error a check across fields raises (`raise field_error(...)` in a model_validator) so that it is placed at
    the field to change: `field` (dotted, relative to the model whose validator raises it) and its `value`. A plain
    ValueError there is placed at the model, which the message rendered as "model = dict: ..." and, for SimConfig's
    own checks, "(config): ..." without the field. `names`: the other fields of the same model that `message` names
    (relative, e.g. "num_heads"); format_validation_error writes them with the model's dotted path ("model.num_heads"),
    which the model does not know (the top-level one, a pool's hardware, a standalone model)."""
    loc = tuple(field.split(".")) if isinstance(field, str) else field
    ctx = {"text": message, "names": tuple(names), "depth": len(loc)}
    error = InitErrorDetails(type=PydanticCustomError("value_error", "{text}", ctx), loc=loc, input=value)
    return ValidationError.from_exception_data("config check", [error])


# Fields renamed since configs were first saved: old name -> current name. HardwareSpec reads the old name as the
# new one in a config; a link's or `--set`'s dotted path may name it too (`renamed_field`).
RENAMED_FIELDS = MappingProxyType({"memory_gb": "memory_gib"})


def renamed_field(section: Collection[str], name: str) -> str:
    """The field `name` stands for in `section` (a config dict's section, or its field names): its current name when
    it is an old one (a readable link saved before the GiB fix sets hardware.memory_gb, which was "not a field of the config")."""
    new = RENAMED_FIELDS.get(name)
    return new if name not in section and new in section else name


# ---------------------------------------------------------------- hardware
class HardwareSpec(StrictModel):
    """One GPU type and how many of them serve a replica. Memory is in GiB, the unit `nvidia-smi`
    and vendors' "80 GB" labels actually mean (an A100-80GB shows 81,920 MiB = 80 GiB)."""

    name: str = Field("H100 SXM", min_length=1, max_length=MAX_NAME_LEN, description="GPU name.")
    source: str = Field("", max_length=MAX_TEXT_LEN, description="Datasheet the numbers come from.")
    # Rates and capacities start at MIN_RATE, not just above 0: a subnormal one (5e-324, 1e-300) made ticks of inf
    # seconds, which no time axis can draw (the app's window slider refused max_value inf: a traceback in the browser)
    peak_tflops: float = Field(989.4, ge=MIN_RATE, le=20000, description="Dense BF16/FP16 tensor peak per GPU, TFLOP/s.")
    peak_fp8_tflops: float | None = Field(
        1978.9, ge=MIN_RATE, le=40000, description="Dense FP8 tensor peak per GPU, TFLOP/s (empty: no FP8 tensor cores)."
    )
    hbm_bandwidth_gb_per_s: float = Field(3350, ge=MIN_RATE, le=100000, description="HBM bandwidth per GPU, GB/s.")
    hbm_efficiency_scale: float = Field(
        1.0, ge=MIN_RATE, le=2,
        description="This GPU's achieved streaming bandwidth relative to the calibration profiles' memory_efficiency, "
        "which is fitted on A100 and H100 together (geometric mean 1): fitted per GPU on Vidur's GEMM profiles "
        "(A100's HBM2e streams a lower fraction of its datasheet bandwidth than H100's HBM3); 1 for GPUs without "
        "profiles (the fitted values are in presets/hardware, near 1; calibration.memory_efficiency x this is at most 1: no kernel "
        "streams past the datasheet).",
    )
    memory_gib: float = Field(
        79.65, gt=0, le=4096,
        description="Device memory per GPU, GiB (2^30 bytes; nvidia-smi's total / 1024). "
        "Older configs' `memory_gb` is read as this field.",
    )
    num_gpus: int = Field(
        1, ge=1, le=MAX_TP,
        description="GPUs serving one model replica (tensor-parallel degree): a number the model's attention heads and KV "
        "heads split evenly over (tp_degrees_allowed), as vLLM requires.",
    )
    interconnect: Literal["nvswitch", "nvlink", "nvlink-bridge", "pcie", "xgmi"] = Field(
        "nvswitch",
        description="GPU-to-GPU link: nvswitch (all-to-all NVLink, HGX/DGX), nvlink (direct NVLink mesh), "
        "nvlink-bridge (a bridged pair of PCIe cards, at most 2 GPUs), pcie (no NVLink: peer traffic over PCIe), "
        "xgmi (AMD Infinity Fabric).",
    )
    interconnect_gb_per_s: float = Field(
        450, ge=MIN_RATE, le=100000, description="GPU-to-GPU link bandwidth per GPU, one direction, GB/s (of `interconnect`)."
    )
    pcie_gb_per_s: float = Field(64, ge=MIN_RATE, le=10000, description="Host link bandwidth, one direction, GB/s (KV swap).")

    @model_validator(mode="before")
    @classmethod
    def _migrate_memory_gb(cls, data: Any) -> Any:
        # Links and presets written before the GiB fix say `memory_gb`; the number was always the card's
        # label ("80 GB"), which is GiB, so it is carried over unchanged. It wins over a preset's value
        # it was merged onto (an old override of a preset).
        for old, new in RENAMED_FIELDS.items():
            if isinstance(data, dict) and old in data:
                data = dict(data)
                data[new] = data.pop(old)
        return data

    @model_validator(mode="after")
    def _check_link(self) -> HardwareSpec:
        if self.interconnect == "nvlink-bridge" and self.num_gpus > 2:
            raise field_error("num_gpus", self.num_gpus, "an NVLink bridge (interconnect 'nvlink-bridge') joins a pair "
                              "of GPUs; allowed with it: 1 or 2 (or interconnect 'pcie' for more PCIe cards)",
                              ["interconnect"])  # fmt: skip
        return self


# ---------------------------------------------------------------- model
class ModelSpec(StrictModel):
    name: str = Field("Llama-3.1-8B", min_length=1, max_length=MAX_NAME_LEN, description="Model name.")
    source: str = Field("", max_length=MAX_TEXT_LEN, description="Where the architecture numbers come from (config.json).")
    num_layers: int = Field(32, ge=1, le=512, description="Transformer layers.")
    hidden_size: int = Field(4096, ge=64, le=65536, description="Hidden size d.")
    num_heads: int = Field(32, ge=1, le=1024, description="Query heads.")
    num_kv_heads: int = Field(8, ge=1, le=1024, description="Key/value heads (GQA when fewer than query heads).")
    head_dim: int = Field(128, ge=8, le=1024, description="Dimension per head.")
    ffn_size: int = Field(14336, ge=64, le=262144, description="MLP intermediate size (per expert for MoE).")
    vocab_size: int = Field(128256, ge=256, le=1_000_000, description="Vocabulary size (LM head rows).")
    num_experts: int = Field(1, ge=1, le=512, description="MLP experts per layer (1 = dense model).")
    num_experts_per_token: int = Field(1, ge=1, le=64, description="Experts each token is routed to (top-k).")
    gated_mlp: bool = Field(True, description="SwiGLU-style MLP with gate and up projections (3 matrices).")
    tied_embeddings: bool = Field(False, description="LM head shares the embedding matrix.")
    weight_dtype: Dtype = Field("bf16", description="Weight precision (FP8 also uses FP8 tensor cores).")
    max_model_len: int = Field(131072, ge=16, le=2_097_152, description="Longest sequence (prompt + output), tokens.")

    @model_validator(mode="after")
    def _check_heads(self) -> ModelSpec:
        if self.num_heads % self.num_kv_heads:
            divisors = [d for d in range(1, self.num_heads + 1) if self.num_heads % d == 0]
            raise field_error("num_kv_heads", self.num_kv_heads,
                              f"must divide num_heads ({self.num_heads}) evenly (query heads share KV heads in equal "
                              f"groups); allowed: {', '.join(map(str, divisors))} (or change num_heads)", ["num_heads"])
        if self.num_experts_per_token > self.num_experts:
            raise field_error("num_experts_per_token", self.num_experts_per_token,
                              f"must be <= num_experts ({self.num_experts}); allowed: >= 1 and <= {self.num_experts}",
                              ["num_experts"])  # fmt: skip
        return self


def tp_degrees_allowed(num_heads: int, num_kv_heads: int, most: int = MAX_TP) -> tuple[int, ...]:
    """The tensor-parallel degrees (1 to `most`) a model's attention splits evenly over, as vLLM requires to start:
    the query heads divide by the degree (ModelConfig.verify_with_parallel_config: "Total number of attention heads
    must be divisible by tensor parallel size"), and the KV heads do too, or, past the KV head count, the degree is a
    multiple of it and each GPU holds a replica of one KV head (QKVParallelLinear's divide(); Qwen2.5-7B's 28 heads
    split over 7 GPUs but its 4 KV heads do not). The one source of the rule: config validation, the sidebar's GPU
    choices, the planner's and the sweep's TP degrees."""
    return tuple(
        t for t in range(1, most + 1)
        if num_heads % t == 0 and (num_kv_heads % t == 0 if t < num_kv_heads else t % num_kv_heads == 0)
    )  # fmt: skip


def tp_degrees_text(model: ModelSpec) -> str:
    """The model's allowed TP degrees as a list in words: "1, 2, 4 or 28"."""
    allowed = tp_degrees_allowed(model.num_heads, model.num_kv_heads)
    return ", ".join(map(str, allowed[:-1])) + f" or {allowed[-1]}" if len(allowed) > 1 else str(allowed[0])


def tp_rule_text(model: ModelSpec) -> str:
    """The model's TP degrees in words: "Llama-3.1-8B's 32 attention heads (8 KV heads) split evenly only over 1, 2,
    4, 8, 16 or 32 GPUs (vLLM refuses other tensor-parallel sizes)"."""
    kv = f" ({model.num_kv_heads} KV heads)" if model.num_kv_heads != model.num_heads else ""
    gpus = "GPUs" if " or " in (degrees := tp_degrees_text(model)) else "GPU"  # (one degree, 1: "over 1 GPU")
    return (f"{model.name}'s {model.num_heads} attention heads{kv} split evenly only over {degrees} "
            f"{gpus} (vLLM refuses other tensor-parallel sizes)")  # fmt: skip


def tp_problem(model: ModelSpec, tp: int, field: str) -> str | None:
    """Why `field` = `tp` GPUs cannot serve `model` with tensor parallelism, or None when they can."""
    if tp in tp_degrees_allowed(model.num_heads, model.num_kv_heads):
        return None
    return f"{field} = {tp}: {tp_rule_text(model)}"


# ---------------------------------------------------------------- workload
class LengthDist(StrictModel):
    """Token-length distribution. `fixed` uses `mean`; `uniform` draws in [min, max]; `lognormal`
    has the given mean and log-space sigma, clipped to [min, max]."""

    dist: Literal["fixed", "uniform", "lognormal"] = Field("lognormal", description="Distribution family.")
    mean: int = Field(512, ge=1, le=1_048_576, description="Mean length, tokens (the value for `fixed`).")
    min: int = Field(1, ge=1, le=1_048_576, description="Smallest length, tokens.")
    max: int = Field(4096, ge=1, le=1_048_576, description="Largest length, tokens.")
    sigma: float = Field(0.8, ge=0, le=4, description="Log-space standard deviation (lognormal).")

    @model_validator(mode="after")
    def _check_bounds(self) -> LengthDist:
        if self.dist != "fixed" and self.min > self.max:
            raise field_error("min", self.min, f"must be <= max ({self.max}) (dist {self.dist!r} needs min <= mean <= "
                              f"max); allowed: >= 1 and <= {self.max}", ["max", "mean", "dist"])  # fmt: skip
        if self.dist != "fixed" and not self.min <= self.mean <= self.max:
            raise field_error("mean", self.mean, f"must lie between min ({self.min}) and max ({self.max}) (dist "
                              f"{self.dist!r}); allowed: >= {self.min} and <= {self.max}", ["min", "max", "dist"])  # fmt: skip
        return self

    @property
    def upper_bound(self) -> int:
        return self.mean if self.dist == "fixed" else self.max


class ArrivalConfig(StrictModel):
    process: Literal["poisson", "gamma", "constant", "offline", "closed_loop"] = Field(
        "poisson",
        description="poisson: random arrivals; gamma: bursty (CV knob); constant: evenly spaced; "
        "offline: all at t=0; closed_loop: N clients, each sends its next request when the last finishes.",
    )
    # (ge 1e-6, not gt 0: 5e-324 divided 1 by zero drawing the gaps; 1e-307 put arrivals past float range)
    rate_per_s: float = Field(10.0, ge=1e-6, le=100_000, description="Mean arrival rate, requests/s (1e-6 to 100,000).")
    burstiness_cv: float = Field(
        2.0, ge=0.1, le=10, description="Coefficient of variation of inter-arrival gaps (gamma; 1 = Poisson)."
    )
    num_clients: int = Field(16, ge=1, le=10_000, description="Concurrent clients (closed_loop).")
    think_time_s: float = Field(0.0, ge=0, le=3600, description="Client pause between a reply and its next request, s.")


class RequestClass(StrictModel):
    name: str = Field("default", min_length=1, max_length=40, description="Class name.")
    share: float = Field(1.0, gt=0, le=1, description="Fraction of requests in this class.")
    priority: int = Field(0, ge=0, le=9, description="Priority (0 = served first under priority ordering).")


MAX_TRACE_ROWS = 100_000
MAX_TRACE_HASH_IDS = 4_000_000  # total block hash ids in one trace (bounds config size)
MAX_HASH_ID = 2**61 - 2  # largest block hash id: Python hashes ints modulo 2^61 - 1 (the prefix cache's block keys)


class Trace(StrictModel):
    """A request trace (e.g. from an uploaded CSV): one entry per request, sorted by arrival."""

    arrival_s: list[float] = Field(
        description=f"Arrival time of each request, s: 0 to {MAX_SIM_TIME_S:,.0f} (limits.max_sim_time_s's largest value)."
    )
    prompt_tokens: list[int] = Field(description="Prompt length of each request, tokens.")
    output_tokens: list[int] = Field(description="Output length of each request, tokens.")
    priority: list[int] | None = Field(None, description="Priority of each request (0 = highest).")
    block_hash_ids: list[list[int]] | None = Field(
        None,
        description="Per request, ids of its prompt's consecutive blocks of hash_block_tokens tokens (Mooncake "
        "hash_ids): requests whose lists start with the same ids share that prefix (prefix caching).",
    )
    hash_block_tokens: int = Field(512, ge=1, le=65536, description="Tokens covered by one block hash id (Mooncake: 512).")

    @model_validator(mode="after")
    def _check(self) -> Trace:
        n = len(self.arrival_s)
        if not 1 <= n <= MAX_TRACE_ROWS:
            raise ValueError(f"a trace needs 1 to {MAX_TRACE_ROWS} rows, got {n}")
        cols = {"prompt_tokens": self.prompt_tokens, "output_tokens": self.output_tokens}
        if self.priority is not None:
            cols["priority"] = self.priority
        for name, col in cols.items():
            if len(col) != n:
                raise ValueError(f"trace column {name} has {len(col)} rows, arrival_s has {n}")
        # rows are numbered from 1 (the first request), as a spreadsheet shows them below the header
        for name in ("prompt_tokens", "output_tokens"):
            row = next((i for i, v in enumerate(cols[name]) if not 1 <= v <= 1_048_576), None)
            if row is not None:
                raise ValueError(f"trace row {row + 1}: {name} = {cols[name][row]} must be in [1, 1048576]")
        row = next((i for i, a in enumerate(self.arrival_s) if not 0 <= a <= MAX_SIM_TIME_S), None)  # (NaN fails both)
        if row is not None:
            raise ValueError(f"trace row {row + 1}: arrival_s = {self.arrival_s[row]} s is outside [0, {MAX_SIM_TIME_S:,.0f}] s: "
                             "no run simulates past limits.max_sim_time_s's largest value")  # fmt: skip
        row = next((i for i, (a, b) in enumerate(zip(self.arrival_s, self.arrival_s[1:])) if b < a), None)
        if row is not None:
            raise ValueError(f"trace row {row + 2}: arrival_s = {self.arrival_s[row + 1]} is earlier than the row "
                             f"before ({self.arrival_s[row]}); rows must be sorted by arrival")  # fmt: skip
        row = None if self.priority is None else next((i for i, p in enumerate(self.priority) if not 0 <= p <= 9), None)
        if row is not None:
            raise ValueError(f"trace row {row + 1}: priority = {self.priority[row]} must be in [0, 9]")
        if self.block_hash_ids is not None:
            if len(self.block_hash_ids) != n:
                raise ValueError(f"trace column block_hash_ids has {len(self.block_hash_ids)} rows, arrival_s has {n}")
            if sum(len(h) for h in self.block_hash_ids) > MAX_TRACE_HASH_IDS:
                raise ValueError(f"trace block_hash_ids holds more than {MAX_TRACE_HASH_IDS:,} ids in total")
            hb = self.hash_block_tokens
            for i, (ids, p) in enumerate(zip(self.block_hash_ids, self.prompt_tokens)):
                if len(ids) > -(-p // hb):  # (rows numbered from 1, as above: these said row 0 for the first)
                    raise ValueError(f"trace row {i + 1}: {len(ids)} block hash ids for {p} prompt tokens (blocks of {hb})")
                # (2^63 overflowed the cache's int64 arrays mid-run; 2^61 - 1 + k hashed as k: a false prefix hit)
                if ids and not (0 <= min(ids) and max(ids) <= MAX_HASH_ID):  # (min/max: C loops over 4 million ids)
                    raise ValueError(f"trace row {i + 1}: block hash ids must be >= 0 and <= {MAX_HASH_ID} (2^61 - 2)")
        return self


class SharedPrefixConfig(StrictModel):
    """A pool of system prompts (or few-shot templates) that requests start with (prefix caching)."""

    num_system_prompts: int = Field(0, ge=0, le=10_000, description="System prompts in the pool (0 = none shared).")
    share_ratio: float = Field(
        0.0, ge=0, le=1, description="Fraction of requests (sessions) that start with a system prompt from the pool."
    )
    system_prompt_tokens: LengthDist = Field(
        LengthDist(dist="fixed", mean=1024, min=1, max=1024), description="Length of each pool entry, tokens (drawn once)."
    )

    @property
    def enabled(self) -> bool:
        return self.num_system_prompts > 0 and self.share_ratio > 0


class SessionConfig(StrictModel):
    """Multi-turn conversations: each turn's prompt is the previous turn's prompt and reply plus new user tokens."""

    turns: int = Field(1, ge=1, le=100, description="Turns per session (1 = independent requests).")
    user_tokens: LengthDist = Field(
        LengthDist(dist="lognormal", mean=128, min=1, max=1024, sigma=0.8),
        description="New user tokens added by each turn after the first, tokens.",
    )
    think_time_s: float = Field(
        20.0, ge=0, le=3600,
        description="Mean think time before the next turn is sent (exponential), s: after the previous turn's reply "
        "(closed_loop) or after the previous turn's send.",
    )
    closed_loop: bool = Field(
        True,
        description="true: a turn is sent its think time after the previous turn's reply is complete (on whichever "
        "instance of a deployment ran it; the router routes it then); false: at a time fixed in advance, think time "
        "after the previous turn's send (a deployment config that omits this field gets false, as older links did).",
    )


class WorkloadConfig(StrictModel):
    name: str = Field("chat", min_length=1, max_length=MAX_NAME_LEN, description="Workload name.")
    num_requests: int = Field(200, ge=1, le=200_000, description="Requests to simulate.")
    arrival: ArrivalConfig = ArrivalConfig()
    prompt_tokens: LengthDist = LengthDist()
    output_tokens: LengthDist = LengthDist(dist="lognormal", mean=256, min=1, max=2048, sigma=0.8)
    num_samples: int = Field(
        1, ge=1, le=16, description="Parallel samples / beam width n per request; samples share the prompt's KV."
    )
    # strict=False only for the container: JSON gives a list; each class is still validated strictly
    classes: tuple[RequestClass, ...] = Field(
        (RequestClass(),), min_length=1, max_length=8, strict=False,
        description="Request classes, 1 to 8, each {name, share, priority}: a request falls in a class with probability its "
        "share (the shares sum to 1); priority 0 is served first under scheduler.queue_order priority. Per-class latency "
        "in the summary.")
    trace: Trace | None = Field(None, description="Replay these requests instead of generating them.")
    shared_prefix: SharedPrefixConfig = SharedPrefixConfig()
    sessions: SessionConfig = SessionConfig()

    @model_validator(mode="after")
    def _check(self) -> WorkloadConfig:
        total = sum(c.share for c in self.classes)
        if abs(total - 1.0) > 1e-6:
            # (placed at the last class's share, a value somebody set: "workload.classes = [0.5]" was the shares' list)
            last = len(self.classes) - 1
            summed = " + ".join(f"{c.share:g}" for c in self.classes) + f" = {total:g}" if last else f"{total:g}"
            raise field_error(("classes", last, "share"), self.classes[last].share,
                              f"the classes' shares must sum to 1, got {summed}")
        if self.trace is not None and self.num_requests > (rows := len(self.trace.arrival_s)):
            raise field_error("num_requests", self.num_requests,
                              f"exceeds the trace's {rows} rows; allowed: >= 1 and <= {rows}")
        return self

    @property
    def max_prompt_tokens(self) -> int:
        if self.trace is not None:
            return max(self.trace.prompt_tokens[: self.num_requests])
        sp, ses = self.shared_prefix, self.sessions
        system = sp.system_prompt_tokens.upper_bound if sp.enabled else 0
        later = (ses.turns - 1) * (self.output_tokens.upper_bound + ses.user_tokens.upper_bound)
        return system + self.prompt_tokens.upper_bound + later

    @property
    def max_output_tokens(self) -> int:
        if self.trace is not None:
            return max(self.trace.output_tokens[: self.num_requests])
        return self.output_tokens.upper_bound

    @property
    def longest_trace_row(self) -> int | None:
        """Index of the trace request with the most prompt + output tokens (the first such); None without a trace."""
        if self.trace is None:
            return None
        n = self.num_requests
        totals = [p + o for p, o in zip(self.trace.prompt_tokens[:n], self.trace.output_tokens[:n])]
        return totals.index(max(totals))

    @property
    def max_request_tokens(self) -> int:
        """Most prompt + output tokens one request can hold: a trace's largest row (its longest prompt and longest
        output may be different requests), else the length bounds' sum."""
        row = self.longest_trace_row
        if row is not None:
            return self.trace.prompt_tokens[row] + self.trace.output_tokens[row]
        return self.max_prompt_tokens + self.max_output_tokens


# ---------------------------------------------------------------- KV cache & memory
class KVCacheConfig(StrictModel):
    layout: Literal["paged", "contiguous"] = Field(
        "paged", description="paged: blocks on demand (PagedAttention); contiguous: reserve max_model_len per request (Orca)."
    )
    block_size: int = Field(16, ge=1, le=1024, description="Tokens per KV block (vLLM default 16).")
    gpu_memory_utilization: float = Field(
        0.9, ge=0.05, le=1.0, description="Fraction of GPU memory the engine may use (weights + workspace + KV)."
    )
    memory_rule: Literal["vllm", "vllm-v1", "sglang", "tensorrt-llm", "distserve"] = Field(
        "vllm",
        description="How the engine sizes its KV pool from gpu_memory_utilization u (sim_core/costmodel.py plan_memory): "
        "vllm: u x memory - weights - activation peak - runtime, the peak as vLLM V0 profiles it (the sampler's FP32 "
        "logits of max_num_seqs sequences); vllm-v1: the same with vLLM 0.7 V1's profile (16-bit logits of max_num_seqs "
        "positions, no sampler); sglang (mem_fraction_static): u x memory - weights; "
        "tensorrt-llm (kv_cache_free_gpu_mem_fraction): u x (memory - weights - activations - runtime); "
        "distserve: u x memory - 1 % of memory - weights (no activation profile).",
    )
    kv_dtype: Dtype = Field("bf16", description="KV-cache element precision.")
    kv_compression: float = Field(
        1.0, ge=0.05, le=1.0, description="Fraction of KV bytes kept after compression (article: 0.7-0.9; 1 = none)."
    )
    swap_space_gb: float = Field(
        4.0, ge=0, le=4096,
        description="Host memory for swapped-out KV blocks, GiB per GPU (vLLM's swap_space, also GiB: the name keeps vLLM's "
        "\"GB\").",
    )
    watermark: float = Field(
        0.01, ge=0, le=0.5, description="Fraction of KV blocks kept free at admission (watermark admission)."
    )
    enable_prefix_caching: bool = Field(
        False,
        description="Keep finished requests' full prompt blocks as reusable (reference count 0, evicted least recently "
        "used first); a prompt skips the compute of its longest cached prefix (vLLM automatic prefix caching). A "
        "request pre-empted by recompute leaves its prompt and output blocks cached and recomputes what was evicted. "
        "In a deployment: one cache per replica, or per prefill instance (the decode pool receives whole KV).",
    )
    eviction_policy: Literal["lru", "lfu"] = Field(
        "lru",
        description="Which unreferenced cached block is evicted first (prefix caching): lru = least recently released "
        "(vLLM V1, SGLang default); lfu = fewest requests that used it, then least recently released (SGLang "
        "--radix-eviction-policy lfu): a hot system prompt survives a scan of one-off prompts.",
    )


# ---------------------------------------------------------------- scheduler
class TimeSliceConfig(StrictModel):
    prefill_slice_ms: float = Field(20, ge=1, le=10_000, description="Length of a prefill phase, ms (article: 10-30).")
    decode_slice_ms: float = Field(20, ge=1, le=10_000, description="Length of a decode phase, ms (article: 10-30).")


class QuotaConfig(StrictModel):
    prefill_share: float = Field(0.7, ge=0.05, le=0.95, description="Prefill share of GPU time over the window.")
    window_ms: float = Field(1000, ge=10, le=100_000, description="Window over which the share is measured, ms.")
    max_prefill_ms: float = Field(100, ge=1, le=100_000, description="Longest run of prefill ticks, ms.")
    decode_min_tokens_per_s: float = Field(
        100, ge=0, le=1e7, description="Decode throughput floor; below it decode runs first, tokens/s."
    )


class DynamicBatchConfig(StrictModel):
    enabled: bool = Field(False, description="Halve the batch cap when a tick is slower than the target, +1 otherwise.")
    target_tick_ms: float = Field(50, ge=1, le=100_000, description="Latency target for one tick, ms.")


class SmartPreemptionConfig(StrictModel):
    enabled: bool = Field(False, description="Suspend a long-running prefill while many decodes wait (article §5.3).")
    threshold_ms: float = Field(50, ge=1, le=100_000, description="Prefill runtime after which it may be suspended, ms.")
    decode_queue_limit: int = Field(8, ge=0, le=100_000, description="Suspend while more decodes than this wait.")


class NewTokenRatioConfig(StrictModel):
    """SGLang's estimate of how much of its remaining output a running request will still write (admission
    `new_token_ratio`): the scheduler's `new_token_ratio`, which starts at `init_new_token_ratio`, falls by
    (init - min) / decay_steps after every decode-only step to min = init x min_new_token_ratio_factor, is set
    from the survivors' progress after a retract (pre-emption), and starts again at init when the engine idles.
    Defaults: SGLang's (SGLANG_INIT_NEW_TOKEN_RATIO 0.7, SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR 0.14,
    SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS 600; SGLang 0.3.0: 0.7, a floor of 0.1 and 0.001 per step, i.e. a factor of 1/7)."""

    init_new_token_ratio: float = Field(
        0.7, gt=0, le=1,
        description="Share of its remaining output (at most 4,096 tokens) each running request is assumed to still "
        "write, when the engine starts or idles (SGLang: SGLANG_INIT_NEW_TOKEN_RATIO x schedule_conservativeness, "
        "at most 1). More than 0, at most 1.",
    )
    min_new_token_ratio_factor: float = Field(
        0.14, ge=0, le=1,
        description="The ratio's floor, as a fraction of init_new_token_ratio (SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR). 0 to 1.",
    )
    decay_steps: int = Field(
        600, ge=1, le=1_000_000,
        description="Decode-only steps the ratio takes to fall from init to its floor (SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS). "
        "1 to 1,000,000.",
    )

    @property
    def min_new_token_ratio(self) -> float:
        return self.init_new_token_ratio * self.min_new_token_ratio_factor

    @property
    def decay_per_step(self) -> float:
        return (self.init_new_token_ratio - self.min_new_token_ratio) / self.decay_steps


class SpeculativeConfig(StrictModel):
    """Speculative decoding (Leviathan et al. 2023; EAGLE / MTP heads): a draft proposes k tokens, the
    target verifies k+1 positions in one pass and keeps 1 + the accepted ones."""

    enabled: bool = Field(False, description="Decode with speculation (each decode verifies k+1 positions).")
    num_draft_tokens: int = Field(3, ge=1, le=16, description="Draft length k: tokens proposed per step.")
    acceptance_rate: float = Field(
        0.7, ge=0, le=1, description="Probability that each draft token is accepted, independently (alpha)."
    )
    # strict=False only for the container (JSON gives a list); each entry is still a strict number
    # (bounds on the entries: an entry out of range or NaN is named by its index, with the range)
    acceptance_by_position: tuple[Annotated[float, Field(strict=True, ge=0, le=1)], ...] | None = Field(
        None, max_length=16, strict=False, description="Per-position acceptance of draft tokens 1..k (overrides acceptance_rate)."
    )
    draft: Literal["head", "model"] = Field(
        "head", description="head: an MTP/EAGLE head priced as a fraction of a target step, its memory one target layer; "
        "model: a separate draft model. The draft's weights and KV are counted in the memory plan."
    )
    draft_cost_fraction: float = Field(
        0.05, ge=0, le=2, description="head: cost of one draft token as a fraction of a plain target decode step."
    )
    draft_model: str = Field(
        "llama-3.2-1b", min_length=1, max_length=80, description="model: the draft's model preset; its weights and KV share the GPUs' memory with the target's "
        "(fewer KV blocks)."
    )

    @model_validator(mode="after")
    def _check(self) -> SpeculativeConfig:
        table = self.acceptance_by_position
        if table is not None:
            if len(table) != self.num_draft_tokens:
                raise field_error("acceptance_by_position", list(table),
                                  f"has {len(table)} entries; it needs one per draft token, num_draft_tokens "
                                  f"({self.num_draft_tokens})", ["num_draft_tokens"])  # fmt: skip
            # (each entry's range, NaN included, is its own bound: refused by its index before this check runs)
        if self.draft == "model":
            # (checked here, not when the run prices the draft: the run said only "unknown model preset 'nosuch'",
            # naming no field; a link and --set now name it with the known presets, as other preset names are)
            from sim_core.presets import list_presets  # (presets imports this module)

            known = list_presets("models")
            if self.draft_model not in known:
                raise field_error("draft_model", self.draft_model, f"unknown model preset"
                                  f"{did_you_mean(self.draft_model, known)}; allowed (with draft 'model'): "
                                  f"{', '.join(known)} (presets/models)")  # fmt: skip
        return self

    @property
    def acceptance(self) -> tuple[float, ...]:
        """Acceptance probability of draft position 1..k."""
        return self.acceptance_by_position or (self.acceptance_rate,) * self.num_draft_tokens

    def expected_tokens_per_step(self) -> float:
        """E[1 + accepted]: with independent alpha this is (1 - alpha^(k+1)) / (1 - alpha)."""
        total, survive = 1.0, 1.0
        for a in self.acceptance:
            survive *= a
            total += survive
        return total


class SchedulerConfig(StrictModel):
    name: str = Field("vLLM V1 / Sarathi-Serve", min_length=1, max_length=MAX_NAME_LEN,
                      description="Engine or policy this setting models.")
    batching: Literal["continuous", "static", "exclusive"] = Field(
        "continuous",
        description="continuous: requests join and leave every tick; static: a batch runs to completion; "
        "exclusive: one request at a time.",
    )
    prefill_mode: Literal["prefill_first", "decode_first", "time_slice", "quota"] = Field(
        "decode_first",
        description="prefill_first: prefill whenever possible (vLLM V0); decode_first: decodes plus prefill chunks "
        "in one token budget (Sarathi-Serve, vLLM V1); time_slice: alternate phases; quota: GPU-time shares.",
    )
    enable_chunked_prefill: bool = Field(
        True, description="Split prompts into chunks of at most max_num_batched_tokens (always on for decode_first)."
    )
    mix_decodes: bool = Field(
        False, description="prefill_first: running decodes join prefill ticks, taking their tokens from the budget "
        "first (SGLang mixed chunk, TensorRT-LLM in-flight batching)."
    )
    queue_order: Literal["fcfs", "priority", "shortest_prompt_first"] = Field(
        "fcfs", description="Order of the waiting queue."
    )
    max_num_seqs: int = Field(256, ge=1, le=8192, description="Most requests running at once (max batch size).")
    max_num_batched_tokens: int = Field(
        2048, ge=1, le=1_048_576, description="Token budget per tick; the prefill chunk size, tokens."
    )
    admission: Literal["watermark", "reserve", "greedy", "new_token_ratio"] = Field(
        "watermark",
        description="watermark: admit while the whole prompt's blocks fit with a reserve of free blocks kept, and take "
        "them all at admission, so its chunks need none (vLLM V0's block manager, Sarathi-Serve's); reserve: blocks for "
        "prompt + max output up front, never pre-empt (TensorRT-LLM GUARANTEED_NO_EVICT); greedy: admit while the first "
        "chunk's blocks fit, the later chunks taking theirs as they run (vLLM V1, TensorRT-LLM MAX_UTILIZATION); "
        "new_token_ratio: admit while the prompt plus its output (at most 4,096 tokens) fits in the free KV tokens less "
        "the running requests' remaining outputs x new_token_ratio (SGLang's PrefillAdder).",
    )
    new_token_ratio: NewTokenRatioConfig = Field(
        NewTokenRatioConfig(), description="The ratio's start, floor and decay (admission new_token_ratio only)."
    )
    preemption: Literal["recompute", "swap"] = Field(
        "recompute",
        description="When KV runs out, a running request is evicted (preemption_victim: which one): recompute drops "
        "its KV and prefills again; swap copies its KV to host memory over PCIe.",
    )
    preemption_victim: Literal["last_admitted", "fewest_written", "latest_arrival"] = Field(
        "last_admitted",
        description="Which running request a pre-emption takes first. last_admitted: vLLM pops its running list "
        "(queue_order priority: the lowest-priority latest arrival); fewest_written: SGLang's retract_decode, the "
        "decode with the fewest output tokens written (ties: the longest prompt), running prefills before the last decode; "
        "latest_arrival: TensorRT-LLM's MaxUtilizationScheduler pauses the last started request of its active list, "
        "which keeps arrival order (on a decode instance, the order hand-offs reached it).",
    )
    preemption_headroom_steps: int = Field(
        1, ge=1, le=4096,
        description="A decode short of KV blocks pre-empts until the decodes left have blocks for this many decode "
        "steps each, but above 1 never the last decode: 1, the step's own (vLLM; SGLang since PR #9989); 20, SGLang "
        "before it (retract_decode_steps).",
    )
    preemption_requeue: Literal["by_key", "append"] = Field(
        "by_key",
        description="Where a request pre-empted by recompute waits. by_key: under its own queue key, ahead of every "
        "later arrival (vLLM V1 prepends it to its waiting queue; under priority, its heap's place); append: behind "
        "every request waiting at that moment (under priority or shortest_prompt_first, every one of its class), "
        "ahead of later arrivals (SGLang extends its waiting queue with the retracted requests).",
    )
    chunk_short_of_blocks: Literal["preempt", "shrink"] = Field(
        "preempt",
        description="When a running prefill's next chunk needs more KV blocks than are free: preempt: running "
        "requests are pre-empted as for a decode (preemption_victim) until it fits, and when the victim is the chunk's "
        "own request it waits (vLLM V0/V1, TensorRT-LLM MAX_UTILIZATION); shrink: the chunk is cut to the free "
        "blocks (SGLang); under admission new_token_ratio it is cut to the free KV tokens less the running "
        "requests' reservation whenever that is smaller, and to the free blocks only when that is not positive "
        "(SGLang's PrefillAdder.add_chunked_req, rem_total_tokens).",
    )
    time_slice: TimeSliceConfig = TimeSliceConfig()
    quota: QuotaConfig = QuotaConfig()
    dynamic_batch: DynamicBatchConfig = DynamicBatchConfig()
    smart_preemption: SmartPreemptionConfig = SmartPreemptionConfig()
    speculative: SpeculativeConfig = SpeculativeConfig()


# ---------------------------------------------------------------- calibration, SLOs, limits
class CalibrationConfig(StrictModel):
    """Roofline efficiencies and fixed costs: one calibration profile (presets/calibration/*.json).

    Efficiencies, all-reduce and per-layer constants are fitted on GPU operator profiles
    (`python -m sim_core validate --fit`); CPU overheads per engine family on that family's published
    rows. The defaults are the `default` profile; see sim_core/validate.py for which rows fit what."""

    profile: str = Field(
        "default", pattern=r"^[A-Za-z0-9._-]{1,60}$",
        description="Name of the calibration profile these values come from (presets/calibration; letters, digits, . _ -).",
    )
    gemm_efficiency: float = Field(0.74, ge=0.01, le=1, description="Achieved fraction of peak FLOP/s in GEMMs.")
    fp8_gemm_efficiency: float = Field(
        0.57, ge=0.01, le=1, description="Achieved fraction of FP8 peak FLOP/s in GEMMs (FP8 weights)."
    )
    attention_efficiency: float = Field(0.14, ge=0.01, le=1, description="Achieved fraction of peak FLOP/s in attention.")
    memory_efficiency: float = Field(
        0.86, ge=0.01, le=1, description="Achieved fraction of HBM bandwidth, before the GPU's "
        "hardware.hbm_efficiency_scale (their product, the fraction the kernels reach, is at most 1).",
    )
    layer_fixed_us: float = Field(
        51.0, ge=0, le=10_000,
        description="GPU time per layer per tick that does not scale with the batch (norm, rotary, activation, "
        "residual and attention kernels at their minimum size), us.",
    )
    tick_overhead_ms: float = Field(
        0.4, ge=0, le=1000, description="Fixed CPU cost per tick (scheduler, launches, sampling), ms."
    )
    per_seq_overhead_us: float = Field(
        0.0, ge=0, le=10_000, description="CPU cost per running sequence per tick (input prep, detokenise), us."
    )
    interconnect_efficiency: float = Field(
        0.6, ge=0.01, le=1, description="Achieved fraction of GPU-link bandwidth in all-reduce."
    )
    allreduce_latency_us: float = Field(37.0, ge=0, le=10_000, description="Fixed latency of one all-reduce, us.")
    dequant_flops_per_weight: float = Field(
        90.0, ge=0, le=10_000,
        description="Weight-only quantised GEMMs (INT8/INT4 weights, or FP8 weights on a GPU without FP8 tensor "
        "cores) dequantise every weight on CUDA cores each forward pass: cost per weight element, in FLOPs at the "
        "GPU's 16-bit tensor peak (a CUDA-core op costs ~16 of them on A100/H100).",
    )
    gemm_fixed_us: float = Field(
        6.0, ge=0, le=1000,
        description="Time of one GEMM kernel that does not scale with its size (ramp-up and tail wave), us; four "
        "GEMMs per layer per tick (QKV, O, gate/up, down). Small GEMMs (high TP degrees, small models) stream weights "
        "below the bandwidth large ones reach.",
    )
    gqa_kv_reread_fraction: float = Field(
        0.0, ge=0, le=1,
        description="Decode attention kernels that read the KV cache once per query head (TensorRT-LLM 0.5's masked "
        "MHA: one thread block per query head) read each cached KV byte once more for every other query head of its "
        "GQA group, mostly from L2: the cost of those re-reads as a fraction of the HBM time of the same bytes "
        "(0-1; 0 = the kernel reads a KV head once for its whole group, as XQA, FlashInfer and FlashAttention do).",
    )


class SLOConfig(StrictModel):
    ttft_s: float = Field(2.0, gt=0, le=3600, description="Time-to-first-token objective for goodput, s.")
    tpot_s: float = Field(0.1, gt=0, le=60, description="Time-per-output-token objective for goodput, s.")


class LimitsConfig(StrictModel):
    # (ge MIN_RATE: a 5e-324 s run was one idle row no time axis could divide into ticks, a traceback in the browser)
    max_sim_time_s: float = Field(
        3600, ge=MIN_RATE, le=MAX_SIM_TIME_S, description="Stop the run after this much simulated time (overload guard), s."
    )
    max_ticks: int = Field(2_000_000, ge=1, le=50_000_000, description="Stop the run after this many ticks.")
    num_recorded_batches: int = Field(
        2000, ge=0, le=100_000, description="Ticks at the start whose full batch is recorded (step-through view)."
    )
    coalesce_ticks: bool = Field(
        True, description="Advance runs of identical decode ticks in one vectorised step (same results)."
    )


# ---------------------------------------------------------------- deployment (replicas, router, disaggregation)
Router = Literal["round_robin", "least_outstanding", "least_kv", "prefix_affinity", "cache_aware", "session", "weighted_score"]
# the routers that read engine state: deployment.state_refresh_s applies to them
STATE_ROUTERS: tuple[Router, ...] = ("least_kv", "prefix_affinity", "weighted_score")
# Each router in one plain sentence, under the app's choice of it (the field's description below is the whole rule,
# its help: one paragraph of seven policies read as a wall of text)
ROUTER_SUMMARIES: dict[str, str] = {
    "round_robin": "Each replica in turn, whatever its load.",
    "least_outstanding": "The replica with the fewest requests queued or running (vLLM production stack).",
    "least_kv": "The replica using the smallest share of its KV cache, as of the router's last look.",
    "prefix_affinity": "The replica that has cached the longest start of the prompt, unless loads drift apart; then the "
                       "least loaded (SGLang's rule, read from the replicas' caches).",
    "cache_aware": "SGLang's router as built: the same rule on its own record of the prompts it sent each replica.",
    "session": "Every turn of a conversation to the same replica (sticky sessions); other requests to the least loaded.",
    "weighted_score": "The best sum of three scores: a short queue (x2), free KV cache (x2) and a cached prompt start (x3) "
                      "(llm-d's default).",
}


def max_memory_efficiency(hbm_efficiency_scale: float) -> float:
    """The highest calibration.memory_efficiency a GPU with this hbm_efficiency_scale runs: their product is the
    fraction of the datasheet HBM bandwidth the kernels reach, never above 1 (H100 SXM kernels reach ~90-93 % of its
    3.35 TB/s). The rule the config check and the calibration fit's grids (sim_core/validate.py) share."""
    return min(1.0, 1.0 / hbm_efficiency_scale)


def memory_efficiency_ceiling(hbm_efficiency_scale: float) -> float:
    """`max_memory_efficiency` rounded down to 4 decimals: the value the config check names as allowed (typed as
    shown, it is allowed) and the one an older config over the bound is migrated to (`_migrate_2_to_3`)."""
    return math.floor(max_memory_efficiency(hbm_efficiency_scale) * 1e4) / 1e4


LinkContention = Literal["fifo", "none"]  # how KV transfers share a side of the link (sim_core/cluster/transfer.py)


class LinkConfig(StrictModel):
    """The path the KV cache takes from a prefill instance to a decode instance."""

    # (ge 1e-6, not gt 0: at 5e-324 a transfer took inf seconds, which the fifo link's free-span search cannot place)
    bandwidth_gb_per_s: float | None = Field(
        50.0, ge=MIN_RATE, le=100_000,
        description="KV transfer bandwidth between one prefill and one decode instance, GB/s (1e9 bytes/s): "
        "NVLink within a node ~450, one 400 Gb/s InfiniBand/RoCE NIC 50 (1e-6 to 100,000). Empty: an ideal link "
        "(transfer is free).",
    )  # fmt: skip
    latency_us: float = Field(20.0, ge=0, le=1_000_000, description="Fixed latency of one KV transfer, us.")
    layerwise_pipelining: bool = Field(
        True, description="Send each layer's KV while the next layer computes: only the last layer's share of the "
        "transfer is exposed, or what the link could not carry during the prefill when that is more (needs the decode "
        "slot reserved when the prefill ends).",
    )  # fmt: skip
    contention: LinkContention = Field(
        "fifo",
        description="Transfers that share a side of the link. fifo: each instance's side (its GPUs' NICs or NVLink "
        "ports) carries one transfer at a time at the link's bandwidth, those it sends (a prefill instance) or receives "
        "(a decode instance) in the order they start, each in the time the earlier ones leave free; latency does not "
        "hold it. none: every transfer gets the whole bandwidth however many are in flight (before this knob).",
    )  # fmt: skip


class PoolConfig(StrictModel):
    """One pool of identical instances (prefill or decode) in a disaggregated deployment."""

    replicas: int = Field(1, ge=1, le=MAX_REPLICAS, description="Instances in this pool.")
    hardware: HardwareSpec | None = Field(None, description="GPU kind of this pool (empty: the top-level hardware).")
    tensor_parallel: int | None = Field(
        None, ge=1, le=MAX_TP,
        description="GPUs per instance (empty: the pool hardware's num_gpus); one the model's heads split evenly over.",
    )
    scheduler: SchedulerConfig | None = Field(
        None, description="Scheduler knobs of this pool's instances (empty: the top-level scheduler)."
    )


FirstTokenFrom = Literal["prefill", "decode"]  # which pool streams the user's first token (what TTFT counts)


class DisaggregationConfig(StrictModel):
    """xPyD: prefill on one pool, decode on another, KV shipped between them (DistServe, Splitwise, Dynamo)."""

    prefill: PoolConfig = Field(PoolConfig(), description="The pool that computes prompts and emits the first token.")
    decode: PoolConfig = Field(PoolConfig(), description="The pool that generates the remaining tokens.")
    link: LinkConfig = Field(LinkConfig(), description="KV transfer path from a prefill to a decode instance.")
    first_token_from: FirstTokenFrom = Field(
        "prefill",
        description="Where the user's first token comes from, so what TTFT counts. prefill: the prefill instance "
        "streams it when the prompt completes (DistServe's TTFT is the prefill phase; Splitwise's prompt machine "
        "sends it); the KV transfer and any wait for a decode slot then show in the next token's gap. decode: the "
        "decode instance samples it in its first tick after the KV has arrived and streams it (vLLM's disaggregated-"
        "prefill proxy, Dynamo, llm-d: the client reads the decode worker's stream; the prefill instance's one token "
        "is dropped), so TTFT counts the wait for a decode slot, the transfer and that decode tick, and the decode "
        "instance emits every output token.",
    )  # fmt: skip


MIN_STATE_REFRESH_S = 1e-6  # shortest non-zero refresh interval of a router's view of the engines, s


def check_state_refresh_s(value: float) -> float:
    """A router's state refresh interval: 0 (exact) or at least MIN_STATE_REFRESH_S (deployment.state_refresh_s and a
    plan's, planner.PlanSpec). 1e-300 s made arrival times / interval overflow to infinity in the refresh instants."""
    if 0 < value < MIN_STATE_REFRESH_S:
        raise ValueError(f"must be 0 (exact) or at least {MIN_STATE_REFRESH_S:g} s")
    return value


class DeploymentConfig(StrictModel):
    """Several engines on one clock. Absent (None) in SimConfig = one co-located engine (the default)."""

    replicas: int = Field(
        1, ge=1, le=MAX_REPLICAS,
        description="Identical co-located engine replicas behind the router (own TP group, KV, scheduler).",
    )
    router: Router = Field(
        "round_robin",
        description="How the router picks an instance for each arrival: round_robin; least_outstanding (fewest "
        "requests queued or running); least_kv (lowest KV-cache usage); prefix_affinity (SGLang's cache-aware "
        f"rule, its launcher's defaults: the instance caching the longest prefix if it covers > {CACHE_THRESHOLD * 100:g} % of the "
        f"prompt and loads are balanced (outstanding counts differ by <= {BALANCE_ABS_THRESHOLD} or the most is <= "
        f"{BALANCE_REL_THRESHOLD:g} x the fewest), else least outstanding; reads each engine's actual cache; needs "
        "kv_cache.enable_prefix_caching to differ from least_outstanding); cache_aware (SGLang's router as built: the "
        "same rule on the router's own approximate tree of the prompts it sent each instance, no engine query, blind "
        "to evictions, except that without a long enough match it picks the instance whose tree holds the fewest "
        "blocks); session (sticky sessions, vLLM production-stack's session router: every turn "
        "of a conversation to the instance its session id hashes to, whatever the load; requests without a "
        f"session of several turns to the least outstanding); weighted_score (llm-d's default endpoint picker: the highest "
        f"{QUEUE_SCORE_WEIGHT} x queue + {KV_SCORE_WEIGHT} x KV + {PREFIX_SCORE_WEIGHT} x prefix score, each in [0, 1]: "
        "waiting requests min-max normalised over the instances (fewer is better, all equal 1), 1 - KV usage, and the "
        f"share of the prompt's full blocks (at most {MAX_PREFIX_BLOCKS}) cached there, read from each engine's "
        "actual cache; ties to the next in turn, where llm-d picks at random; a decode pool's choice is least "
        "outstanding).",
    )  # fmt: skip
    disaggregation: DisaggregationConfig | None = Field(
        None, description="Separate prefill and decode pools (empty: every replica does both)."
    )
    state_refresh_s: float = Field(
        0.05,
        ge=0.0,
        le=60.0,
        description="Seconds between the router's refreshes of engine state, for least_kv, prefix_affinity and "
        "weighted_score: they route on each instance's KV usage, waiting queue and cached prefixes as of the last "
        "refresh instant (a multiple "
        "of this interval) plus the requests the router sent since. 0 = exact at every arrival (slowest to "
        "simulate). Default 0.05 s: llm-d's endpoint picker scrapes engine metrics every 50 ms "
        "(gateway-api-inference-extension, --refreshMetricsInterval); vLLM production-stack's router every 30 s "
        "(--engine-stats-interval). With closed-loop sessions, least_kv routes each turn as it arrives, on that "
        "same view; prefix_affinity and weighted_score there read exact state (their view would be a copy of every prefix cache at "
        "each refresh). Range: 0, or 1e-6 to 60.",
    )  # fmt: skip

    _refresh_zero_or_resolvable = field_validator("state_refresh_s")(check_state_refresh_s)


def _migrate_1_to_2(data: dict[str, Any]) -> dict[str, Any]:
    """Version 2 added the optional `deployment` section; a version-1 config is a single engine."""
    return data


def _migrate_2_to_3(data: dict[str, Any]) -> dict[str, Any]:
    """Version 3 refuses a calibration.memory_efficiency whose product with a GPU's hbm_efficiency_scale passes 1 (a
    kernel streaming past the datasheet bandwidth); the profiles before it were fitted up to 0.95, 1.016x an H100's.
    An older config (a link or file saved with such a profile) runs at the ceiling of every GPU it names, top-level and
    pools' (0.935 on an H100), rather than being refused. Only a config that names its version (what the app's links
    and exports and the CLI's saved files carry): one without is written by hand, under today's rules, and a value
    over the bound is refused with its range. Values of the wrong type, or out of the ranges version 2 allowed, are
    left for validation to name (an out-of-range scale's ceiling would be the value the message named)."""
    cal, scales = data.get("calibration"), []
    if ("schema_version" not in data or not isinstance(cal, dict)
            or not _in_range(CalibrationConfig, "memory_efficiency", eff := cal.get("memory_efficiency"))):  # fmt: skip
        return data
    dep = data.get("deployment")
    dis = dep.get("disaggregation") if isinstance(dep, dict) else None
    pools = [dis.get(role) for role in ("prefill", "decode")] if isinstance(dis, dict) else []
    for hw in [data.get("hardware"), *(p.get("hardware") for p in pools if isinstance(p, dict))]:
        scale = hw.get("hbm_efficiency_scale", 1.0) if isinstance(hw, dict) else 1.0
        if _in_range(HardwareSpec, "hbm_efficiency_scale", scale):
            scales.append(scale)
    ceiling = min((memory_efficiency_ceiling(x) for x in scales), default=1.0)
    return dict(data, calibration=dict(cal, memory_efficiency=ceiling)) if eff > ceiling else data


def _in_range(model: type[BaseModel], field: str, value: Any) -> bool:
    """`value` is one `model.field` accepts (its type and declared bounds: the model itself is asked)."""
    try:
        model.model_validate({field: value})
    except ValidationError:
        return False
    return True


# from_version -> function returning the dict upgraded to from_version + 1 (applied in order)
MIGRATIONS: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {1: _migrate_1_to_2, 2: _migrate_2_to_3}


def migrate_config_dict(data: Any) -> Any:
    """Upgrade an old config dict (old links, config files) to SCHEMA_VERSION; others pass unchanged."""
    if not isinstance(data, dict):
        return data
    version = data.get("schema_version", 1)
    if not isinstance(version, int) or isinstance(version, bool) or version not in MIGRATIONS:
        return data  # current, or unknown: validation names the field
    data = dict(data)
    while version in MIGRATIONS:
        data = MIGRATIONS[version](data)
        version += 1
    data["schema_version"] = version
    return data


def _sessions_open_loop_in_deployments(data: Any) -> Any:
    """A deployment's sessions are open loop unless the config says otherwise (links made before
    workload.sessions.closed_loop existed keep their behaviour; one engine defaults to closed loop)."""
    if not isinstance(data, dict) or data.get("deployment") is None:
        return data
    wl = data.get("workload")
    ses = wl.get("sessions") if isinstance(wl, dict) else None
    if not isinstance(ses, dict) or "closed_loop" in ses:
        return data
    return dict(data, workload=dict(wl, sessions=dict(ses, closed_loop=False)))


def pool_override(pool: PoolConfig, path: str) -> str | None:
    """What of `pool` replaces the top-level field `path` (dotted) in its instances' config (`pool_config`'s rule), as
    the pool's field name, e.g. 'tensor_parallel = 2'; None when its instances run with the top-level value."""
    section, _, name = path.partition(".")
    if section == "hardware" and name == "num_gpus" and pool.tensor_parallel is not None:
        return f"tensor_parallel = {pool.tensor_parallel}"
    if section == "hardware" and pool.hardware is not None:
        return f"hardware {pool.hardware.name!r}"
    if section == "scheduler" and pool.scheduler is not None:
        return f"scheduler {pool.scheduler.name!r}"
    return None


def pool_field(cfg: SimConfig, role: Literal["prefill", "decode"], path: str) -> str:
    """The dotted field of `cfg` to change so that the instances of the `role` pool run another `path` (a top-level
    field, as their single-engine config, `pool_config`, names it): the pool's own field where the pool sets that
    section or where one exists for it (hardware.num_gpus -> the pool's tensor_parallel, which changes this pool
    alone), else `path`. Advice about a pool's engine (its out-of-memory message) named the top-level hardware.num_gpus
    and scheduler.max_num_batched_tokens, which a pool with its own hardware or scheduler does not read."""
    dis = cfg.deployment.disaggregation if cfg.deployment else None
    if dis is None:
        return path
    pool, where = (dis.prefill if role == "prefill" else dis.decode), f"deployment.disaggregation.{role}"
    section = path.partition(".")[0]
    if path == "hardware.num_gpus":
        return f"{where}.tensor_parallel"
    if (section == "hardware" and pool.hardware is not None) or (section == "scheduler" and pool.scheduler is not None):
        return f"{where}.{path}"
    return path


def pool_config(cfg: SimConfig, role: Literal["prefill", "decode"]) -> SimConfig:
    """The single-engine config of one instance of a disaggregated pool: the pool's hardware, TP degree
    and scheduler over the top-level sections. Raises ValueError naming the pool when it is invalid."""
    dis = cfg.deployment.disaggregation if cfg.deployment else None
    if dis is None:
        raise ValueError("pool_config needs deployment.disaggregation")
    pool = dis.prefill if role == "prefill" else dis.decode
    data = cfg.model_dump(mode="python", exclude={"deployment"})
    if pool.hardware is not None:
        data["hardware"] = pool.hardware.model_dump(mode="python")
    if pool.tensor_parallel is not None:
        data["hardware"]["num_gpus"] = pool.tensor_parallel
    if pool.scheduler is not None:
        data["scheduler"] = pool.scheduler.model_dump(mode="python")
    if role == "decode":  # prefix caching saves prefill compute: it lives on the prefill pool (decode gets whole KV)
        data["kv_cache"] = dict(data["kv_cache"], enable_prefix_caching=False)
    try:
        return SimConfig.model_validate(data)
    except ValidationError as err:
        # (each problem by the field of `cfg` that sets it for this pool, pool_field: "hardware.num_gpus: ..." named
        # the top-level field, which a pool with its own tensor_parallel, hardware or scheduler does not read)
        def ours(text: str) -> str:
            return re.sub(r"(?<![\w.])(?:hardware|scheduler)\.\w+", lambda m: pool_field(cfg, role, m.group()), text)

        problems = []
        for e in err.errors():
            loc, msg = tuple(e["loc"]), ours(_qualified(e["msg"].removeprefix("Value error, "), tuple(e["loc"]), e.get("ctx")))
            path = ours(".".join(str(x) for x in loc))
            given = e.get("input")
            shown = f" = {given!r}"[:83] if loc and isinstance(given, int | float | str | bool) else ""
            problems.append(f"{path}{shown}: {msg}" if loc else msg)
        raise ValueError(f"deployment.disaggregation.{role} makes an invalid engine: {'; '.join(problems)}") from None


def _draft_kind(spec: SpeculativeConfig) -> str:
    """A pool's speculative draft as its KV layers are set (what a P/D transfer carries): 'off', 'head', 'model X'."""
    if not spec.enabled:
        return "off"
    return f"model {spec.draft_model}" if spec.draft == "model" else "head"


def _check_pool_drafts(cfg: SimConfig, prefill: SpeculativeConfig, decode: SpeculativeConfig) -> None:
    """Both pools speculate with the same draft layers, or neither does: the decode instance proposes from the draft's
    KV of the prompt, which the prefill instance computes and sends with the target's (costmodel.
    draft_kv_bytes_per_token). vLLM checks it at the P/D handshake and refuses a pair whose model-based drafts differ
    (vllm-project/vllm#49230: otherwise long prompts crash the decode side). The draft length and acceptance may
    differ: they change no KV layer."""
    ours, theirs = _draft_kind(prefill), _draft_kind(decode)
    if ours == theirs:
        return
    field = next(f for f, differs in (("enabled", prefill.enabled != decode.enabled), ("draft", prefill.draft != decode.draft),
                                      ("draft_model", True)) if differs)  # fmt: skip
    value = getattr(decode, field)
    raise ValueError(f"{pool_field(cfg, 'decode', f'scheduler.speculative.{field}')} = {value!r}: the decode pool's "
                     f"speculative draft ({theirs}) differs from the prefill pool's ({ours}); the decode instance "
                     "speculates from the draft's KV of the prompt, which the prefill instance computes and sends with "
                     "the target's (vLLM refuses such a pair at its P/D handshake, vllm-project/vllm#49230); allowed: "
                     f"the same speculative enabled, draft and draft_model in both pools ({ours} here, as the prefill "
                     "pool's)")  # fmt: skip


OPEN_LOOP = "'poisson', 'gamma', 'constant' or 'offline'"  # the arrival processes other than closed_loop


class SimConfig(StrictModel):
    """One scenario, whole: the hardware, the model, the workload, the KV cache, the scheduler, the cost model's
    calibration, the SLOs, the run's limits and (optionally) a deployment of replicas or prefill/decode pools.

    The one config model: presets, links, uploads, the CLI and the UI all validate through it, and
    `run_simulation(cfg)` runs it (same config, seed included, same result). Change one with `config_with`; list its
    settings with `python -m sim_core fields`. Strict and immutable as every section (`StrictModel`)."""

    schema_version: Literal[3] = Field(SCHEMA_VERSION, description="Config format version (older ones are migrated).")
    name: str = Field("custom", max_length=MAX_NAME_LEN, description="Scenario name (empty: 'custom').")
    description: str = Field("", max_length=MAX_TEXT_LEN, description="What this scenario shows.")
    seed: int = Field(0, ge=0, le=MAX_SEED, description="Random seed: same config and seed, same result.")
    hardware: HardwareSpec = HardwareSpec()
    model: ModelSpec = ModelSpec()
    workload: WorkloadConfig = WorkloadConfig()
    kv_cache: KVCacheConfig = KVCacheConfig()
    scheduler: SchedulerConfig = SchedulerConfig()
    calibration: CalibrationConfig = CalibrationConfig()
    slo: SLOConfig = SLOConfig()
    limits: LimitsConfig = LimitsConfig()
    deployment: DeploymentConfig | None = Field(
        None, description="Replicas behind a router and/or disaggregated prefill/decode pools (empty: one engine)."
    )

    @model_validator(mode="before")
    @classmethod
    def _migrate(cls, data: Any) -> Any:
        return _sessions_open_loop_in_deployments(migrate_config_dict(data))

    @field_validator("name", mode="before")
    @classmethod
    def _blank_name_is_unset(cls, value: Any) -> Any:
        # An empty (or blank) scenario name is read as no name, the default 'custom', not refused: it is what a user
        # gets by clearing the name (`--set name=`, a cleared box), and the run's summary and files start with the
        # name (": Llama-3.1-8B on ..." with an empty one). A section's name (hardware.name, model.name, ...) has no
        # such stand-in (its default would name another GPU or model), so an empty one is refused there.
        return "custom" if isinstance(value, str) and not value.strip() else value

    @field_validator("schema_version", mode="before")
    @classmethod
    def _known_version(cls, value: Any) -> Any:
        # (after _migrate, which upgrades 1 and 2 to 3: what is left here is 3 or a version this tool cannot read;
        # "schema_version = 99: Input should be 3" hid that 1 and 2 are read, and that 99 is a newer tool's file)
        reads = f"this tool reads schema versions 1 to {SCHEMA_VERSION} (older ones are migrated)"
        if isinstance(value, int) and not isinstance(value, bool) and value > SCHEMA_VERSION:
            raise ValueError(f"the config was written by a newer version of the tool (schema version {value}); "
                             f"{reads}: update the tool to read it")  # fmt: skip
        if value != SCHEMA_VERSION or isinstance(value, bool | float):
            raise ValueError(f"not a schema version; {reads}; allowed: 1 to {SCHEMA_VERSION}")
        return value

    @property
    def num_gpus_total(self) -> int:
        """GPUs of the whole deployment: replicas x TP (per pool when disaggregated)."""
        dep = self.deployment
        if dep is None:
            return self.hardware.num_gpus
        dis = dep.disaggregation
        if dis is None:
            return dep.replicas * self.hardware.num_gpus
        tp = lambda p: p.tensor_parallel or (p.hardware or self.hardware).num_gpus  # noqa: E731
        return dis.prefill.replicas * tp(dis.prefill) + dis.decode.replicas * tp(dis.decode)

    def tp_fields(self) -> dict[str, int]:
        """Each field that sets the TP degree of an engine this config runs -> that degree: hardware.num_gpus for one
        engine or replicas; with disaggregation, each pool's tensor_parallel, else its hardware's num_gpus, else the
        top-level one (pool_config's rule)."""
        dis = self.deployment.disaggregation if self.deployment else None
        if dis is None:
            return {"hardware.num_gpus": self.hardware.num_gpus}
        out = {}
        for role, pool in (("prefill", dis.prefill), ("decode", dis.decode)):
            where = f"deployment.disaggregation.{role}"
            if pool.tensor_parallel is not None:
                out[f"{where}.tensor_parallel"] = pool.tensor_parallel
            elif pool.hardware is not None:
                out[f"{where}.hardware.num_gpus"] = pool.hardware.num_gpus
            else:
                out["hardware.num_gpus"] = self.hardware.num_gpus
        return out

    @model_validator(mode="after")
    def _check_tensor_parallel(self) -> SimConfig:
        # (a TP degree the heads do not divide was priced with fractional heads per GPU; engines refuse to start.)
        # Before _check_deployment, so a pool's degree is named by its own field, not as "an invalid engine".
        for path, tp in self.tp_fields().items():
            if (problem := tp_problem(self.model, tp, path)) is not None:
                raise ValueError(problem)
        return self

    @model_validator(mode="after")
    def _check_draft_vocabulary(self) -> SimConfig:
        """A separate draft proposes token ids the target verifies, so both read one vocabulary: vLLM refuses a draft
        model whose vocab_size differs from the target's (V1 `DraftModelProposer._raise_if_vocab_size_mismatch`, V0
        `SpecDecodeWorker._vocab_size`). Llama-2-7B drafting for Llama-3.1-8B ran here, 32,000 tokens against 128,256.
        (A pool's own scheduler is checked when `pool_config` validates the pool's config.)"""
        spec = self.scheduler.speculative
        if not (spec.enabled and spec.draft == "model"):
            return self
        from sim_core.presets import models_of_vocabulary, read_preset_data  # (presets imports this module)

        vocab = read_preset_data("models", spec.draft_model)["vocab_size"]
        if vocab != self.model.vocab_size:
            same = models_of_vocabulary(self.model.vocab_size)
            raise field_error(("scheduler", "speculative", "draft_model"), spec.draft_model,
                              f"its vocabulary ({vocab:,} tokens) differs from the target model's ({self.model.vocab_size:,}): "
                              "a draft proposes token ids the target checks, so both need one tokenizer (vLLM refuses such a "
                              f"pair); allowed with this model: {', '.join(same) or 'no model preset (use draft head)'}")  # fmt: skip
        return self

    @model_validator(mode="after")
    def _check_deployment(self) -> SimConfig:
        dep = self.deployment
        if dep is None:
            return self
        if self.workload.arrival.process == "closed_loop" and self.workload.trace is None:
            raise field_error("workload.arrival.process", "closed_loop", "closed_loop arrivals are simulated on one "
                              f"engine only, not with a deployment section; allowed with one: {OPEN_LOOP}")  # fmt: skip
        if dep.disaggregation is not None:
            if dep.replicas != 1:
                # (set deployment.replicas to 1 as well: a link that adds disaggregation to a replicas preset read
                # "set ...prefill.replicas and .decode.replicas instead", which it had just done)
                raise ValueError(f"deployment.replicas ({dep.replicas}) must be 1 with disaggregation: the pools count "
                                 "their own instances (deployment.disaggregation.prefill.replicas and .decode.replicas); "
                                 "set deployment.replicas to 1 as well")  # fmt: skip
            pools = {role: pool_config(self, role) for role in ("prefill", "decode")}  # type: ignore[arg-type]
            _check_pool_drafts(self, pools["prefill"].scheduler.speculative, pools["decode"].scheduler.speculative)
        return self

    @model_validator(mode="after")
    def _check_hbm_bandwidth(self) -> SimConfig:
        eff, scale = self.calibration.memory_efficiency, self.hardware.hbm_efficiency_scale
        if eff > max_memory_efficiency(scale):  # (a pool's GPU: checked when pool_config validates its engine)
            top = _bound_text(memory_efficiency_ceiling(scale))
            raise ValueError(
                f"calibration.memory_efficiency = {eff!r} x hardware.hbm_efficiency_scale = {scale!r} is {eff * scale:.4g} "
                f"of the GPU's datasheet HBM bandwidth ({self.hardware.hbm_bandwidth_gb_per_s:g} GB/s): no kernel streams "
                f"past it, the product must be <= 1; allowed on this GPU: memory_efficiency >= 0.01 and <= {top} (or a "
                "lower hbm_efficiency_scale)"
            )
        return self

    @model_validator(mode="after")
    def _check_cross(self) -> SimConfig:
        wl, sch, m = self.workload, self.scheduler, self.model
        longest = wl.max_request_tokens
        row = wl.longest_trace_row
        top_len = _declared_bounds(("model", "max_model_len"))[2]
        if row is not None and longest > m.max_model_len:  # (a trace: the request, by row as the trace loader counts)
            p, o = wl.trace.prompt_tokens[row], wl.trace.output_tokens[row]
            raise field_error("model.max_model_len", m.max_model_len,
                              f"trace row {row + 1}: prompt_tokens {p} + output_tokens {o} = {longest} tokens, more "
                              f"than model.max_model_len ({m.max_model_len}); allowed: >= {longest} and <= {top_len} (or drop the row)")
        if longest > m.max_model_len:
            raise field_error("model.max_model_len", m.max_model_len,
                              f"the workload can produce {wl.max_prompt_tokens} prompt + {wl.max_output_tokens} output = "
                              f"{longest} tokens, more than model.max_model_len ({m.max_model_len}); allowed: >= {longest} and <= {top_len} "
                              "(or lower the workload's length max)")  # fmt: skip
        chunked = sch.enable_chunked_prefill or sch.prefill_mode == "decode_first"
        if not chunked and sch.max_num_batched_tokens < wl.max_prompt_tokens:
            raise field_error("scheduler.max_num_batched_tokens", sch.max_num_batched_tokens,
                              f"smaller than the longest prompt ({wl.max_prompt_tokens}) while chunked prefill is off "
                              f"(scheduler.enable_chunked_prefill false, scheduler.prefill_mode {sch.prefill_mode!r}); "
                              f"allowed: >= {wl.max_prompt_tokens} (or turn on scheduler.enable_chunked_prefill)")
        if self.kv_cache.enable_prefix_caching and self.kv_cache.layout != "paged":
            raise field_error("kv_cache.enable_prefix_caching", True, f"needs kv_cache.layout 'paged' (blocks are what "
                              f"is shared), not {self.kv_cache.layout!r}; allowed with it: false")  # fmt: skip
        spec = sch.speculative
        if spec.enabled and wl.num_samples > 1:
            raise field_error("workload.num_samples", wl.num_samples,
                              "must be 1 while scheduler.speculative.enabled is true; allowed with it: 1")
        if (wl.shared_prefix.enabled or wl.sessions.turns > 1) and wl.trace is None and wl.arrival.process == "closed_loop":
            raise field_error("workload.arrival.process", "closed_loop", "workload.shared_prefix / workload.sessions "
                              f"need an open-loop arrival process; allowed with them: {OPEN_LOOP}")  # fmt: skip
        if sch.prefill_mode == "decode_first" and sch.max_num_batched_tokens < sch.max_num_seqs:
            raise field_error("scheduler.max_num_batched_tokens", sch.max_num_batched_tokens,
                              f"must be >= scheduler.max_num_seqs ({sch.max_num_seqs}) under scheduler.prefill_mode "
                              f"'decode_first', so that every running decode fits in one tick; allowed: >= "
                              f"{sch.max_num_seqs} and <= {_declared_bounds(('scheduler', 'max_num_batched_tokens'))[2]} "
                              "(or lower scheduler.max_num_seqs)")
        return self


# ---------------------------------------------------------------- error messages
def field_info(loc: tuple[Any, ...], root: type[BaseModel] | None = None) -> Any:
    """The FieldInfo a validation-error location points to in `root` (default SimConfig), or None."""
    return _walk(loc, root)[0]


def _walk(loc: tuple[Any, ...], root: type[BaseModel] | None = None) -> tuple[Any, Any]:
    """(FieldInfo, model class of its value or None) at `loc` in `root` (default SimConfig); (None, None) when `loc`
    names no field. At `()`: (None, root)."""
    model: Any = root or SimConfig
    info = None
    for part in loc:
        if isinstance(part, int) or model is None:
            continue
        fields = getattr(model, "model_fields", None)
        if not fields or part not in fields:
            return None, None
        info = fields[part]
        ann = info.annotation
        model = next((a for a in getattr(ann, "__args__", (ann,)) if isinstance(a, type) and issubclass(a, BaseModel)), None)
        if model is None and isinstance(ann, type) and issubclass(ann, BaseModel):
            model = ann
    return info, model


def fields_here(loc: tuple[Any, ...], root: type[BaseModel] | None = None) -> tuple[str, ...]:
    """The field names of the section at `loc` in `root` (default SimConfig), sorted; () when `loc` is no section."""
    model = _walk(loc, root)[1]
    return tuple(sorted(getattr(model, "model_fields", None) or ()))


class NotAField(ValueError):
    """A dotted path (`--set`, a link's `section.field=value`) that names no field of the config: `part` is the first
    part that is not one (a section when `is_section`), `fields` the fields where the last part was looked for (for a
    section, the sections there), `field` the dotted path of a field the walk went into as if it were a section
    (`workload.classes.0.name`: the list `workload.classes`, which is set whole), else '', and `key` the whole path
    when a caller names it (`presets.with_settings`)."""

    def __init__(self, part: str, is_section: bool, fields: tuple[str, ...] = (), field: str = ""):
        super().__init__(part)
        self.part, self.is_section, self.fields, self.field, self.key = part, is_section, fields, field, ""


def set_dotted(data: dict[str, Any], path: str, value: Any) -> None:
    """Set `section.field` of a config dict (a JSON dump) to `value`: the one walk of `--set` and of a link's values.
    An absent optional section is filled with what it stands for (`optional_section_defaults`), an old field name is
    read as its current one (`renamed_field`); NotAField when the path names no field."""
    node = data
    *parts, last = path.split(".")
    for i, part in enumerate(parts):
        # A section left out stands for its defaults, as None does for an optional one: a part preset's dict names only
        # what it sets (`--set engine=sglang --set scheduler.preemption_headroom_steps=20` said "unknown field")
        if (node[part] is None) if part in node else _is_section(tuple(parts[: i + 1]), None):
            node[part] = optional_section_defaults(tuple(parts[: i + 1]), data)
        if not isinstance(node.get(part), dict):
            sections = tuple(sorted(k for k, v in node.items() if isinstance(v, dict) or v is None))
            is_field = part in node or field_info(tuple(parts[: i + 1])) is not None  # (the schema's, if left out)
            raise NotAField(part, True, sections, field=".".join(parts[: i + 1]) if is_field else "")
        node = node[part]
    known = set(node) | set(fields_here(tuple(parts)))  # (the schema's fields too: the dict may leave some out)
    name = renamed_field(known, last)
    if name not in known:
        raise NotAField(last, False, tuple(sorted(known)))
    loc = (*parts, name)
    if isinstance(value, dict) and value and "preset" not in value and _is_section(loc, node.get(name)):
        # A section given as an object sets the fields it names and keeps the others, as dotted keys would:
        # `--set scheduler='{"max_num_seqs": 4}'` replaced the whole section, so its admission rule and engine name
        # silently fell back to the defaults. (An empty object still resets the section; `{"preset": NAME, ...}`
        # still names a preset's values with some changed, `presets._resolve_part`'s form.)
        if node.get(name) is None:  # (None, or left out of a part preset's dict: what it stands for)
            node[name] = optional_section_defaults(loc, data)
        for key, item in value.items():
            inner = ".".join((*loc, key))
            try:
                set_dotted(data, inner, item)
            except NotAField as err:
                err.key = err.key or inner  # (the path of the field named inside the object)
                raise
        return
    node[name] = value


def section_model(annotation: Any) -> type[BaseModel] | None:
    """The model of a section field's annotation (one model, optional or not); None for a plain value and for a list or
    a mapping of models (set whole). The rule `set_dotted` merges objects by and `python -m sim_core fields` walks by."""
    args = typing.get_args(annotation)
    if any(typing.get_origin(a) in (list, tuple, dict) for a in (annotation, *args)):
        return None
    return next((a for a in (args or (annotation,)) if isinstance(a, type) and issubclass(a, BaseModel)), None)


def _is_section(loc: tuple[str, ...], current: Any) -> bool:
    """Whether the field at `loc`, now `current` in a config dict, is a section (`section_model`)."""
    info = field_info(loc) if isinstance(current, dict) or current is None else None
    return info is not None and section_model(info.annotation) is not None


def optional_section_defaults(loc: tuple[str, ...], config: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """What the optional section at `loc` stands for when a config leaves it out (None), as JSON, or None if `loc`
    is not one: what `--set` and a link's `section.field=value` fill in, so `deployment.disaggregation.prefill.
    replicas=2` turns one engine into a 2P1D deployment. Its defaults, except a pool's hardware or scheduler: left
    out, a pool runs the top-level one (pool_config), so that section of `config` (a JSON dump) is filled in; with
    the defaults, setting one field of a pool swapped a TensorRT-LLM A100 deployment's pool for vLLM on an H100."""
    if config is not None and len(loc) == 4 and loc[:2] == ("deployment", "disaggregation") and loc[3] in (
            "hardware", "scheduler"):  # fmt: skip
        return copy.deepcopy(config[loc[3]])
    info = field_info(loc)
    ann = getattr(info, "annotation", None)
    model = next((a for a in getattr(ann, "__args__", (ann,)) if isinstance(a, type) and issubclass(a, BaseModel)), None)
    if model is None:
        return None
    try:
        return model().model_dump(mode="json")
    except ValidationError:  # (a section with required fields, a trace's rows: set whole; `--set workload.trace.
        return None  # hash_block_tokens=16` raised pydantic's "3 validation errors for Trace" as a traceback)


def _declared_bounds(loc: tuple[Any, ...], root: type[BaseModel] | None = None) -> tuple[Any, str, Any, str] | None:
    """(lower bound, '>=' or '>', upper bound, '<=' or '<') declared on the field at `loc` in `root` (default SimConfig;
    a bound None where none is declared), or None when `loc` names no field. A list's or a mapping's items
    (`tp_degrees.0`, `prices.h100-sxm`): the bounds declared on the item type."""
    info = field_info(loc, root)
    if info is None:
        return None
    lo = hi = None
    lo_op, hi_op = ">=", "<="
    metadata = list(info.metadata)
    # an item of a tuple or dict field: tuple[Annotated[int, Field(ge=1)] | None, ...] (a tuple's item by its index,
    # even when the tuple has its own length bounds: acceptance_by_position.0 = 2 said no range)
    if (not metadata or isinstance(loc[-1], int)) and len(loc) > 1:
        items = [a for arg in typing.get_args(info.annotation) for a in (*typing.get_args(arg), arg)]
        metadata = [m for a in items if typing.get_origin(a) is Annotated for m in a.__metadata__]
        metadata = [m for meta in metadata for m in (*getattr(meta, "metadata", ()), meta)]  # Field(...) holds its bounds
    for meta in metadata:
        for attr, op in (("ge", ">="), ("gt", ">")):
            if getattr(meta, attr, None) is not None:
                lo, lo_op = getattr(meta, attr), op
        for attr, op in (("le", "<="), ("lt", "<")):
            if getattr(meta, attr, None) is not None:
                hi, hi_op = getattr(meta, attr), op
    return lo, lo_op, hi, hi_op


def field_bounds(loc: tuple[Any, ...], root: type[BaseModel] | None = None) -> tuple[Any, Any]:
    """(lowest, highest) value the field at `loc` declares, None where it declares none (a strict bound, `gt` or `lt`,
    as its value: validation names the strictness). The UI's number boxes take their range from it, so a limit is
    written once, here in the model."""
    bounds = _declared_bounds(loc, root)
    return (None, None) if bounds is None else (bounds[0], bounds[2])


def allowed_range(loc: tuple[Any, ...], root: type[BaseModel] | None = None) -> str:
    """Human-readable allowed values for the field at `loc` in `root` (default SimConfig; '' when none are declared).
    A list's or a mapping's items (`tp_degrees.0`, `prices.h100-sxm`): the bounds declared on the item type."""
    bounds = _declared_bounds(loc, root)
    if bounds is None:
        return ""
    lo, lo_op, hi, hi_op = bounds
    info = field_info(loc, root)
    if info.annotation is str:  # (text: its length, "1 to 120 characters")
        short = next((m.min_length for m in info.metadata if getattr(m, "min_length", None) is not None), 0)
        long = next((m.max_length for m in info.metadata if getattr(m, "max_length", None) is not None), None)
        return "" if long is None else f"{short} to {long} characters"
    choices = getattr(info.annotation, "__args__", None)
    if choices and all(isinstance(c, str) for c in choices):
        return "one of " + ", ".join(repr(c) for c in choices)
    if lo is not None and hi is not None:
        return f"{lo_op} {_bound_text(lo)} and {hi_op} {_bound_text(hi)}" if isinstance(lo, float | int) else ""
    if lo is not None:
        return f"{lo_op} {_bound_text(lo)}"
    if hi is not None:
        return f"{hi_op} {_bound_text(hi)}"
    return ""


def _bound_text(value: float) -> str:
    """A bound as the user must type it: exact (`:g` alone said 1048576 was 1.04858e+06 and the largest seed
    4.29497e+09, numbers that are not the bound), short where that is exact (1e-06, 100000)."""
    if isinstance(value, int):
        return str(value)
    short = f"{value:g}"
    return short if float(short) == value else repr(value)


STRICT_HINTS = {  # strict types reject what lax parsing used to coerce; say what to write instead
    "int_type": " (write a whole number without quotes or a decimal point)",
    "float_type": " (write a number without quotes; true/false are not numbers)",
    "bool_type": " (write true or false without quotes)",
    "string_type": " (write text in quotes)",
    # (acceptance_by_position = 'abc' said only "Input should be a valid tuple")
    "tuple_type": " (write a list in brackets, e.g. [0.8, 0.6, 0.4])",
    "list_type": " (write a list in brackets, e.g. [1, 2, 4])",
}


# pydantic's messages that only state a declared bound or the choices: the allowed range says all of it, and more
RESTATED_BY_RANGE = frozenset({"greater_than", "greater_than_equal", "less_than", "less_than_equal", "literal_error", "enum",
                               "string_too_long", "string_too_short"})


def _qualified(msg: str, loc: tuple[Any, ...], ctx: dict[str, Any] | None) -> str:
    """`msg` of an error at `loc` with the other fields a check across fields (field_error) names written with their
    section's path: the model knows them as "num_heads"; the user's path to them is "model.num_heads" or
    "deployment.disaggregation.prefill.hardware.interconnect"."""
    ctx = ctx or {}
    if "names" in ctx and (prefix := ".".join(str(p) for p in loc[: len(loc) - ctx["depth"]])):
        for name in ctx["names"]:
            msg = re.sub(rf"(?<![\w.]){re.escape(name)}(?!\w)", f"{prefix}.{name}", msg)
    return msg


def shown_value(given: Any) -> str:
    """A value as a message quotes it: its repr (a list or tuple of scalars as a list, a mapping of scalars too), a
    section or a list of sections by its type name, at most 80 characters (a validation error's "field = value", a
    link's refused value). (The plan command's --gpus nosuch read "--gpus = ('nosuch',)" and --price nosuch=1 "--price
    = dict".)"""
    scalar = lambda x: isinstance(x, int | float | str | bool | None)  # noqa: E731
    if isinstance(given, tuple) and all(map(scalar, given)):
        given = list(given)
    scalars = (isinstance(given, list) and all(map(scalar, given))) or (
        isinstance(given, dict) and given and all(map(scalar, given.values())) and all(isinstance(k, str) for k in given))
    # (true, false and null as the JSON they were written in: "--set scheduler.max_num_seqs=true" read "= True")
    word = lambda x: {True: "true", False: "false"}[x] if isinstance(x, bool) else "null" if x is None else repr(x)  # noqa: E731
    if not isinstance(given, dict | list):
        shown = word(given)
    elif scalars:
        shown = ("[" + ", ".join(map(word, given)) + "]" if isinstance(given, list)
                 else "{" + ", ".join(f"{k!r}: {word(v)}" for k, v in given.items()) + "}")  # fmt: skip
    else:
        shown = type(given).__name__
    if type(given) is int and abs(given) > 10**15:  # (1e30 given for an integer field read back as 31 digits)
        shown = f"{given:.6g}"
    return shown if len(shown) <= 80 else shown[:77] + "..."


MAX_SHOWN_PATH = 100  # characters of a field path (or an unknown key) a message quotes (the longest path: 86)
MAX_SHOWN_PROBLEMS = 12  # lines a validation message lists (a link of 1,000 unknown keys made a 366 KB warning)


def shown_name(name: str) -> str:
    """A name the user gave (a preset, a file) as a message quotes it: its repr, cut past MAX_SHOWN_PATH characters
    with how long it was (a link's 3,000,000-character engine name came back whole, and froze the browser's tab)."""
    if len(name) <= MAX_SHOWN_PATH:
        return repr(name)
    return f"{name[:MAX_SHOWN_PATH]!r}… ({len(name):,} characters)"


def format_validation_error(err: ValidationError, source: str = "config", root: type[BaseModel] | None = None,
                            names: dict[str, str] | None = None) -> str:
    """One line per problem: field path, the value given, what went wrong, and the allowed range (the bounds of the
    model that raised `err`: `root`, default SimConfig). `names`: a field path as the user wrote it (a CLI option)."""
    lines = []
    errors = err.errors()
    locs = [tuple(e["loc"]) for e in errors]
    more = 0  # problems past MAX_SHOWN_PROBLEMS: counted, not listed
    listed: set[tuple] = set()  # sections whose fields a line has listed
    for e in errors:
        loc = tuple(e["loc"])
        if e["type"] == "too_short" and any(len(x) > len(loc) and x[: len(loc)] == loc for x in locs):
            # (classes = [5] also said "Tuple should have at least 1 item after validation, not 0": pydantic counts
            # the items left once the refused one is dropped; that item's own line says what is wrong)
            continue
        if len(lines) == MAX_SHOWN_PROBLEMS:
            more += 1
            continue
        path = ".".join(str(p) for p in loc) or "(config)"
        if len(path) > MAX_SHOWN_PATH:  # (an unknown key of 100,000 characters was echoed whole, twice in the page)
            path = f"{path[:MAX_SHOWN_PATH]}… ({len(path):,} characters)"
        if names and path in names:
            path = names[path]
        elif names and loc and str(loc[0]) in names:  # (an item of a listed option: "--tp item 1", not "tp_degrees.0")
            rest = loc[1:]
            path = names[str(loc[0])] + (f" item {rest[0] + 1}" if len(rest) == 1 and isinstance(rest[0], int)
                                         else " " + ".".join(str(x) for x in rest))  # fmt: skip
        elif loc and isinstance(loc[-1], int):  # (a list's entry: ".0" is the first; say it as a person counts)
            path += f" (entry {loc[-1] + 1})"
        given = e.get("input")
        shown = shown_value(given)
        msg = e["msg"].removeprefix("Value error, ")
        msg = _qualified(msg, loc, e.get("ctx"))
        rng = allowed_range(loc, root)
        extra = f"; allowed: {rng}" if rng and ("should be" in msg or "characters" in rng and "should have" in msg) else ""
        if extra and e["type"] in RESTATED_BY_RANGE:
            # ("replicas = 0: Input should be greater than or equal to 1; allowed: >= 1 and <= 64" said the bound twice,
            # and a choice listed the choices twice: what is wrong in three words, then the range)
            msg = ("not one of the choices" if e["type"] in ("literal_error", "enum") else
                   "too long" if e["type"] == "string_too_long" else "too short" if e["type"] == "string_too_short" else
                   "out of range")  # ("String should have at most 120 characters; allowed: 1 to 120 characters")
        if e["type"] == "extra_forbidden" and (known := fields_here(loc[:-1], root)):
            # ("workloadd = dict: Extra inputs are not permitted" named neither the field meant nor the ones there are;
            # --set's own walk says "unknown field ...; fields here: ...", and a file or a link now says the same)
            name = str(loc[-1])
            said = repr(name) if len(name) <= MAX_SHOWN_PATH else f"{name[:MAX_SHOWN_PATH]!r}…"
            # (a section's fields listed once: a link of many unknown keys repeated the same 20 names on every line)
            here = f"; fields here: {', '.join(known)}" if loc[:-1] not in listed else " (fields here: as above)"
            listed.add(loc[:-1])
            msg = f"unknown field {said}{did_you_mean(name[:MAX_SHOWN_PATH], known)}{here}"
        if e["type"] == "model_type" and (known := fields_here(loc, root)):
            # ("kv_cache = 5: Input should be a valid dictionary or instance of KVCacheConfig" named a class of the code,
            # not what a section holds; --set scheduler=vllm-v0 met it)
            msg = f'Input should be an object of its fields, e.g. {{"{known[0]}": ...}}; fields here: {", ".join(known)}'
        if e["type"] == "string_unicode" and isinstance(given, str):
            # (a text field with a length limit meets a lone surrogate in pydantic's own check, before
            # StrictModel._encodable_text: say what that one says, not "unable to parse raw data as a unicode string")
            bad = next((ch for ch in given if "\ud800" <= ch <= "\udfff"), "\ud800")
            msg, extra = f"contains a lone UTF-16 surrogate (U+{ord(bad):04X}); text must be valid Unicode", ""
        if e["type"] == "int_type" and isinstance(given, float) and math.isinf(given):
            # (a 400-digit seed, read as the float it rounds to, said "seed = inf: Input should be a valid integer")
            shown, msg, extra = f"a number past {math.copysign(1e308, given):g}", "out of range", f"; allowed: {rng}" if rng else ""
        elif e["type"] == "int_type" and isinstance(given, float) and given.is_integer() and abs(given) < 1e300:
            # (`max_num_seqs=1e9` read "= 1000000000.0: Input should be a valid integer ... (write a whole number
            # without ... a decimal point)": the number the user meant, and whether it is in range, is what to say)
            shown = shown_value(int(given))
            bounds = _declared_bounds(loc, root)
            lo, hi = (None, None) if bounds is None else (bounds[0], bounds[2])
            outside = (lo is not None and given < lo) or (hi is not None and given > hi)
            msg = "out of range" if outside else f"write it as the whole number {int(given)}, without an exponent or a decimal point"
            extra = f"; allowed: {rng}" if rng and outside else ""
        else:
            extra += STRICT_HINTS.get(e["type"], "")
        given_part = f" = {shown}" if loc and e["type"] != "missing" else ""
        if e["type"] == "value_error" and isinstance(given, dict) and _walk(loc, root)[1] is not None:
            # a check of a whole section (a trace's rows): its path, not "workload.trace = dict: ..." (the dict is the
            # section the user wrote, not a value they can read back)
            given_part = ""
        lead = re.match(r"[A-Za-z_][\w.]*", msg)
        if not loc and lead and field_info(tuple(lead.group().rstrip(".").split(".")), root) is not None:
            # a check across sections that names its field (and value) itself ("hardware.num_gpus = 3: ...",
            # "deployment.replicas (2) must be 1 ..."): that is the line, not "(config): hardware.num_gpus = 3: ..."
            lines.append(f"{msg}{extra}")
            continue
        lines.append(f"{path}{given_part}: {msg}{extra}")
    if more:
        lines.append(f"… and {more:,} more problem(s) of the same {source}, listed once these are mended")
    return f"Invalid {source}:\n  " + "\n  ".join(lines)
