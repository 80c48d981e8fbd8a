"""What a run does that its settings do not say: plain-text notes, one sentence each, printed by the CLI as NOTE lines
and shown under the Simulate page's headline (as text, never markdown)."""

from __future__ import annotations

from sim_core.costmodel import memory_notes
from sim_core.result import SimResult


def run_notes(res: SimResult) -> list[str]:
    """The memory plan's notes of every engine (a deployment's once per pool), then the router's."""
    parts = [(x.role, x.result) for x in getattr(res, "instances", ())] or [(None, res)]
    notes: list[str] = []
    for role, part in parts:
        for note in memory_notes(part.config, part.memory):
            text = note if role is None else f"{role} instances: {note}"
            if text not in notes:
                notes.append(text)
    if res.config.deployment is not None:
        from sim_core.cluster.report import routing_notes

        notes += routing_notes(res.config)
    return notes
