"""xPyD with `lazy_decode` (deployment.py, `_gating_back`, `_dispatch`): a decode instance runs up to a cluster event
only when the event needs it (a transfer into it, a dispatch that may choose it); the others lag behind with their
runs uncut, and round robin settles a lagging instance's eligibility from bounds (`_fits_by_bounds`). Each run is
compared with the deployment in which every decode instance reaches every event (`lazy_decode=False`): same routing,
same request times, same KV transfers, same busy ticks."""

from __future__ import annotations

import copy
import dataclasses

import numpy as np
import pytest

from sim_core.cluster import Deployment
from sim_core.cluster.deployment import decode_fits, decode_fits_by_bounds
from sim_core.engine import Engine
from sim_core.sweep import with_value
from tests.conftest import make_config
from tests.sim_core.cluster.support import count_steps, open_loop_config
from tests.sim_core.cluster.test_deployment import assert_cluster_invariants, assert_same_routing_and_busy_ticks, deploy
from tests.sim_core.cluster.test_horizons import _run


def _chat(num_requests=250, rate=30.0, seed=0, **overrides):
    return make_config("chat-h100-llama8b", seed=seed, workload__num_requests=num_requests,
                       workload__arrival__rate_per_s=rate, **overrides)  # fmt: skip


def _decode_steps(cfg, **flags) -> int:
    """Engine steps of the decode instances (each ends or pauses a fast-path run)."""
    dep = Deployment(cfg, **flags)
    steps = count_steps((x.engine for x in dep.back), ended_only=False)
    dep.run()
    return steps[0]


LINKS = [{}, {"bandwidth_gb_per_s": None}, {"bandwidth_gb_per_s": 5.0, "latency_us": 500.0}, {"layerwise_pipelining": False}]


@pytest.mark.parametrize("seed", range(4))
def test_decode_instances_that_are_not_needed_lag_behind_without_changing_the_run(seed):
    cfg = deploy(_chat(rate=20.0 + 10 * seed, seed=seed),
                 {"disaggregation": {"prefill": {"replicas": 1 + seed % 2}, "decode": {"replicas": 2 + seed % 2},
                                     "link": LINKS[seed]}})  # fmt: skip
    (lazy, _), (ref, _) = _run(cfg), _run(cfg, lazy_decode=False)
    assert_same_routing_and_busy_ticks(lazy, ref)
    assert_cluster_invariants(lazy)
    assert _decode_steps(cfg) < _decode_steps(cfg, lazy_decode=False)  # what it is for: fewer stops of decode runs


def test_a_decode_instance_stops_about_once_per_request_it_takes():
    # a fast link: the transfer ends within the tick that reached the dispatch, so one stop per request routed there
    cfg = deploy(_chat(num_requests=300, rate=24.0), {"disaggregation": {"prefill": {"replicas": 2}, "decode": {"replicas": 2}}})
    assert _decode_steps(cfg) <= 1.2 * 300 < _decode_steps(cfg, lazy_decode=False)


@pytest.mark.parametrize("router", ["least_outstanding", "least_kv", "session", "cache_aware"])
def test_routers_that_read_decode_counts_or_kv_route_as_the_reference(router):
    # counts and KV usage of lagging decode instances from bounds (`Router.choose_by_bounds`), exact where reached
    cfg = deploy(_chat(rate=40.0, seed=1), {"router": router, "state_refresh_s": 0.0,
                                             "disaggregation": {"prefill": {"replicas": 2}, "decode": {"replicas": 3}}})  # fmt: skip
    (lazy, _), (ref, _) = _run(cfg), _run(cfg, lazy_decode=False)
    assert_same_routing_and_busy_ticks(lazy, ref)


def _full_decode_slots(seed=0, max_seqs=6, rate=40.0):
    """Decode instances with a few sequence slots each: dispatches find some full (their bounds can rule them out
    without running them) and requests wait for a slot (back-pressure)."""
    sched = make_config().scheduler.model_dump() | {"max_num_seqs": max_seqs}
    return deploy(_chat(num_requests=200, rate=rate, seed=seed),
                  {"disaggregation": {"prefill": {"replicas": 2}, "decode": {"replicas": 3, "scheduler": sched}}})


