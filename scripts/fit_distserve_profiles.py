"""Offline (needs scipy; not run by the project): fit the calibration profiles `vllm-2023-distserve` and
`distserve-2023` on DistServe's own measured serving runs of OPT-13B on A100-80GB
(presets/calibration/data/distserve_measured_runs.csv; sim_core/cluster/measured_runs.py replays them).

    PYTHONPATH=$PWD python scripts/fit_distserve_profiles.py   (rewrites the two profile files)
    PYTHONPATH=$PWD python scripts/fit_distserve_profiles.py --system vllm --pin gemm_efficiency=0.74 --dry-run

`--pin NAME=VALUE` holds a constant at a value instead of fitting it (an experiment: with `--dry-run` nothing is
written, the fitted constants and the fitted and held-out errors are printed).

Each profile is fitted on the runs at every other measured rate of its system (`measured_runs.fit_runs`), the
runs at the other rates held out: the runs are replayed request by request through the DistServe scenario presets and the residuals are
log(simulated / measured) of each request's TTFT and TPOT, under a robust loss (soft L1, scale 0.25: a queue that
builds in an overloaded run gives errors of several e-folds that would otherwise swamp the rest). Two starts (the
default profile's constants and vLLM V0's), the better fit kept; constants not fitted stay the default profile's. Until session 31 these profiles
were fitted on DistServe's published step-time profiles (distserve_step_profiles.json), which prefill ~15 % slower
than the measured vLLM runs and which the cost model followed only to +13 % at 1,500 tokens (docs/cluster.md: Beyond one
engine; `sim_core/cluster/step_profiles.py` still compares them).
"""

import argparse
import json

import numpy as np
from scipy.optimize import least_squares

from sim_core.cluster.measured_runs import (
    SYSTEM_PROFILES,
    compare,
    error_summary,
    fit_runs,
    measured_runs,
    replay_config,
)
from sim_core.config import CalibrationConfig
from sim_core.presets import PRESETS_DIR, read_preset_data
from sim_core.sweep import with_value

NAMES = ("gemm_efficiency", "attention_efficiency", "memory_efficiency", "layer_fixed_us", "tick_overhead_ms", "per_seq_overhead_us",
         "allreduce_latency_us")  # fmt: skip
LO, HI = (0.05, 0.01, 0.05, 0, 0, 0, 0), (1, 1, 1, 500, 50, 2000, 500)
# Two starts, neither of them this script's output (a rerun fits the same): the default profile and vLLM V0's
STARTS = (CalibrationConfig().model_dump(), read_preset_data("calibration", "vllm-v0"))
WHAT = {"vllm": "the vLLM DistServe compared against (2023, before CUDA graphs and chunked prefill), one A100 per instance",
        "distserve-c21d11": "DistServe's engine (early 2024), here a TP2 prefill and a TP1 decode instance"}


def with_profile(cfg, x, names=NAMES):
    for k, v in zip(names, x):  # (x may be shorter: vLLM's TP1 runs have no all-reduce to fit)
        cfg = with_value(cfg, f"calibration.{k}", float(v))
    return cfg


def stats(comps) -> str:
    err = error_summary(comps)[0]
    att = [f"{c.run.name.rsplit('-', 2)[-1]} req/s: {c.attainment(False):.2f} vs {c.attainment(True):.2f}" for c in comps]
    return f"median |log error| {err:.3f} (TTFT and TPOT per request); attainment measured vs simulated: {'; '.join(att)}"


def pinned(text: str) -> tuple[str, float]:
    name, _, value = text.partition("=")
    if name not in NAMES:
        raise argparse.ArgumentTypeError(f"{name!r} is not a fitted constant; one of {', '.join(NAMES)}")
    return name, float(value)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--system", choices=sorted(SYSTEM_PROFILES), nargs="+", default=sorted(SYSTEM_PROFILES))
    ap.add_argument("--pin", type=pinned, action="append", default=[], metavar="NAME=VALUE")
    ap.add_argument("--dry-run", action="store_true", help="print the fit, write no profile")
    args = ap.parse_args()
    pins = dict(args.pin)
    for system in args.system:
        fit_system(system, SYSTEM_PROFILES[system], pins, args.dry_run)


def fit_system(system: str, profile: str, pins: dict[str, float], dry_run: bool) -> None:
    runs = [r for r in measured_runs() if r.system == system]
    fit = [r for r in runs if r.name in fit_runs(system)]
    held = [r for r in runs if r.name not in fit_runs(system)]
    # every constant the fit does not set at the default profile's value, whatever the profile file holds now; the
    # pinned ones at their pins
    default = CalibrationConfig().model_dump() | pins
    bases = {r.name: with_value(replay_config(r), "calibration", default) for r in runs}
    names = [k for k in (NAMES if system != "vllm" else NAMES[:-1]) if k not in pins]  # (vLLM's TP1: no all-reduce)
    lo, hi = (np.array([b[NAMES.index(k)] for k in names]) for b in (LO, HI))

    def resid(x):
        return np.concatenate([compare(r, with_profile(bases[r.name], x, names)).log_errors() for r in fit])

    best = None
    for start in ([cal[k] for k in names] for cal in STARTS):
        sol = least_squares(resid, np.clip(start, lo, hi), bounds=(lo, hi), loss="soft_l1", f_scale=0.25, diff_step=0.05)
        if best is None or sol.cost < best.cost:
            best = sol
    x = np.round(best.x, 3)  # stored rounded; the errors below are of the stored values
    fitted = [compare(r, with_profile(bases[r.name], x, names)) for r in fit]
    held_out = [compare(r, with_profile(bases[r.name], x, names)) for r in held]
    pinned_text = "".join(f" {k} held at {v:g} (not fitted)." for k, v in pins.items())
    out = {"description": (
        f"{WHAT[system]}: OPT-13B on A100-80GB, fitted by scripts/fit_distserve_profiles.py on DistServe's measured "
        f"serving runs (presets/calibration/data/distserve_measured_runs.csv: every request's TTFT and TPOT, replayed "
        f"through the DistServe presets) {', '.join(r.name for r in fit)}: {stats(fitted)}. Held out "
        f"{', '.join(r.name for r in held)}: {stats(held_out)}.{pinned_text} Other constants as the default profile. "
        f"Used by the DistServe cluster presets only."), "profile": profile} | pins | {k: float(v) for k, v in zip(names, x)}
    if not dry_run:
        (PRESETS_DIR / "calibration" / f"{profile}.json").write_text(json.dumps(out, indent=2) + "\n")
    print(profile, json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
