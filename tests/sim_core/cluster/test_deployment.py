"""Replicas and disaggregated pools against the single engine they are built from (docs/cluster.md, "Beyond one engine").

What "explainable from the single engine" means, exactly:
  * a 1-replica deployment IS the single engine: the same ticks, idle gaps, request times, events
    and inter-token gaps, bit for bit, under any load and scheduler;
  * 1P1D with an ideal (free) link: the prefill instance is the single engine with every output cut
    to one token (same ticks, same TTFT per request) as long as the decode pool never pushes back
    (only a tick's recorded KV-in-use differs: it still counts blocks held for the transfer);
    and requests that never overlap get the single engine's TTFT, TPOT and finish times exactly
    (the prefill ticks run on P, the decode ticks on D, and nothing else changes).
"""

from __future__ import annotations

import numpy as np
import pytest

from sim_core import run_simulation
from sim_core.cluster import ClusterResult, Deployment, run_deployment
from sim_core.cluster.deployment import EVENT_KIND_BITS
from sim_core.cluster.result import build_result
from sim_core.costmodel import kv_bytes_per_token
from sim_core.metrics import steady_window
from sim_core.sweep import with_value
from sim_core.types import Event, Phase, Status
from tests.conftest import make_config, trace_config
from tests.sim_core.cluster.support import open_loop_config

FREE_1P1D = {"disaggregation": {"prefill": {"replicas": 1}, "decode": {"replicas": 1},
                                "link": {"bandwidth_gb_per_s": None}}}  # fmt: skip
REQ_FIELDS = ("arrival_s", "first_scheduled_s", "first_token_s", "finish_s", "num_emitted", "status",
              "num_preemptions", "num_recomputed_tokens", "max_itl_s")  # fmt: skip


def deploy(cfg, deployment):
    return with_value(cfg, "deployment", deployment)


def assert_same_run(a, b):
    for f in REQ_FIELDS:
        assert np.array_equal(getattr(a.requests, f), getattr(b.requests, f), equal_nan=True), f
    for name, col in a.timeline.columns.items():
        assert np.array_equal(col, b.timeline.columns[name]), name
    # The same events; among events at the same instant the recording order may differ (the fast path
    # records a run's events in batches, and a deployment cuts runs at arrivals).
    key = lambda ev: np.lexsort((ev.kind, ev.req, ev.time_s))  # noqa: E731
    ka, kb = key(a.events), key(b.events)
    for f in ("req", "time_s", "kind"):
        assert np.array_equal(getattr(a.events, f)[ka], getattr(b.events, f)[kb]), f
    assert np.array_equal(a.itl_s, b.itl_s)
    assert_same_summary(a.summary.model_dump(), b.summary.model_dump())


def assert_same_summary(a: dict, b: dict, where: str = "summary") -> None:
    """Equal, floats to 1e-12 (a deployment aggregates GPU figures over instances: x*n/n rounding)."""
    assert a.keys() == b.keys(), where
    for field, value in a.items():
        other = b[field]
        if isinstance(value, dict):
            assert_same_summary(value, other, f"{where}.{field}")
        elif isinstance(value, float):
            assert other == pytest.approx(value, rel=1e-12, nan_ok=True), f"{where}.{field}"
        else:
            assert other == value, f"{where}.{field}"


