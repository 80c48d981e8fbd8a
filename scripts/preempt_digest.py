"""Hashes of every result of KV-pressure configs (issue 11: pre-emption on the scalar core): every paged engine preset x
n = 1, 2, 4 x prefix cache off / on x KV room for 0.6, 1 and 2 of the longest requests, the hard-pressure configs of
`scripts/episode_cost.py` (300 requests at 25/s, room for one), and 150 random paged configs under pressure. Run on two
trees and compare (cb7414d and session 47's pre47 give the same TOTAL):

    PYTHONPATH=$PWD python scripts/preempt_digest.py | tail -1
"""
import argparse
import sys
import numpy as np
sys.path.insert(0, ".")
sys.path.insert(0, "tests/sim_core")
from scripts.swap_digest import print_digests, random_configs, with_random_variants
from test_equivalence import ENGINE_SCENARIOS, buildable, SHARED_PROMPTS

PAGED = [s for s in ENGINE_SCENARIOS if s not in ("engine-orca", "engine-fastertransformer")]


def configs():
    out = []
    for sc in PAGED:
        for n in (1, 2, 4):
            for prefix in (False, True):
                for room in (0.6, 1.0, 2.0):
                    over = dict(seed=5 + n, workload__num_requests=60, workload__num_samples=n,
                                workload__arrival__rate_per_s=20.0, limits__num_recorded_batches=500)
                    if prefix:
                        over.update(kv_cache__enable_prefix_caching=True, workload__shared_prefix=SHARED_PROMPTS)
                    cfg = buildable(sc, over, room)
                    if cfg is not None:
                        out.append((f"{sc} n={n} prefix={prefix} room={room}", cfg))
    for sc in PAGED:  # the hard-pressure configs (`scripts/episode_cost.py`'s "hard" cases)
        cfg = buildable(sc, {"seed": 7, "workload__num_requests": 300, "workload__arrival__rate_per_s": 25.0}, 1.0)
        if cfg is not None:
            out.append((f"hard {sc}", cfg))
    def draw(rng):
        sc = str(rng.choice(PAGED))
        n = int(rng.choice([1, 1, 2, 3, 4]))
        over = dict(seed=int(rng.integers(1000)), workload__num_requests=int(rng.integers(30, 120)), workload__num_samples=n,
                    workload__arrival__rate_per_s=float(rng.uniform(5, 40)),
                    limits__num_recorded_batches=int(rng.choice([0, 50, 3000])),
                    kv_cache__block_size=int(rng.choice([1, 8, 16, 32])))
        with_random_variants(rng, over, p_prefix=0.3, p_priority=0.3)
        return sc, over

    out += random_configs(np.random.default_rng(47), 150, draw, 0.5)
    return out


if __name__ == "__main__":
    argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()  # --help prints the docstring, not a run
    print_digests(configs())
