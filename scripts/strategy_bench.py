"""CPU time per tick of strategies that no engine preset draws (issue 11: "fast for every strategy"): n samples per
request, closed loops, multi-turn sessions (closed loop, also with the prefix cache caching each turn's reply for the
next, and open loop with it) and speculative decoding, on the bench's engine scenario
(`bench.engine_config`, Llama-2-70B TP2 on A100-80GB, 512 requests) for six engine presets (four on the scalar
per-tick core, two on the batch-of-one path), beside the same preset without the strategy; best of 5 runs after a
warm-up (these machines are shared: compare rows of one run).

    PYTHONPATH=$PWD python scripts/strategy_bench.py [--only samples closed sessions speculative prefix] [--engines ...]
    (case, ticks, pre-emptions, CPU ms, us per tick, per tick vs the preset without the strategy)
"""

from __future__ import annotations

import argparse
import time

from sim_core.bench import _set, engine_config, shared_prompts
from sim_core.config import SimConfig
from sim_core.engine import run_simulation

ENGINES = ("vllm-v1", "sarathi-serve", "vllm-v0", "sglang", "exclusive", "article-dynamic-batch")
NUM_RUNS = 5


STRATEGIES = {  # name -> the changes to the engine scenario
    "samples": {"n = 2": {"workload__num_samples": 2}, "n = 4": {"workload__num_samples": 4}},
    "closed": {"closed loop, 64 clients": {"workload__arrival__process": "closed_loop", "workload__arrival__num_clients": 64}},
    "sessions": {  # (closed loop; with the prefix cache each turn's reply is cached for the next turn; open loop: fixed times)
        "sessions of 4 turns, 2 s think": {"workload__sessions__turns": 4, "workload__sessions__think_time_s": 2.0},
        "sessions, prefix cache": {"workload__sessions__turns": 4, "workload__sessions__think_time_s": 2.0,
                                   "kv_cache__enable_prefix_caching": True},
        "open-loop sessions, prefix cache": {"workload__sessions__turns": 4, "workload__sessions__think_time_s": 2.0,
                                             "workload__sessions__closed_loop": False, "kv_cache__enable_prefix_caching": True},
    },
    "speculative": {"speculative decoding": {"scheduler__speculative": {"enabled": True}}},
    # (the bench's prefix-cache row's shared system prompts, `bench.shared_prompts`, on this scenario)
    "prefix": {"shared prompts, prefix cache": {"kv_cache__enable_prefix_caching": True,
                                                "workload__shared_prefix": shared_prompts()}},
}


def best_s(cfg: SimConfig) -> tuple[float, object]:
    """(best CPU seconds of NUM_RUNS runs after a warm-up, the result)."""
    run_simulation(cfg)
    best = float("inf")
    for _ in range(NUM_RUNS):
        t = time.process_time()
        res = run_simulation(cfg)
        best = min(best, time.process_time() - t)
    return best, res


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", nargs="+", choices=list(STRATEGIES), default=list(STRATEGIES))
    ap.add_argument("--engines", nargs="+", choices=ENGINES, default=list(ENGINES))
    args = ap.parse_args(argv)
    print(f"{'case':48s} {'ticks':>6s} {'preempt':>7s} {'CPU':>9s} {'us/tick':>8s} {'vs plain':>8s}")
    for engine in args.engines:
        plain = engine_config(engine)[0]
        plain_s, res = best_s(plain)
        plain_tick = plain_s / res.timeline.num_ticks
        print(f"{engine:48s} {res.timeline.num_ticks:6d} {res.summary.num_preemptions:7d} {plain_s * 1e3:7.1f}ms "
              f"{plain_tick * 1e6:8.2f} {1:8.2f}", flush=True)  # fmt: skip
        for strategy in args.only:
            for name, changes in STRATEGIES[strategy].items():
                wall_s, res = best_s(_set(plain, **changes))
                per_tick = wall_s / res.timeline.num_ticks
                print(f"{engine + ', ' + name:48s} {res.timeline.num_ticks:6d} {res.summary.num_preemptions:7d} "
                      f"{wall_s * 1e3:7.1f}ms {per_tick * 1e6:8.2f} {per_tick / plain_tick:8.2f}", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
