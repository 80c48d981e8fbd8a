"""The per-request shortcuts of a disaggregated deployment's hand-off (issue 13: cost) do what the general forms do."""

from __future__ import annotations

import copy

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sim_core.cluster import Deployment
from sim_core.sweep import with_value
from tests.conftest import make_config
from tests.sim_core.cluster.test_deployment import deploy


def _xpyd(num_decode=2, decode=None):
    cfg = make_config("chat-h100-llama8b", workload__num_requests=120, workload__arrival__rate_per_s=30.0)
    return deploy(cfg, {"disaggregation": {"prefill": {"replicas": 2}, "decode": {"replicas": num_decode} | (decode or {})}})


def test_dispatch_asks_one_decode_block_manager_only_when_all_agree():
    dep = Deployment(_xpyd())
    assert dep._same_blocks
    for ctx, prompt in [(1, 1), (15, 15), (16, 16), (17, 17), (2047, 2047), (4000, 4000)]:
        need = [int(e.kv.blocks_for(ctx, prompt)) for e in dep._decs]
        assert len(set(need)) == 1  # (so `_dispatch` asks the first for all)


def test_unlike_decode_block_managers_get_their_own_need(monkeypatch):
    dep = Deployment(_xpyd())
    dep._decs[1].kv.block_size *= 2
    dep._same_blocks = False  # (as __init__ decides for unlike managers)
    asked, dispatching = set(), [False]
    for e in dep._decs:
        f = e.kv.blocks_for
        monkeypatch.setattr(e.kv, "blocks_for", lambda c, p, f=f, e=e: (dispatching[0] and asked.add(id(e))) or f(c, p))
    dispatch = dep._dispatch

    def watched(t):
        dispatching[0] = True
        dispatch(t)
        dispatching[0] = False

    dep._dispatch = watched
    dep.run()
    assert asked == {id(e) for e in dep._decs}  # (with the flag set only the first is asked)


def test_reserve_and_release_of_one_request_as_ints_equal_the_array_forms():
    dep = Deployment(_xpyd())
    dep.run()
    for eng in (dep._decs[0], dep.front[0].engine):
        a, b = copy.deepcopy(eng), copy.deepcopy(eng)
        a.reserve(3, 7)
        b.reserve(np.array([3]), np.array([7]))
        assert a.kv.num_free == b.kv.num_free and np.array_equal(a.kv.held, b.kv.held)
        a.release(3)
        b.release(np.array([3]))
        assert a.kv.num_free == b.kv.num_free and np.array_equal(a.kv.held, b.kv.held)


def _loop_passes(dep) -> int:
    """Runs dep; the passes of its event loop (line events on the loop's first line)."""
    import inspect
    import sys

    lines, first = inspect.getsourcelines(Deployment.run)
    top = first + next(k for k, line in enumerate(lines) if line.strip() == "while True:") + 1
    code, count = Deployment.run.__code__, [0]

    def tracer(frame, event, arg):
        if frame.f_code is not code:
            return None

        def on_line(frame, event, arg):
            if event == "line" and frame.f_lineno == top:
                count[0] += 1
            return on_line

        return on_line

    sys.settrace(tracer)
    try:
        dep.run()
    finally:
        sys.settrace(None)
    return count[0]


def test_a_waiting_dispatch_is_made_in_the_pass_of_its_last_catch_up_and_only_then():
    from tests.sim_core.cluster.test_deployment import assert_same_routing_and_busy_ticks
    from tests.sim_core.cluster.test_horizons import _run

    cfg = _xpyd(num_decode=3)
    dep = Deployment(cfg)
    waited = []
    dispatch = dep._dispatch

    def watched(t):
        if dep._dispatch_t is not None:  # (a dispatch that waited for decode instances to reach t)
            waited.append(all(not dep.instances[j].engine.has_work or dep.instances[j].engine.st.now_s >= t
                              for j in dep._dispatch_need))  # fmt: skip
        dispatch(t)

    dep._dispatch = watched
    passes = _loop_passes(dep)
    assert len(waited) > 50 and all(waited)
    # the dispatch is made in the pass that stepped the last catch-up: per request a pass for the prefill tick, the
    # hand-off, the catch-up (and the dispatch), the transfer and two idle rows, about 6 (7 with a pass of its own)
    assert passes < 6.3 * cfg.workload.num_requests
    assert_same_routing_and_busy_ticks(_run(cfg)[0], _run(cfg, lazy_decode=False)[0])


