"""A CLI run stopped with SIGTERM (`timeout`, a job scheduler, `kill`) leaves no worker processes behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads the process table from /proc")


def _descendants(pid: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # (gone meanwhile)
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    out, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.add(child)
            todo.append(child)
    return out


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"  # (a zombie has exited: only its parent's wait is missing)


def test_sigterm_stops_a_parallel_search_and_its_workers():
    # `timeout 20 python -m sim_core sweep ...` left the forkserver and two workers running for 47 minutes (review 33c):
    # SIGTERM ended the main process without closing its pool, and the workers waited for work that never came
    cmd = [sys.executable, "-m", "sim_core", "capacity", "chat-h100-llama8b", "--seeds", "6", "--workers", "2", "--no-cache"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=Path(__file__).parents[2])
    workers: set[int] = set()
    try:
        deadline = time.monotonic() + 120
        while len(workers := _descendants(proc.pid)) < 3 and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)  # (the forkserver and its two workers)
        assert proc.poll() is None and len(workers) >= 3, "the search ended or never started its workers"
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
        deadline = time.monotonic() + 30
        while any(_alive(p) for p in workers) and time.monotonic() < deadline:
            time.sleep(0.1)
        left = [p for p in workers if _alive(p)]
        assert not left, f"processes left after SIGTERM: {left}"
        assert proc.returncode != 0 and b"Traceback" not in proc.stderr.read()
    finally:
        for p in _descendants(proc.pid) | workers | {proc.pid}:  # (orphans of an exited run are no longer its descendants)
            try:
                os.kill(p, signal.SIGKILL)
            except OSError:
                pass
        proc.wait()
