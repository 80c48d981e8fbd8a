"""Deployment planner: the cheapest configurations that meet the SLOs at a target request rate.

The search space is GPU preset × tensor-parallel degree × replicas × engine preset × token budget ×
max batch. The traffic (workload preset, trace or classes), the model and the SLO targets come from
a base config; the percentile (or attainment) rule from a `CapacityObjective` (sweep.py).

Pruning, so a space of ~500 configurations takes well under a minute:
  * memory fit first: a (GPU, TP, engine, knobs) family whose weights + KV do not fit is dropped
    without a simulation (costmodel.plan_memory);
  * cost order with dominance: candidates are tried cheapest first; within a family, meeting the
    SLOs is monotone in the replica count (each replica sees λ/R), so a failure at R rules out every
    R' < R and a success at R makes every R' > R a dearer copy; the search stops once `num_results`
    families have a feasible configuration cheaper than every untried candidate (exact: nothing
    cheaper was skipped);
  * bisection on rate: the headroom of each result row is its per-replica capacity (find_capacity).

Replicas: see `replica_config` — the one place to switch to the cluster simulation (issue 13).
Disaggregated prefill/decode splits are not searched yet: they arrive with the cluster package.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Annotated, Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from sim_core.backend import Backend, LocalBackend, PointCache, cached_map, run_points
from sim_core.config import SimConfig
from sim_core.costmodel import MemoryPlanError, plan_memory
from sim_core.presets import PRESETS_DIR, PresetError, config_from_dict, list_presets, read_preset_data
from sim_core.result import Summary
from sim_core.sweep import Capacity, CapacityObjective, at_rate, find_capacities, meets_objective

PRICING_FILE = PRESETS_DIR / "pricing" / "gpu-on-demand.json"
DEFAULT_ENGINES = ("vllm-v1", "sglang", "tensorrt-llm-max-utilization")


# ---------------------------------------------------------------- prices (data: presets/pricing/)
class GpuPrice(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    usd_per_gpu_hour: float = Field(gt=0, le=1000, description="On-demand price of one GPU for one hour, USD.")
    source: str = Field(description="Where the price comes from.")
    date: str = Field(description="When the source listed it (YYYY-MM).")


@functools.cache
def default_prices() -> Mapping[str, GpuPrice]:
    """hardware preset -> cited default price (presets/pricing/gpu-on-demand.json); read-only."""
    data = json.loads(PRICING_FILE.read_text())
    return MappingProxyType({name: GpuPrice.model_validate(p) for name, p in data["gpus"].items()})


# ---------------------------------------------------------------- the request
class PlanSpec(BaseModel):
    """What to plan for and where to search. Defaults: every priced GPU, TP 1-8, up to 16 replicas."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    target_rate_per_s: float = Field(gt=0, le=100_000, description="Requests/s the deployment must serve.")
    objective: CapacityObjective = CapacityObjective()
    gpus: tuple[str, ...] = Field((), description="Hardware presets to consider (empty: every GPU with a price).")
    tp_degrees: tuple[int, ...] = Field((1, 2, 4, 8), min_length=1, description="Tensor-parallel degrees per replica.")
    max_replicas: int = Field(16, ge=1, le=1024, description="Most replicas of one configuration.")
    engines: tuple[str, ...] = Field(DEFAULT_ENGINES, min_length=1, description="Engine presets to consider.")
    token_budgets: tuple[int | None, ...] = Field(
        (None,), min_length=1, description="scheduler.max_num_batched_tokens values (None: the engine preset's)."
    )
    max_batches: tuple[int | None, ...] = Field(
        (None,), min_length=1, description="scheduler.max_num_seqs values (None: the engine preset's)."
    )
    prices_usd_per_gpu_hour: dict[str, Annotated[float, Field(gt=0, le=1000)]] = Field(
        default_factory=dict, description="Price overrides per hardware preset, USD per GPU-hour."
    )
    num_results: int = Field(5, ge=1, le=100, description="Cheapest feasible configurations to return.")
    batch_size: int = Field(8, ge=1, le=256, description="Candidates simulated per round (fixed: same rounds on any backend).")
    headroom_rel_tol: float = Field(0.03, gt=0, le=0.5, description="Bracket width of the headroom bisection.")

    def prices(self) -> dict[str, float]:
        out = {k: v.usd_per_gpu_hour for k, v in default_prices().items()}
        return out | dict(self.prices_usd_per_gpu_hour)

    def gpu_list(self) -> tuple[str, ...]:
        return self.gpus or tuple(g for g in list_presets("hardware") if g in self.prices())


