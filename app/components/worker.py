"""Simulations (and the checks of uploaded files) in child processes: one heavy run cannot hold the server's
interpreter (the GIL) and slow every other session's page, and a run that overstays its budget is killed, not waited for.

Each run is a fresh process forked from a forkserver that has already imported sim_core (so a start
costs tens of milliseconds, not an import), with a hard address-space ceiling (RLIMIT_AS). At most
`max_parallel` run at once. No Streamlit import here: this module is what the children load.
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import resource
import sys
import threading
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


class WorkerPool:
    """Runs simulations (`run`) and other work (`call`) in a child process each; thread-safe; at most `max_parallel` at once."""

    def __init__(self, budget: RunBudget, max_parallel: int, hard_timeout_s: float, slack_bytes: int):
        self.budget = budget
        self.hard_timeout_s = hard_timeout_s
        self.slack_bytes = slack_bytes
        self._slots = threading.BoundedSemaphore(max_parallel)
        self._ctx = multiprocessing.get_context("forkserver")
        # Children re-run the server's main module unless it is already loaded in the forkserver:
        # `streamlit run` (a console script) imports streamlit.web.cli; `python -m x` mains are skipped.
        extra = ["streamlit.web.cli"] if "streamlit" in sys.modules else []
        self._ctx.set_forkserver_preload(PRELOAD + extra)

    def run(self, cfg: Any) -> WorkerReply:
        """Simulate `cfg` (a SimConfig, or its JSON) under the budget. A SimConfig's result holds `cfg`'s own workload
        (its trace not sent back: the same lists, not a copy)."""
        from sim_core import MemoryPlanError, PresetError, SimConfig

        reply = self.call(_simulate, (cfg, self.budget), (MemoryPlanError, PresetError))
        if reply.kind != "ok" or not isinstance(cfg, SimConfig) or cfg.workload.trace is None:
            return reply
        bare = _without_trace(cfg).workload

        def restore(c: Any) -> Any:  # (every config of the run has cfg's workload section: pool configs copy it)
            return c.model_copy(update={"workload": cfg.workload}) if c.workload == bare else c

        return dataclasses.replace(reply, payload=_map_configs(reply.payload, restore))

    def call(self, fn: Callable[..., Any], args: tuple, errors: tuple[type[BaseException], ...] = (),
             timeout_s: float | None = None, what: str = "run") -> WorkerReply:
        """`fn(*args)` in a child under the memory ceiling, killed after `timeout_s` (default the hard timeout); `fn` and
        its arguments and result are pickled (`fn` a module-level function the child can import). `what` names the
        work in the messages ("run", "check of the file")."""
        timeout_s = self.hard_timeout_s if timeout_s is None else timeout_s
        with self._slots:
            recv, send = self._ctx.Pipe(duplex=False)
            proc = self._ctx.Process(target=_child, args=(fn, args, errors, self.budget, send, self.slack_bytes, what),
                                     daemon=True)
            proc.start()
            send.close()  # the child holds the only writer: EOF when it dies
            try:
                if not recv.poll(timeout_s):
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
