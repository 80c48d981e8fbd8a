"""CPU time of the swap cases (issue 11: swap on the scalar core), best of 3 runs in one process, per tick and against
vLLM V1 alone on the bench's engine scenario (512 requests). Run it on two trees in turn to compare them:

    PYTHONPATH=$PWD python scripts/swap_cpu.py
"""

import argparse
import time
from sim_core.bench import _set, engine_config
from sim_core.engine import run_simulation

argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()  # --help prints the docstring, not a run
def best(cfg, n=3):
    run_simulation(cfg); b = 1e9
    for _ in range(n):
        t = time.process_time(); res = run_simulation(cfg); b = min(b, time.process_time() - t)
    return b, res
rows = []
for name, eng, kw in [("v1 alone", "vllm-v1", {}), ("v0-swap n=4", "vllm-v0-swap", {"workload__num_samples": 4}),
                      ("v0-swap kv=0.85", "vllm-v0-swap", {"kv_cache__gpu_memory_utilization": 0.85}),
                      ("v0-swap kv=0.84", "vllm-v0-swap", {"kv_cache__gpu_memory_utilization": 0.84}),
                      ("v0-swap closed 64", "vllm-v0-swap", {"workload__arrival__process": "closed_loop", "workload__arrival__num_clients": 64})]:
    s, res = best(_set(engine_config(eng)[0], **kw))
    rows.append((name, s, res.timeline.num_ticks))
ref = rows[0][1] / rows[0][2]
for name, s, ticks in rows:
    print(f"{name:20s} {ticks:6d} {s*1e3:8.1f} ms {s/ticks*1e6:7.2f} us/tick {s/ticks/ref:5.2f}x")
