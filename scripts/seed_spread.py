"""How much the simulated families' errors depend on the seed: each published row replayed by `sglang.bench_serving`
or vLLM's `benchmark_serving` (sections S, V, W of presets/calibration/data/published_measurements.csv), at seeds
0-4. A benchmark's measured value is one run on its own fixed sample, so the spread over seeds is how far one
synthetic draw of ShareGPT-like lengths and Poisson arrivals can sit from another (a review found seed 0 draws longer
requests than seeds 1-5 on vLLM V1's rows: mean E2E ~10 % higher; until session 75 the profiles were fitted and graded
on seed 0's draw alone).

    PYTHONPATH=$PWD python scripts/seed_spread.py [--seeds 0 1 2 3 4]   # ~2 s a seed on 2 cores

Prints, per row, its signed error at each seed (+: the model slower / higher than measured), then for the held-out
serving rows the median and p90 absolute error at each seed and over the mean prediction of all seeds. Since session
75 `python -m sim_core validate` fits and grades these rows on the mean over `validate.BENCH_SEEDS` (seeds 0-4), which
is the last line at the default seeds; this script shows how far each draw sits from it.
"""

from __future__ import annotations

import argparse

import numpy as np

from sim_core.validate import (BENCH_ENGINES, BENCH_SEEDS, ROW_KINDS, SIMULATED_FAMILIES, _bench_serving, build_rows,
                               load_rows, profile_calibration, row_kind)  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=list(BENCH_SEEDS))
    args = ap.parse_args()
    # (validate's own rows and rules: which are fitted, and which are serving latencies under arrivals, `row_kind`)
    raw = {r["id"]: r for r in load_rows()}
    rows = [row for row in build_rows(load_rows()) if row.group in SIMULATED_FAMILIES and raw[row.id]["section"] in BENCH_ENGINES]
    print(f"{'id':6s} {'profile':9s} {'split':8s} {'measured':>9s} " + " ".join(f"{'seed ' + str(s):>8s}" for s in args.seeds))
    held: dict[str, list[float]] = {}  # held-out serving row -> its prediction at each seed
    for row in rows:
        cal = profile_calibration(row.group)
        preds = [_bench_serving(raw[row.id], cal, seed) for seed in args.seeds]
        errs = " ".join(f"{100 * (p / row.measured - 1):+7.1f}%" for p in preds)
        print(f"{row.id:6s} {row.group:9s} {'held out' if row.held_out else 'fit':8s} {row.measured:9.4g} {errs}", flush=True)
        if row.held_out and row_kind({"profile": row.group, "unit": row.unit}) == ROW_KINDS[2]:
            held[row.id] = [p / row.measured for p in preds]
    ratios = np.array(list(held.values()))  # (rows, seeds)
    print(f"\nHeld-out serving rows under arrivals: {len(held)} ({', '.join(held)})")
    for i, seed in enumerate(args.seeds):
        e = np.abs(ratios[:, i] - 1) * 100
        print(f"  seed {seed}: median {np.median(e):.1f} %, p90 {np.percentile(e, 90):.1f} %")
    e = np.abs(ratios.mean(axis=1) - 1) * 100
    print(f"  mean of the seeds' predictions: median {np.median(e):.1f} %, p90 {np.percentile(e, 90):.1f} %")


if __name__ == "__main__":
    main()
