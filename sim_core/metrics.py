"""Summary metrics from the final request table and the tick timeline. Pure functions.

Definitions follow vLLM's benchmark_serving, goodput too: requests/s that meet both the TTFT and the TPOT
objective (its request goodput). DistServe's goodput, the highest rate at which 90 % of requests meet both, is
capacity at that attainment (`sweep.py`).

Steady state (docs/capacity.md, "Capacity planning"): the headline figures divide by a makespan that includes the
warm-up (an empty server filling up) and the drain (the last requests finishing with nothing
arriving), so short runs overstate latency headroom and understate throughput. `steady_state`
measures over a window instead: the requests whose arrival rank i (0-based, by arrival time) has
floor(0.1 n) <= i < n - floor(0.1 n) — the first and last 10 % of arrivals are excluded — and rates
over the window's span, from the first to the last of those arrivals.
"""

from __future__ import annotations

import math

import numpy as np

from sim_core import quantiles
from sim_core.config import SimConfig, WorkloadConfig, field_bounds
from sim_core.costmodel import MemoryPlan, swap_bytes_per_s, utilisation_peaks
from sim_core.result import Events, RequestTable, SteadyState, Summary, Timeline
from sim_core.runs import Runs, RunsUnion
from sim_core.types import Event, FloatArray, Phase, Status


def percentiles(values: FloatArray | Runs | RunsUnion, qs: tuple[float, ...] = (50, 90, 99), scratch: bool = False) -> list[float]:
    """Several percentiles with one partition of the data (ITL arrays can hold millions of gaps), NaN left out.
    Gaps given as `Runs` (or a `RunsUnion` of them) are never expanded (the same numbers: runs.py).

    scratch: the caller no longer needs `values`, so it may be reordered in place (no 8-byte-per-gap copy).
    """
    if isinstance(values, (Runs, RunsUnion)):
        return values.percentiles(qs)
    nan = np.isnan(values)
    v = values[~nan] if nan.any() else values
    if not v.size:
        return [float("nan")] * len(qs)
    return quantiles.of_array(v, qs, scratch=scratch or v is not values)  # (np.percentile's numbers: quantiles.py)


def not_arrived(status: np.ndarray, arrival_s: FloatArray, stop_s: float) -> np.ndarray:
    """Which requests had not arrived when a run stopped at `stop_s` (a closed-loop request not yet sent has an
    infinite arrival: not arrived either)."""
    return (status == Status.PENDING) & (arrival_s > stop_s)


def at_kv_link(status: np.ndarray, kv_transfer_start_s: FloatArray | None, kv_transfer_end_s: FloatArray | None,
               stop_s: float) -> np.ndarray:
    """Which unfinished requests of a disaggregated run were held at the KV link when it stopped at `stop_s`: their
    transfer had started (a decode slot reserved; queued for the link or crossing it) and not ended. A link too slow
    for the load leaves its requests there, where advice to lower the rate or add GPUs misses the cause."""
    if kv_transfer_start_s is None or kv_transfer_end_s is None:
        return np.zeros(status.shape, dtype=bool)
    started = np.nan_to_num(kv_transfer_start_s, nan=np.inf) <= stop_s
    ended = np.nan_to_num(kv_transfer_end_s, nan=np.inf) <= stop_s
    return (status != Status.FINISHED) & started & ~ended


def waiting_for_decode_slot(status: np.ndarray, kv_wait_start_s: FloatArray | None, kv_transfer_start_s: FloatArray | None,
                            stop_s: float) -> np.ndarray:
    """Which unfinished requests of a disaggregated run were prefilled and waiting for a decode slot when it stopped at
    `stop_s`: handed off, no transfer started. Behind a link too slow for the load they wait for the slots that the
    transfers on the link hold (Dynamo's 3P1D at 0.001 GB/s: 160 on the link, 233 waiting, 7 finished)."""
    if kv_wait_start_s is None or kv_transfer_start_s is None:
        return np.zeros(status.shape, dtype=bool)
    handed_off = np.nan_to_num(kv_wait_start_s, nan=np.inf) <= stop_s
    started = np.nan_to_num(kv_transfer_start_s, nan=np.inf) <= stop_s
    return (status != Status.FINISHED) & handed_off & ~started


