"""Sweeps of one knob and capacity search: the Sarathi-Serve / DistServe way of comparing systems.

Capacity (docs/capacity.md, "Capacity planning") is the highest offered request rate at which the steady-state window
(metrics.steady_window) meets the objective, found by bisection. The objective is either the
serving-benchmark one — the named percentile (P50/P90/P99) of TTFT and of TPOT within the SLO
targets — or DistServe's "at least 90 % of requests meet both". Each probe runs long enough for a
steady state (`steady_run_length`); runs share the seed, so every probe sees the same request
lengths (workload.py draws lengths independently of arrivals).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from sim_core.backend import Backend, LocalBackend, PointCache, run_points
from sim_core.budget import RunBudget
from sim_core.config import MAX_SEED, SimConfig, field_info, tp_degrees_allowed, tp_rule_text
from sim_core.engine import run_simulation
from sim_core.metrics import KEEP_UP_FRACTION, MAX_NUM_REQUESTS, STEADY_WARMUP_FRACTION, says_overloaded
from sim_core.presets import PART_FAMILIES, PresetError, config_from_dict, config_with
from sim_core.result import SteadyState, Summary
from sim_core.words import percent

# knob name -> (dotted config path, label with unit, integer?)
SWEEP_KNOBS: dict[str, tuple[str, str, bool]] = {
    "rate": ("workload.arrival.rate_per_s", "arrival rate (requests/s)", False),
    "max_num_seqs": ("scheduler.max_num_seqs", "max batch size (sequences)", True),
    "chunk": ("scheduler.max_num_batched_tokens", "token budget / chunk (tokens)", True),
    "memory_gib": ("hardware.memory_gib", "GPU memory (GiB)", False),
    "bandwidth": ("hardware.hbm_bandwidth_gb_per_s", "HBM bandwidth (GB/s)", False),
    "tflops": ("hardware.peak_tflops", "peak compute (TFLOP/s)", False),
    "num_gpus": ("hardware.num_gpus", "GPUs (tensor parallel)", True),
    "kv_compression": ("kv_cache.kv_compression", "KV compression (fraction kept)", False),
    "replicas": ("deployment.replicas", "replicas behind the router", True),
    "prefill_instances": ("deployment.disaggregation.prefill.replicas", "prefill instances (P of P+D, total fixed)", True),
}

# an older name of a knob -> its name: read from the CLI and links (the memory knob said GB for a GiB field, as the field did
# before it was renamed; config._migrate_memory_gb reads the field's old name the same way)
KNOB_ALIASES = MappingProxyType({"memory_gb": "memory_gib"})


def knob_name(name: str) -> str:
    """A sweep knob by its name or an older one (`KNOB_ALIASES`); an unknown name is returned as it is."""
    return KNOB_ALIASES.get(name, name)


def with_value(cfg: SimConfig, path: str, value: Any) -> SimConfig:
    """`cfg` with the value at `path` replaced (a section given whole replaces it: a lesson's knob may be the whole
    `deployment`); an absent optional section on the way starts empty, from its defaults. A part named by its preset
    (`"engine", "sglang"`) is swapped by `config_with`'s rule: set in the dict, it went beside the scheduler the dump
    already had, which won, so a Python sweep of engines ran one engine at every point without a word."""
    if path in PART_FAMILIES and isinstance(value, str):
        return config_with(cfg, {path: value}, f"sweep point {path}={value}")
    data = cfg.model_dump(mode="python")
    node = data
    *parts, last = path.split(".")
    for p in parts:
        if node.get(p) is None:
            node[p] = {}
        node = node[p]
    node[last] = value
    return config_from_dict(data, f"sweep point {path}={value}")


def knob_value(cfg: SimConfig, knob: str) -> float:
    """The config's current value of a sweep knob (an absent deployment counts as 1 replica / 1 prefill; a trace's
    rate is its own, `with_rate`'s (n − 1) / span, not workload.arrival.rate_per_s, which it does not follow)."""
    if knob == "rate" and cfg.workload.trace is not None and (span := _trace_span_s(cfg)) > 0:
        return (cfg.workload.num_requests - 1) / span
    node: Any = cfg.model_dump()
    for part in SWEEP_KNOBS[knob][0].split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return 1.0 if node is None else float(node)


def _trace_span_s(cfg: SimConfig) -> float:
    """From the first to the last arrival of the trace's requests replayed (workload.num_requests of them), s."""
    tr = cfg.workload.trace
    return tr.arrival_s[cfg.workload.num_requests - 1] - tr.arrival_s[0]


def with_rate(cfg: SimConfig, rate_per_s: float) -> SimConfig:
    """The config's traffic offered at `rate_per_s` requests/s. A trace fixes its own arrivals, so setting
    workload.arrival.rate_per_s alone changed nothing (a rate sweep of a trace drew equal rows, a capacity
    search probed one run at every rate): its arrivals are time-scaled instead, to start at 0 with a mean
    rate (n − 1) / span over the n requests replayed of `rate_per_s` (the planner's rule for a trace)."""
    tr = cfg.workload.trace
    if tr is None:
        return with_value(cfg, "workload.arrival.rate_per_s", rate_per_s)
    n, span = cfg.workload.num_requests, _trace_span_s(cfg)
    if not span > 0:
        raise PresetError(f"workload.arrival.rate_per_s = {rate_per_s:g}: the trace's {n:,} requests arrive at one "
                          "instant, so it has no rate to scale")  # fmt: skip
    if not (math.isfinite(rate_per_s) and rate_per_s > 0):
        raise PresetError(f"workload.arrival.rate_per_s = {rate_per_s:g}: must be a finite number > 0")
    scale = ((n - 1) / rate_per_s) / span
    data = cfg.model_dump(mode="python")
    data["workload"]["arrival"]["rate_per_s"] = rate_per_s
    data["workload"]["trace"]["arrival_s"] = [(a - tr.arrival_s[0]) * scale for a in tr.arrival_s]
    return config_from_dict(data, f"trace at {rate_per_s:g} req/s")


# Arrival processes that do not follow workload.arrival.rate_per_s, and what they do instead
RATELESS_ARRIVALS = MappingProxyType({"offline": "every request is queued at t = 0",
                                      "closed_loop": "each client sends its next request when its last one is answered"})


