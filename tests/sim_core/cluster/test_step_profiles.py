"""DistServe's published step-time profile of the 2023 vLLM against its own measured runs of that vLLM, and against
the calibration profile fitted on those runs (sim_core/cluster/measured_runs.py): the profile the DistServe presets
were fitted on until session 31 prefills long prompts slower than the vLLM DistServe measured."""

from __future__ import annotations

import numpy as np

from sim_core.cluster.measured_runs import measured_runs
from sim_core.cluster.step_profiles import published_ms, simulated_ms
from sim_core.presets import load_preset
from sim_core.sweep import with_value


def _published_prefill_ms(tokens: int) -> float:
    return next(v for kind, point, v in published_ms("vllm", 1) if kind == "prefill" and point == tokens)


def test_the_published_vllm_profile_prefills_slower_than_distserves_measured_vllm():
    # a measured TTFT holds the prefill plus any wait and the API server's own time, so a request of at least 1,536
    # prompt tokens whose first token came sooner than the profile's 1,536-token prefill shows the profile too slow
    light = [r for r in measured_runs() if r.system == "vllm" and r.rate_per_s <= 1.5]
    prompt = np.concatenate([np.asarray(r.prompt_tokens) for r in light])
    ttft = np.concatenate([r.ttft_ms for r in light])
    long = prompt >= 1536
    assert long.sum() >= 10
    assert ttft[long].min() < 0.9 * _published_prefill_ms(1536)


def test_the_profile_fitted_on_the_measured_runs_prefills_long_prompts_faster_than_the_published_one():
    cfg = with_value(load_preset("cluster-distserve-opt13b-3xa100-colocated"), "deployment", None)
    points = [(kind, n, v) for kind, n, v in published_ms("vllm", 1) if kind == "prefill" and n >= 1024]
    assert np.all(simulated_ms(cfg, 1, points) < np.array([v for _, _, v in points]))