# ---------------------------------------------------------------- configurations
@dataclass(frozen=True)
class Family:
    """Everything about one replica except how many there are."""

    gpu: str
    tp: int
    engine: str
    token_budget: int | None
    max_batch: int | None

    def label(self) -> str:
        knobs = "".join(
            [f", budget {self.token_budget}" if self.token_budget else "", f", batch {self.max_batch}" if self.max_batch else ""]
        )
        return f"{self.gpu} TP{self.tp} · {self.engine}{knobs}"

    def key(self) -> tuple:
        """A total order (None knobs first) for deterministic tie-breaks."""
        return (self.gpu, self.tp, self.engine, self.token_budget or 0, self.max_batch or 0)


def family_config(base: SimConfig, fam: Family) -> SimConfig:
    """The base (model, traffic, SLOs, calibration) on this GPU × TP with this engine and knobs."""
    data = base.model_dump(mode="json")
    hw = read_preset_data("hardware", fam.gpu)
    hw.pop("description", None)
    data["hardware"] = hw | {"num_gpus": fam.tp}
    data.pop("scheduler")
    data["kv_cache"] = {k: v for k, v in data["kv_cache"].items() if k != "layout"}
    data["engine"] = fam.engine
    data["name"] = f"plan: {fam.label()}"
    sched: dict[str, Any] = {}
    if fam.token_budget is not None:
        sched["max_num_batched_tokens"] = fam.token_budget
    if fam.max_batch is not None:
        sched["max_num_seqs"] = fam.max_batch
    if sched:
        data["scheduler"] = sched
    return config_from_dict(data, f"plan candidate {fam.label()}")


def replica_config(cfg: SimConfig, rate_per_s: float, num_replicas: int) -> SimConfig:
    """One replica of an N-replica deployment behind a random router, at a total rate λ.

    THE place to switch to the cluster simulation (sim_core/cluster, issue 13): until then, N
    replicas behind a random router are simulated as one replica at λ/N. For Poisson arrivals this is
    exact — randomly thinning a Poisson process of rate λ with probability 1/N gives a Poisson process
    of rate λ/N, independent across replicas — and every replica is statistically the same, so the
    replica's latency percentiles are the deployment's. (Smarter routers — least outstanding, KV-aware,
    prefix affinity — do better than random; this is conservative for them.) A trace is time-scaled to
    the target rate, then thinned by a seeded 1-in-N draw.
    """
    per_replica = rate_per_s / num_replicas
    tr = cfg.workload.trace
    if tr is None:
        return at_rate(cfg, per_replica)
    n = cfg.workload.num_requests
    arrivals = np.asarray(tr.arrival_s[:n])
    span = arrivals[-1] - arrivals[0]
    scale = ((n - 1) / rate_per_s) / span if span > 0 else 1.0  # the trace's rate becomes λ
    keep = np.random.default_rng(cfg.seed).random(n) < 1.0 / num_replicas
    keep[0] = True  # never an empty trace
    idx = np.flatnonzero(keep)
    data = cfg.model_dump(mode="python")
    data["workload"]["trace"] = {
        "arrival_s": [float((arrivals[i] - arrivals[0]) * scale) for i in idx],
        "prompt_tokens": [tr.prompt_tokens[i] for i in idx], "output_tokens": [tr.output_tokens[i] for i in idx],
        "priority": None if tr.priority is None else [tr.priority[i] for i in idx],
    }  # fmt: skip
    data["workload"]["num_requests"] = int(idx.size)
    data["workload"]["arrival"]["rate_per_s"] = per_replica
    data["limits"]["num_recorded_batches"] = 0
    return config_from_dict(data, f"replica of {num_replicas} at {rate_per_s:g} req/s")


def saturation_config(cfg: SimConfig) -> SimConfig:
    """An offline batch of this config's traffic: every request waiting at t=0 keeps the batch full,
    so the completion rate mid-run is the most the replica can serve (its saturation rate)."""
    data = cfg.model_dump(mode="python")
    data["workload"]["arrival"]["process"] = "offline"
    if data["workload"]["trace"] is not None:  # a trace keeps its requests, all queued at t=0
        data["workload"]["trace"]["arrival_s"] = [0.0] * len(data["workload"]["trace"]["arrival_s"])
    data["workload"]["num_requests"] = max(SATURATION_REQUESTS, 4 * cfg.scheduler.max_num_seqs) if cfg.workload.trace is None \
        else cfg.workload.num_requests  # fmt: skip
    data["limits"]["num_recorded_batches"] = 0
    return config_from_dict(data, "saturation probe")


