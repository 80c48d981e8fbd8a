"""KV transfer from a prefill instance to a decode instance (DESIGN.md §8). Pure arithmetic.

bytes = KV bytes per token (whole model, all layers) x context tokens
time  = link latency + bytes / bandwidth
With layer-wise pipelining each layer's KV is sent while the next layer computes, so only the last
layer's share (bytes / num_layers) is exposed after the prefill. Pipelining needs the decode slot
reserved when the prefill ends; a request that had to wait for a slot (back-pressure) sends all of
its KV after the wait. An ideal link (bandwidth empty) makes the transfer free (0 s, latency too).
"""

from __future__ import annotations

from sim_core.config import LinkConfig, SimConfig
from sim_core.costmodel import GB, kv_bytes_per_token


def kv_transfer_bytes(cfg: SimConfig, context_tokens: int) -> float:
    return kv_bytes_per_token(cfg) * context_tokens


def kv_transfer_s(link: LinkConfig, num_bytes: float, num_layers: int, pipelined: bool) -> float:
    """Exposed transfer time, s. `pipelined`: the slot was reserved when the prefill ended."""
    if link.bandwidth_gb_per_s is None:
        return 0.0
    exposed = num_bytes / num_layers if pipelined and link.layerwise_pipelining else num_bytes
    return link.latency_us * 1e-6 + exposed / (link.bandwidth_gb_per_s * GB)
