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

Stale state (`RefreshedViews`): with `deployment.state_refresh_s`, least_kv routes each arrival on the instances
as they were at the last refresh instant, plus the requests sent since, as in an open loop.
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


class _View:
    """What least_kv reads of an instance (`Router.choose`): its KV usage and outstanding count."""

    __slots__ = ("kv", "usage", "num_outstanding")

    def __init__(self, usage: float, num_outstanding: int):
        self.kv = self  # (the router reads `engine.kv.usage`)
        self.usage = usage
        self.num_outstanding = num_outstanding


class RefreshedViews:
    """least_kv with `deployment.state_refresh_s` in a closed loop: each arrival is routed at its time (in time
    order, as turns are released) on every instance as it was at the last refresh instant, plus the requests
    sent since: its KV usage there and (requests sent so far) minus (requests finished there), as the open-loop
    router sees it at the start of the interval (deployment.py).

    NOTE: an instance's state at a refresh instant is its state once every tick that starts before it has run
    (and every transfer that ended by then released its blocks). The deployment calls `note` before each step of
    an instance and before each release, and stops every instance at the first tick that starts at or after the
    next refresh instant past the time its next tick can start (`next_instant_s`), so no tick has started at or
    after the instants between the last note and its clock: its state now is its state at each of them (an
    instance idling towards its next arrival passes instants without a tick). A replica may run on to the instant
    at or before the earliest time any arrival can still come (`instant_at_or_before_s`: the next turn known, every
    instance's next release): the instants it passes before that one are noted with a later state, and no arrival
    is routed on them.
    """

    def __init__(self, engines: list, refresh_s: float):
        self.engines = engines
        self.refresh_s = refresh_s
        self._seen: list[list[tuple[int, int, float, int]]] = [[] for _ in engines]  # (first k, last k, usage, finished)
        self._last_k = [-1] * len(engines)  # last refresh instant (index) noted per instance

    def next_instant_s(self, eng) -> float:
        """The first refresh instant after the time eng's next tick can start (its clock, or with nothing queued
        its next arrival): it runs no tick that starts at or after it before the next `note`."""
        now_s = eng.st.now_s  # (`is_busy`, `next_arrival_s`: a paused run's queue and next arrival, not its arrays')
        t = now_s if eng.is_busy else max(now_s, eng.next_arrival_s())
        return (math.floor(t / self.refresh_s) + 1) * self.refresh_s if math.isfinite(t) else math.inf

    def instant_at_or_before_s(self, t_s: float) -> float:
        """The refresh instant an arrival at t_s is routed on (inf for inf): a run may pass the instants before it
        unnoted when no arrival can come before t_s (their states, noted later, are never read)."""
        return math.floor(t_s / self.refresh_s) * self.refresh_s if math.isfinite(t_s) else math.inf

    def note(self, i: int, before_s: float = math.inf) -> None:
        """Instance i's state now is its state at the refresh instants since the last note, up to its clock (and
        before `before_s`: a prefill instance's KV blocks are released at the end of a transfer, between ticks)."""
        eng = self.engines[i]
        k = math.floor(eng.st.now_s / self.refresh_s)
        if before_s < math.inf:
            k = min(k, math.ceil(before_s / self.refresh_s) - 1)  # (a release at an instant is seen there)
        if k > self._last_k[i]:
            # (`live_kv_usage`: a paused run's KV usage is the run's; its finished count is the arrays': a replica's run
            # under sessions ends at its first finished turn, `fastpath` turn_out)
            self._seen[i].append((self._last_k[i] + 1, k, eng.live_kv_usage, eng.st.num_finished))
            self._last_k[i] = k

    def at(self, t_s: float) -> list[_View]:
        """Every instance as the router sees it at time t_s (its refresh instant's state, plus what was sent since).
        Arrivals are routed in time order, so older instants are dropped."""
        k = math.floor(t_s / self.refresh_s)
        out = []
        for i, eng in enumerate(self.engines):
            self.note(i)
            seen = self._seen[i]
            while seen and seen[0][1] < k:
                seen.pop(0)
            sent = getattr(eng, "num_added", 0)
            if seen and seen[0][0] <= k:
                _, _, usage, finished = seen[0]
            else:  # its clock has not reached the instant: it has no work, so its state then is its state now
                usage, finished = eng.live_kv_usage, eng.st.num_finished
            out.append(_View(usage, sent - finished))
        return out
