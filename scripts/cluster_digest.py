"""A digest of deployment results over 60 configs (random engine configs with each router, xPyD, closed-loop sessions,
shared prompts with prefix caching, and scripts/cluster_cost.py's runs at 1,500 requests): run it on two trees to
check that a speed change leaves every number alone (issue 13: cost).

    PYTHONPATH=$PWD python scripts/cluster_digest.py   (one line per config, then TOTAL)
"""

from __future__ import annotations

import dataclasses
import hashlib
import random
import sys

import numpy as np

sys.path.insert(0, ".")  # (the tests' config builders)

import scripts.cluster_cost as cc  # noqa: E402
from sim_core.engine import run_simulation  # noqa: E402
from sim_core.sweep import with_value  # noqa: E402
from tests.conftest import make_config  # noqa: E402
from tests.sim_core.cluster.support import open_loop_config  # noqa: E402
from tests.sim_core.cluster.test_prefix_affinity import shared_prompts  # noqa: E402
from tests.sim_core.cluster.test_sessions_cluster import closed_sessions  # noqa: E402

ROUTERS = ["round_robin", "least_outstanding", "least_kv", "prefix_affinity", "cache_aware", "session"]
RESULT_ARRAYS = ("instance_of", "decode_instance_of", "kv_wait_start_s", "kv_transfer_start_s", "kv_transfer_end_s",
                 "kv_transfer_bytes")  # fmt: skip


def configs() -> list[tuple[int, object]]:
    out = []
    for seed in range(26):
        rng = random.Random(seed)
        cfg = shared_prompts(num_prompts=8, num_requests=150, rate=60.0) if seed % 6 == 5 else open_loop_config(seed)
        if seed % 8 == 6:
            cfg = closed_sessions(n=80, **({"kv_cache__enable_prefix_caching": True} if seed % 16 == 6 else {}))
        if seed % 6 == 5 or seed % 8 == 6:
            cfg = with_value(cfg, "seed", seed)
        router = ROUTERS[seed % len(ROUTERS)]
        refresh_s = rng.choice([0.0, 0.0, 0.05, 0.4])
        if seed % 4 == 3:
            dep = {"router": router, "disaggregation": {"prefill": {"replicas": rng.randint(1, 3)},
                                                        "decode": {"replicas": rng.randint(1, 3)}}}  # fmt: skip
        else:
            dep = {"replicas": rng.randint(1, 4), "router": router, "state_refresh_s": refresh_s}
        out.append((seed, with_value(cfg, "deployment", dep)))
    for k, (router, refresh_s, shared) in enumerate(cc.RUNS):
        out.append((100 + k, cc.deployment_config(router, refresh_s, shared, 1500)))
    for k, router in enumerate(cc.XPYD_ROUTERS + ["least_kv", "prefix_affinity"]):
        out.append((200 + k, cc.xpyd_config(router, 1500)))
    # xPyD under decode back-pressure (small KV on both sides, long-tailed lengths): transfers wait for decode blocks,
    # so horizons, idle jumps and hand-offs interleave in ways the configs above never reach (a change that passed
    # them once changed these results)
    for seed in range(4):
        for k, (rate, prefill_gib) in enumerate([(10.0, 19.0), (20.0, 18.5), (6.0, 19.0)]):
            cfg = make_config(seed=seed, workload__num_requests=60, workload__arrival__rate_per_s=rate,
                              workload__prompt_tokens={"dist": "lognormal", "mean": 1500, "min": 100, "max": 3000},
                              workload__output_tokens={"dist": "lognormal", "mean": 300, "min": 1, "max": 600})
            hw = cfg.hardware.model_dump()
            dep = {"disaggregation": {"prefill": {"replicas": 1 + seed % 2, "hardware": hw | {"memory_gib": prefill_gib}},
                                      "decode": {"replicas": 2, "hardware": hw | {"memory_gib": 19.5}}}}
            out.append((300 + 3 * seed + k, with_value(cfg, "deployment", dep)))
    # first_token_from = decode (vLLM's disaggregated serving: the decode instance's first tick emits the first token):
    # its decoders join with nothing emitted, a path none of the configs above takes; under back-pressure and not
    decode_first = "deployment.disaggregation.first_token_from"
    out += [(100 + s, with_value(cfg, decode_first, "decode")) for s, cfg in out if s in (300, 304, 308, 311)]
    out += [(500 + k, with_value(cc.xpyd_config(router, 1500), decode_first, "decode")) for k, router in enumerate(cc.XPYD_ROUTERS)]
    return out


