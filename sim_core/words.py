"""A count with its noun, for every message that names one (the engine's and the server budget's stop reasons, the
CLI, the app): one rule, so that no message says "stopped after 1 ticks". And a latency as the CLI writes it."""

from __future__ import annotations


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """'1 tick', '2 ticks', '1,200 replicas', '3 stalled stretches' (`plural` where it is not the noun and an s):
    a count and its noun, singular for one."""
    return f"{n:,} {noun if n == 1 else plural or noun + 's'}"


def latency_text(v_s: float) -> str:
    """A latency in the CLI's lines: in ms under a second ("41.9 ms"), in seconds from one ("7.17 s"), as the app's
    figures and tables switch to seconds (it read "TTFT p50 7,173.5 ms")."""
    return f"{v_s * 1e3:,.1f} ms" if abs(v_s) < 1.0 else f"{v_s:,.2f} s"
