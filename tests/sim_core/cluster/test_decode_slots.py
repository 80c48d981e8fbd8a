"""A decode instance's sequence slots under back-pressure: found by review30e's generated runs (1P1D, decode pool
max_num_seqs 2, a tiny KV pool, recompute pre-emptions on the decode instance)."""

from __future__ import annotations

from sim_core import run_simulation
from tests.conftest import make_config
from tests.sim_core.test_equivalence import _with_kv_room


def test_a_decode_instance_never_runs_more_than_max_num_seqs():
    cfg = make_config(
        "engine-sglang", seed=480, workload__num_requests=32, workload__arrival__process="poisson",
        workload__arrival__rate_per_s=24.311473440896847,
        workload__prompt_tokens={"dist": "lognormal", "mean": 818, "min": 1, "max": 2000, "sigma": 0.8},
        workload__output_tokens={"dist": "lognormal", "mean": 147, "min": 1, "max": 400, "sigma": 0.8},
        workload__classes=[{"name": "a", "share": 0.4, "priority": 1}, {"name": "b", "share": 0.6, "priority": 2}],
        workload__num_samples=3, kv_cache__block_size=16, kv_cache__enable_prefix_caching=True,
        kv_cache__swap_space_gb=0.05, kv_cache__gpu_memory_utilization=0.19587755503144655,
        scheduler__preemption_victim="last_admitted", scheduler__preemption_requeue="by_key",
        scheduler__preemption="recompute", scheduler__queue_order="fcfs",
        deployment={"disaggregation": {"decode": {"replicas": 1}}},
    )  # fmt: skip
    dec = cfg.deployment.disaggregation
    pool = dec.decode.model_copy(update={"scheduler": cfg.scheduler.model_copy(update={"max_num_seqs": 2})})
    cfg = cfg.model_copy(update={"deployment": cfg.deployment.model_copy(update={"disaggregation": dec.model_copy(update={"decode": pool})})})
    run_simulation(cfg, check_invariants=True)  # raised: more requests run than the batch may hold (max_num_seqs)


def test_a_decode_instance_keeps_its_cap_when_its_victims_wait_for_their_slots():
    # review 30e's second case: the decode pool at the preset's own cap, its victims re-admitted while transfers
    # were in flight to it (before the fix: more requests ran than max_num_seqs at the decode instance)
    cfg = make_config(
        "engine-article-priority", seed=3222, workload__num_requests=33, workload__arrival__process="poisson",
        workload__arrival__rate_per_s=75.17535421196713,
        workload__prompt_tokens={"dist": "lognormal", "mean": 102, "min": 1, "max": 2000, "sigma": 0.8},
        workload__output_tokens={"dist": "lognormal", "mean": 129, "min": 1, "max": 400, "sigma": 0.8},
        workload__classes=[{"name": "a", "share": 0.4, "priority": 0}, {"name": "b", "share": 0.6, "priority": 2}],
        kv_cache__block_size=16, scheduler__preemption_victim="fewest_written", scheduler__preemption_headroom_steps=2,
        scheduler__preemption="recompute", scheduler__admission="watermark", scheduler__chunk_short_of_blocks="shrink",
        scheduler__max_num_batched_tokens=256, kv_cache__swap_space_gb=0.05, workload__num_samples=2,
        deployment={"disaggregation": {"decode": {"replicas": 1}}},
    )  # fmt: skip
    res = run_simulation(_with_kv_room(cfg, 1.0), check_invariants=True)
    assert res.summary.num_finished == 33 and res.summary.num_preemptions > 0
