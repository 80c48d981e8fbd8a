"""Simulations (and the checks of uploaded files) in child processes: one heavy run cannot hold the server's
interpreter (the GIL) and slow every other session's page, and a run that overstays its budget is killed, not waited for.

Each run is a fresh process forked from a forkserver that has already imported sim_core (so a start
costs tens of milliseconds, not an import), with a hard address-space ceiling (RLIMIT_AS). No Streamlit
import here: this module is what the children load.

A workshop puts 30 sessions on one server, so who runs next matters as much as the isolation:
- At most `max_parallel` runs start at once, and a freed slot goes to the waiting session that has the
  fewest runs going (`FairSlots`), so one visitor's 32-point sweep does not queue the room behind it.
- A run still busy after `background_after_s` is heavy: it moves to one of `max_background` background
  slots at a lower CPU priority (nice +`background_nice`) and gives its slot back, so the next visitor's
  0.1 s run starts at once and wins the CPU over it. With no background slot free it keeps its slot.
"""

from __future__ import annotations

import dataclasses
import math
import multiprocessing
import os
import resource
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sim_core.budget import RunBudget

PRELOAD = ["sim_core", "sim_core.engine", "sim_core.cli", "pandas", "app.components.worker"]


@dataclass(frozen=True)
class WorkerReply:
    kind: str  # ok | error (a message for the visitor) | killed (time or memory backstop) | crash
    payload: Any  # what the function returned (a SimResult for a run) for ok, else the message
    peak_rss_bytes: int = 0  # the run process's peak resident memory (0 when it died)


def apply_each(fn: Callable[[Any], Any], items: list[Any]) -> list[Any]:
    """[fn(x) for x in items] in one child: a chunk of a sweep's or plan's points (app/components/pool_backend.py)."""
    return [fn(x) for x in items]


def _vm_bytes() -> int:
    try:
        with open("/proc/self/statm", "rb") as fh:
            return int(fh.read().split()[0]) * resource.getpagesize()
    except (OSError, ValueError, IndexError):
        return 0


def _map_configs(res: Any, fn: Callable[[Any], Any]) -> Any:
    """`res` (a SimResult) with `fn` applied to every config it holds: its own and its deployment instances' results'."""
    changes: dict[str, Any] = {"config": fn(res.config)}
    if getattr(res, "instances", None):
        changes["instances"] = tuple(dataclasses.replace(x, result=_map_configs(x.result, fn)) for x in res.instances)
    return dataclasses.replace(res, **changes)


def _without_trace(cfg: Any) -> Any:
    """`cfg` less its trace, for the trip back from the child. A model_copy, not config_with: the copy carries no new
    value (None where None is allowed) and is never run; `restore` puts back the validated config's own workload.
    Validating would walk the trace's 100,000 rows twice per run, the cost this trip is built to avoid."""
    wl = cfg.workload
    return cfg if wl.trace is None else cfg.model_copy(update={"workload": wl.model_copy(update={"trace": None})})


def _simulate(cfg: Any, budget: RunBudget) -> Any:
    """A run in the child. `cfg` is a SimConfig (pickled by the server: ~0.1 s for the largest uploaded trace, where its
    canonical JSON took ~1 s of the server's interpreter), or its JSON. The result goes back without its configs'
    trace, which the server has (`WorkerPool.run` puts it back): unpickling the largest one took ~0.5 s of the server's
    interpreter and held another ~150 MB per result."""
    from sim_core import SimConfig, run_simulation

    if isinstance(cfg, SimConfig):
        return _map_configs(run_simulation(cfg, budget=budget), _without_trace)
    return run_simulation(SimConfig.model_validate_json(cfg), budget=budget)


