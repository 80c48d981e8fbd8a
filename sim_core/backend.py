"""Where sweeps and plans run: a local process pool by default, a Ray cluster when asked.

Every task is a pure function of plain data (JSON strings in, JSON strings out), so the backend
cannot change a result: the same config gives the same bytes in this process, a worker process or a
Ray worker. `PointCache` keeps finished points on disk (bounded in bytes) so an interrupted search
resumes where it stopped. Ray is optional (`pip install -e ".[ray]"`) and imported only when used.

Choose a backend with `get_backend(ray=...)`: `ray=True` (or the env var RAY_ADDRESS) connects to
that cluster (`ray.init(address=...)`; "auto" = the local one), `ray="ray://host:10001"` to a
remote one; otherwise a local pool of `os.cpu_count()` processes.
"""

from __future__ import annotations

import functools
import hashlib
import json
import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from sim_core.budget import RunBudget, is_load_dependent_stop
from sim_core.config import SimConfig
from sim_core.costmodel import MemoryPlanError
from sim_core.engine import run_simulation
from sim_core.presets import PRESETS_DIR, PresetError
from sim_core.result import Summary

Progress = Callable[[int, int], None]  # (done, total)
Cancelled = Callable[[], bool]  # polled between completions; True stops the run


class SearchCancelled(RuntimeError):
    """The caller asked to stop; finished points are already in the cache."""


# ---------------------------------------------------------------- the unit of work
def simulate_point(cfg_json: str, budget: RunBudget | None = None) -> str:
    """Config JSON -> {"summary": ...} or {"error": message} as JSON (picklable, backend-neutral).
    `budget`: a server's ceiling per run (sim_core/budget.py); None for full control."""
    try:
        cfg = SimConfig.model_validate_json(cfg_json)
        # (an undefined percentile, NaN, is written as null: Summary reads it back as NaN, result._Metrics)
        return json.dumps({"summary": json.loads(run_simulation(cfg, budget=budget).summary.model_dump_json())})
    except (PresetError, MemoryPlanError, ValueError) as err:
        return json.dumps({"error": str(err)})


def decode_point(payload: str) -> tuple[Summary | None, str | None]:
    data = json.loads(payload)
    return (Summary.model_validate(data["summary"]), None) if "summary" in data else (None, data["error"])


