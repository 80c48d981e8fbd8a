"""DistServe's published step-time profiles (its engine and the 2023 vLLM it compared against) and the
cost model's ticks at the same points.

The calibration profiles `distserve-2023` and `vllm-2023-distserve` were fitted on these until session 31; they
are now fitted on DistServe's measured serving runs (measured_runs.py), because the published vLLM profile
prefills long prompts slower than the vLLM DistServe measured (tests/sim_core/cluster/test_step_profiles.py: a
prompt of 1,536+ tokens got its first token sooner than the profile prefills 1,536 tokens). Kept as that check.
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
