from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim_core.cluster import Deployment
from sim_core.cluster.result import build_result
from sim_core.cluster.transfer import KVTransfer, LinkSides, kv_transfer_bytes, kv_transfer_s
from sim_core.config import LinkConfig, SimConfig
from sim_core.engine import run_simulation
from sim_core.presets import load_preset
from sim_core.sweep import with_value
from tests.conftest import make_config, trace_config
from tests.documents import prose


def test_llama8b_kv_bytes_per_token_is_128_kib():
    assert kv_transfer_bytes(SimConfig(), 1000) == 1000 * 128 * 1024


@given(bw=st.floats(0.1, 1000), lat=st.floats(0, 1000), nbytes=st.floats(0, 1e11), layers=st.integers(1, 128))
def test_time_is_latency_plus_bytes_over_bandwidth(bw, lat, nbytes, layers):
    link = LinkConfig(bandwidth_gb_per_s=bw, latency_us=lat, layerwise_pipelining=True)
    full = kv_transfer_s(link, nbytes, layers, pipelined=False)
    assert full == pytest.approx(lat * 1e-6 + nbytes / (bw * 1e9))
    piped = kv_transfer_s(link, nbytes, layers, pipelined=True)
    assert piped == pytest.approx(lat * 1e-6 + nbytes / layers / (bw * 1e9))
    assert piped <= full
    off = LinkConfig(bandwidth_gb_per_s=bw, latency_us=lat, layerwise_pipelining=False)
    assert kv_transfer_s(off, nbytes, layers, pipelined=True) == full


def test_ideal_link_is_free():
    assert kv_transfer_s(LinkConfig(bandwidth_gb_per_s=None, latency_us=500), 1e12, 32, pipelined=False) == 0.0


@given(bw=st.floats(0.1, 1000), nbytes=st.floats(1, 1e11), layers=st.integers(1, 128), overlap=st.floats(0, 10))
def test_pipelining_hides_no_more_than_the_link_carries_during_the_prefill(bw, nbytes, layers, overlap):
    """Layer-wise pipelining sends layer i's KV while layer i + 1 computes: the link can carry no more than
    bandwidth x the prefill's compute after its first layer, so what it could not is exposed after the prefill.
    (Before: only the last layer's share was ever exposed, whatever the link: 4,000 tokens of Llama-8B, 524 MB over
    1 GB/s after a 0.124 s prefill, arrived 16 ms after the prefill, 0.4 s before the link could have carried it.)"""
    link = LinkConfig(bandwidth_gb_per_s=bw, latency_us=0, layerwise_pipelining=True)
    wire_s = nbytes / (bw * 1e9)
    piped = kv_transfer_s(link, nbytes, layers, pipelined=True, overlap_s=overlap)
    assert piped >= wire_s - overlap * (layers - 1) / layers - 1e-12  # no faster than the link
    assert piped >= wire_s / layers - 1e-12  # the last layer's share is always exposed
    assert piped <= kv_transfer_s(link, nbytes, layers, pipelined=False) + 1e-12
    # a prefill long enough to cover the wire time hides all but the last layer's share, as before
    assert kv_transfer_s(link, nbytes, layers, pipelined=True, overlap_s=wire_s * 2) == pytest.approx(wire_s / layers)


def test_slow_link_pipelined_transfer_is_bandwidth_bound_in_a_deployment():
    """1P1D, 4,000-token prompts over a 1 GB/s link: the transfer ends no sooner than the link can carry the KV from
    the prefill's start (its first layer's share computed), not 1/32 of the wire time after the prefill."""
    cfg = load_preset("chat-h100-llama8b")
    for k, v in [("workload.num_requests", 3), ("workload.arrival.rate_per_s", 0.2),
                 ("workload.prompt_tokens", {"dist": "fixed", "mean": 4000, "min": 1, "max": 4000}),
                 ("workload.output_tokens", {"dist": "fixed", "mean": 20, "min": 1, "max": 20}),
                 ("deployment", {"disaggregation": {"link": {"bandwidth_gb_per_s": 1.0, "latency_us": 0}}})]:  # fmt: skip
        cfg = with_value(cfg, k, v)
    res = run_simulation(cfg)
    moved = ~np.isnan(res.kv_transfer_end_s)
    assert moved.all()
    wire_s = res.kv_transfer_bytes / 1e9
    prefill_s = res.kv_wait_start_s - res.requests.first_scheduled_s
    layers = cfg.model.num_layers
    assert np.all(res.kv_transfer_end_s - res.kv_wait_start_s >= wire_s - prefill_s * (layers - 1) / layers - 1e-9)
    assert np.all(res.kv_transfer_end_s - res.kv_wait_start_s > 0.3)  # 0.524 s on the wire, 0.124 s of prefill


