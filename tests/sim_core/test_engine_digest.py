"""scripts/engine_digest.py: the hash a speed change must leave alone covers every engine run it claims to."""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

from sim_core.bench import engine_presets, scenarios
from sim_core.engine import run_simulation
from sim_core.presets import list_presets
from sim_core.sweep import with_value

sys.path.insert(0, str(Path(__file__).parents[2]))
from scripts import engine_digest  # noqa: E402


def _digest(cfg) -> str:
    m = hashlib.sha256()
    engine_digest._update(run_simulation(cfg), m)
    return m.hexdigest()


def test_it_runs_every_scenario_preset_every_engine_preset_and_every_bench_scenario():
    names = [name for name, _ in engine_digest.runs()]
    assert len(names) == len(set(names))
    assert set(list_presets("scenarios")) | {f"bench {e}" for e in engine_presets()} | {
        f"bench {s}" for s in scenarios(quick=True)} == set(names)  # fmt: skip


def test_the_digest_is_the_same_for_the_same_run_and_moves_with_any_result():
    make = dict(engine_digest.runs())["bench vllm-v1"]
    cfg = make()
    assert _digest(cfg) == _digest(make())
    assert _digest(with_value(cfg, "seed", cfg.seed + 1)) != _digest(cfg)  # other arrivals: other times
    assert _digest(with_value(cfg, "scheduler.max_num_seqs", 8)) != _digest(cfg)
