"""KV transfer from a prefill instance to a decode instance. Pure arithmetic.

bytes = KV bytes per token (whole model, all layers, a speculative draft's layers too) x context tokens
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

Contention (`link.contention = fifo`, `LinkSides`): each GPU of a TP group sends its shard of the KV over its own NIC
(or NVLink ports), so a transfer holds its prefill instance's side of the link and its decode instance's side, and one
side carries the link's bandwidth whatever the number of transfers through it. Transfers take the sides in the
order they are dispatched (FIFO: vLLM's P2pNcclEngine sends one tensor at a time from a queue on one stream, and its
listener receives one at a time), each moving only in time both its sides are free of the earlier ones: a pipelined
transfer sends layers during its prefill in the free time there (no more than all but the last layer's share), the
rest from its dispatch on. The latency does not hold a side: it is added after the last byte leaves (a later
transfer's bytes follow on the wire). Alone on its sides a transfer takes `KVTransfer.seconds` exactly.
"""

from __future__ import annotations

import math
from bisect import bisect_right

from sim_core.config import LinkConfig, SimConfig
from sim_core.costmodel import GB, draft_kv_bytes_per_token, kv_bytes_per_token


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
        # (a speculative draft's layers are in the same blocks as the target's, and they cross with them:
        # costmodel.draft_kv_bytes_per_token; cfg: the sending prefill instance's, whose draft agrees with the decode
        # pool's, SimConfig._check_deployment)
        self.bytes_per_token = kv_bytes_per_token(cfg) + draft_kv_bytes_per_token(cfg) if cfg is not None else math.nan
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
        return self.latency_s + self.exposed_bytes(num_bytes, pipelined, overlap_s) / self.bytes_per_s

    def exposed_bytes(self, num_bytes: float, pipelined: bool, overlap_s: float = math.inf, free_s: float | None = None) -> float:
        """The bytes the link carries after the prefill. `free_s`: of the link's share of the prefill (overlap_s x
        (L - 1) / L), the time it was free to carry them (None: all of it; `LinkSides`: what other transfers left)."""
        exposed = num_bytes
        if pipelined and self.pipelines:  # (the link sends during the prefill, but no more than it can carry then;
            L = self.num_layers  # bytes first, then / bandwidth: the float operations of the formula before the bound)
            exposed = num_bytes / L
            if L > 1 and overlap_s < math.inf:  # (one layer hides nothing; an unbounded prefill hides the rest)
                if free_s is None:
                    free_s = overlap_s * (L - 1) / L
                exposed = max(exposed, num_bytes - free_s * self.bytes_per_s)
        return exposed


