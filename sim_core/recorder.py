"""Collects per-tick rows, request events, inter-token gaps and early batches during a run.

Single ticks append tuples (cheap in Python); coalesced runs append whole column arrays. `finish`
stitches both into the arrays of the result.
"""

from __future__ import annotations

import numpy as np

from sim_core.result import INT_TICK_COLUMNS, TICK_COLUMNS, BatchLog, Events, Timeline
from sim_core.types import IntArray


class Recorder:
    def __init__(self, num_recorded_batches: int):
        self._rows: list[tuple] = []
        self._chunks: list[np.ndarray] = []  # (rows, len(TICK_COLUMNS)) float64 blocks, in order
        self.num_ticks = 0
        self._ev_req: list[np.ndarray] = []
        self._ev_time: list[np.ndarray] = []
        self._ev_kind: list[np.ndarray] = []
        self._itl: list[np.ndarray] = []
        self._max_batches = num_recorded_batches
        self._batches: list[tuple[int, np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []
        self.num_batch_rows = 0  # step-through rows so far (a run budget counts them)

    def tick(self, row: tuple) -> None:
        self._rows.append(row)
        self.num_ticks += 1

    def tick_rows(self, rows: list[tuple]) -> None:
        self._rows.extend(rows)
        self.num_ticks += len(rows)

    def ticks(self, cols: dict[str, np.ndarray], n: int) -> None:
        """Append n rows given as full-length columns (scalars are broadcast)."""
        self._flush()
        block = np.empty((n, len(TICK_COLUMNS)))
        for j, name in enumerate(TICK_COLUMNS):
            block[:, j] = cols[name]
        self._chunks.append(block)
        self.num_ticks += n

    def _flush(self) -> None:
        if self._rows:
            self._chunks.append(np.array(self._rows, dtype=np.float64))
            self._rows = []

    def event(self, req: IntArray, time_s: float | np.ndarray, kind: int) -> None:
        """Record `kind` for these requests at one time (or one time each). Expanded in `finish`."""
        if req.size:
            self._ev_req.append(req)
            self._ev_time.append(time_s)
            self._ev_kind.append(kind)

    def itl(self, gaps: np.ndarray) -> None:
        if gaps.size:
            self._itl.append(gaps)

    @property
    def wants_batches(self) -> bool:
        return self.num_ticks < self._max_batches

    def batch(self, tick, req, new, is_dec, held) -> None:
        """Batch membership: `tick` is one tick index, or one per entry (a coalesced run)."""
        tick = np.broadcast_to(np.asarray(tick, dtype=np.int64), np.shape(req))
        self.num_batch_rows += tick.size
        self._batches.append((tick.copy(), req.copy(), np.asarray(new).copy(), np.asarray(is_dec).copy(), np.asarray(held).copy()))

    def finish(self) -> tuple[Timeline, Events, np.ndarray, BatchLog]:
        self._flush()
        data = np.concatenate(self._chunks) if self._chunks else np.empty((0, len(TICK_COLUMNS)))
        cols = {
            name: (data[:, j].astype(np.int64) if name in INT_TICK_COLUMNS else data[:, j].copy())
            for j, name in enumerate(TICK_COLUMNS)
        }
        cat = lambda parts, dtype: np.concatenate(parts).astype(dtype, copy=False) if parts else np.empty(0, dtype)  # noqa: E731
        sizes = np.array([r.size for r in self._ev_req], dtype=np.int64)
        # One time per entry, repeated per request; entries with a time per request overwrite their slice.
        is_arr = [np.ndim(t) > 0 for t in self._ev_time]
        scalar = np.array([0.0 if a else t for t, a in zip(self._ev_time, is_arr)], dtype=np.float64)
        ev_time = np.repeat(scalar, sizes)
        ends = np.cumsum(sizes)
        for i in np.flatnonzero(is_arr):
            ev_time[ends[i] - sizes[i] : ends[i]] = self._ev_time[i]
        ev_kind = np.repeat(np.array(self._ev_kind, dtype=np.int8), sizes)
        order = np.argsort(ev_time, kind="stable")
        events = Events(cat(self._ev_req, np.int64)[order], ev_time[order], ev_kind[order])
        b = self._batches
        batches = BatchLog(
            tick=cat([x[0] for x in b], np.int64),
            req=cat([x[1] for x in b], np.int64),
            num_new_tokens=cat([x[2] for x in b], np.int64),
            is_decode=cat([x[3] for x in b], bool),
            kv_blocks_held=cat([x[4] for x in b], np.int64),
        )
        return Timeline(cols), events, cat(self._itl, np.float64), batches
