"""What state-aware routing costs to simulate: simulated ticks per CPU second, 4 replicas behind each router, and 2P2D.

    PYTHONPATH=$PWD python scripts/cluster_cost.py [--requests N] [--repeats N] [--reference] [--stats]

The bench's scenario (`sim_core/bench.py`, default preset, 48 req/s over 4 replicas: each replica at the
one-engine bench's 12 req/s) per router and `deployment.state_refresh_s`, and the same with the bench's
shared system prompts and prefix caching for the cache-aware routers, and the bench's 2P2D deployment (24 req/s) with
round robin and least outstanding. One run each (`--repeats`: the best of that many), timed with process CPU
time, next to one engine and the bench's fixed baseline workload measured in the same process (docs/cluster.md,
Beyond one engine: Cost). `--reference` adds, after each deployment row, the same run with runs that end where they
wait for another instance instead of pausing there (`Deployment(pause_runs=False)`, the cost before pausing).
`--stats` adds, after each deployment row, what its routing did in one more (untimed) run: choices tried from bounds
and how many stayed open (a rival had to catch up), engine steps, and the count and KV curves made (`count_run`).
"""

from __future__ import annotations

import argparse
import time
from collections import Counter
from contextlib import contextmanager

from sim_core.cluster import Deployment
from sim_core.cluster.result import build_result

from sim_core.bench import _set, baseline_s, measure, shared_prompts
from sim_core.cluster.router import Router
from sim_core.engine import Engine
from sim_core.presets import DEFAULT_SCENARIO, load_preset

RUNS = [  # (router, state_refresh_s, shared prompts with prefix caching)
    ("round_robin", 0.0, False), ("least_outstanding", 0.0, False),
    ("least_kv", 0.0, False), ("least_kv", 0.05, False), ("least_kv", 0.5, False), ("least_kv", 30.0, False),
    ("least_outstanding", 0.0, True), ("prefix_affinity", 0.0, True), ("prefix_affinity", 0.05, True),
    ("cache_aware", 0.0, True), ("weighted_score", 0.0, True), ("weighted_score", 0.05, True),
]  # fmt: skip


XPYD_ROUTERS = ["round_robin", "least_outstanding"]  # 2P2D at the bench's 24 req/s (its "2P2D" row is round robin)


def xpyd_config(router: str, num_requests: int):
    return _set(load_preset(DEFAULT_SCENARIO), workload__num_requests=num_requests, workload__arrival__rate_per_s=24.0,
                limits__max_sim_time_s=1e6, deployment={"router": router, "disaggregation": {
                    "prefill": {"replicas": 2}, "decode": {"replicas": 2}}})  # fmt: skip


def deployment_config(router: str, refresh_s: float, shared: bool, num_requests: int):
    cfg = _set(load_preset(DEFAULT_SCENARIO), workload__num_requests=num_requests, workload__arrival__rate_per_s=48.0,
               limits__max_sim_time_s=1e6, deployment={"replicas": 4, "router": router, "state_refresh_s": refresh_s})
    if shared:
        cfg = _set(cfg, kv_cache__enable_prefix_caching=True, workload__shared_prefix=shared_prompts())
    return cfg


@contextmanager
def _counting(counts: Counter):
    """Count, while it lasts, the calls that make a state-aware router's cost: `Router.choose_by_bounds` (and its open
    answers), `Engine.step`, `Engine.outstanding_curve`, `Engine.live_kv_curve` (the classes are restored after)."""
    saved = {(cls, name): getattr(cls, name) for cls, name in ((Router, "choose_by_bounds"), (Engine, "step"),
                                                               (Engine, "outstanding_curve"), (Engine, "live_kv_curve"))}  # fmt: skip

    def counted(name, fn):
        def call(*args, **kwargs):
            out = fn(*args, **kwargs)
            counts[name] += 1
            if name == "choose_by_bounds" and out[0] is None:
                counts["open"] += 1
            return out

        return call

    try:
        for (cls, name), fn in saved.items():
            setattr(cls, name, counted(name, fn))
        yield counts
    finally:
        for (cls, name), fn in saved.items():
            setattr(cls, name, fn)


def count_run(cfg) -> Counter:
    """What routing `cfg`'s deployment did in one run: choices from bounds ("choose_by_bounds"), those that stayed open
    ("open"), engine steps ("step"), count curves ("outstanding_curve") and paused runs' KV curves ("live_kv_curve")."""
    with _counting(Counter()) as counts:
        Deployment(cfg).run()
    return counts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=10_000)
    ap.add_argument("--repeats", type=int, default=1, help="time each row this many times, print the best")
    ap.add_argument("--reference", action="store_true", help="also time each deployment with pause_runs=False")
    ap.add_argument("--stats", action="store_true", help="also count each deployment's choices, steps and curves")
    args = ap.parse_args()
    clock = time.process_time
    print(f"baseline (fixed NumPy/Python workload, CPU time): {baseline_s(clock=clock) * 1e3:.1f} ms")
    one = lambda: _set(load_preset(DEFAULT_SCENARIO), workload__num_requests=args.requests,  # noqa: E731
                       workload__arrival__rate_per_s=12.0, limits__max_sim_time_s=1e6)
    rows = [("one engine, 12 req/s", one)]
    for router, refresh_s, shared in RUNS:
        name = f"4 replicas, {router}, refresh {refresh_s:g} s" + (", shared prompts" if shared else "")
        rows.append((name, lambda r=router, f=refresh_s, s=shared: deployment_config(r, f, s, args.requests)))
    for router in XPYD_ROUTERS:
        rows.append((f"2P2D, {router}, 24 req/s", lambda r=router: xpyd_config(r, args.requests)))
    for name, make in rows:
        row = measure(name, make, args.repeats, traced=False, clock=clock)
        print(f"{name:58s} {row.num_ticks:>9,} ticks {row.wall_s:6.2f} s CPU {row.ticks_per_s / 1e3:7.1f}k ticks/s")
        if args.reference and make is not one:
            cfg = make()
            t0 = clock()
            dep = Deployment(cfg, pause_runs=False)
            dep.run()
            ticks = build_result(dep).timeline.num_ticks
            cpu_s = clock() - t0
            print(f"{'  (runs end where they wait: pause_runs=False)':58s} {ticks:>9,} ticks {cpu_s:6.2f} s CPU "
                  f"{ticks / cpu_s / 1e3:7.1f}k ticks/s")
        if args.stats and make is not one:
            c = count_run(make())
            print(f"  choices from bounds {c['choose_by_bounds']:,} ({c['open']:,} open), engine steps {c['step']:,}, "
                  f"count curves {c['outstanding_curve']:,}, KV curves {c['live_kv_curve']:,}")


if __name__ == "__main__":
    main()
