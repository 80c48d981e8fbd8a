"""What each lesson's two runs cost to simulate, in process CPU time (the server's budget per run is 5 s of wall time,
app/server.toml): a workshop runs every side of every lesson, 30 browsers at once. Per side: ticks, the scalar core's
runs (calls of `fastpath.run_ticks`) and the best of `--repeats` CPU times; a side the memory plan refuses says so. `--router` sets a deployment lesson's router
(lesson 14 under least_kv: what a student trying another router meets).

    PYTHONHASHSEED=0 PYTHONPATH=$PWD python scripts/lesson_cost.py [--lessons session-router ...] [--router least_kv] [--repeats 3]
"""

from __future__ import annotations

import argparse
import time

from sim_core import fastpath, run_simulation
from sim_core.bench import _set
from sim_core.costmodel import MemoryPlanError
from sim_core.lessons import load_lessons


def measure(cfg, repeats: int) -> tuple[int, int, float]:
    """(ticks, core runs, best CPU seconds) of `repeats` runs of cfg."""
    runs = []
    run_ticks = fastpath.run_ticks
    fastpath.run_ticks = lambda e: runs.append(1) or run_ticks(e)
    try:
        best_s = float("inf")
        for _ in range(repeats):
            runs.clear()
            t0_s = time.process_time()
            res = run_simulation(cfg)
            best_s = min(best_s, time.process_time() - t0_s)
    finally:
        fastpath.run_ticks = run_ticks
    return res.timeline.num_ticks, len(runs), best_s


def main() -> None:
    lessons = load_lessons()
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lessons", nargs="*", default=None, help="lesson ids (default: every lesson)")
    ap.add_argument("--router", default=None, help="the router of a lesson whose scenario is a deployment")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    chosen = [x for x in lessons if args.lessons is None or x.id in args.lessons]
    print(f"{'lesson':<28} {'side':>4} {'ticks':>9} {'core runs':>10} {'CPU s':>7}")
    for lesson in chosen:
        for step in (0, 1):
            cfg = lesson.config(step)
            if args.router and cfg.deployment is not None:
                cfg = _set(cfg, deployment__router=args.router)
            try:
                ticks, runs, cpu_s = measure(cfg, args.repeats)
            except MemoryPlanError as e:  # (lesson 6's side that runs out of memory: refused before any tick)
                print(f"{lesson.id:<28} {step:>4}   refused: {str(e)[:60]}…", flush=True)
                continue
            print(f"{lesson.id:<28} {step:>4} {ticks:>9,} {runs:>10,} {cpu_s:>7.2f}", flush=True)


if __name__ == "__main__":
    main()