def unfinished_reason(status: np.ndarray, arrival_s: FloatArray, stop_s: float) -> str:
    """What a run's stopped_reason adds about its unfinished requests (`status`, `arrival_s`: every request's; `stop_s`:
    the clock when it stopped). Those that had not arrived by then are counted apart: a trace whose arrival_s were Unix
    times (1.7e9 s) ran no tick and said its requests were unfinished because "the load exceeds capacity or the limit
    is too low", with no word of when they arrive."""
    unfinished = status != Status.FINISHED
    text = f"; {int(unfinished.sum()):,} of {status.size:,} requests unfinished"
    later = unfinished & not_arrived(status, arrival_s, stop_s)
    if not later.any():
        return text + " (the load exceeds capacity or the limit is too low)"
    first_s = float(arrival_s[later].min())
    when = f" (the next arrives at {first_s:.6g} s)" if np.isfinite(first_s) else ""
    if later.sum() == unfinished.sum():
        return text + f", none of them arrived before the stop{when}"
    # (the others are what the server held at the stop, queued or running: "the load exceeds capacity" said of a
    # server with 23 requests in flight and 171,016 still to arrive read as a verdict it had not earned)
    return (text + f", {int(later.sum()):,} of them not arrived before the stop{when}; the other "
            f"{int(unfinished.sum() - later.sum()):,} were queued or running then")


def meets_slo(cfg: SimConfig, ttft_s: FloatArray, tpot_s: FloatArray) -> np.ndarray:
    """Which requests meet both objectives (the goodput's and the attainment's test): TTFT and TPOT within target; a
    NaN TPOT (a 1-token output) meets it."""
    return (ttft_s <= cfg.slo.ttft_s) & ~(tpot_s > cfg.slo.tpot_s)


def output_and_total_tokens(cfg: SimConfig, req: RequestTable) -> tuple[int, int]:
    """(output tokens emitted, output + prompt tokens of the requests that emitted): throughput's numerators."""
    out_tokens = int(req.num_emitted.sum()) * cfg.workload.num_samples
    return out_tokens, out_tokens + int(req.prompt_tokens[req.num_emitted > 0].sum())


STEADY_WARMUP_FRACTION = 0.1  # share of arrivals excluded at the start (warm-up)
STEADY_DRAIN_FRACTION = 0.1  # share of arrivals excluded at the end (drain)
MIN_STEADY_REQUESTS = 100  # fewer window requests than this: a p99 rests on a single request
# the most requests one run may have (config.py's bound on workload.num_requests)
MAX_NUM_REQUESTS = field_bounds(("num_requests",), WorkloadConfig)[1]


def steady_window_share() -> float:
    """The share of arrivals the steady window keeps (0.8: the first and last 10 % excluded)."""
    return 1 - STEADY_WARMUP_FRACTION - STEADY_DRAIN_FRACTION


# Why a latency percentile has no value (NaN), by metric, when some request finished: TPOT is (E2E − TTFT) / (output
# tokens − 1) over finished requests and ITL a gap between two tokens, so a run whose requests emit one token each has
# neither. The CLI printed "nan ms" for both, the app "–" (`no_value_reason`).
NO_VALUE_WITH_ONE_TOKEN = {"TPOT": "one-token outputs have no TPOT", "ITL": "one-token outputs have no gap between tokens"}


def no_value_reason(metric: str, num_finished: int) -> str:
    """Why `metric` ("TTFT", "TPOT", "ITL", "E2E") has no value in a run or window where `num_finished` requests
    finished, in words (CLI summary, the app's headline and Compare table): none finished, or one-token outputs."""
    if num_finished == 0:
        return "no request finished"
    return NO_VALUE_WITH_ONE_TOKEN.get(metric, "no finished request to measure")


