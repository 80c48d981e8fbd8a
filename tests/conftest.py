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
# The soak (docs/reliability.md): SIM_HYPOTHESIS_PROFILE=explore draws new cases in every property test, those
# pinned to derandomize included, SIM_EXPLORE_FACTOR (default 10) times each test's own number of examples, and
# prints the blob that reproduces a failure (@reproduce_failure); the seeded generators' tests (`case_numbers`) run
# as many new case numbers, from SIM_EXPLORE_SEED (default 1). CI=true keeps the derandomised "ci" profile, and
# neither "ci" nor "local" changes a test's cases. `-m property` selects the property tests alone.
settings.register_profile("explore", derandomize=False, print_blob=True, deadline=None)


def _profile_name() -> str:
    if os.environ.get("CI", "").lower() in ("1", "true"):
        return "ci"
    return "explore" if os.environ.get("SIM_HYPOTHESIS_PROFILE", "") == "explore" else "local"


PROFILE = _profile_name()
settings.load_profile(PROFILE)
EXPLORE_FACTOR = int(os.environ.get("SIM_EXPLORE_FACTOR", "10"))
EXPLORE_SEED = int(os.environ.get("SIM_EXPLORE_SEED", "1"))
SCALED_BY_CASES: list[settings] = []  # (settings `tests.strategies.cases` has multiplied already)


def case_numbers(ci_default: int) -> list:
    """Case numbers for a test whose seeded generator draws its config from the number (`default_rng([case, k])`):
    0 .. ci_default - 1, or under the explore profile EXPLORE_FACTOR times as many new ones from EXPLORE_SEED x 10**7
    (numbers no other run draws: `prefix_config` asks random_config for numbers below 10**6). Marked `property`."""
    start, n = (EXPLORE_SEED * 10**7, ci_default * EXPLORE_FACTOR) if PROFILE == "explore" else (0, ci_default)
    return [pytest.param(case, marks=pytest.mark.property) for case in range(start, start + n)]


def pytest_configure(config) -> None:
    config.addinivalue_line("markers", "property: a property test (hypothesis or a seeded generator of configs)")


@pytest.hookimpl(tryfirst=True)  # before `-m` selects
def pytest_collection_modifyitems(items) -> None:
    """Marks every hypothesis test `property`; under the explore profile, each one's own settings (a decorator's
    max_examples and derandomize win over any profile) get EXPLORE_FACTOR times the examples and random draws."""
    scaled: set[int] = set()
    for item in items:
        fn = getattr(getattr(item, "function", None), "__func__", getattr(item, "function", None))
        own = getattr(fn, "_hypothesis_internal_use_settings", None)
        if own is None or not getattr(fn, "is_hypothesis_test", False):
            continue
        item.add_marker(pytest.mark.property)
        if PROFILE == "explore" and id(fn) not in scaled and not any(own is s for s in SCALED_BY_CASES):
            # (a parametrised test's function is its items': scaled once; `tests.strategies.cases` scales its own)
            scaled.add(id(fn))
            fn._hypothesis_internal_use_settings = settings(
                own, max_examples=own.max_examples * EXPLORE_FACTOR, derandomize=False, print_blob=True, deadline=None
            )


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
