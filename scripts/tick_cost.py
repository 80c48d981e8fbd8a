"""What a tick costs each engine preset, in CPU instructions: the engine table's per-tick ratios (issue 11) read
deterministically. CPU time on a shared machine moves them by +-20% (Sarathi-Serve 1.45x to 1.85x of vLLM V1);
instruction counts repeat to ~0.05%.

    PYTHONPATH=$PWD python scripts/tick_cost.py [--engines vllm-v1 sarathi-serve] [--requests 2 64 128 256 384 512] [--no-gc]

Every preset runs the bench's engine scenario (`bench.engine_config`) at each request count, under valgrind's
callgrind (needs `valgrind` on the PATH; 10-40 s a run, 3-8 min for the defaults): the instructions of one `run_simulation` after two warm-up runs
in the same process, collected between the entry and exit of `operator.call` (which sim_core never calls), so
neither the imports nor the warm-ups count. The counts are fitted (least squares, all presets together) to

    instructions = fixed + decode x (ticks that only decode) + composed x (ticks that prefill) + request x requests

which prices a run's parts apart: the per-tick ratio of a preset with fewer ticks carries the fixed and per-request
costs over fewer ticks, and a composed tick costs a few decode ticks. The last lines say how much a composed tick
would have to cost less for the largest run's ratio to reach a target (the others unchanged).

The counted run includes the cyclic garbage collections that fall in it (column "gc": collections by generation), ~1.1M
instructions a young collection and ~1.5M a gen-1 one here: where the allocation counter stands when the run starts
decides whether it gets none, one or two, so a change of a few allocations can move ~1.5M from one run to another
(~0.04 of Sarathi-Serve's ratio). `--no-gc` counts the run with the collector off (the same for every preset), to
compare code changes without that step; quote both.
"""

from __future__ import annotations

import argparse
import gc
import operator
import re
import shutil
import subprocess
import sys

import numpy as np

from sim_core.bench import DECODE_FIRST_ENGINE, engine_config
from sim_core.engine import run_simulation
from sim_core.sweep import with_value

REFERENCE = DECODE_FIRST_ENGINE  # the engine table's ratios are to it


def _child(engine: str, num_requests: int, no_gc: bool = False) -> None:
    """Inside callgrind: warm up, say the run's tick counts, then the counted run (`no_gc`: with the collector off), and
    the collections that fell in it."""
    cfg = with_value(engine_config(engine)[0], "workload.num_requests", num_requests)
    res = run_simulation(cfg)
    run_simulation(cfg)
    print("ticks", res.timeline.num_ticks, "composed", int(np.count_nonzero(res.timeline.num_prefill_tokens)), flush=True)
    collected: list[int] = []  # the generation of each collection in the counted run

    def note(phase: str, info: dict) -> None:
        if phase == "start":
            collected.append(info["generation"])

    was_enabled = gc.isenabled()
    gc.callbacks.append(note)
    if no_gc:
        gc.disable()
    try:
        operator.call(run_simulation, cfg)
    finally:
        gc.callbacks.remove(note)
        if was_enabled:
            gc.enable()
    print("gc", *(collected.count(g) for g in range(3)), flush=True)


def count(engine: str, num_requests: int, no_gc: bool = False) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
    """((ticks, composed ticks, instructions), collections by generation) of one run."""
    out = subprocess.run(["valgrind", "--tool=callgrind", "--collect-atstart=no", "--toggle-collect=_operator_call",
                          "--callgrind-out-file=/dev/null", sys.executable, __file__, "--child", engine, str(num_requests)]
                         + (["--no-gc"] if no_gc else []), capture_output=True, text=True, check=True)  # fmt: skip
    return (*ticks_of(out.stdout), int(re.search(r"Collected : (\d+)", out.stderr).group(1))), collections_of(out.stdout)


