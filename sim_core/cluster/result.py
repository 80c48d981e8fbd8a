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

from sim_core.cluster.deployment import EVENT_KIND_BITS, KV_TRANSFER_START, KV_WAIT, Deployment
from sim_core.metrics import meets_slo, output_and_total_tokens, summarize, unfinished_reason
from sim_core.result import BatchLog, Events, RequestTable, SimResult, Summary, Timeline
from sim_core.runs import RunsUnion
from sim_core.types import FloatArray, IntArray, Phase, Status

_REQ_FIELDS = tuple(f.name for f in dataclasses.fields(RequestTable))


@dataclass(frozen=True)
class InstanceResult:
    role: str  # "replica" | "prefill" | "decode"
    index: int  # within its pool
    num_gpus: int  # tensor-parallel degree of this instance
    hardware: str
    result: SimResult  # this engine's run; row k of its request table is request request_ids[k]
    request_ids: IntArray  # (n,) deployment-wide id of each request this instance served

    @property
    def num_requests(self) -> int:
        return int(self.request_ids.size)

    @property
    def name(self) -> str:
        """'replica 2', 'prefill 0': the key of the `instance` column of every table (requests, ticks, instances)."""
        return f"{self.role} {self.index}"

    @property
    def gpus(self) -> str:
        """'2x H100 SXM' (the count only when there are several)."""
        return f"{self.num_gpus}x {self.hardware}" if self.num_gpus > 1 else self.hardware

    @property
    def label(self) -> str:
        return f"{self.name} ({self.gpus})"


@dataclass(frozen=True)
class ClusterResult(SimResult):
    instances: tuple[InstanceResult, ...] = ()
    instance_of: IntArray | None = None  # (R,) first instance of each request (index into instances), -1: never routed
    decode_instance_of: IntArray | None = None  # (R,) decode instance, -1 when none
    kv_wait_start_s: FloatArray | None = None  # (R,) prefill done, waiting for a decode slot
    kv_transfer_start_s: FloatArray | None = None  # (R,) decode blocks reserved, transfer starts
    # (R,) its bytes start moving: later than kv_transfer_start_s when earlier transfers held a side of the link
    # (link.contention = fifo; a pipelined transfer sent layers during its prefill too, in the time the link was free)
    kv_link_start_s: FloatArray | None = None
    kv_transfer_end_s: FloatArray | None = None  # (R,) KV arrived on the decode instance
    kv_transfer_bytes: FloatArray | None = None  # (R,)
    num_gpus: int = 1

    @property
    def is_disaggregated(self) -> bool:
        return any(x.role == "prefill" for x in self.instances)

    @property
    def kv_peak_instance(self) -> InstanceResult:
        """The instance whose peak is the deployment's `summary.kv_peak_usage` (the first of equals): that share is of
        this instance's own pool, not of the deployment's total KV capacity, so whatever reports it names the instance."""
        return max(self.instances, key=lambda x: x.result.summary.kv_peak_usage)

    def instance_label_of(self) -> list[str]:
        """For each request, the instance(s) it ran on (e.g. 'replica 2', 'prefill 0 -> decode 1')."""
        names = [x.name for x in self.instances]
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
            req["kv_link_wait_s"] = self.kv_link_start_s - self.kv_transfer_start_s
            req["kv_transfer_s"] = self.kv_transfer_end_s - self.kv_transfer_start_s
            req["kv_transfer_bytes"] = self.kv_transfer_bytes
        # the requests' names, not the labels with the GPU ('replica 0 (H100 SXM)'): the ticks, requests and
        # instances tables of one run join on this column (the ticks said 'replica 0 (H100 SXM)', requests 'replica 0')
        names = np.array([x.name for x in self.instances])
        frames["ticks"]["instance"] = names[self.timeline.columns["instance"]]
        return frames

    def tick_peaks(self) -> tuple[FloatArray, FloatArray]:
        """Each tick's instance's peaks: pools may run on other GPUs (Splitwise-HA: A100 decode behind H100 prefill;
        the top-level GPU's divided the A100's decode ticks by an H100's peak and bandwidth)."""
        per = np.array([x.result.tick_peaks() for x in self.instances], dtype=np.float64)  # (instances, 2)
        k = self.timeline.columns["instance"]
        return per[k, 0], per[k, 1]


def _rows(req: RequestTable, n: int) -> RequestTable:
    return RequestTable(**{f: getattr(req, f)[:n] for f in _REQ_FIELDS})


