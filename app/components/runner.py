"""The one entry point from the UI into sim_core.

Every run is under the server's budget (app/server.toml, see app/settings.py) and, by default, in a
worker process (app/components/worker.py). Results are shared between sessions through one cache
bounded in bytes, keyed by a digest of the canonical config JSON; identical requests that arrive while a run is
in flight wait for it instead of starting their own. Errors come back as text, never raised.
"""

from __future__ import annotations

import hashlib
import logging
import math
import os
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, fields, is_dataclass
from typing import Any

import numpy as np
import streamlit as st

from app.components.pool_backend import InFlight, PoolBackend
from app.components.upload_ledger import UploadLedger
from app.components.worker import WorkerPool
from app.settings import ServerSettings, load_settings
from sim_core import MemoryPlanError, PresetError, SimConfig, SimResult, run_simulation
from sim_core.backend import Backend, get_backend
from sim_core.budget import RunBudget, is_load_dependent_stop
from sim_core.config import MAX_HASH_ID, Trace

log = logging.getLogger(__name__)
CONFIG_OVERHEAD_BYTES = 64 * 1024  # a result's parts besides its arrays and trace (config sections, summary, plan), generously


@dataclass(frozen=True)
class Outcome:
    result: SimResult | None
    error: str | None  # what went wrong and which knob fixes it
    killed: bool = False  # the worker's hard timeout or memory ceiling ended the run (the budgets' backstops)


# A run whose outcome depends on how busy the server was is kept this long only: long enough for the page view that
# asked (its charts and tables ask again, Learn asks once per claim; a page view spends at most [page] max_wall_s,
# 20 s, on simulations), then run again for whoever asks next, on a server that may be quieter.
LOAD_DEPENDENT_KEEP_S = 60.0


def is_load_dependent(out: Any) -> bool:
    """Whether `out` (an Outcome, a SimResult or anything else this cache holds) depends on the server's load: a run
    the wall-time or memory budget stopped (budget.is_load_dependent_stop, the rule the point cache follows), or one the
    worker killed. A stop at the tick or recorded-row limit falls on the same tick anywhere: kept like a finished run."""
    if isinstance(out, Outcome):
        return out.killed or (out.result is not None and is_load_dependent(out.result))
    summary = getattr(out, "summary", None)
    return is_load_dependent_stop(getattr(summary, "stopped_reason", None))


MAX_WALK_DEPTH = 12  # a deployment's result: result > instances > instance > result > timeline > columns > array


def _value_bytes(values: Any) -> int:
    """The size of a column's largest value: a float is 24 B, an int 28 B below 2^30 and 4 B more per 30 bits."""
    return sys.getsizeof(max(values))


def trace_bytes(trace: Trace) -> int:
    """Memory a config's trace holds. Its columns are Python lists (the config model's), and a parsed or unpickled list
    holds an object per value: the largest legal upload (100,000 rows, 4 million block hash ids) holds about 150 MB,
    not the 17 MB of its file. Estimated from lengths and largest values (C-speed sums, 40 ms for the largest
    trace, not a walk of every value); small ints that Python shares are counted too."""
    cols = [trace.arrival_s, trace.prompt_tokens, trace.output_tokens] + ([trace.priority] if trace.priority else [])
    total = sum(sys.getsizeof(col) + _value_bytes(col) * len(col) for col in cols)
    ids = trace.block_hash_ids
    if ids is not None:
        # (each id as the largest legal id, 36 B: the largest id of 4 million took 90 ms to find)
        total += sys.getsizeof(ids) + sum(map(sys.getsizeof, ids)) + sys.getsizeof(MAX_HASH_ID) * sum(map(len, ids))
    return total


