"""The result of a deployment: one SimResult per instance, and the deployment as a whole.

`ClusterResult` IS a `SimResult` (the unit every consumer reads): its request table merges each
request's rows from the instances it ran on (prefill side up to the first token, decode side after),
its summary is over the deployment (GPU busy over all GPUs, KV over all instances), its timeline
holds every instance's ticks (column `instance`) ordered by end time. Per-instance results, each
summarised over the requests routed to it, are in `instances`; the app draws one Gantt row each.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from sim_core.cluster.deployment import Deployment
from sim_core.metrics import summarize
from sim_core.result import BatchLog, Events, RequestTable, SimResult, Summary, Timeline
from sim_core.types import FloatArray, IntArray, Phase, Status

_REQ_FIELDS = tuple(f.name for f in dataclasses.fields(RequestTable))


@dataclass(frozen=True)
class InstanceResult:
    role: str  # "replica" | "prefill" | "decode"
    index: int  # within its pool
    num_gpus: int  # tensor-parallel degree of this instance
    hardware: str
    result: SimResult  # full-size request table (index = request id); summary over its own requests
    num_requests: int  # requests routed to this instance

    @property
    def label(self) -> str:
        gpus = f"{self.num_gpus}x " if self.num_gpus > 1 else ""
        return f"{self.role} {self.index} ({gpus}{self.hardware})"


@dataclass(frozen=True)
class ClusterResult(SimResult):
    instances: tuple[InstanceResult, ...] = ()
    instance_of: IntArray | None = None  # (R,) first instance of each request (index into instances), -1: never routed
    decode_instance_of: IntArray | None = None  # (R,) decode instance, -1 when none
    kv_wait_start_s: FloatArray | None = None  # (R,) prefill done, waiting for a decode slot
    kv_transfer_start_s: FloatArray | None = None  # (R,) decode blocks reserved, transfer starts
    kv_transfer_end_s: FloatArray | None = None  # (R,) KV arrived on the decode instance
    kv_transfer_bytes: FloatArray | None = None  # (R,)
    num_gpus: int = 1

    @property
    def is_disaggregated(self) -> bool:
        return any(x.role == "prefill" for x in self.instances)

    def instance_label_of(self) -> list[str]:
        """For each request, the instance(s) it ran on (e.g. 'replica 2', 'prefill 0 -> decode 1')."""
        names = [f"{x.role} {x.index}" for x in self.instances]
        out = []
        for a, b in zip(self.instance_of.tolist(), self.decode_instance_of.tolist()):
            out.append("-" if a < 0 else names[a] + (f" -> {names[b]}" if b >= 0 else ""))
        return out

    def to_frames(self):
        frames = super().to_frames()
        req = frames["requests"]
        req["instance"] = self.instance_label_of()
        if self.is_disaggregated:
            req["kv_wait_s"] = self.kv_transfer_start_s - self.kv_wait_start_s
            req["kv_transfer_s"] = self.kv_transfer_end_s - self.kv_transfer_start_s
            req["kv_transfer_bytes"] = self.kv_transfer_bytes
        labels = np.array([x.label for x in self.instances])
        frames["ticks"]["instance"] = labels[self.timeline.columns["instance"]]
        return frames


def _subset(req: RequestTable, mask: np.ndarray) -> RequestTable:
    return RequestTable(**{f: getattr(req, f)[mask] for f in _REQ_FIELDS})


def _merge_requests(dep: Deployment, tables: list[RequestTable]) -> RequestTable:
    """Each request's row from the instance it ran on; disaggregated: decode-side progress after the
    first token (emitted tokens, finish, ITL), pre-emptions summed over both sides."""
    out = {f: getattr(tables[0], f).copy() for f in _REQ_FIELDS}
    for i in range(1, len(dep.front)):
        m = dep.instance_of == i
        for f in _REQ_FIELDS:
            out[f][m] = getattr(tables[i], f)[m]
    if dep.back:
        handed = ~np.isnan(dep.kv_wait_start_s)
        out["status"][handed] = Status.RUNNING  # until its decode side says otherwise
        out["finish_s"][handed] = np.nan
        for k in range(len(dep.back)):
            d = len(dep.front) + k
            m = (dep.decode_of == d) & dep.injected
            dec = tables[d]
            for f in ("num_emitted", "status", "finish_s", "max_itl_s"):
                out[f][m] = getattr(dec, f)[m]
            out["num_preemptions"][m] += dec.num_preemptions[m]
            out["num_recomputed_tokens"][m] += dec.num_recomputed_tokens[m]
    return RequestTable(**out)


def _deployment_summary(dep: Deployment, parts: list[InstanceResult], req: RequestTable, tl: Timeline,
                        itl: FloatArray, stopped: str | None) -> Summary:  # fmt: skip
    """Request metrics over the merged table; GPU and KV figures aggregated over instances."""
    cfg = dep.cfg
    first = parts[0].result
    num_swaps = sum(x.engine.num_swap_outs for x in dep.instances)
    s = summarize(cfg, req, tl, itl, first.memory, num_swaps, stopped)
    busy_gpu_s = sum(float(p.result.timeline.duration_s[p.result.timeline.phase != Phase.IDLE].sum()) * p.num_gpus
                     for p in parts)  # fmt: skip
    ticks = [p.result.summary.num_ticks for p in parts]
    weighted = lambda name: (sum(getattr(p.result.summary, name) * n for p, n in zip(parts, ticks) if n)  # noqa: E731
                             / max(sum(ticks), 1))  # fmt: skip
    return s.model_copy(update={
        "gpu_busy_fraction": busy_gpu_s / (cfg.num_gpus_total * s.makespan_s) if tl.num_ticks else 0.0,
        "mfu_mean": weighted("mfu_mean"), "mbu_mean": weighted("mbu_mean"),
        "kv_peak_usage": max(p.result.summary.kv_peak_usage for p in parts),
        "kv_num_blocks": sum(p.result.memory.num_blocks for p in parts),
        "kv_capacity_tokens": sum(p.result.memory.kv_capacity_tokens for p in parts),
        "swap_time_s": sum(p.result.summary.swap_time_s for p in parts),
    })  # fmt: skip


def build_result(dep: Deployment) -> ClusterResult:
    cfg = dep.cfg
    R = dep.num_requests
    raw = [x.engine._result() for x in dep.instances]
    parts = []
    for k, (inst, res) in enumerate(zip(dep.instances, raw)):
        mask = (dep.decode_of == k) if inst.role == "decode" else (dep.instance_of == k)
        own = _subset(res.requests, mask)
        summary = summarize(inst.cfg, own, res.timeline, res.itl_s, res.memory, inst.engine.num_swap_outs,
                            inst.engine.stopped_reason)  # fmt: skip
        parts.append(InstanceResult(inst.role, inst.index, inst.cfg.hardware.num_gpus, inst.cfg.hardware.name,
                                    dataclasses.replace(res, summary=summary), int(mask.sum())))  # fmt: skip
    req = _merge_requests(dep, [r.requests for r in raw])
    # Timeline: every instance's rows, ordered by end time (stable), tagged with the instance.
    cols = {name: np.concatenate([r.timeline.columns[name] for r in raw]) for name in raw[0].timeline.columns}
    cols["instance"] = np.concatenate([np.full(r.timeline.num_ticks, k, dtype=np.int64) for k, r in enumerate(raw)])
    order = np.argsort(cols["t_start_s"] + cols["duration_s"], kind="stable")
    tl = Timeline({name: col[order] for name, col in cols.items()})
    # Events: instances' and the cluster's, in time order; at equal times prefill side, cluster, decode side.
    ce = dep.events
    c_req = np.array([e[0] for e in ce], dtype=np.int64)
    c_t = np.array([e[1] for e in ce], dtype=np.float64)
    c_k = np.array([e[2] for e in ce], dtype=np.int8)
    front, back = raw[: len(dep.front)], raw[len(dep.front) :]
    ev_req = np.concatenate([r.events.req for r in front] + [c_req] + [r.events.req for r in back])
    ev_t = np.concatenate([r.events.time_s for r in front] + [c_t] + [r.events.time_s for r in back])
    ev_k = np.concatenate([r.events.kind for r in front] + [c_k] + [r.events.kind for r in back])
    o = np.argsort(ev_t, kind="stable")
    events = Events(ev_req[o], ev_t[o], ev_k[o])
    itl = np.concatenate([r.itl_s for r in raw])
    stopped = dep.stopped_reason
    if stopped:
        left = int((~req.is_finished).sum())
        stopped += f"; {left:,} of {R:,} requests unfinished (the load exceeds capacity or the limit is too low)"
    summary = _deployment_summary(dep, parts, req, tl, itl.copy(), stopped)
    empty = np.empty(0, dtype=np.int64)
    batches = BatchLog(empty, empty, empty, np.empty(0, dtype=bool), empty)
    return ClusterResult(
        config=cfg, memory=raw[0].memory, requests=req, timeline=tl, events=events, itl_s=itl, batches=batches,
        summary=summary, instances=tuple(parts), instance_of=dep.instance_of, decode_instance_of=dep.decode_of,
        kv_wait_start_s=dep.kv_wait_start_s, kv_transfer_start_s=dep.kv_transfer_start_s,
        kv_transfer_end_s=dep.kv_transfer_end_s, kv_transfer_bytes=dep.kv_transfer_bytes, num_gpus=cfg.num_gpus_total,
    )  # fmt: skip
