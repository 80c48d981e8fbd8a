"""quantiles: np.percentile's default method, bit for bit, on generated arrays (ties, one value, all equal)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim_core import quantiles
from sim_core.metrics import percentiles

QS = (0, 50, 90, 99, 100)


def same(a: list[float], b) -> bool:
    """Bit for bit."""
    return np.array_equal(np.array(a, dtype=np.float64).view(np.int64), np.asarray(b, dtype=np.float64).view(np.int64))


@st.composite
def arrays(draw):
    """Latency-like values, often tied (drawn from a small pool), sometimes all equal or a single one."""
    pool = draw(st.lists(st.floats(min_value=-1e3, max_value=1e3, allow_nan=False, allow_infinity=False), min_size=1, max_size=8))
    n = draw(st.integers(1, 300))
    return np.array(draw(st.lists(st.sampled_from(pool), min_size=n, max_size=n)), dtype=np.float64)


@settings(max_examples=400, deadline=None)
@given(arrays(), st.lists(st.floats(0, 100, allow_nan=False), max_size=5), st.booleans())
def test_of_array_equals_numpy_percentile(v, extra_qs, scratch):
    qs = QS + tuple(extra_qs)
    want = np.percentile(v, qs)
    original = v.copy()
    assert same(quantiles.of_array(v, qs, scratch=scratch), want)
    if not scratch:
        assert np.array_equal(v, original)  # the caller's order is kept


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(-50, 50), min_size=1, max_size=200))
def test_integer_arrays_too(xs):
    v = np.array(xs, dtype=np.int64)
    assert same(quantiles.of_array(v, QS), np.percentile(v, QS))


def test_single_and_all_equal_values():
    for v in (np.array([0.125]), np.full(97, 3.5)):
        assert quantiles.of_array(v, QS) == [float(v[0])] * len(QS)


def test_upper_branch_of_numpy_lerp_is_followed():
    """Neighbours where a + (b - a) t and NumPy's b - (b - a)(1 - t) differ in the last bit (checked to occur)."""
    rng = np.random.default_rng(5)
    differs = 0
    for _ in range(300):
        v = rng.random(7)
        qs = tuple(rng.uniform(0, 100, 5))
        got = quantiles.of_array(v, qs)
        assert same(got, np.percentile(v, qs))
        x = np.sort(v)
        virtual = (v.size - 1) * np.true_divide(qs, 100)
        lo = np.floor(virtual).astype(np.int64)
        hi = np.minimum(lo + 1, v.size - 1)
        differs += int((x[lo] + (x[hi] - x[lo]) * (virtual - lo) != np.array(got)).sum())
    assert differs > 0


def test_out_of_range_percentile_is_refused():
    with pytest.raises(ValueError, match="percentiles must be in"):
        quantiles.of_array(np.arange(3.0), (50, 101))


@settings(max_examples=200, deadline=None)
@given(arrays(), st.integers(0, 20))
def test_summary_percentiles_leave_out_nan(v, num_nan):
    """metrics.percentiles: NaN (a one-token TPOT) left out; all NaN or empty gives NaN."""
    with_nan = np.concatenate([v, np.full(num_nan, np.nan)])
    np.random.default_rng(num_nan).shuffle(with_nan)
    assert same(percentiles(with_nan, QS), np.percentile(v, QS))
    assert all(np.isnan(percentiles(np.full(num_nan, np.nan), QS)))


def test_tied_zeros_of_either_sign_come_out_as_numpy_s():
    rng = np.random.default_rng(2)
    for _ in range(200):
        v = rng.choice(np.array([0.0, -0.0, 1.0]), size=int(rng.integers(1, 60)))
        assert same(quantiles.of_array(v, QS), np.percentile(v, QS))


@settings(max_examples=200, deadline=None)
@given(st.sampled_from([np.float32, np.int8, np.int16, np.uint8]), st.lists(st.integers(0, 255), min_size=1, max_size=60),
       st.lists(st.floats(0, 100, allow_nan=False), min_size=1, max_size=5))  # fmt: skip
def test_narrow_dtypes_follow_numpy(dtype, xs, qs):
    """b − a is taken in the values' own dtype, as NumPy's _lerp does (float32 rounding, int8 wrapping); the rest of the
    interpolation in double, as NumPy promotes against the float64 weights."""
    v = np.array(xs).astype(dtype)
    assert same(quantiles.of_array(v, tuple(qs)), np.percentile(v, tuple(qs)))
