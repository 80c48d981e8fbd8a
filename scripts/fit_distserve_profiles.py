"""Offline (needs scipy; not run by the project): fit the calibration profiles `distserve-2023` and
`vllm-2023-distserve` on DistServe's published step-time profiles of OPT-13B on A100-80GB
(presets/calibration/data/distserve_step_profiles.json), TP1 and TP2; TP4 is held out.
Usage: PYTHONPATH=$PWD python scripts/fit_distserve_profiles.py   (rewrites the two profile files)"""
import json

import numpy as np
from scipy.optimize import least_squares

from sim_core.cluster.step_profiles import FIT_TP, HELD_OUT_TP, errors, published_ms, simulated_ms
from sim_core.presets import PRESETS_DIR, load_preset
from sim_core.sweep import with_value

NAMES = ("gemm_efficiency", "attention_efficiency", "memory_efficiency", "layer_fixed_us", "tick_overhead_ms",
         "per_seq_overhead_us", "allreduce_latency_us")
LO, HI = (0.05, 0.01, 0.05, 0, 0, 0, 0), (1, 1, 1, 500, 50, 500, 500)
START = (0.72, 0.17, 0.92, 21.0, 4.5, 15.0, 15.0)  # the vllm-v0 profile
BASE = with_value(load_preset("cluster-distserve-opt13b-3xa100-colocated"), "deployment", None)
WHAT = {"distserve": ("distserve-2023", "DistServe's engine (early 2024)"),
        "vllm": ("vllm-2023-distserve", "the vLLM DistServe compared against (2023, before CUDA graphs and chunked prefill)")}


def config(x):
    cfg = BASE
    for k, v in zip(NAMES, x):
        cfg = with_value(cfg, f"calibration.{k}", float(v))
    return cfg


for engine, (name, what) in WHAT.items():
    def resid(x):
        return np.concatenate([np.log(simulated_ms(config(x), tp, pts) / np.array([v for _, _, v in pts]))
                               for tp in FIT_TP for pts in [published_ms(engine, tp)]])
    x = np.round(least_squares(resid, START, bounds=(LO, HI)).x, 3)  # stored rounded; errors below are of the stored values
    cfg = config(x)
    fit, held = errors(cfg, engine, FIT_TP), errors(cfg, engine, HELD_OUT_TP)
    stats = lambda e: f"median {np.median(e) * 100:.1f} %, p90 {np.percentile(e, 90) * 100:.1f} %"  # noqa: E731
    profile = {"description": (
        f"{what}: OPT-13B step times on A100-80GB as DistServe profiled them (presets/calibration/data/"
        f"distserve_step_profiles.json). Fitted by scripts/fit_distserve_profiles.py on TP1 and TP2 "
        f"(prefill of 64-2,000 tokens, decode batches 1-200 at context 300-1,600): {stats(fit)}; held out TP4: "
        f"{stats(held)}. Other constants as the default profile. Used by the DistServe cluster presets only."),
        "profile": name} | {k: round(float(v), 3) for k, v in zip(NAMES, x)}
    (PRESETS_DIR / "calibration" / f"{name}.json").write_text(json.dumps(profile, indent=2) + "\n")
    print(name, profile)
