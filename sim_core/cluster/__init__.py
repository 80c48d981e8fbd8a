"""Beyond one engine (DESIGN.md §8): replicas behind a router, disaggregated prefill/decode pools.

`run_deployment(cfg)` simulates `cfg.deployment` and returns a `ClusterResult` (a `SimResult` over the
whole deployment, plus one `SimResult` per instance). `run_simulation` calls it when a config has a
deployment section, so every caller of the single engine (CLI, sweeps, capacity search, the app)
accepts deployments unchanged.

  router.py      routing policies (round robin, least outstanding, least KV, prefix affinity hook)
  transfer.py    KV-transfer bytes and time over the prefill->decode link
  deployment.py  the event loop that steps several engines on one clock
  result.py      per-instance and deployment results
"""

from __future__ import annotations

from sim_core.cluster.deployment import Deployment
from sim_core.cluster.result import ClusterResult, InstanceResult, build_result
from sim_core.config import SimConfig


def run_deployment(cfg: SimConfig, check_invariants: bool = False) -> ClusterResult:
    """Simulate a deployment (a config without one is a single replica). Same config and seed,
    same result.

    Raises:
        MemoryPlanError: an instance does not fit in its GPUs (the message names the pool).
    """
    dep = Deployment(cfg, check_invariants)
    dep.run()
    return build_result(dep)


__all__ = ["ClusterResult", "Deployment", "InstanceResult", "run_deployment"]