def _merge_requests(dep: Deployment, tables: list[RequestTable]) -> RequestTable:
    """Each request's row from the instance it ran on; disaggregated: decode-side progress after the
    first token (emitted tokens, finish, ITL), pre-emptions summed over both sides. Requests never
    routed (the run stopped first) stay pending."""
    wl, R = dep.workload, dep.num_requests
    nan = lambda: np.full(R, np.nan)  # noqa: E731
    zero = lambda: np.zeros(R, dtype=np.int64)  # noqa: E731
    out = {"arrival_s": wl.arrival_s.copy(), "prompt_tokens": wl.prompt_tokens, "output_tokens": wl.output_tokens,
           "num_emitted": zero(), "priority": wl.priority, "class_idx": wl.class_idx,
           "status": np.full(R, Status.PENDING, dtype=np.int8), "first_scheduled_s": nan(), "first_token_s": nan(),
           "finish_s": nan(), "num_preemptions": zero(), "num_recomputed_tokens": zero(), "max_itl_s": np.zeros(R)}  # fmt: skip
    for i in range(len(dep.front)):
        ids = np.array(dep.ids_of[i], dtype=np.int64)
        for f in _REQ_FIELDS:
            out[f][ids] = getattr(tables[i], f)[: ids.size]
    if dep.back:
        # Handed off: FINISHED on its prefill instance at the first token with tokens still to go. (Not
        # `kv_wait_start_s`: a run stopped by a limit before the deployment took a hand-off event from its heap
        # left no wait start, and the request read as finished with one token of its output.)
        handed = (out["status"] == Status.FINISHED) & (out["num_emitted"] < out["output_tokens"])
        out["status"][handed] = Status.RUNNING  # until its decode side says otherwise
        out["finish_s"][handed] = np.nan
        if dep.first_token_on_decode:  # the prefill side's token is not the user's: the decode side's first tick
            out["first_token_s"][handed] = np.nan  # emits it (`Engine.inject_prefilled`; set below if it did)
            out["num_emitted"][handed] = 0
        for d in range(len(dep.front), len(dep.instances)):
            ids = np.array(dep.ids_of[d], dtype=np.int64)
            m = dep.injected[ids]
            g, dec = ids[m], tables[d]
            for f in ("num_emitted", "status", "finish_s", "max_itl_s", "first_token_s"):  # (first token: the user's,
                out[f][g] = getattr(dec, f)[: ids.size][m]  # the prefill side's, or the decode side's first tick's)
            out["num_preemptions"][g] += dec.num_preemptions[: ids.size][m]
            out["num_recomputed_tokens"][g] += dec.num_recomputed_tokens[: ids.size][m]
    return RequestTable(**out)


def _deployment_summary(dep: Deployment, parts: list[InstanceResult], req: RequestTable, tl: Timeline,
                        itl: FloatArray | RunsUnion, stopped: str | None, events: Events | None = None) -> Summary:  # fmt: skip
    """Request metrics over the merged table; GPU and KV figures aggregated over instances."""
    cfg = dep.cfg
    first = parts[0].result
    num_swaps = sum(x.engine.num_swap_outs for x in dep.instances)
    # (first_token_from = decode: the first tokens decode ticks emitted, deployment-wide ids; `Engine.first_by_decode`)
    by_decode = [np.array(dep.ids_of[k], dtype=np.int64)[x.engine.first_by_decode] for k, x in enumerate(dep.instances)
                 if x.engine.first_by_decode]  # fmt: skip
    s = summarize(cfg, req, tl, itl, first.memory, num_swaps, stopped, events=events,
                  first_by_decode=np.concatenate(by_decode) if by_decode else None)
    # MFU and MBU over the deployment's busy GPU time: each instance's (over its own busy time, per GPU, at its own
    # GPU's peaks) weighted by its busy GPU-seconds. (No busy tick anywhere: NaN, as one engine's, not 0.)
    gpu_s = [float(p.result.timeline.duration_s[p.result.timeline.phase != Phase.IDLE].sum()) * p.num_gpus for p in parts]
    busy_gpu_s = sum(gpu_s)
    weighted = lambda name: (sum(getattr(p.result.summary, name) * w for p, w in zip(parts, gpu_s) if w > 0)  # noqa: E731
                             / busy_gpu_s if busy_gpu_s > 0 else float("nan"))  # fmt: skip
    return s.model_copy(update={
        "gpu_busy_fraction": busy_gpu_s / (cfg.num_gpus_total * s.makespan_s) if s.makespan_s > 0 else 0.0,
        # (the prefill share of the same busy GPU-seconds: over the merged ticks it weighted each instance by its busy
        # time, not its GPUs, and DistServe's P TP2 + D TP1 read "GPU busy 45 %, prefill 15 % of busy time" where 25 %
        # of the busy GPU-seconds prefilled)
        "prefill_time_fraction": weighted("prefill_time_fraction") if busy_gpu_s > 0 else 0.0,
        "mfu_mean": weighted("mfu_mean"), "mbu_mean": weighted("mbu_mean"),
        "kv_peak_usage": max(p.result.summary.kv_peak_usage for p in parts),
        "kv_num_blocks": sum(p.result.memory.num_blocks for p in parts),
        "kv_capacity_tokens": sum(p.result.memory.kv_capacity_tokens for p in parts),
        "swap_time_s": sum(p.result.summary.swap_time_s for p in parts),
    } | _prefix_totals(dep) | _spec_totals(dep))  # fmt: skip


