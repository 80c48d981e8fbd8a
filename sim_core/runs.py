"""A sequence kept as runs, `np.repeat(values, repeats)`, and what the result needs of it without building it.

The scalar core records each tick's inter-token gap once per decoder (recorder.py `itl_runs`): the
100k-request chat run holds ~500k runs for ~20M gaps, 160 MB expanded. Its ITL percentiles and the
evenly strided sample the result keeps are computed here from the runs instead:

- `percentiles` sorts the runs (not the gaps) and reads each order statistic off the cumulative repeats,
  then interpolates as `np.percentile` does (quantiles.py), so every percentile equals
  `np.percentile(expanded, qs)` bit for bit (tests/sim_core/test_runs.py checks it on generated runs).
- `take` reads the values at given (sorted) positions of the expanded sequence: a search per run end.
- `RunsUnion` is several sequences as one (a deployment's gaps: its instances'); its percentiles are read off each
  part's runs sorted by value (`Runs.by_value`, kept from the part's own percentiles) by search, without sorting the
  union again.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

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

    def stride_sample(self, num: int) -> FloatArray:
        """`expand()[np.linspace(0, size - 1, num).astype(np.int64)]` (num >= 2, size >= 1) without the
        positions: how many of them fall in each run, from the run ends. np.linspace's positions are
        trunc(i × step) for i < num - 1 (step = (size - 1) / (num - 1), i × step rounded as NumPy rounds
        it), then size - 1; they are non-decreasing in i, so the positions below a run's end e are the
        first c(e) of them, c(e) the least i with i × step >= e: from e / step, corrected to the exact
        product."""
        size, last = self.size, num - 1
        step = (size - 1) / last
        ends = np.cumsum(self.repeats)
        if size == 1:  # every position is 0
            return np.repeat(self.values[np.searchsorted(ends, 0, side="right")], num)
        below = np.clip(np.ceil(ends / step), 0, last).astype(np.int64)  # c(e), up to an error of a step or so
        while True:  # (one or two passes: e / step is within an ulp or two of the exact quotient)
            down = (below > 0) & ((below - 1) * step >= ends)
            up = (below < last) & (below * step < ends)
            if not (down.any() or up.any()):
                break
            below -= down
            below += up
        counts = np.diff(below, prepend=0)
        counts[np.searchsorted(ends, size - 1, side="right")] += 1  # the last position, size - 1
        return np.repeat(self.values, counts)

    @cached_property
    def by_value(self) -> tuple[FloatArray, IntArray]:
        """(values less NaN in ascending order, their repeats' cumulative sums in that order): what `percentiles` reads
        off the sorted runs, kept (a deployment's percentiles read its instances' without sorting them again:
        `RunsUnion`). Empty runs stay: they end where the run before them ends, so no rank's search stops at one."""
        values, repeats = self.values, self.repeats
        nan = np.isnan(values)
        if nan.any():
            values, repeats = values[~nan], repeats[~nan]
        order = np.argsort(values)
        return values[order], np.cumsum(repeats[order])

    def percentiles(self, qs: tuple[float, ...]) -> list[float]:
        """`np.percentile(v, qs)` with v the expanded values less NaN (NaN each when none is left), bit for bit."""
        values, repeats = self.values, self.repeats
        nan = np.isnan(values)
        if nan.any():
            values, repeats = values[~nan], repeats[~nan]
        n = int(repeats.sum())
        if not n:
            return [float("nan")] * len(qs)
        if values.size > SORT_RUNS_MAX_SHARE * n:  # mostly single values: NumPy's partition is faster
            return quantiles.of_array(np.repeat(values, repeats), qs, scratch=True)
        values, ends = self.by_value
        return quantiles.linear(n, qs, lambda ranks: values[np.searchsorted(ends, np.where(ranks < 0, n - 1, ranks), side="right")])


@dataclass(frozen=True)
class RunsUnion:
    """Several sequences as one, their expansions one after the other: each part `Runs` or a 1-D array (a deployment's
    gaps, its instances': cluster/result.py). Its percentiles are those of the concatenated runs, bit for bit; where
    the union sorts its runs (not mostly single values), each part's are sorted on their own (`Runs.by_value`: an
    instance's are kept from its own percentiles) and every order statistic is found by search over the sorted parts
    (`_values_at`) instead of sorting the union again (2P2D at 2,000 requests: 70k runs, ~17M instructions)."""

    parts: tuple[Runs | FloatArray, ...]

    def percentiles(self, qs: tuple[float, ...]) -> list[float]:
        """`Runs(concatenated values, concatenated repeats).percentiles(qs)`, bit for bit."""
        runs = [p if isinstance(p, Runs) else Runs(p, np.ones(p.size, dtype=np.int64)) for p in self.parts]
        num_runs = n = 0  # runs and values less NaN
        for r in runs:
            nan = np.isnan(r.values)
            values, repeats = (r.values[~nan], r.repeats[~nan]) if nan.any() else (r.values, r.repeats)
            num_runs += values.size
            n += int(repeats.sum())
        if not n or num_runs > SORT_RUNS_MAX_SHARE * n:  # (the concatenation's own path: none left, or a partition)
            return Runs(np.concatenate([r.values for r in runs]), np.concatenate([r.repeats for r in runs])).percentiles(qs)
        parts = [r.by_value for r in runs]
        parts = [(values, np.concatenate(([0], ends))) for values, ends in parts if values.size]
        return quantiles.linear(n, qs, lambda ranks: _values_at(parts, np.where(ranks < 0, n - 1, ranks)))


def _values_at(parts: list[tuple[FloatArray, IntArray]], ranks: IntArray) -> FloatArray:
    """The values at 0-based `ranks` (each below the total) of the union of `parts`, each (values ascending, 0 and
    the cumulative repeats): the least value v of any part with more than `rank` values at or below it over all parts.
    In each part, the first value whose count passes the rank (counts rise with the values; a count is a search per
    part): among every s-th value first (s ~ sqrt(size / ranks): the fewest counts), then among the s values up to the
    first of those that passes; the least over the parts. Equal values have equal bits (no NaN; gaps are never -0.0),
    so this is the value the sorted union holds at that rank."""
    def count_at(v: np.ndarray) -> np.ndarray:  # values at or below each v, over all parts
        return sum(ends[np.searchsorted(values, v, side="right")] for values, ends in parts)

    best = None
    m = ranks.size
    for values, _ in parts:
        size = values.size
        s = max(1, math.isqrt(size // max(m, 1)))
        marks = np.minimum(np.arange(s - 1, size + s - 1, s), size - 1)  # every s-th index, the last one last
        passes = count_at(values[marks])[:, None] > ranks  # (marks, ranks)
        j = passes.argmax(axis=0)  # the first mark that passes (0 where none does: the last mark fails then)
        start = np.where(j > 0, marks[j - 1] + 1, 0)  # past the mark before it, which fails
        window = np.minimum(start[:, None] + np.arange(s), size - 1)  # (ranks, s): up to and with the mark that passes
        first = (count_at(values[window]) > ranks[:, None]).argmax(axis=1)
        got = np.where(passes[-1], values[window[np.arange(m), first]], np.inf)
        best = got if best is None else np.minimum(best, got)
    return best
