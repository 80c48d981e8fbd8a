"""Closed-loop sessions in a deployment: the stream of arrivals the router sees.

First turns arrive at times fixed in advance (sorted by id). A later turn is sent its think time after the
previous turn's reply completes, on whatever instance ran it (a replica, or the decode instance in xPyD), as
on one engine (sim_core/sessions.py): the deployment collects finished turns after each engine step and
releases the next turns here. Arrivals leave in (time, id) order, first and released turns merged, so
every instance is added requests in non-decreasing arrival time and a 1-replica deployment sees exactly
the arrival order (and queue ranks) of the single engine.

Causality: a turn finishing on instance i at t_end is released at t_end + think >= now_i + min_tick_i +
min_think_s (no tick is shorter than an empty one), so no other instance may start a tick at or after that
bound while i has work (`release_bound_s`, part of each instance's horizon); i itself stops its coalesced
runs at its first completion (the engine does so whenever the workload releases on finish).
"""

from __future__ import annotations

import heapq
import math

import numpy as np

from sim_core.workload import Workload


class TurnFeed:
    def __init__(self, wl: Workload):
        self.arrival_s = wl.arrival_s  # (R,) inf until released; updated in place (the result reads it)
        self._first = np.flatnonzero(np.isfinite(wl.arrival_s)).tolist()  # ids of first turns, in arrival order
        self._ptr = 0
        self._released: list[tuple[float, int]] = []  # heap of (arrival_s, id)
        self._next_turn = wl.next_turn.tolist()
        self._think_s = wl.think_s.tolist()
        has_next = wl.next_turn >= 0
        self.min_think_s = float(wl.think_s[has_next].min()) if has_next.any() else math.inf

    def peek(self) -> tuple[float, int] | None:
        """(arrival time, id) of the next arrival to route, or None (none known now)."""
        first = (float(self.arrival_s[self._first[self._ptr]]), self._first[self._ptr]) if self._ptr < len(self._first) else None
        rel = self._released[0] if self._released else None
        if first is None or (rel is not None and rel < first):
            return rel
        return first

    def pop(self) -> int:
        nxt = self.peek()
        assert nxt is not None
        if self._released and self._released[0] == nxt:
            heapq.heappop(self._released)
        else:
            self._ptr += 1
        return nxt[1]

    def release(self, ids: list[int], finish_s: list[float]) -> None:
        """Requests `ids` finished at `finish_s`: their sessions' next turns are sent after the think time."""
        for r, end in zip(ids, finish_s):
            nxt = self._next_turn[r]
            if nxt >= 0:
                a = end + self._think_s[r]
                self.arrival_s[nxt] = a
                heapq.heappush(self._released, (a, nxt))
