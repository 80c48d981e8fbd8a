"""sim_core: a vectorised, tick-based simulator of an LLM inference server.

Public API: SimConfig, run_simulation, SimResult, load_preset, list_presets, config_with (a config changed, validated);
traces: load_trace, parse_trace, TraceOptions, with_trace. No UI imports here.
"""

from sim_core.config import SimConfig, format_validation_error
from sim_core.costmodel import MemoryPlanError
from sim_core.engine import run_simulation
from sim_core.presets import PresetError, config_from_dict, config_from_json, config_with, default_config, list_presets, load_preset
from sim_core.result import SimResult
from sim_core.traces import TraceError, TraceOptions, load_trace, parse_trace, with_trace

__all__ = [
    "MemoryPlanError", "PresetError", "SimConfig", "SimResult", "config_from_dict", "config_from_json", "config_with",
    "default_config", "format_validation_error", "list_presets", "load_preset", "run_simulation",
    "TraceError", "TraceOptions", "load_trace", "parse_trace", "with_trace",
]  # fmt: skip
