"""The one cached entry point from the UI into sim_core.

Keyed by the canonical config JSON; bounded (entries and age) so 30+ workshop sessions share
results without unbounded memory. Errors come back as text for the page to show, never raised.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import streamlit as st

from sim_core import MemoryPlanError, PresetError, SimConfig, SimResult, run_simulation

log = logging.getLogger(__name__)
CACHE_ENTRIES = 24


@dataclass(frozen=True)
class Outcome:
    result: SimResult | None
    error: str | None  # what went wrong and which knob fixes it


@st.cache_resource(max_entries=CACHE_ENTRIES, ttl=3600, show_spinner=False)
def _run_cached(cfg_json: str) -> Outcome:
    cfg = SimConfig.model_validate_json(cfg_json)
    try:
        return Outcome(run_simulation(cfg), None)
    except (MemoryPlanError, PresetError) as err:
        return Outcome(None, str(err))
    except Exception as err:  # never a traceback in the browser; the log keeps it for us
        log.exception("simulation failed")
        return Outcome(None, f"The simulation failed unexpectedly ({type(err).__name__}: {err}). "
                             "Please report the config (download it below).")


def run(cfg: SimConfig) -> Outcome:
    """Results are shared read-only between sessions (cache_resource): callers must not mutate them."""
    from app.state import canonical_json

    return _run_cached(canonical_json(cfg))