def test_a_dispatch_that_waits_steps_its_catch_up_in_the_pass_of_its_event():
    # the pass that pops a hand-off whose dispatch waits for a decode instance steps that instance (the next pass
    # would): about one pass per request fewer than the 5.7 of a pass of its own, and the reference's results
    from tests.sim_core.cluster.test_deployment import assert_same_routing_and_busy_ticks
    from tests.sim_core.cluster.test_horizons import _run

    cfg = _xpyd(num_decode=3)
    dep = Deployment(cfg)
    waits, stepped = [], []
    pop, waits_for = dep._pop_event, dep._dispatch_waits_for

    def popped():
        pop()
        waits.append(dep._dispatch_t is not None)

    def chosen(stalled):
        i = waits_for(stalled)
        if waits and waits[-1]:  # (the first choice after a pop whose dispatch waits)
            stepped.append(i is not None and dep.instances[i].role == "decode" and i in dep._dispatch_need)
            waits[-1] = False
        return i

    dep._pop_event, dep._dispatch_waits_for = popped, chosen
    passes = _loop_passes(dep)
    assert len(stepped) > 50 and all(stepped)
    assert passes < 4.9 * cfg.workload.num_requests
    assert_same_routing_and_busy_ticks(_run(cfg)[0], _run(cfg, lazy_decode=False)[0])


def test_the_earliest_instance_is_the_scan_over_every_instance():
    # `_earliest` scans the listed candidates (front, and the decode instances in `back`): the same choice as a scan
    # of every instance that leaves out the decode instances not in `back`
    dep = Deployment(_xpyd(num_decode=3))
    earliest, checked = dep._earliest, [0]

    def scan(stalled, back=None):
        best, best_t = None, float("inf")
        for i, x in enumerate(dep.instances):
            if x.role == "decode" and back is not None and i not in back:
                continue
            if i not in stalled and x.engine.has_work and x.engine.st.now_s < best_t:
                best, best_t = i, x.engine.st.now_s
        return best

    def both(stalled, back=None):
        got = earliest(stalled, back)
        assert got == scan(stalled, back)
        checked[0] += 1
        return got

    dep._earliest = both
    dep.run()
    assert checked[0] > 300


def test_injecting_one_request_as_an_int_equals_the_array_form():
    dep = Deployment(_xpyd())
    dep.run()
    eng = dep._decs[0]
    k = eng.add_request(float(eng.st.now_s), 40, 9, 0, -1)
    eng.reserve(k, 3)
    for paused in (False, True):
        a, b = copy.deepcopy(eng), copy.deepcopy(eng)
        if paused:  # (a paused run takes them as joiners: only the engine's list is read)
            a._live = b._live = (0,) * 10 + (True,)
        a.inject_prefilled(k, eng.st.now_s + 0.5, 12.25)
        b.inject_prefilled(np.array([k]), eng.st.now_s + 0.5, np.array([12.25]))
        for f in ("computed", "emitted", "first_token_s", "last_token_s", "first_scheduled_s", "status", "running"):
            x, y = getattr(a.st, f), getattr(b.st, f)
            assert x.dtype == y.dtype and np.array_equal(x, y, equal_nan=x.dtype.kind == "f"), f
        assert a._joined == b._joined == ([k] if paused else [])
        assert a.rec.num_ticks == b.rec.num_ticks


