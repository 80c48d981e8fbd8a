"""Runs: percentiles and positions read off the runs equal NumPy's on the expanded values, bit for bit."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from sim_core import runs as runs_module
from sim_core.runs import Runs, RunsUnion

QS = (0, 50, 90, 99, 100)

# Gap-like values from a small pool (ties across runs), NaN sometimes, repeats with zeros and long runs.
pool = st.lists(st.floats(min_value=1e-6, max_value=10.0, allow_nan=False), min_size=1, max_size=6)


@st.composite
def run_lists(draw, max_runs: int = 40):
    values_pool = draw(pool)
    n = draw(st.integers(1, max_runs))
    values = draw(st.lists(st.sampled_from(values_pool + [float("nan")] * draw(st.integers(0, 1))), min_size=n, max_size=n))
    repeats = draw(st.lists(st.integers(0, 300), min_size=n, max_size=n))
    return Runs(np.array(values, dtype=np.float64), np.array(repeats, dtype=np.int64))


def expected(r: Runs, qs) -> list[float]:
    v = np.repeat(r.values, r.repeats)
    v = v[~np.isnan(v)]
    return [float(x) for x in np.percentile(v, qs)] if v.size else [float("nan")] * len(qs)


def same(a: list[float], b: list[float]) -> bool:
    """Bit for bit (NaN equal to NaN)."""
    return np.array_equal(np.array(a).view(np.int64), np.array(b).view(np.int64))


@settings(max_examples=300, deadline=None)
@given(run_lists(), st.lists(st.floats(0, 100, allow_nan=False), min_size=0, max_size=4))
def test_percentiles_of_runs_equal_numpy_on_the_expanded_values(r, extra_qs):
    qs = QS + tuple(extra_qs)
    assert same(r.percentiles(qs), expected(r, qs))


@settings(max_examples=100, deadline=None)
@given(run_lists())
def test_sorted_runs_path_is_taken_and_exact_when_runs_are_long(r):
    """Force the sorted-runs path (not NumPy's partition of the expanded values) on every case."""
    saved = runs_module.SORT_RUNS_MAX_SHARE
    runs_module.SORT_RUNS_MAX_SHARE = float("inf")
    try:
        assert same(r.percentiles(QS), expected(r, QS))
    finally:
        runs_module.SORT_RUNS_MAX_SHARE = saved


def test_single_run_and_all_equal_values():
    for r in (Runs(np.array([0.25]), np.array([1])), Runs(np.array([0.25]), np.array([1000])),
              Runs(np.array([0.1, 0.1, 0.1]), np.array([7, 0, 9]))):  # fmt: skip
        assert r.percentiles(QS) == [float(r.values[0])] * len(QS)
        assert same(r.percentiles(QS), expected(r, QS))


def test_interpolation_upper_branch_matches_numpy(monkeypatch):
    """gamma >= 0.5 takes NumPy's b - (b - a)(1 - t) form, which differs from a + (b - a) t in the last bit
    for some neighbours: the cases below include such (checked), and every percentile still matches."""
    monkeypatch.setattr(runs_module, "SORT_RUNS_MAX_SHARE", float("inf"))  # the sorted-runs path
    rng = np.random.default_rng(11)
    differs = 0
    for _ in range(300):
        r = Runs(rng.random(8), rng.integers(1, 3, 8))
        qs = tuple(rng.uniform(0, 100, 6))
        assert same(r.percentiles(qs), expected(r, qs))
        x = np.sort(r.expand())
        virtual = (x.size - 1) * np.true_divide(qs, 100)
        lo = np.floor(virtual).astype(np.int64)
        hi = np.minimum(lo + 1, x.size - 1)
        differs += int((x[lo] + (x[hi] - x[lo]) * (virtual - lo) != np.array(expected(r, qs))).sum())
    assert differs > 0


def test_empty_and_all_nan_give_nan():
    for r in (Runs(np.empty(0), np.empty(0, dtype=np.int64)), Runs(np.array([np.nan, 1.0]), np.array([5, 0]))):
        assert all(np.isnan(r.percentiles(QS)))


@settings(max_examples=200, deadline=None)
@given(run_lists(), st.integers(1, 50))
def test_take_reads_the_expanded_positions(r, k):
    n = r.size
    if not n:
        return
    positions = np.linspace(0, n - 1, k).astype(np.int64)
    assert np.array_equal(r.take(positions), r.expand()[positions], equal_nan=True)
    assert np.array_equal(r.expand(), np.repeat(r.values, r.repeats), equal_nan=True)


def _split(n: int, rng) -> Runs:
    """n values as random runs (some empty), each run its own value."""
    cuts = np.sort(rng.integers(0, n + 1, int(rng.integers(0, 6))))
    repeats = np.diff(np.concatenate([[0], cuts, [n]]))
    return Runs(rng.random(repeats.size), repeats.astype(np.int64))


def test_stride_sample_equals_the_linspace_positions_of_the_expanded_values():
    """Every (size, num) up to 120 x 40: includes the cases where i x step rounds across an integer,
    so that the estimate from e / step needs its correction (e.g. size 23, num 31)."""
    rng = np.random.default_rng(4)
    for n in range(1, 121):
        for num in range(2, 41):
            r = _split(n, rng)
            want = r.expand()[np.linspace(0, n - 1, num).astype(np.int64)]
            assert np.array_equal(r.stride_sample(num), want), (n, num)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 10**11), min_size=1, max_size=30), st.integers(2, 5000))