SATURATION_REQUESTS = 1000
# Replica counts are simulated down to saturation / 1.25: the bound comes from a different arrival
# pattern (everything queued), so it is kept loose rather than trusted to the last percent.
SATURATION_MARGIN = 1.25


def saturation_rate(cfg_json: str) -> str:
    """Backend task: the saturation rate (requests/s) of an offline run, JSON {"rate": r} or {"error": msg}.

    Completions between the 25th and 75th percentile finish times: by then the queue keeps the
    batch full and the first wave's short requests no longer dominate, and the drain is excluded."""
    from sim_core.engine import run_simulation

    try:
        res = run_simulation(SimConfig.model_validate_json(cfg_json))
    except (PresetError, MemoryPlanError) as err:
        return json.dumps({"error": str(err)})
    fin = np.sort(res.requests.finish_s[res.requests.is_finished])
    if fin.size < 8:
        return json.dumps({"error": "too few requests finished to measure saturation"})
    lo, hi = int(fin.size * 0.25), int(fin.size * 0.75)
    span = fin[hi] - fin[lo]
    return json.dumps({"rate": (hi - lo) / span if span > 0 else float(fin.size)})


# ---------------------------------------------------------------- results
@dataclass(frozen=True)
class PlanRow:
    family: Family
    num_replicas: int
    num_gpus: int
    usd_per_hour: float
    replica_config: SimConfig  # one replica at target / replicas: what Simulate opens
    summary: Summary  # that replica's run
    meets: bool
    capacity_per_s: float | None = None  # deployment capacity (replicas × per-replica capacity)
    capacity_note: str | None = None

    @property
    def label(self) -> str:
        return f"{self.num_replicas}× {self.family.label()}"

    @property
    def output_tokens_per_s(self) -> float:
        st = self.summary.steady
        return self.num_replicas * (st.output_tokens_per_s if st else self.summary.output_tokens_per_s)

    @property
    def goodput_per_s(self) -> float:
        st = self.summary.steady
        return self.num_replicas * (st.goodput_requests_per_s if st else self.summary.goodput_requests_per_s)

    @property
    def usd_per_million_output_tokens(self) -> float:
        """$ per hour × 10⁶ / (output tokens per second × 3600) (DESIGN.md §8)."""
        tok = self.output_tokens_per_s
        return self.usd_per_hour * 1e6 / (tok * 3600) if tok > 0 else math.inf

    @property
    def good_requests_per_usd(self) -> float:
        """Requests meeting both SLOs per dollar: goodput × 3600 / $ per hour."""
        return self.goodput_per_s * 3600 / self.usd_per_hour

    def headroom(self, target_rate_per_s: float) -> float | None:
        """Capacity / target − 1: how much more traffic before the SLOs break."""
        return None if self.capacity_per_s is None else self.capacity_per_s / target_rate_per_s - 1

    def latency_s(self, metric: str, percentile: int) -> float:
        st = self.summary.steady
        return float(getattr(st, f"{metric}_p{percentile}_s")) if st else float("nan")


@dataclass(frozen=True)
class CalibrationBand:
    """The cost model's held-out error (sim_core/validate.py): median and p90 absolute %, or None
    when the calibration data is not available."""

    median_pct: float | None
    p90_pct: float | None
    num_rows: int = 0

    def text(self) -> str:
        if self.median_pct is None:
            return "calibration error band unavailable (no calibration data beside the package)"
        return (f"cost-model error on {self.num_rows} held-out published measurements: median ±{self.median_pct:.0f} %, "
                f"p90 ±{self.p90_pct:.0f} %")  # fmt: skip


def calibration_band() -> CalibrationBand:
    from sim_core import validate

    if not validate.CALIBRATION_CSV.exists():
        return CalibrationBand(None, None)
    n, med, p90 = validate.error_stats(validate.evaluate(validate.build_rows(validate.load_rows(validate.CALIBRATION_CSV))))
    return CalibrationBand(med, p90, n)


