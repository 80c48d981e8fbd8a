"""Where a 2P2D request's cost goes, in CPU instructions (issue 13, item 6: "cost stays flat"): the bench's 2P2D
deployment (`scripts/cluster_cost.py`'s `xpyd_config`: default preset, 24 req/s, 2 prefill + 2 decode instances) counted
as `scripts/tick_cost.py` counts (valgrind's callgrind, one run after a warm-up run in the same process,
`PYTHONHASHSEED=0 OPENBLAS_NUM_THREADS=1`), once for the whole run and once per part: each part is a function wrapped,
for its own counted run only, in `operator.call`, between whose entry and exit callgrind collects (no part calls
another's wrapper, so the toggles never nest).

    PYTHONPATH=$PWD python scripts/xpyd_cost.py [--requests 2000] [--router round_robin] [--parts run prefill ...]
    PYTHONPATH=$PWD python scripts/xpyd_cost.py --child run 2000 round_robin   # (one count, without valgrind: a check)

Parts: `run` (the whole `run_deployment`), `setup` (`Deployment.__init__`), `prefill` / `decode` (`Engine.step` of the
prefill / decode instances: their ticks and idle rows, pauses and resumes), `events` (`Deployment._pop_event`: a
hand-off's or a transfer's end, with the dispatch it calls and the release and injection a transfer's end makes),
`dispatch` (`Deployment._dispatch`, from events and from the loop), `inject` (`Engine.inject_prefilled`), `release`
(`Engine.release`), `route` (`Deployment._route`: arrivals routed mid-run; round robin routes up front, in `plan`),
`plan` (the up-front routing: `Deployment._add`), `result` (`build_result`); and parts of those (`WRAPPED`). The loop's own share is `run` less
`setup`, the steps, `events`, the dispatches from the loop, `route` / `plan` and `result`.
"""

from __future__ import annotations

import argparse
import operator
import os
import re
import shutil
import subprocess
import sys

from sim_core import fastpath
from sim_core.cluster import Deployment, run_deployment
from sim_core.cluster.result import build_result
from sim_core.cluster.transfer import LinkSides
from sim_core.engine import Engine

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cluster_cost import xpyd_config  # noqa: E402

PARTS = ["run", "setup", "prefill", "decode", "events", "dispatch", "inject", "release", "route", "plan", "result"]
# part -> (class or module, function) wrapped; `run`, `prefill`, `decode` and `result` are counted below. The parts after
# `result` are not in the default list: inside the dispatch the back router's choice, the transfer's booking on the link,
# the request's slot and blocks on its decode instance (`add` counts the up-front routing's adds too); in the loop its
# horizons and its scan for the earliest instance; in the runs a decoder's join and a hand-off
WRAPPED = {"setup": (Deployment, "__init__"), "events": (Deployment, "_pop_event"), "dispatch": (Deployment, "_dispatch"),
           "route": (Deployment, "_route"), "plan": (Deployment, "_add"), "inject": (Engine, "inject_prefilled"),
           "release": (Engine, "release"), "choice": (Deployment, "_lazy_choice"), "link": (LinkSides, "send"),
           "add": (Engine, "add_request"), "reserve": (Engine, "reserve"), "horizon": (Deployment, "_horizon"),
           "earliest": (Deployment, "_earliest"), "join": (fastpath, "_join_decoders"), "hand_off": (fastpath, "_hand_off")}


def _wrap(obj, name: str) -> None:
    """`obj.name` called through `operator.call` (on a class: every instance's; on an instance or a module: its own)."""
    fn = getattr(obj, name)
    setattr(obj, name, lambda *a, **k: operator.call(fn, *a, **k))


def _counted_run(cfg, part: str):
    """One `run_deployment` of `cfg` with `part` wrapped (see the module's doc)."""
    if part == "run":
        return operator.call(run_deployment, cfg)
    if part in WRAPPED:
        obj, name = WRAPPED[part]
        saved = obj.__dict__[name] if isinstance(obj, type) else getattr(obj, name)
        _wrap(obj, name)
        try:
            return run_deployment(cfg)
        finally:
            setattr(obj, name, saved)
    dep = Deployment(cfg)
    if part in ("prefill", "decode"):
        for x in dep.instances:
            if x.role == part:
                _wrap(x.engine, "step")
    dep.run()
    return operator.call(build_result, dep) if part == "result" else build_result(dep)


def _child(part: str, num_requests: int, router: str) -> None:
    """Inside callgrind: a warm-up run, its tick count, then the counted run."""
    cfg = xpyd_config(router, num_requests)
    res = run_deployment(cfg)
    print("ticks", res.timeline.num_ticks, flush=True)
    _counted_run(cfg, part)


def count(part: str, num_requests: int, router: str, script: str = __file__) -> tuple[int, int]:
    """(ticks, instructions) of one counted run (`script`'s `--child`: this one's, or `scripts/replica_cost.py`'s)."""
    env = dict(os.environ, PYTHONHASHSEED="0", OPENBLAS_NUM_THREADS="1")
    out = subprocess.run(["valgrind", "--tool=callgrind", "--collect-atstart=no", "--toggle-collect=_operator_call",
                          "--callgrind-out-file=/dev/null", sys.executable, script, "--child", part, str(num_requests),
                          router], capture_output=True, text=True, check=True, env=env)  # fmt: skip
    ticks = int(re.search(r"ticks (\d+)", out.stdout).group(1))
    return ticks, int(re.search(r"Collected : (\d+)", out.stderr).group(1))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--router", default="round_robin")
    ap.add_argument("--parts", nargs="+", default=PARTS, choices=list(dict.fromkeys(PARTS + list(WRAPPED))))
    ap.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        _child(args.child[0], int(args.child[1]), args.child[2])
        return 0
    if shutil.which("valgrind") is None:
        print("valgrind is not installed: the counts come from its callgrind tool", file=sys.stderr)
        return 1
    print_parts(count, f"2P2D, {args.router}, {args.requests} requests at 24 req/s", args)
    return 0


def print_parts(count, title: str, args) -> None:
    """The table of `count(part, requests, router)` for each of `args.parts`: instructions, per request, per tick."""
    R = args.requests
    print(title)
    print(f"{'part':10s} {'instructions':>14s} {'per request':>12s} {'per tick':>9s}")
    for part in args.parts:
        ticks, instr = count(part, R, args.router)
        print(f"{part:10s} {instr:14,d} {instr / R:12,.0f} {instr / ticks:9,.0f}", flush=True)


if __name__ == "__main__":
    raise SystemExit(main())
