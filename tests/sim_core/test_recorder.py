"""Recorder: bounded memory per tick, canonical event order."""

from __future__ import annotations

import tracemalloc

import numpy as np

from sim_core.recorder import STAGE_ROWS, Recorder
from sim_core.result import TICK_COLUMNS
from sim_core.types import Event


def _row(i: int) -> tuple:
    return tuple(float(i + j) for j in range(len(TICK_COLUMNS)))


def test_ticks_are_kept_in_numpy_chunks_not_python_objects():
    rec = Recorder(0)
    for i in range(STAGE_ROWS * 3 + 5):
        rec.tick(_row(i))
    assert len(rec._rows) <= STAGE_ROWS  # staged tuples stay bounded
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    n = 20_000
    for i in range(n):
        rec.tick(_row(i))
        rec.itl(np.array([0.01]))
    grown = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    per_tick = grown / n
    assert per_tick < 17 * 8 + 8 + 64  # a float64 row and a gap, plus chunk slack; a tuple alone is ~200 bytes
    timeline, _, itl, _ = rec.finish()
    assert timeline.num_ticks == STAGE_ROWS * 3 + 5 + n and itl.size == n
    assert timeline.t_start_s[-1] == n - 1.0


def test_events_at_one_instant_follow_the_lifecycle_then_request_id():
    rec = Recorder(0)
    t = 1.5  # the end of one tick is the start of the next
    rec.event(np.array([7]), t, Event.SCHEDULED)
    rec.event(np.array([9, 3]), t, Event.FINISHED)
    rec.event(np.array([4]), t, Event.PREEMPTED)
    rec.event(np.array([5]), t, Event.FIRST_TOKEN)
    rec.event(np.array([1]), 0.5, Event.SCHEDULED)
    _, events, _, _ = rec.finish()
    assert events.req.tolist() == [1, 5, 3, 9, 4, 7]
    assert events.kind.tolist() == [Event.SCHEDULED, Event.FIRST_TOKEN, Event.FINISHED, Event.FINISHED,
                                    Event.PREEMPTED, Event.SCHEDULED]  # fmt: skip


def test_column_blocks_equal_single_rows_across_chunk_boundaries():
    """Coalesced runs append columns (written into the current chunk in place when they fit); the
    rows must read as if appended one by one, also where a block straddles two chunks."""
    from sim_core.recorder import CHUNK_ROWS

    one, cols = Recorder(0), Recorder(0)
    sizes = [5, CHUNK_ROWS - 7, 3, 9, CHUNK_ROWS + 11]
    start = 0
    for n in sizes:
        i = np.arange(start, start + n, dtype=np.float64)
        block = {name: i + j for j, name in enumerate(TICK_COLUMNS)}
        block[TICK_COLUMNS[2]] = 7  # a scalar column is broadcast
        cols.ticks(block, n)
        for k in range(n):
            row = list(_row(start + k))
            row[2] = 7.0
            one.tick(tuple(row))
        start += n
    a, b = one.finish()[0], cols.finish()[0]
    for name in TICK_COLUMNS:
        assert np.array_equal(a.columns[name], b.columns[name]), name


def test_gap_runs_expand_in_the_order_recorded_among_single_gaps():
    """The scalar core hands gaps over as runs (a tick's gap once per decoder); the result holds every
    gap in the order recorded, runs expanded where they came (the stored sample strides over that order)."""
    rng = np.random.default_rng(3)
    rec, expected = Recorder(0), []
    for k in range(40):
        if k % 3:
            gaps = rng.random(int(rng.integers(0, 5)))
            rec.itl(gaps)
            expected.extend(gaps.tolist())
        else:
            values, repeats = rng.random(6), rng.integers(0, 4, 6)
            rec.itl_runs(values, repeats)
            expected.extend(np.repeat(values, repeats).tolist())
    _, _, itl, _ = rec.finish()
    assert itl.tolist() == expected