def check_rate_applies(cfg: SimConfig) -> None:
    """PresetError when `cfg`'s arrivals do not follow an offered rate (offline, closed-loop: RATELESS_ARRIVALS): a rate
    sweep of the offline preset ran the same queue at every point and said the capacity was below its first rate, a
    capacity search said 0 req/s, and a plan said no configuration met the SLOs, all of one offline batch (a trace is
    time-scaled to the rate: `with_rate`)."""
    process = cfg.workload.arrival.process
    if cfg.workload.trace is None and process in RATELESS_ARRIVALS:
        raise PresetError(f"workload.arrival.process = {process!r}: {RATELESS_ARRIVALS[process]}, whatever the rate, so "
                          "a load by arrival rate (a rate sweep, a capacity search, a plan) cannot be set; allowed here: "
                          "'poisson', 'gamma' or 'constant' arrivals, or a trace")  # fmt: skip


def rate_applies(cfg: SimConfig) -> bool:
    """Whether `cfg`'s arrivals follow an offered rate (`check_rate_applies` says why not)."""
    try:
        check_rate_applies(cfg)
    except PresetError:
        return False
    return True


def apply_knob(cfg: SimConfig, knob: str, value: Any) -> SimConfig:
    """The config with one sweep knob set. The P:D knob moves instances between the pools, total fixed.
    Raises PresetError when the value changes the config but no instance of a disaggregated deployment runs
    with it (every pool sets its own GPU, TP degree or scheduler)."""
    if SWEEP_KNOBS[knob][2]:  # (2.5 prefill instances ran as 2; 4.0 batch slots was refused as not an integer)
        value = whole_value(knob, value)
    if knob == "prefill_instances":
        from sim_core.cluster.knobs import with_prefill_instances

        return with_prefill_instances(cfg, value)
    if knob == "rate" and cfg.workload.trace is not None:
        return with_rate(cfg, float(value))
    out = with_value(cfg, SWEEP_KNOBS[knob][0], value)
    if out != cfg:  # (a top-level value every pool replaces ran the base deployment under the point's label)
        _check_a_pool_runs_with(cfg, knob)
    return out


@dataclass(frozen=True)
class SweepPoint:
    """One swept value; `seeds` holds the summary of every seed it ran with (the first is the
    config's own seed and is `summary`), so a chart can draw the band across seeds."""

    value: float
    summary: Summary | None
    error: str | None
    seeds: tuple[Summary, ...] = ()


def sweep_values(knob: str, start: float, stop: float, num: int, cfg: SimConfig | None = None) -> list[float]:
    """`num` values from `start` to `stop` (an integer knob's whole numbers, each once). The GPU count with `cfg`: the
    TP degrees in that range that its model's heads split evenly over (`allowed_gpus`), at most `num` spread across it
    (a sweep of 2..8 GPUs of Llama-3.1-8B ran 3, 5, 6 and 7 GPUs that no engine starts with)."""
    _, _, is_int = SWEEP_KNOBS[knob]
    check_num_points(num)
    if knob == "num_gpus" and cfg is not None:
        degrees = allowed_gpus(cfg, start, stop)
        picks = sorted({round(float(i)) for i in np.linspace(0, len(degrees) - 1, min(num, len(degrees)))})
        return [degrees[i] for i in picks]
    vals = np.linspace(start, stop, num)
    return sorted({int(round(v)) for v in vals}) if is_int else [float(v) for v in vals]


def check_num_points(num: int, name: str = "num") -> None:
    """PresetError naming a point count outside 1..MAX_SWEEP_POINTS (`sweep_values(..., -1)` was numpy's ValueError)."""
    if not 1 <= num <= MAX_SWEEP_POINTS:
        raise PresetError(f"{name} = {num}: must be >= 1" if num < 1 else f"{name} = {num}: at most {MAX_SWEEP_POINTS:,} points")


def allowed_gpus(cfg: SimConfig, start: float, stop: float) -> list[int]:
    """The GPU counts from `start` to `stop` that `cfg`'s model splits its heads evenly over (tp_degrees_allowed); a
    PresetError naming the range and the degrees there are when there is none."""
    degrees = [t for t in tp_degrees_allowed(cfg.model.num_heads, cfg.model.num_kv_heads) if start <= t <= stop]
    if not degrees:
        raise PresetError(f"num_gpus from {start:g} to {stop:g}: {tp_rule_text(cfg.model)}")
    return degrees


def completion_rate_per_s(res) -> float | None:
    """An offline run's completion rate, the most one setup can serve (its saturation rate, requests/s): completions
    between the 25th and 75th percentile finish times, when the queue keeps the batch full, the first wave's short
    requests no longer dominate and the drain is excluded. None with fewer than 8 finished requests."""
    fin = np.sort(res.requests.finish_s[res.requests.is_finished])
    if fin.size < 8:
        return None
    lo, hi = int(fin.size * 0.25), int(fin.size * 0.75)
    span = fin[hi] - fin[lo]
    return float((hi - lo) / span) if span > 0 else float(fin.size)


# A default rate sweep runs past the saturation rate by this factor, so that it shows the knee: no rate above an
# offline run's completion rate keeps up (Poisson arrivals saturate below it); a little past it, not 1.25x (the
# planner's margin), because overloaded points are the costly ones (4 replicas behind a router: 1.25x pushed the
# last point to 127 req/s and the page past its 20 s budget).
RATE_SWEEP_PAST_SATURATION = 1.1
_ROUND_STEPS = (1.0, 1.2, 1.5, 1.6, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0)  # a default sweep's step: one of these x 10^k (at most 4/3 apart)


def _times_pow10(m: float, k: int) -> float:
    """m x 10^k, divided by 10^-k for k < 0 (3 * 0.1 is 0.30000000000000004, 3 / 10 is 0.3)."""
    return m * 10.0**k if k >= 0 else m / 10.0**-k


def _round_up(x: float) -> float:
    """The smallest of _ROUND_STEPS x 10^k at or above x > 0."""
    k = math.floor(math.log10(x))
    return next(_times_pow10(m, k) for m in _ROUND_STEPS if _times_pow10(m, k) >= x * (1 - 1e-12))


def default_rate_range(current_per_s: float, saturation_per_s: float | None, num_points: int = 8) -> tuple[float, float]:
    """(start, stop) of a rate sweep nobody has set: from a quarter of the lower of the current rate and the
    saturation rate to past both (twice the current rate, and 1.1x saturation), so the curves show the light-load
    floor and the knee; the start (two significant digits, rounded down) and the step between `num_points` points
    are round numbers. Without a saturation rate: current / 4 to current x 2."""
    if saturation_per_s is None or not saturation_per_s > 0:
        return current_per_s / 4, current_per_s * 2
    low = min(current_per_s, saturation_per_s) / 4
    e = math.floor(math.log10(low)) - 1
    start = _times_pow10(math.floor(_times_pow10(low, -e)), e)  # (two significant digits, rounded down)
    past = max(current_per_s * 2, RATE_SWEEP_PAST_SATURATION * saturation_per_s)
    gaps = max(num_points, 2) - 1  # (one point: the start; `python -m sim_core sweep --num 1` divided by 0)
    step = _round_up((past - start) / gaps)
    return start, float(f"{start + step * gaps:.12g}")  # (0.75 + 0.8 * 7 is 6.3500000000000005)


