"""`np.percentile(values, qs)` (its default method "linear"), bit for bit, in a few NumPy calls.

A summary takes ~10 sets of percentiles per run; NumPy's general `percentile` spends ~30 us of Python
per call around a partition that takes a few. `linear` repeats its arithmetic exactly
(numpy/lib/_function_base_impl.py: `percentile` -> `_quantile` -> `_get_indexes`, `_get_gamma`, `_lerp`):
virtual index (n - 1) × q/100; its floor and the next index, both the last value at or past the end;
gamma = virtual − floor; then `_lerp`, whose t >= 0.5 branch computes b − (b − a)(1 − t). The order
statistics it reads are exact whatever finds them (a partition here, cumulative repeats in runs.py), so
the results are NumPy's. tests/sim_core/test_quantiles.py and test_runs.py compare them bit for bit.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np


def linear(n: int, qs: tuple[float, ...], values_at: Callable[[np.ndarray], np.ndarray]) -> list[float]:
    """Percentiles `qs` (0-100) of n >= 1 values, given `values_at(ranks)`: the values at those 0-based
    ranks of the values sorted ascending (rank -1: the last).

    NumPy's arithmetic on a few values, in Python scalars (a summary takes ~10 sets per run, and each NumPy call on
    a 3-element array costs as much as the whole set in scalars): every operation is the same IEEE double one, on
    the same operands, in the same order; only b - a is taken in the values' own dtype, as NumPy does."""
    if min(qs) < 0 or max(qs) > 100:
        raise ValueError(f"percentiles must be in [0, 100], got {qs}")
    last = n - 1
    previous, following, gamma = [], [], []
    for q in qs:
        virtual = last * (q / 100)  # (n - 1) × q/100: NumPy's true_divide, then the product, in float64
        if virtual >= last:  # at or past the last value: both neighbours are the last value (NumPy's index -1)
            below = -1
            previous.append(-1)
            following.append(-1)
        else:
            below = math.floor(virtual)
            previous.append(below)
            following.append(below + 1)
        gamma.append(virtual - below)  # (NumPy's: with the -1 in place)
    k = len(qs)
    got = values_at(np.array(previous + following, dtype=np.intp))  # (one call: one partition)
    below_above = got.tolist()
    diff_b_a = (got[k:] - got[:k]).tolist()  # (in the values' dtype)
    out = []
    for a, b, diff, t in zip(below_above[:k], below_above[k:], diff_b_a, gamma):
        # NumPy's _lerp: a + (b − a)·t, and for t >= 0.5 b − (b − a)(1 − t)
        out.append(float(b - diff * (1 - t) if t >= 0.5 else a + diff * t))
    return out


def of_array(values: np.ndarray, qs: tuple[float, ...], scratch: bool = False) -> list[float]:
    """`np.percentile(values, qs)` for a 1-D array without NaN, n >= 1. With `scratch` the array is
    partitioned in place (the caller no longer needs its order), else a copy is."""
    v = values if scratch else values.copy()

    def values_at(ranks: np.ndarray) -> np.ndarray:
        # NumPy's very partition (same ranks, 0 and -1 included), so even tied values of different bits
        # (0.0 and -0.0) come out as np.percentile's do
        # (np.unique's kth, sorted and distinct, from a Python set: np.unique is ~40k instructions on a few values)
        v.partition(np.array(sorted({0, -1, *ranks.tolist()}), dtype=np.intp))
        return v[ranks]

    return linear(v.size, qs, values_at)
