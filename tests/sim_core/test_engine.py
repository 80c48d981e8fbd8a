"""Engine invariants on many random configs, determinism, coalesced runs, the guard."""

from __future__ import annotations

import numpy as np
import pytest

from sim_core import run_simulation
from sim_core.costmodel import ModelShape, kv_bytes_per_token, workspace_bytes_per_gpu
from sim_core.types import Event, Phase, Status
from tests.conftest import make_config, trace_config

ENGINES = ["vllm-v1", "vllm-v0", "vllm-v0-swap", "sglang", "orca", "fastertransformer", "tensorrt-llm-no-evict",
           "tensorrt-llm-max-utilization", "article-time-slice", "article-quota", "article-priority",
           "article-dynamic-batch", "article-smart-preemption", "exclusive", "sarathi-serve"]  # fmt: skip


def random_config(seed: int):
    rng = np.random.default_rng(seed)
    engine = ENGINES[seed % len(ENGINES)]
    contiguous = engine in ("orca", "fastertransformer")
    process = ["poisson", "gamma", "offline", "closed_loop", "constant"][int(rng.integers(5))]
    cfg = make_config(
        "engine-" + engine,
        seed=int(rng.integers(1000)),
        workload__num_requests=int(rng.integers(20, 60)),
        workload__arrival__process=process,
        workload__arrival__rate_per_s=float(rng.uniform(2, 40)),
        workload__arrival__num_clients=int(rng.integers(2, 20)),
        workload__prompt_tokens={"dist": "lognormal", "mean": int(rng.integers(100, 1500)), "min": 4, "max": 4000, "sigma": 0.7},
        workload__output_tokens={"dist": "uniform", "mean": 20, "min": 1, "max": int(rng.integers(20, 400))},
        workload__num_samples=int(rng.choice([1, 1, 2, 4])) if not contiguous else 1,
        workload__classes=[{"name": "a", "share": 0.3, "priority": 0}, {"name": "b", "share": 0.7, "priority": 2}],
        kv_cache__block_size=int(rng.choice([8, 16, 32])),
        kv_cache__swap_space_gb=float(rng.choice([0.0, 0.5, 4.0])),
        scheduler__admission=str(rng.choice(["watermark", "greedy", "reserve"])),
    )
    if contiguous:
        return cfg
    # Leave room for only a few long requests so that pre-emption and admission limits are exercised.
    kv_room = float(rng.uniform(1.0, 3.0)) * 4400 * kv_bytes_per_token(cfg) * cfg.workload.num_samples
    need = ModelShape.of(cfg).total_params * 2 + workspace_bytes_per_gpu(cfg) + kv_room
    return cfg.model_copy(update={"kv_cache": cfg.kv_cache.model_copy(update={"gpu_memory_utilization": need / 80e9})})


def assert_run_invariants(res):
    req, tl = res.requests, res.timeline
    done = req.is_finished
    assert np.all(req.status[done] == Status.FINISHED)
    assert np.array_equal(req.num_emitted[done], req.output_tokens[done])  # exactly its output tokens
    assert np.all(req.num_emitted <= req.output_tokens)
    assert res.summary.num_finished + res.summary.num_unfinished == req.arrival_s.size
    fin_events = res.events.req[res.events.kind == Event.FINISHED]
    assert fin_events.size == np.unique(fin_events).size == done.sum()  # finishes once
    assert np.all(req.first_scheduled_s[done] >= req.arrival_s[done])  # nothing runs before it arrives
    assert np.all(req.first_token_s[done] >= req.first_scheduled_s[done])
    assert np.all(req.ttft_s[done] <= req.e2e_s[done])
    assert np.all(tl.duration_s > 0)
    assert np.all(np.diff(tl.t_start_s) > 0)  # time is monotone
    assert np.allclose(tl.t_start_s[1:], tl.t_end_s[:-1], rtol=0, atol=1e-9)  # no gaps: idle is a row
    assert np.all(tl.kv_blocks_used <= res.memory.num_blocks)
    # one gap per token after the first, per request (samples of one request share a step)
    assert res.itl_s.size == int(np.maximum(req.num_emitted - 1, 0).sum())