def _child(fn: Callable[..., Any], args: tuple, errors: tuple[type[BaseException], ...], budget: RunBudget, conn: Any,
           slack_bytes: int, what: str = "run") -> None:
    """Runs in the child process: `fn(*args)` under the memory ceiling, one reply (an exception of `errors` is a message
    for the visitor), exit."""
    try:
        vm = _vm_bytes()
        if vm:  # hard ceiling: what the process maps now, plus the budget, plus slack for the reply
            limit = vm + budget.max_bytes + slack_bytes
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        try:
            reply = WorkerReply("ok", fn(*args))
        except errors as err:
            reply = WorkerReply("error", str(err))
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB
        conn.send(WorkerReply(reply.kind, reply.payload, peak))
    except MemoryError:
        conn.send(WorkerReply("killed", f"the {what} needed more than the server's memory budget ({budget.max_bytes >> 20:,} MiB)"))
    except BaseException as err:  # reported to the page; the server's log keeps the type
        conn.send(WorkerReply("crash", f"{type(err).__name__}: {err}"))
    finally:
        conn.close()


class FairSlots:
    """`num` slots shared by owners (a session each): a free slot goes to the waiting owner with the fewest slots
    held, first come first served between equals. Thread-safe; owners are any hashable (None is one owner)."""

    def __init__(self, num: int):
        self._cond = threading.Condition()
        self._free = num
        self._held: dict[Any, int] = {}  # owner -> slots it holds (owners holding none are dropped)
        self._waiting: list[tuple[int, Any]] = []  # (ticket, owner) in arrival order
        self._tickets = 0

    def _next(self) -> int:
        """The ticket the next free slot goes to: fewest slots held, then the earliest."""
        held = self._held
        return min(self._waiting, key=lambda w: (held.get(w[1], 0), w[0]))[0]

    def acquire(self, owner: Any = None, cancelled: Callable[[], bool] | None = None) -> bool:
        """Wait for a slot (False if `cancelled()` turned true first, polled every 0.2 s)."""
        with self._cond:
            ticket = self._tickets
            self._tickets += 1
            self._waiting.append((ticket, owner))
            try:
                while not (self._free > 0 and self._next() == ticket):
                    if cancelled is not None and cancelled():
                        return False
                    self._cond.wait(0.2 if cancelled is not None else None)
            finally:
                self._waiting.remove((ticket, owner))
                self._cond.notify_all()  # (the next in line may be another waiter now)
            self._free -= 1
            self._held[owner] = self._held.get(owner, 0) + 1
            return True

    def release(self, owner: Any = None) -> None:
        with self._cond:
            self._free += 1
            left = self._held[owner] - 1
            if left:
                self._held[owner] = left
            else:
                del self._held[owner]
            self._cond.notify_all()


def _lower_priority(pid: int, nice: int) -> None:
    """Lower a child's CPU priority (raising niceness needs no privilege); a child that already ended is no error."""
    try:
        os.setpriority(os.PRIO_PROCESS, pid, min(19, os.getpriority(os.PRIO_PROCESS, pid) + nice))
    except (OSError, AttributeError):  # (gone, or a platform without priorities: it only stays at its priority)
        pass


