"""CPU time per tick of closed loops (issue 11: closed-loop arrivals on the scalar core): the bench's default preset
open loop and with a closed loop of 32 clients (`bench.scenarios`), four engine presets on the bench's engine scenario
(`bench.engine_config`, 512 requests) with a closed loop of 64 clients, and closed-loop multi-turn sessions (4 turns,
2 s think time; these stay on the scheduler), best of 5 runs after a warm-up.

    PYTHONPATH=$PWD python scripts/closed_loop_bench.py   (case, ticks, pre-emptions, CPU ms, us per tick)
"""

from __future__ import annotations

import time

from sim_core import bench
from sim_core.bench import engine_config
from sim_core.engine import run_simulation
from sim_core.sweep import with_value

ENGINES = ("vllm-v1", "sarathi-serve", "vllm-v0", "sglang")
NUM_RUNS = 5


def cases() -> dict:
    scenarios = bench.scenarios()
    out = {"default preset, open loop": scenarios["default preset"](),
           "default preset, closed loop, 32 clients": scenarios["default preset, closed loop, 32 clients"]()}  # fmt: skip
    for engine in ENGINES:
        cfg = with_value(engine_config(engine)[0], "workload.arrival.process", "closed_loop")
        out[f"{engine}, closed loop, 64 clients"] = with_value(cfg, "workload.arrival.num_clients", 64)
    cfg = with_value(engine_config("vllm-v1")[0], "workload.sessions.turns", 4)
    out["vllm-v1, sessions of 4 turns"] = with_value(cfg, "workload.sessions.think_time_s", 2.0)
    return out


def main() -> None:
    for name, cfg in cases().items():
        run_simulation(cfg)  # (warm-up)
        best_s = float("inf")
        for _ in range(NUM_RUNS):
            t = time.process_time()
            res = run_simulation(cfg)
            best_s = min(best_s, time.process_time() - t)
        ticks = res.timeline.num_ticks
        print(f"{name:40s} {ticks:6d} {res.summary.num_preemptions:4d} {best_s * 1e3:7.1f} ms {best_s / ticks * 1e6:6.2f} us/tick",
              flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