@pytest.mark.parametrize("draft", ["head", "model"])
def test_a_speculative_drafts_kv_crosses_the_link_with_the_targets(draft):
    """The draft's layers are in the same blocks as the target's (vLLM V1's one KV cache group) and a prefill instance
    runs the drafter over the prompt before its KV is sent (vllm-project/vllm#35158): a transfer carries both. An
    EAGLE/MTP head adds one target layer's KV per token (Llama-3.1-8B: 128 -> 132 KiB), a draft model its own
    (Llama-3.2-1B: 32 KiB more). It was the target's alone: 1P1D with a draft model moved 128 KiB per token."""
    from sim_core.costmodel import draft_model_config, kv_bytes_per_token

    base = xpyd([300, 1000, 50], [20, 20, 20], [0.0, 0.1, 0.2], bandwidth_gb_per_s=50.0)
    cfg = with_value(with_value(base, "scheduler.speculative.enabled", True), "scheduler.speculative.draft", draft)
    target = kv_bytes_per_token(cfg)
    extra = target / cfg.model.num_layers if draft == "head" else kv_bytes_per_token(draft_model_config(cfg))
    assert (target, extra) == ((128 * 1024, 4 * 1024) if draft == "head" else (128 * 1024, 32 * 1024))
    res, plain = run_simulation(cfg), run_simulation(base)
    context = res.kv_transfer_bytes / (target + extra)
    assert np.array_equal(context, np.round(context)) and np.array_equal(context, plain.kv_transfer_bytes / target)
    assert np.all(res.kv_transfer_bytes > plain.kv_transfer_bytes)
    # over the same 50 GB/s link the larger transfer takes longer, by its bytes
    took, took_plain = (r.kv_transfer_end_s - r.kv_link_start_s for r in (res, plain))
    assert np.all(took > took_plain)


def test_pools_must_speculate_with_the_same_draft_or_neither():
    """The decode instance proposes from the draft's KV of the prompt, which only a prefill instance with the same
    draft computes: vLLM refuses such a pair at its P/D handshake (vllm-project/vllm#49230). The message names the
    decode pool's field, its value and what is allowed; a different draft length is allowed (no KV layer changes)."""
    base = xpyd([300], [20], [0.0])
    with pytest.raises(ValueError) as err:
        with_value(base, "deployment.disaggregation.decode.scheduler", {"speculative": {"enabled": True}})
    text = str(err.value)
    assert "deployment.disaggregation.decode.scheduler.speculative.enabled = True" in text
    assert "draft (head) differs from the prefill pool's (off)" in text and "allowed: the same speculative" in text
    on = with_value(base, "scheduler.speculative.enabled", True)
    with pytest.raises(ValueError, match=r"decode\.scheduler\.speculative\.draft_model = 'llama-3.1-8b'.*model "
                                         r"llama-3.1-8b\) differs from the prefill pool's \(model llama-3.2-1b\)"):
        with_value(with_value(on, "scheduler.speculative.draft", "model"), "deployment.disaggregation.decode.scheduler",
                   {"speculative": {"enabled": True, "draft": "model", "draft_model": "llama-3.1-8b"}})
    longer = with_value(on, "deployment.disaggregation.decode.scheduler", {"speculative": {"enabled": True, "num_draft_tokens": 5}})
    assert run_simulation(longer).summary.num_finished == 1


# ---------------------------------------------------------------- contention: transfers share their link's sides
def xpyd(prompts, outputs, arrivals, num_prefill=1, num_decode=1, **link):
    """A replayed workload on `num_prefill`P`num_decode`D (round robin on both sides) over `link`."""
    cfg = trace_config(prompts, outputs, arrivals)
    return with_value(cfg, "deployment", {"disaggregation": {
        "prefill": {"replicas": num_prefill}, "decode": {"replicas": num_decode}, "link": link}})  # fmt: skip