def nbytes(obj: object) -> int:
    """Bytes held by a result: its NumPy arrays (dataclasses, dicts, lists of them, a deployment's instance results
    too), the trace of each config it holds, and CONFIG_OVERHEAD_BYTES for each result's other parts; an object shared
    (instances' configs share the trace of a model_copy) is counted once. A config counted as 64 KiB whatever its size
    let a 1 GiB cache hold 70 results of the largest upload, ~10 GB."""
    seen: set[int] = set()
    total = 0
    stack = [(obj, 0)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_WALK_DEPTH or id(node) in seen:
            continue
        seen.add(id(node))  # (every node is held by `obj` during the walk: its id is not reused)
        if isinstance(node, np.ndarray):
            total += node.nbytes
        elif isinstance(node, SimConfig):
            trace = node.workload.trace
            if trace is not None and id(trace) not in seen:
                seen.add(id(trace))
                total += trace_bytes(trace)
        elif is_dataclass(node) and not isinstance(node, type):
            if isinstance(node, SimResult):
                total += CONFIG_OVERHEAD_BYTES
            stack.extend((getattr(node, f.name), depth + 1) for f in fields(node))
        elif isinstance(node, dict):
            stack.extend((v, depth + 1) for v in node.values())
        elif isinstance(node, list | tuple) and node and not isinstance(node[0], int | float | str | bool):
            stack.extend((v, depth + 1) for v in node)
    return total


def outcome_bytes(out: Outcome) -> int:
    return CONFIG_OVERHEAD_BYTES if out.result is None else max(nbytes(out.result), CONFIG_OVERHEAD_BYTES)


class ResultCache:
    """Least-recently-used outcomes, at most `max_bytes` in total (a result larger than that is
    returned but not kept). Thread-safe; one run per key at a time. An outcome that depends on the server's load
    (`is_load_dependent`) is kept for LOAD_DEPENDENT_KEEP_S only."""

    def __init__(self, max_bytes: int, clock: Callable[[], float] = time.monotonic):
        self.max_bytes = max_bytes
        self.clock = clock
        self._items: OrderedDict[str, tuple[Any, int, float]] = OrderedDict()  # key -> (outcome, bytes, kept until)
        self._inflight = InFlight()  # one computation per key at a time; the others wait for its value
        self._lock = threading.Lock()
        self.num_bytes = 0

    def _hit(self, key: str) -> tuple[Any, int, float] | None:
        """The entry for `key` unless its time is up (then dropped); under the lock."""
        hit = self._items.get(key)
        if hit is not None and self.clock() > hit[2]:
            self.num_bytes -= self._items.pop(key)[1]
            return None
        if hit is not None:
            self._items.move_to_end(key)
        return hit

    def get(self, key: str) -> Outcome | None:
        with self._lock:
            hit = self._hit(key)
            return None if hit is None else hit[0]

    def put(self, key: str, out: Any, size_bytes: int | None = None) -> None:
        size = outcome_bytes(out) if size_bytes is None else size_bytes
        until = self.clock() + LOAD_DEPENDENT_KEEP_S if is_load_dependent(out) else math.inf
        with self._lock:
            if key in self._items:
                self.num_bytes -= self._items.pop(key)[1]
            # entries whose time is up go first (they went only when their own key was asked again: stale heavy results
            # counted against the bytes and pushed out results still good; a scan of at most a few hundred entries)
            now = self.clock()
            for old_key in [k for k, (_, _, until) in self._items.items() if now > until]:
                self.num_bytes -= self._items.pop(old_key)[1]
            if size > self.max_bytes:
                return
            self._items[key] = (out, size, until)
            self.num_bytes += size
            while self.num_bytes > self.max_bytes:
                _, (_, old, _) = self._items.popitem(last=False)
                self.num_bytes -= old

    def get_or_run(self, key: str, compute: Callable[[], Any], size: Callable[[Any], int] = outcome_bytes) -> Any:
        with self._lock:
            hit = self._hit(key)
        if hit is not None:
            return hit[0]

        def run() -> Any:
            with self._lock:  # (another caller's run may have ended between the look above and now)
                hit = self._hit(key)
            if hit is not None:
                return hit[0]
            out = compute()
            self.put(key, out, size(out))
            return out

        # callers of a key being run wait for its value (even one too large to keep: they ran it again before)
        return self._inflight.get_or_compute(key, run)

    def __len__(self) -> int:
        return len(self._items)


@dataclass(frozen=True)
class Server:
    settings: ServerSettings
    cache: ResultCache
    pool: WorkerPool | None
    uploads: UploadLedger  # the uploaded traces the sessions' configs hold ([uploads] max_bytes)
    points: InFlight  # Sweep, Plan and Compare points being computed, shared by the sessions (pool_backend.py)


@st.cache_resource(show_spinner=False)
def server() -> Server:
    """The server-wide settings, cache and worker pool (one per server process)."""
    s = load_settings()
    w = s.worker
    pool = (WorkerPool(s.run, w.max_parallel, w.hard_timeout_s, w.address_space_slack_bytes, w.max_background,
                       w.background_after_s, w.background_nice) if w.enabled else None)  # fmt: skip
    return Server(s, ResultCache(s.cache_max_bytes), pool, UploadLedger(s.uploads_max_bytes, trace_bytes), InFlight())


def points_backend() -> Backend:
    """Where a page's sweep, plan or seed points run: the server's worker pool (fair turns with every other session's
    runs; app/components/pool_backend.py), or Ray when $RAY_ADDRESS names a cluster, or this process when the server
    has no workers."""
    srv = server()
    if os.environ.get("RAY_ADDRESS") or srv.pool is None:
        return get_backend(max_workers=None if srv.pool is not None else 1)
    # (a task may be a capacity bisection of several runs: it cannot usefully outlive the page's budget)
    timeout_s = srv.settings.page_max_wall_s + srv.settings.worker.hard_timeout_s
    return PoolBackend(srv.pool, srv.points, session_owner(), srv.settings.worker.max_parallel, timeout_s)


def hold_config(cfg: SimConfig) -> None:
    """Count the trace of the config a session now holds in the server's upload ledger, while the config lives (a
    config derived from an upload is counted too, never refused: app/components/upload_ledger.py)."""
    server().uploads.hold(cfg)


def admit_upload(cfg: SimConfig) -> str | None:
    """None when an uploaded config's trace fits the server's [uploads] max_bytes with every session's (then held),
    else the message that says what is held and what fits."""
    return server().uploads.admit(cfg)


# A link's config JSON up to this size (a preset's whole config: ~5 KB) is parsed where it is read; a larger one carries
# a trace (100,000 rows: ~4 MB, ~1 s of parsing), parsed in a worker as an upload is. (By the JSON's size, not the link's:
# a 15,298-character link held that trace, and 4,443 characters one of 100,000 equal rows, a review.)
MAX_INLINE_LINK_JSON_BYTES = 64 * 1024


def decode_link_config(text: str) -> SimConfig:
    """A link's whole config (its `cfg=` parameter), as `state.decode_config` reads it, with what an uploaded file gets:
    parsed in a worker past MAX_INLINE_LINK_JSON_BYTES, and its trace counted in the server's upload ledger, refused
    past [uploads] max_bytes (a link could hand the server a 100,000-row trace that no limit counted). PresetError: why
    not."""
    from app.state import config_from_inflated, inflate_config

    def parse() -> SimConfig:
        data = inflate_config(text)  # (bounded, milliseconds)
        parsed = (config_from_inflated(data) if len(data) <= MAX_INLINE_LINK_JSON_BYTES
                  else check_upload(config_from_inflated, data, what="link"))  # fmt: skip
        if isinstance(parsed, str):
            raise PresetError(parsed)
        return parsed

    # One config per link, server-wide, read-only as the cached results' configs are: a room of 30 opening one link with
    # a trace parsed it 30 times at once and held 30 copies (66 MiB each for 100,000 rows: the 2 GiB of uploads full
    # after 31 sessions, a review); now one parse, which the others wait for, and one copy the ledger counts once.
    decoded = server().cache.get_or_run("link:" + hashlib.sha256(text.encode()).hexdigest(), parse,
                                        lambda cfg: CONFIG_OVERHEAD_BYTES + nbytes(cfg))  # fmt: skip
    if (refused := server().uploads.admit(decoded, source="link")) is not None:
        raise PresetError(f"The link's trace was not loaded: {refused}")
    return decoded


def session_owner() -> str | None:
    """Who a run is for, in the worker pool's fair turns: the browser session whose page asks (None outside a page)."""
    from streamlit.runtime.scriptrunner_utils.script_run_context import get_script_run_ctx

    ctx = get_script_run_ctx(suppress_warning=True)
    return ctx.session_id if ctx is not None else None


def _simulate(srv: Server, cfg: SimConfig) -> Outcome:
    budget = srv.settings.run
    try:
        if srv.pool is None:
            return Outcome(run_simulation(cfg, budget=budget), None)
        reply = srv.pool.run(cfg, owner=session_owner())  # (the config pickled, not its JSON: ~0.1 s where the JSON took ~1 s for an upload)
    except (MemoryPlanError, PresetError) as err:
        return Outcome(None, str(err))
    except Exception as err:  # never a traceback in the browser; the log keeps it for us
        log.exception("simulation failed")
        return Outcome(None, f"The simulation failed unexpectedly ({type(err).__name__}: {err}). "
                             "Please report the config (download it below).")  # fmt: skip
    if reply.kind == "ok":
        return Outcome(reply.payload, None)
    if reply.kind == "error":
        return Outcome(None, reply.payload)
    if reply.kind == "killed":  # (a busy server's kill: kept briefly, like a wall-time stop)
        return Outcome(None, f"Nothing to show: {reply.payload}. This server limits each run to {budget.describe()}; "
                             "make the run smaller (fewer requests or ticks), or run it with the command line, "
                             "which has no such limits.", killed=True)  # fmt: skip
    log.error("simulation failed in a worker: %s", reply.payload)
    return Outcome(None, f"The simulation failed unexpectedly ({reply.payload}). Please report the config (download it below).")


def run(cfg: SimConfig) -> Outcome:
    """Results are shared read-only between sessions: callers must not mutate them. Keyed by `config_key` (kept per
    config object): a rerun with a config it has seen serialises nothing."""
    from app.state import config_key, remember

    srv = server()
    key = config_key(cfg)
    out = srv.cache.get_or_run(key, lambda: _simulate(srv, cfg))
    if out.result is not None:  # the run's config (the worker's copy) is this config: the same key
        remember(out.result.config, "key", key)
    return out


# An upload's check is bounded by the file's size limit, not by the run budget: the largest legal config takes ~6 s of a
# worker (parse, validate, and what the pages derive from it), more on a busy machine; this only catches a stuck one.
UPLOAD_CHECK_TIMEOUT_S = 120.0


def check_upload(fn: Callable[..., Any], *args: Any, what: str = "file") -> Any:
    """`fn(*args)` (a check of an uploaded file, app/components/uploads.py, or of a link's config: `what`) in a worker
    process when the server has them, so its seconds are not the server interpreter's; what it returns, or the message
    of the ValueError it raised (the field, value and allowed range) as a str."""
    srv = server()
    if srv.pool is None:
        try:
            return fn(*args)
        except ValueError as err:  # (PresetError, InputError, TraceError, a ValidationError)
            return str(err)
    reply = srv.pool.call(fn, args, (ValueError,), timeout_s=UPLOAD_CHECK_TIMEOUT_S, what=f"check of the {what}",
                          owner=session_owner())  # fmt: skip
    if reply.kind in ("ok", "error"):
        return reply.payload
    if reply.kind == "killed":
        failed, then = f": {reply.payload}", "try again when the server is less busy"
    else:
        log.error("a %s's check failed in a worker: %s", what, reply.payload)
        failed, then = f" ({reply.payload})", f"please report the {what}"
    # (a file's session keeps its config; a link's falls back to the default scenario, which its reader says)
    said = f"Nothing was changed; {then}." if what == "file" else f"{then.capitalize()}."
    return f"The {what} could not be checked{failed}. {said}"


def frames(res: SimResult) -> dict:
    """`res.to_frames()` (per-request and per-tick tables), built once per config and kept in the
    same byte-bounded cache as the results (shared read-only)."""
    from app.state import config_key

    def size(tables: dict) -> int:
        return sum(int(df.memory_usage(index=True, deep=False).sum()) for df in tables.values())

    if is_load_dependent(res):  # a busy server's partial run is run again when asked later: its tables are not kept
        return res.to_frames()
    return server().cache.get_or_run("frames:" + config_key(res.config), res.to_frames, size)


def cached(cfg: SimConfig) -> Outcome | None:
    """The outcome if it is already computed (costs nothing), else None."""
    from app.state import config_key

    return server().cache.get(config_key(cfg))


class PageBudget:
    """Server time one page view may spend on new simulations (Sweep's points, say): cached
    results are free; a new run starts only while a full per-run budget still fits in the page's,
    so a page view never spends more than `max_wall_s` (plus result transfer) on simulations."""

    def __init__(self, max_wall_s: float | None = None):
        self.max_wall_s = server().settings.page_max_wall_s if max_wall_s is None else max_wall_s
        self.t0_s = time.perf_counter()

    @property
    def spent_s(self) -> float:
        return time.perf_counter() - self.t0_s

    @property
    def run_budget(self) -> RunBudget:
        """The server's budget for each run (for backends that run points themselves, e.g. Sweep's pool)."""
        return server().settings.run

    def exhausted(self) -> bool:
        """Whether a new run could overrun the page's time: it may take the whole per-run budget."""
        return self.spent_s + self.run_budget.max_wall_s > self.max_wall_s

    def run(self, cfg: SimConfig) -> Outcome:
        hit = cached(cfg)
        if hit is not None:
            return hit
        if self.exhausted():
            return Outcome(None, f"not run: this page may spend {self.max_wall_s:g} s of server time on new simulations "
                                 f"and {self.spent_s:.0f} s are used; fewer points or a smaller workload fit (results "
                                 "already computed are shown for free)")  # fmt: skip
        return run(cfg)
