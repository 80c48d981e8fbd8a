"""What a run does that its settings do not say: plain-text notes, one sentence each, printed by the CLI as NOTE lines
and shown under the Simulate page's headline (as text, never markdown)."""

from __future__ import annotations

from sim_core.config import SimConfig
from sim_core.costmodel import memory_notes
from sim_core.result import SimResult


# vLLM V0 (SchedulerConfig): without chunked prefill the budget defaults to max(max_model_len, this) tokens
VLLM_V0_MIN_BATCHED_TOKENS = 2048
# vLLM V0 (EngineArgs): above this context, chunked prefill is turned on when the command line leaves it unset
VLLM_V0_LONG_CONTEXT_TOKENS = 32768


def budget_notes(cfg: SimConfig) -> list[str]:
    """vLLM V0 refuses to start without chunked prefill when one prompt cannot fit one step's token budget
    (SchedulerConfig._verify_args: "max_num_batched_tokens (...) is smaller than max_model_len (...)"); the simulation
    runs the workload it is given. Asked of the engines fitted as vLLM V0 (calibration profile `vllm-v0`): the
    article's hypothetical schedulers share vLLM's memory rule but are not vLLM."""
    sch, max_len = cfg.scheduler, cfg.model.max_model_len
    if cfg.calibration.profile != "vllm-v0" or sch.enable_chunked_prefill or sch.max_num_batched_tokens >= max_len:
        return []
    default = max(max_len, VLLM_V0_MIN_BATCHED_TOKENS)
    fix = (f"left unset, vLLM V0 turns chunked prefill on at a context over {VLLM_V0_LONG_CONTEXT_TOKENS:,} tokens"
           if max_len > VLLM_V0_LONG_CONTEXT_TOKENS else
           f"its default here is {default:,} (max(max_model_len, {VLLM_V0_MIN_BATCHED_TOKENS:,})), whose activation "
           "profile takes more memory from the KV cache")
    return [f"vLLM V0 would refuse to start this configuration: with chunked prefill off, "
            f"scheduler.max_num_batched_tokens ({sch.max_num_batched_tokens:,}) is smaller than model.max_model_len "
            f"({max_len:,}); {fix}. The run simulates this configuration anyway."]


def trace_notes(cfg: SimConfig) -> list[str]:
    """A trace longer than workload.num_requests replays only its first num_requests rows: said, since a config with
    an inline trace of 100,000 rows and no num_requests simulated the default 200 without a word. (Not raised to the
    trace's length: a config's num_requests is what it runs, and a shorter replay of a long trace is a choice.)"""
    wl = cfg.workload
    rows = len(wl.trace.arrival_s) if wl.trace is not None else 0
    if rows <= wl.num_requests:
        return []
    return [f"the trace has {rows:,} rows and workload.num_requests = {wl.num_requests:,} replays the first "
            f"{wl.num_requests:,} of them; set workload.num_requests (up to {rows:,}) to replay more."]


def swap_notes(res: SimResult) -> list[str]:
    """A swap engine that pre-empted nothing ran as its recompute twin would: said, since the engine-vllm-v0-swap preset
    (Llama-3.1-8B on an A100 at 5 % of its KV cache) showed "0 swaps" beside a description of swapping."""
    if res.config.scheduler.preemption != "swap" or res.summary.num_preemptions:
        return []
    return ["scheduler.preemption = 'swap', but no request was pre-empted, so nothing was swapped: the results are "
            "what scheduler.preemption = 'recompute' gives. To see swapping, add KV pressure. What makes it act: "
            f"{more_load(res.config)}, or a lower kv_cache.gpu_memory_utilization."]  # (a review found "the results are
    # recompute's; KV pressure makes it act: ..." hard to parse)


def more_load(cfg: SimConfig) -> str:
    """The setting that offers this workload more load, in words: its arrival rate, but a trace's arrivals ignore
    workload.arrival.rate_per_s (the DistServe pair's swap note named it while the link notice above it said it was not
    used), offline arrivals queue every request at once and a closed loop's clients pace themselves."""
    wl = cfg.workload
    if wl.trace is not None:
        return ("the trace replayed faster (a rate sweep, on the Sweep page or by python -m sim_core sweep --knob rate, "
                "time-scales its arrivals)")
    if wl.arrival.process == "offline":
        return "a higher workload.num_requests (all queued at once)"
    if wl.arrival.process == "closed_loop":
        return "a higher workload.arrival.num_clients"
    return "a higher workload.arrival.rate_per_s"


def run_notes(res: SimResult) -> list[str]:
    """The memory plan's, the token budget's and swap's notes of every engine (a deployment's once per pool), then the
    trace's (`trace_notes`) and the router's."""
    parts = [(x.role, x.result) for x in getattr(res, "instances", ())] or [(None, res)]
    notes: list[str] = []
    for role, part in parts:
        for note in memory_notes(part.config, part.memory) + budget_notes(part.config) + swap_notes(part):
            text = note if role is None else f"{role} instances: {note}"
            if text not in notes:
                notes.append(text)
    notes += trace_notes(res.config)
    if res.config.deployment is not None:
        from sim_core.cluster.report import routing_notes

        notes += routing_notes(res.config)
    return notes
