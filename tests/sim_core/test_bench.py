"""The engine benchmark table (sim_core/bench.py)."""

from __future__ import annotations

import numpy as np

from sim_core import bench


def test_engine_table_warms_every_preset_before_timing_any(monkeypatch):
    """A preset's time does not depend on its place in the table: every preset runs once, untimed,
    before the first timed run (a fresh process's first runs fault in its heap's pages)."""
    calls: list[tuple[str, bool]] = []  # (config name, timed)
    ticks = iter(range(10**6))
    timing = [False]

    def clock() -> float:
        timing[0] = True  # measure() reads the clock around each timed run
        return float(next(ticks))

    class Result:
        class requests:
            arrival_s = np.zeros(1)

        class timeline:
            num_ticks = 10
            num_prefill_tokens = np.array([512, 0, 0, 7, 0, 0, 0, 0, 0, 0])

        class summary:
            simulated_time_s = 1.0
            stopped_reason = None

    def fake_run(cfg):
        calls.append((cfg.name, timing[0]))
        return Result

    monkeypatch.setattr(bench, "run_simulation", fake_run)
    monkeypatch.setattr(bench, "engine_presets", lambda: ["vllm-v1", "orca", "sarathi-serve"])
    table, rows = bench.engine_table(2, 0.1, clock=clock)
    names = [name for name, _ in calls]
    assert [timed for _, timed in calls[:3]] == [False] * 3 and sorted(names[:3]) == sorted(set(names))
    assert all(timed for _, timed in calls[3:]) and len(calls) == 3 + 3 * 2
    assert [r.name for r in rows] == ["vllm-v1", "orca", "sarathi-serve"] and "vllm-v1" in table
    assert all(r.num_composed_ticks == 2 for r in rows)  # the ticks that prefill, shown as a share of the ticks
    assert table.splitlines()[2].split()[1:3] == ["10", "20"]
