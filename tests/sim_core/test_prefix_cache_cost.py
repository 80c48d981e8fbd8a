"""scripts/prefix_cache_cost.py: the replayed run takes the real run's path, so its time is the shared core."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from sim_core.bench import _set, scenarios
from sim_core.engine import run_simulation

_SPEC = importlib.util.spec_from_file_location("prefix_cache_cost", Path(__file__).parents[2] / "scripts" / "prefix_cache_cost.py")
cost = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(cost)


def _small():
    return _set(scenarios()[cost.CACHED](), workload__num_requests=300)


def test_replaying_the_recorded_reads_gives_the_real_result():
    cfg = _small()
    log, real = cost.record(cfg)
    _, replayed = cost.replay(cfg, log)
    assert len(log) > 1000 and real.summary.prefill_tokens_saved > 0  # the cache was read and hit
    assert cost.same_result(real, replayed)


def test_the_comparison_tells_runs_apart():
    """same_result can fail: the same workload without the cache (no hits) differs."""
    cfg = _small()
    _, real = cost.record(cfg)
    assert cost.same_result(real, run_simulation(cfg))
    assert not cost.same_result(real, run_simulation(_set(cfg, kv_cache__enable_prefix_caching=False)))