def knob_bounds(knob: str, cfg: SimConfig | None = None) -> tuple[float, float]:
    """The knob's allowed range, from the config model (one source of truth); open bounds nudged in. With `cfg`, the
    P:D knob's range is its deployment's (1 to P + D - 1; the pool field allows 1-64, and a 3P1D sweep ran 1..6).
    Raises PresetError when the knob cannot apply to `cfg` (the P:D knob on one engine, replicas of a disaggregated
    deployment, a field both of its pools set their own, the rate of offline arrivals)."""
    if knob not in SWEEP_KNOBS:  # (run_sweep(cfg, "bogus", ...) was a KeyError)
        raise PresetError(f"unknown knob {knob!r}; one of {', '.join(SWEEP_KNOBS)}")
    if knob == "rate" and cfg is not None:
        check_rate_applies(cfg)
    if knob == "replicas" and cfg is not None and cfg.deployment is not None and cfg.deployment.disaggregation is not None:
        # (every point but 1 was an error, "deployment.replicas (2) must be 1 with disaggregation", under a range of 1-64)
        dis = cfg.deployment.disaggregation
        raise PresetError(f"replicas (deployment.replicas) must be 1 with disaggregation: this deployment's pools set their own "
                          f"({dis.prefill.replicas} prefill + {dis.decode.replicas} decode instances); sweep prefill_instances, "
                          "or serve with replicas instead")  # fmt: skip
    if knob not in ("rate", "replicas", "prefill_instances") and cfg is not None:
        _check_a_pool_runs_with(cfg, knob)
    if knob == "prefill_instances" and cfg is not None:
        from sim_core.cluster.knobs import prefill_instances_bounds

        return tuple(map(float, prefill_instances_bounds(cfg)))  # type: ignore[return-value]
    path, _, is_int = SWEEP_KNOBS[knob]
    lo, hi = 0.0, float("inf")
    for meta in field_info(tuple(path.split("."))).metadata:
        if getattr(meta, "ge", None) is not None:
            lo = float(meta.ge)
        if getattr(meta, "gt", None) is not None:
            lo = float(meta.gt) + (1 if is_int else 1e-3)
        if getattr(meta, "le", None) is not None:
            hi = float(meta.le)
        if getattr(meta, "lt", None) is not None:
            hi = float(meta.lt) - (1 if is_int else 1e-3)
    return lo, hi


def _check_a_pool_runs_with(cfg: SimConfig, knob: str) -> None:
    """PresetError when both pools of a disaggregated deployment replace the knob's top-level field with their own
    (`config.pool_override`): a num_gpus sweep of DistServe's P2D1 (TP 2 + TP 1) ran its one point equal to the config
    and named every other one an error, under a range of 1-64 (the CLI, the Sweep page)."""
    from sim_core.config import pool_override

    dis = cfg.deployment.disaggregation if cfg.deployment is not None else None
    if dis is None:
        return
    path = SWEEP_KNOBS[knob][0]
    overrides = {role: pool_override(pool, path) for role, pool in (("prefill", dis.prefill), ("decode", dis.decode))}
    if all(overrides.values()):
        raise PresetError(f"{knob} ({path}): no instance of this deployment runs with it: the prefill pool sets "
                          f"{overrides['prefill']} and the decode pool {overrides['decode']} "
                          "(deployment.disaggregation); sweep prefill_instances, or a config without those pool overrides")  # fmt: skip


# The most points of one sweep and seeds of one sweep or capacity search: `sweep --num 1000000` built a million
# configs (minutes and gigabytes) before its first run, `capacity --seeds 100000` queued 100,000 bisections (fuzz39).
# The Sweep page allows far fewer (its MAX_POINTS, MAX_SEEDS).
MAX_SWEEP_POINTS = 1_000
MAX_SWEEP_SEEDS = 100
# ... and the most runs of one sweep, points x seeds: each cap alone let `sweep --num 1000 --seeds 100` queue 100,000
# runs, a day or more of a workstation's CPUs. 10,000 keeps either cap reachable with the other at a tenth of its own
# (every point at 10 seeds, or 100 points at every seed); more is several sweeps. (The Sweep page's caps, 16 points and
# 5 seeds, are a page's: no constant there to share.)
MAX_SWEEP_RUNS = 10_000
# The run-length multiplier of a capacity search (`scale`): runs are clipped to MIN_CAPACITY_REQUESTS..MAX_CAPACITY_REQUESTS
# requests, so `--scale 1e30` ran 200,000-request probes and `--scale 1e-30` 500-request ones, each without a word. At
# 0.01x every probe of the default scenario is already at the 500-request floor (the quick searches of the tests run
# there), and at 100x every one is past the 200,000-request cap: beyond either end the multiplier changes nothing.
# Within them the CLI says when a probe was clipped.
MIN_RUN_SCALE = 0.01
MAX_RUN_SCALE = 100.0


def check_repeats(num_seeds: int | None = None, scale: float | None = None,
                  names: tuple[str, str] = ("num_seeds", "scale")) -> None:  # fmt: skip
    """PresetError naming a seed count outside 1..MAX_SWEEP_SEEDS or a run-length multiplier that is not a finite
    number > 0 (`names`: as the caller calls them). `python -m sim_core capacity --seeds 0` had this check; the Python
    API's run_sweep(..., num_seeds=0) ended in an IndexError, capacity_interval(..., num_seeds=0) in min() of nothing,
    scale=nan in int(nan), and scale=0 ran the shortest runs as if it were a length (fuzz39)."""
    if num_seeds is not None and not 1 <= num_seeds <= MAX_SWEEP_SEEDS:
        raise PresetError(f"{names[0]} = {num_seeds}: must be >= 1" if num_seeds < 1 else
                          f"{names[0]} = {num_seeds}: at most {MAX_SWEEP_SEEDS} seeds")  # fmt: skip
    if scale is not None and not math.isfinite(scale):
        raise PresetError(f"{names[1]} = {scale}: must be a finite number, {MIN_RUN_SCALE:g} to {MAX_RUN_SCALE:g}")
    if scale is not None and not MIN_RUN_SCALE <= scale <= MAX_RUN_SCALE:
        raise PresetError(f"{names[1]} = {scale:g}: must be {MIN_RUN_SCALE:g} to {MAX_RUN_SCALE:g} (a multiplier of the "
                          f"steady-state run length, whose runs are {MIN_CAPACITY_REQUESTS:,} to {MAX_CAPACITY_REQUESTS:,} "
                          "requests whatever the multiplier)")  # fmt: skip


