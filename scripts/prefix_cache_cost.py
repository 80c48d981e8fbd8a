"""What the prefix cache costs in the engine benchmark's "10k chat, shared prompts, prefix cache" row:
the cache's own work (PrefixCache: lookups, references, releases, evictions) apart from the shared core.

    PYTHONPATH=$PWD python scripts/prefix_cache_cost.py [--repeats N] [--requests N]

Method (record and replay): one run records, in order, every value the engine reads from its PrefixCache
(method results and attributes). A second run gets a stand-in that hands those values back in the same
order and does none of the cache's work; the run is deterministic, so it takes exactly the same path
(checked: the replayed result equals the real one on every tick column, finish time and summary). The
replayed run's time is the shared core (the scalar per-tick core, the fast path's prefix-cache glue, the
result) plus the stand-in's own reads, timed separately; real minus replay plus the stand-in is the cache's
own work. Next to it, in the same process and interleaved (best of N, process CPU time, ratios to the
bench's fixed baseline workload): the plain 10k chat row and the same workload with the cache off.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import numpy as np

from sim_core.bench import TARGET_BASELINE_S, _set, baseline_s, scenarios
from sim_core.config import SimConfig
from sim_core.engine import Engine, run_simulation
from sim_core.result import SimResult

CACHED, PLAIN = "10k chat, shared prompts, prefix cache", "10k chat requests, H100"
# what the engine and the fast path call on the cache, and the attributes they read (the stand-in's surface)
METHODS = ("lookup", "admit", "trim", "trim_ticks", "trim_marked", "cache_prefilled", "release", "finish", "cache_reply", "evict", "acquire", "check", "cached_prefix_blocks",
           "bind_slot", "preempt")  # fmt: skip
ATTRIBUTES = ("_num_evictable", "num_evictable", "cache_replies", "marks", "num_hit_tokens", "num_query_tokens", "num_hit_blocks",
              "num_query_blocks", "num_evicted", "hit_tokens", "num_dup_refs", "_debt", "_num_queued", "num_entries_blocks",
              "ref", "run_state", "chains", "run_len", "dropped", "num_saved_tokens", "num_rehit_blocks")  # fmt: skip
WRITABLE = ("tick_offset", "recorder")  # set by the engine, never read back by it


class _Recording:
    """Wraps the real cache: every method result and attribute the engine reads is appended to `log`."""

    def __init__(self, real, log: list):
        object.__setattr__(self, "_real", real)
        object.__setattr__(self, "_log", log)

    def __getattr__(self, name: str):
        real, log = object.__getattribute__(self, "_real"), object.__getattribute__(self, "_log")
        value = getattr(real, name)
        if name in METHODS:

            def call(*args):
                out = value(*args)
                log.append(out)
                return out

            return call
        log.append(value)
        return value

    def __setattr__(self, name: str, value) -> None:
        setattr(object.__getattribute__(self, "_real"), name, value)


def _replaying(log: list):
    """A stand-in that returns the logged values in order (each read: one call and one next())."""
    take = iter(log).__next__

    def method(self, *args):
        return take()

    namespace = {"__slots__": WRITABLE, **dict.fromkeys(METHODS, method)}
    namespace.update({name: property(lambda self: take()) for name in ATTRIBUTES})
    return type("Replay", (), namespace)()


def _run(cfg: SimConfig, wrap: Callable) -> tuple[float, SimResult]:
    engine = Engine(cfg)
    engine.kv.prefix = engine.prefix = wrap(engine.prefix)
    t0 = time.process_time()
    res = engine.run()
    return time.process_time() - t0, res


def same_result(a: SimResult, b: SimResult) -> bool:
    return (a.timeline.columns.keys() == b.timeline.columns.keys()
            and all(np.array_equal(col, b.timeline.columns[k]) for k, col in a.timeline.columns.items())
            and np.array_equal(a.requests.finish_s, b.requests.finish_s, equal_nan=True) and a.summary == b.summary)  # fmt: skip


def record(cfg: SimConfig) -> tuple[list, SimResult]:
    log: list = []
    _, res = _run(cfg, lambda real: _Recording(real, log))
    return log, res


def replay(cfg: SimConfig, log: list) -> tuple[float, SimResult]:
    return _run(cfg, lambda real: _replaying(log))


def stand_in_s(num_reads: int) -> float:
    """CPU time of the stand-in's reads alone (half method calls, half attribute reads, as in the run)."""
    rep = _replaying([0] * num_reads)
    t0 = time.process_time()
    for _ in range(num_reads // 2):
        rep.trim(0)
        rep._num_evictable  # noqa: B018
    return time.process_time() - t0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--requests", type=int, default=10_000)
    args = p.parse_args(argv)
    make = scenarios()
    cached = _set(make[CACHED](), workload__num_requests=args.requests)
    plain = _set(make[PLAIN](), workload__num_requests=args.requests)
    off = _set(cached, kv_cache__enable_prefix_caching=False)
    log, ref = record(cached)
    best = dict.fromkeys(("base", "real", "replay", "plain", "off"), float("inf"))
    ticks = {}
    for _ in range(args.repeats):  # interleaved: the machine's load drifts
        best["base"] = min(best["base"], baseline_s(repeats=1, clock=time.process_time))
        t, res = _run(cached, lambda real: real)
        best["real"] = min(best["real"], t)
        t, rep = replay(cached, log)
        best["replay"] = min(best["replay"], t)
        for name, cfg in (("plain", plain), ("off", off)):
            t0 = time.process_time()
            r = run_simulation(cfg)
            best[name] = min(best[name], time.process_time() - t0)
            ticks[name] = r.timeline.num_ticks
    stub = stand_in_s(len(log))
    base = best["base"]
    own = best["real"] - best["replay"] + stub

    def row(label: str, s: float, n: int) -> str:
        return f"{label:52s} {f'{n:,d}' if n else '':>7s} {s * 1e3:8.1f} ms {s / base:6.2f}x {s / base * TARGET_BASELINE_S:7.3f} s"

    print(f"baseline (bench's fixed workload, same process, CPU time): {base * 1e3:.1f} ms; best of {args.repeats}")
    print(f"{'':52s} {'ticks':>7s} {'CPU':>11s} {'x base':>7s} {'at 94.7 ms':>9s}")
    print(row(f"{CACHED} (real)", best["real"], ref.timeline.num_ticks))
    print(row("  replayed: shared core + stand-in", best["replay"], ref.timeline.num_ticks))
    print(row("  the stand-in's own reads", stub, 0))
    print(row("  the cache's own work (real - replay + stand-in)", own, 0))
    print(row(f"{PLAIN}", best["plain"], ticks["plain"]))
    print(row("same workload, prefix caching off", best["off"], ticks["off"]))
    print(f"cache's own work: {100 * own / best['real']:.0f} % of the run; {len(log):,} reads replayed; "
          f"replayed result identical: {same_result(res, rep)}")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
