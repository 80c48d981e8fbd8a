from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sim_core.cluster.transfer import kv_transfer_bytes, kv_transfer_s
from sim_core.config import LinkConfig, SimConfig


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
