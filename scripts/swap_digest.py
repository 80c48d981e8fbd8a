"""Hashes of every result of 886 swap configs (issue 11: swap on the scalar core): `scheduler.preemption = swap` on every
engine preset x n = 1, 2, 4 x KV room x open and closed loop x host swap space, 120 random paged configs, the bench's swap
rows. Run on two trees and compare (04d000c and session 46's swap46: TOTAL 7fb15aa6791d1836):

    PYTHONPATH=$PWD python scripts/swap_digest.py | tail -1
"""
import argparse
import hashlib, sys
import numpy as np
sys.path.insert(0, ".")
sys.path.insert(0, "tests/sim_core")
from scripts.cluster_digest import _update
from sim_core.engine import run_simulation
from sim_core.bench import _set, engine_config
from test_equivalence import ENGINE_SCENARIOS, buildable, SHARED_PROMPTS

def with_random_variants(rng, over: dict, p_prefix: float = 0.2, p_priority: float = 0.2) -> None:
    """Add to `over`, each drawn from `rng`: the prefix cache with shared prompts, a closed loop, two priority classes
    in priority order, a tick limit."""
    if rng.random() < p_prefix:
        over.update(kv_cache__enable_prefix_caching=True, workload__shared_prefix=SHARED_PROMPTS)
    if rng.random() < 0.3:
        over.update(workload__arrival__process="closed_loop", workload__arrival__num_clients=int(rng.integers(4, 40)),
                    workload__arrival__think_time_s=float(rng.choice([0.0, 0.02])))
    if rng.random() < p_priority:
        over.update(scheduler__queue_order="priority", workload__classes=[
            {"name": "a", "share": 0.5, "priority": 0}, {"name": "b", "share": 0.5, "priority": 2}])
    if rng.random() < 0.2:
        over.update(limits__max_ticks=int(rng.integers(50, 400)))


def random_configs(rng, count: int, draw, min_room: float) -> list:
    """`count` (name, config) pairs, each from `draw(rng)`'s (preset, overrides) with KV room for min_room-2 of the
    longest requests (`buildable`), drawn again where the preset does not take them."""
    out = []
    while len(out) < count:
        sc, over = draw(rng)
        cfg = buildable(sc, over, float(rng.uniform(min_room, 2.0)))
        if cfg is not None:
            out.append((f"random {len(out)} {sc}", cfg))
    return out


def configs():
    out = []
    paged = [s for s in ENGINE_SCENARIOS if s not in ("engine-orca", "engine-fastertransformer")]
    for sc in ENGINE_SCENARIOS:
        for n in (1, 2, 4):
            for room in (0.5, 0.75, 1.0, 1.5, 2.5, None):
                for loop in ("open", "closed"):
                    for swap_gb in (4.0, 0.02):
                        over = dict(seed=11 + n, workload__num_requests=50, workload__num_samples=n,
                                    workload__arrival__rate_per_s=20.0, limits__num_recorded_batches=500,
                                    scheduler__preemption="swap", kv_cache__swap_space_gb=swap_gb)
                        if loop == "closed":
                            over.update(workload__num_requests=70, workload__arrival__process="closed_loop",
                                        workload__arrival__num_clients=20, workload__arrival__think_time_s=0.0)
                        if room is None and swap_gb != 4.0:
                            continue
                        cfg = buildable(sc, over, room)
                        if cfg is not None:
                            out.append((f"{sc} n={n} room={room} {loop} swap={swap_gb}", cfg))
    def draw(rng):
        sc = str(rng.choice(paged))
        n = int(rng.integers(1, 5))
        over = dict(seed=int(rng.integers(1000)), workload__num_requests=int(rng.integers(30, 90)), workload__num_samples=n,
                    workload__arrival__rate_per_s=float(rng.uniform(5, 40)), limits__num_recorded_batches=int(rng.choice([0, 50, 3000])),
                    scheduler__preemption="swap", kv_cache__swap_space_gb=float(rng.choice([0.01, 0.05, 4.0])))
        with_random_variants(rng, over)
        return sc, over

    out += random_configs(np.random.default_rng(46), 120, draw, 0.4)
    for eng, kw in [("vllm-v0-swap", {"workload__num_samples": 4}), ("vllm-v0-swap", {"workload__num_samples": 2}),
                    ("vllm-v0-swap", {}), ("vllm-v0-swap", {"workload__arrival__process": "closed_loop", "workload__arrival__num_clients": 64})]:
        out.append((f"bench {eng} {kw}", _set(engine_config(eng)[0], **kw)))
    return out

def print_digests(cs) -> None:
    """One line per (name, config) of `cs` (pre-emptions, ticks, its results' hash), then the count and their TOTAL."""
    total = hashlib.sha256()
    for name, cfg in cs:
        m = hashlib.sha256()
        res = run_simulation(cfg)
        _update(res, m)
        h = m.hexdigest()[:16]
        total.update(h.encode())
        print(name, res.summary.num_preemptions, res.timeline.num_ticks, h, flush=True)
    print("CONFIGS", len(cs), "TOTAL", total.hexdigest()[:16])


if __name__ == "__main__":
    argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()  # --help prints the docstring, not a run
    print_digests(configs())
