"""What the sessions' uploaded traces hold, server-wide, and the limit a new upload must fit under.

A session keeps its config, and a config with an uploaded trace holds its columns as Python lists: the largest legal
upload (100,000 rows, 4 million block hash ids) holds about 150 MB. Thirty sessions that each uploaded one would hold
4.5 GB, past anything a workshop server plans for, and no cache bound sees it (the result cache counts only what it
keeps). So the server counts the trace of every config a session holds as its own (`hold`), for as long as the
config lives (a weak reference: a session that moves on or ends releases it), and refuses an upload that would take
the total past `max_bytes` ([uploads] max_bytes in app/server.toml), with a message saying how much is held and what
fits. Configs derived from an upload (a knob moved) are held too but never refused: nothing the user had is lost.

No Streamlit here: the server object (app/components/runner.py `server`) owns one ledger.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from typing import Any


def _size(num_bytes: float) -> str:
    if num_bytes >= 2**30:
        return f"{num_bytes / 2**30:.1f} GiB"
    return f"{num_bytes / 2**20:,.0f} MiB" if num_bytes >= 2**20 else f"{num_bytes / 2**10:,.0f} KiB"


class UploadLedger:
    """Bytes held by live configs with a trace, at most one entry per config object. Thread-safe."""

    def __init__(self, max_bytes: int, size_of: Callable[[Any], int]):
        """`size_of(trace) -> bytes` (runner.trace_bytes): what a config's trace holds."""
        self.max_bytes = max_bytes
        self._size_of = size_of
        self._lock = threading.Lock()
        # id(config) -> (a weak reference to it, bytes), while it lives. By identity, not by value: a config's hash and
        # equality walk its whole trace, and two equal configs that two sessions hold are held twice
        self._held: dict[int, tuple[weakref.ref, int]] = {}
        self._num_bytes = 0
        # configs collected since: (id, its reference). A weak reference's callback runs wherever the last reference
        # went, in any thread and possibly while this thread holds the lock: it only appends (atomic), and the next
        # call under the lock settles the list
        self._gone: list[tuple[int, weakref.ref]] = []

    def _settle(self) -> None:
        """Under the lock: drop the entries of configs collected since the last call."""
        while self._gone:
            key, ref = self._gone.pop()
            entry = self._held.get(key)
            if entry is not None and entry[0] is ref:  # (not a later config that reused the id)
                del self._held[key]
                self._num_bytes -= entry[1]

    @property
    def num_bytes(self) -> int:
        """Bytes the live configs' traces hold."""
        with self._lock:
            self._settle()
            return self._num_bytes

    def holds(self, cfg: Any) -> bool:
        """Whether this config object's trace is counted."""
        entry = self._held.get(id(cfg))
        return entry is not None and entry[0]() is cfg

    def _hold(self, cfg: Any, limit: int | None) -> tuple[int, int] | None:
        """Count `cfg`'s trace until the config is collected, unless that would pass `limit`: then (its bytes, the
        bytes held) and nothing is counted. None also for a config without a trace or already held."""
        trace = cfg.workload.trace
        if trace is None or self.holds(cfg):
            return None
        size = self._size_of(trace)
        with self._lock:
            self._settle()
            if self.holds(cfg):
                return None
            if limit is not None and self._num_bytes + size > limit:
                return size, self._num_bytes
            key, gone = id(cfg), self._gone
            self._held[key] = (weakref.ref(cfg, lambda ref: gone.append((key, ref))), size)
            self._num_bytes += size
        return None

    def hold(self, cfg: Any) -> None:
        """Count the trace of `cfg` (a SimConfig) while it lives; nothing for a config without one or already held."""
        self._hold(cfg, None)

    def admit(self, cfg: Any, source: str = "file") -> str | None:
        """Hold an uploaded config's trace if it fits under `max_bytes` with every other session's (None), else the
        message to show under the uploader (the config is not held: the session keeps what it had). `source`: "file",
        or "link" for a config a link carries whole (its trace is counted as an upload's)."""
        refused = self._hold(cfg, self.max_bytes)
        if refused is None:
            return None
        size, held = refused
        room = max(self.max_bytes - held, 0)
        then = ("Upload fewer requests (the trace's sample size), or try again when other sessions have moved on; your "
                "current config is unchanged." if source == "file" else
                "Share a trace with fewer requests, or open the link again when other sessions have moved on.")  # fmt: skip
        return (f"this {source}'s requests would hold about {_size(size)} on the server, and the uploaded traces the "
                f"sessions on this server hold already take {_size(held)} of its {_size(self.max_bytes)} (the server "
                f"setting uploads.max_bytes): about {_size(room)} is free. {then}")  # fmt: skip