def assert_cluster_invariants(res: ClusterResult):
    """The single engine's run invariants, per request over the deployment and per instance timeline."""
    req = res.requests
    done = req.is_finished
    assert np.all(req.status[done] == Status.FINISHED)
    assert np.array_equal(req.num_emitted[done], req.output_tokens[done])
    assert np.all(req.num_emitted <= req.output_tokens)
    assert res.summary.num_finished + res.summary.num_unfinished == req.arrival_s.size
    fin_events = res.events.req[res.events.kind == Event.FINISHED]
    assert fin_events.size == np.unique(fin_events).size == done.sum()  # finishes once, on one instance
    assert np.all(req.first_scheduled_s[done] >= req.arrival_s[done])
    assert np.all(req.first_token_s[done] >= req.first_scheduled_s[done])
    assert np.all(req.ttft_s[done] <= req.e2e_s[done])
    routed = res.instance_of >= 0
    assert sum(x.num_requests for x in res.instances if x.role != "decode") == int(routed.sum())
    if res.is_disaggregated:  # wait, transfer and decode in order; decode after the KV arrived
        moved = ~np.isnan(res.kv_transfer_end_s)
        if res.config.deployment.disaggregation.first_token_from == "decode":  # streamed after the KV arrived
            # (its first decode tick's; a transfer or first decode tick a limit stopped the run before left the user no
            # token: unfinished, nothing emitted)
            arrived = moved & ~np.isnan(req.first_token_s)
            assert np.all(req.first_token_s[arrived] > res.kv_transfer_end_s[arrived])
            cut = moved & ~arrived
            assert not done[cut].any() and not req.num_emitted[cut].any()
            assert not cut.any() or res.summary.stopped_reason
        else:  # the wait starts at the first token (prefill side)
            assert np.all(res.kv_wait_start_s[moved] == req.first_token_s[moved])
        assert np.all(res.kv_transfer_start_s[moved] >= res.kv_wait_start_s[moved])
        assert np.all(res.kv_transfer_end_s[moved] >= res.kv_transfer_start_s[moved])
        fin = moved & done
        assert np.all(req.finish_s[fin] > res.kv_transfer_end_s[fin])
    for inst in res.instances:
        tl = inst.result.timeline
        assert np.all(tl.duration_s > 0)
        assert np.all(np.diff(tl.t_start_s) > 0)  # each instance's clock is monotone
        assert np.allclose(tl.t_start_s[1:], tl.t_end_s[:-1], rtol=0, atol=1e-9)  # idle is a row


@pytest.mark.parametrize("base", ["chat-h100-llama8b", "engine-vllm-v0", "kv-pressure-a100-llama8b", "engine-article-quota"])
def test_one_replica_is_the_single_engine_bit_for_bit(base):
    cfg = make_config(base, workload__num_requests=80)
    assert_same_run(run_simulation(cfg), run_simulation(deploy(cfg, {"replicas": 1}), check_invariants=True))


@pytest.mark.parametrize("seed", range(6))
def test_one_replica_matches_on_random_configs(seed):
    cfg = open_loop_config(seed)
    assert_same_run(run_simulation(cfg), run_simulation(deploy(cfg, {"replicas": 1, "router": "least_kv"})))


@pytest.mark.parametrize("seed", range(8))
def test_invariants_hold_every_tick_in_every_pool(seed):
    cfg = open_loop_config(seed, "gamma")
    router = ["round_robin", "least_outstanding", "least_kv"][seed % 3]
    for dep in ({"replicas": 3, "router": router},
                {"router": router, "disaggregation": {"prefill": {"replicas": 2}, "decode": {"replicas": 1 + seed % 2}}}):  # fmt: skip
        run = Deployment(deploy(cfg, dep), check_invariants=True)  # engines check blocks/progress every tick
        run.run()
        res = build_result(run)
        assert_cluster_invariants(res)
        if res.summary.stopped_reason is None:
            assert res.summary.num_finished == cfg.workload.num_requests
            assert all(x.engine.kv.num_used == 0 for x in run.instances)  # all KV released, prefill side too


def test_1p1d_free_link_prefill_side_is_the_single_engine_with_one_output_token():
    cfg = make_config(workload__num_requests=120, workload__arrival__rate_per_s=12.0)
    res = run_simulation(deploy(cfg, FREE_1P1D), check_invariants=True)
    assert np.array_equal(res.kv_transfer_start_s, res.kv_wait_start_s, equal_nan=True)  # no back-pressure
    one = run_simulation(with_value(cfg, "workload.output_tokens", {"dist": "fixed", "mean": 1, "min": 1, "max": 1}))
    assert np.array_equal(res.requests.first_token_s, one.requests.first_token_s)  # TTFT, request by request
    pre = res.instances[0].result.timeline
    for name in ("t_start_s", "duration_s", "phase", "num_prefill_tokens", "num_prefill_seqs", "flops"):
        assert np.array_equal(pre.columns[name], one.timeline.columns[name]), name
    # The one difference: a row's KV in use still counts the blocks a finished prefill holds for its
    # transfer (freed a moment later, at the transfer's end, before the next tick).
    assert np.all(pre.kv_blocks_used >= one.timeline.kv_blocks_used)
    dec = res.instances[1].result.timeline
    assert not dec.num_prefill_tokens.any()  # the decode instance only decodes
    assert res.summary.num_finished == 120