@pytest.mark.parametrize("seed, router", [(0, "round_robin"), (1, "round_robin"), (2, "round_robin"),
                                          (0, "least_outstanding"), (1, "least_kv")])  # fmt: skip
def test_full_decode_instances_ruled_out_from_bounds_and_back_pressure(seed, router, monkeypatch):
    cfg = with_value(_full_decode_slots(seed, max_seqs=4 + 2 * seed), "deployment.router", router)
    ruled_out = [0]
    fits_by_bounds = Deployment._fits_by_bounds

    def spy(self, d, need, t):
        out = fits_by_bounds(self, d, need, t)
        ruled_out[0] += out is False
        return out

    monkeypatch.setattr(Deployment, "_fits_by_bounds", spy)
    # (runs that end where they wait: a paused decode run has no KV bound past its clock, so it is never ruled out)
    (lazy, _), (ref, _) = _run(cfg, pause_runs=False), _run(cfg, lazy_decode=False)
    assert ruled_out[0] > 0  # the path under test ran: a lagging instance was skipped on its bounds
    assert_same_routing_and_busy_ticks(_run(cfg)[0], ref)
    assert np.nanmax(lazy.kv_transfer_start_s - lazy.kv_wait_start_s) > 0  # requests waited for a decode slot
    assert_same_routing_and_busy_ticks(lazy, ref)
    assert_cluster_invariants(lazy)


def test_back_pressure_on_decode_kv_routes_as_the_reference():
    # the decode pool's KV is small: requests wait holding their prefill blocks (then every decode instance keeps up)
    cfg = make_config(workload__num_requests=60, workload__arrival__rate_per_s=20.0,
                      workload__prompt_tokens={"dist": "fixed", "mean": 2000, "min": 1, "max": 2000},
                      workload__output_tokens={"dist": "fixed", "mean": 400, "min": 1, "max": 400})  # fmt: skip
    small = cfg.hardware.model_dump() | {"memory_gib": 19.5}
    cfg = deploy(cfg, {"disaggregation": {"decode": {"replicas": 2, "hardware": small}}})
    (lazy, _), (ref, _) = _run(cfg), _run(cfg, lazy_decode=False)
    assert np.nanmax(lazy.kv_transfer_start_s - lazy.kv_wait_start_s) > 1.0  # back-pressure happened
    assert_same_routing_and_busy_ticks(lazy, ref)


def _random_xpyd(config_seed: int, router: str, num_prefill: int, num_decode: int, link: dict):
    """The engine tests' random config `config_seed` (a closed loop made a gamma process) as xPyD behind `router`."""
    cfg = open_loop_config(config_seed, "gamma")
    return deploy(cfg, {"router": router, "disaggregation": {"prefill": {"replicas": num_prefill},
                                                            "decode": {"replicas": num_decode}, "link": link}})


@pytest.mark.parametrize("seed", range(8))
def test_lazy_decode_on_random_configs(seed):
    router = ["round_robin", "round_robin", "least_outstanding", "least_kv"][seed % 4]
    cfg = _random_xpyd(seed + 40, router, 1 + seed % 2, 2 + seed % 2, LINKS[seed % 4])
    assert_same_routing_and_busy_ticks(_run(cfg)[0], _run(cfg, lazy_decode=False)[0])


@pytest.mark.parametrize("seed", range(3))
def test_lazy_decode_with_speculative_decoding_and_dynamic_batches(seed):
    cfg = _chat(rate=30.0, seed=seed, scheduler__speculative={"enabled": seed != 1},
                scheduler__dynamic_batch={"enabled": seed != 0})  # fmt: skip
    cfg = deploy(cfg, {"disaggregation": {"prefill": {"replicas": 2}, "decode": {"replicas": 2}}})
    assert_same_routing_and_busy_ticks(_run(cfg)[0], _run(cfg, lazy_decode=False)[0])