def code_fingerprint(presets_dir: Path = PRESETS_DIR) -> str:
    """Hash of sim_core's source and of the model presets a run reads by name: a cached point is reused only by the
    code and the data that computed it. (A config holds its own values but for a speculative draft model, which it
    names: `speculative.Speculator` reads presets/models/<name>.json, so an edit there changes the result.)"""
    h = hashlib.sha256()
    root = Path(__file__).resolve().parent
    for path in sorted(root.rglob("*.py")):
        h.update(path.relative_to(root).as_posix().encode())
        h.update(path.read_bytes())
    for path in sorted((presets_dir / "models").glob("*.json")):
        h.update(f"presets/models/{path.name}".encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


# ---------------------------------------------------------------- on-disk cache of finished points
DEFAULT_CACHE_BYTES = 256 * 1024 * 1024


def default_cache_dir() -> Path:
    """$SIM_CORE_CACHE_DIR, else ~/.cache/llm-sched-explorer/points."""
    env = os.environ.get("SIM_CORE_CACHE_DIR")
    return Path(env) if env else Path.home() / ".cache" / "llm-sched-explorer" / "points"


@dataclass
class PointCache:
    """One file per finished point, keyed by (code fingerprint, canonical config JSON). When the
    directory grows past `max_bytes`, the least recently written files go first.

    A run a budget stopped for lack of time or memory (`is_load_dependent_stop`) is not a finished point: a busy
    minute must not fail it for good, so it is kept only under `stops_scope` when one is given, and read back only
    under the same scope. The Plan page scopes them to a browser session: pressing Plan again goes on past the
    candidates its budget already stopped instead of running each again for the whole budget (a P:D search of
    17,280 candidates settled ~6 per press, the same ones each time)."""

    directory: Path
    max_bytes: int = DEFAULT_CACHE_BYTES
    fingerprint: str = field(default_factory=code_fingerprint)
    stops_scope: str = ""

    def _path(self, cfg_json: str) -> Path:
        key = hashlib.sha256(f"{self.fingerprint}\n{cfg_json}".encode()).hexdigest()
        return self.directory / key[:2] / f"{key}.json"

    def get(self, cfg_json: str) -> str | None:
        try:
            return self._path(cfg_json).read_text()
        except (OSError, UnicodeDecodeError):
            return None

    def put(self, cfg_json: str, payload: str) -> None:
        path = self._path(cfg_json)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            # one temporary file per writer: threads of one process (sessions of the app, whose one-point
            # runs stay in-process) writing the same point must not truncate each other's file
            tmp = path.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")
            tmp.write_text(payload)
            tmp.replace(path)  # atomic: a reader never sees half a file
        except OSError:
            return  # a read-only or full disk costs speed, never a result
        if _trims_after(path.stem, len(payload), self.max_bytes):
            self._trim()

    def _trim(self) -> None:
        files = []
        for p in self.directory.glob("*/*.json"):
            try:
                info = p.stat()
            except OSError:  # another process (a sweep of another session) trimmed it after we listed it
                continue
            files.append((info.st_mtime, info.st_size, p))
        total = sum(size for _, size, _ in files)
        for _, size, path in sorted(files):
            if total <= self.max_bytes:
                break
            path.unlink(missing_ok=True)
            total -= size


# One write in TRIM_EVERY scans the cache to trim it, chosen by the point's key (the same writes on any run), unless a
# write is large against the bound (a small cache, a test's: then every one). A scan lists every file: 0.16 s a write
# with 20,000 files, ~1 s at the 256 MB bound's ~120,000, as long as many points take to simulate (a review). The
# bound is then kept to within TRIM_EVERY writes (on average; by key, so a run of them may go longer) of a
# 1/SMALL_WRITE_SHARE share: ~6 % past it.
TRIM_EVERY = 64
SMALL_WRITE_SHARE = 1024


def _trims_after(key: str, num_bytes: int, max_bytes: int) -> bool:
    """Whether the write of `num_bytes` under hex `key` scans the cache to trim it (see TRIM_EVERY)."""
    return num_bytes * SMALL_WRITE_SHARE > max_bytes or int(key[:8], 16) % TRIM_EVERY == 0


# ---------------------------------------------------------------- backends
# Python's own error names neither cause a user can act on. The first is the common one: forkserver workers import the
# driver's script again, so a script that searches at its top level runs the search in every worker at start-up.
BROKEN_POOL_MESSAGE = (
    "the local process pool's workers stopped before finishing. From a script, run the search under "
    "`if __name__ == \"__main__\":` (each worker imports the script again); otherwise a worker ran out of memory or "
    "was killed. `max_workers=1` runs the search in this process.")

class Backend(Protocol):
    """Runs picklable functions over items; `close()` releases workers (also via `with`)."""

    name: str

    def close(self) -> None: ...  # pragma: no cover

    def map(self, fn: Callable[[Any], Any], items: Sequence[Any], on_progress: Progress | None = None,
            cancelled: Cancelled | None = None) -> list[Any]:
        """[fn(x) for x in items], in order, run wherever this backend runs things."""
        ...  # pragma: no cover


# The most local worker processes, per CPU. A point is a CPU-bound simulation: past one process per CPU more only share
# the CPUs (a few per CPU still helps while some wait on the point cache's files), and each holds a run's memory.
# `--workers 1000` started one process per point, 32 for a 30-point sweep on a 2-CPU machine. Per CPU, not a fixed
# count, so that a large machine may still run one process per CPU.
WORKERS_PER_CPU = 4


def max_local_workers() -> int:
    """The most processes a local pool may start on this machine (WORKERS_PER_CPU per CPU)."""
    return WORKERS_PER_CPU * (os.cpu_count() or 1)


@dataclass
class LocalBackend:
    """A local process pool (`max_workers` 1: this process, no pool). The pool starts on first use
    and lives until `close()` (or the end of a `with` block), so a search's rounds reuse it."""

    max_workers: int = field(default_factory=lambda: os.cpu_count() or 1)
    name: str = "local"
    _pool: ProcessPoolExecutor | None = field(default=None, init=False, repr=False)

    def __enter__(self) -> LocalBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Release the pool and end its workers now. Between searches they are idle; after a cancelled or interrupted
        one they may be mid-task, and a shutdown alone would let each finish it (a search's worth of CPU that another
        session could use), or, when this process is about to exit, leave them waiting for work that never comes."""
        if self._pool is not None:
            pool, self._pool = self._pool, None
            workers = list((getattr(pool, "_processes", None) or {}).values())  # (Python 3.14's terminate_workers)
            pool.shutdown(wait=False, cancel_futures=True)
            for worker in workers:
                if worker.is_alive():
                    worker.terminate()

    def map(self, fn, items, on_progress=None, cancelled=None):
        items = list(items)
        if self.max_workers <= 1 or len(items) <= 1:
            out = []
            for i, x in enumerate(items):
                if cancelled and cancelled():
                    raise SearchCancelled(f"cancelled after {i} of {len(items)}")
                out.append(fn(x))
                if on_progress:
                    on_progress(i + 1, len(items))
            return out
        if self._pool is None:
            # forkserver: workers fork from a clean helper process, never from a threaded server (Streamlit)
            ctx = multiprocessing.get_context("forkserver")
            self._pool = ProcessPoolExecutor(max_workers=self.max_workers, mp_context=ctx)
        futures = [self._pool.submit(fn, x) for x in items]
        try:
            _wait_all(futures, on_progress, cancelled, lambda: [f.cancel() for f in futures])
            return [f.result() for f in futures]
        except BrokenProcessPool as exc:
            self.close()  # a broken pool takes no more work: the next search starts a fresh one
            raise RuntimeError(BROKEN_POOL_MESSAGE) from exc


def _wait_all(futures: list[Future], on_progress, cancelled, cancel_all) -> None:
    pending = set(futures)
    while pending:
        done, pending = wait(pending, timeout=0.2, return_when=FIRST_COMPLETED)
        if cancelled and cancelled():
            cancel_all()
            raise SearchCancelled(f"cancelled after {len(futures) - len(pending)} of {len(futures)}")
        if done and on_progress:
            on_progress(len(futures) - len(pending), len(futures))


@dataclass
class RayBackend:
    """Tasks on a Ray cluster. `address`: "auto", "ray://host:port", or None for a local Ray."""

    address: str | None = None
    name: str = "ray"

    def __post_init__(self) -> None:
        # (both were tracebacks from the CLI: a RuntimeError here, and whatever ray.init raised for an address it
        # cannot use, e.g. RAY_ADDRESS=ray://host:1 without ray[client]: a ValueError, or no cluster: ConnectionError)
        try:
            import ray
        except ImportError:
            raise PresetError('Ray is not installed: pip install -e ".[ray]" (or pip install "ray[client]": a ray:// address needs the client)') from None
        if not ray.is_initialized():
            check_reachable(self.address)
            # (ray.init puts in a SIGTERM handler of its own that exits with 15: the CLI's, which ends a search as Ctrl-C
            # does, with "interrupted" and exit 130, is put back)
            main = threading.current_thread() is threading.main_thread()
            sigterm = signal.getsignal(signal.SIGTERM) if main else None
            try:
                ray.init(address=self.address, ignore_reinit_error=True, log_to_driver=False,
                         runtime_env={"env_vars": {"PYTHONPATH": os.environ.get("PYTHONPATH", "")}} if self.address is None else None)  # fmt: skip
            except Exception as err:  # noqa: BLE001 (Ray's own errors: any of them means no cluster to run on)
                where = self.address or "a new local Ray"
                raise PresetError(f"cannot start or reach Ray at {where!r} (--ray or $RAY_ADDRESS): "
                                  f"{type(err).__name__}: {str(err)[:300]}") from None  # fmt: skip
            finally:
                if sigterm is not None:
                    signal.signal(signal.SIGTERM, sigterm)
        self._ray = ray

    def __enter__(self) -> RayBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """The cluster stays up (it is not ours); nothing to release here."""

    def map(self, fn, items, on_progress=None, cancelled=None):
        ray = self._ray
        remote = ray.remote(_apply)  # tasks are callables objects too: wrap them in a plain function
        fn_ref = ray.put(fn)
        # Each task checks that its worker runs the code this process runs: a node with another version filled the
        # shared cache, keyed by this process's fingerprint, with its own results (or errors), read back as current
        expected = code_fingerprint()
        refs = [remote.remote(fn_ref, x, expected) for x in items]
        pending, total = list(refs), len(refs)
        try:
            while pending:
                _, pending = ray.wait(pending, num_returns=1, timeout=0.2)
                if cancelled and cancelled():
                    for r in pending:
                        ray.cancel(r, force=True)
                    raise SearchCancelled(f"cancelled after {total - len(pending)} of {total}")
                if on_progress:
                    on_progress(total - len(pending), total)
            return ray.get(refs)
        except SearchCancelled:
            raise
        except Exception as err:  # noqa: BLE001 (a task's error, raised here as Ray's RayTaskError, or Ray's own)
            for r in pending:
                ray.cancel(r, force=True)
            # (an 80-line RayTaskError around the worker's traceback, exit 1: a node without sim_core, or another
            # version of it, is one line, what failed and what to do)
            raise ray_error(err) from None


# How long a Ray address's host and port are given to accept a connection before ray.init is tried: with a bare
# HOST:PORT nobody listens on, ray.init retried without end (205 s and counting, stderr filling with its warnings)
REACH_TIMEOUT_S = 5.0


def check_reachable(address: str | None, timeout_s: float = REACH_TIMEOUT_S) -> None:
    """PresetError unless something accepts a TCP connection at a `HOST:PORT` or `ray://HOST:PORT` address within
    `timeout_s` (None and "auto", which Ray resolves itself, pass)."""
    import socket

    if not address or address == "auto":
        return
    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if not sep or not port.isdigit():
        return  # (not HOST:PORT: ray.init names what is wrong with it)
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s).close()
    except (OSError, ValueError) as err:
        raise PresetError(f"cannot reach Ray at {address!r} (--ray or $RAY_ADDRESS): nothing accepted a connection at "
                          f"{host}:{port} within {timeout_s:g} s ({type(err).__name__}: {err})") from None  # fmt: skip


class CodeMismatch(RuntimeError):
    """A Ray worker runs other sim_core code or model presets than the process that sent it the task."""


@functools.cache
def _worker_fingerprint() -> str:
    """The fingerprint of this worker process's code, taken once, at its first task (later edits on disk, which the
    process has not imported, do not change it)."""
    return code_fingerprint()


def _apply(fn: Callable[[Any], Any], x: Any, expected: str | None = None) -> Any:
    if expected is not None and _worker_fingerprint() != expected:
        raise CodeMismatch(f"this worker runs other sim_core code or model presets (fingerprint {_worker_fingerprint()}) "
                           f"than the driver ({expected})")  # fmt: skip
    return fn(x)


def ray_error(err: BaseException) -> PresetError:
    """What an error a Ray task raised (a RayTaskError holds it as `cause`; its text is the worker's whole traceback)
    or Ray's own says: a PresetError of the task's (a config a probe cannot run) with its own text, as the local pool
    says it; any other on one line, its type and message, with what to install where the cause is the code a node
    runs (another version, or none: an import error). Saying that of every error blamed a bad config on the nodes."""
    cause = getattr(err, "cause", None)
    if isinstance(cause, PresetError):
        return PresetError(str(cause))
    lines = [line.strip() for line in str(cause if cause is not None else err).splitlines() if line.strip()]
    # (no cause: Ray's own error, a traceback whose last line says what failed)
    text = (" ".join(lines) if cause is not None else lines[-1] if lines else "")[:300]
    name = type(cause if cause is not None else err).__name__
    code = isinstance(cause, CodeMismatch | ImportError) or "No module named" in text
    return PresetError(f"a task failed on the Ray cluster: {name}: {text}" + (
        " (every node needs this project installed at the same version: pip install -e .)" if code else ""))


def get_backend(ray: bool | str | None = None, max_workers: int | None = None) -> Backend:
    """ray: a `ray://` / "auto" address or True (then $RAY_ADDRESS, else a local Ray); None/False:
    Ray only when $RAY_ADDRESS is set, otherwise the local process pool."""
    env = os.environ.get("RAY_ADDRESS")
    if isinstance(ray, str) and ray:
        return RayBackend(ray)
    if ray or env:
        return RayBackend(env or None)
    return LocalBackend(max_workers or (os.cpu_count() or 1))


# ---------------------------------------------------------------- cached point runs
@dataclass(frozen=True)
class _CachedTask:
    """Picklable: `fn(config JSON)` unless the cache has it (each worker reads/writes the cache).
    `tag` keeps different functions of the same config apart in the cache."""

    cache_dir: str | None
    cache_bytes: int
    fingerprint: str
    fn: Callable[[str], str] = simulate_point
    tag: str = ""
    stops_scope: str = ""  # PointCache.stops_scope

    def __call__(self, cfg_json: str) -> str:
        cache = PointCache(Path(self.cache_dir), self.cache_bytes, self.fingerprint) if self.cache_dir else None
        key = f"{self.tag}\n{cfg_json}" if self.tag else cfg_json
        stop_key = f"stopped in {self.stops_scope}\n{key}" if self.stops_scope else None
        for k in (key, stop_key) if cache else ():
            hit = cache.get(k) if k else None
            if hit is not None and _is_json_object(hit):  # (else damaged outside the cache, whose writes are atomic: a
                return hit  # miss, computed again and written over it; it crashed `capacity` with a JSONDecodeError)
        payload = self.fn(cfg_json)
        if not cache:
            return payload
        if not is_load_dependent_stop(payload):
            cache.put(key, payload)
        elif stop_key:  # (only in its scope: a busy minute must not fail this point for good elsewhere)
            cache.put(stop_key, payload)
        return payload


def _is_json_object(text: str) -> bool:
    """Whether a cached payload reads as the JSON object every cached function writes."""
    try:
        return isinstance(json.loads(text), dict)
    except ValueError:
        return False


def cached_map(
    fn: Callable[[str], str], tag: str, configs: Iterable[SimConfig], backend: Backend | None = None,
    cache: PointCache | None = None, on_progress: Progress | None = None, cancelled: Cancelled | None = None,
) -> list[str]:
    """[fn(config JSON)] on `backend`, each result read from / written to `cache` under `tag`."""
    task = _CachedTask(str(cache.directory) if cache else None, cache.max_bytes if cache else 0,
                       cache.fingerprint if cache else "", fn, tag, cache.stops_scope if cache else "")  # fmt: skip
    return (backend or LocalBackend()).map(task, [c.model_dump_json() for c in configs], on_progress, cancelled)


def run_points(
    configs: Iterable[SimConfig], backend: Backend | None = None, cache: PointCache | None = None,
    on_progress: Progress | None = None, cancelled: Cancelled | None = None, budget: RunBudget | None = None,
) -> list[tuple[Summary | None, str | None]]:
    """Simulate each config (cached points are read, not rerun) and return (summary, error) pairs in order.
    Under a `budget` the points are cached apart from unbudgeted ones (a budget can stop a run early)."""
    fn, tag = point_runner(budget)
    return [decode_point(p) for p in cached_map(fn, tag, configs, backend, cache, on_progress, cancelled)]


def point_runner(budget: RunBudget | None) -> tuple[Callable[[str], str], str]:
    """The function and cache tag of a point run under `budget` (None: unbudgeted; budgeted points are cached
    apart, as a budget can stop a run early)."""
    return (simulate_point, "") if budget is None else (functools.partial(simulate_point, budget=budget), f"budget {budget}")


class ProgressBar:
    """A one-line text progress bar on a stream (the CLI's); `__call__` is a Progress callback. On a stream that is
    not a terminal (`2>log`, CI) one line when done: the bar's carriage returns filled a log with its every step."""

    def __init__(self, label: str, stream: Any = None, width: int = 30) -> None:
        import sys

        self.label, self.stream, self.width, self.t0 = label, stream or sys.stderr, width, time.monotonic()
        self.live = bool(getattr(self.stream, "isatty", lambda: False)())

    def __call__(self, done: int, total: int) -> None:
        filled = int(self.width * done / max(total, 1))
        elapsed = time.monotonic() - self.t0
        line = f"{self.label} [{'#' * filled}{'.' * (self.width - filled)}] {done}/{total} {elapsed:,.0f} s"
        if self.live:
            self.stream.write(f"\r{line}")
        if done >= total:
            self.stream.write(("" if self.live else line) + "\n")
        self.stream.flush()