def steady_exclusion_text() -> str:
    """Which arrivals the steady window leaves out, in words: "first and last 10 %" (what a summary prints; it was
    typed out where the fractions are not)."""
    first, last = (f"{100 * x:g} %" for x in (STEADY_WARMUP_FRACTION, STEADY_DRAIN_FRACTION))
    return f"first and last {first}" if first == last else f"first {first} and last {last}"


def steady_window(num_arrivals: int) -> tuple[int, int]:
    """[first, last) arrival ranks of the steady window for `num_arrivals` requests."""
    # + 1e-9: n × 0.1 in binary floating point must not floor 30 × 0.1 = 2.9999… to 2
    first = int(np.floor(num_arrivals * STEADY_WARMUP_FRACTION + 1e-9))
    last = num_arrivals - int(np.floor(num_arrivals * STEADY_DRAIN_FRACTION + 1e-9))
    return first, last


def steady_state(cfg: SimConfig, req: RequestTable, tl: Timeline, events: Events | None = None,
                 first_by_decode: np.ndarray | None = None) -> SteadyState | None:  # fmt: skip
    """Throughput, goodput, SLO attainment and latency percentiles over the steady window, with a
    note when the run cannot say (too short to fill the server, unfinished or too few requests).
    None when the window spans no time: fewer than two requests, or all arriving at once (offline).
    `events`: the run's request events, for the tokens recompute prefills emit (without them: not counted).
    `first_by_decode`: requests whose first token a decode tick emitted (a decode instance under first_token_from =
    decode, `Engine.inject_prefilled`): counted among its decode tokens, not again as a first token."""
    # (arrived by the run's end: a run stopped at its simulated-time limit put requests that never arrived in its
    # window, as unfinished misses; in a run that finishes every request arrived before its last tick ended)
    end_s = float(tl.t_end_s[-1]) if tl.num_ticks else -np.inf
    arrived = np.flatnonzero(req.arrival_s <= end_s)
    order = arrived[np.argsort(req.arrival_s[arrived], kind="stable")]  # request ids by arrival rank
    lo, hi = steady_window(order.size)
    if hi - lo < 2:
        return None
    ids = order[lo:hi]
    t0, t1 = float(req.arrival_s[ids[0]]), float(req.arrival_s[ids[-1]])
    span = t1 - t0
    if span <= 0:
        return None
    done = req.is_finished[ids]
    ttft, tpot, e2e = req.ttft_s[ids], req.tpot_s[ids], req.e2e_s[ids]
    meets = done & meets_slo(cfg, ttft, tpot)
    # Output tokens emitted inside (t0, t1]: decode tokens of ticks ending there (with speculative decoding the
    # tokens the verify passes emitted, not the positions they verified), plus each token a prefill emits (the
    # first, and the next one at the end of a recompute prefill) — together every emitted token exactly once.
    ends = tl.t_end_s
    in_window = (ends > t0) & (ends <= t1)
    decode_emitted = tl.columns.get("num_decode_emitted", tl.columns["num_decode_tokens"])
    first_tokens = int(((req.first_token_s > t0) & (req.first_token_s <= t1)).sum())
    if first_by_decode is not None and first_by_decode.size:
        first_s = req.first_token_s[first_by_decode]
        first_tokens -= int(((first_s > t0) & (first_s <= t1)).sum())
    if events is not None and events.kind.size:
        again = events.kind == Event.PREFILL_DONE
        first_tokens += int((again & (events.time_s > t0) & (events.time_s <= t1)).sum())
    out_tokens = int(decode_emitted[in_window].sum()) + first_tokens * cfg.workload.num_samples
    finished_in = int(((req.finish_s > t0) & (req.finish_s <= t1)).sum())
    per_s = lambda x: x / span  # noqa: E731
    ttft_q, tpot_q = percentiles(ttft[done]), percentiles(tpot[done])
    warmup_s = t0 - float(req.arrival_s[order[0]])
    mean_e2e = float(e2e[done].mean()) if done.any() else float("nan")
    num_unfinished = int((~done).sum())
    # (for the note: how long a request decodes, the time a batch takes to fill; and whether the queue grew across the
    # window, by the median TTFT of its first and last quarter of arrivals)
    mean_decode_s = float((req.finish_s[ids] - req.first_token_s[ids])[done].mean()) if done.any() else float("nan")
    quarter = max(ids.size // 4, 1)
    ttft_waited = np.where(np.isnan(ttft), np.inf, ttft)  # (no first token by the end: waited longest)
    ttft_quarters_s = (float(np.median(ttft_waited[:quarter])), float(np.median(ttft_waited[-quarter:])))
    return SteadyState(
        window_first_request=lo, window_last_request=hi - 1, window_start_s=t0, window_end_s=t1,
        num_requests=int(ids.size), num_unfinished=num_unfinished,
        arrival_rate_per_s=per_s(ids.size - 1), output_tokens_per_s=per_s(out_tokens), requests_per_s=per_s(finished_in),
        goodput_requests_per_s=float(meets.mean()) * per_s(ids.size - 1), slo_attainment=float(meets.mean()),
        ttft_p50_s=ttft_q[0], ttft_p90_s=ttft_q[1], ttft_p99_s=ttft_q[2],
        tpot_p50_s=tpot_q[0], tpot_p90_s=tpot_q[1], tpot_p99_s=tpot_q[2],
        warmup_s=warmup_s, mean_e2e_s=mean_e2e,
        note=_steady_note(order.size, ids.size, num_unfinished, warmup_s, mean_e2e, mean_decode_s, ttft_quarters_s,
                          per_s(ids.size - 1), per_s(finished_in)),
    )  # fmt: skip


# The median TTFT of the steady window's last quarter of arrivals at least this many times its first quarter's: the
# queue grew across the window (an overloaded server's, once its batch has had time to fill).
OVERLOAD_TTFT_GROWTH = 2.0
# A server keeps up when its steady window completes at least this share of the requests arriving in it (capacity's
# rule, `sweep.keeps_up`, on runs of a steady-state length).
KEEP_UP_FRACTION = 0.97
# The steady note calls a run overloaded only below this share (with its TTFT growing): a short run's window wanders by
# a few % (engine-article-priority's 300 requests completed 96.6 % of arrivals, its TTFT median 85 -> 187 ms, and
# kept up at 2,000 requests: 2.51 of 2.51 req/s); lesson 15's overloaded 3,000 completed 87 %, kv-pressure's 80 %.
OVERLOAD_COMPLETION_FRACTION = 0.9


# How each kind of steady note begins (`_steady_note`), the words a reader of a note's kind goes by (Sweep's table)
UNFINISHED_NOTE, SHORT_NOTE, OVERLOADED_NOTE = "Too short or overloaded to say", "Too short to say", "Overloaded"
# (a run too short to settle whose queue grew across its window: the short note's branch that says so first)
LOOKS_OVERLOADED_NOTE = f"{SHORT_NOTE}, and it looks overloaded"


def says_overloaded(note: str | None) -> bool:
    """Whether a steady note (`_steady_note`) finds the run overloaded, or a run too short to settle that looks it."""
    return bool(note) and note.startswith((OVERLOADED_NOTE, LOOKS_OVERLOADED_NOTE))


def _seconds_text(x_s: float) -> str:
    return f"{x_s * 1e3:,.0f} ms" if x_s < 1 else f"{x_s:,.1f} s"


def _steady_note(n: int, n_window: int, n_unfinished: int, warmup_s: float, mean_e2e_s: float,
                 mean_decode_s: float = math.nan, ttft_quarters_s: tuple[float, float] = (math.nan, math.nan),
                 offered_per_s: float = math.nan, completed_per_s: float = math.nan) -> str | None:  # fmt: skip
    """Why a run's steady-state figures cannot be trusted, or None.

    A run is overloaded when its warm-up outlasted a request's decoding (the batch has filled), the queue grew across
    the window (OVERLOAD_TTFT_GROWTH) and it fell behind (OVERLOAD_COMPLETION_FRACTION): its end-to-end time grows with
    the run.
    Else a warm-up shorter than a request's mean end-to-end time is a server still filling. The note advised lesson
    15's 3,000 requests at 24 req/s to "Run about 4,000 requests or more", where a longer run only grows the queue; and
    a replica sweep's 38,280 requests on 4 replicas, whose TTFT p99 reached 88 s, had no note (its warm-up outlasted
    the mean end-to-end time)."""
    if n_unfinished:
        return (f"{UNFINISHED_NOTE}: {n_unfinished:,} of the {n_window:,} steady-window requests "
                "never finished (the run stopped first); latency percentiles cover the finished ones only.")
    if n_window < MIN_STEADY_REQUESTS:
        return (f"{SHORT_NOTE}: the steady window holds {n_window:,} requests; a p99 needs at least "
                f"{MIN_STEADY_REQUESTS:,}. Run at least {int(np.ceil(MIN_STEADY_REQUESTS / steady_window_share())):,} requests.")
    first_q_s, last_q_s = ttft_quarters_s
    # (the overloaded note, said from two branches below: written only when one of them says it)
    overloaded = lambda: (  # noqa: E731
        f"{OVERLOADED_NOTE}: requests arrive faster than the server finishes them ({offered_per_s:,.2f} req/s offered, "
        f"{completed_per_s:,.2f} req/s completed in the steady window), so its queue grows: the median TTFT rose from "
        f"{_seconds_text(first_q_s)} in the window's first quarter of arrivals to {_seconds_text(last_q_s)} in its last. "
        "A longer run only grows it further: lower the rate or add capacity.")  # fmt: skip
    if (warmup_s >= mean_decode_s and last_q_s >= OVERLOAD_TTFT_GROWTH * first_q_s
            and completed_per_s < OVERLOAD_COMPLETION_FRACTION * offered_per_s):  # fmt: skip
        return overloaded()
    if warmup_s < mean_e2e_s:
        need = int(np.ceil(n * mean_e2e_s / max(warmup_s, 1e-9) / 100) * 100)
        most = MAX_NUM_REQUESTS
        # (it advised e.g. "Run about 98,766,600 requests", a run no config can ask for)
        advice = (f"Run about {need:,} requests or more." if need <= most else
                  f"That takes about {need:,} requests, more than the {most:,} a run allows: lower the rate.")  # fmt: skip
        short = (f"the warm-up (first {STEADY_WARMUP_FRACTION:.0%} of arrivals) lasted {warmup_s:,.1f} s, less than one "
                 f"request's mean end-to-end time ({mean_e2e_s:,.1f} s)")
        # The queue grew across the window by more than a server filling up adds: one that completes under
        # OVERLOAD_COMPLETION_FRACTION of what arrives queues each later arrival behind the rest, its wait growing by at
        # least (1 - that share) of the window's span; one filling up adds tens of ms (the default chat traffic's
        # 300-request runs at 8-24 req/s: 0.1-2.9 % of their span; Sarathi-Serve on it, TTFT p50 10.7 s: 91 %).
        span_s = (n_window - 1) / offered_per_s if offered_per_s > 0 else math.inf
        if (last_q_s >= OVERLOAD_TTFT_GROWTH * first_q_s and completed_per_s < OVERLOAD_COMPLETION_FRACTION * offered_per_s
                and last_q_s - first_q_s >= (1 - OVERLOAD_COMPLETION_FRACTION) * span_s):  # fmt: skip
            if last_q_s >= span_s:
                # The window's last arrivals waited longer for a first token than the whole window lasted: a queue that
                # built up all through it, not a server filling (which admits as it fills, at a first token's wait).
                # At 200 req/s on one H100 (TTFT 37 -> 159 s over a 20 s window) it said "may still be filling up. Run
                # about 231,900 requests or more."
                return overloaded()
            # (said first, not in brackets after "still filling up" under a TTFT p50 of 10.7 s; but a run this short
            # cannot tell it from filling)
            return (f"{LOOKS_OVERLOADED_NOTE}: the median TTFT rose from {_seconds_text(first_q_s)} in the "
                    f"steady window's first quarter of arrivals to {_seconds_text(last_q_s)} in its last "
                    f"({offered_per_s:,.2f} req/s offered, {completed_per_s:,.2f} req/s completed in the window). But {short}, "
                    f"so it may still be filling up. {advice} If TTFT keeps rising, lower the rate or add capacity.")
        return (f"{SHORT_NOTE}: {short}, so the server was still filling up (or is overloaded and never settles). {advice}")
    return None


def summarize(
    cfg: SimConfig,
    req: RequestTable,
    tl: Timeline,
    itl_s: FloatArray | Runs | RunsUnion,
    memory: MemoryPlan,
    num_swap_outs: int,
    stopped_reason: str | None,
    itl_is_scratch: bool = False,
    events: Events | None = None,
    kv_peak_blocks: int = 0,
    first_by_decode: np.ndarray | None = None,
) -> Summary:
    """Headline numbers. `itl_s`: every inter-token gap (an array, or `Runs`); with `itl_is_scratch`
    the array may be reordered (saves a copy). `events`: the run's request events (steady_state reads them)."""
    done = req.is_finished
    arrived = req.arrival_s[np.isfinite(req.arrival_s)]
    start_s = float(arrived.min()) if arrived.size else 0.0
    end_s = float(tl.t_end_s[-1]) if tl.num_ticks else start_s
    makespan = max(end_s - start_s, 0.0)  # (0 in a run with no tick: it reported 1e-12, the divisor's guard)
    per_s = lambda x: x / makespan if makespan > 0 else 0.0  # noqa: E731
    out_tokens, all_tokens = output_and_total_tokens(cfg, req)
    ttft, tpot, e2e = req.ttft_s[done], req.tpot_s[done], req.e2e_s[done]
    meets = meets_slo(cfg, ttft, tpot)
    phase = tl.phase
    busy = phase != Phase.IDLE
    dur = tl.duration_s
    busy_s = float(dur[busy].sum())
    prefill_s = float(dur[(tl.num_prefill_tokens > 0)].sum())
    batch = (tl.num_prefill_seqs + tl.num_decode_seqs)[busy]
    # MFU and MBU over the busy time, as a run's utilisation is reported (its FLOPs and bytes over its busy seconds at
    # the peaks): a plain mean of the ticks' own ratios let the many short decode ticks outvote the long prefill ticks
    # (the default run read 6 % where its FLOPs over its busy time at the peak are 12.6 %)
    peak_flops_per_s, peak_bytes_per_s = utilisation_peaks(cfg)
    mfu = float(tl.columns["flops"][busy].sum()) / busy_s / peak_flops_per_s if busy_s > 0 else float("nan")
    mbu = float(tl.columns["bytes"][busy].sum()) / busy_s / peak_bytes_per_s if busy_s > 0 else float("nan")
    with np.errstate(invalid="ignore", divide="ignore"):
        norm_lat = e2e / req.output_tokens[done]
    swap_s = float(tl.swap_blocks.sum()) * memory.block_bytes / swap_bytes_per_s(cfg)
    ttft_q, tpot_q, e2e_q = (percentiles(x) for x in (ttft, tpot, e2e))
    itl_q = percentiles(itl_s, scratch=itl_is_scratch)
    queue_q = percentiles(req.queue_delay_s[done], (50, 99))
    # attainment of the requests that arrived: a run stopped at its simulated-time limit with most of its workload still
    # to arrive read "14% meet SLOs" where every request it served met them
    num_asked = int((req.arrival_s <= end_s).sum()) if stopped_reason else int(req.arrival_s.size)
    return Summary(
        num_requests=int(req.arrival_s.size),
        num_finished=int(done.sum()),
        num_unfinished=int((~done).sum()),
        num_preemptions=int(req.num_preemptions.sum()),
        num_swap_outs=num_swap_outs,
        num_recomputed_tokens=int(req.num_recomputed_tokens.sum()),
        num_ticks=int(busy.sum()),
        makespan_s=makespan,
        simulated_time_s=end_s,
        output_tokens_per_s=per_s(out_tokens),
        total_tokens_per_s=per_s(all_tokens),
        requests_per_s=per_s(int(done.sum())),
        goodput_requests_per_s=per_s(int(meets.sum())),
        slo_attainment=float(meets.sum()) / max(num_asked, 1),
        ttft_p50_s=ttft_q[0], ttft_p90_s=ttft_q[1], ttft_p99_s=ttft_q[2],
        tpot_p50_s=tpot_q[0], tpot_p90_s=tpot_q[1], tpot_p99_s=tpot_q[2],
        itl_p50_s=itl_q[0], itl_p90_s=itl_q[1], itl_p99_s=itl_q[2],
        e2e_p50_s=e2e_q[0], e2e_p90_s=e2e_q[1], e2e_p99_s=e2e_q[2],
        queue_delay_p50_s=queue_q[0], queue_delay_p99_s=queue_q[1],
        normalized_latency_p50_s=percentiles(norm_lat, (50,))[0],
        gpu_busy_fraction=per_s(busy_s),
        prefill_time_fraction=prefill_s / busy_s if busy_s else 0.0,
        mean_batch_size=float(batch.mean()) if batch.size else 0.0,
        mfu_mean=mfu,
        mbu_mean=mbu,
        # (rows hold the blocks in use after each tick; `kv_peak_blocks`: the most in use during one, its finishing
        # requests' blocks included, which the engine tracks on every path)
        kv_peak_usage=max(float(tl.kv_blocks_used.max()), kv_peak_blocks) / memory.num_blocks if tl.num_ticks else 0.0,
        kv_num_blocks=memory.num_blocks,
        kv_capacity_tokens=memory.kv_capacity_tokens,
        swap_time_s=swap_s,
        stopped_reason=stopped_reason,
        steady=steady_state(cfg, req, tl, events, first_by_decode),
    )  # fmt: skip


def class_metrics(cfg: SimConfig, req: RequestTable) -> list[dict]:
    """Latency per request class (workload.classes; a trace's priority column when it has no
    classes): one dict per class with name, priority, request counts, TTFT/TPOT/E2E p50 and p99 (s)
    and SLO attainment. An empty list when the run has a single class (the headline says it all)."""
    classes = cfg.workload.classes
    if len(classes) > 1:
        groups = [(c.name, c.priority, req.class_idx == i) for i, c in enumerate(classes)]
    else:
        prios = np.unique(req.priority)
        if prios.size < 2:
            return []
        groups = [(f"priority {p}", int(p), req.priority == p) for p in prios.tolist()]
    done = req.is_finished
    out = []
    for name, prio, member in groups:
        m = member & done
        ttft, tpot, e2e = req.ttft_s[m], req.tpot_s[m], req.e2e_s[m]
        meets = meets_slo(cfg, ttft, tpot)
        (t50, t99), (p50, p99), (e50, e99) = (percentiles(x, (50, 99)) for x in (ttft, tpot, e2e))
        n = int(member.sum())
        out.append({"class": name, "priority": prio, "num_requests": n, "num_finished": int(m.sum()),
                    "ttft_p50_s": t50, "ttft_p99_s": t99, "tpot_p50_s": p50, "tpot_p99_s": p99,
                    "e2e_p50_s": e50, "e2e_p99_s": e99, "slo_attainment": float(meets.sum()) / max(n, 1)})  # fmt: skip
    return out