@pytest.mark.parametrize("num_prefill, num_decode", [(1, 1), (2, 1), (1, 2)])
def test_two_transfers_ready_together_take_their_shared_side_in_turn(num_prefill, num_decode):
    """Two 1,000-token prompts prefilled in one tick (1P1D), or at the same instant on two prefill instances into one
    decode instance (2P1D: they share its side), or on one prefill instance to two decode instances (1P2D: they share
    its side): the first takes latency + bytes / bandwidth, the second starts moving when the first's last byte
    leaves and ends at latency + 2 x bytes / bandwidth (the latency does not hold the link: not 2 x latency). Before:
    both ended at latency + bytes / bandwidth, each with the whole 10 GB/s."""
    cfg = xpyd([1000, 1000], [5, 5], [0.0, 0.0], num_prefill, num_decode,
               bandwidth_gb_per_s=10.0, latency_us=100.0, layerwise_pipelining=False)  # fmt: skip
    res = run_simulation(cfg, check_invariants=True)
    assert res.kv_wait_start_s[0] == res.kv_wait_start_s[1] == res.kv_transfer_start_s[0] == res.kv_transfer_start_s[1]
    t0 = res.kv_transfer_start_s[0]
    wire_s = res.kv_transfer_bytes[0] / 10e9
    assert res.kv_transfer_bytes[0] == res.kv_transfer_bytes[1] == 1000 * 128 * 1024
    first, second = np.sort(res.kv_transfer_end_s)
    assert first == pytest.approx(t0 + 100e-6 + wire_s, rel=1e-12)
    assert second == pytest.approx(t0 + 100e-6 + 2 * wire_s, rel=1e-12)
    late = int(np.argmax(res.kv_transfer_end_s))
    assert res.kv_link_start_s[late] == pytest.approx(t0 + wire_s, rel=1e-12)  # queued for the link, then moving
    assert res.kv_link_start_s[1 - late] == t0
    # contention = none: each had the whole link (the model before the knob)
    alone = run_simulation(with_value(cfg, "deployment.disaggregation.link.contention", "none"))
    assert np.all(alone.kv_transfer_end_s == first) and np.array_equal(alone.kv_link_start_s, alone.kv_transfer_start_s)


def test_pipelined_transfer_behind_a_busy_link_sends_its_layers_only_once_the_link_is_free():
    """1P1D over 1 GB/s, layer-wise: request 0's 4,000 tokens (524 MB) leave the link busy until ~0.53 s (its prefill
    hid only ~0.12 s of it); request 1 (1,000 tokens, 131 MB) arrives at 0.2 s and ends its prefill well before that,
    so none of its layers can move during its prefill: it sends all 131 MB after request 0's last byte, ending at
    request 0's end + 0.131 s. Before: it hid all but 1/32 of its KV in its prefill and ended ~4 ms after it, ~0.3 s
    before the link had carried request 0's KV."""
    cfg = xpyd([4000, 1000], [5, 5], [0.0, 0.2], bandwidth_gb_per_s=1.0, latency_us=0.0, layerwise_pipelining=True)
    res = run_simulation(cfg, check_invariants=True)
    assert res.kv_transfer_start_s[1] == res.kv_wait_start_s[1] < res.kv_transfer_end_s[0]  # pipelined, behind 0
    assert res.kv_link_start_s[1] == pytest.approx(res.kv_transfer_end_s[0], rel=1e-12)  # (latency 0: its last byte)
    assert res.kv_transfer_end_s[1] == pytest.approx(res.kv_transfer_end_s[0] + res.kv_transfer_bytes[1] / 1e9, rel=1e-12)
    # request 0 went first and alone: the formula (the link free during its prefill)
    prefill_s = res.kv_wait_start_s[0] - res.requests.first_scheduled_s[0]
    assert res.kv_transfer_end_s[0] == res.kv_transfer_start_s[0] + kv_transfer_s(
        cfg.deployment.disaggregation.link, res.kv_transfer_bytes[0], cfg.model.num_layers, True, prefill_s)


