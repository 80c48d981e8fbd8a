"""Writes the small trace samples in presets/traces, one per public format, from a seeded generator.

Made here, not copied from the public traces: the columns, units and timestamp forms follow each
publisher's schema, and the lengths follow published summary statistics:
Azure 2023 code/conversation medians, BurstGPT's mix of ChatGPT / GPT-4 and conversation / API
logs with some failed (0-token) responses, and Mooncake's 512-token hash blocks with shared
prefixes. Run `python scripts/make_trace_samples.py` to regenerate them byte for byte.
"""

from __future__ import annotations

import argparse
import json
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent.parent / "presets" / "traces"
NUM_ROWS = 240


def _lognormal(rng, mean, sigma, lo, hi, n):
    mu = np.log(mean) - sigma**2 / 2
    return np.clip(np.rint(rng.lognormal(mu, sigma, n)), lo, hi).astype(int)


def azure(year: int, rng: np.random.Generator) -> str:
    gaps = rng.exponential(1 / 4.0, NUM_ROWS)  # ~4 req/s
    t0 = datetime(2023, 11, 16, 18, 15, 46) if year == 2023 else datetime(2024, 5, 10, 0, 0, 0)
    ctx = _lognormal(rng, 1600, 0.9, 3, 7400, NUM_ROWS)
    gen = _lognormal(rng, 160, 1.0, 1, 1900, NUM_ROWS)
    lines = ["TIMESTAMP,ContextTokens,GeneratedTokens"]
    t = t0
    for g, c, o in zip(gaps, ctx, gen):
        t = t + timedelta(microseconds=int(g * 1e6))
        stamp = t.strftime("%Y-%m-%d %H:%M:%S.%f")
        # 2023 rows carry 7 fractional digits (100 ns ticks); 2024 rows 6 digits and a UTC offset
        stamp = stamp + "0" if year == 2023 else stamp + "+00:00"
        lines.append(f"{stamp},{c},{o}")
    return "\n".join(lines) + "\n"


def burstgpt(rng: np.random.Generator) -> str:
    times = np.cumsum(rng.exponential(1 / 2.0, NUM_ROWS))
    lines = ["Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type"]
    for t in times:
        model = "GPT-4" if rng.random() < 0.3 else "ChatGPT"
        log = "API log" if rng.random() < 0.4 else "Conversation log"
        req = int(_lognormal(rng, 600, 1.0, 1, 8000, 1)[0])
        resp = 0 if rng.random() < 0.03 else int(_lognormal(rng, 250, 0.9, 1, 2000, 1)[0])
        lines.append(f"{int(round(t))},{model},{req},{resp},{req + resp},{log}")
    return "\n".join(lines) + "\n"


def mooncake(rng: np.random.Generator) -> str:
    """Requests that share one of a few long system prompts / documents (hash chains), plus their own tail."""
    block = 512
    prefixes = [list(range(i * 8, i * 8 + n)) for i, n in enumerate((6, 4, 2))]  # three shared chains
    next_id = 100
    ts = np.cumsum(rng.exponential(1000 / 3.0, NUM_ROWS)).astype(int)  # ms, ~3 req/s
    lines = []
    for t in ts:
        shared = prefixes[int(rng.choice(3, p=[0.5, 0.3, 0.2]))] if rng.random() < 0.7 else []
        own = int(rng.integers(1, 5))
        ids = shared + list(range(next_id, next_id + own))
        next_id += own
        length = (len(ids) - 1) * block + int(rng.integers(1, block + 1))
        out = int(_lognormal(rng, 180, 0.8, 1, 1500, 1)[0])
        lines.append(json.dumps({"timestamp": int(t), "input_length": length, "output_length": out, "hash_ids": ids}))
    return "\n".join(lines) + "\n"


def main() -> None:
    rng = np.random.default_rng(20261130)
    a23, a24, bg, mc = rng.spawn(4)
    (HERE / "azure-2023-sample.csv").write_text(azure(2023, a23))
    (HERE / "azure-2024-sample.csv").write_text(azure(2024, a24))
    (HERE / "burstgpt-sample.csv").write_text(burstgpt(bg))
    (HERE / "mooncake-sample.jsonl").write_text(mooncake(mc))


if __name__ == "__main__":
    argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()  # --help prints the docstring, not a run
    main()
