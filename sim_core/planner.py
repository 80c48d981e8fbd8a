"""Deployment planner: the cheapest configurations that meet the SLOs at a target request rate.

The search space is GPU preset × tensor-parallel degree × replicas × engine preset × token budget ×
max batch, and optionally (`PlanSpec.disaggregated`) xPyD splits: x prefill and y decode instances
of one GPU kind, each pool with its own TP degree, priced by total GPUs. The traffic (workload
preset, trace or classes), the model and the SLOs come from a base config; the percentile (or
attainment) rule from a `CapacityObjective` (sweep.py).

Every candidate is simulated as the deployment it describes (`candidate_config`, the one place that
decides how a candidate is simulated): `deployment.replicas` engines behind `PlanSpec.router`, or a
prefill and a decode pool, through the cluster simulation (sim_core/cluster). `PlanSpec.evaluation
= "one_replica"` is the older, faster approximation (one replica at λ/N: exact for a *random* router
under Poisson arrivals, conservative for round robin; co-located candidates only).

Pruning, so a space of ~500 configurations stays within a minute (figures in docs/capacity.md):
  * a TP degree the model's attention heads do not split evenly over (config.tp_degrees_allowed: Qwen2.5-7B's 28
    heads over 8 GPUs) is dropped as an engine would refuse it, like a family that does not fit in memory; when no
    degree of the search is one the model allows, the plan is refused with the degrees it does allow;
  * memory fit first (exact): a family whose weights + KV do not fit in one instance (each pool for
    a split) is dropped without a simulation (costmodel.plan_memory); the router does not change it;
  * saturation bound (exact up to its margin): N replicas, whatever the router, complete at most N
    times one replica's saturation rate (an offline run), so fewer than λ / (1.25 × N × that) are
    not simulated; a split's pools saturate on different phases, so it gets a bound on its prefill pool only,
    from the cost model (`prefill_bound_per_s`: no tick holds more than the token budget, and none is faster than its
    tokens' GEMMs and fixed costs), so fewer than λ / (1.25 × that) prefill instances are not simulated;
  * cost order with dominance: candidates are tried cheapest first; within a family meeting the SLOs
    is taken as monotone in the instance counts (more replicas, or more prefill or decode instances,
    never hurt): a failure at (x, y) rules out every count ≤ it, a success makes every count ≥ it a
    dearer copy. Under Poisson arrivals this holds in distribution for round robin and
    least-outstanding routers (each replica's share thins as N grows); for one seeded run it is an
    assumption the planner test checks by brute force on a small space. The search stops once
    `num_results` families have a feasible configuration cheaper than every untried candidate
    (exact: nothing cheaper was skipped);
  * bisection on rate: the headroom of each result row is its deployment's capacity (find_capacity).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import heapq
import json
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from sim_core.backend import Backend, LocalBackend, PointCache, SearchCancelled, cached_map, run_points
from sim_core.budget import BUDGET_MARK, RunBudget, is_budget_stop
from sim_core.config import (MAX_REPLICAS, STATE_ROUTERS, CalibrationConfig, DeploymentConfig, HardwareSpec, LinkConfig, Router, SchedulerConfig,
                             SimConfig, check_state_refresh_s, field_bounds, pool_config, tp_degrees_allowed, tp_degrees_text, tp_rule_text)  # fmt: skip
from sim_core.costmodel import MemoryPlanError, plan_memory
from sim_core.inputs import did_you_mean
from sim_core.metrics import MAX_NUM_REQUESTS, steady_exclusion_text
from sim_core.presets import (
    FAMILY_NOUNS, PRESETS_DIR, PresetError, config_from_dict, list_presets, profile_values, read_preset_data,
    with_engine_data,
)  # fmt: skip
from sim_core.result import Summary
from sim_core.sweep import Capacity, CapacityObjective, at_rate, check_rate_applies, completion_rate_per_s, find_capacities, meets_objective, with_rate
from sim_core.words import counted

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
def _config_value(model: type[BaseModel], name: str, base: type = int) -> Any:
    """A `base` value with the bounds of config field `model.name` (config.py is their one source): a search list
    holds values of that field, so a value the config would refuse is named here, not pruned unexplained."""
    return Annotated[(base, *model.model_fields[name].metadata)]


_RATE_BOUNDS = field_bounds(("workload", "arrival", "rate_per_s"))  # (a candidate's arrival rate: the config's range)


class PlanSpec(BaseModel):
    """What to plan for and where to search. Defaults: every priced GPU, TP 1-8, up to 16 replicas."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)  # (NaN was "should be less than or equal to 100000")
    # (the bounds of workload.arrival.rate_per_s, which a candidate is run at: gt=0 let --rate 1e-7 through, to be
    # refused as "Invalid capacity probe at 1e-07 req/s", a field the user never typed. A candidate of n replicas
    # searched as one runs at rate / n, so the lowest is the field's lowest times the most replicas: the Plan page's
    # box let 1e-6 through, to be refused as "capacity probe at 5e-07 req/s")
    target_rate_per_s: float = Field(
        ge=_RATE_BOUNDS[0] * MAX_REPLICAS, le=_RATE_BOUNDS[1],
        description="Requests/s the deployment must serve (a replica's share, at most "
                    f"{MAX_REPLICAS} replicas, within workload.arrival.rate_per_s's range).")
    objective: CapacityObjective = CapacityObjective()
    gpus: tuple[str, ...] = Field((), description="Hardware presets to consider (empty: every GPU with a price).")
    tp_degrees: tuple[_config_value(HardwareSpec, "num_gpus"), ...] = Field(
        (1, 2, 4, 8), description="Tensor-parallel degrees per replica (at least one)."
    )
    max_replicas: int = Field(
        16, ge=1, le=MAX_REPLICAS, description="Most replicas of one configuration (with disaggregation: most instances, x + y)."
    )
    router: Router = Field(  # config.Router: every router a deployment offers
        "round_robin", description="The router in front of the replicas (deployment.router); `python -m sim_core plan` "
        "and the Plan page start from the base config's own (default_router).",
    )
    state_refresh_s: _config_value(DeploymentConfig, "state_refresh_s", float) = Field(
        DeploymentConfig.model_fields["state_refresh_s"].default,
        description="Seconds between the router's refreshes of engine state (deployment.state_refresh_s: least_kv, "
        "prefix_affinity and weighted_score route on it); `python -m sim_core plan` and the Plan page start from the base config's own "
        "(default_state_refresh_s).",
    )
    _refresh_zero_or_resolvable = field_validator("state_refresh_s")(check_state_refresh_s)
    disaggregated: bool = Field(
        False, description="Also search xPyD splits: x prefill + y decode instances (x + y ≤ max_replicas), "
        "each pool with a TP degree from tp_degrees, one GPU kind, priced by total GPUs.",
    )  # fmt: skip
    evaluation: Literal["prefilter", "deployment", "one_replica"] = Field(
        "prefilter", description="prefilter: search with one replica at rate / replicas, then confirm the finalists "
        "(and fewer replicas of them) as deployments; deployment: simulate every candidate as a deployment "
        "(cluster simulation; slower); one_replica: no confirmation (exact for a random router).",
    )  # fmt: skip
    engines: tuple[str, ...] = Field(DEFAULT_ENGINES, min_length=1, description="Engine presets to consider.")
    token_budgets: tuple[_config_value(SchedulerConfig, "max_num_batched_tokens") | None, ...] = Field(
        (None,), description="scheduler.max_num_batched_tokens values (None: the engine preset's; at least one)."
    )
    max_batches: tuple[_config_value(SchedulerConfig, "max_num_seqs") | None, ...] = Field(
        (None,), description="scheduler.max_num_seqs values (None: the engine preset's; at least one)."
    )
    prices_usd_per_gpu_hour: dict[str, _config_value(GpuPrice, "usd_per_gpu_hour", float)] = Field(  # (a cited price's bounds)
        default_factory=dict, description="Price overrides per hardware preset, USD per GPU-hour."
    )
    num_results: int = Field(5, ge=1, le=100, description="Cheapest feasible configurations to return.")
    batch_size: int = Field(8, ge=1, le=256, description="Candidates simulated per round (fixed: same rounds on any backend).")
    headroom_rel_tol: float = Field(0.03, gt=0, le=0.5, description="Bracket width of the headroom bisection.")

    @model_validator(mode="after")
    def _known_presets(self) -> PlanSpec:
        # (an unknown engine was pruned as "1 invalid configuration", a price for an unknown GPU ignored.) The
        # lists' emptiness is checked here, not by min_length: pydantic adds "should have at least 1 item" to a
        # bad value's own message, as if a list of one bad value were empty.
        for what in ("tp_degrees", "token_budgets", "max_batches"):
            if not getattr(self, what):
                raise ValueError(f"{what}: give at least one value")
        return self

    @field_validator("gpus", "engines", "prices_usd_per_gpu_hour")
    @classmethod
    def _known_names(cls, value: Any, info: ValidationInfo) -> Any:
        # (a field's own check, so that an error is named by its field: `plan` names the option it came from, --gpus)
        family = "engines" if info.field_name == "engines" else "hardware"
        known = list_presets(family)
        unknown = [n for n in (value or ()) if n not in known]
        if unknown:
            named = ", ".join(repr(n) + did_you_mean(n, known) for n in unknown)  # ('h100': 'h100-sxm')
            raise ValueError(f"unknown {FAMILY_NOUNS[family]} preset(s) {named}; available: {', '.join(known)}")
        return value

    def describe_evaluation(self, base: SimConfig | None = None) -> str:
        """How candidates of a plan for `base` were simulated, in words (CLI and page)."""
        how = {"one_replica": "replicas behind a random router, simulated as one replica at rate / replicas",
               "prefilter": f"searched as one replica at rate / replicas, finalists confirmed as deployments ({self.router} router)",
               "deployment": f"each candidate simulated as a deployment (cluster, {self.router} router)"}[self.evaluation]  # fmt: skip
        if not self.disaggregated:
            return how
        from sim_core.cluster.report import describe_link

        return how + f"; P:D splits searched as deployments (KV link {describe_link(split_link(base))})"

    def capacity_text(self) -> str:
        """What a row's capacity and latencies are, in words (CLI legend, page caption and column help): the steady
        window's latencies, as the objective judges them, and a capacity that is the last rate the bisection found
        passing ("+0%" read as "at the edge", a review)."""
        return (f"TTFT and TPOT at the target rate over the steady-state window (arrivals but the {steady_exclusion_text()}), "
                f"as the SLOs are judged; capacity: the highest rate found to meet them, bisected to within "
                f"{self.headroom_rel_tol:.0%} (a lower bound)")  # fmt: skip

    def prices(self) -> dict[str, float]:
        out = {k: v.usd_per_gpu_hour for k, v in default_prices().items()}
        return out | dict(self.prices_usd_per_gpu_hour)

    def gpu_list(self) -> tuple[str, ...]:
        return self.gpus or tuple(g for g in list_presets("hardware") if g in self.prices())