def test_pipelined_transfers_of_one_prefill_tick_share_its_window():
    """Four 500-token prompts prefilled in one tick over 50 GB/s: the prefill is long enough for the link to carry
    all but the last layer of all four during it, so each exposes its last layer's share after the others' (FIFO),
    not its whole KV behind the first's: ends at t + latency + k x (bytes / 32) / bandwidth, k = 1..4."""
    cfg = xpyd([500] * 4, [5] * 4, [0.0] * 4, bandwidth_gb_per_s=50.0, latency_us=20.0, layerwise_pipelining=True)
    res = run_simulation(cfg, check_invariants=True)
    t0 = res.kv_transfer_start_s[0]
    assert np.all(res.kv_wait_start_s == t0) and np.all(res.kv_transfer_start_s == t0)
    assert (t0 - res.requests.first_scheduled_s[0]) * 31 / 32 * 50e9 > 4 * res.kv_transfer_bytes[0]  # (a long enough prefill)
    last_layer_s = res.kv_transfer_bytes[0] / 32 / 50e9
    expect = t0 + 20e-6 + last_layer_s * np.arange(1, 5)
    assert np.sort(res.kv_transfer_end_s) == pytest.approx(expect, rel=1e-12)


def test_an_ideal_link_is_free_whatever_the_contention():
    cfg = xpyd([2000] * 4, [5] * 4, [0.0] * 4, bandwidth_gb_per_s=None, latency_us=500.0)
    res = run_simulation(cfg)
    assert np.array_equal(res.kv_transfer_end_s, res.kv_transfer_start_s)
    assert np.array_equal(res.kv_link_start_s, res.kv_transfer_start_s)


def test_transfers_alone_on_the_link_are_the_formula_to_the_bit():
    """Requests far apart: no transfer meets another, so fifo and none give the same run, bit for bit."""
    cfg = xpyd([800, 1500, 3000, 500], [20] * 4, [0.0, 1.0, 2.0, 3.0], bandwidth_gb_per_s=5.0)
    a = run_simulation(cfg)
    b = run_simulation(with_value(cfg, "deployment.disaggregation.link.contention", "none"))
    for f in ("kv_transfer_start_s", "kv_link_start_s", "kv_transfer_end_s"):
        assert np.array_equal(getattr(a, f), getattr(b, f)), f
    assert np.array_equal(a.requests.finish_s, b.requests.finish_s)


def test_contention_is_validated_with_its_field_value_and_choices():
    with pytest.raises(ValueError) as err:
        with_value(SimConfig(), "deployment", {"disaggregation": {"link": {"contention": "fair"}}})
    assert "deployment.disaggregation.link.contention" in str(err.value) and "'fair'" in str(err.value)
    assert "'fifo'" in str(err.value) and "'none'" in str(err.value)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 0.05), st.integers(0, 1), st.integers(2, 3), st.floats(1e6, 5e8), st.booleans(),
                          st.floats(0, 0.3)), min_size=1, max_size=12),
       st.floats(1, 100), st.floats(0, 100), st.integers(1, 80))  # fmt: skip
def test_transfers_never_overlap_on_a_side_and_take_at_least_their_formula(sends, bw, lat, layers):
    """Random transfers from sides 0-1 (prefill instances) to 2-3 (decode instances), dispatched in time order: the
    spans two transfers hold on a shared side never overlap; each moves exactly its bytes' wire time (hidden during
    its prefill and exposed after), from no earlier than its prefill's link window, and ends no sooner than the
    formula alone (latency + exposed / bandwidth) and exactly its last span's end + latency."""
    link = LinkConfig(bandwidth_gb_per_s=bw, latency_us=lat, layerwise_pipelining=True)
    one = KVTransfer(None, link, layers)
    sides = LinkSides(one, 4)
    t, booked = 0.0, []
    for gap_s, src, dst, nbytes, piped, overlap_s in sends:
        t += gap_s
        moves_s, end_s, spans = sides.send(src, dst, t, nbytes, piped, overlap_s)
        alone_s = one.seconds(nbytes, piped, overlap_s)
        assert end_s >= t + alone_s - 1e-9 * max(1.0, t + alone_s)
        assert moves_s >= t and spans and end_s == pytest.approx(spans[-1][1] + lat * 1e-6, rel=1e-12, abs=1e-15)
        window_s = overlap_s * (layers - 1) / layers if piped and layers > 1 else 0.0
        assert spans[0][0] >= t - window_s - 1e-12
        assert sum(b - a for a, b in spans) == pytest.approx(nbytes / (bw * 1e9), rel=1e-9)
        assert all(a < b <= c for (a, b), (c, _) in zip(spans, spans[1:]))  # its own spans in time order
        for src2, dst2, spans2 in booked:
            if {src, dst} & {src2, dst2}:
                assert all(b <= c or d <= a for a, b in spans for c, d in spans2)
        booked.append((src, dst, spans))
    for side in range(4):
        busy = sides.busy_spans(side)
        assert all(a < b < c for (a, b), (c, _) in zip(busy, busy[1:]))  # sorted, disjoint, touching ones merged