@pytest.mark.parametrize("seed", range(3))
def test_a_verdict_from_bounds_is_the_exact_one_at_the_instant(seed):
    # snapshots of decode instances during a run (full batches, back-pressure): the verdict of the bounds for an
    # instant ahead (fits / cannot fit), then the copy run up to that instant without input, and the exact check
    cfg = _full_decode_slots(seed, max_seqs=4 + seed, rate=60.0)
    dep = Deployment(cfg, lazy_decode=False, pause_runs=False)  # (state in the arrays at every step: copies)
    snaps = []
    for j, x in enumerate(dep.back):
        step = x.engine.step

        def probed(j=j, step=step, eng=x.engine):
            if eng.has_work and len(snaps) < 400 and eng.rec.num_ticks % 3 == j % 3:
                snaps.append((copy.deepcopy(eng), dep._incoming[j], dep.min_emit_tick_s[len(dep.front) + j]))
            return step()

        x.engine.step = probed
    dep.run()
    rng = np.random.default_rng(seed)
    verdicts = {True: 0, False: 0, None: 0}
    for eng, incoming, min_tick_s in snaps:
        t = eng.st.now_s + float(rng.uniform(0.0, 0.3))
        need = int(rng.integers(1, 40))
        verdict = decode_fits_by_bounds(eng, incoming, need, t, min_tick_s)
        verdicts[verdict] += 1
        if verdict is None:
            continue
        eng.horizon_s = t
        while eng.has_work and eng.st.now_s < t:
            assert Engine.step(eng)  # (the copy's own `step` attribute is the probe of the original)
        assert decode_fits(eng, incoming, need) == verdict
    assert verdicts[True] and verdicts[False]  # both kinds of verdict were checked


# ------------------------------------------------------------------ paused decode runs take injected requests
@pytest.mark.parametrize("seed, router", [(0, "round_robin"), (1, "round_robin"), (2, "least_outstanding"),
                                          (3, "least_kv")])  # fmt: skip
def test_a_paused_decode_run_takes_transferred_requests_as_a_new_run_would(seed, router):
    cfg = deploy(_chat(rate=25.0 + 10 * seed, seed=seed),
                 {"router": router, "disaggregation": {"prefill": {"replicas": 1 + seed % 2}, "decode": {"replicas": 2},
                                                       "link": LINKS[seed]}})  # fmt: skip
    # (a run that logs batches takes requests too: its batch log lists them from the tick they join, in running order)
    cfg = with_value(cfg, "limits.num_recorded_batches", [0, 2000][seed % 2])
    joined = [0]
    joined_logged = [0]
    inject = Engine.inject_prefilled

    def spy(self, ids, t_s, first_token_s):
        takes = self._paused is not None and bool(self._live[10])
        joined[0] += takes
        joined_logged[0] += takes and self._live[4] + self.rec.num_ticks < self.cfg.limits.num_recorded_batches
        return inject(self, ids, t_s, first_token_s)

    Engine.inject_prefilled = spy
    try:
        dep = Deployment(cfg, check_invariants=True)
        ended = count_steps(x.engine for x in dep.back)
        dep.run()
    finally:
        Engine.inject_prefilled = inject
    ref = Deployment(cfg, pause_runs=False)
    ref_ended = count_steps(x.engine for x in ref.back)
    ref.run()
    assert joined[0] > 100  # most transfers end in a paused run, which takes the request
    assert ended[0] < ref_ended[0] / 5  # and the runs go on
    from sim_core.cluster.result import build_result

    assert_same_routing_and_busy_ticks(build_result(dep), build_result(ref))
    assert_cluster_invariants(build_result(dep))
    if seed % 2:  # the batch logs are the reference's, entry for entry, though requests joined runs in logged ticks
        assert joined_logged[0] > 20
        for x, y in zip(build_result(dep).instances, build_result(ref).instances):
            for f in dataclasses.fields(x.result.batches):
                assert np.array_equal(getattr(x.result.batches, f.name), getattr(y.result.batches, f.name)), f.name


