"""What the pre-emption episodes of the strategy bench cost, in CPU instructions (issue 11: "fast for every
strategy"): each case of `scripts/strategy_bench.py --only samples closed` that pre-empts, on the bench's engine
scenario (512 requests), counted as `scripts/tick_cost.py` counts (valgrind's callgrind: one `run_simulation` after two
warm-up runs in the same process, between the entry and exit of `operator.call`), with the scalar core's runs (calls
of `fastpath.advance` that ran ticks) and the run's pre-emptions.

    PYTHONPATH=$PWD python scripts/episode_cost.py [--cases sarathi-serve:n=4 vllm-v0:closed ...] [--swap]

`--swap`: the swap cases (`SWAP_CASES`: the vllm-v0-swap preset with n = 4, n = 2, under KV pressure at n = 1, and in
a closed loop), which pre-empt by swapping out. `--hard`: hard KV pressure at n = 1 (`HARD_CASES`: the preset with KV
room for one longest request, 300 requests at 25/s, `buildable` of tests/sim_core/test_equivalence.py), where a victim
is admitted again at the next tick.
"""

from __future__ import annotations

import argparse
import operator
import re
import shutil
import subprocess
import sys

from sim_core import fastpath
from sim_core.bench import _set, engine_config
from sim_core.engine import run_simulation

CLOSED = {"workload__arrival__process": "closed_loop", "workload__arrival__num_clients": 64}
# (kv=0.85: the vllm-v0-swap preset with n = 1 and 85 % of GPU memory instead of 90 %: its KV cache runs short, 69
# swap-outs in 3,536 ticks)
VARIANTS = {"n=2": {"workload__num_samples": 2}, "n=4": {"workload__num_samples": 4}, "closed": CLOSED,
            "kv=0.85": {"kv_cache__gpu_memory_utilization": 0.85}, "kv=0.84": {"kv_cache__gpu_memory_utilization": 0.84}}
CASES = ["sarathi-serve:n=2", "sarathi-serve:n=4", "vllm-v0:n=4", "sglang:n=4", "vllm-v0:closed", "sglang:closed"]
HARD_CASES = ["sarathi-serve:hard", "vllm-v1:hard", "article-priority:hard"]
SWAP_CASES = ["vllm-v0-swap:n=4", "vllm-v0-swap:n=2", "vllm-v0-swap:kv=0.85", "vllm-v0-swap:kv=0.84", "vllm-v0-swap:closed"]


def config(case: str):
    engine, variant = case.split(":")
    if variant == "hard":  # (the engine preset's own scenario, not the bench's)
        sys.path.insert(0, "tests/sim_core")
        from test_equivalence import buildable

        return buildable(f"engine-{engine}", {"seed": 7, "workload__num_requests": 300,
                                              "workload__arrival__rate_per_s": 25.0}, 1.0)  # fmt: skip
    return _set(engine_config(engine)[0], **VARIANTS[variant])


def _child(case: str) -> None:
    """Inside callgrind: warm up (counting the core's runs), say the counts, then the counted run."""
    cfg = config(case)
    runs, advance = [0], fastpath.advance

    def counted(engine):
        ran = advance(engine)
        runs[0] += bool(ran)
        return ran

    fastpath.advance = counted
    res = run_simulation(cfg)
    fastpath.advance = advance
    run_simulation(cfg)
    print("ticks", res.timeline.num_ticks, "runs", runs[0], "preempted", res.summary.num_preemptions, flush=True)
    operator.call(run_simulation, cfg)


def count(case: str) -> tuple[int, int, int, int]:
    """(ticks, core runs, pre-emptions, instructions) of one run."""
    out = subprocess.run(["valgrind", "--tool=callgrind", "--collect-atstart=no", "--toggle-collect=_operator_call",
                          "--callgrind-out-file=/dev/null", sys.executable, __file__, "--child", case],
                         capture_output=True, text=True, check=True)  # fmt: skip
    ticks, runs, preempted = map(int, re.search(r"ticks (\d+) runs (\d+) preempted (\d+)", out.stdout).groups())
    return ticks, runs, preempted, int(re.search(r"Collected : (\d+)", out.stderr).group(1))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", nargs="+", default=None)
    ap.add_argument("--swap", action="store_true", help="the swap cases (SWAP_CASES)")
    ap.add_argument("--hard", action="store_true", help="hard KV pressure at n = 1 (HARD_CASES)")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        _child(args.child)
        return 0
    if shutil.which("valgrind") is None:
        print("valgrind is not installed: the counts come from its callgrind tool", file=sys.stderr)
        return 1
    print(f"{'case':20s} {'ticks':>6s} {'core runs':>9s} {'pre-empted':>10s} {'instructions':>13s} {'per tick':>9s}")
    for case in args.cases or (SWAP_CASES if args.swap else HARD_CASES if args.hard else CASES):
        ticks, runs, preempted, instr = count(case)
        print(f"{case:20s} {ticks:6d} {runs:9d} {preempted:10d} {instr:13,d} {instr / ticks:9,.0f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
