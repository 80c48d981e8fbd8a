"""A digest of xPyD results over many configs, every result array: run it on two trees to check that a speed change of
the disaggregated path leaves every number alone (issue 13: cost).

    PYTHONPATH=$PWD python scripts/xpyd_digest.py [--configs 240] [--verbose]   (prints CONFIGS n TOTAL hash)

Config k: a random engine config (`tests/sim_core/test_equivalence.random_config`) in even k, the chat preset with
lognormal lengths in odd k, as 1-3 prefill and 1-3 decode instances behind round robin, least outstanding or least KV;
by k, decode back-pressure from a small KV cache on both sides, the first token from the decode side, a slow link
(2 GB/s), link contention off and layer-wise pipelining off. A config that does not fit its GPUs is skipped (counted
out of CONFIGS).
"""

from __future__ import annotations

import sys

sys.path.insert(0, ".")  # (the tests' config builders)

from scripts.cluster_digest import RESULT_ARRAYS, digest_configs, result_hash  # noqa: E402
from sim_core.sweep import with_value  # noqa: E402
from tests.conftest import make_config  # noqa: E402
from tests.sim_core.test_equivalence import random_config  # noqa: E402

ROUTERS = ["round_robin", "least_outstanding", "least_kv"]
ARRAYS = (*RESULT_ARRAYS, "kv_link_start_s")


def digest(res) -> str:
    """Every array of a deployment's result (`cluster_digest.result_hash`, the link's start times too) and why it
    stopped."""
    m = result_hash(res, ARRAYS)
    m.update(repr(res.summary.stopped_reason).encode())
    return m.hexdigest()


def config(k: int):
    """Config k (see the module's doc)."""
    if k % 2 == 0:
        cfg = with_value(random_config(k // 2), "workload.num_requests", 60)
    else:
        cfg = make_config(seed=k, workload__num_requests=60, workload__arrival__rate_per_s=[6.0, 12.0, 24.0][k % 3],
                          workload__prompt_tokens={"dist": "lognormal", "mean": 1500, "min": 100, "max": 3000},
                          workload__output_tokens={"dist": "lognormal", "mean": 300, "min": 1, "max": 600})
    hw = cfg.hardware.model_dump()
    dis: dict = {"prefill": {"replicas": 1 + k % 3}, "decode": {"replicas": 1 + (k // 3) % 3}, "link": {}}
    if k % 4 == 1:  # decode back-pressure: transfers wait for decode blocks (prefill blocks tight too)
        dis["prefill"]["hardware"] = hw | {"memory_gib": 19.0}
        dis["decode"]["hardware"] = hw | {"memory_gib": 19.5}
    if k % 5 in (1, 2):
        dis["first_token_from"] = "decode"
    if k % 7 == 3:
        dis["link"]["bandwidth_gb_per_s"] = 2.0
    if k % 6 == 4:
        dis["link"]["contention"] = "none"
    if k % 8 == 5:
        dis["link"]["layerwise_pipelining"] = False
    return with_value(cfg, "deployment", {"router": ROUTERS[(k // 9) % 3], "disaggregation": dis})


if __name__ == "__main__":
    digest_configs(config, digest)