@settings(max_examples=12, deadline=None)
@given(st.integers(0, 10_000), st.sampled_from([(1, 1), (2, 1), (1, 2), (3, 2)]), st.floats(2, 50), st.booleans())
def test_deployments_on_a_slow_link_keep_every_tick_invariant(seed, pools, bw, piped):
    """Invariants every tick (blocks, progress) and over the run, with transfers queueing on a slow link; each transfer
    takes at least the formula's time from its start (alone on the link), and starts moving no earlier than its start;
    1P1D (one link, one pair of sides): the transfers' moving parts never overlap."""
    from tests.sim_core.cluster.test_deployment import assert_cluster_invariants

    cfg = make_config(seed=seed, workload__num_requests=40, workload__arrival__rate_per_s=20.0,
                      workload__prompt_tokens={"dist": "lognormal", "mean": 1500, "min": 100, "max": 3000},
                      workload__output_tokens={"dist": "lognormal", "mean": 50, "min": 1, "max": 200})  # fmt: skip
    cfg = with_value(cfg, "deployment", {"disaggregation": {
        "prefill": {"replicas": pools[0]}, "decode": {"replicas": pools[1]},
        "link": {"bandwidth_gb_per_s": bw, "latency_us": 20.0, "layerwise_pipelining": piped}}})  # fmt: skip
    run = Deployment(cfg, check_invariants=True)
    run.run()
    res = build_result(run)
    assert_cluster_invariants(res)
    moved = np.isfinite(res.kv_transfer_end_s)
    assert moved.any()
    start, moves, end = res.kv_transfer_start_s[moved], res.kv_link_start_s[moved], res.kv_transfer_end_s[moved]
    assert np.all(moves >= start) and np.all(end >= moves)
    link, layers = cfg.deployment.disaggregation.link, cfg.model.num_layers
    ready, admitted = res.kv_wait_start_s[moved], res.requests.first_scheduled_s[moved]  # (the prefill side's first token)
    alone_s = np.array([kv_transfer_s(link, b, layers, t == w, w - a) for b, t, w, a in
                        zip(res.kv_transfer_bytes[moved], start, ready, admitted)])  # fmt: skip
    assert np.all(end - start >= alone_s - 1e-12 * end)  # (to a rounding of the clock)
    if pools == (1, 1):
        o = np.argsort(moves, kind="stable")
        assert np.all(moves[o][1:] >= end[o][:-1] - 20e-6 - 1e-12 * end[o][:-1])  # one at a time on the wire


