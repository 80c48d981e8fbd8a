"""How the DistServe chatbot baseline's goodput depends on its prefill speed (docs/cluster.md, Beyond one engine).
Usage: PYTHONPATH=$PWD python scripts/distserve_sensitivity.py
Scales the gemm efficiency of the co-located preset's calibration (vllm-2023-distserve) and bisects the
highest rate at which >= 90 % of requests meet TTFT 0.25 s and TPOT 0.1 s (as the trend does)."""
import argparse
from sim_core.cluster.trends import _meets
from sim_core.presets import load_preset
from sim_core.sweep import capacity_search, with_value

argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()  # --help prints the docstring, not a run

base = load_preset("cluster-distserve-opt13b-3xa100-colocated")
for speedup in (1.0, 1.1, 1.15, 1.2, 1.3, 1.4):
    cfg = with_value(base, "calibration.gemm_efficiency", base.calibration.gemm_efficiency * speedup)
    rate, probes = capacity_search(cfg, _meets, 0.15, 8.0, iters=6)
    low = min(probes, key=lambda p: p[0])
    print(f"GEMM efficiency x{speedup:.2f}: attainment {low[1].slo_attainment:.3f} at {low[0]:g} req/s; "
          f"goodput {rate / 3:.2f} req/s per GPU")
