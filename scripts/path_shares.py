"""Where a run's time goes, by path (issue 11, pre-emption episodes): the share of ticks and of CPU time of the scalar
core's calls that ran ticks ("fast"), its calls that ran none (handed back at their first tick or refused at entry:
"fast_refused"), coalesced runs ("run") and the rest of each engine step: planned ticks, their planning, guards
("tick"). Instrumented (each step and call timed with time.process_time), so read shares, not absolute times.

    PYTHONPATH=$PWD python scripts/path_shares.py
"""

from __future__ import annotations

import argparse
import time

from sim_core import fastpath
from sim_core.bench import _set, engine_config
from sim_core.engine import Engine

CLOSED = {"workload__arrival__process": "closed_loop", "workload__arrival__num_clients": 64}
CASES = [("sarathi-serve", {"workload__num_samples": 4}), ("sarathi-serve", {"workload__num_samples": 2}),
         ("vllm-v0", {"workload__num_samples": 4}), ("sglang", {"workload__num_samples": 4}), ("vllm-v0", CLOSED),
         ("sglang", CLOSED)]  # fmt: skip


def shares(cfg) -> tuple[int, float, dict]:
    """(ticks, CPU seconds, path -> [ticks, CPU seconds, calls]) of one run of `cfg`."""
    stats = {k: [0, 0.0, 0] for k in ("fast", "fast_refused", "run", "tick")}
    advance, advance_run = fastpath.advance, Engine._advance_run

    def timed_advance(engine):
        t, k = time.process_time(), engine.rec.num_ticks
        ran = advance(engine)
        s = stats["fast" if ran else "fast_refused"]
        s[0] += engine.rec.num_ticks - k
        s[1] += time.process_time() - t
        s[2] += 1
        return ran

    def timed_run(self, plan, planned=True):
        t, k = time.process_time(), self.rec.num_ticks
        out = advance_run(self, plan, planned)
        s = stats["run"]
        s[0] += self.rec.num_ticks - k
        s[1] += time.process_time() - t
        s[2] += 1
        return out

    fastpath.advance, Engine._advance_run = timed_advance, timed_run
    try:
        engine = Engine(cfg)
        t0 = time.process_time()
        while True:
            inner = stats["fast"][1] + stats["fast_refused"][1] + stats["run"][1]
            t = time.process_time()
            going = engine.step()
            s = stats["tick"]
            s[1] += time.process_time() - t - (stats["fast"][1] + stats["fast_refused"][1] + stats["run"][1] - inner)
            s[2] += 1
            if not going:
                break
        total = time.process_time() - t0
    finally:
        fastpath.advance, Engine._advance_run = advance, advance_run
    n = engine.rec.num_ticks
    stats["tick"][0] = n - stats["fast"][0] - stats["run"][0]
    return n, total, stats


def main() -> None:
    for name, changes in CASES:
        cfg = _set(engine_config(name)[0], **changes)
        shares(cfg)  # (a warm-up)
        n, total, stats = shares(cfg)
        print(f"{name} {changes}: {n} ticks, {total * 1e3:.1f} ms CPU ({total / n * 1e6:.1f} us/tick)")
        for path, (ticks, cpu, calls) in stats.items():
            if calls:
                print(f"   {path:13s} ticks {ticks:5d} ({ticks / n:5.1%})  CPU {cpu * 1e3:6.1f} ms ({cpu / total:5.1%})  calls {calls}")


if __name__ == "__main__":
    argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()  # --help prints the docstring, not a run
    main()