@pytest.mark.parametrize("seed", range(45))
def test_invariants_hold_every_tick_on_random_configs(seed):
    res = run_simulation(random_config(seed), check_invariants=True)
    assert_run_invariants(res)
    if res.summary.stopped_reason is None:
        assert res.summary.num_finished == res.summary.num_requests


def test_memory_pressure_configs_do_preempt():
    preempted = sum(run_simulation(random_config(s)).summary.num_preemptions for s in range(45))
    assert preempted > 0


def test_same_config_same_result():
    cfg = random_config(3)
    a, b = run_simulation(cfg), run_simulation(cfg)
    assert a.summary == b.summary
    assert np.array_equal(a.timeline.t_start_s, b.timeline.t_start_s)
    assert np.array_equal(a.requests.finish_s, b.requests.finish_s, equal_nan=True)


def test_different_seed_different_result(default_cfg):
    a = run_simulation(default_cfg)
    b = run_simulation(default_cfg.model_copy(update={"seed": 1}))
    assert a.summary.ttft_p50_s != b.summary.ttft_p50_s


def _same(a, b):
    for name in a.timeline.columns:
        assert np.array_equal(a.timeline.columns[name], b.timeline.columns[name]), name
    for name in ("first_token_s", "finish_s", "first_scheduled_s", "max_itl_s", "num_emitted", "num_preemptions"):
        assert np.array_equal(getattr(a.requests, name), getattr(b.requests, name), equal_nan=True), name
    assert np.array_equal(np.sort(a.itl_s), np.sort(b.itl_s))
    for name in ("tick", "req", "num_new_tokens", "is_decode", "kv_blocks_held"):
        assert np.array_equal(getattr(a.batches, name), getattr(b.batches, name)), name
    assert a.summary == b.summary


@pytest.mark.parametrize("seed", range(30))
def test_coalesced_runs_equal_tick_by_tick(seed):
    cfg = random_config(seed)
    on = run_simulation(cfg)
    off = run_simulation(cfg.model_copy(update={"limits": cfg.limits.model_copy(update={"coalesce_ticks": False})}))
    _same(on, off)


def test_coalescing_equal_on_low_load_long_outputs():
    cfg = make_config(workload__arrival__rate_per_s=0.5, workload__num_requests=30,
                      workload__output_tokens={"dist": "uniform", "mean": 800, "min": 400, "max": 1500})
    off = cfg.model_copy(update={"limits": cfg.limits.model_copy(update={"coalesce_ticks": False})})
    _same(run_simulation(cfg), run_simulation(off))


def test_idle_gaps_jump_to_the_next_arrival():
    res = run_simulation(trace_config([100, 100], [3, 3], arrivals=[0.0, 10.0]))
    idle = res.timeline.phase == Phase.IDLE
    assert idle.sum() == 1
    gap = res.timeline.t_end_s[idle][0]
    assert gap == 10.0 and res.requests.first_scheduled_s[1] == 10.0


def test_guard_stops_an_overload_and_reports_unfinished():
    cfg = make_config(workload__arrival__rate_per_s=500, workload__num_requests=3000, limits__max_sim_time_s=5)
    res = run_simulation(cfg)
    assert res.summary.stopped_reason and "max_sim_time_s" in res.summary.stopped_reason
    assert res.summary.num_unfinished > 0
    assert res.summary.num_finished + res.summary.num_unfinished == 3000
    assert res.timeline.t_start_s[-1] < 5


def test_tick_guard():
    res = run_simulation(make_config(limits__max_ticks=50))
    assert res.timeline.num_ticks == 50 and "max_ticks" in res.summary.stopped_reason


