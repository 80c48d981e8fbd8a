"""Steady-state window: which requests it holds, rates over its span, the too-short note."""

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st_

from sim_core.engine import run_simulation
from sim_core.metrics import steady_window
from sim_core.presets import load_preset
from sim_core.types import Status
from tests.conftest import make_config, trace_config
from tests.strategies import cases


@pytest.mark.parametrize(("n", "first", "last"), [(10, 1, 9), (20, 2, 18), (25, 2, 23), (99, 9, 90), (5, 0, 5)])
def test_window_drops_the_first_and_last_ten_percent_of_arrivals(n, first, last):
    assert steady_window(n) == (first, last)


def test_steady_metrics_cover_exactly_the_window_requests():
    n = 40
    # Warm-up and drain requests (ranks 0-3 and 36-39) are huge: they miss the TTFT target, window ones do not.
    prompts = [8000 if i < 4 or i >= 36 else 200 for i in range(n)]
    cfg = trace_config(prompts, [20] * n, arrivals=[i * 2.0 for i in range(n)], slo__ttft_s=0.1)
    res = run_simulation(cfg)
    st, r = res.summary.steady, res.requests
    assert (st.window_first_request, st.window_last_request, st.num_requests) == (4, 35, 32)
    assert (st.window_start_s, st.window_end_s) == (8.0, 70.0)
    assert st.slo_attainment == 1.0 and res.summary.slo_attainment < 1.0
    assert st.ttft_p99_s == pytest.approx(np.percentile(r.ttft_s[4:36], 99))
    assert st.arrival_rate_per_s == pytest.approx(31 / 62)
    assert st.goodput_requests_per_s == pytest.approx(31 / 62)


def test_window_throughput_tracks_the_offered_load_where_the_makespan_does_not():
    s = run_simulation(make_config(workload__num_requests=3000, workload__arrival__rate_per_s=16.0)).summary
    st = s.steady
    assert st.note is None
    assert st.requests_per_s == pytest.approx(st.arrival_rate_per_s, rel=0.03)
    assert st.goodput_requests_per_s == pytest.approx(16.0, rel=0.05)
    assert s.requests_per_s < 0.95 * st.requests_per_s  # the makespan includes the drain


def test_window_output_tokens_count_each_emitted_token_once():
    # Constant arrivals, fixed lengths, light load: every request emits its 50 tokens inside the run,
    # so tokens/s over the window = arrival rate × output length (within the window edges' slack).
    cfg = make_config(workload__num_requests=400, workload__arrival__process="constant", workload__arrival__rate_per_s=4.0,
                      workload__prompt_tokens={"dist": "fixed", "mean": 100, "min": 1, "max": 100},
                      workload__output_tokens={"dist": "fixed", "mean": 50, "min": 1, "max": 50}, workload__num_samples=2)  # fmt: skip
    st = run_simulation(cfg).summary.steady
    assert st.output_tokens_per_s == pytest.approx(4.0 * 50 * 2, rel=0.02)


def test_a_short_run_says_it_is_too_short():
    st = run_simulation(make_config(workload__num_requests=300, workload__arrival__rate_per_s=24.0)).summary.steady
    assert st.note is not None and st.note.startswith("Too short to say") and "requests or more" in st.note


def test_an_overloaded_run_says_so_and_does_not_advise_a_longer_run():
    # lesson 15's 3,000 requests at 24 req/s on one H100: 21 req/s finish, the window's median TTFT rises from 1.2 to
    # 9 s; the note advised "Run about 4,000 requests or more", where a longer run only grows the queue
    st = run_simulation(make_config(workload__num_requests=3000, workload__arrival__rate_per_s=24.0)).summary.steady
    assert st.note.startswith("Overloaded: requests arrive faster than the server finishes them") and "Run about" not in st.note
    assert f"({st.arrival_rate_per_s:,.2f} req/s offered, {st.requests_per_s:,.2f} req/s completed" in st.note
    # at a rate it keeps up with, the same length of run has nothing to say
    assert run_simulation(make_config(workload__num_requests=3000, workload__arrival__rate_per_s=18.0)).summary.steady.note is None


@settings(max_examples=200, deadline=None)
@given(warmup_s=st_.floats(0.01, 100), e2e_s=st_.floats(0.01, 100), decode_s=st_.floats(0.01, 100),
       first_q_s=st_.floats(0.001, 50), growth=st_.one_of(st_.floats(0.1, 1.99), st_.floats(2.01, 20)),  # (off the 2x edge)
       offered=st_.floats(0.1, 100), done=st_.floats(0.1, 100))