@dataclass
class Plan:
    spec: PlanSpec
    rows: list[PlanRow]  # cheapest feasible first, one per family
    evaluated: list[PlanRow]  # every simulated candidate (feasible or not), for the Pareto chart
    pruned: dict[str, int] = field(default_factory=dict)  # reason -> candidates skipped
    num_candidates: int = 0
    band: CalibrationBand = field(default_factory=lambda: CalibrationBand(None, None))

    def robust(self, row: PlanRow) -> bool | None:
        """Still meets the target if the model is off by the median calibration error (headroom ≥ band)."""
        h = row.headroom(self.spec.target_rate_per_s)
        if h is None or self.band.median_pct is None:
            return None
        return h >= self.band.median_pct / 100

    def table(self) -> list[dict[str, Any]]:
        """The result rows as plain dicts (CLI, page, tests): same keys everywhere."""
        p = self.spec.objective.percentile
        out = []
        for r in self.rows:
            h = r.headroom(self.spec.target_rate_per_s)
            out.append({
                "config": r.label, "gpu": r.family.gpu, "tp": r.family.tp, "replicas": r.num_replicas,
                "engine": r.family.engine, "token_budget": r.replica_config.scheduler.max_num_batched_tokens,
                "max_batch": r.replica_config.scheduler.max_num_seqs, "gpus": r.num_gpus,
                "usd_per_hour": r.usd_per_hour, "usd_per_million_output_tokens": r.usd_per_million_output_tokens,
                "good_requests_per_usd": r.good_requests_per_usd, f"ttft_p{p}_s": r.latency_s("ttft", p),
                f"tpot_p{p}_s": r.latency_s("tpot", p), "capacity_per_s": r.capacity_per_s,
                "headroom": h, "robust_to_calibration_error": self.robust(r), "note": r.capacity_note or "",
            })  # fmt: skip
        return out


# ---------------------------------------------------------------- the search
def _families(spec: PlanSpec) -> list[Family]:
    return [
        Family(g, tp, e, b, m)
        for g in spec.gpu_list() for tp in sorted(set(spec.tp_degrees)) for e in spec.engines
        for b in spec.token_budgets for m in spec.max_batches
    ]  # fmt: skip