def test_stride_sample_of_long_runs(repeats, num):
    r = Runs(np.arange(len(repeats), dtype=np.float64), np.array(repeats, dtype=np.int64))
    if r.size < 1:
        return
    assert np.array_equal(r.stride_sample(num), r.take(np.linspace(0, r.size - 1, num).astype(np.int64)))


# A union's parts: runs (their percentiles taken first or not: a part's sorted runs are kept) or plain arrays, some empty
@st.composite
def union_parts(draw):
    parts = []
    for _ in range(draw(st.integers(1, 4))):
        r = draw(run_lists())
        kind = draw(st.sampled_from(["runs", "sorted runs", "array"]))
        if kind == "sorted runs":
            r.percentiles(QS)  # (its sorted runs kept, as an instance's result keeps them)
        parts.append(np.repeat(r.values, r.repeats)[: draw(st.integers(0, 50))] if kind == "array" else r)
    return parts


def concatenated(parts) -> Runs:
    runs = [p if isinstance(p, Runs) else Runs(p, np.ones(p.size, dtype=np.int64)) for p in parts]
    return Runs(np.concatenate([r.values for r in runs]), np.concatenate([r.repeats for r in runs]))


@settings(max_examples=400, deadline=None)
@given(union_parts(), st.lists(st.floats(0, 100, allow_nan=False), min_size=0, max_size=4), st.booleans())
def test_percentiles_of_a_union_equal_the_concatenated_runs_and_numpy(parts, extra_qs, sorted_path):
    """A union's percentiles, read off its parts' sorted runs by search, are the concatenated runs' and NumPy's on
    the expanded values, bit for bit; on the sorted-runs path (forced: every case) and on the partition path."""
    qs = QS + tuple(extra_qs)
    saved = runs_module.SORT_RUNS_MAX_SHARE
    if sorted_path:
        runs_module.SORT_RUNS_MAX_SHARE = float("inf")
    try:
        got = RunsUnion(tuple(parts)).percentiles(qs)
        assert same(got, concatenated(parts).percentiles(qs))
        assert same(got, expected(concatenated(parts), qs))
    finally:
        runs_module.SORT_RUNS_MAX_SHARE = saved


def test_a_union_reads_its_parts_sorted_runs_and_sorts_nothing_again(monkeypatch):
    """Parts whose percentiles were taken are not sorted again for the union's (2P2D: its decode instances')."""
    rng = np.random.default_rng(5)
    parts = [Runs(rng.choice(rng.random(300), 2_000), rng.integers(0, 40, 2_000)) for _ in range(3)]
    for r in parts:
        r.percentiles(QS)
    calls = []
    monkeypatch.setattr(np, "argsort", lambda *a, **k: calls.append(1) or np.sort(*a, **k))
    got = RunsUnion(tuple(parts)).percentiles(QS)
    assert not calls
    assert same(got, expected(concatenated(parts), QS))