def _prefix_totals(dep: Deployment) -> dict:
    """Prefix-cache figures over every instance that has a cache (hits / lookups summed, not averaged)."""
    caches = [x.engine.prefix for x in dep.instances if x.engine.prefix is not None]
    if not caches:
        return {}
    tok, hit_tok = sum(c.num_query_tokens for c in caches), sum(c.num_hit_tokens for c in caches)
    blk, hit_blk = sum(c.num_query_blocks for c in caches), sum(c.num_hit_blocks for c in caches)
    return {"prefix_hit_rate_tokens": hit_tok / tok if tok else float("nan"),
            "prefix_hit_rate_blocks": hit_blk / blk if blk else float("nan"),
            "prefill_tokens_saved": sum(int(c.num_saved_tokens) for c in caches),
            "prefix_blocks_evicted": sum(int(c.num_evicted) for c in caches)}


def _spec_totals(dep: Deployment) -> dict:
    """Speculative-decoding figures over every instance that decodes with speculation (tokens / verified steps
    and draft time summed, not averaged). Without them a deployment with speculation on reported None, as if off."""
    specs = [x.engine.spec for x in dep.instances if x.engine.spec is not None]
    if not specs:
        return {}
    steps, emitted = sum(s.num_steps for s in specs), sum(s.num_emitted for s in specs)
    return {"spec_tokens_per_step": emitted / steps if steps else float("nan"),
            "spec_draft_time_s": sum(s.draft_time_s for s in specs)}


def _over_deployment_span(part: InstanceResult, makespan_s: float, num_handed: int, first_on_decode: bool) -> InstanceResult:
    """The instance with its rates and GPU busy fraction over the deployment's makespan, as the deployment's own are
    (replicas' throughputs add up to the deployment's; GPU-weighted, the busy fractions average to its). Over the
    instance's own span (its first request's arrival to its last tick), a replica that ran out of work early, or a
    prefill pool idle while the decodes drain, read busier than it was: two replicas at 100 % each in a deployment at
    90 %. Each output token counts once, on the instance that emitted the user's token: a decode instance's tokens
    leave out the `num_handed` first tokens the prefill pool emitted (and the prompts it prefilled), or, when the
    decode side emits every output token (`first_on_decode`), a prefill instance's leave out the first tokens of the
    `num_handed` requests it handed off (the proxy drops them); else the two pools' output tokens added up to the
    deployment's plus one per request."""
    r, cfg = part.result, part.result.config
    if not r.timeline.num_ticks or makespan_s <= 0:  # (no tick, or none that took time: the instance's own zeros)
        return part
    req = r.requests
    out_tokens, all_tokens = output_and_total_tokens(cfg, req)
    if part.role == "decode":
        if not first_on_decode:
            out_tokens -= num_handed * cfg.workload.num_samples
        all_tokens = out_tokens
    elif part.role == "prefill" and first_on_decode:
        out_tokens -= num_handed * cfg.workload.num_samples
        all_tokens -= num_handed * cfg.workload.num_samples
    done = req.is_finished
    busy_s = float(r.timeline.duration_s[r.timeline.phase != Phase.IDLE].sum())
    summary = r.summary.model_copy(update={
        "gpu_busy_fraction": busy_s / makespan_s, "output_tokens_per_s": out_tokens / makespan_s,
        "total_tokens_per_s": all_tokens / makespan_s, "requests_per_s": int(done.sum()) / makespan_s,
        "goodput_requests_per_s": int(meets_slo(cfg, req.ttft_s[done], req.tpot_s[done]).sum()) / makespan_s,
    })  # fmt: skip
    return dataclasses.replace(part, result=dataclasses.replace(r, summary=summary))


def _every_gap(raw: list[SimResult], all_gaps: list, itl: FloatArray) -> FloatArray | RunsUnion:
    """Every inter-token gap of the deployment, for its percentiles. `itl` (the instances' kept gaps, concatenated)
    when no instance kept a sample; else every instance's gaps as one `RunsUnion`: an instance with over MAX_ITL_STORED
    gaps keeps an even sample of them, and percentiles over the concatenated samples weighted an instance by the
    inverse of its sampling (2 replicas, one with 20x the gaps, both sampled to 2,000: ITL p50 11.7 ms instead of 15.2).
    (A union, not the runs concatenated: its percentiles read each instance's runs as its own percentiles sorted them.)"""
    if all(g is None for g in all_gaps):
        return itl.copy()
    return RunsUnion(tuple(r.itl_s if g is None else g for r, g in zip(raw, all_gaps)))