class WorkerPool:
    """Runs simulations (`run`) and other work (`call`) in a child process each; thread-safe; at most `max_parallel`
    start at once, fairly between owners, and heavy ones move to `max_background` background slots (module docstring)."""

    def __init__(self, budget: RunBudget, max_parallel: int, hard_timeout_s: float, slack_bytes: int,
                 max_background: int = 0, background_after_s: float = 0.5, background_nice: int = 10):  # fmt: skip
        self.budget = budget
        self.hard_timeout_s = hard_timeout_s
        self.slack_bytes = slack_bytes
        self._slots = FairSlots(max_parallel)
        self._background = threading.BoundedSemaphore(max_background) if max_background > 0 else None
        self.background_after_s, self.background_nice = background_after_s, background_nice
        self._ctx = multiprocessing.get_context("forkserver")
        # Children re-run the parent's main module unless it is already loaded in the forkserver (`python -m x` mains
        # are skipped): outside a page's script that is `streamlit run`'s console script, which imports
        # streamlit.web.cli; while a page's script runs, Streamlit's stand-in __main__ is app/streamlit_app.py, run again
        # as __mp_main__ in every child, so that file keeps its page imports inside main() (tests/app/test_worker.py).
        extra = ["streamlit.web.cli"] if "streamlit" in sys.modules else []
        self._ctx.set_forkserver_preload(PRELOAD + extra)

    def run(self, cfg: Any, owner: Any = None) -> WorkerReply:
        """Simulate `cfg` (a SimConfig, or its JSON) under the budget. A SimConfig's result holds `cfg`'s own workload
        (its trace not sent back: the same lists, not a copy). `owner`: who asks (the session), for fair turns."""
        from sim_core import MemoryPlanError, PresetError, SimConfig

        reply = self.call(_simulate, (cfg, self.budget), (MemoryPlanError, PresetError), owner=owner)
        if reply.kind != "ok" or not isinstance(cfg, SimConfig) or cfg.workload.trace is None:
            return reply
        bare = _without_trace(cfg).workload

        def restore(c: Any) -> Any:  # (every config of the run has cfg's workload section: pool configs copy it; see _without_trace)
            return c.model_copy(update={"workload": cfg.workload}) if c.workload == bare else c

        return dataclasses.replace(reply, payload=_map_configs(reply.payload, restore))

    def call(self, fn: Callable[..., Any], args: tuple, errors: tuple[type[BaseException], ...] = (),
             timeout_s: float | None = None, what: str = "run", owner: Any = None,
             cancelled: Callable[[], bool] | None = None) -> WorkerReply | None:
        """`fn(*args)` in a child under the memory ceiling, killed after `timeout_s` (default the hard timeout); `fn` and
        its arguments and result are pickled (`fn` a module-level function the child can import). `what` names the
        work in the messages ("run", "check of the file"); `owner` is who asks (fair turns). None when `cancelled()`
        (polled every 0.2 s) turned true first: while it waited for a slot, or while its child ran (then killed)."""
        timeout_s = self.hard_timeout_s if timeout_s is None else timeout_s
        if not self._slots.acquire(owner, cancelled):
            return None
        slot = "fresh"
        try:
            recv, send = self._ctx.Pipe(duplex=False)
            proc = self._ctx.Process(target=_child, args=(fn, args, errors, self.budget, send, self.slack_bytes, what),
                                     daemon=True)
            proc.start()
            send.close()  # the child holds the only writer: EOF when it dies
            try:
                now = time.monotonic()
                deadline_s = now + timeout_s
                background_at_s = now + self.background_after_s if self._background is not None else math.inf
                while not recv.poll(max(0.0, min(deadline_s, background_at_s, now + (0.2 if cancelled else math.inf)) - now)):
                    now = time.monotonic()
                    if cancelled is not None and cancelled():
                        proc.kill()  # (its result would be thrown away: the CPU goes to someone else's run)
                        return None
                    if now >= background_at_s:
                        background_at_s = math.inf
                        if self._background.acquire(blocking=False):
                            _lower_priority(proc.pid, self.background_nice)  # heavy: behind every fresh run for the CPU
                            self._slots.release(owner)
                            slot = "background"
                    if now >= deadline_s:
                        proc.kill()
                        return WorkerReply("killed", f"the {what} was still busy after {timeout_s:g} s and was stopped")
                try:
                    return recv.recv()
                except (EOFError, OSError):
                    proc.join(5)
                    return WorkerReply("killed", f"the {what} process ended without a result (exit code {proc.exitcode}); "
                                                 "most likely it ran out of its memory budget")  # fmt: skip
            finally:
                recv.close()
                proc.join(5)
                if proc.is_alive():
                    proc.kill()
                    proc.join(1)
        finally:
            if slot == "fresh":
                self._slots.release(owner)
            else:
                self._background.release()
