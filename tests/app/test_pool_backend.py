"""Sweep, Plan and Compare's points on the server's worker pool (app/components/pool_backend.py): the same results as
any backend, one computation for a point two sessions ask for at once, cancellation, and the pages use it."""

from __future__ import annotations

import os
import threading
import time

import pytest

from app.components.pool_backend import InFlight, PointFailed, PoolBackend
from app.components.worker import WorkerPool
from sim_core.backend import LocalBackend, SearchCancelled
from sim_core.budget import RunBudget
from sim_core.sweep import run_sweep
from tests.conftest import make_config


def _backend(owner="s", parallel=2, inflight=None, hard_timeout_s=60.0) -> PoolBackend:
    pool = WorkerPool(RunBudget(), max_parallel=2, hard_timeout_s=hard_timeout_s, slack_bytes=1 << 30)
    return PoolBackend(pool, inflight or InFlight(), owner, parallel, timeout_s=hard_timeout_s)


def test_a_sweep_on_the_pool_is_the_sweep_on_a_local_pool():
    cfg = make_config(workload__num_requests=40)
    values = [2.0, 8.0, 16.0]
    here = run_sweep(cfg, "rate", values, backend=LocalBackend(1))
    there = run_sweep(cfg, "rate", values, backend=_backend())
    assert [p.summary for p in there] == [p.summary for p in here]


def _pid_after(seconds: float) -> int:
    time.sleep(seconds)
    return os.getpid()


def test_two_sessions_asking_for_one_point_at_once_compute_it_once():
    # A room opening one Sweep link: each page view computed every point itself until the first finished and cached it.
    shared = InFlight()
    out = {}

    def ask(owner):
        out[owner] = _backend(owner, inflight=shared).map(_pid_after, [1.0, 1.5])

    threads = [threading.Thread(target=ask, args=(o,)) for o in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert out["a"] == out["b"]  # the same child processes' answers
    assert shared._running == {}  # nothing kept once done
    assert _backend(inflight=shared).map(_pid_after, [1.0]) != out["a"][:1]  # later: computed again (the cache's job)


def test_a_cancelled_map_stops_its_runs_and_says_so():
    t0 = time.monotonic()
    with pytest.raises(SearchCancelled):
        _backend().map(_pid_after, [30.0, 30.0, 30.0], cancelled=lambda: time.monotonic() - t0 > 0.5)
    assert time.monotonic() - t0 < 10


def test_a_point_whose_process_is_killed_is_named():
    with pytest.raises(PointFailed, match="still busy after 0.5 s"):
        _backend(hard_timeout_s=0.5).map(_pid_after, [5.0])


def test_the_sweep_page_runs_its_points_on_the_servers_pool(monkeypatch):
    # Each Sweep, Plan or seed-band page view started its own pool of one process per core: 30 sessions, 60 processes
    # beside the server's pool, and no turns between them.
    from app.components import runner
    from tests.app.test_pages import PAGES, open_page

    def no_local_pool(self, *args, **kwargs):
        raise AssertionError("a page started a process pool of its own")

    calls = []
    real = PoolBackend.map
    monkeypatch.setattr(LocalBackend, "map", no_local_pool)
    monkeypatch.setattr(PoolBackend, "map", lambda self, *a, **k: calls.append(self.owner) or real(self, *a, **k))
    assert runner.server().pool is not None  # (app/server.toml: workers on)
    at = open_page(PAGES[2], preset="chat-h100-llama8b", sweep="rate", start="4", stop="12", n="2")
    assert not at.exception and calls and len(at.get("plotly_chart")) >= 1


def test_points_share_a_process_in_chunks_and_come_back_in_order():
    # a process per point cost a fork and a cold start each (Plan's search: 10-11.5 s against 6-6.6 s on a pool of
    # long-lived processes); a map of 20 points now forks at most parallel x CHUNKS_PER_SLOT processes
    from app.components.pool_backend import CHUNKS_PER_SLOT

    pids = _backend(parallel=2).map(_pid_after, [i * 1e-6 for i in range(20)])  # (distinct: equal chunks are computed once)
    assert len(set(pids)) == 2 * CHUNKS_PER_SLOT
    assert _backend(parallel=2).map(abs, list(range(-20, 0))) == list(range(20, 0, -1))