def test_the_note_calls_a_run_overloaded_only_when_filled_its_queue_growing_and_falling_behind(
        warmup_s, e2e_s, decode_s, first_q_s, growth, offered, done):  # fmt: skip
    from sim_core.metrics import OVERLOAD_COMPLETION_FRACTION, OVERLOAD_TTFT_GROWTH, _steady_note

    assume(abs(done - OVERLOAD_COMPLETION_FRACTION * offered) > 1e-9 * offered)  # (off the keep-up edge)
    rise_s, span_s = first_q_s * growth - first_q_s, 3999 / offered
    assume(abs(rise_s - (1 - OVERLOAD_COMPLETION_FRACTION) * span_s) > 1e-9 * span_s)  # (off the rise edge)
    assume(abs(first_q_s * growth - span_s) > 1e-9 * span_s)  # (off the edge of a last quarter waiting the whole span)
    note = _steady_note(5000, 4000, 0, warmup_s, e2e_s, decode_s, (first_q_s, first_q_s * growth), offered, done)
    filled = decode_s <= warmup_s and growth >= OVERLOAD_TTFT_GROWTH and done < OVERLOAD_COMPLETION_FRACTION * offered
    # a run too short to say whose queue grew (by more than a tenth of the window's span: a server completing under
    # 90 % of what arrives) and which fell behind says first that it looks overloaded; and that it is, where the
    # window's last arrivals waited longer for a first token than the window lasted (a queue built all through it)
    grew = (warmup_s < e2e_s and growth >= OVERLOAD_TTFT_GROWTH and done < OVERLOAD_COMPLETION_FRACTION * offered
            and rise_s >= (1 - OVERLOAD_COMPLETION_FRACTION) * span_s)  # fmt: skip
    overloaded = filled or (grew and first_q_s * growth >= span_s)
    assert (note is not None and note.startswith("Overloaded")) == overloaded
    # otherwise a note only where the warm-up is shorter than a request's end-to-end time (still filling)
    assert (note is None) == (not overloaded and warmup_s >= e2e_s)
    looks = not overloaded and grew
    assert (note is not None and note.startswith("Too short to say, and it looks overloaded: the median TTFT rose")) == looks


def test_a_short_run_whose_queue_grows_says_first_that_it_looks_overloaded():
    # Compare's B side, Sarathi-Serve on the default chat traffic: TTFT p50 10.7 s and 22 % meeting the SLOs, but
    # the note said "Too short to say: ... so the server was still filling up (or is overloaded and never settles)"
    from sim_core.presets import DEFAULT_SCENARIO, apply_part

    st = run_simulation(apply_part(load_preset(DEFAULT_SCENARIO), "engines", "sarathi-serve")).summary.steady
    assert st.note.startswith("Too short to say, and it looks overloaded: the median TTFT rose from ")
    assert f"({st.arrival_rate_per_s:,.2f} req/s offered, {st.requests_per_s:,.2f} req/s completed in the window)" in st.note
    assert st.requests_per_s < 0.5 * st.arrival_rate_per_s and "If TTFT keeps rising, lower the rate" in st.note
    assert run_simulation(load_preset(DEFAULT_SCENARIO)).summary.steady.note is None


def test_a_short_run_whose_last_arrivals_waited_longer_than_its_window_is_overloaded():
    # 5,000 requests at 200 req/s on one H100: 15.6 of 199.9 req/s completed, the median TTFT rose from 37 to 159 s over
    # a 20 s window, and the note said it "may still be filling up. Run about 231,900 requests or more."
    cfg = make_config(workload__num_requests=5000, workload__arrival__rate_per_s=200.0)
    st = run_simulation(cfg).summary.steady
    assert st.note.startswith("Overloaded: requests arrive faster than the server finishes them") and "Run about" not in st.note


def test_offline_batches_have_no_steady_state():
    assert run_simulation(make_config(workload__num_requests=50, workload__arrival__process="offline")).summary.steady is None


@settings(max_examples=200, deadline=None)
@given(st_.integers(min_value=0, max_value=10**7))
def test_window_excludes_exactly_floor_ten_percent_each_side(n):
    first, last = steady_window(n)
    assert first == n // 10 and n - last == n // 10  # floor(n / 10) excluded at each end
    assert 0 <= first <= last <= n


def test_the_window_is_named_by_arrival_rank_when_request_ids_are_not_in_arrival_order():
    # Sessions number requests by conversation, not by arrival. The window's first and last fields held request
    # ids (31 and 266 for ranks 30 and 269 of 300), which the CLI and the app print as "requests 31-266 by
    # arrival": 236 requests for a window of 240. They are the ranks their docstring says.
    cfg = load_preset("multi-turn-chat-h100-llama8b")
    res = run_simulation(cfg)
    st, arrival = res.summary.steady, res.requests.arrival_s
    assert not np.all(np.diff(arrival) >= 0)  # ids out of arrival order: the case that differed
    lo, hi = steady_window(int(np.isfinite(arrival).sum()))
    assert (st.window_first_request, st.window_last_request) == (lo, hi - 1)
    assert st.window_last_request - st.window_first_request + 1 == st.num_requests
    ranked = np.sort(arrival[np.isfinite(arrival)])
    assert (st.window_start_s, st.window_end_s) == (ranked[lo], ranked[hi - 1])


