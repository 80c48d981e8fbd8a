"""Set operations on the small integer arrays the scheduler passes (request ids, queue keys), with NumPy's results.

NumPy 2's `np.isin` costs 50-130 us a call whatever the sizes (its default picks between a lookup table and a sort,
and sets up both checks), and `np.insert` ~20 us; the scheduler calls them with a batch (~100 ids) and a few victims,
where a broadcast compare or a scatter costs 3-6 us. A pre-emption made ~3 such calls, so runs with hundreds of
pre-emptions spent a third of their time in them (measured: scripts/strategy_bench.py's n = 4 rows).
"""

from __future__ import annotations

import numpy as np

from sim_core.types import BoolArray, IntArray

# Above this many pairs the broadcast compare's (values x members) temporary costs more than sorting
BROADCAST_PAIRS = 4096


def isin(values, members) -> BoolArray:
    """`np.isin(values, members)` for 1-D integer arrays (or lists): whether each value is among the members."""
    values, members = np.asarray(values), np.asarray(members)
    if members.size == 1:  # (one victim, the common pre-emption: one compare, ~4x cheaper than the broadcast's three calls)
        return values == members[0]
    if values.size * members.size <= BROADCAST_PAIRS:
        return (values[:, None] == members).any(axis=1)
    return np.isin(values, members, kind="sort")


def insert_sorted(keys: IntArray, new: IntArray, at: IntArray) -> IntArray:
    """`np.insert(keys, at, new)` for non-decreasing positions `at` (`np.searchsorted(keys, new)` of a sorted `new`):
    each new key goes before the key at its position, new keys at one position in their order."""
    out = np.empty(keys.size + new.size, dtype=keys.dtype)
    if new.size == 1:  # (one victim requeued, the common pre-emption: three copies, ~5x cheaper than the scatter's calls)
        a = int(at[0])
        out[:a], out[a], out[a + 1 :] = keys[:a], new[0], keys[a:]
        return out
    pos = at + np.arange(new.size)  # (strictly increasing: the keys before each new one shift it right)
    rest = np.ones(out.size, dtype=bool)
    rest[pos] = False
    out[pos] = new
    out[rest] = keys
    return out