def test_a_one_tick_limit_says_tick_not_ticks():
    # limits.max_ticks = 1 (a sidebar minimum) read "stopped after 1 ticks (limits.max_ticks)" on the Simulate page
    res = run_simulation(make_config(limits__max_ticks=1))
    assert res.summary.stopped_reason.startswith("stopped after 1 tick (limits.max_ticks)"), res.summary.stopped_reason


def test_closed_loop_keeps_n_requests_in_flight():
    cfg = make_config(workload__arrival__process="closed_loop", workload__arrival__num_clients=4, workload__num_requests=40)
    res = run_simulation(cfg)
    assert res.summary.num_finished == 40
    assert res.timeline.num_running.max() <= 4
    later = res.requests.arrival_s[4:]
    assert np.all(np.isin(later, res.requests.finish_s))  # each released at a finish


def test_parallel_samples_emit_n_tokens_per_step():
    one = run_simulation(trace_config([200], [10]))
    four = run_simulation(trace_config([200], [10], workload__num_samples=4))
    assert four.timeline.num_decode_tokens.max() == 4 * one.timeline.num_decode_tokens.max() == 4
    assert four.summary.output_tokens_per_s > one.summary.output_tokens_per_s
    assert four.timeline.kv_blocks_used.max() > one.timeline.kv_blocks_used.max()


def test_first_token_comes_from_the_prefill_tick():
    res = run_simulation(trace_config([300], [5]))
    tl = res.timeline
    assert tl.num_prefill_tokens[0] == 300 and tl.num_decode_tokens[0] == 0
    assert res.requests.first_token_s[0] == tl.t_end_s[0]
    assert tl.num_ticks == 1 + 4  # then four decode ticks


@pytest.mark.parametrize("base", ["chat-2xh100-mixtral", "engine-fastertransformer", "offline-batch-h200-llama8b"])
def test_coalescing_equal_for_moe_static_and_offline(base):
    cfg = make_config(base, workload__num_requests=120)
    off = cfg.model_copy(update={"limits": cfg.limits.model_copy(update={"coalesce_ticks": False})})
    _same(run_simulation(cfg), run_simulation(off))


FAST_CASES = {
    "default chat": dict(base="chat-h100-llama8b"),
    "long prompts, chunked": dict(base="long-document-a100-llama8b", workload__num_requests=80),
    "offline backlog": dict(base="offline-batch-h200-llama8b", workload__num_requests=400, scheduler__max_num_seqs=64),
    "kv pressure, greedy": dict(base="engine-sarathi-serve", scheduler__admission="greedy", workload__num_requests=120,
                                workload__arrival__rate_per_s=8.0, kv_cache__gpu_memory_utilization=0.235),
    "tiny budget, many chunks": dict(base="chat-h100-llama8b", scheduler__max_num_batched_tokens=256,
                                     scheduler__max_num_seqs=64, workload__num_requests=120),
    "block size 1, output 1": dict(base="chat-h100-llama8b", kv_cache__block_size=1, workload__num_requests=100,
                                   workload__output_tokens={"dist": "uniform", "mean": 3, "min": 1, "max": 6}),
}  # fmt: skip


@pytest.mark.parametrize("case", FAST_CASES)
def test_decode_first_fast_path_equals_tick_by_tick(case, monkeypatch):
    over = dict(FAST_CASES[case])
    cfg = make_config(over.pop("base"), **over)
    on, off, fast_ticks = run_fast_and_tick_by_tick(cfg, monkeypatch)
    assert fast_ticks > 0  # the fast path really ran
    _same(on, off)