def build_result(dep: Deployment) -> ClusterResult:
    cfg = dep.cfg
    raw = [x.engine.result(keep_all_gaps=True) for x in dep.instances]
    all_gaps = [x.engine.all_itl_gaps for x in dep.instances]
    for x in dep.instances:  # (taken back: no engine keeps them)
        x.engine.all_itl_gaps = None
    ids_of = [np.array(ids, dtype=np.int64) for ids in dep.ids_of]
    parts = []
    for inst, res, ids in zip(dep.instances, raw, ids_of):
        n, s = ids.size, res.summary
        # The engine summarised all its slots; unused slots are requests that never came: count them out.
        summary = s.model_copy(update={"num_requests": n, "num_unfinished": n - s.num_finished,
                                       "slo_attainment": s.slo_attainment * s.num_requests / max(n, 1)})  # fmt: skip
        mine = dataclasses.replace(res, requests=_rows(res.requests, n), summary=summary)
        parts.append(InstanceResult(inst.role, inst.index, inst.cfg.hardware.num_gpus, inst.cfg.hardware.name, mine, ids))
    req = _merge_requests(dep, [r.requests for r in raw])
    # Timeline: every instance's rows, ordered by end time (stable), tagged with the instance.
    # (a column only some instances have, e.g. the prefix cache's kv_blocks_cached, is 0 on the others; tokens that
    # decodes emitted, kept apart by speculating instances, are the decode tokens of an instance that does not speculate)
    names = list(dict.fromkeys(name for r in raw for name in r.timeline.columns))
    missing = lambda r, name: (r.timeline.columns["num_decode_tokens"] if name == "num_decode_emitted"  # noqa: E731
                               else np.zeros(r.timeline.num_ticks, dtype=np.int64))  # fmt: skip
    cols = {name: np.concatenate([r.timeline.columns[name] if name in r.timeline.columns else missing(r, name)
                                  for r in raw]) for name in names}  # fmt: skip
    cols["instance"] = np.concatenate([np.full(r.timeline.num_ticks, k, dtype=np.int64) for k, r in enumerate(raw)])
    order = np.argsort(cols["t_start_s"] + cols["duration_s"], kind="stable")
    tl = Timeline({name: col[order] for name, col in cols.items()})
    # Events (request ids made deployment-wide) in time order; at equal times: prefill side, cluster, decode side.
    # (the cluster's events: request << EVENT_KIND_BITS | kind each; a time is the one its kind records for the request)
    codes = np.array(dep.events, dtype=np.int64)
    c_req, c_k = codes >> EVENT_KIND_BITS, (codes & ((1 << EVENT_KIND_BITS) - 1)).astype(np.int8)
    c_t = np.select([c_k == KV_WAIT, c_k == KV_TRANSFER_START], [dep.kv_wait_start_s[c_req], dep.kv_transfer_start_s[c_req]],
                    dep.kv_transfer_end_s[c_req])  # fmt: skip
    nf = len(dep.front)
    ev = [(ids_of[k][r.events.req], r.events.time_s, r.events.kind) for k, r in enumerate(raw)]
    ev = ev[:nf] + [(c_req, c_t, c_k)] + ev[nf:]
    ev_req, ev_t, ev_k = (np.concatenate([e[j] for e in ev]) for j in range(3))
    o = np.argsort(ev_t, kind="stable")
    events = Events(ev_req[o], ev_t[o], ev_k[o])
    itl = np.concatenate([r.itl_s for r in raw])
    stopped = dep.stopped_reason
    if stopped:
        stopped += unfinished_reason(req.status, req.arrival_s, max(x.engine.st.now_s for x in dep.instances))
    summary = _deployment_summary(dep, parts, req, tl, _every_gap(raw, all_gaps, itl), stopped, events)
    parts = [_over_deployment_span(p, summary.makespan_s, int(dep.injected[ids].sum()), dep.first_token_on_decode)
             for p, ids in zip(parts, ids_of)]  # fmt: skip
    empty = np.empty(0, dtype=np.int64)
    batches = BatchLog(empty, empty, empty, np.empty(0, dtype=bool), empty)
    return ClusterResult(
        config=cfg, memory=raw[0].memory, requests=req, timeline=tl, events=events, itl_s=itl, batches=batches,
        summary=summary, itl_gaps_total=sum(r.num_itl_gaps for r in raw), instances=tuple(parts), instance_of=dep.instance_of, decode_instance_of=dep.decode_of,
        kv_wait_start_s=dep.kv_wait_start_s, kv_transfer_start_s=dep.kv_transfer_start_s, kv_link_start_s=dep.kv_link_start_s,
        kv_transfer_end_s=dep.kv_transfer_end_s, kv_transfer_bytes=dep.kv_transfer_bytes, num_gpus=cfg.num_gpus_total,
    )  # fmt: skip
