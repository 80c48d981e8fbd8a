"""Engine benchmark: `python -m sim_core bench [--repeats N] [--quick]`.

Two tables. Every engine preset on one scenario (Llama-2-70B, TP2 on A100-80GB, 512 requests of
512 prompt / 128 output tokens at 2 req/s): wall time, ticks, cost per tick and its ratio to the
decode-first preset (vLLM V1). Then fixed scenarios; per scenario: requests, ticks, wall time (best
of N runs), ticks per second, simulated seconds per wall second, and peak traced memory (a separate, untimed run under
tracemalloc, which NumPy reports its buffers to). Machines here are shared and noisy, so every time
is also given as a ratio to a baseline measured in the same process: a fixed pure NumPy/Python
workload (`baseline_s`), so figures from different runs and machines can be compared.
"""

from __future__ import annotations

import argparse
import time
import tracemalloc
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from sim_core.config import SimConfig
from sim_core.costmodel import MemoryPlanError, plan_memory
from sim_core.engine import run_simulation
from sim_core.inputs import parse_int_text
from sim_core.presets import DEFAULT_SCENARIO, config_from_dict, list_presets, load_preset
from sim_core.sweep import with_value


def _set(cfg: SimConfig, **values) -> SimConfig:
    for path, value in values.items():
        cfg = with_value(cfg, path.replace("__", "."), value)
    return cfg


def shared_prompts() -> dict:
    """workload.shared_prefix of the prefix-cache row (scripts/cluster_cost.py runs its cache-aware routers on it too)."""
    return {"num_system_prompts": 8, "share_ratio": 0.8, "system_prompt_tokens": {"dist": "fixed", "mean": 1024}}


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
        # issue 12: speculative decoding (acceptance draws and draft cost per step), in coalesced runs
        "default preset, speculative decoding": lambda: _set(load_preset(DEFAULT_SCENARIO),
                                                            scheduler__speculative={"enabled": True}),
        # issue 11 ("fast for every strategy"): parallel sampling (n samples decode in lockstep, share the prompt's
        # blocks) and a closed loop (each completion sends its client's next request)
        "default preset, 4 samples per request": lambda: _set(load_preset(DEFAULT_SCENARIO), workload__num_samples=4),
        "default preset, closed loop, 32 clients": lambda: _set(load_preset(DEFAULT_SCENARIO), workload__arrival__process="closed_loop",
                                                               workload__arrival__num_clients=32),
        # issue 12: block hashing and the LRU on every admission and completion
        "10k chat, shared prompts, prefix cache": lambda: _set(
            load_preset(DEFAULT_SCENARIO), workload__num_requests=10_000, workload__arrival__rate_per_s=12.0,
            limits__max_sim_time_s=1e6, kv_cache__enable_prefix_caching=True, workload__shared_prefix=shared_prompts()),
        # Cluster (issue 13): 4 replicas at 4x the 10k scenario's rate (compare: ~4x its ticks and time), a
        # state-aware router (every replica pauses at every arrival), and 2P2D (instances step in lockstep).
        "4 replicas, round robin, 40k req": lambda: _set(load_preset(DEFAULT_SCENARIO), workload__num_requests=40_000,
                                                        workload__arrival__rate_per_s=48.0, limits__max_sim_time_s=1e6,
                                                        deployment={"replicas": 4, "router": "round_robin"}),
        "4 replicas, least outstanding, 10k": lambda: _set(load_preset(DEFAULT_SCENARIO), workload__num_requests=10_000,
                                                          workload__arrival__rate_per_s=48.0, limits__max_sim_time_s=1e6,
                                                          deployment={"replicas": 4, "router": "least_outstanding"}),
        "2P2D, 10k chat requests, H100": lambda: _set(load_preset(DEFAULT_SCENARIO), workload__num_requests=10_000,
                                                     workload__arrival__rate_per_s=24.0, limits__max_sim_time_s=1e6,
                                                     deployment={"disaggregation": {"prefill": {"replicas": 2},
                                                                                    "decode": {"replicas": 2}}}),
    }  # fmt: skip


TARGET_BASELINE_S = 0.0947  # the baseline of the machine the targets were set on (issue 11)
ENGINE_TARGET_S = 0.020  # every engine preset on the 70B scenario, at that baseline
DECODE_FIRST_ENGINE = "vllm-v1"
ENGINE_ROUNDS = 3  # rounds of the engine table (`engine_table`): each preset's time is its best over all of them
# Most timed runs per scenario (--repeats): the engine table runs them in each of its rounds, so 20 is 60 runs of every
# preset, minutes of the machine, well past where a best-of stops moving (the default, 3, reads ±15 % on a shared
# machine, README); --repeats 1000000 was accepted and ran for days
MAX_BENCH_REPEATS = 20
FALLBACK_BATCHED_TOKENS = 8192  # for presets whose token budget leaves no KV room for 70B on 2 GPUs


