"""The worker pool's turns (app/components/worker.py): a freed slot goes to the session holding the fewest, a waiter can be
cancelled, and a run still busy after `background_after_s` moves to a background slot at a lower CPU priority and gives
its slot to the next run. (Results, timeouts and memory ceilings: tests/app/test_runner.py.)"""

from __future__ import annotations

import os
import sys
import threading
import time
import types

from app.browser import APP_SCRIPT
from app.components.worker import FairSlots, WorkerPool
from sim_core.budget import RunBudget


def _waiting(slots: FairSlots, n: int) -> None:
    """Until `n` acquirers wait (their tickets are in line)."""
    deadline = time.monotonic() + 10
    while len(slots._waiting) < n:
        assert time.monotonic() < deadline
        time.sleep(0.005)


def test_a_freed_slot_goes_to_the_session_holding_fewest_not_to_the_longest_queue():
    # One visitor's sweep holds both slots and queues more; a second visitor's one run waits behind it. FIFO (the
    # semaphore before) gave the freed slot to the sweep's next point; now it goes to the visitor holding none.
    slots = FairSlots(2)
    assert slots.acquire("sweep") and slots.acquire("sweep")
    got = []
    sweep_next = threading.Thread(target=lambda: got.append("sweep") if slots.acquire("sweep") else None)
    sweep_next.start()
    _waiting(slots, 1)
    other = threading.Thread(target=lambda: got.append("other") if slots.acquire("other") else None)
    other.start()
    _waiting(slots, 2)
    slots.release("sweep")
    other.join(10)
    assert got == ["other"]
    slots.release("sweep")
    sweep_next.join(10)
    assert got == ["other", "sweep"]
    slots.release("other"), slots.release("sweep")
    assert slots._free == 2 and slots._held == {} and slots._waiting == []


def test_between_equals_the_first_to_ask_goes_first():
    slots = FairSlots(1)
    assert slots.acquire("a")
    order = []
    threads = []
    for owner in ("b", "c", "d"):
        threads.append(threading.Thread(target=lambda o=owner: (slots.acquire(o), order.append(o), slots.release(o))))
        threads[-1].start()
        _waiting(slots, len(threads))
    slots.release("a")
    for t in threads:
        t.join(10)
    assert order == ["b", "c", "d"]


def test_a_cancelled_waiter_leaves_the_line_and_takes_nothing():
    slots = FairSlots(1)
    assert slots.acquire("a")
    stop = threading.Event()
    out = []
    t = threading.Thread(target=lambda: out.append(slots.acquire("b", stop.is_set)))
    t.start()
    _waiting(slots, 1)
    stop.set()
    t.join(10)
    assert out == [False] and slots._waiting == [] and slots._held == {"a": 1}


def _priority_after(seconds: float) -> int:
    """In the child: sleep, then say the process's niceness."""
    time.sleep(seconds)
    return os.getpriority(os.PRIO_PROCESS, 0)


def test_a_heavy_run_moves_to_the_background_and_the_next_run_starts_at_once():
    # One fresh slot: before, a 5 s run held it and every other visitor's 0.1 s run waited the 5 s out.
    pool = WorkerPool(RunBudget(), max_parallel=1, hard_timeout_s=60, slack_bytes=1 << 30, max_background=1,
                      background_after_s=0.3, background_nice=7)  # fmt: skip
    base = os.getpriority(os.PRIO_PROCESS, 0)
    heavy = []
    t = threading.Thread(target=lambda: heavy.append(pool.call(_priority_after, (3.0,), owner="heavy")))
    t.start()
    time.sleep(0.8)  # (past background_after_s: it has moved)
    t0 = time.monotonic()
    light = pool.call(_priority_after, (0.0,), owner="light")
    took = time.monotonic() - t0
    assert light.kind == "ok" and light.payload == base  # a fresh run keeps its priority
    assert t.is_alive() and took < 2.0  # it ran while the heavy one was still going
    t.join(30)
    assert heavy[0].kind == "ok" and heavy[0].payload == min(19, base + 7)
    assert pool._slots._free == 1 and pool._background._value == 1  # every slot back


def test_with_no_background_slot_free_a_heavy_run_keeps_its_slot():
    pool = WorkerPool(RunBudget(), max_parallel=1, hard_timeout_s=60, slack_bytes=1 << 30, max_background=0,
                      background_after_s=0.1)  # fmt: skip
    base = os.getpriority(os.PRIO_PROCESS, 0)
    assert pool.call(_priority_after, (0.5,)).payload == base
    assert pool._slots._free == 1


def test_a_cancelled_call_kills_its_child_and_returns_none():
    pool = WorkerPool(RunBudget(), max_parallel=1, hard_timeout_s=60, slack_bytes=1 << 30)
    t0 = time.monotonic()
    assert pool.call(_priority_after, (30.0,), cancelled=lambda: time.monotonic() - t0 > 0.5) is None
    assert time.monotonic() - t0 < 10 and pool._slots._free == 1


# What app/streamlit_app.py imports for the page (and the charting modules behind it).
PAGE_MODULES = ("app.state", "app.components.text", "app.components.cluster_timeline", "app.components.charts")


def _page_modules_here() -> list[str]:
    """In the child: which of the page's modules this process has loaded."""
    return [m for m in PAGE_MODULES if m in sys.modules]


def test_a_run_started_from_the_page_does_not_load_the_page_in_its_worker():
    # Streamlit runs the page as a stand-in __main__ module whose __file__ is app/streamlit_app.py, so multiprocessing
    # runs that file again (as __mp_main__) in every worker it starts from a page. Its imports at the top made every
    # run pay for the page's modules (Plotly among them: ~45 ms of CPU, 3x the default preset's simulation); they are
    # imported inside main(), which the file does not call there.
    stand_in = types.ModuleType("__main__")
    stand_in.__file__ = str(APP_SCRIPT)
    saved = sys.modules["__main__"]
    sys.modules["__main__"] = stand_in
    try:
        reply = WorkerPool(RunBudget(), max_parallel=1, hard_timeout_s=60, slack_bytes=1 << 30).call(_page_modules_here, ())
    finally:
        sys.modules["__main__"] = saved
    assert reply.kind == "ok", reply.payload
    assert reply.payload == []