def check_sweep_runs(num_points: int, num_seeds: int, names: tuple[str, str] = ("num_points", "num_seeds")) -> None:
    """PresetError naming both counts when a sweep's runs, points x seeds, pass MAX_SWEEP_RUNS (`names`: as the caller
    calls them)."""
    if num_points * num_seeds > MAX_SWEEP_RUNS:
        raise PresetError(f"{names[0]} = {num_points} x {names[1]} = {num_seeds} = {num_points * num_seeds:,} runs: at "
                          f"most {MAX_SWEEP_RUNS:,} runs per sweep (fewer points or fewer seeds)")  # fmt: skip


def single_value(knob: str, cfg: SimConfig | None) -> str | None:
    """Why this knob has one value only for this config, so that it cannot be swept (None: it has a range). A 1P1D
    deployment's P:D knob can only be 1: the page's From and To both sat at 1 and it said "'To' (1) must be larger than
    'From' (1)", values the user had not chosen."""
    lo, hi = knob_bounds(knob, cfg)
    if lo < hi:
        return None
    if knob == "prefill_instances" and cfg is not None and cfg.deployment is not None:
        dis = cfg.deployment.disaggregation
        return (f"prefill_instances can only be {lo:g} here: the deployment has {dis.prefill.replicas} prefill + "
                f"{dis.decode.replicas} decode instances and each pool keeps one. Add instances to sweep the P:D split "
                "(deployment.disaggregation.prefill.replicas or .decode.replicas).")  # fmt: skip
    return f"{knob} can only be {lo:g} for this setup: there is nothing to sweep."


def check_range(knob: str, start: float, stop: float, cfg: SimConfig | None = None,
                names: tuple[str, str] = ("start", "stop")) -> None:  # fmt: skip
    """A sweep's range: both ends within the knob's allowed values (`knob_bounds`) and start below stop; otherwise a
    PresetError naming the end (`names`: as the caller calls them) and its value. The app's sweep link and
    `python -m sim_core sweep` share it (the CLI checked only start < stop: --stop 1e308 ran into a traceback,
    --knob num_gpus --stop 1000 exited 0 with an error for every point past 64)."""
    for name, value in zip(names, (start, stop), strict=True):
        check_end(knob, value, cfg, name)
    if not start < stop:
        # (equal ends: say what to do instead, since one value is a run of that setting, not a sweep)
        same = f": a sweep runs a range of {knob}; one value is a single run with it set" if start == stop else ""
        raise PresetError(f"{names[0]} = {start:g} must be below {names[1]} = {stop:g}{same}")
    if knob == "num_gpus" and cfg is not None:
        allowed_gpus(cfg, start, stop)  # (a range holding no TP degree the model allows sweeps nothing)


def check_end(knob: str, value: float, cfg: SimConfig | None, name: str) -> None:
    """One end of a sweep's range within the knob's allowed values, and whole for an integer knob; otherwise a
    PresetError naming it (`name`). `check_range` checks both; the CLI checks an end it was given before it works out
    the default for the other (it announced "sweeping rate from -1 to 27" after a saturation run, then refused -1)."""
    if (why := single_value(knob, cfg)) is not None:
        raise PresetError(why)
    lo, hi = knob_bounds(knob, cfg)
    if not lo <= value <= hi:
        # (the bounds with thousands separators: "between 1 and 1.04858e+06" hid the chunk's 1,048,576)
        raise PresetError(f"{name} = {value:g}: {knob} must be between {lo:,.10g} and {hi:,.10g}")
    if SWEEP_KNOBS[knob][2]:  # (sweep --knob max_num_seqs --start 1.5 ran 2 without a word; the app's link said it)
        whole_value(knob, value, name)


def whole_value(knob: str, value: Any, name: str | None = None) -> int:
    """An integer knob's value as an int; a PresetError naming the knob, the value (`name`: as the caller calls it) and
    that it takes whole numbers when it is not one. The CLI, the app's sweep link and the Python API share it."""
    if isinstance(value, int | np.integer) and not isinstance(value, bool):
        return int(value)
    try:
        whole = isinstance(value, float | np.floating) and float(value).is_integer()
    except (TypeError, ValueError, OverflowError):
        whole = False
    if not whole:
        shown = f"{value:g}" if isinstance(value, float) else repr(value)
        near = f" such as {math.floor(value)} or {math.ceil(value)}" if isinstance(value, float) and math.isfinite(value) else ""
        raise PresetError(f"{name or knob} = {shown}: {knob} takes whole numbers; give an integer{near}")
    return int(value)


def rounded_points_note(knob: str, start: float, stop: float, num: int, values: Sequence[float]) -> str | None:
    """What `sweep_values` made of `num` evenly spaced points of an integer knob when they were not all whole or
    repeated (1 to 4 in 8 points: 1, 2, 3, 4), in words for the CLI and the Sweep page; None when it ran them as asked.
    (The GPU count's points are the TP degrees the model allows: said when they are fewer than the points asked.)"""
    if not SWEEP_KNOBS[knob][2]:
        return None
    if knob == "num_gpus":  # (--num 4 from 1 to 2 ran 2 points without a word)
        return None if len(values) == num else (
            f"num_gpus runs the TP degrees the model allows from {start:g} to {stop:g}: "
            f"{', '.join(f'{v:g}' for v in values)} ({len(values)} of the {num} points asked)")  # fmt: skip
    spaced = np.linspace(start, stop, num)
    if len(values) == num and all(v == x for v, x in zip(values, spaced.tolist(), strict=True)):
        return None
    shown = ", ".join(f"{v:g}" for v in values[:12]) + (", ..." if len(values) > 12 else "")
    fewer = f" ({len(values)} points: the whole numbers there, each once)" if len(values) < num else ""
    return (f"{knob} takes whole numbers: {num} evenly spaced points from {start:g} to {stop:g} are rounded to "
            f"{shown}{fewer}")


def default_range(knob: str, current: float, saturation_per_s: float | None = None, num_points: int = 8,
                  cfg: SimConfig | None = None) -> tuple[float, float]:  # fmt: skip
    """(start, stop) of a sweep nobody has set (the app's Sweep page and `python -m sim_core sweep` without --start and
    --stop): the rate by `default_rate_range`, any other knob from half to twice its current value; within the knob's
    allowed range (`knob_bounds`, with `cfg` the deployment's for the P:D knob), whole numbers for an integer knob."""
    lo, hi = knob_bounds(knob, cfg)
    current = min(max(current, lo), hi)  # (a trace's own rate has no bound: 2 requests 1e-310 s apart arrive at inf req/s)
    if saturation_per_s is not None:
        saturation_per_s = min(saturation_per_s, hi)
    start, stop = default_rate_range(current, saturation_per_s, num_points) if knob == "rate" else (current / 2, current * 2)
    start, stop = min(max(start, lo), hi), min(max(stop, lo), hi)
    return (float(int(start)), float(int(stop))) if SWEEP_KNOBS[knob][2] else (start, stop)


