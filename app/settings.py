"""The app's server-side settings (app/server.toml): run budget, worker processes, page and cache
limits. Read once per server process (runner caches it); nothing a visitor sends can change them."""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from sim_core.budget import RunBudget

DEFAULT_FILE = Path(__file__).resolve().parent / "server.toml"
ENV_VAR = "SIM_SERVER_CONFIG"


@dataclass(frozen=True)
class WorkerSettings:
    enabled: bool = True
    max_parallel: int = 2
    hard_timeout_s: float = 15.0
    address_space_slack_bytes: int = 1 << 30
    max_background: int = 2
    background_after_s: float = 0.5
    background_nice: int = 10


@dataclass(frozen=True)
class ServerSettings:
    run: RunBudget = RunBudget()
    worker: WorkerSettings = WorkerSettings()
    page_max_wall_s: float = 20.0
    cache_max_bytes: int = 1 << 30
    uploads_max_bytes: int = 2 << 30


def _section(cls: type, table: dict[str, Any], name: str) -> Any:
    known = {f.name for f in fields(cls)}
    unknown = set(table) - known
    if unknown:
        raise ValueError(f"server settings [{name}]: unknown keys {', '.join(sorted(unknown))}; known: {', '.join(sorted(known))}")
    return cls(**table)


def load_settings(path: str | Path | None = None) -> ServerSettings:
    """Settings from `path`, else $SIM_SERVER_CONFIG, else app/server.toml. Errors name the key."""
    path = Path(path or os.environ.get(ENV_VAR) or DEFAULT_FILE)
    data = tomllib.loads(path.read_text())
    unknown = set(data) - {"run", "worker", "page", "cache", "uploads"}
    if unknown:
        raise ValueError(f"server settings {path}: unknown sections {', '.join(sorted(unknown))}")
    page, cache, uploads = data.get("page", {}), data.get("cache", {}), data.get("uploads", {})
    out = ServerSettings(
        run=_section(RunBudget, data.get("run", {}), "run"),
        worker=_section(WorkerSettings, data.get("worker", {}), "worker"),
        page_max_wall_s=float(page.get("max_wall_s", ServerSettings.page_max_wall_s)),
        cache_max_bytes=int(cache.get("max_bytes", ServerSettings.cache_max_bytes)),
        uploads_max_bytes=int(uploads.get("max_bytes", ServerSettings.uploads_max_bytes)),
    )
    w = out.worker
    if not (w.max_parallel >= 1 and w.hard_timeout_s > 0 and w.max_background >= 0 and w.background_after_s > 0
            and out.page_max_wall_s > 0 and out.cache_max_bytes > 0 and out.uploads_max_bytes > 0):  # fmt: skip
        raise ValueError(f"server settings {path}: limits must be positive (max_background may be 0)")
    if not 0 <= w.background_nice <= 19:
        raise ValueError(f"server settings {path}: [worker] background_nice = {w.background_nice}; allowed: 0 to 19")
    return out
