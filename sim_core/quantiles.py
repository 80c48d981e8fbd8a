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

from collections.abc import Callable

import numpy as np


def linear(n: int, qs: tuple[float, ...], values_at: Callable[[np.ndarray], np.ndarray]) -> list[float]:
    """Percentiles `qs` (0-100) of n >= 1 values, given `values_at(ranks)`: the values at those 0-based
    ranks of the values sorted ascending (rank -1: the last)."""
    if min(qs) < 0 or max(qs) > 100:
        raise ValueError(f"percentiles must be in [0, 100], got {qs}")
    virtual = (n - 1) * np.true_divide(qs, 100)
    previous = np.floor(virtual)
    following = previous + 1
    above = virtual >= n - 1  # at or past the last value: both neighbours are the last value (NumPy's index -1)
    previous[above] = -1
    following[above] = -1
    previous, following = previous.astype(np.intp), following.astype(np.intp)
    gamma = np.asanyarray(virtual - previous, dtype=virtual.dtype)  # (NumPy's: with the -1 in place)
    a, b = np.split(values_at(np.concatenate((previous, following))), 2)  # (one call: one partition)
    diff_b_a = b - a
    out = np.add(a, diff_b_a * gamma)
    np.subtract(b, diff_b_a * (1 - gamma), out=out, where=gamma >= 0.5, casting="unsafe")
    return [float(x) for x in out]


def of_array(values: np.ndarray, qs: tuple[float, ...], scratch: bool = False) -> list[float]:
    """`np.percentile(values, qs)` for a 1-D array without NaN, n >= 1. With `scratch` the array is
    partitioned in place (the caller no longer needs its order), else a copy is."""
    v = values if scratch else values.copy()

    def values_at(ranks: np.ndarray) -> np.ndarray:
        # NumPy's very partition (same ranks, 0 and -1 included), so even tied values of different bits
        # (0.0 and -0.0) come out as np.percentile's do
        v.partition(np.unique(np.concatenate(([0, -1], ranks))))
        return v[ranks]

    return linear(v.size, qs, values_at)
