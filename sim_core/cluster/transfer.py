"""KV transfer from a prefill instance to a decode instance. Pure arithmetic.

bytes = KV bytes per token (whole model, all layers) x context tokens
time  = link latency + bytes / bandwidth
With layer-wise pipelining each layer's KV is sent while the next layer computes, so at best only the last
layer's share (bytes / num_layers) is exposed after the prefill; but the link carries no more than bandwidth x
the time it had: from the first layer's share of the prefill (`overlap_s`, the request's prefill from its first
admission to its first token) to the prefill's end. A link slower than the prefill leaves the rest exposed:
exposed = max(wire / num_layers, wire - overlap_s x (num_layers - 1) / num_layers), wire = bytes / bandwidth
(one prefill tick of c per layer: layer i's KV is ready at (i + 1) c and the link sends one layer at a time).
Pipelining needs the decode slot reserved when the prefill ends; a request that had to wait for a slot
(back-pressure) sends all of its KV after the wait. An ideal link (bandwidth empty) makes the transfer free
(0 s, latency too).
"""

from __future__ import annotations

import math

from sim_core.config import LinkConfig, SimConfig
from sim_core.costmodel import GB, kv_bytes_per_token


def kv_transfer_bytes(cfg: SimConfig, context_tokens: int) -> float:
    return KVTransfer(cfg, None, 1).bytes(context_tokens)


def kv_transfer_s(link: LinkConfig, num_bytes: float, num_layers: int, pipelined: bool, overlap_s: float = math.inf) -> float:
    """Exposed transfer time, s. `pipelined`: the slot was reserved when the prefill ended; `overlap_s`: how long the
    prefill computed (inf: long enough to hide all but the last layer's share)."""
    return KVTransfer(None, link, num_layers).seconds(num_bytes, pipelined, overlap_s)


class KVTransfer:
    """`kv_transfer_bytes` and `kv_transfer_s` of one deployment (config, link, layers), their inputs read once: a
    deployment prices a transfer at every dispatch (issue 13: cost). The same operations on the same values."""

    def __init__(self, cfg: SimConfig | None, link: LinkConfig | None, num_layers: int):
        self.bytes_per_token = kv_bytes_per_token(cfg) if cfg is not None else math.nan
        self.ideal = link is None or link.bandwidth_gb_per_s is None  # (an ideal link: free, latency too)
        self.pipelines = link is not None and link.layerwise_pipelining
        self.latency_s = link.latency_us * 1e-6 if link is not None else 0.0
        self.bytes_per_s = math.nan if self.ideal else link.bandwidth_gb_per_s * GB
        self.num_layers = num_layers

    def bytes(self, context_tokens: int) -> float:
        return self.bytes_per_token * context_tokens

    def seconds(self, num_bytes: float, pipelined: bool, overlap_s: float = math.inf) -> float:
        if self.ideal:
            return 0.0
        exposed = num_bytes
        if pipelined and self.pipelines:  # (the link sends during the prefill, but no more than it can carry then;
            L = self.num_layers  # bytes first, then / bandwidth: the float operations of the formula before the bound)
            exposed = num_bytes / L
            if L > 1 and overlap_s < math.inf:  # (one layer hides nothing; an unbounded prefill hides the rest)
                exposed = max(exposed, num_bytes - overlap_s * (L - 1) / L * self.bytes_per_s)
        return self.latency_s + exposed / self.bytes_per_s
