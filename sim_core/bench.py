"""Engine benchmark: `python -m sim_core bench [--repeats N] [--quick]`.

Fixed scenarios; per scenario: requests, ticks, wall time (median of N runs), ticks per second,
simulated seconds per wall second, and peak traced memory (a separate, untimed run under
tracemalloc, which NumPy reports its buffers to). Machines here are shared and noisy, so every time
is also given as a ratio to a baseline measured in the same process: a fixed pure NumPy/Python
workload (`baseline_s`), so figures from different runs and machines can be compared.
"""

from __future__ import annotations

import argparse
import statistics
import time
import tracemalloc
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from sim_core.config import SimConfig
from sim_core.engine import run_simulation
from sim_core.presets import DEFAULT_SCENARIO, load_preset
from sim_core.sweep import with_value


def _set(cfg: SimConfig, **values) -> SimConfig:
    for path, value in values.items():
        cfg = with_value(cfg, path.replace("__", "."), value)
    return cfg


def scenarios(quick: bool = False) -> dict[str, Callable[[], SimConfig]]:
    """name -> config factory. `quick` shrinks the two largest for a smoke run."""
    big = 20_000 if quick else 100_000
    return {
        "default preset": lambda: load_preset(DEFAULT_SCENARIO),
        "10k chat requests, H100": lambda: _set(load_preset(DEFAULT_SCENARIO), workload__num_requests=10_000,
                                               workload__arrival__rate_per_s=12.0, limits__max_sim_time_s=1e6),
        f"{big // 1000}k chat requests, H100": lambda: _set(load_preset(DEFAULT_SCENARIO), workload__num_requests=big,
                                                 workload__arrival__rate_per_s=12.0, limits__max_sim_time_s=1e7,
                                                 limits__max_ticks=50_000_000),
        "long context: 32k-token prompts": lambda: _set(load_preset(DEFAULT_SCENARIO), workload__num_requests=200,
                                                       workload__arrival__rate_per_s=0.3,
                                                       workload__prompt_tokens={"dist": "fixed", "mean": 32768, "min": 1, "max": 32768},
                                                       workload__output_tokens={"dist": "fixed", "mean": 256, "min": 1, "max": 256}),
        "overload hitting the guard": lambda: _set(load_preset(DEFAULT_SCENARIO), workload__num_requests=20_000,
                                                  workload__arrival__rate_per_s=200.0, limits__max_sim_time_s=120.0),
        # issue 12: block hashing and the LRU on every admission and completion
        "10k chat, shared prompts, prefix cache": lambda: _set(
            load_preset(DEFAULT_SCENARIO), workload__num_requests=10_000, workload__arrival__rate_per_s=12.0,
            limits__max_sim_time_s=1e6, kv_cache__enable_prefix_caching=True,
            workload__shared_prefix={"num_system_prompts": 8, "share_ratio": 0.8,
                                     "system_prompt_tokens": {"dist": "fixed", "mean": 1024}}),
    }  # fmt: skip


def baseline_s(repeats: int = 5) -> float:
    """A fixed mix of small NumPy calls and Python bookkeeping, like one engine step, 20k times."""
    rng = np.random.default_rng(0)
    a = rng.integers(0, 1000, 64)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        acc = 0.0
        for i in range(20_000):
            b = a + i
            acc += float(np.maximum(b, 500).sum()) + int((b % 16 == 0).sum())
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


@dataclass(frozen=True)
class BenchRow:
    name: str
    num_requests: int
    num_ticks: int
    wall_s: float
    simulated_s: float
    peak_mib: float
    stopped: bool

    @property
    def ticks_per_s(self) -> float:
        return self.num_ticks / self.wall_s

    @property
    def sim_per_wall(self) -> float:
        return self.simulated_s / self.wall_s


def measure(name: str, make: Callable[[], SimConfig], repeats: int) -> BenchRow:
    cfg = make()
    walls = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        res = run_simulation(cfg)
        walls.append(time.perf_counter() - t0)
    tracemalloc.start()
    run_simulation(cfg)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return BenchRow(name, res.requests.arrival_s.size, res.timeline.num_ticks, statistics.median(walls),
                    res.summary.simulated_time_s, peak / 2**20, res.summary.stopped_reason is not None)  # fmt: skip


def format_rows(rows: list[BenchRow], base_s: float) -> str:
    head = f"{'scenario':34s} {'requests':>9s} {'ticks':>9s} {'wall':>9s} {'x base':>7s} {'ticks/s':>9s} {'sim s/wall s':>12s} {'peak MiB':>9s}"
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(f"{r.name:34s} {r.num_requests:9,d} {r.num_ticks:9,d} {r.wall_s * 1e3:7,.0f}ms {r.wall_s / base_s:7.2f} "
                     f"{r.ticks_per_s:9,.0f} {r.sim_per_wall:12,.0f} {r.peak_mib:9,.1f}" + ("  (stopped by guard)" if r.stopped else ""))  # fmt: skip
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m sim_core bench", description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--quick", action="store_true", help="smaller large scenarios (CI smoke run)")
    args = p.parse_args(argv)
    base = baseline_s()
    print(f"baseline (fixed NumPy/Python workload, same process): {base * 1e3:.1f} ms\n")
    rows = []
    for name, make in scenarios(args.quick).items():
        rows.append(measure(name, make, 1 if "100k" in name else args.repeats))
        print(format_rows(rows[-1:], base).splitlines()[-1], flush=True)
    print()
    print(format_rows(rows, base))
    return 0
