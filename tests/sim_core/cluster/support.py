"""Shared pieces of the cluster tests: random open-loop configs, and counting engine steps in a deployment
(each step that pauses no run ends a fast-path call, each other one pauses a run: the cost tests' measures)."""

from __future__ import annotations

from sim_core.sweep import with_value
from tests.sim_core.test_engine import random_config


def open_loop_config(seed: int, process: str = "poisson"):
    """The engine tests' random config `seed`; a closed loop becomes `process` (deployments route arrivals)."""
    cfg = random_config(seed)
    if cfg.workload.arrival.process == "closed_loop":
        cfg = with_value(cfg, "workload.arrival.process", process)
    return cfg


def count_steps(engines, ended_only: bool = True) -> list[int]:
    """Wrap each engine's `step` so the calls that leave no fast-path run paused (`Engine.may_pause`: a paused run
    goes on in the next step), or with `ended_only` False every call (pauses too), are counted; returns the
    one-element counter (read it after the run)."""
    calls = [0]
    for engine in engines:
        step = engine.step

        def counted(step=step, engine=engine):
            done = step()
            calls[0] += not ended_only or engine._paused is None
            return done

        engine.step = counted
    return calls


def with_shared_prefixes(cfg):
    """`cfg` with a paged, prefix-cached KV cache and three system prompts shared by 70 % of its requests."""
    cfg = with_value(cfg, "kv_cache.layout", "paged")
    cfg = with_value(cfg, "kv_cache.enable_prefix_caching", True)
    return with_value(cfg, "workload.shared_prefix", {"num_system_prompts": 3, "share_ratio": 0.7,
                                                      "system_prompt_tokens": {"dist": "fixed", "mean": 128}})  # fmt: skip


def run_checking_invariants(cfg, dep) -> None:
    """`cfg` deployed as `dep`, its invariants checked every tick and on the result; a run that ends on its own
    finished every request and left no KV block in use."""
    from sim_core.cluster import Deployment
    from sim_core.cluster.result import build_result
    from tests.sim_core.cluster.test_deployment import assert_cluster_invariants, deploy

    run = Deployment(deploy(cfg, dep), check_invariants=True)
    run.run()
    res = build_result(run)
    assert_cluster_invariants(res)
    if res.summary.stopped_reason is None:
        assert res.summary.num_finished == cfg.workload.num_requests
        assert all(x.engine.kv.num_used == 0 for x in run.instances)