class LinkSides:
    """Every instance's side of the KV link (link.contention = fifo, the module's docstring): the spans its wire was
    busy (sender's clock: a receiver's are the same shifted by the one latency), and `send`, which books a transfer
    into the time the earlier ones left free. Deterministic: the bookings are in call order."""

    def __init__(self, transfer: KVTransfer, num_sides: int):
        self.transfer = transfer
        self._starts: list[list[float]] = [[] for _ in range(num_sides)]  # per side: busy spans, sorted, disjoint
        self._ends: list[list[float]] = [[] for _ in range(num_sides)]  # (touching spans merged)

    def send(self, src: int, dst: int, t_s: float, num_bytes: float, pipelined: bool,
             overlap_s: float = math.inf) -> tuple[float, float, list[tuple[float, float]]]:  # fmt: skip
        """Book a transfer from side `src` to side `dst` dispatched at `t_s` (`KVTransfer.seconds`' other arguments;
        `overlap_s` finite, or its prefill's share of the link is not booked); returns the first instant from `t_s` on
        at which its bytes move, its end, and the spans its wire holds both sides (during the prefill too, when
        pipelined)."""
        x = self.transfer
        if x.ideal:
            return t_s, t_s + 0.0, []
        bps, L = x.bytes_per_s, x.num_layers
        piped = pipelined and x.pipelines and L > 1 and overlap_s < math.inf
        window_s = overlap_s * (L - 1) / L if piped else 0.0  # (the link's share of the prefill: `exposed_bytes`)
        lo = t_s - window_s
        ends_a, ends_b = self._ends[src], self._ends[dst]
        if (not ends_a or ends_a[-1] <= lo) and (not ends_b or ends_b[-1] <= lo):  # alone: the formula, to the bit
            # (most transfers: its spans go after every booked one, as `_take` would place them, without a search)
            exposed = x.exposed_bytes(num_bytes, pipelined, overlap_s)
            spans = []
            if piped:
                hidden_end = lo + (num_bytes - exposed) / bps
                if hidden_end > lo:
                    spans.append((lo, hidden_end if hidden_end < t_s else t_s))
            wire_end = t_s + exposed / bps
            if wire_end > t_s:
                spans.append((t_s, wire_end))
            for side in (src, dst) if src != dst else (src,):
                self._book(side, spans)  # (after every span, or touching the last: `_book`'s first cases)
            return t_s, t_s + (x.latency_s + exposed / bps), spans
        hidden = []
        free_s = None
        if piped:  # (its layers move during the prefill only in the time the transfers before it left free)
            gaps = self._free(src, dst, lo, t_s)
            free_s = None if gaps == [(lo, t_s)] else sum(b - a for a, b in gaps)  # (None: all of it, to the bit)
        exposed = x.exposed_bytes(num_bytes, pipelined, overlap_s, free_s)
        if piped:
            hidden = _take(gaps, (num_bytes - exposed) / bps)
        pieces = _take(self._free(src, dst, t_s, math.inf), exposed / bps)  # (the last gap is open)
        spans = [(a, b) for a, b in hidden + pieces if b > a]
        for side in (src, dst) if src != dst else (src,):
            self._book(side, spans)
        if len(pieces) == 1 and pieces[0][0] == t_s:  # (nothing in its way from its dispatch: `seconds`' sum)
            return t_s, t_s + (x.latency_s + exposed / bps), spans
        return pieces[0][0], pieces[-1][1] + x.latency_s, spans

    def _free(self, src: int, dst: int, lo: float, hi: float) -> list[tuple[float, float]]:
        """The spans of [lo, hi] free on both sides, in time order (empty spans left out)."""
        busy = []
        for side in (src, dst) if src != dst else (src,):
            starts, ends = self._starts[side], self._ends[side]
            k = bisect_right(ends, lo)  # (the first span that ends after lo)
            while k < len(starts) and starts[k] < hi:
                busy.append((starts[k], ends[k]))
                k += 1
        busy.sort()
        out, at = [], lo
        for a, b in busy:
            if a > at:
                out.append((at, a))
            at = max(at, b)
        if hi > at:
            out.append((at, hi))
        return out

    def busy_spans(self, side: int) -> list[tuple[float, float]]:
        """The spans side `side` was busy, in time order (touching ones merged)."""
        return list(zip(self._starts[side], self._ends[side]))

    def _book(self, side: int, spans: list[tuple[float, float]]) -> None:
        """Side `side` busy over each [a, b] of `spans` (disjoint, free there before), one after the other: each merged
        with a span it touches. (A transfer's spans in one call, not one call each: two per side of most transfers.)"""
        starts, ends = self._starts[side], self._ends[side]
        for a, b in spans:
            if not ends or ends[-1] < a:  # (after every span: most bookings)
                starts.append(a)
                ends.append(b)
                continue
            if ends[-1] == a:  # (touching the last span: one span)
                ends[-1] = b
                continue
            k = bisect_right(ends, a)  # (spans before k end at or before a)
            if k and ends[k - 1] == a:  # (joins the span before)
                k -= 1
                if k + 1 < len(starts) and starts[k + 1] == b:  # (and the one after: one span)
                    ends[k] = ends[k + 1]
                    del starts[k + 1], ends[k + 1]
                else:
                    ends[k] = b
            elif k < len(starts) and starts[k] == b:
                starts[k] = a
            else:
                starts.insert(k, a)
                ends.insert(k, b)


def _take(gaps: list[tuple[float, float]], wire_s: float) -> list[tuple[float, float]]:
    """The first `wire_s` seconds of the free `gaps`, as spans (the last gap may be open: inf)."""
    out = []
    for a, b in gaps:
        if b - a >= wire_s:
            out.append((a, min(a + wire_s, b)))
            return out
        out.append((a, b))  # (the whole gap: its own end, not a + (b - a), which may pass it by a rounding)
        wire_s -= b - a
    return out
