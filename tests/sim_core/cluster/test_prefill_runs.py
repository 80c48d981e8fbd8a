"""A prefill instance's fast-path run across rows (issue 13: cost): while it holds no handed-off KV its horizon holds until
its own hand-offs, so its run goes on to the horizon or to the earliest release of KV it hands off (`Engine.runs_to_horizon`,
`fastpath.run_ticks`) instead of pausing after every row, with the same results; and an idle prefill instance whose
handed-off KV waits for a decode slot idles no further than the next dispatch can release it (`Deployment._horizon`)."""

from __future__ import annotations

import numpy as np
import pytest

from sim_core.cluster import Deployment
from sim_core.cluster.result import build_result
from sim_core.engine import Engine
from sim_core.sweep import with_value
from sim_core.types import Phase
from tests.conftest import make_config
from tests.sim_core.cluster.test_disagg_fastpath import _assert_same_deployment, _xpyd


def _squeezed(seed: int, rate: float, prefill_gib: float):
    """xPyD under decode back-pressure (scripts/cluster_digest.py's 300-series): hand-offs wait for decode blocks."""
    cfg = make_config(seed=seed, workload__num_requests=60, workload__arrival__rate_per_s=rate,
                      workload__prompt_tokens={"dist": "lognormal", "mean": 1500, "min": 100, "max": 3000},
                      workload__output_tokens={"dist": "lognormal", "mean": 300, "min": 1, "max": 600})  # fmt: skip
    hw = cfg.hardware.model_dump()
    return with_value(cfg, "deployment", {"disaggregation": {
        "prefill": {"replicas": 1 + seed % 2, "hardware": hw | {"memory_gib": prefill_gib}},
        "decode": {"replicas": 2, "hardware": hw | {"memory_gib": 19.5}}}})  # fmt: skip


SQUEEZED = [(seed, rate, gib) for seed in range(4) for rate, gib in [(10.0, 19.0), (20.0, 18.5), (6.0, 19.0)]]


def _run(cfg, **flags):
    dep = Deployment(cfg, check_invariants=True, **flags)
    dep.run()
    return dep, build_result(dep)


@pytest.mark.parametrize("seed, rate, gib", SQUEEZED)
def test_an_idle_prefill_row_ends_at_the_release_of_its_handed_off_kv(seed, rate, gib):
    # A release changes the blocks in use, so a prefill instance's idle row ends there (`Engine.merge_idle_rows`). An
    # idle instance whose hand-off waited for a decode slot was given no bound from the decode pool (a decode tick may
    # free the slot, the dispatch follows at once): its idle row ran past the transfer's end, holding the blocks, to
    # wherever the loop's order of steps cut it (config 305 of scripts/cluster_digest.py: 5.896 s to 6.354 s, the
    # transfer ending at 5.910 s)
    dep, res = _run(_squeezed(seed, rate, gib))
    for x in res.instances:
        if x.role != "prefill":
            continue
        c = x.result.timeline.columns
        idle = c["phase"] == Phase.IDLE
        start, end = c["t_start_s"][idle], c["t_start_s"][idle] + c["duration_s"][idle]
        ends = res.kv_transfer_end_s[x.request_ids]
        ends = ends[np.isfinite(ends)]
        inside = (start[:, None] < ends[None, :]) & (ends[None, :] < end[:, None])
        assert not inside.any(), (x.index, start[inside.any(axis=1)], ends[inside.any(axis=0)])


class _NoRunsOn:
    """`Engine.runs_to_horizon` always False: every prefill run pauses after each row (the reference)."""

    def __get__(self, obj, objtype=None):
        return False

    def __set__(self, obj, value):
        pass


def _steps_of_prefill(cfg, monkeypatch, runs_on: bool):
    count = [0]
    step = Engine.step

    def counted(self):
        count[0] += self.hand_off_prefilled
        return step(self)

    with monkeypatch.context() as m:
        m.setattr(Engine, "step", counted)
        if not runs_on:
            m.setattr(Engine, "runs_to_horizon", _NoRunsOn(), raising=False)
        dep, res = _run(cfg)
    return dep, res, count[0]


CASES = [_squeezed(*args) for args in SQUEEZED[::2]] + [
    _xpyd(seed, 40, rate, prompt, 60, p, d, router, **extra)
    for seed, rate, prompt, p, d, router, extra in [
        (1, 20.0, 300, 2, 2, "round_robin", {}), (2, 40.0, 1500, 2, 1, "least_outstanding", {}),
        (3, 5.0, 300, 1, 2, "least_kv", {"chunk": 256}), (4, 40.0, 1500, 3, 2, "round_robin", {"prefill_gib": 18.5}),
        (5, 20.0, 300, 2, 2, "round_robin", {"link": {"bandwidth_gb_per_s": None}}),
        (6, 20.0, 1500, 2, 2, "least_outstanding", {"link": {"layerwise_pipelining": False}}),
    ]]  # fmt: skip


@pytest.mark.parametrize("k", range(len(CASES)))
def test_a_prefill_run_goes_on_across_rows_with_the_same_results(k, monkeypatch):
    cfg = CASES[k]
    dep, res, steps = _steps_of_prefill(cfg, monkeypatch, runs_on=True)
    ref_dep, ref, ref_steps = _steps_of_prefill(cfg, monkeypatch, runs_on=False)
    assert dep.stopped_reason == ref_dep.stopped_reason
    _assert_same_deployment(res, ref)
    assert steps <= ref_steps
    # and the references of the loop itself: runs that end where they wait, every decode instance at every event,
    # horizons at every event
    _assert_same_deployment(res, _run(cfg, pause_runs=False, lazy_decode=False, tight_horizons=False)[1])


def test_a_prefill_run_takes_about_one_step_per_request(monkeypatch):
    # (2P2D at a moderate load: per request an idle row to its arrival, its prefill and its hand-off in one step, then
    # the wait for the release of its KV; pausing after every row took ~2.6 steps per request)
    cfg = _xpyd(7, 200, 10.0, 300, 60, 2, 2, "round_robin")
    _, res, steps = _steps_of_prefill(cfg, monkeypatch, runs_on=True)
    _, ref, ref_steps = _steps_of_prefill(cfg, monkeypatch, runs_on=False)
    _assert_same_deployment(res, ref)
    assert steps < 0.6 * ref_steps, (steps, ref_steps)