# ---------------------------------------------------------------- configurations
@dataclass(frozen=True)
class Family:
    """Everything about a deployment except its instance counts. `decode_tp` set: a prefill/decode
    split (`tp` is then the prefill pool's TP degree)."""

    gpu: str
    tp: int
    engine: str
    token_budget: int | None
    max_batch: int | None
    decode_tp: int | None = None

    @property
    def is_split(self) -> bool:
        return self.decode_tp is not None

    def label(self) -> str:
        knobs = "".join(
            [f", budget {self.token_budget}" if self.token_budget else "", f", batch {self.max_batch}" if self.max_batch else ""]
        )
        tp = f"P TP{self.tp} / D TP{self.decode_tp}" if self.is_split else f"TP{self.tp}"
        return f"{self.gpu} {tp} · {self.engine}{knobs}"

    def key(self) -> tuple:
        """A total order (None knobs first, co-located before splits) for deterministic tie-breaks."""
        return (self.gpu, self.tp, self.engine, self.token_budget or 0, self.max_batch or 0, self.decode_tp or 0)

    def num_gpus(self, size: tuple[int, ...]) -> int:
        """GPUs of `size` instances: (replicas,) or (prefill, decode)."""
        return size[0] * self.tp + (size[1] * self.decode_tp if self.is_split else 0)

    def num_sizes(self, max_instances: int) -> int:
        """len(self.sizes(max_instances)), without listing them (a split: x + y ≤ max_instances, both ≥ 1)."""
        return max_instances if not self.is_split else max_instances * (max_instances - 1) // 2

    def sizes(self, max_instances: int) -> list[tuple[int, ...]]:
        if not self.is_split:
            return [(r,) for r in range(1, max_instances + 1)]
        return [(x, y) for x in range(1, max_instances) for y in range(1, max_instances - x + 1)]

    def size_label(self, size: tuple[int, ...]) -> str:
        return f"{size[0]}P{size[1]}D" if self.is_split else f"{size[0]}×"


def default_router(base: SimConfig) -> Router:
    """The router a plan of `base` searches behind when none is asked for: `base`'s own deployment.router (a config of
    a routed deployment was planned behind round robin without a word), round robin for one engine (PlanSpec's)."""
    return base.deployment.router if base.deployment is not None else PlanSpec.model_fields["router"].default


def default_state_refresh_s(base: SimConfig) -> float:
    """The router's state refresh interval a plan of `base` uses when none is asked for: `base`'s own
    deployment.state_refresh_s (candidates refreshed at the default 0.05 s whatever the config said), the default for
    one engine."""
    return (base.deployment or DeploymentConfig()).state_refresh_s


def router_note(base: SimConfig, spec: PlanSpec) -> str | None:
    """What the plan did with `base`'s own router, in words, when `base` has a deployment (CLI and Plan page): searched
    behind it, behind another (asked for), or not at all (one_replica: a random router); and, for the routers that read
    engine state, the refresh interval the candidates use when it is not the config's."""
    dep = base.deployment
    if dep is None:
        return None
    own = f"the config's deployment.router, {dep.router}"
    if spec.evaluation == "one_replica" and not spec.disaggregated:
        return f"{own}, is not used: evaluation one_replica simulates each candidate as one replica behind a random router"
    said = f"candidates are routed by {own}" if spec.router == dep.router else f"candidates are routed by {spec.router}, not {own}"
    if spec.router in STATE_ROUTERS:
        said += (f" (refreshing engine state every {spec.state_refresh_s:g} s, as the config's deployment.state_refresh_s)"
                 if spec.state_refresh_s == dep.state_refresh_s else
                 f" (refreshing engine state every {spec.state_refresh_s:g} s, not the config's deployment.state_refresh_s "
                 f"= {dep.state_refresh_s:g} s)")  # fmt: skip
    return said


def calibration_note(base: SimConfig, spec: PlanSpec) -> str | None:
    """What the plan does with `base`'s calibration when it is the config's own (changed from its profile's values),
    in words (CLI and Plan page): the engines whose presets name a profile are priced at it (`family_config`), so the
    change is not used for them; None when nothing the config set is lost."""
    if base.calibration == CalibrationConfig(**profile_values(base.calibration.profile)):
        return None
    named = [e for e in spec.engines if "calibration" in with_engine_data({}, e)]  # (family_config's rule, asked)
    if not named:
        return None
    return (f"the config's calibration differs from its profile {base.calibration.profile!r}, and is not used for "
            f"{', '.join(named)}: each is priced at its own preset's profile, as choosing it in Simulate does")


