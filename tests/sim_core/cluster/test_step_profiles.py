"""The DistServe trend's calibration profiles against the step times DistServe published (fit: TP1, TP2;
held out: TP4), and the mechanism they carry: 2023 vLLM prefills slower than the vllm-v0 profile."""

from __future__ import annotations

import numpy as np
import pytest

from sim_core.cluster.step_profiles import FIT_TP, HELD_OUT_TP, errors, published_ms, simulated_ms
from sim_core.presets import load_preset, read_preset_data
from sim_core.sweep import with_value

CASES = [("distserve", "cluster-distserve-opt13b-3xa100-p2d1", 0.05, 0.15),
         ("vllm", "cluster-distserve-opt13b-3xa100-colocated", 0.10, 0.15)]  # fmt: skip


def _engine_cfg(preset: str):
    return with_value(load_preset(preset), "deployment", None)


@pytest.mark.parametrize("engine, preset, fit_median, held_out_median", CASES, ids=["distserve", "vllm-2023"])
def test_stored_profile_matches_published_step_times(engine, preset, fit_median, held_out_median):
    cfg = _engine_cfg(preset)
    fit, held = errors(cfg, engine, FIT_TP), errors(cfg, engine, HELD_OUT_TP)
    assert np.median(fit) <= fit_median and np.percentile(fit, 90) <= 0.20
    assert np.median(held) <= held_out_median and np.percentile(held, 90) <= 0.30


def test_2023_vllm_prefills_long_prompts_slower_than_the_vllm_v0_profile():
    old = _engine_cfg("cluster-distserve-opt13b-3xa100-colocated")
    v0 = {k: v for k, v in read_preset_data("calibration", "vllm-v0").items() if k != "description"}
    new = with_value(old, "calibration", v0)
    point = [("prefill", 1500, 0.0)]
    t_old, t_new = simulated_ms(old, 1, point)[0], simulated_ms(new, 1, point)[0]
    assert t_old > 0.25e3 > t_new  # the 0.25 s TTFT objective: out of reach for 2023 vLLM, within it for vllm-v0
    assert published_ms("vllm", 1)[6][2] > 0.25e3  # DistServe's own vLLM profile at 1,536 tokens agrees


def test_the_readme_quotes_the_profiles_errors_as_they_are():
    # "fit median 8.0 / 3.9 %, held-out TP4 median 13.0 / 4.8 %": DistServe's held-out median is 4.75 % (4.7, since the
    # profiles were fitted), the vLLM 2023 / DistServe order as the sentence names the profiles
    from pathlib import Path

    med = {engine: tuple(100 * float(np.median(errors(_engine_cfg(preset), engine, tps))) for tps in (FIT_TP, HELD_OUT_TP))
           for engine, preset, _, _ in CASES}  # fmt: skip
    readme = " ".join((Path(__file__).resolve().parents[3] / "README.md").read_text().split())
    assert (f"fit median {med['vllm'][0]:.1f} / {med['distserve'][0]:.1f} %, held-out TP4 median {med['vllm'][1]:.1f} / "
            f"{med['distserve'][1]:.1f} %") in readme  # fmt: skip
