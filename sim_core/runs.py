"""A sequence kept as runs, `np.repeat(values, repeats)`, and what the result needs of it without building it.

The scalar core records each tick's inter-token gap once per decoder (recorder.py `itl_runs`): the
100k-request chat run holds ~500k runs for ~20M gaps, 160 MB expanded. Its ITL percentiles and the
evenly strided sample the result keeps are computed here from the runs instead:

- `percentiles` sorts the runs (not the gaps) and reads each order statistic off the cumulative repeats,
  then interpolates as `np.percentile` does (quantiles.py), so every percentile equals
  `np.percentile(expanded, qs)` bit for bit (tests/sim_core/test_runs.py checks it on generated runs).
- `take` reads the values at given (sorted) positions of the expanded sequence: a search per run end.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sim_core import quantiles
from sim_core.types import FloatArray, IntArray

SORT_RUNS_MAX_SHARE = 0.25  # runs per value above which partitioning the expanded values is cheaper than sorting runs


@dataclass(frozen=True)
class Runs:
    """`np.repeat(values, repeats)` (repeats >= 0, int64), in order."""

    values: FloatArray
    repeats: IntArray

    @property
    def size(self) -> int:
        """Length of the expanded sequence."""
        return int(self.repeats.sum())

    @property
    def is_dense(self) -> bool:
        """Runs of about one value each: the expanded array costs what the runs cost (and NumPy's
        partition of it beats sorting the runs)."""
        return self.values.size > SORT_RUNS_MAX_SHARE * self.size

    def expand(self) -> FloatArray:
        """The sequence as one array (`values` itself when every run holds one value)."""
        if self.values.size == self.size and (not self.repeats.size or self.repeats.min() == 1):
            return self.values
        return np.repeat(self.values, self.repeats)

    def take(self, positions: IntArray) -> FloatArray:
        """`expand()[positions]` for non-decreasing positions in [0, size), without expanding: each run's
        value repeated once per position inside it (a search per run, not per position)."""
        inside = np.searchsorted(positions, np.cumsum(self.repeats), side="left")  # positions before each run's end
        return np.repeat(self.values, np.diff(inside, prepend=0))

    def percentiles(self, qs: tuple[float, ...]) -> list[float]:
        """`np.percentile(v, qs)` with v the expanded values less NaN (NaN each when none is left), bit for bit."""
        keep = (self.repeats > 0) & ~np.isnan(self.values)
        values, repeats = self.values[keep], self.repeats[keep]
        n = int(repeats.sum())
        if not n:
            return [float("nan")] * len(qs)
        if values.size > SORT_RUNS_MAX_SHARE * n:  # mostly single values: NumPy's partition is faster
            return quantiles.of_array(np.repeat(values, repeats), qs, scratch=True)
        order = np.argsort(values)
        values, ends = values[order], np.cumsum(repeats[order])
        return quantiles.linear(n, qs, lambda ranks: values[np.searchsorted(ends, np.where(ranks < 0, n - 1, ranks), side="right")])