def split_link(base: SimConfig | None) -> LinkConfig:
    """The KV link between the pools of every P:D split candidate of a plan for `base`: its own, where it is a P:D
    deployment (a DistServe or Dynamo preset's NVLink), else the config's default link (the page and the CLI name it
    from here)."""
    dis = base.deployment.disaggregation if base is not None and base.deployment is not None else None
    return dis.link if dis is not None else LinkConfig()


def family_config(base: SimConfig, fam: Family) -> SimConfig:
    """The base (model, traffic, SLOs) on this GPU × TP with this engine and knobs. The engine is taken whole, as
    choosing it in Simulate or `--set engine=NAME` does (`with_engine_data`: its scheduler, and its memory rule and
    calibration profile where its preset names them), the searched knobs over its scheduler (docs/capacity.md)."""
    data = with_engine_data(base.model_dump(mode="json"), fam.engine)
    hw = read_preset_data("hardware", fam.gpu)
    hw.pop("description", None)
    data["hardware"] = hw | {"num_gpus": fam.tp}
    data["name"] = f"plan: {fam.label()}"
    # (the scenario's own description, "chat traffic (8 req/s) on one H100", went out with a plan's 3-replica row at
    # 50 req/s in config-1.json; the same words for every family, so the duplicate test below still sees duplicates)
    data["description"] = (f"A deployment planned for the traffic, model and SLOs of {base.name} (python -m sim_core "
                           "plan, or the Plan page): its hardware, engine, replicas and rate are the plan's row.")
    data["deployment"] = None
    if fam.is_split:  # pools of one GPU kind; instance counts are set per candidate (candidate_config)
        data["deployment"] = {"disaggregation": {"prefill": {"tensor_parallel": fam.tp},
                                                 "decode": {"tensor_parallel": fam.decode_tp},
                                                 "link": split_link(base).model_dump(mode="json")}}  # fmt: skip
    if fam.token_budget is not None:  # (over the engine's scheduler: the knobs searched, the rest the engine's)
        data["scheduler"]["max_num_batched_tokens"] = fam.token_budget
    if fam.max_batch is not None:
        data["scheduler"]["max_num_seqs"] = fam.max_batch
    return config_from_dict(data, f"plan candidate {fam.label()}")


def candidate_config(cfg: SimConfig, fam: Family, size: tuple[int, ...], rate_per_s: float, spec: PlanSpec) -> SimConfig:
    """THE place that decides how a candidate is simulated: `size` instances of the family config
    `cfg` at a total rate λ. Default: the deployment itself (replicas behind `spec.router`, or x
    prefill + y decode instances), run by the cluster simulation; `spec.evaluation = "one_replica"`:
    one replica at λ/N (`replica_config`)."""
    if spec.evaluation == "one_replica" and not fam.is_split:
        return replica_config(cfg, rate_per_s, size[0])
    return deployment_config(cfg, rate_per_s, size, spec.router, spec.state_refresh_s)


def deployment_config(cfg: SimConfig, rate_per_s: float, size: tuple[int, ...], router: str = "round_robin",
                      state_refresh_s: float = DeploymentConfig.model_fields["state_refresh_s"].default) -> SimConfig:  # fmt: skip
    """The family config as a deployment of `size` instances ((replicas,) or (prefill, decode)) at λ,
    with a steady-state run length (a trace is time-scaled to λ), behind `router` refreshing its view of the engines
    every `state_refresh_s`."""
    data = _at_total_rate(cfg, rate_per_s, 1).model_dump(mode="python")
    if len(size) == 1:
        data["deployment"] = None if size[0] == 1 else {"replicas": size[0], "router": router, "state_refresh_s": state_refresh_s}
    else:
        dis = data["deployment"]["disaggregation"]
        dis["prefill"]["replicas"], dis["decode"]["replicas"] = size
        data["deployment"]["router"] = router
        data["deployment"]["state_refresh_s"] = state_refresh_s
    data["limits"]["num_recorded_batches"] = 0
    return config_from_dict(data, f"deployment {size} at {rate_per_s:g} req/s")


def replica_config(cfg: SimConfig, rate_per_s: float, num_replicas: int) -> SimConfig:
    """One replica of an N-replica deployment behind a random router, at a total rate λ.

    N replicas behind a random router are simulated as one replica at λ/N. For Poisson arrivals this
    is exact — randomly thinning a Poisson process of rate λ with probability 1/N gives a Poisson
    process of rate λ/N, independent across replicas — and every replica is statistically the same,
    so the replica's latency percentiles are the deployment's. (Round robin and least-outstanding
    routers smooth the arrivals and do better; this is conservative for them.) A trace is
    time-scaled to the target rate, then thinned by a seeded 1-in-N draw.
    """
    return _at_total_rate(cfg, rate_per_s, num_replicas)


