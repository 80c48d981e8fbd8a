"""Closed-loop multi-turn sessions (sim_core/sessions.py): a turn is sent when the previous reply is done, plus think time."""

from __future__ import annotations

import numpy as np
import pytest

from sim_core import run_simulation
from sim_core.engine import Engine
from sim_core.types import Status
from tests.conftest import make_config
from tests.documents import prose


def sessions_config(n=120, turns=4, think_s=2.0, **over):
    return make_config(workload__num_requests=n, workload__sessions={"turns": turns, "think_time_s": think_s}, **over)


def run_engine(cfg) -> tuple[Engine, object]:
    engine = Engine(cfg)
    engine.check_invariants = True
    return engine, engine.run()


@pytest.mark.parametrize("rate", [0.5, 40.0])  # light load and overload
def test_a_later_turn_is_sent_its_think_time_after_the_previous_reply(rate):
    engine, res = run_engine(sessions_config(workload__arrival__rate_per_s=rate))
    wl, req = engine.workload, res.requests
    prev = np.flatnonzero(wl.next_turn >= 0)
    nxt = wl.next_turn[prev]
    assert res.summary.num_finished == 120
    assert np.array_equal(req.arrival_s[nxt], req.finish_s[prev] + wl.think_s[prev])  # exactly, per turn
    # TTFT counts from the turn's actual send time, which is after the previous turn finished
    assert np.all(req.first_token_s[nxt] - req.arrival_s[nxt] == res.requests.ttft_s[nxt])
    assert np.all(res.requests.ttft_s >= 0) and np.all(req.first_scheduled_s[nxt] >= req.finish_s[prev])


def test_a_session_has_at_most_one_turn_in_the_server():
    engine, res = run_engine(sessions_config(n=200, think_s=0.0, workload__arrival__rate_per_s=60.0))
    wl, req = engine.workload, res.requests
    for s in np.unique(wl.content_id):
        turns = np.flatnonzero(wl.content_id == s)
        assert np.all(req.arrival_s[turns[1:]] >= req.finish_s[turns[:-1]])  # [arrival, finish] never overlap


def test_overload_keeps_at_most_one_turn_per_started_session_in_the_server():
    """Open loop would queue every turn at its nominal time; closed loop holds one turn per session at most."""
    engine, res = run_engine(sessions_config(n=400, think_s=1.0, workload__arrival__rate_per_s=200.0))
    tl, wl = res.timeline, engine.workload
    in_server = tl.num_waiting + tl.num_running
    started = np.searchsorted(np.sort(res.requests.arrival_s[np.isfinite(wl.arrival_s)]), tl.t_start_s, side="right")
    assert tl.num_waiting.max() > 0 and np.all(in_server <= started)  # overloaded, yet bounded by the sessions