def plan(
    base: SimConfig, spec: PlanSpec, *, backend: Backend | None = None, cache: PointCache | None = None,
    on_progress: Callable[[int, int], None] | None = None, cancelled: Callable[[], bool] | None = None,
    with_band: bool = True,
) -> Plan:
    """The cheapest configurations meeting `spec.objective` at `spec.target_rate_per_s` (see module doc).
    Runs on `backend` (default: a local process pool, one worker per CPU, closed on return)."""
    if backend is None:
        with LocalBackend() as own:
            return plan(base, spec, backend=own, cache=cache, on_progress=on_progress, cancelled=cancelled,
                        with_band=with_band)  # fmt: skip
    prices = spec.prices()
    unknown = [g for g in spec.gpu_list() if g not in prices]
    if unknown:
        raise PresetError(f"no price for GPU preset(s) {', '.join(unknown)}: give one (USD per GPU-hour)")
    pruned: dict[str, int] = {}

    def prune(reason: str, n: int = 1) -> None:
        pruned[reason] = pruned.get(reason, 0) + n

    cfgs: dict[Family, SimConfig] = {}
    seen: set[str] = set()
    for fam in _families(spec):
        try:
            cfg = family_config(base, fam)
            plan_memory(cfg)  # memory fit first: no simulation for what cannot load
        except (PresetError, MemoryPlanError) as err:
            prune("does not fit in memory" if isinstance(err, MemoryPlanError) else "invalid configuration", spec.max_replicas)
            continue
        key = cfg.model_copy(update={"name": ""}).model_dump_json()
        if key in seen:  # e.g. a token budget equal to the engine preset's own
            prune("same configuration as another candidate", spec.max_replicas)
            continue
        seen.add(key)
        cfgs[fam] = cfg
    # Saturation bound: fewer replicas than λ / (1.25 × saturation rate) cannot keep up; not simulated.
    sat_payloads = cached_map(saturation_rate, "saturation", [saturation_config(c) for c in cfgs.values()],
                              backend, cache, None, cancelled)  # fmt: skip
    max_fail: dict[Family, int] = {}
    saturation: dict[Family, float] = {}
    for fam, payload in zip(list(cfgs), sat_payloads):
        d = json.loads(payload)
        if "rate" not in d:
            prune("simulation error", spec.max_replicas)
            del cfgs[fam]
            continue
        saturation[fam] = d["rate"]
        need = math.ceil(spec.target_rate_per_s / (SATURATION_MARGIN * d["rate"]) - 1e-9)
        if need - 1 >= 1:
            max_fail[fam] = min(need - 1, spec.max_replicas)
            prune("fewer replicas than the saturation bound allows", max_fail[fam])
        if need > spec.max_replicas:
            del cfgs[fam]
    candidates = sorted(
        ((prices[f.gpu] * f.tp * r, f, r) for f in cfgs for r in range(max_fail.get(f, 0) + 1, spec.max_replicas + 1)),
        key=lambda c: (c[0], c[1].key(), c[2]),
    )
    total = len(_families(spec)) * spec.max_replicas
    min_pass: dict[Family, int] = {}
    evaluated: list[PlanRow] = []
    feasible: list[PlanRow] = []
    pos = 0

    def bound() -> float:
        costs = sorted(r.usd_per_hour for r in feasible)
        return costs[spec.num_results - 1] if len(costs) >= spec.num_results else math.inf

    while pos < len(candidates):
        batch: list[tuple[float, Family, int]] = []
        while pos < len(candidates) and len(batch) < spec.batch_size:
            cost, fam, r = candidates[pos]
            if cost > bound():
                pos = len(candidates)
                break
            pos += 1
            if r <= max_fail.get(fam, 0):
                prune("dominated: fewer replicas of a failing config")
            elif r >= min_pass.get(fam, math.inf):
                prune("dominated: more replicas of a feasible config")
            elif any(f == fam for _, f, _ in batch):
                pos -= 1  # one replica count per family per round: the next round knows this one's answer
                break
            else:
                batch.append((cost, fam, r))
        if not batch:
            continue
        configs = [replica_config(cfgs[f], spec.target_rate_per_s, r) for _, f, r in batch]
        results = run_points(configs, backend, cache, None, cancelled)
        for (cost, fam, r), c, (summary, err) in zip(batch, configs, results):
            if summary is None:
                prune("simulation error")
                max_fail[fam] = max(max_fail.get(fam, 0), r)
                continue
            ok = meets_objective(summary, c, spec.objective)
            row = PlanRow(fam, r, fam.tp * r, cost, c, summary, ok)
            evaluated.append(row)
            if ok:
                min_pass[fam] = min(min_pass.get(fam, math.inf), r)
                feasible.append(row)
            else:
                max_fail[fam] = max(max_fail.get(fam, 0), r)
        if on_progress:
            on_progress(len(evaluated) + sum(pruned.values()), total)
    not_tried = total - len(evaluated) - sum(pruned.values())
    if not_tried:
        pruned["dearer than the cheapest results"] = not_tried
    best = {}
    for row in sorted(feasible, key=lambda r: (r.usd_per_hour, r.family.key(), r.num_replicas)):
        best.setdefault(row.family, row)  # one row per family: its fewest replicas
    rows = list(best.values())[: spec.num_results]
    rows = _with_headroom(rows, spec, backend, cache, cancelled, saturation)
    if on_progress:
        on_progress(total, total)
    band = calibration_band() if with_band else CalibrationBand(None, None)
    return Plan(spec, rows, evaluated, pruned, total, band)


def _with_headroom(rows: Sequence[PlanRow], spec: PlanSpec, backend: Backend, cache: PointCache | None,
                   cancelled: Callable[[], bool] | None, saturation: dict[Family, float]) -> list[PlanRow]:  # fmt: skip
    """Per-replica capacity by bisection between the operating point (known to pass) and the
    saturation bound -> deployment capacity.
    Traces replay fixed arrival times, so their rate cannot be bisected: no headroom for them."""
    if any(r.replica_config.workload.trace is not None for r in rows):
        return list(rows)
    caps: list[Capacity] = find_capacities([r.replica_config for r in rows], spec.objective,
                                           backend=backend, cache=cache, cancelled=cancelled,
                                           rel_tol=spec.headroom_rel_tol,
                                           ceilings_per_s=[SATURATION_MARGIN * saturation[r.family] for r in rows])  # fmt: skip
    return [
        PlanRow(r.family, r.num_replicas, r.num_gpus, r.usd_per_hour, r.replica_config, r.summary, r.meets,
                c.rate_per_s * r.num_replicas, c.note)
        for r, c in zip(rows, caps)
    ]  # fmt: skip


def pareto_front(rows: Sequence[PlanRow], percentile: int, metric: str = "ttft") -> list[PlanRow]:
    """Feasible rows no other feasible row beats on both $/hour and the latency percentile."""
    ok = sorted((r for r in rows if r.meets), key=lambda r: (r.usd_per_hour, r.latency_s(metric, percentile)))
    front, best = [], math.inf
    for r in ok:
        lat = r.latency_s(metric, percentile)
        if lat < best:
            front.append(r)
            best = lat
    return front