def _at_total_rate(cfg: SimConfig, rate_per_s: float, num_replicas: int) -> SimConfig:
    """The share of one of `num_replicas` random-routed replicas of traffic at a total λ (all of it for 1)."""
    per_replica = rate_per_s / num_replicas
    tr = cfg.workload.trace
    if tr is None:
        return at_rate(cfg, per_replica)
    n = cfg.workload.num_requests
    span = tr.arrival_s[n - 1] - tr.arrival_s[0]  # the trace's rate becomes λ (sweep.with_rate), unless it has none
    scaled = with_rate(cfg, rate_per_s).workload.trace.arrival_s if span > 0 else [a - tr.arrival_s[0] for a in tr.arrival_s]
    keep = np.random.default_rng(cfg.seed).random(n) < 1.0 / num_replicas
    keep[0] = True  # never an empty trace
    idx = np.flatnonzero(keep)
    data = cfg.model_dump(mode="python")
    data["workload"]["trace"] = {
        "arrival_s": [float(scaled[i]) for i in idx],
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
    if cfg.workload.trace is None:
        # Sessions: only a conversation's next turn can wait (it needs the previous reply), so the probe sends it at
        # once (think time 0) and runs as many sessions as it would requests (kept 20 s thinks and 256 sessions of
        # 4 turns left the batch mostly empty: multi-turn-chat-h100-llama8b "saturated" at 10 req/s, met its SLOs at 20)
        turns = cfg.workload.sessions.turns
        if turns > 1:
            data["workload"]["sessions"]["think_time_s"] = 0.0
        data["workload"]["num_requests"] = min(max(SATURATION_REQUESTS, 4 * cfg.scheduler.max_num_seqs) * turns, MAX_NUM_REQUESTS)
    else:
        data["workload"]["num_requests"] = cfg.workload.num_requests
    data["limits"]["num_recorded_batches"] = 0
    return config_from_dict(data, "saturation probe")


def prefill_bound_per_s(prefill_pool: SimConfig, mean_prompt_tokens: float) -> float | None:
    """The most requests/s one instance of a P:D split's prefill pool (`pool_config`'s engine) can prefill, from the
    cost model alone (no run), for prompts of `mean_prompt_tokens` on average: every prompt token is prefilled (no
    prefix cache), no tick holds more than the pool's token budget B, and a tick of n prefill tokens takes at least
    `CostModel.tick(n, 0, 0, 0, 1)` (no attention pairs, no context read, one sequence, no sampled row: each only
    adds), whose time per token falls as n grows (a norm of affine terms, plus terms linear or fixed in n). So prompt
    tokens flow at most B / tick(B). None where the prefix cache saves prefill tokens (the bound would not hold)."""
    from sim_core.costmodel import CostModel

    if prefill_pool.kv_cache.enable_prefix_caching or mean_prompt_tokens <= 0:
        return None
    budget = prefill_pool.scheduler.max_num_batched_tokens
    tick_s = float(CostModel(prefill_pool).tick(budget, 0, 0, 0, 1)[0])
    return budget / (tick_s * mean_prompt_tokens) if tick_s > 0 else None


def mean_prompt_tokens(cfg: SimConfig) -> float:
    """The mean prompt of the requests `cfg`'s run draws (its workload and seed: the engine's draw)."""
    return mean_lengths(cfg)[0]


def mean_lengths(cfg: SimConfig) -> tuple[float, float]:
    """(mean prompt, mean output) in tokens of the requests `cfg`'s run draws (its workload and seed: the engine's
    draw); what a plan's cost per token rests on, which the Plan page states."""
    from sim_core.workload import generate_workload

    wl = generate_workload(cfg.workload, np.random.default_rng(cfg.seed))
    mean = lambda a: float(a.mean()) if a.size else 0.0  # noqa: E731
    return mean(wl.prompt_tokens), mean(wl.output_tokens)


SATURATION_REQUESTS = 1000
# Replica counts are simulated down to saturation / 1.25: the bound comes from a different arrival
# pattern (everything queued), so it is kept loose rather than trusted to the last percent.
SATURATION_MARGIN = 1.25


def saturation_rate(cfg_json: str, budget: RunBudget | None = None) -> str:
    """Backend task: the saturation rate (requests/s) of an offline run (`completion_rate_per_s`), JSON
    {"rate": r} or {"error": msg}."""
    from sim_core.engine import run_simulation

    try:
        res = run_simulation(SimConfig.model_validate_json(cfg_json), budget=budget)
    except (PresetError, MemoryPlanError) as err:
        return json.dumps({"error": str(err)})
    rate = completion_rate_per_s(res)
    if rate is None:
        stopped = f" ({res.summary.stopped_reason})" if res.summary.stopped_reason else ""
        return json.dumps({"error": f"too few requests finished to measure saturation{stopped}"})
    return json.dumps({"rate": rate})


def one_line(message: str) -> str:
    """An error message as one line (a config error lists its problems on indented lines)."""
    return " ".join(message.split())


# ---------------------------------------------------------------- results
@dataclass(frozen=True)
class PlanRow:
    family: Family
    size: tuple[int, ...]  # (replicas,) or (prefill instances, decode instances)
    num_gpus: int
    usd_per_hour: float
    config: SimConfig  # what was simulated and what Simulate opens (the deployment, or one replica's share)
    summary: Summary  # that run
    meets: bool
    capacity_per_s: float | None = None  # deployment capacity
    capacity_note: str | None = None
    share: int = 1  # the config is one of `share` identical replicas (evaluation "one_replica")

    @property
    def num_replicas(self) -> int:
        """Instances in the deployment (prefill + decode for a split)."""
        return sum(self.size)

    @property
    def label(self) -> str:
        return f"{self.family.size_label(self.size)} {self.family.label()}"

    @property
    def output_tokens_per_s(self) -> float:
        st = self.summary.steady
        return self.share * (st.output_tokens_per_s if st else self.summary.output_tokens_per_s)

    @property
    def goodput_per_s(self) -> float:
        st = self.summary.steady
        return self.share * (st.goodput_requests_per_s if st else self.summary.goodput_requests_per_s)

    @property
    def usd_per_million_output_tokens(self) -> float:
        """$ per hour × 10⁶ / (output tokens per second × 3600)."""
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
        # (the closed-form rows, a subset: the About page quoted it beside the docs' 195, which add the simulated
        # engines' rows that `validate` replays in minutes)
        return (f"cost-model error on {self.num_rows} held-out published measurements priced in closed form: median "
                f"±{self.median_pct:.0f} %, p90 ±{self.p90_pct:.0f} %. Latency under arrivals, which queueing decides, "
                "errs more, and just below saturation it is predicted low: leave headroom (`python -m sim_core validate` "
                "gives the error by kind of row)")  # fmt: skip


def calibration_band() -> CalibrationBand:
    from sim_core import validate

    if not validate.CALIBRATION_CSV.exists():
        return CalibrationBand(None, None)
    n, med, p90 = validate.engine_error_band()
    return CalibrationBand(med, p90, n)


@dataclass(frozen=True)
class Stopped:
    """Where a search the caller cancelled (the app's page budget) had got to: its rows are those found until then."""

    why: str  # the cancel's own words ("cancelled after 2 of 6")
    frontier_usd_per_hour: float  # every candidate cheaper than this was settled; from here up, not all were tried
    what: str = "search"  # what stopped ("P:D split search")

    def text(self) -> str:
        if self.frontier_usd_per_hour <= 0:  # (stopped while its search space was built)
            return f"the {self.what} stopped ({self.why}) before any of its candidates was tried"
        return (f"the {self.what} stopped ({self.why}): every candidate under ${self.frontier_usd_per_hour:,.2f}/h was "
                "settled, dearer ones not all tried")  # fmt: skip


@dataclass
class Plan:
    spec: PlanSpec
    rows: list[PlanRow]  # cheapest feasible first, one per family
    evaluated: list[PlanRow]  # every simulated candidate (feasible or not), for the Pareto chart
    pruned: dict[str, int] = field(default_factory=dict)  # reason -> candidates skipped
    num_candidates: int = 0
    band: CalibrationBand = field(default_factory=lambda: CalibrationBand(None, None))
    saturation: dict[Family, float] = field(default_factory=dict)  # family -> one replica's saturation rate, req/s
    # reason -> the first candidate's message, for the reasons a message explains ("simulation error", "invalid
    # configuration"): `--set limits.max_ticks=1` pruned every candidate as "2 simulation error" and the plan advised
    # widening the search, never naming the limit (fuzz39)
    examples: dict[str, str] = field(default_factory=dict)
    stopped: Stopped | None = None  # the caller cancelled the search before it settled every candidate

    def runs_text(self) -> str:
        """The simulations the plan ran, as runs, not candidates: under the prefilter a finalist is run again as a
        deployment (and with fewer replicas), so runs and the candidates skipped need not add up to the candidates
        (the page read "576 candidate configurations, 19 simulated; skipped: 84 ..., 480 ...", 583, a review)."""
        again = " (finalists run again as deployments)" if self.spec.evaluation == "prefilter" and self.evaluated else ""
        return counted(len(self.evaluated), "simulation run") + again

    def no_answer_text(self, widen: str = "add GPUs, TP degrees or replicas") -> str:
        """Why no configuration met the SLOs and what to change, from what was skipped (`widen`: how the caller's
        search space is widened). When nothing was simulated the reason is the search space's: "add replicas" told a
        70B model that fits on no GPU x TP here to add what cannot help."""
        memory = self.pruned.get("does not fit in memory", 0)
        saturated = self.pruned.get("fewer replicas than the saturation bound allows", 0)
        if not self.evaluated and memory and memory == sum(self.pruned.values()):
            return ("the model fits on none of these GPU x TP choices (every candidate was skipped as not fitting in "
                    "memory, weights and KV cache): allow larger TP degrees or GPUs with more memory")
        if not self.evaluated and saturated:
            return (f"even the most replicas searched ({self.spec.max_replicas:,}) cannot keep up with "
                    f"{self.spec.target_rate_per_s:g} req/s on these GPU x TP choices (the saturation bound skipped them "
                    "unsimulated): raise the most replicas, allow larger TP degrees or faster GPUs, or lower the rate")
        return f"no configuration in the search space meets the SLOs at this rate: {widen}, or relax the SLOs"

    def pruned_text(self) -> str:
        """The candidates skipped, by reason: '1 dominated: ..., 64 ...', or 'none' (the CLI printed 'pruned: ' and the
        Plan page 'skipped: .' with nothing after them); a reason with a message, with its first one."""
        said = lambda why: f" (first: {self.examples[why]})" if why in self.examples else ""
        return ", ".join(f"{n:,} {why}{said(why)}" for why, n in self.pruned.items()) or "none"

    def robust(self, row: PlanRow) -> bool | None:
        """Still meets the target if the model is off by the median calibration error (headroom ≥ band)."""
        h = row.headroom(self.spec.target_rate_per_s)
        if h is None or self.band.median_pct is None:
            return None
        return h >= self.band.median_pct / 100

    def points(self) -> list[PlanRow]:
        """Every simulated configuration once, by its last run: the prefilter's deployment run of a finalist, not
        also its one-replica approximation (λ/N), whose latency and verdict can differ (for the Pareto chart)."""
        last = {(r.family, r.size): r for r in self.evaluated}  # confirmations come after the search's runs
        return list(last.values())

    def row_notes(self) -> list[tuple[str, str]]:
        """Each distinct note of the result rows (why a row has no capacity or headroom, or what its capacity probe
        could not say) with the rows it is about in words ("every row", "1 row: 2× h100-sxm TP1 · vllm-v1"), in table
        order (CLI and page: their tables show "–" alone)."""
        rows_by_note: dict[str, list[str]] = {}
        for r in self.rows:
            if r.capacity_note:
                rows_by_note.setdefault(r.capacity_note, []).append(r.label)
        return [("every row" if len(labels) == len(self.rows) else
                 f"{len(labels)} row{'s' if len(labels) > 1 else ''}: " + "; ".join(labels[:3]) + (" …" if len(labels) > 3 else ""),
                 note) for note, labels in rows_by_note.items()]  # fmt: skip

    def table(self) -> list[dict[str, Any]]:
        """The result rows as plain dicts (CLI, page, tests): same keys everywhere."""
        p = self.spec.objective.percentile
        out = []
        for r in self.rows:
            h = r.headroom(self.spec.target_rate_per_s)
            out.append({
                "config": r.label, "gpu": r.family.gpu, "tp": r.family.tp, "replicas": r.num_replicas,
                "prefill": r.size[0] if r.family.is_split else None, "decode": r.size[1] if r.family.is_split else None,
                "decode_tp": r.family.decode_tp,
                "engine": r.family.engine, "token_budget": r.config.scheduler.max_num_batched_tokens,
                "max_batch": r.config.scheduler.max_num_seqs, "gpus": r.num_gpus,
                "usd_per_hour": r.usd_per_hour, "usd_per_million_output_tokens": r.usd_per_million_output_tokens,
                "good_requests_per_usd": r.good_requests_per_usd, f"ttft_p{p}_s": r.latency_s("ttft", p),
                f"tpot_p{p}_s": r.latency_s("tpot", p), "capacity_per_s": r.capacity_per_s,
                "headroom": h, "robust_to_calibration_error": self.robust(r), "note": r.capacity_note or "",
            })  # fmt: skip
        return out


# ---------------------------------------------------------------- the search
def _families(spec: PlanSpec) -> list[Family]:
    tps = sorted(set(spec.tp_degrees))
    splits = [None] if not spec.disaggregated or spec.evaluation == "one_replica" else [None, *tps]
    return [
        Family(g, tp, e, b, m, d)
        for d in splits for g in spec.gpu_list() for tp in tps for e in spec.engines
        for b in spec.token_budgets for m in spec.max_batches
    ]  # fmt: skip


# The most configuration families (every GPU x TP x engine x token budget x max batch, x each P:D split) one plan may
# search: each co-located one is a saturation probe before the first candidate runs, so `plan --token-budgets` of 32
# values x `--max-batches` of 16 ran 18,432 probes (over 2 minutes without a word) before any result. 65,536 is above
# the Plan page's largest space (every GPU priced, every engine, 4 x 4 knob values and P:D: 51,200 families).
MAX_PLAN_FAMILIES = 65_536


def num_families(spec: PlanSpec) -> int:
    """Configuration families in the search space (`_families`, counted without listing them)."""
    tps = len(set(spec.tp_degrees))
    splits = 1 if not spec.disaggregated or spec.evaluation == "one_replica" else 1 + tps
    return splits * len(spec.gpu_list()) * tps * len(spec.engines) * len(spec.token_budgets) * len(spec.max_batches)


def check_plan_space(spec: PlanSpec, names: Mapping[str, str] | None = None) -> None:
    """PresetError when the search space has more than MAX_PLAN_FAMILIES configuration families, naming the lists that
    make it (`names`: PlanSpec field -> as the caller calls it, e.g. `plan`'s options)."""
    n = num_families(spec)
    if n <= MAX_PLAN_FAMILIES:
        return
    name = lambda field: (names or {}).get(field, field)  # noqa: E731
    sizes = {"gpus": len(spec.gpu_list()), "tp_degrees": len(set(spec.tp_degrees)), "engines": len(spec.engines),
             "token_budgets": len(spec.token_budgets), "max_batches": len(spec.max_batches)}  # fmt: skip
    made = " x ".join(f"{v} {name(k)}" for k, v in sizes.items())
    splits = f" x {n // math.prod(sizes.values())} (co-located and each P:D split, {name('disaggregated')})" \
        if n != math.prod(sizes.values()) else ""  # fmt: skip
    raise PresetError(f"{made}{splits} = {n:,} configuration families: at most {MAX_PLAN_FAMILIES:,} per plan (each co-located "
                      "one is simulated at saturation before any candidate); give fewer values")


def _num_sizes(fam: Family, spec: PlanSpec) -> int:
    return fam.num_sizes(spec.max_replicas)


def num_candidates(spec: PlanSpec) -> int:
    """Configurations in the search space: every family's instance counts (`Plan.num_candidates` of its search)."""
    return sum(_num_sizes(f, spec) for f in _families(spec))


def _covers(a: tuple[int, ...], b: tuple[int, ...]) -> bool:
    """Every instance count of a is at least b's."""
    return all(x >= y for x, y in zip(a, b))


@dataclass(frozen=True)
class PlanProgress:
    """Where a plan is: phase `step` of `num_steps`, `done` of that phase's `total` units (`what` they are). The
    candidates are one phase; confirming finalists, P:D splits and the headroom bisections are others, so the
    whole plan is done only when the last phase is (`fraction` 1)."""

    step: int
    num_steps: int
    what: str
    done: int
    total: int

    @property
    def fraction(self) -> float:
        part = 1.0 if self.total <= 0 else min(self.done / self.total, 1.0)
        return (self.step - 1 + part) / self.num_steps

    def text(self) -> str:
        return f"step {self.step} of {self.num_steps}: {self.done:,} / {self.total:,} {self.what}"


SATURATION_PHASE = "saturation probes run (one per configuration family)"
PREFILL_BOUND_REASON = "fewer prefill instances than the prefill bound allows"
PlanProgressFn = Callable[[PlanProgress], None]
PhaseProgress = Callable[[int, int], None]  # (done, total) of one phase


def _report(on_progress: PlanProgressFn, step: int, num_steps: int, what: str, done: int, total: int) -> None:
    on_progress(PlanProgress(step, num_steps, what, done, total))


def _phases(on_progress: PlanProgressFn | None, names: Sequence[str]) -> list[PhaseProgress | None]:
    """One (done, total) callback per phase, each reporting a PlanProgress."""
    return [None if on_progress is None else functools.partial(_report, on_progress, i + 1, len(names), what)
            for i, what in enumerate(names)]  # fmt: skip


class SetupCancelled(SearchCancelled):
    """Cancelled while the search space was built, before its runs: asking again meets the same setup (unlike a
    search stopped between runs, whose finished points are cached), so a smaller space is the way on."""


def _check(cancelled: Callable[[], bool] | None, where: str, setup: bool = False) -> None:
    """Stop here if the caller says so (the app's page budget): the search space's setup costs time too (a P:D search
    over every option lists ~41k families before any run)."""
    if cancelled is not None and cancelled():
        raise (SetupCancelled if setup else SearchCancelled)(f"cancelled {where}")


def plan(
    base: SimConfig, spec: PlanSpec, *, backend: Backend | None = None, cache: PointCache | None = None,
    on_progress: PlanProgressFn | None = None, cancelled: Callable[[], bool] | None = None,
    with_band: bool = True, budget: RunBudget | None = None,
) -> Plan:
    """The cheapest configurations meeting `spec.objective` at `spec.target_rate_per_s` (see module doc).
    Runs on `backend` (default: a local process pool, one worker per CPU, closed on return); every
    simulation under `budget` when given (the app's server budget: a run it stops counts as missing the SLOs).
    `cancelled` is asked while the search space is built and between runs: True raises SearchCancelled."""
    check_tp_degrees(base, spec)  # (before a process pool starts)
    check_rate_applies(base)
    if backend is None:
        with LocalBackend() as own:
            return plan(base, spec, backend=own, cache=cache, on_progress=on_progress, cancelled=cancelled,
                        with_band=with_band, budget=budget)  # fmt: skip
    if spec.evaluation == "prefilter":
        return _prefiltered(base, spec, backend, cache, on_progress, cancelled, with_band, budget)
    probes, candidates, headroom = _phases(on_progress, [SATURATION_PHASE, "candidates settled", "rows' headroom bisected"])
    return _search(base, spec, backend, cache, candidates, cancelled, with_band, budget=budget, on_headroom=headroom,
                   on_saturation=probes)  # fmt: skip


def check_tp_degrees(base: SimConfig, spec: PlanSpec) -> None:
    """PresetError when no TP degree of the search is one `base`'s model allows (tp_degrees_allowed): every candidate
    would be pruned, and the plan would say only that none meets the SLOs."""
    allowed = tp_degrees_allowed(base.model.num_heads, base.model.num_kv_heads)
    if not any(t in allowed for t in spec.tp_degrees):
        raise PresetError(f"tp_degrees = {', '.join(map(str, spec.tp_degrees))}: {tp_rule_text(base.model)}; "
                          "search at least one of those degrees")  # fmt: skip


def tp_pruned_reason(base: SimConfig) -> str:
    """The planner's reason for the candidates whose TP degree `base`'s model does not allow (its output says it)."""
    return f"TP degree the model's heads do not split over ({base.model.name}: TP {tp_degrees_text(base.model)} only)"


def _valid_families(base: SimConfig, spec: PlanSpec, families: Sequence[Family], cancelled: Callable[[], bool] | None,
                    prune: Callable[..., None], on_split: Callable[[Family, SimConfig], None] | None = None) -> list[Family]:  # fmt: skip
    """The families whose TP degrees the model allows, whose config is valid, fits in memory and differs from an
    earlier one's; `on_split` is given each valid split and its prefill pool's engine config (for its prefill bound).
    Their configs are not kept (family_config makes one again when it is run: ~14 KB each, and a P:D space has ~41k
    families)."""
    valid: list[Family] = []
    seen: set[bytes] = set()
    allowed = tp_degrees_allowed(base.model.num_heads, base.model.num_kv_heads)
    tp_reason = tp_pruned_reason(base)  # (one text for every family it prunes)
    for i, fam in enumerate(families):
        _check(cancelled, f"while building the search space ({i:,} of {len(families):,} configuration families checked)", setup=True)
        if fam.tp not in allowed or (fam.is_split and fam.decode_tp not in allowed):
            # (an engine refuses to start: pruned like one that does not fit, not "invalid configuration")
            prune(tp_reason, _num_sizes(fam, spec))
            continue
        try:
            cfg = family_config(base, fam)
            pools = [pool_config(cfg, "prefill"), pool_config(cfg, "decode")] if fam.is_split else [cfg]
            for c in pools:
                plan_memory(c)  # memory fit first: no simulation for what cannot load
        except (PresetError, MemoryPlanError, ValueError) as err:
            fits = isinstance(err, MemoryPlanError)
            prune("does not fit in memory" if fits else "invalid configuration", _num_sizes(fam, spec),
                  None if fits else one_line(str(err)))  # fmt: skip
            continue
        # (a copy only to hash it without its name, never run: the on-disk keys stay those of earlier searches)
        key = hashlib.sha256(cfg.model_copy(update={"name": ""}).model_dump_json().encode()).digest()
        if key in seen:  # e.g. a token budget equal to the engine preset's own
            prune("same configuration as another candidate", _num_sizes(fam, spec))
            continue
        seen.add(key)
        valid.append(fam)
        if fam.is_split and on_split is not None:
            on_split(fam, pools[0])
    return valid


def _candidates(families: Sequence[Family], spec: PlanSpec, prices: Mapping[str, float],
                bounds: Mapping[Family, Sequence[tuple[int, ...]]], max_usd_per_hour: float) -> Iterator[tuple[float, Family, tuple[int, ...]]]:  # fmt: skip
    """Every (cost, family, size) within `max_usd_per_hour` and not below its family's saturation `bounds`, cheapest
    first (ties: family key, then size), made as the search asks for them: a P:D space over every option has ~41k
    families x 2,016 sizes, minutes and gigabytes to list before the first run."""
    orders: dict[tuple[int, int | None], list[tuple[int, ...]]] = {}  # sizes by GPUs, per (TP, decode TP)

    def one(fam: Family, below: tuple[tuple[int, ...], ...]) -> Iterator[tuple[float, Family, tuple[int, ...]]]:
        order = orders.get((fam.tp, fam.decode_tp))
        if order is None:
            order = orders[(fam.tp, fam.decode_tp)] = sorted(fam.sizes(spec.max_replicas), key=lambda z: (fam.num_gpus(z), z))
        price = prices[fam.gpu]
        for z in order:
            cost = price * fam.num_gpus(z)  # (a family's costs rise with its GPUs: the order above is its cost order)
            if cost > max_usd_per_hour:
                return
            if not any(_covers(b, z) for b in below):
                yield cost, fam, z

    return heapq.merge(*(one(f, tuple(bounds[f])) for f in families), key=lambda c: (c[0], c[1].key(), c[2]))


def _search(base: SimConfig, spec: PlanSpec, backend: Backend, cache: PointCache | None,
            on_progress: PhaseProgress | None, cancelled: Callable[[], bool] | None, with_band: bool,
            headroom: bool = True, families: list[Family] | None = None, max_usd_per_hour: float = math.inf,
            budget: RunBudget | None = None, on_headroom: PhaseProgress | None = None,
            on_saturation: PhaseProgress | None = None, partial: bool = False) -> Plan:  # fmt: skip
    """The cost-ordered search over `families` (default: the spec's), every candidate simulated
    by `candidate_config`; `on_progress`: candidates settled, `on_headroom`: rows bisected, `on_saturation`: the
    co-located families' saturation probes run (one per family, before the first candidate: it was the one phase
    without progress, minutes of silence for a large space). `partial`: a cancel between its runs returns what was
    found until then (`Plan.stopped`), instead of raising SearchCancelled."""
    prices = spec.prices()
    unknown = [g for g in spec.gpu_list() if g not in prices]
    if unknown:
        raise PresetError(f"no price for GPU preset(s) {', '.join(unknown)}: give one (USD per GPU-hour), e.g. "
                          f"--price {unknown[0]}=2.5 on the command line (prices_usd_per_gpu_hour in Python)")
    pruned: dict[str, int] = {}
    examples: dict[str, str] = {}

    def prune(reason: str, n: int = 1, example: str | None = None) -> None:
        pruned[reason] = pruned.get(reason, 0) + n
        if example:
            examples.setdefault(reason, example)

    families = _families(spec) if families is None else families
    # Each split's prefill bound, kept as a number (its pool's config, ~14 KB, is not: a P:D space has ~41k families);
    # the prompts' mean is the same for every family, drawn once at the first
    prefill_bounds: dict[Family, float | None] = {}
    prompt_tokens: list[float] = []

    def note_split(fam: Family, prefill_pool: SimConfig) -> None:
        if not prompt_tokens:
            prompt_tokens.append(mean_prompt_tokens(_at_total_rate(base, spec.target_rate_per_s, 1)))
        prefill_bounds[fam] = prefill_bound_per_s(prefill_pool, prompt_tokens[0])

    valid = _valid_families(base, spec, families, cancelled, prune, note_split)
    # Saturation bound (co-located): fewer replicas than λ / (1.25 × saturation rate) cannot keep up.
    colocated = [f for f in valid if not f.is_split]
    sat_fn, sat_tag = (saturation_rate, "saturation") if budget is None else (
        functools.partial(saturation_rate, budget=budget), f"saturation budget {budget}")  # fmt: skip

    def sat_configs() -> Iterator[SimConfig]:
        for i, f in enumerate(colocated):
            _check(cancelled, f"while preparing saturation probes ({i:,} of {len(colocated):,})", setup=True)
            yield saturation_config(family_config(base, f))

    if on_saturation:
        on_saturation(0, len(colocated))
    sat_payloads = cached_map(sat_fn, sat_tag, sat_configs(), backend, cache, on_saturation, cancelled)
    if on_saturation and not colocated:  # (no probe: the backend reports nothing, and the phase is done)
        on_saturation(0, 0)
    fails: dict[Family, list[tuple[int, ...]]] = {f: [] for f in valid}  # sizes known to fail
    passes: dict[Family, list[tuple[int, ...]]] = {f: [] for f in valid}  # sizes known to pass
    saturation: dict[Family, float] = {}
    searched = set(valid)
    for fam, payload in zip(colocated, sat_payloads):
        d = json.loads(payload)
        if "rate" not in d:  # a server's budget stopping the probe is said as such (the app reports it)
            budget_stop = is_budget_stop(d["error"])
            prune(f"stopped by {BUDGET_MARK}" if budget_stop else "simulation error", spec.max_replicas,
                  None if budget_stop else one_line(d["error"]))  # fmt: skip
            searched.discard(fam)
            continue
        saturation[fam] = d["rate"]
        need = math.ceil(spec.target_rate_per_s / (SATURATION_MARGIN * d["rate"]) - 1e-9)
        if need - 1 >= 1:
            fails[fam].append((min(need - 1, spec.max_replicas),))
            prune("fewer replicas than the saturation bound allows", min(need - 1, spec.max_replicas))
        if need > spec.max_replicas:
            searched.discard(fam)
    # Prefill bound (splits): fewer prefill instances than λ / (1.25 × what one can prefill) cannot keep up, whatever the
    # decode pool (`prefill_bound_per_s`: the cost model's, no run). A 70B P:D search on the Plan page spent ~80 presses
    # of its budget on splits with too few prefill instances.
    for fam, bound_per_s in prefill_bounds.items():
        if bound_per_s is None:
            continue
        need = math.ceil(spec.target_rate_per_s / (SATURATION_MARGIN * bound_per_s) - 1e-9)
        if need - 1 >= 1:
            below = min(need - 1, spec.max_replicas - 1)
            fails[fam].append((below, spec.max_replicas))  # (every decode count: x + y <= max_replicas)
            prune(PREFILL_BOUND_REASON, sum(spec.max_replicas - x for x in range(1, below + 1)))
        if need > spec.max_replicas - 1:
            searched.discard(fam)
    # (the saturation bounds only: a size a later run rules out is pruned as dominated when its turn comes)
    candidates = _candidates([f for f in valid if f in searched], spec, prices, fails, max_usd_per_hour)
    total = sum(_num_sizes(f, spec) for f in families)
    evaluated: list[PlanRow] = []
    feasible: list[PlanRow] = []
    held: tuple[float, Family, tuple[int, ...]] | None = None  # a candidate put back for the next round
    exhausted = False
    num_looked = 0

    def bound() -> float:
        costs = sorted(r.usd_per_hour for r in feasible)
        return costs[spec.num_results - 1] if len(costs) >= spec.num_results else math.inf

    frontier_usd_per_hour = 0.0  # every candidate cheaper than this is settled
    stopped: str | None = None
    try:
        while not exhausted:
            batch: list[tuple[float, Family, tuple[int, ...]]] = []
            while len(batch) < spec.batch_size:
                nxt = held if held is not None else next(candidates, None)
                held = None
                if nxt is None:
                    exhausted = True
                    break
                num_looked += 1
                if not batch:  # (the candidates come cheapest first: all below the first unsettled one are settled)
                    frontier_usd_per_hour = nxt[0]
                _check(cancelled, f"after looking at {num_looked:,} of {total:,} candidates")  # (dominated ones cost no run)
                cost, fam, z = nxt
                if cost > bound():
                    exhausted = True
                    break
                if any(_covers(b, z) for b in fails[fam]):
                    prune("dominated: fewer instances than a failing config")
                elif any(_covers(z, a) for a in passes[fam]):
                    prune("dominated: more instances than a feasible config")
                elif any(f == fam for _, f, _ in batch):
                    held = nxt  # one size per family per round: the next round knows this one's answer
                    break
                else:
                    batch.append(nxt)
            if not batch:
                continue
            configs = [candidate_config(family_config(base, f), f, z, spec.target_rate_per_s, spec) for _, f, z in batch]
            results = run_points(configs, backend, cache, None, cancelled, budget)
            for (cost, fam, z), c, (summary, err) in zip(batch, configs, results):
                if summary is None:  # (refused by a server's budget, e.g. its memory per run: said as such, the app reports it)
                    prune(f"stopped by {BUDGET_MARK}" if is_budget_stop(err) else "simulation error", 1, one_line(err))
                    fails[fam].append(z)
                    continue
                ok = meets_objective(summary, c, spec.objective)
                share = z[0] if spec.evaluation == "one_replica" and not fam.is_split else 1
                row = PlanRow(fam, z, fam.num_gpus(z), cost, c, summary, ok, share=share)
                evaluated.append(row)
                (passes if ok else fails)[fam].append(z)
                if ok:
                    feasible.append(row)
            if on_progress:
                on_progress(len(evaluated) + sum(pruned.values()), total)
    except SearchCancelled as err:
        if not partial:
            raise
        stopped = str(err)
    not_tried = total - len(evaluated) - sum(pruned.values())
    if not_tried:
        pruned["not tried: the search was stopped" if stopped else "dearer than the cheapest results"] = not_tried
    if on_progress:
        on_progress(total, total)
    best = {}
    for row in sorted(feasible, key=lambda r: (r.usd_per_hour, r.family.key(), r.size)):
        best.setdefault(row.family, row)  # one row per family: its cheapest feasible size
    rows = list(best.values())[: spec.num_results]
    if headroom:
        rows = _with_headroom(rows, spec, backend, cache, cancelled, saturation, budget, on_headroom)
    band = calibration_band() if with_band else CalibrationBand(None, None)
    return Plan(spec, rows, evaluated, pruned, total, band, saturation, examples,
                None if stopped is None else Stopped(stopped, frontier_usd_per_hour))  # fmt: skip


def _prefiltered(base: SimConfig, spec: PlanSpec, backend: Backend, cache: PointCache | None,
                 on_progress: PlanProgressFn | None, cancelled: Callable[[], bool] | None,
                 with_band: bool, budget: RunBudget | None = None) -> Plan:  # fmt: skip
    """The one-replica search (λ/N, a random router) finds the finalists; each is then simulated
    as the deployment it describes, and fewer replicas of it are tried as deployments while they
    pass (a round-robin or least-outstanding router smooths arrivals, so it may need fewer); a
    finalist that fails as a deployment is dropped. Splits (if asked) are searched as deployments,
    no dearer than the confirmed co-located rows. Not exact: a family that was not a finalist
    could pass with fewer replicas as a deployment (evaluation="deployment" searches exactly)."""
    phases = _phases(on_progress, [SATURATION_PHASE, "candidates settled (one replica at rate / replicas)", "finalists confirmed as deployments",
                                   *(["P:D split candidates settled"] if spec.disaggregated else []), "rows' headroom bisected"])  # fmt: skip
    one = spec.model_copy(update={"evaluation": "one_replica"})
    colo = [f for f in _families(spec) if not f.is_split]
    probes, phases = phases[0], phases[1:]  # (the split search below has no co-located family: no probe)
    first = _search(base, one, backend, cache, phases[0], cancelled, False, headroom=False, families=colo, budget=budget,
                    on_saturation=probes)  # fmt: skip
    prices = spec.prices()
    rows: list[PlanRow] = []
    evaluated = list(first.evaluated)
    pruned, examples = dict(first.pruned), dict(first.examples)
    todo = [(r.family, family_config(base, r.family), r.size[0], None) for r in first.rows]
    num_finalists = len(todo)
    if phases[1]:
        phases[1](0, num_finalists)
    while todo:  # rounds: every finalist at its size, then one replica fewer while it passes
        cfgs = [candidate_config(c, f, (n,), spec.target_rate_per_s, spec.model_copy(update={"evaluation": "deployment"}))
                for f, c, n, _ in todo]  # fmt: skip
        nxt = []
        for (f, c, n, last_ok), dc, (summary, err) in zip(todo, cfgs, run_points(cfgs, backend, cache, None, cancelled, budget)):
            ok = summary is not None and meets_objective(summary, dc, spec.objective)
            if summary is not None:
                evaluated.append(PlanRow(f, (n,), f.num_gpus((n,)), prices[f.gpu] * f.num_gpus((n,)), dc, summary, ok))
            lower = math.ceil(spec.target_rate_per_s / (SATURATION_MARGIN * first.saturation[f]) - 1e-9)
            if ok and n - 1 >= max(lower, 1):
                nxt.append((f, c, n - 1, evaluated[-1]))
            elif ok:
                rows.append(evaluated[-1])
            elif last_ok is not None:
                rows.append(last_ok)
            elif summary is None:
                # (not run: a server's budget refused it, e.g. 19 replicas x 184,000 requests over its memory per run;
                # counted as failing, the page said no deployment met the SLOs where the command line found 19x H100)
                why = f"finalist stopped by {BUDGET_MARK}" if is_budget_stop(err) else "finalist: simulation error"
                pruned[why] = pruned.get(why, 0) + 1
                examples.setdefault(why, one_line(err))
            elif is_budget_stop(summary.stopped_reason):
                # (a run the server's budget stopped part-way: the caption said "2 finalist fails as a deployment" above
                # the page's warning that the budget stopped 2 candidates; its run is in `evaluated`, where the page
                # counts budget stops, so the reason does not carry BUDGET_MARK, which would count it twice)
                pruned[FINALIST_CUT] = pruned.get(FINALIST_CUT, 0) + 1
                examples.setdefault(FINALIST_CUT, one_line(summary.stopped_reason))
            else:
                pruned["finalist fails as a deployment"] = pruned.get("finalist fails as a deployment", 0) + 1
        todo = nxt
        if phases[1]:
            phases[1](num_finalists - len(todo), num_finalists)
    total = first.num_candidates
    stopped: Stopped | None = None
    if spec.disaggregated:
        splits = [f for f in _families(spec) if f.is_split]
        cap = max((r.usd_per_hour for r in rows), default=math.inf)
        # (partial: a cancel here keeps the co-located rows confirmed above, and the splits found so far; the Plan page's
        # budget had dropped them all with its "press Plan again")
        try:
            second = _search(base, spec.model_copy(update={"evaluation": "deployment"}), backend, cache, phases[2], cancelled,
                             False, headroom=False, families=splits, max_usd_per_hour=cap, budget=budget, partial=True)  # fmt: skip
        except SetupCancelled as err:  # (before any split ran: none was tried)
            second = Plan(spec, [], [], {"P:D split candidates not tried: the search was stopped": num_candidates(spec) - total},
                          num_candidates(spec) - total, stopped=Stopped(str(err), 0.0))  # fmt: skip
        if second.stopped:
            stopped = dataclasses.replace(second.stopped, what="P:D split search")
        rows += second.rows
        evaluated += second.evaluated
        for k, v in second.pruned.items():
            pruned[k] = pruned.get(k, 0) + v
        examples = second.examples | examples
        total += second.num_candidates
    rows = sorted(rows, key=lambda r: (r.usd_per_hour, r.family.key(), r.size))[: spec.num_results]
    # Headroom: bisection on the deployment each row is, the one its verdict comes from. (It was bisected on one
    # replica's share, λ/N at a random router, 7x cheaper: but a round-robin deployment confirmed at the target then
    # read a capacity below it, chat-4xh100-llama70b at 32 req/s: 7x H100 TP4 met the SLOs, "capacity 26.3, headroom
    # -18 %"; bisecting the deployment gives 34.9, +9 %.)
    rows = _with_headroom(rows, spec, backend, cache, cancelled, first.saturation, budget, phases[-1])
    band = calibration_band() if with_band else CalibrationBand(None, None)
    return Plan(spec, rows, evaluated, pruned, total, band, first.saturation, examples, stopped)


def _with_headroom(rows: Sequence[PlanRow], spec: PlanSpec, backend: Backend, cache: PointCache | None,
                   cancelled: Callable[[], bool] | None, saturation: dict[Family, float],
                   budget: RunBudget | None = None, on_progress: PhaseProgress | None = None) -> list[PlanRow]:  # fmt: skip
    """Capacity of each row by bisection from the operating point (known to pass), up to the
    saturation bound (N × 1.25 × one replica's saturation; a split searches upward) -> deployment
    capacity (× N for a one-replica share).
    Traces replay fixed arrival times, so their rate cannot be bisected: no headroom for them (their note says so:
    the page and the CLI showed a bare "–")."""
    if not rows or any(r.config.workload.trace is not None for r in rows):
        if on_progress:  # nothing to bisect: the plan is done (the backend reports the bisections' progress)
            on_progress(len(rows), len(rows))
        return [dataclasses.replace(r, capacity_note=NO_HEADROOM_FOR_TRACES) for r in rows]
    ceilings = [_ceiling(r, saturation) for r in rows]
    try:
        caps: list[Capacity] = find_capacities([r.config for r in rows], spec.objective, backend=backend, cache=cache,
                                               cancelled=cancelled, rel_tol=spec.headroom_rel_tol, ceilings_per_s=ceilings,
                                               budget=budget, on_progress=on_progress)  # fmt: skip
    except SearchCancelled:  # (the rows are confirmed: a caller's cancel costs their headroom, not the rows)
        return [dataclasses.replace(r, capacity_note=NOT_BISECTED) for r in rows]
    out = [dataclasses.replace(r, capacity_per_s=c.rate_per_s * r.share, capacity_note=c.note) for r, c in zip(rows, caps)]
    # at one price the row with more headroom first (it listed SGLang's +25 % above vLLM V1's +26 % at $9.00/h, by name)
    return sorted(out, key=lambda r: (r.usd_per_hour, -r.capacity_per_s))


NOT_BISECTED = "no capacity or headroom: the search was stopped before their bisection"
FINALIST_CUT = "finalist's deployment run stopped part-way by a per-run limit (not judged)"
NO_HEADROOM_FOR_TRACES = ("no capacity or headroom: the traffic is a trace, whose arrival times are replayed as "
                          "recorded (time-scaled to the target rate), so no other rate is bisected")


def _ceiling(row: PlanRow, saturation: dict[Family, float]) -> float | None:
    """Top of the headroom bisection: 1.25 × the saturation rates of the deployment's instances
    (a split: of its pools' GPUs run co-located, a cap on the bisection rather than a proven bound)."""
    f = row.family
    if not f.is_split:
        return SATURATION_MARGIN * saturation[f] * (row.size[0] if row.share == 1 else 1) if f in saturation else None
    pre, dec = (dataclasses.replace(f, tp=tp, decode_tp=None) for tp in (f.tp, f.decode_tp))
    if pre not in saturation or dec not in saturation:
        return None
    return SATURATION_MARGIN * (row.size[0] * saturation[pre] + row.size[1] * saturation[dec])


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