def saturation_per_s(cfg: SimConfig, budget: RunBudget | None = None) -> float | None:
    """The setup's saturation rate: the completion rate of an offline run of its traffic (`planner.saturation_config`,
    the planner's probe); None when too few requests finish to say."""
    from sim_core.planner import saturation_config  # (the planner builds on this module)

    return completion_rate_per_s(run_simulation(saturation_config(cfg), budget=budget))


def with_seed(cfg: SimConfig, offset: int) -> SimConfig:
    """The config with seed + offset (wrapping within the seed's range): repeat i of a seed band."""
    return config_with(cfg, {"seed": (cfg.seed + offset) % (MAX_SEED + 1)}, f"seed offset {offset!r}")


def run_sweep(
    cfg: SimConfig, knob: str, values: Sequence[float], on_progress: Callable[[int, int], None] | None = None,
    *, num_seeds: int = 1, backend: Backend | None = None, cache: PointCache | None = None,
    cancelled: Callable[[], bool] | None = None, steady_length: bool = False, budget: RunBudget | None = None,
) -> list[SweepPoint]:
    """One simulation per value and seed (seeds cfg.seed, +1, …); a value the config rejects becomes
    a point with its error. Runs on `backend` (default: this process) and reads/writes `cache`.
    `steady_length`: each point runs `steady_run_length` requests at its rate instead of the config's (another knob's
    points at the config's rate; none where arrivals follow no rate, `check_rate_applies`).
    `budget`: the server's ceiling per run (the app passes one; the CLI and API do not).
    Raises PresetError when the knob cannot apply to `cfg` (`knob_bounds`): said once, not as every point's error."""
    check_repeats(num_seeds)
    check_sweep_runs(len(values), num_seeds)
    knob_bounds(knob, cfg)
    configs: dict[int, list[SimConfig]] = {}
    errors: dict[int, str] = {}
    for i, v in enumerate(values):
        try:
            if steady_length and knob == "rate":
                base = at_rate(cfg, float(v))
            else:
                base = apply_knob(cfg, knob, v)
                if steady_length and rate_applies(base):  # (a replica sweep of 400 requests settles at no point)
                    base = at_rate(base, float(base.workload.arrival.rate_per_s))
        except PresetError as err:
            errors[i] = str(err)
            continue
        configs[i] = [with_seed(base, k) for k in range(num_seeds)]
    flat = [c for cs in configs.values() for c in cs]
    results = iter(run_points(flat, backend or LocalBackend(1), cache, on_progress, cancelled, budget))
    out = []
    for i, v in enumerate(values):
        if i in errors:
            out.append(SweepPoint(v, None, errors[i]))
            continue
        runs = [next(results) for _ in configs[i]]
        err = next((e for _, e in runs if e), None)
        seeds = tuple(s for s, _ in runs if s is not None)
        out.append(SweepPoint(v, None, err) if err else SweepPoint(v, seeds[0], None, seeds))
    return out


def band(values: Sequence[float], lo_pct: float = 0.0, hi_pct: float = 100.0) -> tuple[float, float, float]:
    """(low, median, high) of one metric across seeds: min-max by default, or a percentile interval."""
    a = np.asarray(values, dtype=float)
    a = a[~np.isnan(a)]
    if not a.size:
        return (float("nan"),) * 3
    lo, mid, hi = np.percentile(a, [lo_pct, 50, hi_pct])
    return float(lo), float(mid), float(hi)


def seed_bands(
    cfg: SimConfig, fields: Sequence[str], num_seeds: int, backend: Backend | None = None,
    cache: PointCache | None = None, budget: RunBudget | None = None, cancelled: Callable[[], bool] | None = None,
) -> dict[str, tuple[float, float, float]]:
    """(min, median, max) of each Summary field (or `steady.<field>`) over seeds cfg.seed … + num_seeds − 1
    (each run under `budget` when given: the app's; `cancelled` as in `run_sweep`: the app's page budget)."""
    # the config itself over seeds (not a sweep point at its own rate: a trace's rate point is its time-scaled copy)
    runs = run_points([with_seed(cfg, k) for k in range(num_seeds)], backend or LocalBackend(1), cache, None, cancelled,
                      budget)  # fmt: skip
    err = next((e for _, e in runs if e), None)
    if err:
        raise PresetError(err)
    seeds = tuple(s for s, _ in runs if s is not None)
    pt = SweepPoint(cfg.workload.arrival.rate_per_s, seeds[0], None, seeds)
    return {f: band(point_metric(pt, f)) for f in fields}


def shown_field(name: str, behind: bool) -> str:
    """The field a sweep point's figure `name` (a Summary field the steady window also has) is read from, on the Sweep
    page and in the `sweep` command: its steady window's (`steady.<name>`), or its whole run's where the point fell
    behind its arrivals (`fell_behind`). Such a window's goodput is its arrivals' SLO attainment times their rate, which
    a run that cannot keep up overstates while its queue is still short: the router preset's 2 and 3 replicas read 44
    and 58 req/s beside 8 replicas' 60 where 7-9 req/s finished; their whole runs, 8.4 and 13 req/s. (A window that is
    only too short to settle keeps its own figures: its whole run's are its drain's, 15.7 req/s at 8 replicas where the
    window read 59.8 and a run long enough to settle 60.3.)"""
    return name if behind else f"steady.{name}"


FELL_BEHIND_SHARE = 0.95  # `fell_behind`: a noted window that finished under this share of its arrivals


def fell_behind(p: SweepPoint, knob: str, cfg: SimConfig, obj: CapacityObjective) -> bool:
    """A point whose requests arrive faster than they finish, so that its queue grows for as long as it runs and no
    length of run settles. A rate sweep's runs are long enough for capacity's keep-up rule (`keeps_up`), which also
    names a point that fell behind without a note of its own; a run of another knob keeps the config's length, whose
    window can trail its arrivals by a few % while keeping up (the default run: 7.96 of 8.49 req/s), so only a noted
    point far behind counts, and one whose window still meets the objective has not fallen behind: its run is shorter
    than its requests (the router preset's 400 requests arrive in 7 s and take ~10 s each, so 8 replicas finished 23
    of 60 req/s in the window while every request met the SLOs; 4,000 requests: 57.6 of 59.7). A noted point far
    behind whose note finds it overloaded has fallen behind even where its window meets the objective: the router
    preset itself (4 replicas) completed 13.7 of 59.8 req/s in a window that met the SLOs while its median TTFT rose
    36 ms -> 998 ms, read 59.6 req/s of goodput beside 5 replicas' 59.2, and in a run long enough to settle completes
    52.1 of 60.3 (5 replicas: 60.4). Over seeds, a point fell behind where any seed did (its band and median are then
    every seed's whole run, not a mix)."""
    return any(run_fell_behind(s, knob, cfg, obj) for s in (p.seeds or (p.summary,)))