def test_a_hand_off_of_the_only_running_request_leaves_an_empty_batch():
    dep = Deployment(_xpyd())
    dep.run()
    eng = dep.front[0].engine
    for running in ([5], [5, 7], [7, 5], [7]):
        e = copy.deepcopy(eng)
        e.st.running = np.array(running, dtype=np.int64)
        e._hand_off(np.array([5]), 1.0)
        left = [r for r in running if r != 5]
        assert e.st.running.dtype == np.int64 and e.st.running.tolist() == left
        assert e.handed_off[-1][0].tolist() == [5]


def test_a_request_tried_again_at_the_head_keeps_the_slot_context_and_prompt_it_was_first_tried_with():
    # `_dispatch` keeps the head's slot, context and prompt with its blocks: they are its prefill engine's values at
    # every try (under back-pressure a head is tried many times; a handed-off request's state does not change)
    cfg = make_config(seed=1, workload__num_requests=60, workload__arrival__rate_per_s=20.0,
                      workload__prompt_tokens={"dist": "lognormal", "mean": 1500, "min": 100, "max": 3000},
                      workload__output_tokens={"dist": "lognormal", "mean": 300, "min": 1, "max": 600})
    hw = cfg.hardware.model_dump()  # (small KV on both sides: transfers wait for decode blocks, scripts/cluster_digest.py)
    cfg = deploy(cfg, {"disaggregation": {"prefill": {"replicas": 2, "hardware": hw | {"memory_gib": 18.5}},
                                          "decode": {"replicas": 2, "hardware": hw | {"memory_gib": 19.5}}}})  # fmt: skip
    dep = Deployment(cfg)
    dispatch, tries = dep._dispatch, []

    def checked(t):
        dispatch(t)
        r, need, kp, ctx, prompt = dep._head_need
        if dep._pending and dep._pending[0][0] == r:  # (it waits at the head: tried again later)
            pre = dep.instances[dep._pending[0][1]].engine
            assert (kp, ctx, prompt) == (dep.slot_of[r], pre.st.computed[kp], pre.st.prompt[kp])
            assert need == [int(e.kv.blocks_for(ctx, prompt)) for e in dep._decs]
            tries.append(r)

    dep._dispatch = checked
    dep.run()
    assert len(tries) > len(set(tries)) > 5  # heads tried again (back-pressure)


def test_an_engine_with_nothing_running_has_no_pure_decode_run():
    # (`Engine.step` does not call `_advance_pure_decode` with nothing running: it would run nothing)
    dep = Deployment(_xpyd())
    dep.run()
    for x in dep.instances:
        assert not x.engine.st.running.size and x.engine._advance_pure_decode() is False


@given(bw=st.one_of(st.none(), st.floats(0.1, 1000)), lat=st.floats(0, 1000), ctx=st.integers(0, 200_000),
       layers=st.integers(1, 128), piped=st.booleans(), layerwise=st.booleans())  # fmt: skip
def test_a_deployments_transfer_prices_are_the_formulas_operations_exactly(bw, lat, ctx, layers, piped, layerwise):
    # `KVTransfer` reads the config and link once: bytes and time are the formulas' float operations, bit for bit
    from sim_core.cluster.transfer import KVTransfer
    from sim_core.config import LinkConfig, SimConfig
    from sim_core.costmodel import kv_bytes_per_token

    cfg, link = SimConfig(), LinkConfig(bandwidth_gb_per_s=bw, latency_us=lat, layerwise_pipelining=layerwise)
    x = KVTransfer(cfg, link, layers)
    nbytes = kv_bytes_per_token(cfg) * ctx
    assert x.bytes(ctx) == nbytes
    exposed = nbytes / layers if piped and layerwise else nbytes
    assert x.seconds(nbytes, piped) == (0.0 if bw is None else lat * 1e-6 + exposed / (bw * 1e9))


