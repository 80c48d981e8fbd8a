"""`Engine.outstanding_bounds` at every instant at once, for one state of an engine (issue 13: cost).

A least-outstanding router asks each replica that lags behind an arrival for (low, high) bounds on its count there,
at every arrival, and a replica's state changes only when it steps or is sent a request. Between those, its bounds
at an instant t depend on t only through the tokens a request can emit by t (`most`), so they are kept as a curve:
the count now (`high`, exact while no request can finish: before `most` reaches the fewest tokens any request has
left, `first`, an O(1) test) and the tokens left per request, sorted once. A request sent to it joins the curve
(`add`) instead of making it again.
"""

from __future__ import annotations

import math
from bisect import bisect_right, insort
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sim_core.fastpath import LiveLeft


class CountCurve:
    """(low, high) bounds on an engine's outstanding count once every tick that starts before t has run, for every
    t at or after its clock `now_s` (see `Engine.outstanding_bounds`, which answers from one): `high` requests are
    outstanding, and a request can finish by t only if its tokens left are at most `most(t)` (the ticks that can
    start before t, at least `min_tick_s` each, times `per_tick` tokens). The tokens left are those of a paused
    fast-path run (`live`, counted by `LiveLeft`) and `lefts` (every other request, sorted)."""

    __slots__ = ("now_s", "limit_s", "per_tick", "live", "lefts", "high", "first")

    def __init__(self, now_s: float, limit_s: float, per_tick: int, live: LiveLeft | None, num_live: int,
                 lefts: list[int]):  # fmt: skip
        self.now_s, self.limit_s, self.per_tick = now_s, limit_s, per_tick
        self.live, self.lefts = live, lefts
        lefts.sort()
        self.high = num_live + len(lefts)
        first = live.first if live is not None else math.inf
        self.first = min(first, lefts[0]) if lefts else first  # fewest tokens left (inf: none outstanding)

    def bounds(self, t_s: float, min_tick_s: float) -> tuple[int, int]:
        high = self.high
        # (no tick starts at or after limits.max_sim_time_s: the bounds there hold at any later instant; a trace
        # arrival at 1e18 s made the tick count overflow, a traceback instead of the run stopping at the limit)
        if t_s > self.limit_s:
            t_s = self.limit_s
        if t_s <= self.now_s:  # (its state then is its state now)
            return high, high
        most = (int((t_s - self.now_s) // min_tick_s) + 1) * self.per_tick  # tokens a request can emit by t_s
        if most < self.first:  # (no request can finish by then: the usual answer, without a count)
            return high, high
        num = self.live.num_within(most) if self.live is not None else 0
        if self.lefts:
            num += bisect_right(self.lefts, most)
        return high - num, high

    def add(self, tokens_left: int) -> None:
        """A request with `tokens_left` to emit was added to the engine (it arrives by every instant asked later)."""
        insort(self.lefts, tokens_left)
        self.high += 1
        if tokens_left < self.first:
            self.first = tokens_left
