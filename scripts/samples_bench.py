"""CPU time per tick with n samples per request (issue 11: parallel sampling): four engine presets on the bench's
engine scenario (`bench.engine_config`, 512 requests) at n = 1, 2 and 4, best of 5 runs after a warm-up.

    PYTHONPATH=$PWD python scripts/samples_bench.py   (engine, n, ticks, CPU ms, us per tick)
"""

from __future__ import annotations

import time

from sim_core.bench import engine_config
from sim_core.engine import run_simulation
from sim_core.sweep import with_value

ENGINES = ("vllm-v1", "sarathi-serve", "vllm-v0", "sglang")
NUM_RUNS = 5


def main() -> None:
    for engine in ENGINES:
        for n in (1, 2, 4):
            cfg = with_value(engine_config(engine)[0], "workload.num_samples", n)
            run_simulation(cfg)  # (warm-up)
            best_s = float("inf")
            for _ in range(NUM_RUNS):
                t = time.process_time()
                res = run_simulation(cfg)
                best_s = min(best_s, time.process_time() - t)
            ticks = res.timeline.num_ticks
            print(engine, n, ticks, f"{best_s * 1e3:.1f} ms", f"{best_s / ticks * 1e6:.2f} us/tick", flush=True)


if __name__ == "__main__":
    main()