def run_fast_and_tick_by_tick(cfg, monkeypatch):
    """(result with coalescing, result tick by tick, ticks the fast path advanced in the first)."""
    from sim_core import fastpath

    fast_ticks = []
    original = fastpath.advance

    def counting(engine):
        before = engine.rec.num_ticks
        ran = original(engine)
        fast_ticks.append(engine.rec.num_ticks - before)
        return ran

    monkeypatch.setattr(fastpath, "advance", counting)
    on = run_simulation(cfg, check_invariants=True)
    off = run_simulation(cfg.model_copy(update={"limits": cfg.limits.model_copy(update={"coalesce_ticks": False})}))
    return on, off, sum(fast_ticks)
    assert_run_invariants(on)


def test_step_is_one_loop_iteration_of_run():
    from sim_core.engine import Engine

    cfg = make_config(workload__num_requests=40)
    engine = Engine(cfg)
    steps = 0
    while engine.step():
        steps += 1
    assert engine.step() is False  # stays over
    stepped = engine.result()
    assert 0 < steps < stepped.timeline.num_ticks  # coalesced runs: fewer steps than ticks
    ref = run_simulation(cfg)
    assert np.array_equal(stepped.timeline.t_start_s, ref.timeline.t_start_s)
    assert stepped.summary == ref.summary


def test_step_stops_at_a_guard_with_a_reason():
    from sim_core.engine import Engine

    engine = Engine(make_config(limits__max_ticks=5))
    while engine.step():
        pass
    assert engine.rec.num_ticks == 5 and "max_ticks" in engine.stopped_reason


SCALAR_CORE_PRESETS = ["engine-vllm-v0", "engine-vllm-v0-swap", "engine-sglang", "engine-orca", "engine-tensorrt-llm-max-utilization",
                       "engine-tensorrt-llm-no-evict", "engine-article-quota", "engine-article-time-slice",
                       "engine-article-priority", "engine-article-smart-preemption", "engine-vllm-v1", "engine-sarathi-serve"]  # fmt: skip


@pytest.mark.parametrize("preset", SCALAR_CORE_PRESETS)
def test_the_scalar_core_runs_every_continuous_policy(preset, monkeypatch):
    """Issue 11: prefill-first, mixed, time-slice, quota, priority, reserved, contiguous and
    suspending policies take the per-tick scalar core (asking the scheduler's own phase controller)
    for most of their ticks, with tick-by-tick results."""
    on, off, fast_ticks = run_fast_and_tick_by_tick(make_config(preset, workload__num_requests=60), monkeypatch)
    _same(on, off)
    assert fast_ticks >= 0.5 * on.timeline.num_ticks


def _two_requests_one_preempted(num_samples: int, kv_tokens: int, **over):
    """Two 64-token prompts with 400-token answers and `num_samples` samples each, in a KV cache of ~`kv_tokens`:
    the later one is pre-empted (recompute) and prefilled again after the first finishes."""
    cfg = trace_config([64, 64], [400, 400], arrivals=[0.0, 0.0], workload__num_samples=num_samples,
                       kv_cache__block_size=16, kv_cache__swap_space_gb=0.0, **over)  # fmt: skip
    need = ModelShape.of(cfg).total_params * 2 + workspace_bytes_per_gpu(cfg) + kv_tokens * kv_bytes_per_token(cfg)
    util = (need + 0.5 * 2**30) / (cfg.hardware.memory_gib * 2**30)  # (plus the CUDA context the memory rule keeps)
    return cfg.model_copy(update={"kv_cache": cfg.kv_cache.model_copy(update={"gpu_memory_utilization": util})})