def run_fell_behind(s: Summary | None, knob: str, cfg: SimConfig, obj: CapacityObjective) -> bool:
    """Whether one run (a seed) of a sweep point fell behind (`fell_behind`)."""
    if s is None or s.steady is None:
        return False
    if knob == "rate":
        return not keeps_up(s)
    st = s.steady
    return bool(st.note) and st.requests_per_s < FELL_BEHIND_SHARE * st.arrival_rate_per_s and (
        says_overloaded(st.note) or window_slo_miss(st, cfg, obj) is not None)


def window_completion(st) -> str:
    """What a run's steady window completed of what was offered, the figure that judges whether it fell behind."""
    return f"completed {st.requests_per_s:,.2f} of {st.arrival_rate_per_s:,.2f} req/s offered in its steady window"


def point_metric(p: SweepPoint, field: str) -> list[float]:
    """A Summary field (or `steady.<field>`) of every seed of a point."""
    head, _, sub = field.partition(".")
    runs = p.seeds or ((p.summary,) if p.summary is not None else ())
    if sub:
        return [getattr(getattr(s, head), sub) if getattr(s, head) is not None else float("nan") for s in runs]
    return [getattr(s, field) for s in runs]


DISTSERVE_ATTAINMENT = 0.9  # DistServe's goodput rule: at least this share of requests meets both SLOs


def meets_slo(s: Summary, cfg: SimConfig, attainment: float = DISTSERVE_ATTAINMENT) -> bool:
    """DistServe-style: the run finished and at least `attainment` of requests met TTFT and TPOT."""
    return s.stopped_reason is None and s.slo_attainment >= attainment


def capacity_from_sweep(
    points: Sequence[SweepPoint], cfg: SimConfig, attainment: float = DISTSERVE_ATTAINMENT,
    objective: CapacityObjective | None = None, seed_index: int = 0,
) -> float | None:
    """Largest swept value such that it and every smaller value meet the objectives (for the run
    with seed cfg.seed + seed_index). Without `objective`: the whole-run attainment rule. Points are read in
    increasing value, whatever their order (a sweep from 5 down to 1 req/s gave 1 when both met it)."""
    best = None
    for p in sorted(points, key=lambda p: p.value):
        runs = p.seeds or ((p.summary,) if p.summary is not None else ())
        s = runs[seed_index] if seed_index < len(runs) else None
        ok = s is not None and (meets_objective(s, cfg, objective) if objective else meets_slo(s, cfg, attainment))
        if not ok:
            break
        best = p.value
    return best


def capacity_search(
    cfg: SimConfig, meets: Callable[[Summary], bool], lo: float, hi: float, iters: int = 10, max_rate_per_s: float = 1000.0
) -> tuple[float, list[tuple[float, Summary]]]:
    """Bisection on the arrival rate for the highest rate that `meets`. Returns (rate, probes);
    the rate is `max_rate_per_s` when even that meets the objective (a workload too small to saturate)."""
    probes = []

    def ok(rate: float) -> bool:
        s = run_simulation(with_rate(cfg, rate)).summary
        probes.append((rate, s))
        return meets(s)

    if not ok(lo):
        return 0.0, probes
    while ok(hi):
        if hi >= max_rate_per_s:
            return max_rate_per_s, probes
        lo, hi = hi, min(hi * 2, max_rate_per_s)
    for _ in range(iters):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if ok(mid) else (lo, mid)
    return lo, probes


# ---------------------------------------------------------------- steady-state capacity
class CapacityObjective(BaseModel):
    """What "meets the SLOs" means for capacity; the targets themselves are `SimConfig.slo`."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)  # (NaN was "should be less than or equal to 1")
    rule: Literal["percentile", "attainment"] = Field(
        "percentile",
        description="percentile: the named percentile of TTFT and of TPOT within their targets (serving benchmarks); "
        "attainment: at least `attainment` of requests meet both (DistServe).",
    )
    percentile: Literal[50, 90, 99] = Field(99, description="Percentile of TTFT and TPOT held to the targets (rule percentile).")
    attainment: float = Field(DISTSERVE_ATTAINMENT, gt=0, le=1, description="Share of requests that must meet both targets (rule attainment).")

    def describe(self, cfg: SimConfig) -> str:
        ttft, tpot = f"TTFT ≤ {cfg.slo.ttft_s:g} s", f"TPOT ≤ {cfg.slo.tpot_s * 1e3:g} ms"
        if self.rule == "percentile":
            return f"P{self.percentile} {ttft} and P{self.percentile} {tpot} over the steady-state window"
        return f"≥ {self.attainment:.0%} of steady-window requests meet {ttft} and {tpot}"


# A stable server completes what arrives: in the window, finished requests/s within 3 % of the arrival
# rate (KEEP_UP_FRACTION; the slack absorbs the backlog's random walk). Below it the backlog grows without bound and
# any percentile target is eventually missed, however good it looks in a finite run.


def keeps_up(s: Summary) -> bool:
    st = s.steady
    return st is not None and st.requests_per_s >= KEEP_UP_FRACTION * st.arrival_rate_per_s


def objective_miss(s: Summary, cfg: SimConfig, obj: CapacityObjective) -> str | None:
    """Why a run does not meet the capacity objective, in words, or None when it does: the run finished, every
    steady-window request finished, the server kept up with the arrivals, and the objective holds in the window.
    (A sweep's table says it per row: a row whose goodput and TTFT looked fine read as a contradiction of the
    capacity under it when it had fallen behind.)"""
    st = s.steady
    if s.stopped_reason is not None:
        return "the run stopped early"
    if st is None:
        return "no steady-state window"
    if st.num_unfinished:
        return f"{st.num_unfinished:,} window requests unfinished"
    if not keeps_up(s):
        # (in its window: a row of whole-run figures beside it read as their rate, which the page says over the run)
        return f"falls behind: {window_completion(st)}"
    return window_slo_miss(st, cfg, obj)


def window_slo_miss(st: SteadyState, cfg: SimConfig, obj: CapacityObjective) -> str | None:
    """Why the steady window's requests miss the objective's SLO test (its attainment or percentiles), or None: the
    test alone, without `objective_miss`'s checks of the run (a short run's window can trail its arrivals while every
    request in it meets the SLOs: not a server that fell behind)."""
    if obj.rule == "attainment":
        return None if st.slo_attainment >= obj.attainment else f"{percent(st.slo_attainment)} meet both SLOs"
    p = obj.percentile
    ttft, tpot = getattr(st, f"ttft_p{p}_s"), getattr(st, f"tpot_p{p}_s")
    if not ttft <= cfg.slo.ttft_s:
        return f"TTFT p{p} {ttft * 1e3:,.0f} ms > {cfg.slo.ttft_s * 1e3:,.0f} ms"
    if tpot > cfg.slo.tpot_s:  # (NaN TPOT: all single-token outputs, which meet it)
        return f"TPOT p{p} {tpot * 1e3:,.1f} ms > {cfg.slo.tpot_s * 1e3:,.1f} ms"
    return None


def meets_objective(s: Summary, cfg: SimConfig, obj: CapacityObjective) -> bool:
    """The run meets the capacity objective (`objective_miss` says why not)."""
    return objective_miss(s, cfg, obj) is None


WARMUP_FILL_MULTIPLE = 2.0
MIN_CAPACITY_REQUESTS = 500
MAX_CAPACITY_REQUESTS = MAX_NUM_REQUESTS  # the most a run may have (config.py's bound; it restated 200_000 here)


def steady_warmup_s(cfg: SimConfig) -> float:
    """The warm-up a steady-state run needs: twice a mean request's end-to-end time at the SLO bounds."""
    mean_out = cfg.workload.output_tokens.mean
    return WARMUP_FILL_MULTIPLE * (cfg.slo.ttft_s + max(mean_out - 1, 0) * cfg.slo.tpot_s)


