"""arrays: np.isin's and np.insert's results on generated id arrays (empty, repeated, above the broadcast's size)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from sim_core.arrays import BROADCAST_PAIRS, insert_sorted, isin

ids = st.lists(st.integers(-5, 200), max_size=80)  # (overlapping ranges: members found and not)


@settings(max_examples=400, deadline=None)
@given(ids, ids, st.booleans())
def test_isin_is_numpys(values, members, as_arrays):
    a, b = np.array(values, dtype=np.int64), np.array(members, dtype=np.int64)
    got = isin(a, b) if as_arrays else isin(a, members)
    assert got.dtype == np.bool_ and got.shape == a.shape
    assert np.array_equal(got, np.isin(a, b))


def test_isin_above_the_broadcast_size_is_numpys():
    rng = np.random.default_rng(0)
    values, members = rng.integers(0, 5000, 300), rng.integers(0, 5000, 100)
    assert values.size * members.size > BROADCAST_PAIRS
    assert np.array_equal(isin(values, members), np.isin(values, members))


@settings(max_examples=400, deadline=None)
@given(ids, ids)
def test_insert_sorted_is_numpys_insert_at_the_search_positions(keys, new):
    keys, new = np.sort(np.array(keys, dtype=np.int64)), np.sort(np.array(new, dtype=np.int64))
    at = np.searchsorted(keys, new)
    got = insert_sorted(keys, new, at)
    assert np.array_equal(got, np.insert(keys, at, new)) and got.dtype == keys.dtype


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 9), max_size=30), st.lists(st.tuples(st.integers(0, 3), st.integers(0, 99)), max_size=10))
def test_insert_sorted_keeps_the_given_order_at_one_position(keys, new):
    # (a class's end for several victims: one position, their pre-emption order, which need not be sorted)
    keys = np.sort(np.array(keys, dtype=np.int64) * 10)
    at_of = sorted(new, key=lambda x: x[0])  # positions non-decreasing, values in their given order within a position
    at = np.minimum(np.array([p for p, _ in at_of], dtype=np.int64), keys.size)
    vals = np.array([v for _, v in at_of], dtype=np.int64)
    assert np.array_equal(insert_sorted(keys, vals, at), np.insert(keys, at, vals))


@settings(max_examples=200, deadline=None)
@given(ids, st.integers(-5, 200), st.booleans())
def test_isin_of_one_member_is_numpys(values, member, as_arrays):
    # (one victim: the common pre-emption, its own compare)
    a = np.array(values, dtype=np.int64)
    got = isin(a, np.array([member], dtype=np.int64)) if as_arrays else isin(a, [member])
    assert got.dtype == np.bool_ and got.shape == a.shape
    assert np.array_equal(got, np.isin(a, [member]))


@settings(max_examples=200, deadline=None)
@given(ids, st.integers(-5, 200))
def test_insert_sorted_of_one_key_is_numpys_insert(keys, key):
    # (one victim requeued: the common pre-emption, its own three copies)
    keys, new = np.sort(np.array(keys, dtype=np.int64)), np.array([key], dtype=np.int64)
    at = np.searchsorted(keys, new)
    got = insert_sorted(keys, new, at)
    assert np.array_equal(got, np.insert(keys, at, new)) and got.dtype == keys.dtype