def test_the_too_short_note_never_advises_more_requests_than_a_run_may_have():
    # 200,000 requests at 100,000 req/s on 32P32D: "Run about 98,766,600 requests or more" (the bound is 200,000)
    from sim_core.config import WorkloadConfig
    from sim_core.metrics import _steady_note

    most = next(m.le for m in WorkloadConfig.model_fields["num_requests"].metadata if getattr(m, "le", None))
    note = _steady_note(200_000, 160_000, 0, warmup_s=0.2, mean_e2e_s=97.8)
    assert "Run about" not in note and f"more than the {most:,} a run allows" in note
    assert "Run about 1,000 requests or more." in _steady_note(500, 400, 0, warmup_s=1.0, mean_e2e_s=2.0)


def test_kv_peak_counts_the_blocks_a_request_holds_in_its_last_tick():
    # One request, prompt 32 (2 blocks of 16), output 1: it holds 2 blocks while its only tick runs (the batch log
    # says so); the peak read 0 % from the rows, which count blocks after the tick's completions free them (the KV
    # panel and the cached-free count read them so), so the engine keeps the in-tick peak on every path
    res = run_simulation(trace_config([32], [1]))
    assert res.batches.kv_blocks_held.tolist() == [2]
    assert res.summary.kv_peak_usage * res.memory.num_blocks == 2


@settings(max_examples=40, deadline=None)
@given(st_.integers(0, 10_000))
def test_the_kv_peak_covers_every_tick_s_batch_and_fits_the_cache(seed):
    # Every path (general, coalesced, scalar core, batch of one): the peak is at least the blocks a logged tick's
    # batch holds while it runs (finishing requests included), never above the cache, and at least every row
    from tests.sim_core.test_engine import random_config

    cfg = random_config(seed)
    cfg = cfg.model_copy(update={"limits": cfg.limits.model_copy(update={"num_recorded_batches": 100_000})})
    res = run_simulation(cfg)
    peak_blocks = round(res.summary.kv_peak_usage * res.memory.num_blocks)
    log = res.batches
    if log.tick.size:
        assert peak_blocks >= np.bincount(log.tick, weights=log.kv_blocks_held).max() - 1e-9
    assert res.timeline.kv_blocks_used.max(initial=0) <= peak_blocks <= res.memory.num_blocks


def test_the_too_short_note_advises_a_run_whose_window_holds_enough_requests(monkeypatch):
    # (it divided by 0.8, the window's share typed out: with other fractions it advised too few requests)
    from sim_core import metrics

    monkeypatch.setattr(metrics, "STEADY_WARMUP_FRACTION", 0.2)
    monkeypatch.setattr(metrics, "STEADY_DRAIN_FRACTION", 0.2)
    note = metrics._steady_note(60, 36, 0, warmup_s=1.0, mean_e2e_s=0.5)
    need = int(note.split("Run at least ")[1].split(" ")[0].replace(",", ""))
    first, last = metrics.steady_window(need)
    assert last - first >= metrics.MIN_STEADY_REQUESTS and need == 167


def test_a_runs_swap_time_is_the_cost_models_swap_term_over_its_ticks():
    # (the summary divided by hardware.pcie_gb_per_s * 1e9 of its own; costmodel.swap_bytes_per_s is the one rate)
    import pytest

    from sim_core.costmodel import CostModel
    from tests.sim_core.test_schedulers import _pressure

    res = run_simulation(_pressure("greedy", "swap", swap_gb=32.0))
    ticks_s = CostModel(res.config).swap_time_s(res.timeline.swap_blocks * res.memory.block_bytes)
    assert res.summary.swap_time_s > 0 and res.summary.swap_time_s == pytest.approx(float(ticks_s.sum()), rel=1e-12)


# ---------------------------------------------------------------- what a stopped run says of its unfinished requests
@pytest.mark.parametrize("deployment", [None, {"replicas": 2}, {"disaggregation": {}}])
def test_a_run_whose_requests_arrive_after_its_time_limit_says_when_they_arrive(deployment):
    # a trace whose arrivals came after the time limit ran no tick and said "2 of 2 requests unfinished (the load exceeds
    # capacity or the limit is too low)". (Unix times, 1.7e9 s, are past the longest run any limit allows: refused with
    # the trace, naming the row, tests/sim_core/test_traces_hostile.py)
    cfg = trace_config([10, 20], [10, 5], arrivals=[5e3, 5e3 + 1], deployment=deployment)
    why = run_simulation(cfg).summary.stopped_reason
    assert why.endswith("2 of 2 requests unfinished, none of them arrived before the stop (the next arrives at 5000 s)"), why
    assert "exceeds capacity" not in why
    # no time served: a makespan of 0 and no rate (it read 1e-12 s, the divisor's guard, in --json)
    s = run_simulation(cfg).summary
    assert (s.makespan_s, s.output_tokens_per_s, s.requests_per_s, s.gpu_busy_fraction) == (0.0, 0.0, 0.0, 0.0)