def target_base_text() -> str:
    """The baseline the tables scale times to, as they name it: "94.7 ms base" (it was typed out beside the number)."""
    return f"{TARGET_BASELINE_S * 1e3:.1f} ms base"


def engine_config(engine: str) -> tuple[SimConfig, str]:
    """The 70B TP2 A100 scenario with one engine preset; the note says what had to change."""
    data = {
        "name": f"bench-70b-{engine}", "hardware": {"preset": "a100-80gb", "num_gpus": 2}, "model": "llama-2-70b",
        "workload": {"preset": "chat", "num_requests": 512, "arrival": {"process": "poisson", "rate_per_s": 2.0},
                     "prompt_tokens": {"dist": "fixed", "mean": 512, "min": 1, "max": 512},
                     "output_tokens": {"dist": "fixed", "mean": 128, "min": 1, "max": 128}},
        "engine": engine,
    }  # fmt: skip
    cfg = config_from_dict(data)
    try:
        plan_memory(cfg)
        return cfg, ""
    except MemoryPlanError:
        data["scheduler"] = {"max_num_batched_tokens": FALLBACK_BATCHED_TOKENS}
        return config_from_dict(data), f"max_num_batched_tokens={FALLBACK_BATCHED_TOKENS} (preset's leaves no KV room)"


def engine_presets() -> list[str]:
    return sorted(p.removeprefix("engine-") for p in list_presets("scenarios") if p.startswith("engine-"))


def baseline_s(repeats: int = 5, clock: Callable[[], float] = time.perf_counter) -> float:
    """A fixed mix of small NumPy calls and Python bookkeeping, like one engine step, 20k times."""
    rng = np.random.default_rng(0)
    a = rng.integers(0, 1000, 64)
    times = []
    for _ in range(repeats):
        t0 = clock()
        acc = 0.0
        for i in range(20_000):
            b = a + i
            acc += float(np.maximum(b, 500).sum()) + int((b % 16 == 0).sum())
        times.append(clock() - t0)
    return min(times)  # best of N: the machines are shared, and contention only ever adds time


@dataclass(frozen=True)
class BenchRow:
    name: str
    num_requests: int
    num_ticks: int
    wall_s: float
    simulated_s: float
    peak_mib: float
    stopped: bool
    num_composed_ticks: int = 0  # ticks that prefill (alone or with decodes): a per-tick cost mixes them with decode ticks

    @property
    def ticks_per_s(self) -> float:
        return self.num_ticks / self.wall_s

    @property
    def sim_per_wall(self) -> float:
        return self.simulated_s / self.wall_s


def measure(name: str, make: Callable[[], SimConfig], repeats: int, traced: bool = True,
            clock: Callable[[], float] = time.perf_counter) -> BenchRow:  # fmt: skip
    cfg = make()
    walls = []
    for _ in range(repeats):
        t0 = clock()
        res = run_simulation(cfg)
        walls.append(clock() - t0)
    peak = 0
    if traced:
        tracemalloc.start()
        run_simulation(cfg)
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    return BenchRow(name, res.requests.arrival_s.size, res.timeline.num_ticks, min(walls),
                    res.summary.simulated_time_s, peak / 2**20, res.summary.stopped_reason is not None,
                    int(np.count_nonzero(res.timeline.num_prefill_tokens)))  # fmt: skip


def format_rows(rows: list[BenchRow], base_s: float) -> str:
    head = f"{'scenario':34s} {'requests':>9s} {'ticks':>9s} {'wall best':>9s} {'x base':>7s} {'ticks/s':>9s} {'sim s/wall s':>12s} {'peak MiB':>9s}"
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(f"{r.name:34s} {r.num_requests:9,d} {r.num_ticks:9,d} {r.wall_s * 1e3:7,.0f}ms {r.wall_s / base_s:7.2f} "
                     f"{r.ticks_per_s:9,.0f} {r.sim_per_wall:12,.0f} {r.peak_mib:9,.1f}" + ("  (stopped by guard)" if r.stopped else ""))  # fmt: skip
    return "\n".join(lines)


