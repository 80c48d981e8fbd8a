"""DistServe's own measured serving runs (OPT-13B on A100-80GB, ShareGPT), replayed request by request.

The runs behind DistServe's chatbot claim: its artifact measured the 2023 vLLM on one A100 (8 runs, 1-4 req/s)
and DistServe with a TP2 prefill and a TP1 decode instance (13 runs, 3-12 req/s), and kept every request's
prompt and output length, issue time, TTFT and TPOT (presets/calibration/data/distserve_measured_runs.csv,
copied by scripts/distserve_measured_runs.py, sources there). Each run replays here as a trace (the same
requests at the same instants) through the DistServe scenario presets, so the model's TTFT, TPOT and SLO
attainment can be set against what was measured, request by request.

The calibration profiles `vllm-2023-distserve` and `distserve-2023` are fitted on these runs
(scripts/fit_distserve_profiles.py): on the runs at every other measured rate of each system (`fit_runs`), the
runs at the other rates held out (`python -m sim_core validate` prints both).
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from functools import cache

import numpy as np

from sim_core.config import SimConfig, Trace
from sim_core.metrics import meets_slo
from sim_core.presets import PRESETS_DIR, load_preset
from sim_core.sweep import with_value
from sim_core.traces import with_trace

DATA = PRESETS_DIR / "calibration" / "data" / "distserve_measured_runs.csv"
# system -> the scenario preset that models it (the co-located preset's engine alone: one vLLM on one A100)
SYSTEM_PRESETS = {"vllm": "cluster-distserve-opt13b-3xa100-colocated", "distserve-c21d11": "cluster-distserve-opt13b-3xa100-p2d1"}
SYSTEM_PROFILES = {"vllm": "vllm-2023-distserve", "distserve-c21d11": "distserve-2023"}


@dataclass(frozen=True)
class MeasuredRun:
    name: str  # the artifact's: <system>-<requests>-<rate>
    system: str
    rate_per_s: float
    arrival_s: tuple[float, ...]
    prompt_tokens: tuple[int, ...]
    output_tokens: tuple[int, ...]
    ttft_ms: np.ndarray
    tpot_ms: np.ndarray


@dataclass(frozen=True)
class RunComparison:
    run: MeasuredRun
    fitted: bool  # one of the runs its profile was fitted on
    ttft_ms: np.ndarray  # simulated, per request in the run's order
    tpot_ms: np.ndarray
    cfg: SimConfig  # the replay (its SLO judges both sides)

    def attainment(self, simulated: bool) -> float:
        """Fraction of requests meeting both objectives (DistServe's SLO attainment, `metrics.meets_slo`: a request
        of one output token has no TPOT, NaN in the model and 0 in the artifact, and is judged by its TTFT)."""
        ttft, tpot = (self.ttft_ms, self.tpot_ms) if simulated else (self.run.ttft_ms, self.run.tpot_ms)
        return float(np.mean(meets_slo(self.cfg, ttft / 1e3, tpot / 1e3)))

    def log_errors(self) -> np.ndarray:
        """Per-request log(simulated / measured) of TTFT, then of TPOT for requests of two or more output tokens."""
        has_tpot = np.asarray(self.run.output_tokens) >= 2
        return np.concatenate([np.log(self.ttft_ms / self.run.ttft_ms), np.log(self.tpot_ms[has_tpot] / self.run.tpot_ms[has_tpot])])


@cache
def measured_runs() -> tuple[MeasuredRun, ...]:
    """Every run, ordered by system, then rate, then request count."""
    cols: dict[str, dict[str, list]] = {}
    with DATA.open(newline="") as f:
        for row in csv.DictReader(f):
            run = cols.setdefault(row["run"], {"system": row["system"], "rate": float(row["rate_per_s"]), "rows": []})
            run["rows"].append((float(row["arrival_s"]), int(row["prompt_tokens"]), int(row["output_tokens"]),
                                float(row["ttft_ms"]), float(row["tpot_ms"])))  # fmt: skip
    runs = []
    for name, run in cols.items():
        a, p, o, ttft, tpot = zip(*run["rows"])
        ttft_ms, tpot_ms = np.array(ttft), np.array(tpot)
        ttft_ms.flags.writeable = tpot_ms.flags.writeable = False  # (cached and shared: nobody may write into them)
        runs.append(MeasuredRun(name, run["system"], run["rate"], a, p, o, ttft_ms, tpot_ms))
    return tuple(sorted(runs, key=lambda r: (r.system, r.rate_per_s, len(r.arrival_s))))


def fit_runs(system: str) -> tuple[str, ...]:
    """The runs a system's profile is fitted on: those at every other of its measured rates (the lowest, the third
    lowest, ...), so that fitted and held-out runs both span light load to overload and no held-out run shares its
    rate with a fitted one. (Every run replays a prefix of one request list with one draw of arrival gaps scaled to
    its rate, so two runs at one rate are the same requests at nearly the same instants: held out by run, a 300-request
    run would repeat the first 300 requests of a fitted longer one.)"""
    runs = [r for r in measured_runs() if r.system == system]
    fitted_rates = sorted({r.rate_per_s for r in runs})[::2]
    return tuple(r.name for r in runs if r.rate_per_s in fitted_rates)


def replay_config(run: MeasuredRun, base: SimConfig | None = None) -> SimConfig:
    """`base` (default: the system's scenario preset; vLLM as one engine, not the preset's 3 replicas) replaying the
    run's requests at their measured issue times."""
    if base is None:
        base = load_preset(SYSTEM_PRESETS[run.system])
        if run.system == "vllm":
            base = with_value(base, "deployment", None)
    trace = Trace(arrival_s=list(run.arrival_s), prompt_tokens=list(run.prompt_tokens), output_tokens=list(run.output_tokens))
    return with_trace(base, trace, run.name)