def test_chunks_grow_so_unused_space_stays_under_half():
    from sim_core.recorder import CHUNK_ROWS, MAX_CHUNK_BYTES, _Chunks

    chunks = _Chunks(np.float64)
    values = np.arange(CHUNK_ROWS * 9, dtype=np.float64)
    for part in np.array_split(values, 37):
        chunks.extend(part)
        allocated = sum(c.size for c in chunks._full) + chunks._cur.size
        assert allocated <= 2 * max(chunks.size, CHUNK_ROWS) and chunks._cur.nbytes <= max(MAX_CHUNK_BYTES, CHUNK_ROWS * 8)
    assert np.array_equal(chunks.array(), values)


def test_chunk_boundaries_stay_at_multiples_of_the_first_chunk():
    """Callers that write runs in pieces ending at multiples of CHUNK_ROWS (solo.py) never straddle a chunk."""
    from sim_core.recorder import CHUNK_ROWS, _ColumnChunks

    ticks = _ColumnChunks(len(TICK_COLUMNS), np.float64)
    ends = []
    for _ in range(6):  # 16384, 16384, 32768, then the 8 MiB cap rounded down to a multiple
        ticks.extend_rows(np.zeros((ticks._rows, len(TICK_COLUMNS))))
        ends.append(ticks.size)
    assert all(end % CHUNK_ROWS == 0 for end in ends) and len(ticks._full) == 6 and ends[-1] > ends[-2] + 2 * CHUNK_ROWS


def test_deferred_batch_parts_are_counted_at_once_and_built_in_order_when_first_read():
    import pickle

    rec, calls = Recorder(100), []
    rec.batch(0, np.array([3, 4]), np.array([1, 1]), np.array([True, True]), np.array([2, 2]))

    def build():
        calls.append(1)
        return np.array([1, 1, 2]), np.array([5, 3, 5]), np.array([7, 1, 1]), np.array([False, True, True]), np.array([1, 2, 1])

    rec.batch_deferred(3, build)
    rec.batch(3, np.array([9]), np.array([4]), np.array([False]), np.array([1]))
    assert rec.num_batch_rows == 6 and not calls  # counted for the run budget, not built
    _, _, _, log = rec.finish()
    assert not calls  # finishing the run builds nothing either
    assert log.tick.tolist() == [0, 0, 1, 1, 2, 3] and log.req.tolist() == [3, 4, 5, 3, 5, 9]
    assert log.is_decode.dtype == bool and log.num_new_tokens.dtype == np.int64
    assert log.kv_blocks_held.tolist() == [2, 2, 1, 2, 1, 1] and len(calls) == 1
    log.req, log.tick  # noqa: B018 (read again: built once)
    assert len(calls) == 1
    assert pickle.loads(pickle.dumps(log)).req.tolist() == log.req.tolist()


def test_a_run_leaves_its_batch_log_unbuilt_until_read():
    from sim_core.bench import engine_config
    from sim_core.engine import run_simulation

    res = run_simulation(engine_config("sarathi-serve")[0])
    assert "tick" not in vars(res.batches)  # not built by the run
    ticks = res.batches.tick
    assert ticks.size > 0 and ticks[-1] < res.timeline.num_ticks and np.all(np.diff(ticks) >= 0)


def test_set_last_duration_lengthens_the_last_row_staged_or_chunked():
    # (a prefill instance's idle row that goes on: Engine.extend_idle_row) the last row, wherever it is kept: staged,
    # in the current chunk, or the last of a full chunk; no other row changes
    from sim_core.recorder import CHUNK_ROWS

    width = len(TICK_COLUMNS)
    for n in (1, STAGE_ROWS - 1, STAGE_ROWS, CHUNK_ROWS, CHUNK_ROWS + 1):
        rec = Recorder(0)
        rows = np.arange(n * width, dtype=np.float64).reshape(n, width)
        if n >= CHUNK_ROWS:
            rec.tick_block(rows)
        else:
            for row in rows:
                rec.tick(tuple(row))
        rec.set_last_duration(-1.0)
        rec._flush()
        got = np.stack(rec._ticks.columns([np.float64] * width), axis=1)
        want = rows.copy()
        want[-1, TICK_COLUMNS.index("duration_s")] = -1.0
        assert np.array_equal(got, want), n