def steady_run_length(cfg: SimConfig, rate_per_s: float, scale: float = 1.0) -> int:
    """Requests for a run at `rate_per_s` long enough that its answer no longer moves with length.

    The warm-up (first 10 % of arrivals) must last twice the end-to-end time of a mean request at
    the SLO bounds, TTFT + (mean output − 1) × TPOT — more than a run meeting the SLOs needs to fill
    up — so a run lasts 2 × that time / 0.1. Measured on the default scenario (P99 objective):
    capacity 21.8 / 21.1 / 20.6 / 20.6 req/s at 0.5× / 1× / 2× / 4× this length, so 1× is within
    ±5 % of 4× (tests/sim_core/test_sweep.py). `scale` multiplies it. Traces keep their length.
    """
    if cfg.workload.trace is not None:
        return cfg.workload.num_requests
    # (clipped before int(): --scale 1e308 made the count inf, and `capacity` ended in an OverflowError traceback)
    n = int(np.clip(np.ceil(scale * rate_per_s * steady_warmup_s(cfg) / STEADY_WARMUP_FRACTION), MIN_CAPACITY_REQUESTS,
                    MAX_CAPACITY_REQUESTS))  # fmt: skip
    # Below about 6e-5 req/s (one request per 4.6 h) 500 arrivals outlast the longest run a config allows
    # (limits.max_sim_time_s): every probe stopped unfinished, and `capacity` of a config at 1e-5 req/s said 0 req/s.
    # At such rates each request is served alone: the most requests whose probe fits (`probe_time_s` <= the longest run;
    # n/r + k sqrt(n)/r <= B is a quadratic in sqrt(n)).
    room, k = max(rate_per_s * (longest_run_s() - 2 * _slowest_request_s(cfg)), 0.0), ARRIVAL_SPAN_SDS * _gap_cv(cfg)
    fit = ((k * k + 4 * room) ** 0.5 - k) / 2
    return max(2, min(n, int(fit * fit)))  # (a steady window needs two requests)


ARRIVAL_SPAN_SDS = 5.0  # a probe's time limit allows its arrivals this many standard deviations past their mean span


def _slowest_request_s(cfg: SimConfig) -> float:
    """The longest request at the SLO bounds: TTFT + the longest output x TPOT."""
    return cfg.slo.ttft_s + cfg.workload.max_output_tokens * cfg.slo.tpot_s


def _gap_cv(cfg: SimConfig) -> float:
    """The coefficient of variation of the gaps between arrivals (workload.sample_arrivals): 1 for Poisson."""
    arr = cfg.workload.arrival
    return arr.burstiness_cv if arr.process == "gamma" else 1.0


def probe_time_s(cfg: SimConfig, n: int, rate_per_s: float) -> float:
    """Simulated time a steady-state probe of `n` arrivals at `rate_per_s` is given: their mean span n / rate and
    ARRIVAL_SPAN_SDS standard deviations (cv sqrt(n) / rate) more, then twice the slowest request to drain. (It was
    n / rate + the drain: at low rates the 500 arrivals ran past it about half the time, 1e-3 req/s stopped seeds 2, 4
    and 7 of 0-9 with requests unfinished; a run that needs longer has a backlog and fails the objective anyway.)"""
    return n / rate_per_s * (1 + ARRIVAL_SPAN_SDS * _gap_cv(cfg) / math.sqrt(n)) + 2 * _slowest_request_s(cfg)


def longest_run_s() -> float:
    """The most simulated time a config may allow (limits.max_sim_time_s's bound, the model's)."""
    return float(next(m.le for m in field_info(("limits", "max_sim_time_s")).metadata if getattr(m, "le", None) is not None))


def at_rate(cfg: SimConfig, rate_per_s: float, scale: float = 1.0) -> SimConfig:
    """The config at this offered rate with a steady-state run length."""
    if not (math.isfinite(rate_per_s) and rate_per_s > 0):  # (0 divided the run's time limit by zero: a traceback)
        raise PresetError(f"capacity probe: workload.arrival.rate_per_s = {rate_per_s:g}: must be a finite number > 0")
    data = (with_rate(cfg, rate_per_s) if cfg.workload.trace is not None else cfg).model_dump(mode="python")
    data["workload"]["arrival"]["rate_per_s"] = rate_per_s
    n = steady_run_length(cfg, rate_per_s, scale)
    data["workload"]["num_requests"] = n
    if cfg.workload.trace is None:
        # Room for the arrivals plus twice the slowest request at the SLO bounds to drain: a run that
        # needs longer has a backlog (it fails the objective anyway), and overloaded probes stay cheap.
        data["limits"]["max_sim_time_s"] = min(probe_time_s(cfg, n, rate_per_s), longest_run_s())
    data["limits"]["num_recorded_batches"] = 0  # the step-through view is not needed for a number
    return config_from_dict(data, f"capacity probe at {rate_per_s:g} req/s")


