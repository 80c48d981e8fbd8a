"""sim_core/state.py: the queues held as lists of keys (`SimState.push_waiting_into`, `push_swapped_into`,
`join_queue`: the scalar core's run keeps its queues so, fastpath.run_ticks) against the state's arrays
(`push_waiting`, `push_swapped`): the same keys in the same places, the same statuses."""

from __future__ import annotations

import copy

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from sim_core.state import SimState
from sim_core.types import Status
from sim_core.workload import Workload


def _state(classes: list[int], order: str, requeue: str) -> SimState:
    R = len(classes)
    cls = np.array(classes, dtype=np.int64)
    wl = Workload(arrival_s=np.zeros(R), prompt_tokens=cls + 1, output_tokens=np.ones(R, dtype=np.int64), priority=cls,
                  class_idx=np.full(R, -1), num_samples=1, closed_loop_think_s=None)  # fmt: skip
    return SimState(wl, order, requeue)


orders = st.sampled_from(["fcfs", "priority", "shortest_prompt_first"])
requeues = st.sampled_from(["by_key", "append"])


@given(st.lists(st.integers(0, 3), min_size=1, max_size=24), orders, requeues, st.integers(0, 3), st.data())
@settings(max_examples=300, deadline=None)
def test_push_waiting_into_a_list_puts_each_key_where_the_array_puts_it(classes, order, requeue, head, data):
    """Arrivals (several at once), admissions from the queue's head (the run moves `head`) and pre-emptions (one victim
    or several, in the order pre-empted: with requeue append out of key order) in a drawn sequence: after each, the
    list's `queue[head:]` is the array's queue, the keys before `head` untouched, and the statuses the array's."""
    R = len(classes)
    arr = _state(classes, order, requeue)
    lst = copy.deepcopy(arr)
    before = [-7] * head  # (a run's admitted keys, which the list form must not read or move)
    queue = list(before)
    arrived, running = 0, []
    for _ in range(data.draw(st.integers(1, 12))):
        op = data.draw(st.sampled_from(["arrive", "admit", "preempt"]))
        if op == "arrive" and arrived < R:
            k = data.draw(st.integers(1, R - arrived))
            ids = list(range(arrived, arrived + k))
            arrived += k
        elif op == "admit" and arr.waiting_keys.size:
            k = data.draw(st.integers(1, arr.waiting_keys.size))
            running += arr.key_to_id(arr.waiting_keys[:k]).tolist()
            arr.waiting_keys = arr.waiting_keys[k:]
            del queue[head : head + k]
            arr.status[running] = lst.status[running] = Status.RUNNING
            continue
        elif op == "preempt" and running:
            ids = data.draw(st.lists(st.sampled_from(running), min_size=1, max_size=4, unique=True))
            running = [r for r in running if r not in ids]
        else:
            continue
        arr.push_waiting(np.array(ids, dtype=np.int64))
        lst.push_waiting_into(queue, head, ids)
        assert queue[head:] == arr.waiting_keys.tolist() and queue[:head] == before
        assert np.array_equal(lst.status, arr.status)


@given(st.lists(st.integers(0, 3), min_size=1, max_size=16), orders, st.data())
@settings(max_examples=200, deadline=None)
def test_push_swapped_into_a_list_puts_each_key_where_the_array_puts_it(classes, order, data):
    """Victims swapped out (in the order pre-empted) and swapped in again from the queue's head: the list is the
    array's queue, by key, and the statuses the array's."""
    arr = _state(classes, order, "by_key")
    lst = copy.deepcopy(arr)
    queue: list[int] = []
    out: set[int] = set()
    for _ in range(data.draw(st.integers(1, 10))):
        if data.draw(st.booleans()) and arr.swapped_keys.size:  # (a swap-in takes the head)
            k = data.draw(st.integers(1, arr.swapped_keys.size))
            out -= set(arr.key_to_id(arr.swapped_keys[:k]).tolist())
            arr.swapped_keys = arr.swapped_keys[k:]
            del queue[:k]
            continue
        ids = data.draw(st.lists(st.sampled_from([r for r in range(len(classes)) if r not in out] or [-1]), max_size=3, unique=True))
        ids = [r for r in ids if r >= 0]
        out.update(ids)
        arr.push_swapped(np.array(ids, dtype=np.int64))
        lst.push_swapped_into(queue, ids)
        assert queue == arr.swapped_keys.tolist()
        assert np.array_equal(lst.status, arr.status)
