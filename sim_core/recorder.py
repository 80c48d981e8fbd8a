"""Collects per-tick rows, request events, inter-token gaps and early batches during a run.

NOTE: memory per tick is bounded and holds no per-tick Python object. Tick rows, gaps and events
are stored in NumPy chunks (`_Chunks`; tick rows column by column, `_ColumnChunks`); single ticks append a tuple (events and gaps: an
array) to a short staging list that is copied into the chunks every `STAGE_ROWS` rows
(`STAGE_PARTS` arrays): appending to a list is the cheapest hand-over from Python. A tick row costs 17 × 8 bytes; there is no other per-tick allocation that
survives the tick. `finish` concatenates the chunks into the arrays of the result (each tick column
straight into its final dtype).

Chunk sizes: `CHUNK_ROWS`, then each chunk as large as all before it (so unused space stays under half),
up to `MAX_CHUNK_BYTES`. Long runs thus write into chunks of 4 MiB and more, which NumPy asks Linux to
back with huge pages: on a virtual machine, first touching memory in 4 KiB pages costs 1-6 us per page
(the 100k-request scenario touched ~250 MB that way).

Events are returned in one canonical order: by time, then by `EVENT_RANK` (what ends a tick before
what starts the next, since the end of tick j is the start of tick j+1), then by request id. So the
order does not depend on whether ticks were advanced one by one or in coalesced runs.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import numpy as np

from sim_core.result import INT_TICK_COLUMNS, TICK_COLUMNS, BatchLog, Events, Timeline
from sim_core.runs import Runs
from sim_core.types import Event, IntArray

STAGE_ROWS = 1024  # single-tick rows staged as tuples before being copied into the chunks
STAGE_PARTS = 256  # event / gap arrays staged before being copied into the chunks
CHUNK_ROWS = 16384  # rows of the first NumPy chunk (a 17-column tick chunk is 2.2 MB)
MAX_CHUNK_BYTES = 8 << 20  # later chunks grow to this (NumPy advises huge pages from 4 MiB)


def _next_rows(rows_so_far: int, row_bytes: int) -> int:
    """Rows of the next chunk: as many as all chunks so far (the first: CHUNK_ROWS), at most MAX_CHUNK_BYTES.
    A multiple of CHUNK_ROWS, so chunk boundaries stay at multiples of it (solo.py writes in pieces ending there)."""
    cap = MAX_CHUNK_BYTES // row_bytes // CHUNK_ROWS * CHUNK_ROWS
    return max(CHUNK_ROWS, min(rows_so_far, cap))

_DURATION = TICK_COLUMNS.index("duration_s")

# Events at one instant: the previous tick's outcomes first, then the next tick's membership changes
# (a request pre-empted and re-admitted in one plan reads PREEMPTED, then SCHEDULED).
EVENT_RANK = np.zeros(max(Event) + 1, dtype=np.int8)
for _rank, _kind in enumerate((Event.FIRST_TOKEN, Event.PREFILL_DONE, Event.FINISHED, Event.PREEMPTED,
                               Event.SWAPPED_OUT, Event.SCHEDULED, Event.SWAPPED_IN)):  # fmt: skip
    EVENT_RANK[_kind] = _rank


class _ColumnChunks:
    """Append-only rows of `width` columns, stored column by column in fixed-size chunks: a coalesced
    run hands over whole columns, and writing a column is a contiguous copy (a strided write into a
    row-major chunk costs 3x as much at run lengths of ~100)."""

    def __init__(self, width: int, dtype):
        self._width = width
        self._rows = CHUNK_ROWS  # rows in _cur
        self._dtype = dtype
        self._full: list[np.ndarray] = []
        self._cur = np.empty((width, CHUNK_ROWS), dtype)
        self._n = 0  # rows used in _cur
        self.size = 0  # rows in all chunks (updated after a block is written)

    def _next_chunk(self, rows_so_far: int) -> None:
        self._full.append(self._cur)
        self._rows = _next_rows(rows_so_far, self._width * self._cur.itemsize)
        self._cur = np.empty((self._width, self._rows), self._dtype)
        self._n = 0

    def extend_rows(self, block) -> None:
        """Append rows given as one (n, width) array."""
        block = np.asarray(block, dtype=self._dtype)
        n = block.shape[0]
        done = 0
        while done < n:
            take = min(n - done, self._rows - self._n)
            self._cur[:, self._n : self._n + take] = block[done : done + take].T
            self._n += take
            done += take
            if self._n == self._rows:
                self._next_chunk(self.size + done)
        self.size += n

    def extend_columns(self, columns: list, n: int) -> None:
        """Append n rows given column by column (arrays of n, or scalars), written in place when they fit."""
        if self._n + n > self._rows:
            block = np.empty((n, len(columns)), self._dtype)
            for j, col in enumerate(columns):
                block[:, j] = col
            self.extend_rows(block)
            return
        rows = self._cur[:, self._n : self._n + n]
        for j, col in enumerate(columns):
            rows[j] = col
        self._n += n
        self.size += n
        if self._n == self._rows:
            self._next_chunk(self.size)

    def last_row(self) -> np.ndarray:
        """The last row appended (a writable view of its `width` values); there must be one."""
        return self._cur[:, self._n - 1] if self._n else self._full[-1][:, -1]

    def columns(self, dtypes: list) -> list[np.ndarray]:
        """Every column as one array of its dtype (cast as `astype` does), copied once from the chunks."""
        parts = self._full + [self._cur[:, : self._n]]
        out = [np.empty(self.size, dtype) for dtype in dtypes]
        at = 0
        for part in parts:
            m = part.shape[1]
            for col, values in zip(out, part):
                col[at : at + m] = values
            at += m
        return out


class _Chunks(_ColumnChunks):
    """Append-only values of one dtype: the one-column case of `_ColumnChunks` (same chunk sizes and growth)."""

    def __init__(self, dtype):
        super().__init__(1, dtype)

    def extend(self, block) -> None:
        """Append the values of a 1-D array."""
        self.extend_rows(np.asarray(block, dtype=self._dtype)[:, None])

    def array(self) -> np.ndarray:
        return np.concatenate(self._full + [self._cur[:, : self._n]], axis=1)[0]


def _joined(parts: list[np.ndarray], dtype) -> np.ndarray:
    """The parts as one array of `dtype`: one part is used as it is (parts are never written to after
    they are handed over), several are concatenated straight into that dtype."""
    if not parts:
        return np.empty(0, dtype)
    if len(parts) == 1:
        return parts[0].astype(dtype, copy=False)
    return np.concatenate(parts, dtype=dtype, casting="same_kind")


def _batch_columns(parts: list) -> tuple[np.ndarray, ...]:
    """The batch log's columns (BatchLog field order) from the recorded parts, deferred ones built now."""
    b = [part() if callable(part) else part for part in parts]
    dtypes = (np.int64, np.int64, np.int64, bool, np.int64)
    return tuple(_joined([x[j] for x in b], dtype) for j, dtype in enumerate(dtypes))


