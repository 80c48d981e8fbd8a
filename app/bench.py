"""The app's cost per rerun on the default preset: `python -m app.bench`.

A rerun that changes a knob simulates the new config and builds every figure the Simulate page
shows (timeline, four latency distributions, roofline, step-through). Reported as the median of
several runs and as a ratio to the same in-process baseline as the engine benchmark.
"""

from __future__ import annotations

import statistics
import time

from app.components import charts, timeline
from sim_core import load_preset, run_simulation
from sim_core.bench import baseline_s
from sim_core.presets import DEFAULT_SCENARIO


def build_figures(res) -> int:
    figs = [timeline.timeline_figure(res, 0, 30), charts.roofline_figure(res)]
    figs += [charts.distribution_figure(res, m) for m in charts.METRICS]
    if res.batches.tick.size:
        figs.append(charts.step_figure(res, int(res.batches.tick[0])))
    return sum(timeline.count_points(f) for f in figs)


def main(repeats: int = 7) -> int:
    base = baseline_s()
    cfg = load_preset(DEFAULT_SCENARIO)
    sim, figs = [], []
    for i in range(repeats):
        cfg_i = cfg.model_copy(update={"seed": i})  # a knob moved: nothing cached
        t0 = time.perf_counter()
        res = run_simulation(cfg_i)
        t1 = time.perf_counter()
        points = build_figures(res)
        t2 = time.perf_counter()
        sim.append(t1 - t0)
        figs.append(t2 - t1)
    s, f = statistics.median(sim), statistics.median(figs)
    print(f"baseline: {base * 1e3:.1f} ms")
    print(f"default preset, per rerun: simulate {s * 1e3:.0f} ms ({s / base:.2f}x base), build all figures "
          f"{f * 1e3:.0f} ms ({f / base:.2f}x base), total {(s + f) * 1e3:.0f} ms; {points:,} points drawn")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