def engine_table(repeats: int, base_s: float, clock: Callable[[], float] = time.perf_counter) -> tuple[str, list[BenchRow]]:
    configs = {engine: engine_config(engine) for engine in engine_presets()}
    # One untimed run of every preset first. A fresh process's heap grows during its first runs (the
    # allocator moves large arrays from fresh mmap'ed pages, faulted in on first touch, to its reused
    # heap), so without it the first presets of the table were timed up to 2x slower than the same
    # runs later in the process (measured: article-dynamic-batch 22 ms first, 11-12 ms after one other
    # preset). Each row is then a steady-state time, whatever its place in the table.
    for cfg, _ in configs.values():
        run_simulation(cfg)
    # Then `ENGINE_ROUNDS` rounds, each timing every preset `repeats` times back to back (warm: the same code and data
    # as its previous run), and each preset's best over all rounds. On a shared machine a burst of other load lasts
    # longer than one preset's few runs: timed in one stretch, a preset hit by it read up to 1.8x its time (vLLM V1 17.4
    # against 10.0 ms in two runs of the same tree), and the per-tick ratios with it (Sarathi-Serve 1.02x to 1.84x in
    # two runs minutes apart); spread over rounds, a burst has to cover every round of a preset to count.
    best: dict[str, BenchRow] = {}
    for _ in range(ENGINE_ROUNDS):
        for engine, (cfg, _) in configs.items():
            row = measure(engine, lambda cfg=cfg: cfg, repeats, traced=False, clock=clock)
            if engine not in best or row.wall_s < best[engine].wall_s:
                best[engine] = row
    rows = [best[engine] for engine in configs]
    notes = {engine: note for engine, (_, note) in configs.items()}
    return engine_table_text(rows, base_s, notes), rows


def engine_table_text(rows: list[BenchRow], base_s: float, notes: dict[str, str] | None = None) -> str:
    """The engine table as text, with its targets line, at this baseline."""
    notes = notes or {}
    ref = next(r for r in rows if r.name == DECODE_FIRST_ENGINE)
    ref_tick = ref.wall_s / ref.num_ticks
    scale = TARGET_BASELINE_S / base_s
    # (prefill %: the share of ticks that prefill, alone or with decodes; such a tick costs the scalar core several
    # times an all-decode tick in every preset, so the per-tick ratio also reflects each preset's mix of ticks)
    head = (f"{'engine preset':30s} {'ticks':>7s} {'prefill %':>9s} {'time':>9s} {'x base':>7s} {'at ' + target_base_text():>15s} "
            f"{'us/tick':>8s} {'vs V1/tick':>10s}")  # fmt: skip
    lines = [head, "-" * len(head)]
    for r in rows:
        per_tick = r.wall_s / r.num_ticks
        lines.append(f"{r.name:30s} {r.num_ticks:7,d} {100 * r.num_composed_ticks / r.num_ticks:9.0f} {r.wall_s * 1e3:7.1f}ms "
                     f"{r.wall_s / base_s:7.3f} {r.wall_s * scale * 1e3:13.1f}ms {per_tick * 1e6:8.2f} {per_tick / ref_tick:10.2f}"
                     + (f"  ({notes[r.name]})" if notes.get(r.name) else ""))  # fmt: skip
    worst = max(r.wall_s for r in rows) * scale
    worst_tick = max(r.wall_s / r.num_ticks for r in rows) / ref_tick
    lines.append(f"targets: every preset <= {ENGINE_TARGET_S * 1e3:.0f} ms at the {target_base_text()} (worst {worst * 1e3:.1f} ms); "
                 f"per-tick cost <= 1.5x {DECODE_FIRST_ENGINE}'s (worst {worst_tick:.2f}x)")  # fmt: skip
    return "\n".join(lines)


def _time_cell(seconds: float) -> str:
    """A time for a Markdown cell: ms below a second (no thousands comma: the README's tests read the cells back)."""
    return f"{seconds * 1e3:.1f} ms" if seconds < 0.1 else f"{seconds * 1e3:.0f} ms" if seconds < 1 else f"{seconds:.2f} s"


