"""DistServe's published step-time profiles (its engine and the 2023 vLLM it compared against) and the
cost model's ticks at the same points: the data behind the calibration profiles `distserve-2023` and
`vllm-2023-distserve` (fitted by scripts/fit_distserve_profiles.py on TP1 and TP2; TP4 is held out;
tests/sim_core/cluster/test_step_profiles.py keeps both within their error bands).

Why this exists: DistServe's chatbot claim compares two engines of early 2024, and its baseline's goodput is
set by how long one A100 takes to prefill the longest ShareGPT prompts against a 0.25 s TTFT objective.
The `vllm-v0` profile (fitted on vLLM 0.6.0) prefills ~25 % faster than the vLLM DistServe measured.
"""

from __future__ import annotations

import json
from functools import cache

import numpy as np

from sim_core.config import SimConfig
from sim_core.costmodel import CostModel
from sim_core.presets import PRESETS_DIR
from sim_core.sweep import with_value

DATA = PRESETS_DIR / "calibration" / "data" / "distserve_step_profiles.json"
MODEL = "facebook/opt-13b"
FIT_TP = (1, 2)  # fit on these degrees (the DistServe trend uses TP1 and TP2)
HELD_OUT_TP = (4,)
PREFILL_LENS = (64, 128, 256, 512, 768, 1024, 1536, 2000)  # one prompt per batch, tokens
DECODE_POINTS = tuple((b, c) for b in (1, 8, 32, 64, 128, 200) for c in (300, 900, 1600))  # (batch, context)


@cache
def _profiles() -> dict:
    return json.loads(DATA.read_text())["engines"]


def published_ms(engine: str, tp: int) -> list[tuple[str, object, float]]:
    """(kind, point, ms) of the published step-time model: prefill of one prompt, decode of a batch."""
    p = _profiles()[engine][MODEL][str(tp)]
    a, b, c = p["prefill"]
    out: list[tuple[str, object, float]] = [("prefill", n, a + b * n + c * n * n) for n in PREFILL_LENS]
    for batch, ctx in DECODE_POINTS:
        a, b, c = p["decoding_smallbs" if batch < p["decoding_large_small_bs_threshold"] else "decoding_largebs"]
        out.append(("decode", (batch, ctx), a + b * batch * ctx + c * batch))
    return out


def simulated_ms(cfg: SimConfig, tp: int, points: list[tuple[str, object, float]]) -> np.ndarray:
    """The cost model's tick, ms, at the same points, for `cfg` (its calibration) at TP `tp`."""
    cost = CostModel(with_value(cfg, "hardware.num_gpus", tp))
    out = []
    for kind, point, _ in points:
        if kind == "prefill":
            n = int(point)
            out.append(cost.tick(n, 1, n * (n + 1) // 2, 0, 1)[0])
        else:
            batch, ctx = point
            out.append(cost.tick(batch, batch, batch * ctx, batch * ctx, batch)[0])
    return np.array(out) * 1e3


def errors(cfg: SimConfig, engine: str, tps: tuple[int, ...]) -> np.ndarray:
    """|simulated / published - 1| over every point of the given TP degrees."""
    errs = []
    for tp in tps:
        pts = published_ms(engine, tp)
        errs.append(np.abs(simulated_ms(cfg, tp, pts) / np.array([v for _, _, v in pts]) - 1))
    return np.concatenate(errs)
