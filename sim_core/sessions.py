"""Closed-loop multi-turn sessions: a turn is sent when the previous turn's reply is complete, plus a think time.

A chat user reads the reply before typing the next message, so turn t+1 of a session arrives at
finish(turn t) + think time, and its prompt is turn t's prompt + reply + new user tokens (fixed when
the workload is drawn, sim_core/workload.py). Under overload, later turns therefore arrive later
instead of piling up, and the previous turn's blocks are always cached (or evicted) by the time the
next turn looks them up.

The arrival times of later turns are known only during the run, so they are not in id order. This
state keeps first turns (known times, sorted) behind a pointer as SimState does, and released turns
in a heap; arrivals merge both by (time, id). Queue keys are given at arrival from the arrival rank,
so "first come" (and, with it, the admission order a pre-emption pops) means the actual send order:
    key = ((policy part) · R + arrival rank) · R + id     (policy part: 0, priority or prompt length).
Each arrival and release costs O(log of turns in flight); nothing scans past requests.
"""

from __future__ import annotations

import heapq
import itertools
import math

import numpy as np

from sim_core.state import SimState
from sim_core.types import IntArray
from sim_core.workload import Workload


class SessionState(SimState):
    """SimState whose later session turns arrive when released by their previous turn's completion."""

    def __init__(self, wl: Workload, queue_order: str, requeue: str = "by_key"):
        super().__init__(wl, queue_order, requeue)
        R = self.num_requests
        self.class_span = R * R  # (the policy part of the key, below)
        self._next_turn = wl.next_turn.tolist()
        self._think_s = wl.think_s.tolist()
        self._first = np.flatnonzero(np.isfinite(wl.arrival_s))  # (F,) first turns: ids follow their arrival
        self._first_s = self.arrival_s[self._first]  # (F,) sorted
        self._ptr = 0  # first turns below this have arrived
        self._released: list[tuple[float, int]] = []  # heap of (arrival_s, id) of released turns not yet arrived
        self._num_arrived = 0  # arrival rank of the next arrival
        self._policy_part = self.order_key // R  # 0 (fcfs), priority or prompt length
        # (the same as Python numbers: `take_arrival` reads one at a time)
        self._first_list, self._first_list_s = self._first.tolist(), self._first_s.tolist()
        self._num_first = self._first.size
        self._policy_of = self._policy_part.tolist()
        self.next_arrival = R  # the base class's pointer is not used
        self.next_release = R

    def admit_arrivals(self, upto_s: float | None = None) -> int:
        """Move the requests sent by now (or by `upto_s`) into the waiting queue, keyed by arrival rank."""
        t = self.now_s if upto_s is None else upto_s
        take = self.take_arrival
        key = take(t)
        if key < 0:  # (most steps: nothing due)
            return 0
        R = self.num_requests
        ids = [key % R]
        while (key := take(t)) >= 0:
            ids.append(key % R)
        self.push_waiting(np.array(ids, dtype=np.int64))  # (in arrival order)
        return len(ids)

    def take_arrival(self, upto_s: float) -> int:
        """The next request sent by `upto_s` (first turns and released turns merged by (time, id): arrival order, ties
        by id) leaves the arrivals with its queue key, from its arrival rank; returns that key (its id: key % R), or -1
        when none is sent by then. The one statement of the send order and its keys: `admit_arrivals` takes them one by
        one, and so does the scalar core (fastpath.run_ticks), which keeps its own queue."""
        heap, ptr = self._released, self._ptr
        if ptr < self._num_first and not (heap and heap[0] < (self._first_list_s[ptr], self._first_list[ptr])):
            if not self._first_list_s[ptr] <= upto_s:
                return -1
            r = self._first_list[ptr]
            self._ptr = ptr + 1
        elif heap and heap[0][0] <= upto_s:
            r = heapq.heappop(heap)[1]
        else:
            return -1
        R = self.num_requests
        key = (self._policy_of[r] * R + self._num_arrived) * R + r
        self._num_arrived += 1
        self.order_key[r] = key
        return key

    def untake(self, keys: list[int]) -> None:
        """Undo `take_arrival` for these keys, the last it gave (in the order given): each request is again to come, as if
        never taken. For a look-ahead that took the arrivals by the start of a service it then did not run (the
        batch-of-one chain, solo.py): tick by tick they are taken only at a tick's start."""
        R = self.num_requests
        for key in reversed(keys):
            r = key % R
            ptr = self._ptr
            if ptr and self._first_list[ptr - 1] == r:  # (first turns are taken in order: the last one taken)
                self._ptr = ptr - 1
            else:  # a released turn: back into the heap under the time its release wrote
                heapq.heappush(self._released, (self.arrival_s.item(r), r))
            self._num_arrived -= 1
            self.order_key[r] = self._policy_of[r] * R + r  # (its key before arrival: SimState's, no rank in it)

    def may_arrive(self, ids: list[int], num_first: int) -> list[int]:
        """Turns that may arrive next, for a look-ahead (the batch-of-one chain, solo.py): the released turns not yet
        arrived (by (time, id)), the next `num_first` first turns, then, level by level, the later turns of these and
        of `ids` (requests in a queue), each of which a finish may release."""
        nxt = self._next_turn
        level = [r for _, r in sorted(self._released)] + self._first_list[self._ptr : self._ptr + max(num_first, 0)]
        out = list(level)
        level = [nxt[r] for r in ids + level if nxt[r] >= 0]
        while level:
            out += level
            level = [nxt[r] for r in level if nxt[r] >= 0]
        return out

    def arrival_rank(self, ids: IntArray) -> IntArray:
        """Their arrival rank (later turns are not in id order): the middle part of their queue key."""
        R = self.num_requests
        return self.order_key[ids] // R % R

    def num_arrived_by(self, times_s: np.ndarray) -> IntArray:
        """Requests not yet in a queue that have arrived by each of these (sorted) times."""
        out = np.searchsorted(self._first_s[self._ptr :], times_s, side="right")
        if self._released:
            out = out + np.searchsorted(np.sort([a for a, _ in self._released]), times_s, side="right")
        return out

    def next_arrival_s(self) -> float:
        first = self._first_list_s[self._ptr] if self._ptr < self._num_first else math.inf
        return min(first, self._released[0][0]) if self._released else first

    def release_next_turns(self, done, finish_s) -> None:
        """Turns that just finished send their session's next turn after its think time (`done`: ids, an array or, from
        the scalar core, a list; `finish_s`: their finish time, or one per id)."""
        if isinstance(done, np.ndarray):
            done = done.tolist()
        if isinstance(finish_s, float):  # (one tick's end, the same for each: no arrays; np.float64 is a float too)
            ends = itertools.repeat(float(finish_s))
        else:
            ends = np.broadcast_to(np.asarray(finish_s, dtype=np.float64), (len(done),)).tolist()
        for r, end in zip(done, ends):
            nxt = self._next_turn[r]
            if nxt >= 0:
                a = end + self._think_s[r]
                self.arrival_s[nxt] = a
                heapq.heappush(self._released, (a, nxt))


class SlotState(SimState):
    """A deployment instance's state (`Engine.start_empty`) when sessions are closed loop: the engine's
    `_finish` hands finished turns (slots and finish times) here, and the deployment, which knows which
    request each slot holds, releases the next turns and routes them (sim_core/cluster/turns.py)."""

    def __init__(self, wl: Workload, queue_order: str, requeue: str = "by_key"):
        super().__init__(wl, queue_order, requeue)
        self.finished_turns: list[tuple[IntArray, np.ndarray]] = []  # (slots, finish times) not yet collected

    def release_next_turns(self, done: IntArray | list[int], finish_s) -> None:
        done = np.array(done, dtype=np.int64)  # (a copy: a general step passes its array, the fast path its list)
        ends = np.broadcast_to(np.asarray(finish_s, dtype=np.float64), done.shape).copy()
        self.finished_turns.append((done, ends))
