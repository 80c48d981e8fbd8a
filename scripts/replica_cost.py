"""Where a replica deployment's cost goes, in CPU instructions (issue 13, item 6: "cost stays flat"): the bench's
4 replicas (`scripts/cluster_cost.py`'s `deployment_config`: default preset, 48 req/s) behind a router, counted as
`scripts/xpyd_cost.py` counts (valgrind's callgrind, one run after a warm-up run in the same process,
`PYTHONHASHSEED=0 OPENBLAS_NUM_THREADS=1`), once for the whole run and once per part, each a function wrapped, for its
own counted run only, in `operator.call`.

    PYTHONPATH=$PWD python scripts/replica_cost.py [--requests 2000] [--router least_outstanding] [--parts run choice ...]
    PYTHONPATH=$PWD python scripts/replica_cost.py --lines [--requests 2000] [--router ...]   (a sys.settrace line count
        per function, no valgrind)

Parts: `run` (the whole `run_deployment`), `steps` (`Engine.step`: the replicas' ticks, pauses and resumes), `mid`
(`Deployment._route_mid_run`: the arrivals a replica's run reaches, routed inside it), `choice`
(`Deployment._choose_by_bounds`: a choice from every replica's count bounds, with `Router.choose_by_bounds`),
`router` (`Router.choose_by_bounds` alone), `curve` (`Engine.outstanding_curve`), `bounds` (`CountCurve.bounds`),
`add` (`Deployment._add`: a routed request added to its replica and its count curve), `result` (`build_result`).
"""

from __future__ import annotations

import argparse
import operator
import os
import shutil
import sys
from collections import Counter

from sim_core.cluster import Deployment, run_deployment
from sim_core.cluster.result import build_result
from sim_core.cluster.router import Router
from sim_core.count_curve import CountCurve
from sim_core.engine import Engine

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cluster_cost import deployment_config  # noqa: E402
from xpyd_cost import _wrap, print_parts  # noqa: E402
from xpyd_cost import count as xpyd_count  # noqa: E402

PARTS = ["run", "steps", "mid", "choice", "router", "curve", "bounds", "add", "result"]
WRAPPED = {"steps": (Engine, "step"), "mid": (Deployment, "_route_mid_run"), "choice": (Deployment, "_choose_by_bounds"),
           "router": (Router, "choose_by_bounds"), "curve": (Engine, "outstanding_curve"), "bounds": (CountCurve, "bounds"),
           "add": (Deployment, "_add")}  # fmt: skip


def _counted_run(cfg, part: str):
    """One `run_deployment` of `cfg` with `part` wrapped (see the module's doc)."""
    if part == "run":
        return operator.call(run_deployment, cfg)
    if part == "result":
        dep = Deployment(cfg)
        dep.run()
        return operator.call(build_result, dep)
    obj, name = WRAPPED[part]
    saved = obj.__dict__[name]
    _wrap(obj, name)
    try:
        return run_deployment(cfg)
    finally:
        setattr(obj, name, saved)


def _child(part: str, num_requests: int, router: str) -> None:
    """Inside callgrind: a warm-up run, its tick count, then the counted run."""
    cfg = deployment_config(router, 0.0, False, num_requests)
    res = run_deployment(cfg)
    print("ticks", res.timeline.num_ticks, flush=True)
    _counted_run(cfg, part)


def count(part: str, num_requests: int, router: str) -> tuple[int, int]:
    """(ticks, instructions) of one counted run of this script's `--child` (`xpyd_cost.count`)."""
    return xpyd_count(part, num_requests, router, __file__)


def lines(num_requests: int, router: str, top: int = 25) -> None:
    """Python lines run per request, per function (`sys.settrace`, after a warm-up run), the most first."""
    cfg = deployment_config(router, 0.0, False, num_requests)
    run_deployment(cfg)
    counts: Counter = Counter()

    def trace(frame, event, arg):
        if event == "line":
            code = frame.f_code
            counts[(code.co_filename.rsplit("/", 1)[-1], code.co_qualname)] += 1
        return trace

    sys.settrace(trace)
    try:
        run_deployment(cfg)
    finally:
        sys.settrace(None)
    total = sum(counts.values())
    print(f"4 replicas, {router}, {num_requests} requests: {total / num_requests:.1f} lines per request")
    for (f, q), c in counts.most_common(top):
        print(f"  {c / num_requests:8.1f}  {f}:{q}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--router", default="least_outstanding")
    ap.add_argument("--parts", nargs="+", default=["run"], choices=PARTS)
    ap.add_argument("--lines", action="store_true", help="a sys.settrace line count per function instead")
    ap.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        _child(args.child[0], int(args.child[1]), args.child[2])
        return 0
    if args.lines:
        lines(args.requests, args.router)
        return 0
    if shutil.which("valgrind") is None:
        print("valgrind is not installed: the counts come from its callgrind tool", file=sys.stderr)
        return 1
    print_parts(count, f"4 replicas, {args.router}, {args.requests} requests at 48 req/s", args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