def test_the_readme_quotes_the_link_contention_runs_as_they_run():
    # Beyond one engine, "Transfers share the link": the presets' waits and the slow-link runs, quoted and unpinned
    # until session 37 (each an xPyD run at a link speed no digest config uses)

    link = "deployment.disaggregation.link"
    text = prose("cluster")

    def run(preset, **sets):
        cfg = load_preset(preset)
        for key, value in sets.items():
            cfg = with_value(cfg, f"{link}.{key}", value)
        res = run_simulation(cfg)
        moved = ~np.isnan(res.kv_transfer_end_s)
        queued = (res.kv_link_start_s - res.kv_transfer_start_s)[moved]
        xfer = (res.kv_transfer_end_s - res.kv_transfer_start_s)[moved]
        return res.summary, int((queued > 0).sum()), int(moved.sum()), float(queued.max()), float(np.median(xfer))

    dynamo, distserve, splitwise = (run(p) for p in ("cluster-dynamo-llama70b-fp8-8xh100-3p1d", "cluster-distserve-opt13b-3xa100-p2d1",
                                                     "cluster-splitwise-llama70b-4xdgx-ha-3p1d"))  # fmt: skip
    assert (f"Dynamo 3P1D (450 GB/s) {'none' if dynamo[1] == 0 else dynamo[1]} of {dynamo[2]}; DistServe p2d1 (300 GB/s) "
            f"{distserve[1]} of {distserve[2]}, at most {distserve[3] * 1e3:.2f} ms; Splitwise-HA (400 GB/s) {splitwise[1]} of "
            f"{splitwise[2]}, at most {splitwise[3] * 1e3:.1f} ms") in text  # fmt: skip
    free = run("cluster-splitwise-llama70b-4xdgx-ha-3p1d", bandwidth_gb_per_s=10.0, contention="none")
    fifo = run("cluster-splitwise-llama70b-4xdgx-ha-3p1d", bandwidth_gb_per_s=10.0)
    assert (f"which `none` delivered (transfer p50 {free[4] * 1e3:.2f} ms, TPOT p99 {free[0].tpot_p99_s * 1e3:.1f} ms, "
            f"{free[0].slo_attainment:.0%} meet both SLOs); with `fifo` {fifo[1]} transfers queue, up to {fifo[3]:.1f} s "
            f"(transfer p50 {fifo[4]:.1f} s, TPOT p99 {fifo[0].tpot_p99_s * 1e3:.1f} ms, {fifo[0].slo_attainment:.0%})"
            ).replace("%", " %") in text  # fmt: skip
    slow, five = (run("cluster-dynamo-llama70b-fp8-8xh100-3p1d", bandwidth_gb_per_s=bw) for bw in (4.0, 5.0))
    d = dynamo[0]
    assert (f"TTFT p50 {d.ttft_p50_s:.2f} s -> {slow[0].ttft_p50_s:.1f} s, p99 {d.ttft_p99_s:.2f} s -> {slow[0].ttft_p99_s:.1f} s, "
            f"{d.slo_attainment:.0%} -> {slow[0].slo_attainment:.0%} meeting both SLOs; at 5 GB/s "
            f"{'one transfer' if five[1] == 1 else f'{five[1]} transfers'} of {five[2]} {'waits' if five[1] == 1 else 'wait'}, "
            f"at most {five[3] * 1e3:.1f} ms"
            ).replace("%", " %") in text  # fmt: skip


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 1), st.floats(0, 1)), min_size=1, max_size=10), st.data())
def test_a_transfers_spans_booked_in_one_call_are_its_spans_booked_one_by_one(cuts, data):
    """`LinkSides._book` takes a transfer's spans in one call: a side's busy spans are then those of booking each
    span alone in turn, touching ones merged, in every case of the merge (after the last, touching it, between
    spans, touching the one before, the one after or both)."""
    points = sorted({round(x, 3) for cut in cuts for x in cut})
    free = list(zip(points, points[1:]))  # disjoint spans, some touching
    spans = data.draw(st.lists(st.sampled_from(free), unique=True, min_size=1, max_size=len(free)) if free else st.just([]))
    at_once, one_by_one = LinkSides(KVTransfer(None, LinkConfig(), 32), 1), LinkSides(KVTransfer(None, LinkConfig(), 32), 1)
    split = data.draw(st.integers(0, len(spans)))  # (some booked before, as earlier transfers)
    for s in spans[:split]:
        at_once._book(0, [s])
    at_once._book(0, spans[split:])
    for s in spans:
        one_by_one._book(0, [s])
    assert at_once.busy_spans(0) == one_by_one.busy_spans(0)
    merged = []
    for a, b in sorted(spans):
        if merged and merged[-1][1] == a:
            merged[-1] = (merged[-1][0], b)
        else:
            merged.append((a, b))
    assert at_once.busy_spans(0) == merged


def test_the_docs_quote_the_draft_models_transfer_bytes_as_they_run():
    # docs/cluster.md, Disaggregation: the Dynamo 3P1D preset's transfers without and with a Llama-3.2-1B draft
    cfg = load_preset("cluster-dynamo-llama70b-fp8-8xh100-3p1d")
    drafted = with_value(with_value(cfg, "scheduler.speculative.enabled", True), "scheduler.speculative.draft", "model")
    plain, spec = (np.nansum(run_simulation(c).kv_transfer_bytes) / 1e9 for c in (cfg, drafted))
    assert spec > plain
    assert f"{plain:.2f} -> {spec:.2f} GB for its {cfg.workload.num_requests} transfers" in prose("cluster")