@pytest.mark.parametrize("router", ["round_robin", "least_outstanding"])
def test_the_instance_a_waiting_dispatch_steps_is_the_earliest_by_clock_then_index(router):
    # `_dispatch_waits_for` loops over the instances the dispatch needs: the busy, unstalled one with the earliest
    # clock before the dispatch's instant, ties to the lowest index (as min over them by (clock, index) chooses)
    cfg = _xpyd(num_decode=3)
    dep = Deployment(with_value(cfg, "deployment.router", router))
    waits_for, checked = dep._dispatch_waits_for, [0, 0]

    def both(stalled):
        got = waits_for(stalled)
        insts, t_d = dep.instances, dep._dispatch_t
        want = min((j for j in dep._dispatch_need if j not in stalled and insts[j].engine.has_work
                    and insts[j].engine.st.now_s < t_d), key=lambda j: (insts[j].engine.st.now_s, j), default=None)  # fmt: skip
        assert got == want
        checked[0] += 1
        checked[1] += len(dep._dispatch_need) > 1
        return got

    dep._dispatch_waits_for = both
    dep.run()
    assert checked[0] > 100
    assert checked[1] > 50 or router == "round_robin"  # (least outstanding waits for several decode instances)


def _horizon_in_full(dep, i, t_arr, t_heap):
    """`Deployment._horizon` without its early return for a free-running prefill instance (xPyD, no sessions)."""
    inst = dep.instances[i]
    free_running = dep.tight_horizons and inst.role == "prefill" and not dep._held[i]
    h = t_arr if free_running else min(t_heap, t_arr)
    st = inst.engine.st
    if inst.role == "decode" and dep._dispatch_t is not None:
        h = min(h, dep._dispatch_t)
    matter = inst.role != "prefill" or not dep._lazy or dep._pending
    if dep.back and not free_running and matter and (st.running.size or st.waiting_keys.size or st.swapped_keys.size):
        first, other = (len(dep.front), dep.back) if inst.role == "prefill" else (0, dep.front)
        for j, o in enumerate(other, start=first):
            if o.engine.has_work:
                h = min(h, dep._next_output_bound_s(j))
    return h


@pytest.mark.parametrize("router", ["round_robin", "least_outstanding"])
def test_a_free_running_prefill_instances_horizon_is_its_next_routed_arrival(router):
    # (`_horizon` returns t_arr at once for a prefill instance holding no handed-off KV: what the rest would give)
    dep = Deployment(with_value(_xpyd(), "deployment.router", router))
    horizon, seen = dep._horizon, [0]

    def both(i, t_arr, t_heap):
        got = horizon(i, t_arr, t_heap)
        assert got == _horizon_in_full(dep, i, t_arr, t_heap)
        seen[0] += dep.instances[i].role == "prefill" and not dep._held[i]
        return got

    dep._horizon = both
    dep.run()
    assert seen[0] > 100


@pytest.mark.parametrize("router", ["least_outstanding", "least_kv"])
def test_a_choice_from_bounds_waits_for_the_instances_whose_eligibility_is_open(router):
    # `_lazy_choice_by_bounds` decides each decode instance's eligibility in one loop: exact where it reached t, from
    # bounds where it lags and does not fit now, open (it must reach t) where it lags and fits now
    cfg = with_value(_xpyd(num_decode=3), "deployment.router", router)
    dep = Deployment(cfg)
    by_bounds, seen = dep._lazy_choice_by_bounds, {"open": 0, "settled": 0}

    def both(r, t, need, behind):
        fits = [dep._fits(d, need[d]) if d not in behind else
                (None if dep._fits(d, need[d]) else dep._fits_by_bounds(d, need[d], t)) for d in range(len(dep.back))]  # fmt: skip
        unknown = [d for d in range(len(dep.back)) if fits[d] is None]
        got = by_bounds(r, t, need, behind)
        if unknown:
            assert got == (None, unknown)
            seen["open"] += 1
        elif not any(fits):
            assert got == (None, behind)
        else:
            assert got[0] is None or fits[got[0]]  # (a pick is eligible)
            seen["settled"] += got[0] is not None
        return got

    dep._lazy_choice_by_bounds = both
    dep.run()
    assert seen["open"] > 20 and seen["settled"] > 20