@dataclass(frozen=True)
class Capacity:
    """Capacity under an objective: `rate_per_s` met it; `fail_rate_per_s` (None: never failed up to
    the search's ceiling) did not. probes: (rate, summary) in the order they ran."""

    rate_per_s: float
    fail_rate_per_s: float | None
    probes: tuple[tuple[float, Summary], ...]
    note: str | None  # the steady-state note of the probe at `rate_per_s`, if any


CAPACITY_REL_TOL = 0.01  # a capacity search bisects until its bracket's ends are within 1 % of each other


def find_capacity(
    cfg: SimConfig, obj: CapacityObjective = CapacityObjective(), *, scale: float = 1.0, rel_tol: float = CAPACITY_REL_TOL,
    max_rate_per_s: float = 5000.0, run: Callable[[SimConfig], Summary] | None = None,
    ceiling_per_s: float | None = None,
) -> Capacity:
    """Highest offered rate meeting `obj` in steady state: grow/shrink ×2 from the config's rate to a
    bracket, then bisect (geometrically) until the bracket is within `rel_tol`. With `ceiling_per_s`
    (a rate known to be unsustainable, e.g. above saturation) the bracket is [config's rate, ceiling]
    when the config's rate meets the objective: no overloaded doubling probes. `run` maps a config to
    its summary (default: simulate here; a backend passes a cached or remote runner)."""
    check_repeats(scale=scale)
    run = run or (lambda c: run_simulation(c).summary)
    probes: list[tuple[float, Summary]] = []

    def ok(rate: float) -> bool:
        s = run(at_rate(cfg, rate, scale))
        probes.append((rate, s))
        return meets_objective(s, cfg, obj)

    rate = cfg.workload.arrival.rate_per_s
    first_ok = ok(rate)
    if first_ok and ceiling_per_s is not None and ceiling_per_s > rate:
        lo, hi = rate, ceiling_per_s
    elif first_ok:
        lo, hi = rate, None
        while hi is None and lo < max_rate_per_s:
            nxt = min(lo * 2, max_rate_per_s)
            lo, hi = (nxt, None) if ok(nxt) else (lo, nxt)
        if hi is None:
            return Capacity(lo, None, tuple(probes), _note_at(probes, lo))
    else:
        lo, hi = None, rate
        while lo is None and hi > 1e-3:
            nxt = hi / 2
            lo, hi = (nxt, hi) if ok(nxt) else (None, nxt)
        if lo is None:
            return Capacity(0.0, hi, tuple(probes), "even the lowest probed rate misses the objective")
    while hi / lo > 1 + rel_tol:
        mid = (lo * hi) ** 0.5
        lo, hi = (mid, hi) if ok(mid) else (lo, mid)
    return Capacity(lo, hi, tuple(probes), _note_at(probes, lo))


def _note_at(probes: list[tuple[float, Summary]], rate: float) -> str | None:
    s = next(s for r, s in probes if r == rate)
    return s.steady.note if s.steady is not None else "no steady-state window"


# ---------------------------------------------------------------- capacity across seeds, on a backend
@dataclass(frozen=True)
class _CapacityTask:
    """Picklable: find_capacity for one config JSON, probes through the shared on-disk cache."""

    objective_json: str
    scale: float
    rel_tol: float
    cache_dir: str | None
    cache_bytes: int
    fingerprint: str
    budget: RunBudget | None = None  # each probe's (the app's server budget)
    stops_scope: str = ""  # PointCache.stops_scope

    def __call__(self, item: str) -> str:
        from sim_core.backend import _CachedTask, decode_point, point_runner

        cfg_json, ceiling = json.loads(item)
        task = _CachedTask(self.cache_dir, self.cache_bytes, self.fingerprint, *point_runner(self.budget), self.stops_scope)

        def run(c: SimConfig) -> Summary:
            summary, err = decode_point(task(c.model_dump_json()))
            if summary is None:
                raise PresetError(err or "simulation failed")
            return summary

        cap = find_capacity(SimConfig.model_validate_json(cfg_json), CapacityObjective.model_validate_json(self.objective_json),
                            scale=self.scale, rel_tol=self.rel_tol, run=run, ceiling_per_s=ceiling)  # fmt: skip
        return json.dumps({"rate_per_s": cap.rate_per_s, "fail_rate_per_s": cap.fail_rate_per_s, "note": cap.note,
                           "probes": [[r, json.loads(s.model_dump_json())] for r, s in cap.probes]})  # fmt: skip


def _decode_capacity(payload: str) -> Capacity:
    d = json.loads(payload)
    probes = tuple((float(r), Summary.model_validate(s)) for r, s in d["probes"])
    return Capacity(d["rate_per_s"], d["fail_rate_per_s"], probes, d["note"])


def find_capacities(
    configs: Sequence[SimConfig], obj: CapacityObjective = CapacityObjective(), *, scale: float = 1.0,
    rel_tol: float = CAPACITY_REL_TOL, backend: Backend | None = None, cache: PointCache | None = None,
    on_progress: Callable[[int, int], None] | None = None, cancelled: Callable[[], bool] | None = None,
    ceilings_per_s: Sequence[float | None] | None = None, budget: RunBudget | None = None,
) -> list[Capacity]:
    """find_capacity for each config, one task each on `backend` (bisections run in parallel); every probe
    under `budget` when given (the app's)."""
    for c in configs:  # (before any probe: one message, not one per worker)
        check_rate_applies(c)
    task = _CapacityTask(obj.model_dump_json(), scale, rel_tol, str(cache.directory) if cache else None,
                         cache.max_bytes if cache else 0, cache.fingerprint if cache else "", budget,
                         cache.stops_scope if cache else "")  # fmt: skip
    ceilings = list(ceilings_per_s) if ceilings_per_s is not None else [None] * len(configs)
    items = [json.dumps([c.model_dump_json(), ceil]) for c, ceil in zip(configs, ceilings)]
    payloads = (backend or LocalBackend(1)).map(task, items, on_progress, cancelled)
    return [_decode_capacity(p) for p in payloads]


def capacity_interval(
    cfg: SimConfig, obj: CapacityObjective = CapacityObjective(), num_seeds: int = 3, **kwargs: Any
) -> tuple[float, float, list[Capacity]]:
    """(lowest, highest) capacity over seeds cfg.seed … cfg.seed + num_seeds − 1, and each seed's result.
    The seeds' bisections run in parallel (default backend: a local process pool)."""
    check_repeats(num_seeds, kwargs.get("scale"))
    if kwargs.get("backend") is None:
        with LocalBackend() as own:
            return capacity_interval(cfg, obj, num_seeds, **(kwargs | {"backend": own}))
    caps = find_capacities([with_seed(cfg, k) for k in range(num_seeds)], obj, **kwargs)
    rates = [c.rate_per_s for c in caps]
    return min(rates), max(rates), caps