def test_1p1d_free_link_reproduces_isolated_requests_exactly():
    """Requests far apart never share a tick: P runs the single engine's prefill ticks, D its decode ticks."""
    cfg = trace_config([300, 1200, 50, 4000], [40, 2, 100, 17], arrivals=[0.0, 10.0, 20.0, 30.0])
    a = run_simulation(cfg)
    b = run_simulation(deploy(cfg, FREE_1P1D), check_invariants=True)
    for f in ("first_token_s", "finish_s", "num_emitted", "max_itl_s"):
        assert np.array_equal(getattr(a.requests, f), getattr(b.requests, f)), f
    assert np.array_equal(a.requests.tpot_s, b.requests.tpot_s, equal_nan=True)
    busy = lambda tl, ph: np.sort(tl.duration_s[tl.phase == ph])  # noqa: E731
    assert np.array_equal(busy(a.timeline, Phase.PREFILL), busy(b.instances[0].result.timeline, Phase.PREFILL))
    assert np.array_equal(busy(a.timeline, Phase.DECODE), busy(b.instances[1].result.timeline, Phase.DECODE))


def test_kv_transfer_time_in_a_run_matches_the_formula():
    link = {"bandwidth_gb_per_s": 25.0, "latency_us": 200.0, "layerwise_pipelining": False}
    cfg = trace_config([1000, 3000], [5, 5], arrivals=[0.0, 5.0])
    res = run_simulation(deploy(cfg, {"disaggregation": {"link": link}}))
    nbytes = kv_bytes_per_token(cfg) * np.array([1000, 3000])
    assert np.allclose(res.kv_transfer_bytes, nbytes, rtol=1e-12)
    assert np.allclose(res.kv_transfer_end_s - res.kv_transfer_start_s, 200e-6 + nbytes / 25e9, rtol=1e-9)
    # TTFT ends at the first token (prefill side); the transfer shows in the second token's gap.
    assert np.all(res.kv_transfer_start_s == res.requests.first_token_s)
    piped = run_simulation(deploy(cfg, {"disaggregation": {"link": link | {"layerwise_pipelining": True}}}))
    L = cfg.model.num_layers
    assert np.allclose(piped.kv_transfer_end_s - piped.kv_transfer_start_s, 200e-6 + nbytes / L / 25e9, rtol=1e-9)
    assert np.array_equal(piped.requests.first_token_s, res.requests.first_token_s)
    assert np.all(piped.requests.finish_s < res.requests.finish_s)


