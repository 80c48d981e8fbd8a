"""Request state as one structure of NumPy arrays, plus the three queues (waiting, running, swapped).

NOTE: one progress model for every policy. A request has `prefill_target` tokens to compute
before it emits (its prompt, or prompt + emitted tokens after a recompute pre-emption) and
`computed` tokens whose KV exists. `computed < prefill_target` means prefill, otherwise decode:
no mode flag. A decode tick writes the KV of the last emitted token and samples the next one, so
in decode `computed == prefill_target + (emitted − emitted_at_prefill_end)`.

Queues hold request ids ordered by an int64 key (`order_key`): FCFS uses the id (ids follow
arrival), priority `priority·R + id`, shortest-prompt-first `prompt·R + id`. A pre-empted request
goes back under its own key, i.e. ahead of everything that arrived after it (requeue `by_key`, vLLM). With requeue
`append` (SGLang's waiting queue is a list its retracted requests are appended to) it goes behind every request of
its class waiting then (`key // class_span`: the priority, the prompt length; all of them under FCFS), and the
queue is in (class, entry) order rather than key order: each request enters at its class's end.
"""

from __future__ import annotations

import bisect
import math

import numpy as np

from sim_core.arrays import insert_sorted
from sim_core.types import IntArray, Status
from sim_core.workload import Workload


