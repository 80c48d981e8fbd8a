"""Sweep can sweep the replica count and the P:D split (total instances fixed)."""

from __future__ import annotations

import pytest

from sim_core import PresetError, load_preset
from sim_core.sweep import apply_knob, knob_value, run_sweep
from sim_core.sweep import with_value
from tests.conftest import make_config


def test_replica_sweep_starts_from_a_single_engine_and_scales_capacity():
    cfg = make_config(workload__num_requests=120, workload__arrival__rate_per_s=40.0)
    assert knob_value(cfg, "replicas") == 1
    pts = run_sweep(cfg, "replicas", [1, 2, 4])
    assert all(p.error is None for p in pts)
    e2e = [p.summary.e2e_p50_s for p in pts]
    assert e2e[0] > e2e[1] > e2e[2]  # more replicas, less queueing at the same offered load


def test_prefill_instances_move_between_pools_with_the_total_fixed():
    cfg = with_value(make_config(workload__num_requests=60), "deployment",
                     {"disaggregation": {"prefill": {"replicas": 1}, "decode": {"replicas": 3}}})  # fmt: skip
    assert knob_value(cfg, "prefill_instances") == 1
    moved = apply_knob(cfg, "prefill_instances", 3)
    dis = moved.deployment.disaggregation
    assert (dis.prefill.replicas, dis.decode.replicas) == (3, 1) and moved.num_gpus_total == cfg.num_gpus_total
    pts = run_sweep(cfg, "prefill_instances", [1, 2, 3, 4])
    assert [p.error is None for p in pts] == [True, True, True, False]
    assert "[1, 3]" in pts[-1].error
    with pytest.raises(PresetError, match="disaggregat"):
        apply_knob(make_config(), "prefill_instances", 2)


def test_a_knob_no_instance_runs_with_is_refused_up_front_naming_the_pools():
    # DistServe's P2D1 sets each pool's TP degree: a num_gpus sweep ran the same deployment at every point and
    # drew equal rows labelled 1, 2, 4 GPUs; then its one point equal to the config ran and every other was an error,
    # under a range of 1-64 (fuzz39: now refused before any run, as the replicas knob is)
    from sim_core.sweep import check_range, knob_bounds

    cfg = load_preset("cluster-distserve-opt13b-3xa100-p2d1")
    cfg = cfg.model_copy(update={"workload": cfg.workload.model_copy(update={"num_requests": 10})})
    base_gpus = cfg.hardware.num_gpus
    said = (r"num_gpus \(hardware.num_gpus\): no instance of this deployment runs with it: the prefill pool sets "
            r"tensor_parallel = 2 and the decode pool tensor_parallel = 1")
    for call in (lambda: knob_bounds("num_gpus", cfg), lambda: check_range("num_gpus", 1, 4, cfg),
                 lambda: run_sweep(cfg, "num_gpus", [base_gpus, base_gpus + 1]),
                 lambda: apply_knob(cfg, "num_gpus", base_gpus + 1)):  # fmt: skip
        with pytest.raises(PresetError, match=said):
            call()
    assert apply_knob(cfg, "num_gpus", base_gpus) == cfg  # (the config's own value is the config)
    # a knob that does reach an instance (the prefill pool uses the top-level scheduler) still sweeps
    seqs = run_sweep(cfg, "max_num_seqs", [1, 64])
    assert all(p.error is None for p in seqs)
    # one pool with its own hardware, the other on the top-level's: the knob reaches that other pool
    one = with_value(cfg, "deployment.disaggregation.decode.tensor_parallel", None)
    assert knob_bounds("num_gpus", one) == knob_bounds("num_gpus")


def test_a_replica_sweep_of_a_disaggregated_deployment_is_refused_naming_its_pools():
    # every point but 1 was an error ("deployment.replicas (2) must be 1 with disaggregation") under a range of 1-64
    from sim_core.sweep import check_range, knob_bounds

    cfg = load_preset("cluster-dynamo-llama70b-fp8-8xh100-3p1d")
    for call in (lambda: knob_bounds("replicas", cfg), lambda: check_range("replicas", 1, 4, cfg),
                 lambda: run_sweep(cfg, "replicas", [1, 2])):  # fmt: skip
        with pytest.raises(PresetError, match=r"replicas \(deployment.replicas\) must be 1 with disaggregation: .*"
                                              r"\(3 prefill \+ 1 decode instances\); sweep prefill_instances"):
            call()
    assert knob_bounds("replicas", load_preset("cluster-router-4xh100-llama8b")) == (1.0, 64.0)
