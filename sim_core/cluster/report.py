"""Text for a deployment: one line describing it, and a per-instance table (CLI and app)."""

from __future__ import annotations

import numpy as np

from sim_core.cluster.result import ClusterResult
from sim_core.config import LinkConfig, SimConfig
from sim_core.words import counted, latency_text


def describe_deployment(cfg: SimConfig) -> str:
    """'4 replicas of 2x H100 SXM (8 GPUs), router least_kv' or the two pools and the link."""
    dep, hw = cfg.deployment, cfg.hardware
    gpus = lambda n, h: f"{n}x {h.name}" if n > 1 else h.name  # noqa: E731
    if dep is None:
        return f"{gpus(hw.num_gpus, hw)}"
    dis = dep.disaggregation
    if dis is None:
        return f"{counted(dep.replicas, 'replica')} of {gpus(hw.num_gpus, hw)} ({counted(cfg.num_gpus_total, 'GPU')}), router {dep.router}"
    pools = []
    for role, pool in (("prefill", dis.prefill), ("decode", dis.decode)):
        h = pool.hardware or hw
        pools.append(f"{pool.replicas} {role} of {gpus(pool.tensor_parallel or h.num_gpus, h)}")
    first = ", first token streamed by the decode side" if dis.first_token_from == "decode" else ""
    return f"{' + '.join(pools)} ({counted(cfg.num_gpus_total, 'GPU')}), KV link {describe_link(dis.link)}{first}, router {dep.router}"


def describe_link(link: LinkConfig) -> str:
    """'50 GB/s + 20 µs, layer-wise' or 'ideal (free)': a KV link in words (here and the planner's splits)."""
    bw = "ideal (free)" if link.bandwidth_gb_per_s is None else f"{link.bandwidth_gb_per_s:g} GB/s + {link.latency_us:g} µs"
    return bw + (", layer-wise" if link.layerwise_pipelining and link.bandwidth_gb_per_s is not None else "") + (
        ", no contention" if link.contention == "none" and link.bandwidth_gb_per_s is not None else "")


def routing_notes(cfg: SimConfig) -> list[str]:
    """What the run does that its settings do not say (plain text, one sentence each; the CLI's NOTE lines and the
    Simulate page): prefix_affinity without prefix caching never sees a cached prefix (`Router.choose`: every match
    is 0), so it routes every request to the least outstanding instance."""
    dep = cfg.deployment
    if dep is None or dep.router != "prefix_affinity" or cfg.kv_cache.enable_prefix_caching:
        return []
    dis = dep.disaggregation
    choices = dep.replicas if dis is None else dis.prefill.replicas  # the decode pool caches nothing: its choice is the same
    if choices < 2:
        return []
    where = "replica" if dis is None else "prefill instance"
    return [f"router prefix_affinity with prefix caching off (kv_cache.enable_prefix_caching): no {where} holds a cached "
            f"prefix, so every request went to the least outstanding {where}, as with router least_outstanding (the "
            "same run where the router reads exact state, deployment.state_refresh_s = 0; with a refresh interval it "
            "sees requests finish at each refresh)."]


def instance_rows(res: ClusterResult) -> list[dict[str, object]]:
    """One row per instance: what it served and how busy it was."""
    rows = []
    for inst in res.instances:
        s = inst.result.summary
        rows.append({
            "instance": inst.name, "gpus": inst.gpus, "requests": inst.num_requests, "finished": s.num_finished,
            "prompt_tokens": int(res.requests.prompt_tokens[inst.request_ids].sum()),  # of the requests it served
            "busy": s.gpu_busy_fraction, "kv_peak": s.kv_peak_usage, "ticks": s.num_ticks,
            "ttft_p50_s": s.ttft_p50_s if inst.role != "decode" else float("nan"),
            "tpot_p50_s": s.tpot_p50_s if inst.role != "prefill" else float("nan"),
            "preemptions": s.num_preemptions,
        })  # fmt: skip
    return rows


def format_instances(res: ClusterResult) -> str:
    # (µs under a millisecond: a pipelined KV transfer leaves ~24 µs after the prefill, which read "0.0 ms")
    ms = lambda x: "-" if np.isnan(x) else latency_text(x) if x >= 1e-3 or x == 0 else f"{x * 1e6:,.0f} µs"  # noqa: E731
    lines = [f"  {'instance':34s} {'requests':>8s} {'busy':>5s} {'KV peak':>7s} {'TTFT p50':>10s} {'TPOT p50':>10s} {'pre-empt':>8s}"]
    for inst, r in zip(res.instances, instance_rows(res)):
        lines.append(f"  {inst.label:34s} {r['requests']:8,d} {r['busy']:5.0%} {r['kv_peak']:7.0%} "
                     f"{ms(r['ttft_p50_s']):>10s} {ms(r['tpot_p50_s']):>10s} {r['preemptions']:8,d}")  # fmt: skip
    if res.is_disaggregated:
        moved = ~np.isnan(res.kv_transfer_end_s)
        if moved.any():
            wait = res.kv_transfer_start_s[moved] - res.kv_wait_start_s[moved]
            xfer = res.kv_transfer_end_s[moved] - res.kv_transfer_start_s[moved]
            queued = res.kv_link_start_s[moved] - res.kv_transfer_start_s[moved]  # (part of `xfer`: the link was busy)
            lines.append(f"  KV transfers  {int(moved.sum()):,} requests, {res.kv_transfer_bytes[moved].sum() / 1e9:,.2f} GB; "
                         f"transfer p50 {ms(float(np.median(xfer)))}, wait for a decode slot p50 {ms(float(np.median(wait)))} "
                         f"p99 {ms(float(np.percentile(wait, 99)))} ({int((wait > 0).sum()):,} waited); "
                         f"waited for the link {int((queued > 0).sum()):,}, p99 {ms(float(np.percentile(queued, 99)))} "
                         f"max {ms(float(queued.max()))}")  # fmt: skip
    return "\n".join(lines)
