from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sim_core.cluster.transfer import kv_transfer_bytes, kv_transfer_s
from sim_core.config import LinkConfig, SimConfig
from sim_core.engine import run_simulation
from sim_core.presets import load_preset
from sim_core.sweep import with_value


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