@cases(25)
@given(rate=st_.sampled_from([1e-6, 1e-3, 0.05, 5.0, 200.0]), limit_s=st_.sampled_from([0.5, 3.0, 60.0]),
       process=st_.sampled_from(["poisson", "constant", "closed_loop"]), replicas=st_.sampled_from([None, 2]))  # fmt: skip
def test_a_stopped_runs_count_of_requests_not_arrived_is_those_arriving_after_its_clock(rate, limit_s, process, replicas):
    assume(process != "closed_loop" or replicas is None)  # (closed-loop arrivals run on one engine only)
    cfg = make_config(workload__num_requests=60, workload__arrival__process=process, workload__arrival__rate_per_s=rate,
                      limits__max_sim_time_s=limit_s, deployment=None if replicas is None else {"replicas": replicas})  # fmt: skip
    res = run_simulation(cfg)
    why, q = res.summary.stopped_reason, res.requests
    if why is None:
        return
    unfinished = int((~q.is_finished).sum())
    assert f"; {unfinished:,} of 60 requests unfinished" in why
    # (every request that never arrived has arrival_s past the stop, a closed-loop one never sent an infinite one)
    never = int(((q.status == Status.PENDING) & ~(q.arrival_s <= limit_s)).sum())
    if never == 0:
        assert why.endswith("(the load exceeds capacity or the limit is too low)"), why
    elif never == unfinished:
        assert ", none of them arrived before the stop" in why, why
    else:
        assert f", {never:,} of them not arrived before the stop" in why, why
        assert why.endswith(f"; the other {unfinished - never:,} were queued or running then"), why


def test_no_value_reason_says_none_finished_or_one_token_outputs():
    from sim_core.metrics import no_value_reason

    assert no_value_reason("TPOT", 0) == no_value_reason("TTFT", 0) == "no request finished"
    assert no_value_reason("TPOT", 3) == "one-token outputs have no TPOT"
    assert no_value_reason("ITL", 3) == "one-token outputs have no gap between tokens"


def test_at_kv_link_counts_unfinished_requests_whose_transfer_started_and_had_not_ended():
    from sim_core.metrics import at_kv_link
    from sim_core.types import Status

    nan = float("nan")
    status = np.array([Status.FINISHED, Status.RUNNING, Status.RUNNING, Status.RUNNING, Status.WAITING])
    start = np.array([1.0, 1.0, 1.0, 5.0, nan])  # finished; crossing at the stop; crossed; starts after it; prefilling
    end = np.array([2.0, nan, 1.5, 6.0, nan])
    assert at_kv_link(status, start, end, 3.0).tolist() == [False, True, False, False, False]
    assert not at_kv_link(status, None, None, 3.0).any()  # (one engine, replicas: no link)


def test_waiting_for_a_decode_slot_counts_unfinished_requests_handed_off_with_no_transfer_started():
    from sim_core.metrics import waiting_for_decode_slot
    from sim_core.types import Status

    nan = float("nan")
    status = np.array([Status.FINISHED, Status.RUNNING, Status.RUNNING, Status.RUNNING, Status.WAITING])
    # finished; handed off, no slot by the stop; its transfer started; handed off after the stop; prefilling
    wait = np.array([1.0, 1.0, 1.0, 5.0, nan])
    start = np.array([1.5, nan, 2.0, nan, nan])
    assert waiting_for_decode_slot(status, wait, start, 3.0).tolist() == [False, True, False, False, False]
    assert not waiting_for_decode_slot(status, None, None, 3.0).any()  # (one engine, replicas: no pools)


def test_every_summary_field_says_what_it_measures_and_its_unit():
    # (a researcher reading Summary.model_json_schema() found no description on any of its ~45 fields)
    from sim_core.result import Summary

    schema = Summary.model_json_schema()["properties"]
    assert all(schema[name].get("description") for name in Summary.model_fields), [n for n in Summary.model_fields if not schema[n].get("description")]
    rates = [n for n in Summary.model_fields if n.endswith("_per_s")]
    seconds = [n for n in Summary.model_fields if n.endswith("_s") and n not in rates]
    assert rates and all("/s" in schema[n]["description"] for n in rates)
    assert seconds and all(", s" in schema[n]["description"] or "s per token" in schema[n]["description"] for n in seconds), [
        n for n in seconds if ", s" not in schema[n]["description"]]