def markdown_tables(engine_rows: list[BenchRow], scenario_rows: list[BenchRow], base_s: float, timer: str) -> str:
    """The two tables as Markdown, as the README quotes them (`--markdown`): the same rows and ratios as the text tables."""
    scale = TARGET_BASELINE_S / base_s
    ref = next(r for r in engine_rows if r.name == DECODE_FIRST_ENGINE)
    ref_tick = ref.wall_s / ref.num_ticks
    lines = [f"| Engine preset | Ticks | {timer} | x base | At {target_base_text()} | Prefill % | µs / tick | Per tick vs vLLM V1 |",
             "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for r in engine_rows:
        per_tick = r.wall_s / r.num_ticks
        lines.append(f"| {r.name} | {r.num_ticks:,} | {_time_cell(r.wall_s)} | {r.wall_s / base_s:.3f} | {_time_cell(r.wall_s * scale)} | "
                     f"{100 * r.num_composed_ticks / r.num_ticks:.0f} | {per_tick * 1e6:.2f} | {per_tick / ref_tick:.2f} |")  # fmt: skip
    if scenario_rows:
        lines += ["", f"| Scenario | Requests | Ticks | {timer} (best) | x base | At {target_base_text()} | Peak MiB |", "|---|---|---|---|---|---|---|"]
        for r in scenario_rows:
            lines.append(f"| {r.name} | {r.num_requests:,} | {r.num_ticks:,} | {_time_cell(r.wall_s)} | {r.wall_s / base_s:.2f} | "
                         f"{_time_cell(r.wall_s * scale)} | {r.peak_mib:,.1f}{' (stopped by its guard)' if r.stopped else ''} |")  # fmt: skip
    return "\n".join(lines)


def _repeats(text: str) -> int:
    try:
        value = parse_int_text(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if not 1 <= value <= MAX_BENCH_REPEATS:  # (0 or -1 repeats was an UnboundLocalError traceback in measure)
        raise argparse.ArgumentTypeError(f"{value} is outside [1, {MAX_BENCH_REPEATS}]: " + (
            "at least one timed run" if value < 1 else f"at most {MAX_BENCH_REPEATS} timed runs per scenario "
            f"({MAX_BENCH_REPEATS * ENGINE_ROUNDS} per engine preset over the table's {ENGINE_ROUNDS} rounds)"))
    return value


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The benchmark's options: one definition for `python -m sim_core bench` and this module's own main."""
    p.add_argument("--repeats", type=_repeats, default=3,
                   help=f"timed runs per scenario, 1 to {MAX_BENCH_REPEATS} (default 3; the best is kept); the engine table runs them in each "
                   f"of {ENGINE_ROUNDS} rounds")  # fmt: skip
    p.add_argument("--quick", action="store_true", help="smaller large scenarios (CI smoke run)")
    p.add_argument("--engines-only", action="store_true", help="only the per-engine-preset table")
    p.add_argument("--cpu-time", action="store_true",
                   help="time with process CPU time instead of wall time (steadier on a busy shared machine)")  # fmt: skip
    p.add_argument("--markdown", action="store_true", help="also print the tables as Markdown, as the README quotes them")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m sim_core bench", description=__doc__.splitlines()[0])
    add_arguments(p)
    return run(p.parse_args(argv))


def run(args: argparse.Namespace) -> int:
    """The benchmark with parsed options (`add_arguments`)."""
    clock = time.process_time if args.cpu_time else time.perf_counter
    base = baseline_s(clock=clock)
    timer = "CPU time" if args.cpu_time else "wall time"
    print(f"baseline (fixed NumPy/Python workload, same process, {timer}): {base * 1e3:.1f} ms\n")
    print("Every engine preset: Llama-2-70B TP2 on A100-80GB, 512 requests, 512/128 tokens, 2 req/s (Poisson)")
    table, engine_rows = engine_table(args.repeats, base, clock)
    print(table + "\n", flush=True)
    rows = []
    if not args.engines_only:
        for name, make in scenarios(args.quick).items():
            rows.append(measure(name, make, 1 if "100k" in name else args.repeats, clock=clock))
            print(format_rows(rows[-1:], base).splitlines()[-1], flush=True)
        # The baseline again: a burst of other load during the first one read it at 126.7 ms where the same machine
        # reads ~78 ms, which understated every "x base" of that run by 40 %. Contention only adds time, so the
        # lower of the two is the machine's; the final tables use it.
        base_end = baseline_s(clock=clock)
        print(f"\nbaseline again at the end: {base_end * 1e3:.1f} ms" + ("" if base_end >= base else "; the tables below use it"))
        if base_end < base:
            base = base_end
            print(engine_table_text(engine_rows, base, {r.name: engine_config(r.name)[1] for r in engine_rows}))
        print()
        print(format_rows(rows, base))
    if args.markdown:
        print("\n" + markdown_tables(engine_rows, rows, base, timer="CPU time" if args.cpu_time else "Wall time"))
    return 0
