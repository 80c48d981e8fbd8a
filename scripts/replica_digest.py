"""A digest of replica deployments' results over many configs, every result array: run it on two trees to check that a
speed change of the replica routing path (the state-aware routers' choices from bounds, mid-run routing, pausing)
leaves every number alone (issue 13: cost).

    PYTHONPATH=$PWD python scripts/replica_digest.py [--configs 240] [--verbose]   (prints CONFIGS n TOTAL hash)

Config k: a random engine config (`tests/sim_core/test_equivalence.random_config`, a closed loop made Poisson) in even
k, the chat preset with lognormal lengths at 12-96 req/s in odd k, as 2-6 replicas behind the router `ROUTERS[k % 6]`
(least outstanding in two of every six: the router whose choices most often settle from bounds), with, by k, a
refresh interval of 50 ms or 0.4 s for the routers that read engine state, and prefix caching. A config that does not
fit its GPUs is skipped (counted out of CONFIGS).
"""

from __future__ import annotations

import sys

sys.path.insert(0, ".")  # (the tests' config builders)

from scripts.cluster_digest import digest_configs, result_hash  # noqa: E402
from sim_core.sweep import with_value  # noqa: E402
from tests.conftest import make_config  # noqa: E402
from tests.sim_core.test_equivalence import random_config  # noqa: E402

ROUTERS = ["least_outstanding", "round_robin", "cache_aware", "least_outstanding", "least_kv", "prefix_affinity"]


def digest(res) -> str:
    """Every array of a deployment's result (`cluster_digest.result_hash`) and why it stopped."""
    m = result_hash(res)
    m.update(repr(res.summary.stopped_reason).encode())
    return m.hexdigest()


def config(k: int):
    """Config k (see the module's doc)."""
    if k % 2 == 0:
        cfg = with_value(random_config(k // 2), "workload.num_requests", 80)
        if cfg.workload.arrival.process == "closed_loop":
            cfg = with_value(cfg, "workload.arrival.process", "poisson")
    else:
        cfg = make_config(seed=k, workload__num_requests=120, workload__arrival__rate_per_s=[12.0, 24.0, 48.0, 96.0][k % 4],
                          workload__prompt_tokens={"dist": "lognormal", "mean": 1200, "min": 50, "max": 3000},
                          workload__output_tokens={"dist": "lognormal", "mean": 200, "min": 1, "max": 600})
    router = ROUTERS[k % len(ROUTERS)]
    dep = {"replicas": 2 + (k // 6) % 5, "router": router}
    if router in ("least_kv", "prefix_affinity") and k % 4 == 0:
        dep["state_refresh_s"] = 0.05 if k % 8 == 0 else 0.4
    elif router in ("least_kv", "prefix_affinity"):
        dep["state_refresh_s"] = 0.0
    if k % 5 == 2:
        cfg = with_value(cfg, "kv_cache.enable_prefix_caching", True)
    return with_value(cfg, "deployment", dep)


if __name__ == "__main__":
    digest_configs(config, digest, lambda cfg: (cfg.deployment.router, cfg.deployment.replicas))