def test_back_pressure_when_the_decode_pool_kv_is_full():
    cfg = make_config(workload__num_requests=60, workload__arrival__rate_per_s=20.0,
                      workload__prompt_tokens={"dist": "fixed", "mean": 2000, "min": 1, "max": 2000},
                      workload__output_tokens={"dist": "fixed", "mean": 400, "min": 1, "max": 400})  # fmt: skip
    small = cfg.hardware.model_dump() | {"memory_gib": 19.5}  # ~2 GiB of KV: a few requests at a time
    res = run_simulation(deploy(cfg, {"disaggregation": {"decode": {"hardware": small}}}), check_invariants=True)
    assert_cluster_invariants(res)
    wait = res.kv_transfer_start_s - res.kv_wait_start_s
    assert res.summary.num_finished == 60 and np.nanmax(wait) > 1.0  # requests waited for decode blocks
    dec = res.instances[1]
    assert dec.result.summary.kv_peak_usage > 0.8
    # While they wait, their prefill blocks stay held: the prefill instance's KV does not drain.
    pre = res.instances[0].result.timeline
    rows_seen = 0
    for r in np.flatnonzero(wait > 0.5):
        during = (pre.t_start_s >= res.kv_wait_start_s[r]) & (pre.t_start_s < res.kv_transfer_start_s[r])
        assert np.all(pre.kv_blocks_used[during] >= 2000 // cfg.kv_cache.block_size)
        rows_seen += int(during.sum())
    assert rows_seen > 0
    # Without pipelining after a wait the whole KV crosses the link.
    waited = wait > 0
    L = cfg.model.num_layers
    xfer = res.kv_transfer_end_s - res.kv_transfer_start_s
    assert np.all(xfer[waited] > xfer[~waited & ~np.isnan(wait)].max() * (L / 2))
    roomy = run_simulation(deploy(cfg, {"disaggregation": {}}))
    assert np.nanmax(roomy.kv_transfer_start_s - roomy.kv_wait_start_s) == 0.0


@pytest.mark.parametrize("memory_gib", [80.0, 19.5])  # a roomy decode pool, and one that pushes back
def test_first_token_from_the_decode_side_counts_the_wait_the_transfer_and_a_decode_tick_in_ttft(memory_gib):
    # first_token_from = decode (vLLM's disaggregated-prefill proxy, Dynamo, llm-d): the user's first token is the
    # decode instance's, sampled in its first tick after the KV has arrived, so TTFT counts any wait for a decode slot,
    # the transfer and that tick; the decode side emits every output token (one tick more per request).
    cfg = make_config(workload__num_requests=60, workload__arrival__rate_per_s=20.0,
                      workload__prompt_tokens={"dist": "fixed", "mean": 2000, "min": 1, "max": 2000},
                      workload__output_tokens={"dist": "fixed", "mean": 400, "min": 1, "max": 400})  # fmt: skip
    pools = {"decode": {"hardware": cfg.hardware.model_dump() | {"memory_gib": memory_gib}},
             "link": {"bandwidth_gb_per_s": 5.0, "latency_us": 200.0, "layerwise_pipelining": False}}  # fmt: skip
    prefill_side = run_simulation(deploy(cfg, {"disaggregation": pools}))
    decode_side = run_simulation(deploy(cfg, {"disaggregation": pools | {"first_token_from": "decode"}}),
                                 check_invariants=True)  # fmt: skip
    assert_cluster_invariants(decode_side)
    p, d = prefill_side.requests, decode_side.requests
    assert decode_side.summary.num_finished == 60 and np.array_equal(p.num_emitted, d.num_emitted)
    assert np.all(d.first_token_s > decode_side.kv_transfer_end_s)  # every request's first token from a D tick
    if memory_gib == 80.0:  # no back-pressure (nor pre-emption): the prefill side and the transfers are the same
        decode_tokens = [int(r.instances[-1].result.timeline.num_decode_tokens.sum()) for r in (prefill_side, decode_side)]
        assert decode_tokens == [60 * 399, 60 * 400]
        for f in ("kv_wait_start_s", "kv_transfer_start_s", "kv_transfer_end_s"):
            assert np.array_equal(getattr(prefill_side, f), getattr(decode_side, f), equal_nan=True)
        assert np.array_equal(p.first_token_s, decode_side.kv_transfer_start_s)
    else:
        assert np.nanmax(decode_side.kv_transfer_start_s - decode_side.kv_wait_start_s) > 1.0  # the wait is in it
    exposed = decode_side.kv_transfer_end_s - decode_side.kv_wait_start_s  # wait + transfer, now in TTFT
    assert np.all(d.first_token_s - decode_side.kv_wait_start_s > exposed)  # and the first decode tick
    assert decode_side.summary.ttft_p50_s > prefill_side.summary.ttft_p50_s


def test_request_timeline_events_are_ordered_for_disaggregated_requests():
    cfg = make_config(workload__num_requests=40)
    res = run_simulation(deploy(cfg, {"disaggregation": {}}))
    ev = res.events
    for r in range(0, 40, 7):
        kinds = ev.kind[ev.req == r].tolist()
        if res.requests.output_tokens[r] > 1:
            assert kinds[:2] == [Event.SCHEDULED, Event.FIRST_TOKEN]
            assert kinds[2:5] == [Event.KV_WAIT, Event.KV_TRANSFER_START, Event.KV_TRANSFER_DONE]
            assert kinds[-1] == Event.FINISHED
    assert np.all(res.requests.status == Status.FINISHED)


def test_gpu_count_and_per_instance_metrics():
    cfg = make_config(workload__num_requests=60, workload__arrival__rate_per_s=20.0)
    res = run_simulation(deploy(with_value(cfg, "hardware.num_gpus", 2), {"replicas": 3}))
    assert res.num_gpus == 6 == res.config.num_gpus_total
    assert sum(x.num_requests for x in res.instances) == 60
    assert sum(x.result.summary.num_finished for x in res.instances) == res.summary.num_finished
    assert 0 < res.summary.gpu_busy_fraction <= 1
    assert res.summary.kv_num_blocks == sum(x.result.memory.num_blocks for x in res.instances)
    frames = res.to_frames()
    assert set(frames["requests"]["instance"]) == {"replica 0", "replica 1", "replica 2"}
    dis = run_simulation(deploy(cfg, {"disaggregation": {"prefill": {"replicas": 2, "tensor_parallel": 2},
                                                         "decode": {"replicas": 1}}}))  # fmt: skip
    assert dis.num_gpus == 5
    assert frames["ticks"]["instance"].nunique() == 3


def test_same_config_same_result():
    cfg = deploy(make_config(workload__num_requests=50), {"replicas": 2, "router": "least_kv",
                                                          "disaggregation": None})  # fmt: skip
    a, b = run_deployment(cfg), run_deployment(cfg)
    assert_same_run(a, b)


def test_a_guard_stops_the_whole_deployment_with_a_reason():
    cfg = make_config(workload__num_requests=400, workload__arrival__rate_per_s=300.0, limits__max_sim_time_s=2.0)
    res = run_simulation(deploy(cfg, {"disaggregation": {}}))
    assert res.summary.stopped_reason and "unfinished" in res.summary.stopped_reason
    assert res.summary.num_unfinished > 0


def test_per_instance_summaries_are_over_their_own_requests():
    from sim_core.metrics import summarize

    res = run_simulation(deploy(make_config(workload__num_requests=90, workload__arrival__rate_per_s=30.0),
                                {"replicas": 3, "router": "least_outstanding"}))  # fmt: skip
    for inst in res.instances:
        r = inst.result
        again = summarize(r.config, r.requests, r.timeline, r.itl_s.copy(), r.memory, r.summary.num_swap_outs, None,
                          events=r.events)
        # (busy and rates: over the deployment's makespan, tested below; the KV peak is the engine's in-tick peak,
        # which the rows, recorded after each tick's completions, can only bound from below)
        span = dict.fromkeys(("gpu_busy_fraction", "output_tokens_per_s", "total_tokens_per_s", "requests_per_s",
                              "goodput_requests_per_s", "kv_peak_usage"))  # fmt: skip
        assert_same_summary(again.model_dump() | span, r.summary.model_dump() | span)
        assert again.kv_peak_usage <= r.summary.kv_peak_usage <= 1.0
        assert r.summary.num_requests == inst.num_requests == r.requests.arrival_s.size


def assert_same_routing_and_busy_ticks(a: ClusterResult, b: ClusterResult) -> None:
    """The same deployment run, up to where idle gaps are cut into rows (an instance idles up to the next instant
    that may bring it input, and where it pauses depends on how the others ran): same routing, request times, KV
    transfers, every busy row of every instance, total idle time and inter-token gaps."""
    assert np.array_equal(a.instance_of, b.instance_of)
    assert np.array_equal(a.decode_instance_of, b.decode_instance_of)
    for f in REQ_FIELDS:
        assert np.array_equal(getattr(a.requests, f), getattr(b.requests, f), equal_nan=True), f
    for f in ("kv_wait_start_s", "kv_transfer_start_s", "kv_transfer_end_s", "kv_transfer_bytes"):
        assert np.array_equal(getattr(a, f), getattr(b, f), equal_nan=True), f
    for x, y in zip(a.instances, b.instances):
        busy = lambda r: r.timeline.columns["phase"] != Phase.IDLE  # noqa: E731
        for name, col in x.result.timeline.columns.items():  # every busy row, every column
            assert np.array_equal(col[busy(x.result)], y.result.timeline.columns[name][busy(y.result)]), name
        idle = lambda r: r.timeline.duration_s[~busy(r)].sum()  # noqa: E731
        assert idle(x.result) == pytest.approx(idle(y.result), rel=1e-12, abs=1e-12)
        assert x.result.itl_s.size == y.result.itl_s.size and np.array_equal(np.sort(x.result.itl_s), np.sort(y.result.itl_s))


def assert_routes_as_if_every_replica_reached_each_arrival(cfg) -> ClusterResult:
    """The router's early choice (from count bounds: only ambiguous replicas run up to the arrival) is the
    choice with every replica at the arrival: same routing, same request times, same busy ticks."""
    runs = []
    for early in (True, False):
        dep = Deployment(cfg, check_invariants=True, route_early=early)
        dep.run()
        runs.append(build_result(dep))
    a, b = runs
    assert np.array_equal(a.instance_of, b.instance_of)
    for f in ("first_token_s", "finish_s", "num_emitted", "num_preemptions"):
        assert np.array_equal(getattr(a.requests, f), getattr(b.requests, f), equal_nan=True), f
    busy = lambda r: r.timeline.duration_s[r.timeline.phase != Phase.IDLE]  # noqa: E731
    assert np.array_equal(busy(a), busy(b))  # (idle gaps may be cut into fewer rows)
    return a


@pytest.mark.parametrize("deployment", [{"replicas": 2, "router": "round_robin"}, {"disaggregation": {}},
                                        {"replicas": 3, "router": "least_outstanding"}])  # fmt: skip
def test_instances_busy_and_rates_add_up_to_the_deployments(deployment):
    # Each instance's GPU busy fraction is over the deployment's makespan: weighted by GPUs they average to the
    # deployment's (over their own spans two overloaded replicas read 100 % each in a deployment at 90 %).
    res = run_simulation(deploy(make_config(workload__num_requests=200, workload__arrival__rate_per_s=20.0), deployment))
    weighted = sum(x.result.summary.gpu_busy_fraction * x.num_gpus for x in res.instances) / res.num_gpus
    assert weighted == pytest.approx(res.summary.gpu_busy_fraction, rel=1e-12)
    for x in res.instances:
        tl = x.result.timeline
        busy_s = float(tl.duration_s[tl.phase != Phase.IDLE].sum())
        assert x.result.summary.gpu_busy_fraction == pytest.approx(busy_s / res.summary.makespan_s, rel=1e-12)
    # Rates over the same span: the instances' output tokens add up to the deployment's (the decode pool's leave out
    # the first tokens the prefill pool emitted: 40,247 for 40,047 before), replicas' requests and goodput too.
    add = lambda name: sum(getattr(x.result.summary, name) for x in res.instances)  # noqa: E731
    assert add("output_tokens_per_s") == pytest.approx(res.summary.output_tokens_per_s, rel=1e-12)
    if "replicas" in deployment:
        for name in ("total_tokens_per_s", "requests_per_s", "goodput_requests_per_s"):
            assert add(name) == pytest.approx(getattr(res.summary, name), rel=1e-12)
    else:  # each request's prompt once (prefill pool) and its output tokens once (both pools)
        assert add("total_tokens_per_s") == pytest.approx(res.summary.total_tokens_per_s, rel=1e-12)


def test_deployment_itl_percentiles_are_over_every_gap_when_instances_keep_samples(monkeypatch):
    # Round robin over alternating 400- and 20-token outputs: replica 0 records 79,800 gaps, replica 1 3,800. When each
    # keeps an even sample (over MAX_ITL_STORED gaps; 2,000 here to make it small), the deployment's percentiles must
    # still be over every gap: over the two samples concatenated, replica 1 weighed 20x (p50 11.7 ms, not 15.2).
    import sim_core.engine as engine

    n = 400
    cfg = deploy(trace_config([200] * n, [400 if i % 2 == 0 else 20 for i in range(n)], arrivals=[0.01 * i for i in range(n)]),
                 {"replicas": 2, "router": "round_robin"})  # fmt: skip
    exact = run_simulation(cfg).summary
    monkeypatch.setattr(engine, "MAX_ITL_STORED", 2000)
    dep = Deployment(cfg)
    dep.run()
    res = build_result(dep)
    assert [x.result.itl_s.size for x in res.instances] == [2000, 2000]
    assert [res.summary.itl_p50_s, res.summary.itl_p90_s, res.summary.itl_p99_s] == [exact.itl_p50_s, exact.itl_p90_s, exact.itl_p99_s]
    assert all(x.engine.all_itl_gaps is None for x in dep.instances)  # (taken back: no engine holds every gap)


@pytest.mark.parametrize("prompt", [1000, 1025])  # (1025 = 64 blocks of 16 + 1: the first decode tick takes a block)
def test_first_token_from_the_decode_side_is_its_first_tick_after_the_kv_arrived(prompt):
    # first_token_from = decode, as vLLM runs it (Scheduler._update_waiting_for_remote_kv: the decode instance takes the
    # prompt's KV as num_computed_tokens = prompt - 1, computes the last prompt token again, samples the first token and
    # streams it; the proxy's max_tokens = 1 prefill token is dropped): TTFT ends one decode tick after the KV arrived,
    # and that tick is priced as one decoder over the prompt's context. The decode side emits every output token.
    out = 50
    cfg = make_config(workload__num_requests=12, workload__arrival__rate_per_s=0.2,  # (lone requests: 5 s apart)
                      workload__arrival__process="constant",
                      workload__prompt_tokens={"dist": "fixed", "mean": prompt, "min": 1, "max": prompt},
                      workload__output_tokens={"dist": "fixed", "mean": out, "min": 1, "max": out})  # fmt: skip
    free = {"prefill": {"replicas": 1}, "decode": {"replicas": 1},
            "link": {"bandwidth_gb_per_s": None, "latency_us": 0.0}}  # fmt: skip
    prefill_side = run_simulation(deploy(cfg, {"disaggregation": free}))
    run = Deployment(deploy(cfg, {"disaggregation": free | {"first_token_from": "decode"}}), check_invariants=True)
    run.run()
    res = build_result(run)
    assert_cluster_invariants(res)
    p, d = prefill_side.requests, res.requests
    assert res.summary.num_finished == 12 and np.array_equal(d.num_emitted, p.num_emitted)
    assert np.array_equal(res.kv_transfer_end_s, p.first_token_s)  # free, instant link: the KV is there at once
    dec = res.instances[1].result
    busy = dec.timeline.phase != Phase.IDLE
    assert int(dec.timeline.num_decode_tokens[busy].sum()) == 12 * out  # every output token from the decode side
    # each request's first decode-side tick: it starts when the KV arrived and its end is the user's first token
    starts, ends = dec.timeline.t_start_s[busy], dec.timeline.t_end_s[busy]
    first_tick = np.searchsorted(starts, res.kv_transfer_end_s)
    assert np.array_equal(starts[first_tick], res.kv_transfer_end_s)
    assert np.array_equal(d.first_token_s, ends[first_tick])
    price = run.back[0].engine.cost.tick(1, 1, prompt, prompt - 1, 1)[0]  # one query token over the prompt's KV
    assert np.allclose(d.first_token_s - p.first_token_s, float(price), rtol=1e-12, atol=0)
    assert np.allclose(dec.timeline.duration_s[busy][first_tick], float(price), rtol=1e-12, atol=0)
    # TPOT from the decode side's first token: the same out - 1 gaps as the prefill mode's decode ticks, one later
    assert np.allclose(d.finish_s - d.first_token_s, p.finish_s - p.first_token_s, rtol=1e-9)
    assert res.events.req[res.events.kind == Event.FIRST_TOKEN].size == 24  # (prefill side, decode side)
    assert res.itl_s.size == 12 * (out - 1)
    # output tokens count once: the steady window (each request done before the next arrives) holds all the tokens of
    # its requests but the last, and the instances' add up to the deployment's (the prefill side's token is dropped)
    lo, hi = steady_window(12)
    steady = res.summary.steady
    assert steady.output_tokens_per_s == pytest.approx((hi - lo - 1) * out / (steady.window_end_s - steady.window_start_s))
    assert sum(x.result.summary.output_tokens_per_s for x in res.instances) == pytest.approx(res.summary.output_tokens_per_s)


def test_the_ticks_table_divides_each_instances_ticks_by_its_own_gpus_peaks():
    # the merged ticks table took MFU and MBU from the deployment's top-level GPU: with FP8 weights on H100 prefill
    # (FP8 tensor cores) and A100 decode (none), the decode ticks were divided by the H100's FP8 peak and HBM
    # bandwidth (Splitwise-HA, BF16: a decode MFU of 2.5 % in the table against 7.9 % in its summary)
    from sim_core.costmodel import gemm_peak_flops_per_s

    cfg = make_config(workload__num_requests=60, model__weight_dtype="fp8")
    cfg = deploy(cfg, {"disaggregation": {"prefill": {"replicas": 1},
                                          "decode": {"replicas": 1, "hardware": {"preset": "a100-80gb"}}}})  # fmt: skip
    res = run_simulation(cfg)
    ticks = res.to_frames()["ticks"]
    peaks = {gemm_peak_flops_per_s(x.result.config) for x in res.instances}
    assert len(peaks) == 2  # (the case in question: the pools' GEMMs run under different peaks)
    for x in res.instances:
        mine = ticks[(ticks["instance"] == x.name) & (ticks["phase"] != "idle")]
        w = mine["duration_s"]  # (a run's MFU and MBU are over its busy time)
        assert np.average(mine["mfu"], weights=w) == pytest.approx(x.result.summary.mfu_mean)
        assert np.average(mine["mbu"], weights=w) == pytest.approx(x.result.summary.mbu_mean)
    # the deployment's: each instance's weighted by its busy GPU-seconds
    gpu_s = [x.result.timeline.duration_s[x.result.timeline.phase != 0].sum() * x.num_gpus for x in res.instances]
    want = sum(x.result.summary.mfu_mean * g for x, g in zip(res.instances, gpu_s)) / sum(gpu_s)
    assert res.summary.mfu_mean == pytest.approx(want)


def test_the_cluster_events_are_in_the_result_with_their_requests_times_and_kinds():
    """Every event of `Deployment.events` (a hand-off's wait, a transfer's start and end) is one event of the result,
    its request, time and kind as recorded, with the instances' own events in time order."""
    cfg = deploy(make_config(workload__num_requests=50, workload__arrival__rate_per_s=20.0),
                 {"disaggregation": {"prefill": {"replicas": 2}, "decode": {"replicas": 2}}})  # fmt: skip
    dep = Deployment(cfg)
    dep.run()
    res = build_result(dep)
    ev = res.events
    assert np.all(np.diff(ev.time_s) >= 0)
    cluster = np.isin(ev.kind, [Event.KV_WAIT, Event.KV_TRANSFER_START, Event.KV_TRANSFER_DONE])
    got = sorted(zip(ev.req[cluster].tolist(), ev.time_s[cluster].tolist(), ev.kind[cluster].tolist()))
    # (each recorded event is request << EVENT_KIND_BITS | kind, in the order they happen; its time is the one its kind
    # records for the request)
    recorded = [(c >> EVENT_KIND_BITS, c & 15) for c in dep.events]
    times = {Event.KV_WAIT: dep.kv_wait_start_s, Event.KV_TRANSFER_START: dep.kv_transfer_start_s,
             Event.KV_TRANSFER_DONE: dep.kv_transfer_end_s}  # fmt: skip
    assert len(dep.events) == 150 and got == sorted((r, float(times[k][r]), k) for r, k in recorded)
    assert sorted(recorded) == sorted((r, k) for r in range(50) for k in times)  # (each request's three, once each)
    assert [k for r, k in recorded if r == 7] == [Event.KV_WAIT, Event.KV_TRANSFER_START, Event.KV_TRANSFER_DONE]
    assert ev.req.dtype == np.int64 and ev.time_s.dtype == np.float64 and ev.kind.dtype == np.int8