class SimState:
    def __init__(self, wl: Workload, queue_order: str, requeue: str = "by_key"):
        R = wl.num_requests
        self.num_requests = R
        self.queue_order = queue_order
        self.requeue_appends = requeue == "append"  # (scheduler.preemption_requeue; `push_waiting`)
        self.class_span = R  # a key's class (its queue order's first part) is key // class_span
        self.num_samples = wl.num_samples
        self.now_s = 0.0
        self.arrival_s = wl.arrival_s.copy()  # (R,) closed loop writes release times here
        self.prompt = wl.prompt_tokens  # (R,)
        self.output = wl.output_tokens  # (R,) per sample
        self.priority = wl.priority  # (R,)
        self.prefill_target = wl.prompt_tokens.copy()  # (R,)
        self.computed = np.zeros(R, dtype=np.int64)  # (R,) tokens with KV, per sequence
        self.emitted = np.zeros(R, dtype=np.int64)  # (R,) output tokens per sample
        self.status = np.full(R, Status.PENDING, dtype=np.int8)
        self.first_scheduled_s = np.full(R, np.nan)  # (R,) first admission
        self.prefill_start_s = np.full(R, np.nan)  # (R,) admission of the current prefill
        self.first_token_s = np.full(R, np.nan)
        self.last_token_s = np.full(R, np.nan)
        self.finish_s = np.full(R, np.nan)
        self.num_preemptions = np.zeros(R, dtype=np.int64)
        self.num_recomputed = np.zeros(R, dtype=np.int64)  # tokens whose KV was dropped and recomputed
        self.max_itl_s = np.zeros(R)
        ids = np.arange(R, dtype=np.int64)
        if queue_order == "priority":
            self.order_key = wl.priority * R + ids
        elif queue_order == "shortest_prompt_first":
            self.order_key = wl.prompt_tokens * R + ids
        else:
            self.order_key = ids
        self.waiting_keys = np.empty(0, dtype=np.int64)  # sorted keys (requeue append: sorted by class, `push_waiting`)
        self.swapped_keys = np.empty(0, dtype=np.int64)  # sorted keys
        self.running = np.empty(0, dtype=np.int64)  # ids in admission order
        self.next_arrival = 0  # ids below this have arrived
        self.next_release = min(R, int(np.isfinite(wl.arrival_s).sum()))  # closed loop
        self.num_finished = 0

    def add_request(self, k: int, arrival_s: float, prompt: int, output: int, priority: int) -> None:
        """Fill slot k (cluster hook: a router adds requests to an engine started empty, in arrival order)."""
        R = self.num_requests
        self.arrival_s[k] = arrival_s
        self.prompt[k] = prompt
        self.prefill_target[k] = prompt
        self.output[k] = output
        self.priority[k] = priority
        if self.queue_order == "priority":
            self.order_key[k] = priority * R + k
        elif self.queue_order == "shortest_prompt_first":
            self.order_key[k] = prompt * R + k

    # ------------------------------------------------------------ queues
    @staticmethod
    def _insert(keys: IntArray, new: IntArray) -> IntArray:
        if new.size == 0:
            return keys
        if new.size > 1:
            new = np.sort(new)
        if not keys.size or new[0] > keys[-1]:  # arrivals under FCFS: all behind the queue
            return np.concatenate([keys, new])
        return insert_sorted(keys, new, keys.searchsorted(new))  # (the method: np.searchsorted's wrapper costs ~3x the search)

    def key_to_id(self, keys: IntArray) -> IntArray:
        return keys % self.num_requests

    def arrival_rank(self, ids: IntArray) -> IntArray:
        """Of requests that have arrived, a key in the order they reached this engine: their ids, which follow
        arrival (a deployment instance's slots follow the order it was given requests; SessionState: the send order)."""
        return ids

    def class_end(self, keys):
        """The first key of the class after each key's (an int or an array): with requeue append a request enters the
        waiting queue just before it, behind every request of its class waiting (under FCFS: at the queue's end)."""
        span = self.class_span
        return (keys // span + 1) * span

    def push_waiting(self, ids: IntArray) -> None:
        """Requests join the waiting queue: arrivals (in arrival order) or requests pre-empted by recompute (in the
        order they were pre-empted). By key; with requeue append each at its class's end (`class_end`), in the order
        given: a victim behind every request of its class waiting, as SGLang's `waiting_queue.extend(retracted)`
        (`Scheduler._extend_requests_to_queue`); an arrival, whose id follows every waiting one, where its key
        would put it."""
        self.status[ids] = Status.WAITING
        keys, new = self.waiting_keys, self.order_key[ids]
        if not self.requeue_appends:
            self.waiting_keys = self._insert(keys, new)
        elif new.size:
            span = self.class_span
            if new.size > 1:
                new = new[np.argsort(new // span, kind="stable")]
            if not keys.size or new[0] // span >= keys[-1] // span:  # (FCFS: every request is of one class)
                self.waiting_keys = np.concatenate([keys, new])
            else:  # (new keys at one place keep their given order)
                self.waiting_keys = insert_sorted(keys, new, keys.searchsorted(self.class_end(new)))

    def push_waiting_into(self, queue: list[int], head: int, ids: list[int]) -> None:
        """`push_waiting` of these requests (in the order given) into the waiting queue held as a list of keys,
        `queue[head:]` (the scalar core's run's, `fastpath.run_ticks`), in place: each key where `join_queue` puts it,
        one after another. The same places as the array's: the keys are unique, so a key put by key goes where the
        merge puts it, and with requeue append a key of a class no later than the next one's lies before that one's
        class end, so later keys of a class follow earlier ones, as the stable sort by class leaves them (tests:
        test_state.py)."""
        status, order_key = self.status, self.order_key
        class_end = self.class_end if self.requeue_appends else None
        for r in ids:
            status[r] = Status.WAITING
            join_queue(queue, order_key.item(r), head, class_end)

    def push_swapped(self, ids: IntArray) -> None:
        self.status[ids] = Status.SWAPPED
        self.swapped_keys = self._insert(self.swapped_keys, self.order_key[ids])

    def push_swapped_into(self, queue: list[int], ids: list[int]) -> None:
        """`push_swapped` into the swapped queue held as a list of keys (the scalar core's run's), in place: by key
        (`join_queue` without requeue append: the swapped queue is always in key order)."""
        status, order_key = self.status, self.order_key
        for r in ids:
            status[r] = Status.SWAPPED
            join_queue(queue, order_key.item(r), 0)

    def admit_arrivals(self, upto_s: float | None = None) -> int:
        """Move requests that have arrived by now (or by `upto_s`) into the waiting queue; returns how many."""
        lo = self.next_arrival
        t = self.now_s if upto_s is None else upto_s
        # (Nothing due, most steps: the next arrival is later, or none is left. One element read answers what the
        # search below would, 0, for ~1 us less; `not <=` also holds for NaN, which the search sorts last.)
        if lo >= self.num_requests or not self.arrival_s.item(lo) <= t:
            return 0
        # (the array's own method: np.searchsorted's same call behind two wrappers, ~1 us more)
        hi = lo + int(self.arrival_s[lo:].searchsorted(t, side="right"))
        if hi > lo:
            self.push_waiting(np.arange(lo, hi, dtype=np.int64))
            self.next_arrival = hi
        return hi - lo

    def num_arrived_by(self, times_s: np.ndarray) -> IntArray:
        """Requests not yet in a queue that have arrived by each of these (sorted) times."""
        lo = self.next_arrival
        return np.searchsorted(self.arrival_s[lo:], times_s, side="right")

    def next_arrival_s(self) -> float:
        k = self.next_arrival  # (`.item`: a Python float without a NumPy scalar; a cluster asks this several times a pass)
        return self.arrival_s.item(k) if k < self.num_requests else math.inf

    def release_closed_loop(self, finish_s: float, count: int, think_s: float) -> None:
        """Closed loop: each finished request frees its client, who sends the next request."""
        hi = min(self.next_release + count, self.num_requests)
        self.arrival_s[self.next_release : hi] = finish_s + think_s
        self.next_release = hi

    @property
    def is_done(self) -> bool:
        return self.num_finished == self.num_requests


def join_queue(queue: list[int], key: int, head: int, class_end=None) -> None:
    """A request of this queue key joins the waiting queue held as a list of keys, `queue[head:]`, in place, where
    `SimState.push_waiting` puts it: by key, or with requeue append (`class_end`: `SimState.class_end`) before the
    first key of a later class, behind every request of its class waiting. (The list form: the scalar core's run
    keeps its queue as a list, `fastpath.run_ticks`; its arrivals join here and its victims by `push_waiting_into`.)"""
    if class_end is None:
        bisect.insort(queue, key, lo=head)
    else:
        queue.insert(bisect.bisect_left(queue, class_end(key), head), key)
