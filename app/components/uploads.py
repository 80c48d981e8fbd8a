"""Checking an uploaded config or trace file, in a worker process when the server has them (runner.check_upload).

Why: parsing and validating the largest legal upload (a 100,000-row trace with 4 million block hash ids, 17 MB of
JSON) took ~2 s of the server's interpreter, and what the page then derives from the new config (its key, link and
description, `app.state.derived`) ~4 s more: every other session's page waited for those seconds (the GIL). A worker
does all of it and sends back the config and those values; the server only unpickles the config (~0.4 s).

No Streamlit import at module level: worker processes load this module.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sim_core import SimConfig, config_from_json
from sim_core.traces import TraceOptions, config_replaying, parse_trace, trace_data


@dataclass(frozen=True)
class CheckedUpload:
    cfg: SimConfig
    derived: dict[Any, Any]  # values of `app.state.derived` for `cfg` (name -> value), computed where it was checked
    note: str | None = None  # what a trace file was read as (LoadedTrace.describe())


def derivations(cfg: SimConfig, base: str | None) -> dict[Any, Any]:
    """What the pages derive from a session's new config (no preset: an upload is none) under these names: its key, its
    link (Simulate's against the session's base preset, Sweep's against none), its scheduler's label (Compare's) and its
    description."""
    from app.components.sidebar import describe_config, scheduler_label  # (Streamlit is loaded in the app's workers)
    from app.state import MAX_LINK_CHARS, config_key, config_to_query

    out: dict[Any, Any] = {"key": config_key(cfg), "scheduler_label": scheduler_label(cfg), "description": describe_config(cfg)}
    for b in {base, None}:
        out[("link", None, b)] = config_to_query(cfg, None, b, MAX_LINK_CHARS)
    return out


def check_config(raw: bytes, name: str, base: str | None) -> CheckedUpload:
    """An uploaded config file; PresetError (a ValueError) naming the field, value and allowed range."""
    cfg = config_from_json(raw, f"uploaded file {name!r}")
    return CheckedUpload(cfg, derivations(cfg, base))


def check_trace(raw: bytes, name: str, opts: TraceOptions, cfg: SimConfig, base: str | None) -> CheckedUpload:
    """`cfg` replaying an uploaded trace file; ValueError saying what is wrong with the file (row, column, value)."""
    loaded = parse_trace(raw, opts)
    data = trace_data(cfg.model_dump(mode="python"), loaded.trace, f"trace {name}")  # (as the CLI's --trace sets it)
    new = config_replaying(data, loaded, f"trace {name!r}")
    return CheckedUpload(new, derivations(new, base), loaded.describe())
