"""The project's documents as tests read them: README.md (the front door: its short sections, the engine benchmark
tables and targets) and the topic files in docs/ it links to, which hold each section's full text. A test that checks
a figure or sentence reads the document the text lives in, so it fails when that text is wrong."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def path(name: str = "README") -> Path:
    """README.md for "README", else docs/<name>.md ("engines", "cluster", "performance", ...)."""
    return ROOT / "README.md" if name == "README" else ROOT / "docs" / f"{name}.md"


def text(name: str = "README") -> str:
    """A document as written, line by line (for tables and headings)."""
    return path(name).read_text(encoding="utf-8")


def prose(name: str = "README") -> str:
    """A document with its whitespace collapsed, so a quoted sentence matches however its lines are wrapped."""
    return " ".join(text(name).split())