def ticks_of(child_stdout: str) -> tuple[int, int]:
    """(ticks, composed ticks) as `_child` says them."""
    return tuple(map(int, re.search(r"ticks (\d+) composed (\d+)", child_stdout).groups()))


def collections_of(child_stdout: str) -> tuple[int, int, int]:
    """The collections of each generation in the counted run, as `_child` says them."""
    return tuple(map(int, re.search(r"^gc (\d+) (\d+) (\d+)$", child_stdout, re.M).groups()))


def _design(runs: dict) -> tuple[np.ndarray, np.ndarray]:
    X = np.array([[1, t - c, c, n] for (_, n), (t, c, _) in runs.items()], dtype=float)
    return X, np.array([i for _, _, i in runs.values()], dtype=float)


def fit(runs: dict[tuple[str, int], tuple[int, int, int]]) -> np.ndarray:
    """(fixed, decode tick, composed tick, request) instructions, least squares over runs (engine, requests) ->
    (ticks, composed ticks, instructions)."""
    return np.linalg.lstsq(*_design(runs), rcond=None)[0]


def composed_saving(run: tuple[int, int, int], ref: tuple[int, int, int], target: float) -> float:
    """Instructions a composed tick must cost less, in both runs, for `run`'s per-tick instructions to be `target` times
    `ref`'s: (i - c x) / t = target (ref_i - ref_c x) / ref_t, for x (<= 0: it already is)."""
    t, c, i = run
    ref_t, ref_c, ref_i = ref
    return (i / t - target * ref_i / ref_t) / (c / t - target * ref_c / ref_t)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--engines", nargs="+", default=[REFERENCE, "sarathi-serve"])
    ap.add_argument("--requests", nargs="+", type=int, default=[2, 64, 128, 256, 384, 512])
    ap.add_argument("--no-gc", action="store_true", help="count the run with the garbage collector off")
    ap.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        _child(args.child[0], int(args.child[1]), args.no_gc)
        return 0
    if shutil.which("valgrind") is None:
        print("valgrind is not installed: the counts come from its callgrind tool", file=sys.stderr)
        return 1
    counted = {(e, n): count(e, n, args.no_gc) for e in args.engines for n in args.requests}
    runs = {key: run for key, (run, _) in counted.items()}
    most = max(args.requests)
    print(f"{'engine preset':16s} {'requests':>8s} {'ticks':>6s} {'composed':>8s} {'instructions':>13s} {'per tick':>9s}"
          f" {'x ' + REFERENCE if REFERENCE in args.engines else '':>10s} {'gc':>6s}")  # fmt: skip
    ref = runs.get((REFERENCE, most))
    for (e, n), ((ticks, num_composed, instr), collections) in counted.items():
        ratio = f"{instr / ticks / (ref[2] / ref[0]):10.3f}" if ref and n == most else ""
        print(f"{e:16s} {n:8d} {ticks:6d} {num_composed:8d} {instr:13,d} {instr / ticks:9,.0f} {ratio:>10s}"
              f" {'/'.join(map(str, collections)):>6s}")  # fmt: skip
    fixed, decode, composed, request = coef = fit(runs)
    X, y = _design(runs)
    print(f"\nfit: fixed {fixed:,.0f} + decode tick {decode:,.0f} + composed tick {composed:,.0f} + request {request:,.0f}"
          f" (largest residual {np.abs(X @ coef - y).max():,.0f})")  # fmt: skip
    if not ref:
        return 0
    for e in args.engines:
        if e == REFERENCE:
            continue
        for target in (1.5, 1.4, 1.3):
            x = composed_saving(runs[(e, most)], ref, target)
            share = f" ({x / composed:.0%} of the fit's)" if composed > 0 else ""  # (few, small runs fit poorly)
            print(f"{e} at {most} requests: {target}x of {REFERENCE} per tick needs a composed tick {x:,.0f} instructions"
                  f" cheaper{share}" if x > 0 else f"{e}: already under {target}x")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