def test_the_previous_turn_is_cached_when_the_next_one_looks_it_up():
    engine, res = run_engine(sessions_config(n=120, think_s=0.5, kv_cache__enable_prefix_caching=True))
    wl, bs = engine.workload, engine.cfg.kv_cache.block_size
    prev = np.flatnonzero(wl.next_turn >= 0)
    nxt = wl.next_turn[prev]
    assert res.summary.prefix_blocks_evicted == 0  # ample KV: nothing evicted
    hit = engine.prefix.hit_tokens[nxt]
    kv_tokens = wl.prompt_tokens[prev] + wl.output_tokens[prev] - 1  # the previous turn's prompt and reply but its last token
    want = np.minimum(kv_tokens // bs, (wl.prompt_tokens[nxt] - 1) // bs) * bs
    assert np.all(hit >= want)  # every full block of the previous prompt and reply (plus any cached since)


def test_guards_bound_a_session_run_and_unsent_turns_stay_unsent():
    res = run_simulation(sessions_config(n=200, workload__arrival__rate_per_s=20.0, limits__max_sim_time_s=3.0))
    assert res.summary.stopped_reason is not None
    unsent = ~np.isfinite(res.requests.arrival_s)
    assert unsent.any() and np.all(res.requests.status[unsent] == Status.PENDING)
    assert np.all(np.isnan(res.requests.first_token_s[unsent]))


def test_same_seed_same_session_run_and_queue_order_by_send_time():
    cfg = sessions_config(n=150, workload__arrival__rate_per_s=30.0, scheduler__max_num_seqs=8)
    a, b = run_simulation(cfg), run_simulation(cfg)
    assert a.summary == b.summary and np.array_equal(a.requests.finish_s, b.requests.finish_s, equal_nan=True)
    req = a.requests  # FCFS: requests are first scheduled in the order they were sent (no pre-emption here)
    assert a.summary.num_preemptions == 0
    order = np.lexsort((np.arange(req.arrival_s.size), req.arrival_s))
    first = req.first_scheduled_s[order]
    assert np.all(np.diff(first[np.isfinite(first)]) >= 0)


def test_a_deployment_keeps_open_loop_sessions_unless_the_config_asks_for_closed_loop():
    dep = sessions_config(turns=3, deployment={"replicas": 2})  # a link without the field: open loop, as before
    assert dep.workload.sessions.closed_loop is False
    closed = sessions_config(turns=3, deployment={"replicas": 2}, workload__sessions__closed_loop=True)
    assert closed.workload.sessions.closed_loop is True  # accepted: tests/sim_core/cluster/test_sessions_cluster.py
    assert sessions_config(turns=3).workload.sessions.closed_loop is True


def test_open_loop_sessions_send_every_turn_at_a_fixed_time():
    engine, res = run_engine(sessions_config(workload__sessions__closed_loop=False, workload__arrival__rate_per_s=40.0))
    wl = engine.workload
    assert wl.next_turn is None and np.all(np.isfinite(wl.arrival_s)) and np.all(np.diff(wl.arrival_s) >= 0)
    assert np.array_equal(res.requests.arrival_s, wl.arrival_s)  # fixed in advance, whatever the replies do


def _two_sessions():
    fx = lambda m: {"dist": "fixed", "mean": m, "min": 1, "max": m}  # noqa: E731
    cfg = make_config(seed=5, workload__num_requests=4, workload__arrival={"process": "constant", "rate_per_s": 1.0},
                      workload__prompt_tokens=fx(100), workload__output_tokens=fx(20),
                      workload__sessions={"turns": 2, "user_tokens": fx(30), "think_time_s": 2.0},
                      kv_cache__enable_prefix_caching=True)  # fmt: skip
    return run_engine(cfg)


def test_two_sessions_by_hand():
    """2 sessions x 2 turns, fixed lengths (prompt 100, reply 20, user 30, blocks of 16): sessions start at rate / turns
    (0 and 2 s); a second turn is sent its think time after its first turn's reply, its prompt is 100 + 20 + 30 = 150
    tokens, and it finds the first turn's 7 full blocks cached (KV for 100 + 20 - 1 tokens: its prompt and reply but the
    reply's last token; 112 tokens): hit rate 2 * 112 / (2 * 100 + 2 * 150)."""
    engine, res = _two_sessions()
    wl, req, pc = engine.workload, res.requests, engine.prefix
    first = np.flatnonzero(np.isfinite(wl.arrival_s))
    later = wl.next_turn[first]
    assert first.tolist() == [0, 1] and req.arrival_s[first].tolist() == [0.0, 2.0]
    assert np.array_equal(req.arrival_s[later], req.finish_s[first] + wl.think_s[first])
    assert wl.prompt_tokens[first].tolist() == [100, 100] and wl.prompt_tokens[later].tolist() == [150, 150]
    assert np.array_equal(wl.content_id[later], wl.content_id[first])
    assert pc.hit_tokens[first].tolist() == [0, 0] and pc.hit_tokens[later].tolist() == [112, 112]
    assert res.summary.prefix_hit_rate_tokens == 2 * 112 / 500


def test_a_next_turn_finds_the_previous_reply_cached_as_in_vllm():
    """vLLM V1 (KVCacheManager.allocate_slots caches every full block up to request.num_tokens, decode blocks
    included) and SGLang (cache_finished_req inserts prompt + output) keep the reply's full blocks: before, only the
    prompt's 6 were cached (96 tokens) and the next turn prefilled the reply again."""
    engine, _ = _two_sessions()
    later = engine.workload.next_turn[[0, 1]]
    # the first turn's KV covers its prompt and all but its last reply token: (100 + 20 - 1) // 16 = 7 full blocks
    assert engine.prefix.hit_tokens[later].tolist() == [112, 112]


def test_the_readme_quotes_closed_and_open_loop_sessions_as_they_run():
    # Regression (review 27): "Real traffic" quoted 13.5/19.2 s against 27.7/62.8 s, hit rate 0.11 from 0.54, and
    # TTFT p50 17.5 vs 18.3 ms at 6 req/s, from before the H100 refit (now 13.4/19.0, 27.4/62.4, 0.12, 17.1 vs 17.8)
    # (fix27d: a prompt still prefilling publishes its computed blocks after each tick; open loop 27.4/62.4 -> 27.5/62.5)
    # (session 54: the vLLM V1 preset's start-up profile is V1's own, 80 blocks more: 13.4 -> 13.3 s, 62.5 -> 62.4 s)
    from sim_core import load_preset
    from sim_core.sweep import with_value

    text = prose("prefix-caching")  # (the README's section in full)
    preset = load_preset("multi-turn-chat-h100-llama8b")
    busy = preset
    for path, value in (("workload.num_requests", 3000), ("workload.arrival.rate_per_s", 150.0), ("workload.sessions.think_time_s", 2.0)):
        busy = with_value(busy, path, value)
    run = lambda cfg, closed: run_simulation(with_value(cfg, "workload.sessions.closed_loop", closed)).summary  # noqa: E731
    closed, fixed = run(busy, True), run(busy, False)
    assert (f"`multi-turn-chat-h100-llama8b` at 150 req/s with 2 s think time (3,000 requests) TTFT p50/p99 is "
            f"{closed.ttft_p50_s:.1f}/{closed.ttft_p99_s:.1f} s against {fixed.ttft_p50_s:.1f}/{fixed.ttft_p99_s:.1f} s "
            f"when turns were sent at fixed times (the previous behaviour), and the prefix hit rate falls to "
            f"{closed.prefix_hit_rate_tokens:.2f} from {fixed.prefix_hit_rate_tokens:.2f}") in text  # fmt: skip
    assert closed.ttft_p99_s < fixed.ttft_p50_s and closed.prefix_hit_rate_tokens < fixed.prefix_hit_rate_tokens
    closed, fixed = run(preset, True), run(preset, False)
    assert (f"At 6 req/s (the preset) closed loop hits {closed.prefix_hit_rate_tokens:.2f} of prompt tokens against "
            f"{fixed.prefix_hit_rate_tokens:.2f} (TTFT p50 {closed.ttft_p50_s * 1e3:.1f} vs {fixed.ttft_p50_s * 1e3:.1f} ms)") in text
    assert closed.prefix_hit_rate_tokens > fixed.prefix_hit_rate_tokens
    assert f"`multi-turn-chat-h100-llama8b`: {closed.prefix_hit_rate_tokens:.2f} of prompt tokens hit" in text
