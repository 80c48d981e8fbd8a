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
        # the requests with at most `most` tokens left may finish by t_s: the run's and the others' (counted here, not
        # in a method of their own: a call fewer at each bound that is not exact, ~1.4 per arrival; issue 13: cost)
        live = self.live
        low = high - live.num_within(most) if live is not None else high
        return (low - bisect_right(self.lefts, most) if self.lefts else low), high

    def add(self, tokens_left: int) -> None:
        """A request with `tokens_left` to emit was added to the engine (it arrives by every instant asked later)."""
        insort(self.lefts, tokens_left)
        self.high += 1
        if tokens_left < self.first:
            self.first = tokens_left


class LiveKvCurve:
    """`Engine.kv_used_bounds` at every instant past the clock of a paused fast-path run, for one state of it (see
    `Engine.live_kv_curve` for the rule): `used` blocks in use and `num_free` free at its clock; `num_decoders`
    decoders, each taking at most ceil((most + 1 + width) / bs) more blocks by t, whose finishes free at most the
    blocks `live.blocks_within` counts; `others` (prompt, output, blocks held) of the prefilling, queued and added
    requests, each growing to at most its prompt plus `most` tokens (its whole context at most) plus the lookahead
    `width`, freeing what it holds if it may finish. A request sent to it joins `others` (`add`). (A recompute victim's
    entry is its prefill target, the prompt and what it emitted, and the output it has left: `Engine.live_kv_curve`.)"""

    __slots__ = ("now_s", "limit_s", "per_tick", "used", "num_free", "num_decoders", "live", "others", "prompt",
                 "output", "bs", "width")  # fmt: skip

    def __init__(self, now_s: float, limit_s: float, per_tick: int, used: int, num_free: int, num_decoders: int,
                 live: LiveLeft, others: list[tuple[int, int, int]], prompt, output, bs: int, width: int):  # fmt: skip
        self.now_s, self.limit_s, self.per_tick = now_s, limit_s, per_tick
        self.used, self.num_free, self.num_decoders, self.live, self.others = used, num_free, num_decoders, live, others
        self.prompt, self.output, self.bs, self.width = prompt, output, bs, width

    def bounds(self, t_s: float, min_tick_s: float) -> tuple[int, int] | None:
        used = self.used
        if t_s > self.limit_s:  # (as in CountCurve)
            t_s = self.limit_s
        if t_s <= self.now_s:
            return used, used
        most = (int((t_s - self.now_s) // min_tick_s) + 1) * self.per_tick
        bs, width = self.bs, self.width
        grow = self.num_decoders * -(-(most + 1 + width) // bs)
        freed = 0
        for p, o, held in self.others:
            grow += max(-(-(min(o, most) + p + width) // bs) - held, 0)
            if o <= most:  # (it may finish by then: o is what it has left to emit)
                freed += held
        if grow > self.num_free:  # (a decode might run short of a block: pre-emption, no cheap bound)
            return None
        return used - freed - self.live.blocks_within(most, self.prompt, self.output, bs), used + grow

    def add(self, prompt: int, output: int) -> None:
        """A request was added to the engine (it is queued by every instant asked later, holding no block)."""
        self.others.append((prompt, output, 0))