def test_paused_decode_runs_with_back_pressure_and_full_batches():
    for cfg in (_full_decode_slots(0, max_seqs=4), _full_decode_slots(1, max_seqs=6)):
        cfg = with_value(cfg, "limits.num_recorded_batches", 0)
        assert_same_routing_and_busy_ticks(_run(cfg)[0], _run(cfg, pause_runs=False)[0])


@pytest.mark.parametrize("seed", range(8))
def test_paused_decode_runs_on_random_configs(seed):
    router = ["round_robin", "least_outstanding", "least_kv", "round_robin"][seed % 4]
    cfg = _random_xpyd(seed + 60, router, 1 + seed % 2, 1 + seed % 3, LINKS[seed % 4])
    cfg = with_value(cfg, "limits.num_recorded_batches", [0, 40, 2000][seed % 3])
    assert_same_routing_and_busy_ticks(_run(cfg)[0], _run(cfg, pause_runs=False)[0])


def test_a_paused_decode_run_shows_the_counts_its_write_back_gives():
    # at every step of a decode instance that leaves its run paused, with transfers joined or reserved meanwhile:
    # its counts from the run, then the run ends (settle) and the same from the arrays
    cfg = with_value(_full_decode_slots(2, max_seqs=8, rate=50.0), "limits.num_recorded_batches", 0)
    dep = Deployment(cfg, check_invariants=True)
    seen = []
    first = len(dep.front)
    for j, x in enumerate(dep.back):
        def probe(eng=x.engine, j=j):
            if eng._paused is not None and (eng._joined or eng._reserved):
                t = [eng.st.now_s, eng.st.now_s + 0.05]
                live = (eng.live_counts(), eng.num_outstanding, eng.live_kv_usage,
                        [eng.outstanding_bounds(u, dep.min_emit_tick_s[first + j]) for u in t])
                eng.settle()
                assert live == ((eng.st.running.size, eng.kv.num_free), eng.num_outstanding, eng.kv.usage,
                                [eng.outstanding_bounds(u, dep.min_emit_tick_s[first + j]) for u in t])  # fmt: skip
                seen.append(live[0][0])

        def step(eng=x.engine, step=x.engine.step, probe=probe):
            probe()
            return step()

        x.engine.step = step
    dep.run()
    assert len(seen) > 10
    assert_same_routing_and_busy_ticks(_run(cfg)[0], _run(cfg, pause_runs=False)[0])


@pytest.mark.parametrize("router, limit_s", [("least_outstanding", 4.6), ("least_outstanding", 2.0), ("round_robin", 3.1),
                                             ("session", 2.5)])  # fmt: skip
def test_a_time_limit_stops_lagging_decode_instances_where_the_reference_stops(router, limit_s):
    # The next arrival past limits.max_sim_time_s is where the run ends once every instance reached the limit. With
    # decode instances lagging (no event needs them) and every prefill instance idle, the loop routed that arrival
    # (and the ones after it) before a decode instance reached the limit; the reference (every decode instance
    # reaches every event) stops first and leaves them unrouted (review 22)
    cfg = make_config("chat-h100-llama8b", seed=49, workload__num_requests=46, workload__arrival__rate_per_s=5.0,
                      workload__prompt_tokens={"dist": "lognormal", "mean": 800, "min": 1, "max": 3000},
                      workload__output_tokens={"dist": "lognormal", "mean": 300, "min": 1, "max": 600},
                      limits__max_sim_time_s=limit_s)  # fmt: skip
    cfg = deploy(cfg, {"router": router, "disaggregation": {"prefill": {"replicas": 3}, "decode": {"replicas": 1},
                                                            "link": {"bandwidth_gb_per_s": 5.0, "latency_us": 500.0}}})  # fmt: skip
    (lazy, _), (ref, _) = _run(cfg), _run(cfg, lazy_decode=False)
    assert_same_routing_and_busy_ticks(lazy, ref)
    if router != "round_robin":  # (round robin routes every request up front)
        late = Deployment(cfg).arrival_s >= limit_s
        assert late.any() and (lazy.instance_of[late] == -1).all() and (lazy.instance_of >= 0).sum() > 5