@pytest.mark.parametrize("n, kv_tokens", [(1, 500), (2, 1200), (3, 1200)])
def test_a_recompute_prefill_computes_every_samples_tokens(n, kv_tokens):
    # Recompute drops the victim's KV: the prompt (shared by its samples) and each sample's own generated tokens. Its
    # prefill again computes the prompt once and every sample's tokens: n of them per position past the prompt. It
    # was priced as one sample's (64 + 353 tokens at n = 2, not 64 + 2 x 353).
    res = run_simulation(_two_requests_one_preempted(n, kv_tokens), check_invariants=True)
    ev, b, tl = res.events, res.batches, res.timeline
    (victim,) = ev.req[ev.kind == Event.PREEMPTED]
    again = (b.req == victim) & ~b.is_decode & (b.tick > 0)  # its recompute chunks (tick 0: both prompts)
    positions = int(b.num_new_tokens[again].sum())
    prompt = int(res.requests.prompt_tokens[victim])
    assert positions > prompt  # the prompt and the tokens emitted before pre-emption
    assert int(tl.columns["num_prefill_tokens"][b.tick[again]].sum()) == prompt + n * (positions - prompt)
    dropped = int(res.requests.num_recomputed_tokens[victim])
    assert dropped == prompt + n * (positions - prompt - 1)  # (its KV then held one position fewer)


@pytest.mark.parametrize("mode", ["decode_first", "prefill_first"])
@pytest.mark.parametrize("n", [2, 3])
def test_a_recompute_prefill_with_samples_stays_within_the_token_budget(n, mode):
    # The token budget (max_num_batched_tokens) counts the tokens a tick computes: a decode counts n (one per sample),
    # and so does each position of a recompute chunk past the prompt, which the tick prices n times (the samples'
    # own tokens; the prompt's positions once). It counted positions: a 128-token budget ran 128 positions, priced
    # 64 + 2 x 64 = 192 tokens at n = 2 (and a decode-first tick's decodes came on top).
    budget = 128
    cfg = _two_requests_one_preempted(n, 1200, scheduler__prefill_mode=mode, scheduler__enable_chunked_prefill=True,
                                      scheduler__max_num_batched_tokens=budget, scheduler__max_num_seqs=8)  # fmt: skip
    res = run_simulation(cfg, check_invariants=True)
    ev, b, tl = res.events, res.batches, res.timeline
    victim = ev.req[ev.kind == Event.PREEMPTED][0]  # (the same request each time)
    again = (b.req == victim) & ~b.is_decode & (b.tick > 0)  # its recompute chunks (tick 0: both prompts)
    assert res.summary.num_finished == 2 and np.unique(b.tick[again]).size > 2  # (set-up: several budget-sized chunks)
    prefill, decode = tl.columns["num_prefill_tokens"], tl.columns["num_decode_tokens"]
    counted = prefill + decode if mode == "decode_first" else prefill  # (a prefill-first tick runs no decode beside)
    assert counted.max() <= budget
    assert counted[b.tick[again]].max() > budget - n  # the budget is used (to a position's n tokens)


def test_extra_samples_work_is_the_sum_over_positions_past_the_prompt():
    from hypothesis import given, settings
    from hypothesis import strategies as hs

    from sim_core.engine import samples_past_prompt

    chunk = hs.tuples(hs.integers(0, 300), hs.integers(0, 600), hs.integers(1, 400))  # (tokens, computed before, prompt)

    @settings(max_examples=300, deadline=None)
    @given(hs.integers(1, 5), hs.lists(chunk, max_size=4))
    def check(n, chunks):
        got = samples_past_prompt(n, [m for m, _, _ in chunks], [c for _, c, _ in chunks], [p for _, _, p in chunks])
        past = [[i for i in range(c, c + m) if i >= p] for m, c, p in chunks]
        want = (sum(map(len, past)), sum(i + 1 for pos in past for i in pos),
                sum(c for (m, c, p), pos in zip(chunks, past) if pos), sum(1 for pos in past if pos))
        assert got == tuple((n - 1) * x for x in want)

    check()


@pytest.mark.parametrize("cfg", [None, {"seed": 1}, "chat-h100-llama8b"])
def test_run_simulation_of_something_not_a_config_says_what_to_pass(cfg):
    # the README's entry point ended in "AttributeError: 'dict' object has no attribute 'deployment'" (fuzz39)
    with pytest.raises(TypeError, match=f"run_simulation needs a SimConfig, got {type(cfg).__name__}: load_preset"):
        run_simulation(cfg)
