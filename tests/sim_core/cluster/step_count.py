"""Counting engine steps in a deployment (each step ends a fast-path call): the cost tests' measure."""

from __future__ import annotations


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