def _update(res, m) -> None:
    """Every array of a result: requests, timeline, events (ordered: events at one instant may be recorded in
    another order), gaps, batch log, summary."""
    for f in sorted(vars(res.requests)):
        m.update(f.encode())
        m.update(np.ascontiguousarray(getattr(res.requests, f)).tobytes())
    for name in sorted(res.timeline.columns):
        m.update(name.encode())
        m.update(np.ascontiguousarray(res.timeline.columns[name]).tobytes())
    ev = res.events
    order = np.lexsort((ev.kind, ev.req, ev.time_s))
    for a in (ev.time_s, ev.req, ev.kind):
        m.update(np.ascontiguousarray(a[order]).tobytes())
    m.update(np.ascontiguousarray(res.itl_s).tobytes())
    m.update(res.summary.model_dump_json().encode())
    for f in sorted(x.name for x in dataclasses.fields(res.batches)):
        a = getattr(res.batches, f)
        if isinstance(a, np.ndarray):
            m.update(np.ascontiguousarray(a).tobytes())


def result_hash(res, arrays: tuple[str, ...] = RESULT_ARRAYS):
    """A sha256 of every array of a result: the merged run's, each instance's with its request ids, and the deployment's
    `arrays` (scripts/xpyd_digest.py hashes one more)."""
    m = hashlib.sha256()
    _update(res, m)
    for x in getattr(res, "instances", ()):
        _update(x.result, m)
        m.update(x.request_ids.tobytes())
    for f in arrays:
        a = getattr(res, f, None)
        if a is not None:
            m.update(np.ascontiguousarray(a).tobytes())
    return m


def digest_configs(config, digest, describe=lambda cfg: ()) -> None:
    """The `main` of a digest over numbered configs (`scripts/xpyd_digest.py`, `scripts/replica_digest.py`): runs
    `config(k)` for k below --configs, hashes each run's `digest`, and prints CONFIGS n TOTAL hash; a config that does
    not fit its GPUs (MemoryPlanError, ValueError) is skipped, out of n. --verbose: each run's line, `describe(cfg)`."""
    import argparse

    from sim_core.costmodel import MemoryPlanError

    # the running script's docstring for --help (xpyd_digest.py or replica_digest.py)
    ap = argparse.ArgumentParser(description=sys.modules["__main__"].__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--configs", type=int, default=240)
    ap.add_argument("--verbose", action="store_true")
    args = ap.parse_args()
    total, n = hashlib.sha256(), 0
    for k in range(args.configs):
        try:
            cfg = config(k)
            h = digest(run_simulation(cfg))
        except (MemoryPlanError, ValueError) as err:  # (a pool's hardware too small for its model: not a run)
            if args.verbose:
                print(k, "skipped:", str(err)[:80])
            continue
        n += 1
        total.update(h.encode())
        if args.verbose:
            print(k, *describe(cfg), h[:16])
    print(f"CONFIGS {n} TOTAL {total.hexdigest()[:16]}")


def main() -> None:
    total = hashlib.sha256()
    for seed, cfg in configs():
        res = run_simulation(cfg)
        digest = result_hash(res).hexdigest()[:16]
        total.update(digest.encode())
        dep = cfg.deployment
        print(seed, dep.router, dep.replicas, "xPyD" if dep.disaggregation else "", cfg.workload.arrival.process,
              cfg.kv_cache.enable_prefix_caching, res.timeline.num_ticks, digest)  # fmt: skip
    print("TOTAL", total.hexdigest()[:16])


if __name__ == "__main__":
    import argparse

    argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()  # --help prints the docstring, not a run
    main()
