"""Instructions of one speculative run (issue 11: speculative decoding on the scalar core), counted as
`scripts/tick_cost.py` counts a run: under valgrind's callgrind, one `run_simulation` after two warm-up runs in the same
process, collected between the entry and exit of `operator.call` (`PYTHONHASHSEED=0 OPENBLAS_NUM_THREADS=1` are set for
the child).

    PYTHONPATH=$PWD python scripts/spec_cost.py [vllm-v1 vllm-v1:model vllm-v1:plain default default:plain ...]

A case is `<engine preset>[:variant]` on the bench's engine scenario (`bench.engine_config`, 512 requests) or `default`
(the bench row "default preset, speculative decoding"); the variant is `spec` (the default: an EAGLE-style head, 3
drafts), `model` (a draft model) or `plain` (no speculation). Prints (case, ticks, instructions in millions, per tick).
"""

from __future__ import annotations

import argparse
import operator
import os
import re
import subprocess
import sys

from sim_core.bench import _set, engine_config
from sim_core.config import SimConfig
from sim_core.engine import run_simulation
from sim_core.presets import DEFAULT_SCENARIO, load_preset


def config(case: str) -> SimConfig:
    engine, _, variant = case.partition(":")
    base = load_preset(DEFAULT_SCENARIO) if engine == "default" else engine_config(engine)[0]
    if variant == "plain":
        return base
    spec = {"enabled": True} | ({"draft": "model"} if variant == "model" else {})
    return _set(base, scheduler__speculative=spec)


def _child(case: str) -> None:
    cfg = config(case)
    res = run_simulation(cfg)
    run_simulation(cfg)
    print("ticks", res.timeline.num_ticks, flush=True)
    operator.call(run_simulation, cfg)


def count(case: str) -> tuple[int, int]:
    """(ticks, instructions) of one run."""
    env = dict(os.environ, PYTHONHASHSEED="0", OPENBLAS_NUM_THREADS="1")
    out = subprocess.run(["valgrind", "--tool=callgrind", "--collect-atstart=no", "--toggle-collect=_operator_call",
                          "--callgrind-out-file=/dev/null", sys.executable, __file__, "--child", case],
                         capture_output=True, text=True, check=True, env=env)  # fmt: skip
    ticks = int(re.search(r"ticks (\d+)", out.stdout).group(1))
    return ticks, int(re.search(r"Collected : (\d+)", out.stderr).group(1))


def main(argv: list[str]) -> None:
    if argv[:1] == ["--child"]:
        _child(argv[1])
        return
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("cases", nargs="*", help="engine preset or `default`, `:plain` for the run without speculation")
    for case in parser.parse_args(argv).cases or ["vllm-v1", "vllm-v1:plain", "default", "default:plain"]:
        ticks, instructions = count(case)
        print(f"{case:24s} {ticks:6d} ticks {instructions / 1e6:9.1f} M {instructions / ticks / 1e3:7.1f} k/tick", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