def compare(run: MeasuredRun, cfg: SimConfig | None = None) -> RunComparison:
    """Simulate the run (`replay_config` unless a config is given) and set it against the measurement."""
    from sim_core.engine import run_simulation  # (sim_core.engine imports the cluster package)

    cfg = cfg if cfg is not None else replay_config(run)
    res = run_simulation(cfg)
    req = res.requests
    return RunComparison(run, run.name in fit_runs(run.system), np.asarray(req.ttft_s) * 1e3, np.asarray(req.tpot_s) * 1e3, cfg)


def error_summary(comps: list[RunComparison]) -> tuple[float, float]:
    """(median per-request |log error| of TTFT and TPOT over the runs, mean |simulated - measured| SLO attainment):
    what the profiles' descriptions, the validate table and docs/cluster.md quote for fitted and held-out runs."""
    err = float(np.median(np.abs(np.concatenate([c.log_errors() for c in comps]))))
    return err, float(np.mean([abs(c.attainment(True) - c.attainment(False)) for c in comps]))


def compare_all() -> list[RunComparison]:
    return [compare(r) for r in measured_runs()]


def format_table(comps: list[RunComparison]) -> list[str]:
    """The runs measured vs simulated (`python -m sim_core validate` prints it): SLO attainment, TTFT and TPOT
    percentiles, and the median per-request |log error|; then per system, fitted and held-out runs apart."""
    lines = [f"{'run':28s} {'':8s} {'attainment':>13s} {'TTFT p50 ms':>13s} {'TTFT p90 ms':>15s} {'TPOT p50 ms':>13s} "
             f"{'TPOT p90 ms':>13s} {'|log err|':>9s}", f"{'':28s} {'':8s} {'meas   sim':>13s} {'meas   sim':>13s} "
             f"{'meas     sim':>15s} {'meas   sim':>13s} {'meas   sim':>13s} {'median':>9s}"]  # fmt: skip
    for c in comps:
        r, q = c.run, np.percentile
        two = np.asarray(r.output_tokens) >= 2  # (TPOT: requests of two or more output tokens, as `log_errors`)
        lines.append(f"{r.name:28s} {'(fit)' if c.fitted else 'held out':8s} {c.attainment(False):6.2f} {c.attainment(True):6.2f} "
                     f"{q(r.ttft_ms, 50):6.0f} {q(c.ttft_ms, 50):6.0f} {q(r.ttft_ms, 90):7.0f} {q(c.ttft_ms, 90):7.0f} "
                     f"{q(r.tpot_ms[two], 50):6.1f} {q(c.tpot_ms[two], 50):6.1f} {q(r.tpot_ms[two], 90):6.1f} {q(c.tpot_ms[two], 90):6.1f} "
                     f"{np.median(np.abs(c.log_errors())):9.3f}")  # fmt: skip
    for system, profile in SYSTEM_PROFILES.items():
        for fitted in (True, False):
            sel = [c for c in comps if c.run.system == system and c.fitted == fitted]
            err, att = error_summary(sel)
            lines.append(f"{system} ({profile}), {'fitted' if fitted else 'held-out'} runs: {len(sel)}; per-request |log error| "
                         f"median {err:.3f}; SLO attainment off by {att:.3f} on average")  # fmt: skip
    return lines
