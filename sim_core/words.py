"""A count with its noun, for every message that names one (the engine's and the server budget's stop reasons, the
CLI, the app): one rule, so that no message says "stopped after 1 ticks"."""

from __future__ import annotations


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """'1 tick', '2 ticks', '1,200 replicas', '3 stalled stretches' (`plural` where it is not the noun and an s):
    a count and its noun, singular for one."""
    return f"{n:,} {noun if n == 1 else plural or noun + 's'}"