class Recorder:
    def __init__(self, num_recorded_batches: int):
        self._rows: list[tuple] = []  # staged single-tick rows (at most STAGE_ROWS)
        self._ticks = _ColumnChunks(len(TICK_COLUMNS), np.float64)
        self.num_ticks = 0
        self._ev_req = _Chunks(np.int64)
        self._ev_time = _Chunks(np.float64)
        self._ev_kind = _Chunks(np.int8)
        self._itl = _Chunks(np.float64)
        self._ev_stage: list[tuple[np.ndarray, float | np.ndarray, int]] = []  # at most STAGE_PARTS
        self._itl_stage: list[np.ndarray] = []  # at most STAGE_PARTS
        # gaps given as runs (value, repeats), each with the number of single gaps recorded before it
        self._itl_runs: list[tuple[int, np.ndarray, np.ndarray]] = []
        self._max_batches = num_recorded_batches
        self._batches: list[tuple[np.ndarray, ...] | Callable[[], tuple]] = []  # (batch_deferred: the callables)
        self.num_batch_rows = 0  # step-through rows so far (a run budget counts them)

    def tick(self, row: tuple) -> None:
        self._rows.append(row)
        self.num_ticks += 1
        if len(self._rows) >= STAGE_ROWS:
            self._flush()

    def tick_block(self, block: np.ndarray) -> None:
        """Append rows given as one (n, len(TICK_COLUMNS)) float array."""
        self._flush()
        self._ticks.extend_rows(block)
        self.num_ticks += block.shape[0]

    def ticks(self, cols: dict[str, np.ndarray], n: int) -> None:
        """Append n rows given as full-length columns (scalars are broadcast)."""
        self._flush()
        self._ticks.extend_columns([cols[name] for name in TICK_COLUMNS], n)
        self.num_ticks += n

    def set_last_duration(self, duration_s: float) -> None:
        """Lengthen the last tick row (an idle row that goes on: `Engine._record_idle`); there must be one."""
        if self._rows:
            row = self._rows[-1]
            self._rows[-1] = (row[0], duration_s, *row[2:])
        else:
            self._ticks.last_row()[_DURATION] = duration_s

    def _flush(self) -> None:
        if self._rows:
            self._ticks.extend_rows(np.array(self._rows, dtype=np.float64))
            self._rows = []

    def event(self, req: IntArray, time_s: float | np.ndarray, kind: int) -> None:
        """Record `kind` for these requests at one time (or one time each)."""
        if req.size:
            self._ev_stage.append((req, time_s, kind))
            if len(self._ev_stage) >= STAGE_PARTS:
                self._flush_events()

    def _flush_events(self) -> None:
        stage = self._ev_stage
        if not stage:
            return
        sizes = [r.size for r, _, _ in stage]
        self._ev_req.extend(np.concatenate([r for r, _, _ in stage]))
        # One time per part (most parts) repeated in one call; parts with a time per request written over theirs.
        per_req = [i for i, (_, t, _) in enumerate(stage) if isinstance(t, np.ndarray) and t.ndim]
        scalar = [0.0 if isinstance(t, np.ndarray) and t.ndim else t for _, t, _ in stage]
        times = np.repeat(np.array(scalar, dtype=np.float64), sizes)
        if per_req:
            ends = np.cumsum(sizes).tolist()
            for i in per_req:
                times[ends[i] - sizes[i] : ends[i]] = stage[i][1]
        self._ev_time.extend(times)
        self._ev_kind.extend(np.repeat(np.array([k for _, _, k in stage], dtype=np.int8), sizes))
        self._ev_stage = []

    def itl(self, gaps: np.ndarray) -> None:
        if gaps.size:
            self._itl_stage.append(gaps)
            if len(self._itl_stage) >= STAGE_PARTS:
                self._flush_itl()

    def itl_runs(self, values: np.ndarray, repeats: np.ndarray) -> None:
        """Gaps given as `np.repeat(values, repeats)` (a scalar-core call: each tick's gap once per
        decoder), kept in that form (16 bytes a tick instead of 8 bytes a gap): `finish` hands them
        over as `Runs`, or expands every gap once, in order."""
        self._flush_itl()
        self._itl_runs.append((self._itl.size, values, repeats))

    def _flush_itl(self) -> None:
        if self._itl_stage:
            self._itl.extend(np.concatenate(self._itl_stage))
            self._itl_stage = []

    def _gap_runs(self) -> Runs:
        """Every gap in the order recorded, as runs: the single gaps (one each) with the runs where they came."""
        single = self._itl.array()
        if not self._itl_runs:
            return Runs(single, np.ones(single.size, dtype=np.int64))
        values: list[np.ndarray] = []
        repeats: list[np.ndarray] = []
        at = 0
        for before, v, r in self._itl_runs:
            if before > at:
                values.append(single[at:before])
                repeats.append(np.ones(before - at, dtype=np.int64))
            values.append(v)
            repeats.append(r)
            at = before
        values.append(single[at:])
        repeats.append(np.ones(single.size - at, dtype=np.int64))
        self._itl_runs = []
        return Runs(np.concatenate(values), np.concatenate(repeats, dtype=np.int64, casting="same_kind"))

    @property
    def wants_batches(self) -> bool:
        return self.num_ticks < self._max_batches

    def batch(self, tick, req, new, is_dec, held) -> None:
        """Batch membership: `tick` is one tick index, or one per entry (a coalesced run). The arrays
        are kept, not copied: callers pass arrays nothing writes to afterwards (fresh per tick)."""
        tick = np.full(req.shape, tick, dtype=np.int64) if np.ndim(tick) == 0 else tick
        self.num_batch_rows += tick.size
        self._batches.append((tick, req, new, is_dec, held))

    def batch_deferred(self, num_rows: int, build: Callable[[], tuple]) -> None:
        """Batch membership of `num_rows` entries that `build()` returns as `batch` takes them, called
        when the log is first read (BatchLog.deferred): runs nobody steps through never build them.
        `build` must read only values nothing changes afterwards."""
        self.num_batch_rows += num_rows
        self._batches.append(build)

    def finish(self, gaps_as_runs: bool = False) -> tuple[Timeline, Events, np.ndarray | Runs, BatchLog]:
        """Timeline, events in canonical order, every gap in the order recorded (as one array, or with
        `gaps_as_runs` as `Runs`: the result's percentiles and sample need no expanded array) and the batch log."""
        self._flush()
        self._flush_events()
        self._flush_itl()
        dtypes = [np.int64 if name in INT_TICK_COLUMNS else np.float64 for name in TICK_COLUMNS]
        cols = dict(zip(TICK_COLUMNS, self._ticks.columns(dtypes)))
        ev_req, ev_time, ev_kind = self._ev_req.array(), self._ev_time.array(), self._ev_kind.array()
        order = np.lexsort((ev_req, EVENT_RANK[ev_kind], ev_time))
        events = Events(ev_req[order], ev_time[order], ev_kind[order])
        batches = BatchLog.deferred(functools.partial(_batch_columns, list(self._batches)))
        gaps = self._gap_runs()
        return Timeline(cols), events, gaps if gaps_as_runs else gaps.expand(), batches
