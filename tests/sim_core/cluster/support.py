"""Shared pieces of the cluster tests: random open-loop configs, and counting engine steps in a deployment
(each step ends a fast-path call: the cost tests' measure)."""

from __future__ import annotations

from sim_core.sweep import with_value
from tests.sim_core.test_engine import random_config


def open_loop_config(seed: int, process: str = "poisson"):
    """The engine tests' random config `seed`; a closed loop becomes `process` (deployments route arrivals)."""
    cfg = random_config(seed)
    if cfg.workload.arrival.process == "closed_loop":
        cfg = with_value(cfg, "workload.arrival.process", process)
    return cfg


def count_steps(engines) -> list[int]:
    """Wrap each engine's `step` so calls are counted; returns the one-element counter (read it after the run)."""
    calls = [0]
    for engine in engines:
        step = engine.step

        def counted(step=step):
            calls[0] += 1
            return step()

        engine.step = counted
    return calls
