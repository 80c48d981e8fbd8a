"""Sweep, Plan and Compare's points on the server's one worker pool (a `sim_core.backend.Backend`).

Each of those page views used to start its own process pool of one process per core: a room of 30 opening
a Sweep link ran 60 simulation processes at once, beside the pool every Simulate run goes through, and a
visitor's 32-point sweep took the CPU from everyone else's 0.1 s runs. Here a point is one `WorkerPool.call`:
the same slots, fair turns between sessions and background slots for heavy work as every other run
(app/components/worker.py), and a point another session is already computing is waited for, not run again
(a room opening one Sweep link computes it once; finished points are then read from the point cache).

Results are the same bytes as on any backend: a point is a pure function of its item (sim_core/backend.py).
"""

from __future__ import annotations

import hashlib
import pickle
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Self

from app.components.worker import WorkerPool, apply_each
from sim_core.backend import Cancelled, Progress, SearchCancelled, _wait_all
from sim_core.words import counted

CHUNKS_PER_SLOT = 4  # a map's points in at most this many processes per slot (fewer forks; progress and turns in steps)


class PointFailed(RuntimeError):
    """A point's worker process was killed (its time or memory backstop) or crashed: the message says which."""


class InFlight:
    """Work being computed, by key, so that a second caller waits for the first's result instead of computing it again.
    Holds only what is running (an entry goes when its work ends): finished points live in the point cache."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running: dict[str, Future] = {}

    def get_or_compute(self, key: str, compute: Callable[[], Any]) -> Any:
        """compute()'s value, or the value of the same key's computation already running (None from it, a cancelled
        computation, makes this caller compute its own)."""
        while True:
            with self._lock:
                running = self._running.get(key)
                if running is None:
                    mine = self._running[key] = Future()
            if running is None:
                break
            value = running.result()
            if value is not None:
                return value
        try:
            value = compute()
            mine.set_result(value)
            return value
        except BaseException as err:
            mine.set_exception(err)
            raise
        finally:
            with self._lock:
                del self._running[key]


class PoolBackend:
    """`map` runs each item as one call on the server's `WorkerPool`, at most `parallel` of one map at once, for `owner`
    (the session: fair turns). A task may run up to `timeout_s` (a capacity bisection is several runs)."""

    name = "server"

    def __init__(self, pool: WorkerPool, inflight: InFlight, owner: Any, parallel: int, timeout_s: float):
        self.pool, self.inflight, self.owner, self.parallel, self.timeout_s = pool, inflight, owner, parallel, timeout_s

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Nothing to release: the pool is the server's (a cancelled map has already stopped its calls)."""

    def _chunk(self, fn: Callable[[Any], Any], chunk: list[Any], stop: Callable[[], bool]) -> list[Any] | None:
        key = hashlib.sha256(pickle.dumps((fn, chunk), protocol=5)).hexdigest()
        reply = self.inflight.get_or_compute(
            key, lambda: self.pool.call(apply_each, (fn, chunk), timeout_s=self.timeout_s * len(chunk),
                                        what=f"run of {counted(len(chunk), 'point')}", owner=self.owner, cancelled=stop))  # fmt: skip
        if reply is None:  # (stopped: the map raises SearchCancelled)
            return None
        if reply.kind != "ok":  # (no exception is expected back: a point's function turns errors into its payload)
            raise PointFailed(f"points could not be computed: {reply.payload}")
        return reply.payload

    def map(self, fn: Callable[[Any], Any], items: Sequence[Any], on_progress: Progress | None = None,
            cancelled: Cancelled | None = None) -> list[Any]:
        items = list(items)
        if not items:
            return []
        # A process per point cost ~10-40 ms of fork and a cold start each: Plan's search (61 tasks) took 10-11.5 s
        # where a pool of long-lived processes took 6-6.6 s. Chunks of points share a process: every slot gets
        # CHUNKS_PER_SLOT of them, interleaved (i, i + k, ...) since a sweep's points grow dearer along the knob.
        num_chunks = min(len(items), max(1, self.parallel) * CHUNKS_PER_SLOT)
        chunks = [items[j::num_chunks] for j in range(num_chunks)]
        stopped = threading.Event()
        stop = lambda: stopped.is_set() or (cancelled is not None and cancelled())

        def progress(_: int, __: int) -> None:  # (in points, as the other backends count)
            if on_progress is not None:
                on_progress(sum(len(c) for c, f in zip(chunks, futures) if f.done()), len(items))

        with ThreadPoolExecutor(max_workers=max(1, min(self.parallel, num_chunks))) as threads:
            futures = [threads.submit(self._chunk, fn, c, stop) for c in chunks]
            try:
                _wait_all(futures, progress, cancelled, stopped.set)
            except BaseException:
                stopped.set()  # (the calls waiting or running end within 0.2 s)
                raise
        parts = [f.result() for f in futures]
        if any(p is None for p in parts):  # (a call stopped between the last poll and the end)
            finished = sum(len(c) for c, p in zip(chunks, parts) if p is not None)
            raise SearchCancelled(f"cancelled after {finished} of {len(items)}")
        out: list[Any] = [None] * len(items)
        for j, part in enumerate(parts):
            out[j::num_chunks] = part
        return out
