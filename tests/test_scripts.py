"""Every script under scripts/ answers `--help` with its usage and does nothing else.

A script that took "--help" for its first argument once overwrote a shipped data file with a header
(`distserve_measured_runs.py`), and others ran in full for minutes: `--help` is what a newcomer types first.
"""

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = sorted(p.name for p in (ROOT / "scripts").glob("*.py") if not p.name.startswith("_"))


def _tree_digest() -> str:
    # the files a script may write: its data under presets/ (calibration rows, traces)
    h = hashlib.sha256()
    for path in sorted((ROOT / "presets").rglob("*")):
        if path.is_file():
            h.update(str(path.relative_to(ROOT)).encode() + path.read_bytes())
    return h.hexdigest()


def test_there_are_scripts_to_check():
    assert len(SCRIPTS) >= 20


@pytest.mark.parametrize("script", SCRIPTS)
def test_help_prints_the_usage_and_runs_nothing(script):
    before = _tree_digest()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, f"scripts/{script}", "--help"], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=120)  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.startswith("usage: "), out.stdout[:500]
    assert _tree_digest() == before
