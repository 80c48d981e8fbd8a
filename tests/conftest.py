"""Shared factories: tiny configs built from a preset plus dotted overrides, and hand-built traces."""

from __future__ import annotations

import os
from typing import Any

import pytest
from hypothesis import settings

from sim_core import SimConfig, config_from_dict, load_preset

# CI runs the same generated cases every time (a failure there reproduces from the commit alone); local runs
# keep drawing new ones, and SIM_PROPERTY_CASES raises their number where a test reads it. No deadline in either:
# Hypothesis's 200 ms per example is a timed test, and a loaded machine failed one (a transfer property's first
# example took 253 ms while libcst was imported beside it); speed is measured by the benchmarks, not by tests.
settings.register_profile("ci", derandomize=True, print_blob=True, deadline=None)
settings.register_profile("local", deadline=None)
settings.load_profile("ci" if os.environ.get("CI", "").lower() in ("1", "true") else "local")


def _set(data: dict[str, Any], dotted: str, value: Any) -> None:
    *path, last = dotted.split(".")
    for part in path:
        data = data.setdefault(part, {})
    data[last] = value


def make_config(base: str = "chat-h100-llama8b", **overrides: Any) -> SimConfig:
    """A preset with overrides given as `section__field=value` (double underscore = dot)."""
    data = load_preset(base).model_dump(mode="json")
    for key, value in overrides.items():
        _set(data, key.replace("__", "."), value)
    return config_from_dict(data)


def trace_config(prompts, outputs, arrivals=None, priorities=None, base: str = "chat-h100-llama8b", **overrides: Any) -> SimConfig:
    """A config replaying exactly these requests."""
    n = len(prompts)
    trace = {
        "arrival_s": list(arrivals) if arrivals is not None else [0.0] * n,
        "prompt_tokens": list(prompts),
        "output_tokens": list(outputs),
        "priority": list(priorities) if priorities is not None else None,
    }
    return make_config(base, workload__trace=trace, workload__num_requests=n, **overrides)


@pytest.fixture
def default_cfg() -> SimConfig:
    return load_preset("chat-h100-llama8b")


@pytest.fixture(autouse=True)
def _point_cache_in_tmp(tmp_path_factory, monkeypatch):
    """Sweeps, plans and pages cache finished points on disk: keep the tests' cache out of $HOME."""
    monkeypatch.setenv("SIM_CORE_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "point-cache"))
