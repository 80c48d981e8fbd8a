"""A count with its noun, for every message that names one (the engine's and the server budget's stop reasons, the
CLI, the app): one rule, so that no message says "stopped after 1 ticks"."""

from __future__ import annotations


def counted(n: int, noun: str) -> str:
    """'1 tick', '2 ticks', '1,200 replicas': a count and its noun (a regular plural), singular for one."""
    return f"{n:,} {noun}" + ("" if n == 1 else "s")
