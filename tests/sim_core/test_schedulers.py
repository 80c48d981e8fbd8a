"""Behaviour of each strategy on small hand-built workloads, asserting numbers (issue: strategies)."""

from __future__ import annotations

import typing

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as hst

from sim_core import run_simulation
from sim_core.config import SchedulerConfig
from sim_core.costmodel import CostModel
from sim_core.presets import list_presets, read_preset_data
from sim_core.schedulers.phase import PHASE_CONTROLLERS, TickKind
from sim_core.types import Phase
from tests import documents
from tests.conftest import make_config, trace_config
from tests.strategies import cases

LONG_PROMPT = 8000


def _stall_setup(engine: str, **over):
    # request 0 decodes steadily; request 1 brings a long prompt half a second later
    return trace_config([100, LONG_PROMPT], [400, 5], arrivals=[0.0, 0.5], base="engine-" + engine, **over)


def test_every_prefill_mode_has_a_controller():
    modes = typing.get_args(SchedulerConfig.model_fields["prefill_mode"].annotation)
    assert set(PHASE_CONTROLLERS) == set(modes)


def test_prefill_first_stalls_running_decodes_for_a_whole_prompt():
    cfg = _stall_setup("vllm-v0")
    res = run_simulation(cfg)
    prefill_s = CostModel(cfg).prefill_time_s(LONG_PROMPT)
    assert res.requests.max_itl_s[0] >= prefill_s


def test_decode_first_chunking_bounds_the_stall_near_one_chunk_tick():
    cfg = _stall_setup("sarathi-serve")  # token budget 512
    res = run_simulation(cfg)
    cm = CostModel(cfg)
    chunk_tick_s = float(cm.tick(512, 1, 511 * (LONG_PROMPT - 511) + 511 * 512 // 2 + 500, LONG_PROMPT + 500, 2)[0])
    assert res.requests.max_itl_s[0] <= 1.05 * chunk_tick_s
    assert res.requests.max_itl_s[0] < 0.25 * run_simulation(_stall_setup("vllm-v0")).requests.max_itl_s[0]


def _mixed_lengths(base: str):
    rng = np.random.default_rng(7)
    n = 64
    return trace_config(rng.integers(50, 1500, n).tolist(), rng.integers(5, 400, n).tolist(),
                        arrivals=np.sort(rng.uniform(0, 4, n)).tolist(), base=base,
                        scheduler__max_num_seqs=8, scheduler__max_num_batched_tokens=16384)  # fmt: skip


def test_continuous_batching_beats_static_in_throughput_and_ttft():
    cont = run_simulation(_mixed_lengths("engine-vllm-v0")).summary
    same = _mixed_lengths("engine-vllm-v0")  # same memory and engine costs: only the batching differs
    static = run_simulation(_mixed_lengths("engine-fastertransformer").model_copy(
        update={"kv_cache": same.kv_cache, "calibration": same.calibration})).summary
    assert cont.output_tokens_per_s > 1.2 * static.output_tokens_per_s
    assert cont.ttft_p50_s < static.ttft_p50_s


def test_paged_kv_admits_more_concurrent_requests_than_contiguous():
    over = dict(workload__arrival__process="offline", workload__num_requests=200, scheduler__max_num_seqs=256,
                scheduler__admission="watermark")
    paged = run_simulation(make_config("engine-vllm-v0", **over))
    contiguous = run_simulation(make_config("engine-vllm-v0", kv_cache__layout="contiguous", **over))
    assert paged.memory.num_blocks == contiguous.memory.num_blocks  # same memory
    assert paged.timeline.num_running.max() > 3 * contiguous.timeline.num_running.max()
    assert paged.summary.output_tokens_per_s > contiguous.summary.output_tokens_per_s


def _pressure(admission: str, preemption: str = "recompute", swap_gb: float = 4.0):
    return make_config(
        "engine-tensorrt-llm-max-utilization", scheduler__admission=admission, scheduler__preemption=preemption,
        scheduler__max_num_seqs=64, kv_cache__gpu_memory_utilization=0.235, kv_cache__swap_space_gb=swap_gb,
        kv_cache__memory_rule="vllm",  # u of all memory (the TensorRT-LLM rule takes u of what is free)
        workload__arrival__process="offline", workload__num_requests=60,
        workload__prompt_tokens={"dist": "fixed", "mean": 600, "min": 1, "max": 600},
        workload__output_tokens={"dist": "fixed", "mean": 800, "min": 1, "max": 800},
    )


def test_reserve_on_admission_never_preempts():
    res = run_simulation(_pressure("reserve"), check_invariants=True)
    assert res.summary.num_preemptions == 0 and res.summary.num_finished == 60


def test_greedy_admission_preempts_and_still_finishes_everything():
    res = run_simulation(_pressure("greedy"), check_invariants=True)
    assert res.summary.num_preemptions > 0 and res.summary.num_finished == 60
    assert res.summary.num_recomputed_tokens > 0  # recompute records the tokens it computes again
    assert res.summary.swap_time_s == 0


def test_swap_preemption_records_pcie_time_and_recomputes_nothing():
    res = run_simulation(_pressure("greedy", "swap", swap_gb=32.0), check_invariants=True)
    s = res.summary
    assert s.num_swap_outs > 0 and s.swap_time_s > 0 and s.num_recomputed_tokens == 0 and s.num_finished == 60
    swap_ticks = res.timeline.swap_blocks > 0
    assert swap_ticks.any()


def test_swap_falls_back_to_recompute_without_host_space():
    res = run_simulation(_pressure("greedy", "swap", swap_gb=0.0))
    assert res.summary.num_swap_outs == 0 and res.summary.num_recomputed_tokens > 0


def test_priority_classes_cut_the_high_class_tail_ttft():
    prio = make_config("engine-article-priority", workload__arrival__rate_per_s=3.5)
    fcfs = make_config("engine-article-priority", workload__arrival__rate_per_s=3.5, scheduler__queue_order="fcfs")
    hi = lambda r: np.nanpercentile(r.requests.ttft_s[r.requests.priority == 0], 99)  # noqa: E731
    a, b = run_simulation(prio), run_simulation(fcfs)
    assert hi(a) < 0.7 * hi(b)


def test_shortest_prompt_first_lowers_median_ttft_in_a_backlog():
    base = dict(workload__arrival__process="offline", workload__num_requests=100, scheduler__max_num_seqs=8)
    spf = run_simulation(make_config("engine-vllm-v1", scheduler__queue_order="shortest_prompt_first", **base))
    fcfs = run_simulation(make_config("engine-vllm-v1", **base))
    assert spf.summary.ttft_p50_s < fcfs.summary.ttft_p50_s


def test_dynamic_batch_cap_falls_when_ticks_are_slow_and_recovers():
    # bursts of long prompts make ticks slower than the 50 ms target; quiet periods let the cap recover
    prompts = [6000] * 6 + [50] * 30
    arrivals = [0.0] * 6 + list(np.linspace(3.0, 6.0, 30))
    res = run_simulation(trace_config(prompts, [60] * 36, arrivals=arrivals, base="engine-article-dynamic-batch"))
    cap = res.timeline.batch_cap
    low = int(np.argmin(cap))
    assert cap.min() < 16 // 2  # halved at least twice
    assert cap[low:].max() == 16  # back to max_num_seqs afterwards
    slow = res.timeline.duration_s * 1e3 > 50
    assert slow.any() and np.all(cap[1:][slow[:-1] & (res.timeline.phase[:-1] != Phase.IDLE)] < 16)


def test_smart_preemption_suspends_a_long_prefill_and_improves_decode_itl():
    prompts = [100] * 12 + [12000]
    arrivals = [0.0] * 12 + [0.3]
    kw = dict(base="engine-article-smart-preemption", scheduler__max_num_batched_tokens=512)
    on = run_simulation(trace_config(prompts, [300] * 13, arrivals=arrivals, **kw))
    off = run_simulation(trace_config(prompts, [300] * 13, arrivals=arrivals, scheduler__smart_preemption__enabled=False, **kw))
    tl = on.timeline
    # while the long prompt was prefilling, some ticks ran decodes only: the prefill was suspended
    start, end = on.requests.first_scheduled_s[12], on.requests.first_token_s[12]
    during = (tl.t_start_s >= start) & (tl.t_start_s < end)
    assert (tl.phase[during] == Phase.DECODE).any()
    assert not (off.timeline.phase[(off.timeline.t_start_s >= off.requests.first_scheduled_s[12])
                                   & (off.timeline.t_start_s < off.requests.first_token_s[12])] == Phase.DECODE).any()
    itl = lambda r: np.percentile(r.requests.max_itl_s[:12], 50)  # noqa: E731
    assert itl(on) < itl(off)


def _prefill_share(res, max_seqs):
    tl = res.timeline
    first_dec = int(np.argmax(tl.num_decode_tokens > 0))
    # ticks where both kinds of work were available: someone waiting, room to admit, decodes running
    m = (np.arange(tl.num_ticks) > first_dec) & (tl.num_waiting > 0) & (tl.num_running < max_seqs) & (tl.phase != Phase.IDLE)
    d = tl.duration_s[m]
    return float((d * (tl.num_prefill_tokens[m] > 0)).sum() / d.sum())


SHARE_WORKLOAD = dict(
    hardware={"preset": "h100-sxm"}, scheduler__max_num_batched_tokens=256, scheduler__max_num_seqs=256,
    workload__num_requests=200, workload__arrival__process="offline",
    workload__prompt_tokens={"dist": "fixed", "mean": 1000, "min": 1, "max": 1000},
    workload__output_tokens={"dist": "fixed", "mean": 300, "min": 1, "max": 300},
)
SHARE_TOLERANCE = 0.06  # one tick is ~10-25 ms against 10-30 ms slices


@pytest.mark.parametrize("prefill_ms,decode_ms", [(20, 20), (30, 10), (10, 30)])
def test_time_slice_prefill_share_matches_the_slices(prefill_ms, decode_ms):
    cfg = make_config("engine-article-time-slice", scheduler__time_slice={"prefill_slice_ms": prefill_ms, "decode_slice_ms": decode_ms}, **SHARE_WORKLOAD)
    share = _prefill_share(run_simulation(cfg), 256)
    assert share == pytest.approx(prefill_ms / (prefill_ms + decode_ms), abs=SHARE_TOLERANCE)


@pytest.mark.parametrize("target", [0.3, 0.5, 0.7])
def test_quota_prefill_share_matches_the_configured_share(target):
    q = {"prefill_share": target, "window_ms": 1000, "max_prefill_ms": 1000, "decode_min_tokens_per_s": 100}
    cfg = make_config("engine-article-quota", scheduler__quota=q, **SHARE_WORKLOAD)
    assert _prefill_share(run_simulation(cfg), 256) == pytest.approx(target, abs=SHARE_TOLERANCE)


def test_quota_max_prefill_duration_bounds_prefill_runs():
    q = {"prefill_share": 0.9, "window_ms": 1000, "max_prefill_ms": 30, "decode_min_tokens_per_s": 0}
    tl = run_simulation(make_config("engine-article-quota", scheduler__quota=q, **SHARE_WORKLOAD)).timeline
    is_pre = (tl.num_prefill_tokens > 0) & (tl.num_decode_tokens == 0)
    run_s, longest = 0.0, 0.0
    seen_decode = False
    for pre, d, dec in zip(is_pre, tl.duration_s, tl.num_decode_tokens):
        seen_decode |= dec > 0
        run_s = run_s + d if pre else 0.0
        if seen_decode:
            longest = max(longest, run_s)
    assert longest < 0.030 + tl.duration_s.max()


def test_exclusive_runs_one_request_at_a_time():
    res = run_simulation(make_config("engine-exclusive", workload__num_requests=20))
    assert res.timeline.num_running.max() == 1 and res.summary.num_finished == 20


def test_static_batch_admits_only_when_the_batch_is_empty():
    res = run_simulation(make_config("engine-fastertransformer", workload__num_requests=40))
    ev = res.events
    from sim_core.types import Event
    sched_t = np.unique(ev.time_s[ev.kind == Event.SCHEDULED])
    tl = res.timeline
    for t in sched_t[1:]:
        before = tl.num_running[tl.t_end_s <= t]
        assert before.size and before[-1] == 0  # the previous batch had fully drained


@pytest.mark.parametrize("engine", list_presets("engines"))
def test_engine_presets_name_their_source(engine):
    data = read_preset_data("engines", engine)
    assert len(data["description"]) > 40 and data["scheduler"]["name"]


def test_static_batch_with_tight_kv_finishes_by_preempting():
    # greedy admission lets a static batch hold more KV than it can finish with; decodes pre-empt
    cfg = make_config("engine-fastertransformer", kv_cache__layout="paged", scheduler__admission="greedy",
                      scheduler__enable_chunked_prefill=True, scheduler__max_num_batched_tokens=512,
                      scheduler__max_num_seqs=32, kv_cache__gpu_memory_utilization=0.222,
                      workload__arrival__process="offline", workload__num_requests=32,
                      workload__prompt_tokens={"dist": "fixed", "mean": 3000, "min": 1, "max": 3000},
                      workload__output_tokens={"dist": "fixed", "mean": 20, "min": 1, "max": 20})  # fmt: skip
    res = run_simulation(cfg, check_invariants=True)
    assert res.summary.stopped_reason is None and res.summary.num_finished == 32
    assert res.summary.num_preemptions > 0


def test_running_prefills_stuck_without_blocks_are_unblocked_by_a_preemption():
    from sim_core.engine import Engine
    from sim_core.types import Status

    cfg = trace_config([3000, 3000], [5, 5], base="engine-sarathi-serve")
    eng = Engine(cfg)
    st, kv = eng.st, eng.kv
    st.admit_arrivals()
    st.waiting_keys = st.waiting_keys[:0]
    st.running = np.array([0, 1])
    st.status[:2] = Status.RUNNING
    st.computed[:2] = 1600
    st.prefill_start_s[:2] = 0.0
    kv.held[:2] = 1600 // kv.block_size  # exactly their context...
    kv.num_blocks, kv.num_free = int(kv.held.sum()), 0  # ...and not one block more in the cache
    plan = eng.sched.schedule(st)
    assert plan.preempted_idx.tolist() == [1]  # the later arrival is evicted...
    assert plan.req_idx.tolist() == [0] and plan.num_new_tokens[0] > 0  # ...and the other progresses
    kv.check_invariants()


@pytest.mark.parametrize("mode", [m for m in sorted(PHASE_CONTROLLERS) if not PHASE_CONTROLLERS[m].is_stateless])
def test_a_changed_choice_is_repeated_unchanged(mode):
    """The phase contract coalesced runs rely on: when `choose` changes its answer (same prefill-work
    flag as the tick before, decoders running as in every run), the next plan's second call returns it
    again and changes nothing."""
    import copy

    from hypothesis import given, settings
    from hypothesis import strategies as st

    tick = st.tuples(st.integers(1, 8), st.booleans(), st.floats(1e-4, 0.2), st.integers(0, 4000), st.integers(0, 64))

    checked = []

    @settings(max_examples=60, deadline=None)
    @given(st.lists(tick, min_size=1, max_size=40))
    def check(ticks):
        ctl = PHASE_CONTROLLERS[mode](SchedulerConfig(prefill_mode=mode))
        now, prev = 0.0, None
        for num_dec, work, dur, pre_tokens, dec_tokens in ticks:
            first = ctl.choose(now, num_dec, work)
            if prev is not None and first != prev[0] and work == prev[1]:
                again = copy.deepcopy(ctl)
                assert again.choose(now, num_dec, work) == first
                assert vars(again) == vars(ctl)
                checked.append(1)
            prev = (first, work)
            ctl.observe(now + dur, dur, pre_tokens if first != 0 else 0, dec_tokens if num_dec else 0)
            now += dur

    check()
    assert checked  # the property was exercised, not vacuously true


@pytest.mark.parametrize("admission", ["watermark", "reserve"])
def test_admission_blocks_are_what_admission_allocates(admission):
    """`Scheduler.admission_blocks` (read by the batch-of-one path) is what `_admit` gives: the whole
    request under reserve, the first chunk's blocks (at least one) otherwise."""
    from sim_core.engine import Engine

    eng = Engine(trace_config([100, 40], [50, 7], [0.0, 0.0], scheduler__admission=admission, kv_cache__block_size=16))
    st, sched = eng.st, eng.sched
    st.admit_arrivals()
    expected = [-(-150 // 16), -(-47 // 16)] if admission == "reserve" else [-(-100 // 16), -(-40 // 16)]
    assert sched.admission_blocks(st, np.array([0, 1]), st.prompt[[0, 1]]).tolist() == expected
    # one request as Python ints (the admission test of one waiting request, each tick): the same blocks; a 0-token
    # chunk still takes one block
    assert [sched.admission_blocks(st, r, int(st.prompt[r])) for r in (0, 1)] == expected
    assert sched.admission_blocks(st, 1, 0) == sched.admission_blocks(st, np.array([1]), np.array([0]))[0]
    sched._admit(st, 10_000, 2)
    assert eng.kv.held[[0, 1]].tolist() == expected


def test_cap_trajectory_is_observe_tick_by_tick():
    from sim_core.engine import Engine

    for dyn in (True, False):
        eng = Engine(make_config("engine-article-dynamic-batch", scheduler__dynamic_batch={"enabled": dyn, "target_tick_ms": 50}))
        sched = eng.sched
        durations = np.array([0.06, 0.07, 0.02, 0.03, 0.08, 0.01, 0.01, 0.09])
        traj = sched.cap_trajectory(durations)
        caps = [sched.batch_cap]
        for d in durations.tolist():
            sched.observe(0.0, d, 0, 1)
            caps.append(sched.batch_cap)
        assert traj.tolist() == caps and (len(set(caps)) > 1) == dyn


@pytest.mark.parametrize("mode", sorted(PHASE_CONTROLLERS))
def test_decode_run_is_choose_then_observe_per_tick(mode):
    """A controller's `decode_run` (the fast path's all-decode stretches) leaves exactly the state that
    `choose(start, n > 0, False)` then `observe(end, duration, 0, tokens)` leave tick by tick, from any
    state the controller can reach (a random history of ticks first), and those ticks are decode ticks."""
    import copy

    from hypothesis import example, given, settings
    from hypothesis import strategies as st

    tick = st.tuples(st.integers(0, 8), st.booleans(), st.floats(1e-4, 0.2), st.integers(0, 4000), st.integers(0, 64))
    run_tick = st.tuples(st.floats(1e-4, 0.2), st.integers(1, 64))
    cfg = SchedulerConfig(prefill_mode=mode, time_slice={"prefill_slice_ms": 20, "decode_slice_ms": 15},
                          quota={"window_ms": 300})  # fmt: skip

    @settings(max_examples=80, deadline=None)
    @given(st.lists(tick, max_size=30), st.lists(run_tick, max_size=40))
    @example([], [(0.1, 4)] * 10)  # an empty window that the run fills and then slides
    @example([(4, True, 0.05, 100, 4)] * 3, [(0.1, 4)] * 10)
    def check(history, run):
        ctl = PHASE_CONTROLLERS[mode](cfg)
        now = 0.0
        for num_dec, work, dur, pre_tokens, dec_tokens in history:
            kind = ctl.choose(now, num_dec, work)
            ctl.observe(now + dur, dur, pre_tokens if kind != TickKind.DECODE else 0, dec_tokens if num_dec else 0)
            now += dur
        fast = copy.deepcopy(ctl)
        start = now
        for dur, tokens in run:
            assert ctl.choose(now, tokens, False) in (TickKind.DECODE, TickKind.DECODE_FIRST)
            ctl.observe(now + dur, dur, 0, tokens)
            now += dur
        fast.decode_run(start, [dur for dur, _ in run], [tokens for _, tokens in run])
        assert repr(vars(fast)) == repr(vars(ctl))  # (repr: floats compared bit for bit, -0.0 included)

    check()


@pytest.mark.parametrize("batching", ["continuous", "static", "exclusive"])
@given(num_running=hst.integers(0, 300), cap=hst.integers(1, 256), num_waiting=hst.integers(0, 3))
def test_join_cap_is_prefill_works_admission_test(batching, num_running, cap, num_waiting):
    """`Scheduler.join_cap` (read once per call by the scalar core) is prefill_work's can_admit: a free batch slot
    under the cap in force, and a static batch only when empty."""
    from sim_core.engine import Engine

    sched = Engine(make_config(scheduler__batching=batching, workload__num_requests=2)).sched
    sched.batch_cap = min(cap, sched.max_seqs)  # (as dynamic batch sizing may set it)
    can_admit = sched.prefill_work(num_running, 0, num_waiting, 0)[0]
    assert can_admit == (num_running < sched.batch_cap and (batching == "continuous" or num_running == 0))
    assert can_admit == (num_running < sched.join_cap())


@pytest.mark.parametrize("engine", ["vllm-v1", "article-time-slice", "article-quota", "article-smart-preemption", "exclusive"])
def test_kind_by_choice_is_tick_kind_where_offered(engine):
    """`Scheduler.kind_by_choice` (what the scalar core calls per tick) gives tick_kind's answer tick after tick,
    stateful controllers included; it is withheld where the batching rules may change the kind."""
    from sim_core.bench import engine_config
    from sim_core.engine import Engine

    cfg, _ = engine_config(engine)
    ref, fast = Engine(cfg).sched, Engine(cfg).sched
    if ref.is_static or ref.cfg.smart_preemption.enabled:
        assert fast.kind_by_choice is None
        return
    assert fast.kind_by_choice is not None
    rng = np.random.default_rng(3)
    now = 0.0
    for _ in range(400):
        num_dec, num_running, work = int(rng.integers(0, 4)), 4, bool(rng.integers(0, 2))
        kind = ref.tick_kind(None, now, num_dec, num_running, work, np.empty(0, dtype=np.int64))
        assert fast.kind_by_choice(now, num_dec, work) == kind
        dur = float(rng.uniform(0.005, 0.2))
        pre, dec = (128 if kind != TickKind.DECODE else 0), (num_dec if kind != TickKind.PREFILL else 0)
        ref.observe(now + dur, dur, pre, dec)  # (bound to the phase controller's observe without a dynamic cap)
        fast.observe(now + dur, dur, pre, dec)
        now += dur


def _nearly_full_pool(base: str, hold_blocks: int, tail_blocks: int, **over):
    """Request 0's prompt fills all but `hold_blocks` KV blocks (whole blocks, chunked); request 1, queued behind it at
    t = 0, needs `tail_blocks` for its prompt and fits in the budget request 0's last chunk leaves."""
    probe = trace_config([16, 16], [2, 2], base=base, **over)
    num_blocks = run_simulation(probe).memory.num_blocks
    budget = probe.scheduler.max_num_batched_tokens
    extra = 0
    while not 0 < (16 * (num_blocks - hold_blocks - extra)) % budget <= budget - 16 * tail_blocks:
        extra += 1  # (request 0's last chunk must leave room for request 1's prompt in that tick's budget)
    cfg = trace_config([16 * (num_blocks - hold_blocks - extra), 16 * tail_blocks], [2, 2], base=base, **over)
    assert run_simulation(cfg).memory.num_blocks == num_blocks
    return cfg, num_blocks, hold_blocks + extra


def test_vllm_v1_admits_into_the_last_free_blocks_without_a_watermark():
    # vLLM V1 keeps no admission watermark by default (KVCacheManager.allocate_slots: watermark_blocks = 0 unless the
    # opt-in watermark of PR #44594 is set; V0's BlockSpaceManager kept 1 %): a waiting request whose first chunk fits
    # in the free blocks is admitted even if that leaves fewer than 1 % free. The preset applied V0's 1 % watermark.
    cfg, num_blocks, free_after_0 = _nearly_full_pool("engine-vllm-v1", hold_blocks=8, tail_blocks=6,
                                                 kv_cache__gpu_memory_utilization=0.21)  # (522 blocks: 8k tokens)
    assert free_after_0 - 6 < 0.01 * num_blocks  # admitting request 1 leaves less than V0's watermark free
    req = run_simulation(cfg).requests
    # admitted in the tick of request 0's last prefill chunk, before request 0's first token
    assert req.first_scheduled_s[1] < req.first_token_s[0]
    # V0 (and the watermark knob) holds it back until request 0 has finished
    held = run_simulation(cfg.model_copy(update={"scheduler": cfg.scheduler.model_copy(update={"admission": "watermark"})})).requests
    assert held.first_scheduled_s[1] >= held.first_token_s[0]


# ---------------------------------------------------------------- SGLang's admission (new_token_ratio)
# The hand-built SGLang scenarios below (arrival times, pool sizes, the chunk and victim each asserts) were laid out on the
# sglang profile's CPU costs before session 70's refit to a minimum (2.5 ms a tick, 35 µs a sequence; now 2.0 and 40).
# They test the scheduling rules, not the calibration, so they keep the costs they were built on.
SGLANG_SCENARIO_COSTS = {"calibration__tick_overhead_ms": 2.5, "calibration__per_seq_overhead_us": 35.0}


def _sglang_config(prompts, outputs, arrivals, kv_tokens: int, coalesce: bool = True, **over):
    """The sglang preset replaying these requests with a KV pool of about `kv_tokens` tokens."""
    from sim_core.costmodel import CUDA_RESERVED_BYTES, GIB, kv_bytes_per_token_per_gpu, weight_bytes_per_gpu

    cfg = trace_config(prompts, outputs, arrivals, base="engine-sglang", kv_cache__block_size=16,
                       limits__coalesce_ticks=coalesce, **SGLANG_SCENARIO_COSTS | over)  # fmt: skip
    usable = cfg.hardware.memory_gib * GIB - CUDA_RESERVED_BYTES  # memory rule sglang: u x memory - weights
    util = (weight_bytes_per_gpu(cfg) + kv_tokens * kv_bytes_per_token_per_gpu(cfg)) / usable
    return cfg.model_copy(update={"kv_cache": cfg.kv_cache.model_copy(update={"gpu_memory_utilization": util})})


def _sglang_engine(prompts, outputs, arrivals, kv_tokens: int, coalesce: bool = True, **over):
    """An engine on the sglang preset replaying these requests with a KV pool of about `kv_tokens` tokens."""
    from sim_core.engine import Engine

    return Engine(_sglang_config(prompts, outputs, arrivals, kv_tokens, coalesce, **over))


def _run(eng):
    while eng.step():
        pass
    return eng.result()


def test_sglang_preset_admits_by_new_token_ratio():
    assert read_preset_data("engines", "sglang")["scheduler"]["admission"] == "new_token_ratio"


@pytest.mark.parametrize("coalesce", [True, False])
def test_a_prompt_that_fits_the_blocks_waits_while_its_output_and_the_running_reservation_do_not_fit(coalesce):
    """Request 0 (100 prompt / 2,000 output tokens) runs; request 1 (the same) arrives at 0.2 s with ~3,000 KV tokens
    in the pool: its prompt fits the free blocks (the 1 % watermark admits it at once), but 100 + 2,000 output does not
    fit beside request 0's ~1,900 remaining x 0.7 (SGLang's PrefillAdder): it waits. SGLang does not try again as
    request 0 writes and the ratio decays: the refusal (NO_TOKEN) sets running_batch.batch_is_full, which only a
    smaller running batch clears (update_running_batch: a request finished or was retracted), so request 1 is admitted
    when request 0 finishes (25.2 s; before review 29e: at 6.5 s, the first tick its test passed)."""
    res = {}
    for admission in ("watermark", "new_token_ratio"):
        eng = _sglang_engine([100, 100], [2000, 2000], [0.0, 0.2], 3000, coalesce, scheduler__admission=admission)
        res[admission] = _run(eng)
    wm, ntr = res["watermark"].requests, res["new_token_ratio"].requests
    assert wm.first_scheduled_s[1] == pytest.approx(0.2, abs=0.05)  # admitted on arrival
    assert ntr.first_scheduled_s[1] > 1.0  # waited for room in tokens
    # ... until request 0 finished (the batch shrank), though its test would have passed earlier
    assert ntr.first_scheduled_s[1] == ntr.finish_s[0]


@pytest.mark.parametrize("coalesce", [True, False])
def test_the_ratio_decays_per_decode_only_tick_and_resets_when_idle(coalesce):
    eng = _sglang_engine([10], [51], [0.0], 100_000, coalesce)
    sched = eng.sched
    ntr = eng.cfg.scheduler.new_token_ratio
    assert sched.new_token_ratio == ntr.init_new_token_ratio
    while not eng.st.is_done:
        eng.step()
    # one prefill tick (the first token), then 50 decode-only ticks: 50 decay steps
    assert sched._ratio_steps == 50
    assert sched.new_token_ratio == pytest.approx(ntr.init_new_token_ratio - 50 * ntr.decay_per_step)
    eng = _sglang_engine([10], [900], [0.0], 100_000, coalesce)
    _run(eng)
    assert eng.sched.new_token_ratio == pytest.approx(ntr.min_new_token_ratio)  # 899 steps > 600: the floor
    # a request arriving after an idle gap: the engine idled, the ratio started again at init
    eng = _sglang_engine([10, 10], [51, 5], [0.0, 50.0], 100_000, coalesce)
    _run(eng)
    assert eng.sched._ratio_steps == 4 and eng.sched._ratio_base == ntr.init_new_token_ratio  # request 1's 4 steps only


def test_a_retract_sets_the_ratio_from_the_decodes_left():
    """Two requests admitted at a small ratio outgrow a ~3,000-token pool: the pre-emption (SGLang's retract) sets
    the ratio to (decoded + 20 x left) / max_new_tokens of the decodes that stay, far above the decayed ratio.
    (Request 1 arrives after request 0's admission round: in the same round it would be refused, request 0's
    output promised unscaled, and wait for a smaller batch.)"""
    from sim_core.schedulers import rules

    eng = _sglang_engine([100, 100], [1500, 1500], [0.0, 0.05], 3000, False,
                         scheduler__new_token_ratio={"init_new_token_ratio": 0.1})  # fmt: skip
    st, sched = eng.st, eng.sched
    before = None
    while eng.step():
        if st.num_preemptions.sum():
            break
        before = sched.new_token_ratio
    assert st.num_preemptions.sum() == 1
    left = st.running[st.computed[st.running] >= st.prefill_target[st.running]]
    # (set when the tick was planned: each decode left has written one more token since)
    assert sched.new_token_ratio == rules.retract_ratio((st.emitted[left] - 1).tolist(), st.output[left].tolist())
    assert sched.new_token_ratio > 0.5 > before
    assert _run(eng).summary.num_finished == 2


def test_new_token_ratio_knobs_are_validated_with_their_range():
    from pydantic import ValidationError

    from sim_core.config import NewTokenRatioConfig

    for field, bad in (("init_new_token_ratio", 0.0), ("init_new_token_ratio", 1.5), ("min_new_token_ratio_factor", -0.1),
                       ("decay_steps", 0)):  # fmt: skip
        with pytest.raises(ValidationError, match=field):
            NewTokenRatioConfig(**{field: bad})
    with pytest.raises(ValidationError, match="admission"):
        SchedulerConfig(admission="sglang")


# A running prefill whose next chunk needs more KV blocks than are free (scheduler.chunk_short_of_blocks): vLLM (V1
# Scheduler.schedule's running loop, V0 _schedule_running) pre-empts the lowest-priority running request and retries,
# the chunk's own request when it is that one; SGLang (PrefillAdder.add_chunked_req) cuts the chunk to the memory left.
def _short_chunk(mode: str, **over):
    return trace_config(**over, base="engine-vllm-v1", kv_cache__memory_rule="vllm",
                        scheduler__max_num_batched_tokens=1024, scheduler__chunk_short_of_blocks=mode)


def _with_priority(mode: str):
    # request 1 (priority 0: served first) arrives with a long prompt while request 0 (priority 1) decodes; 319 blocks
    return _short_chunk(mode, prompts=[200, 5000], outputs=[3000, 10], arrivals=[0.0, 0.3], priorities=[1, 0],
                        scheduler__queue_order="priority", kv_cache__gpu_memory_utilization=0.205)


def _prefill_ticks(res):
    t = res.timeline
    return t.num_prefill_tokens[t.num_prefill_seqs > 0].tolist()


def test_chunk_short_of_blocks_preempts_the_lowest_priority_request_under_vllm():
    res = run_simulation(_with_priority("preempt"), check_invariants=True)
    assert res.memory.num_blocks == 319
    # request 1's last chunk (908 tokens) finds 48 free blocks: request 0 (the lowest priority) is pre-empted and the
    # chunk runs whole (request 0's decode leaves that tick)
    assert _prefill_ticks(res)[:6] == [200, 1023, 1023, 1023, 1023, 908]
    assert res.requests.num_preemptions.tolist() == [1, 0]
    assert res.summary.num_finished == 2
    # shrink (SGLang): the chunk is cut to 772 tokens, then request 1 waits with no block while request 0 decodes
    shrunk = run_simulation(_with_priority("shrink"), check_invariants=True)
    assert _prefill_ticks(shrunk)[:6] == [200, 1023, 1023, 1023, 1023, 772]
    assert res.requests.first_token_s[1] < shrunk.requests.first_token_s[1]


def _three_prompts(mode: str):
    # three 3,000-token prompts, FCFS; 400 blocks: request 2's chunk is the one short of blocks
    return _short_chunk(mode, prompts=[3000] * 3, outputs=[200] * 3, arrivals=[0.0, 0.01, 0.02],
                        kv_cache__gpu_memory_utilization=0.207)


def test_chunk_short_of_blocks_preempts_its_own_request_when_it_is_the_latest():
    pre = run_simulation(_three_prompts("preempt"), check_invariants=True)
    cut = run_simulation(_three_prompts("shrink"), check_invariants=True)
    assert pre.memory.num_blocks == cut.memory.num_blocks == 400
    a, b = pre.timeline, cut.timeline
    i = int(np.flatnonzero(a.num_prefill_tokens[: b.num_ticks] != b.num_prefill_tokens[: a.num_ticks])[0])
    # the first tick that differs: request 2 (the latest admitted) is pre-empted and not scheduled (the two decodes
    # run); shrink runs its chunk cut to the 15 free blocks (243 tokens)
    assert (a.num_preempted[i], a.num_prefill_tokens[i], a.num_decode_seqs[i]) == (1, 0, 2)
    assert (b.num_preempted[i], b.num_prefill_tokens[i]) == (0, 243)
    assert pre.requests.num_preemptions[:2].tolist() == [0, 0] and pre.requests.num_preemptions[2] >= 1
    assert pre.summary.num_finished == cut.summary.num_finished == 3


@pytest.mark.parametrize("engine", ["vllm-v0", "vllm-v0-swap", "vllm-v1", "sarathi-serve", "tensorrt-llm-max-utilization"])
def test_vllm_and_tensorrt_llm_presets_preempt_for_a_chunk_sglang_shrinks_it(engine):
    assert read_preset_data("engines", engine)["scheduler"]["chunk_short_of_blocks"] == "preempt"
    assert read_preset_data("engines", "sglang")["scheduler"]["chunk_short_of_blocks"] == "shrink"


@cases(25)
@given(hst.sampled_from(["preempt", "shrink"]), hst.sampled_from(["fcfs", "priority"]), hst.sampled_from(["recompute", "swap"]),
       hst.booleans(), hst.sampled_from(["greedy", "new_token_ratio"]), hst.sampled_from(["by_key", "append"]),
       hst.integers(0, 2**16))  # fmt: skip
def test_a_chunk_short_of_blocks_keeps_the_kv_invariants_every_tick(mode, order, preemption, cache, admission, requeue, seed):
    # six long prompts into a 400-block pool (about three of them): chunks run short of blocks in either mode (under
    # new_token_ratio with shrink, a chunk is cut to the token budget's room too)
    rng = np.random.default_rng(seed)
    n = 6
    cfg = _short_chunk(mode, prompts=rng.integers(500, 2500, n).tolist(), outputs=rng.integers(1, 300, n).tolist(),
                       arrivals=np.sort(rng.uniform(0, 1, n)).tolist(), priorities=rng.integers(0, 3, n).tolist(),
                       kv_cache__gpu_memory_utilization=0.207, kv_cache__enable_prefix_caching=cache,
                       scheduler__queue_order=order, scheduler__preemption=preemption, scheduler__admission=admission,
                       scheduler__preemption_requeue=requeue)  # fmt: skip
    res = run_simulation(cfg, check_invariants=True)
    assert res.summary.num_finished == n


def _forty_decodes_and_a_long_prompt(**over):
    # 40 requests (31-token prompts, 300 output tokens) decode in a 1,875-block pool (30,000 tokens); request 40 (a
    # 20,297-token prompt, 1 output token) arrives at 0.3 s and just passes SGLang's token test (20,298 < 20,299 tokens:
    # the free tokens less the decodes' 300 - written x 0.685); its chunks of 8,192 then run while the decodes write
    return _sglang_config([31] * 40 + [20297], [300] * 40 + [1], [0.0] * 40 + [0.3], 30000, model__max_model_len=65536, **over)


def test_sglang_cuts_a_continuing_chunk_to_the_token_budgets_room():
    # SGLang PrefillAdder.add_chunked_req: `_rem_tokens = min(rem_chunk_tokens, int(rem_total_tokens))`, the free KV
    # tokens less the running requests' reservation, and the chunk is truncated to it. Request 40's last chunk (3,993
    # tokens, after two of 8,152: the 40 decodes take 40 of each mixed tick's 8,192, `PrefillAdder`'s rem_chunk_tokens
    # less the running batch, since session 56) has free blocks for it but a smaller room beside the decodes' tokens
    # still to write x the ratio: it is cut to 3,409, and the rest runs a few tokens a tick, as the decodes write (each
    # token frees 1 - ratio of room; blocks are taken 16 tokens at a time). Before: cut only to the free blocks, so it
    # ran whole (3,913 cut to 3,329 while the decodes ran outside the budget)
    res = _run_three_ways(_forty_decodes_and_a_long_prompt())
    assert res.memory.num_blocks == 1875
    chunks = _prefill_ticks(res)
    assert chunks[:8] == [1240, 8152, 8152, 3409, 13, 40, 19, 31]  # (1,240: the 40 prompts)
    assert sum(chunks[3:]) == 20297 - 2 * 8152 and res.summary.num_preemptions == 0
    assert res.requests.first_token_s[40] == pytest.approx(4.317, abs=1e-3)
    # only SGLang's admission reserves for the running requests: under another, shrink cuts to the free blocks alone
    greedy = _run_three_ways(_forty_decodes_and_a_long_prompt(scheduler__admission="greedy"))
    assert _prefill_ticks(greedy) == [1240, 8152, 8152, 3993]
    assert greedy.requests.first_token_s[40] == pytest.approx(4.100, abs=1e-3)


def test_a_chunk_is_cut_to_the_int_of_a_positive_room_and_runs_whole_otherwise():
    from sim_core.schedulers import rules

    assert rules.cut_to_room(3913, 3329.8) == 3329  # (SGLang: int(rem_total_tokens))
    assert rules.cut_to_room(3913, 5000.0) == 3913
    assert rules.cut_to_room(3913, 0.9) == rules.cut_to_room(3913, -250.0) == 3913  # (`if _rem_tokens <= 0`: the whole chunk)
    assert rules.rem_total_tokens(691, 16, 7726.2) == pytest.approx(3329.8)


def test_a_chunk_that_preempts_its_only_request_plans_the_next_step_at_once():
    # (found by hypothesis on a deployment, paused vs unpaused runs: test_disagg_fastpath) Request 0, the only one
    # running, is mid-prefill; request 1 (handed off, as a prefill instance's, or any request not running) holds blocks, so
    # request 0's next chunk is short of them and it pre-empts itself. vLLM V1 schedules nothing in that step (its
    # running loop breaks, and no waiting request is admitted after a pre-emption) and runs no forward pass; its busy
    # loop schedules again at once, and the request is admitted again there (its first chunk fits the blocks it freed).
    # Here: one plan at the same instant (the plan was empty, and the engine idled to its next input: to a horizon that
    # depends on where a deployment's loop stepped it, so paused and unpaused runs differed)
    from sim_core.engine import Engine
    from sim_core.types import Status

    eng = Engine(_short_chunk("preempt", prompts=[3000, 3000], outputs=[5, 5], kv_cache__block_size=16))
    st, kv = eng.st, eng.kv
    st.admit_arrivals()
    st.waiting_keys = st.waiting_keys[:0]
    st.running = np.array([0])
    st.status[0], st.status[1] = Status.RUNNING, Status.FINISHED
    st.computed[0] = 1024
    st.prefill_start_s[0] = 0.0
    kv.held[0], kv.held[1] = 64, 40  # request 0's context; request 1's KV, held
    kv.num_blocks, kv.num_free = 134, 30  # request 0's next 1,024 tokens need 64 more blocks
    plan = eng.sched.schedule(st)
    assert plan.preempted_idx.tolist() == [0]  # it pre-empts itself...
    assert plan.admitted_idx.tolist() == plan.req_idx.tolist() == [0]  # ...and is admitted again at once
    assert plan.num_new_tokens.tolist() == [1024] and st.computed[0] == 0 and kv.held[0] == 64
    kv.check_invariants()


def test_fcfs_preempts_the_request_admitted_last_a_readmitted_victim_before_a_later_arrival():
    # (fix 29g) vLLM V1 Scheduler.schedule, allocate_slots None under FCFS: `self.running.pop()`, the request admitted
    # last (a re-admitted victim joins the end of self.running); before the fix, the latest arrival (largest queue key).
    # On one engine FCFS admits in arrival order, so a decode instance shows it: hand-offs join as their KV arrives.
    # Requests 0 and 1 join (10 blocks each of a 36-block pool) and grow until request 1 is pre-empted; request 2 (the
    # latest arrival) joins while it waits; request 0 finishes, request 1 is admitted again (running [2, 1]) and is
    # the next victim (before: request 2)
    from sim_core.engine import Engine

    eng = Engine(trace_config([160] * 3, [140, 400, 400], base="engine-vllm-v1", kv_cache__block_size=16,
                              limits__coalesce_ticks=False))  # fmt: skip
    st = _decode_instance(eng)
    while st.num_preemptions.sum() == 1:
        assert eng.step()
    assert st.num_preemptions.tolist() == [0, 2, 0] and st.running.tolist() == [2]
    while eng.step():
        pass
    assert st.num_finished == 3


def test_shortest_prompt_first_pops_the_request_admitted_last_as_fcfs_does():
    # (fix 29g) vLLM has no shortest-prompt-first policy; every policy but priority pops self.running. Here the order
    # only sorts the waiting queue: request 0 (2,000-token prompt) runs, request 1 (200 tokens) is admitted after it,
    # and when the 319 blocks run out request 1 is the victim. Before: the largest queue key (the longer prompt),
    # request 0, pre-empted 26 times (each re-admission recomputes its 2,000-token prompt and output)
    cfg = trace_config([2000, 200], [1500, 1500], arrivals=[0.0, 0.05], base="engine-vllm-v1", kv_cache__memory_rule="vllm",
                       scheduler__queue_order="shortest_prompt_first", kv_cache__gpu_memory_utilization=0.205)
    res = run_simulation(cfg, check_invariants=True)
    assert res.memory.num_blocks == 319
    assert res.requests.num_preemptions.tolist() == [0, 1] and res.summary.num_finished == 2


def test_the_readme_quotes_sglangs_admission_on_the_kv_pressure_example_as_it_runs():
    # (review 29e: the figures changed when a refusal started to hold admission until the batch shrinks; nothing
    # recomputed them) The README's KV-pressure example on the sglang preset, with and without the prefix cache; with
    # vLLM V0's watermark, under SGLang's victims (the preset's since fix 30b, which changed those figures) and vLLM's
    from sim_core import load_preset
    from sim_core.sweep import with_value

    cfg = load_preset("chat-h100-llama8b-sglang")
    for path, value in (("workload.num_requests", 150), ("workload.arrival.rate_per_s", 3), ("kv_cache.gpu_memory_utilization", 0.22),
                        ("workload.output_tokens", {"dist": "lognormal", "mean": 600, "min": 16, "max": 2048, "sigma": 0.6})):  # fmt: skip
        cfg = with_value(cfg, path, value)
    cached = lambda c: with_value(c, "kv_cache.enable_prefix_caching", True)  # noqa: E731
    mark = with_value(cfg, "scheduler.admission", "watermark")
    vllm = with_value(mark, "scheduler.preemption_victim", "last_admitted")
    s, c, w, wc, v, vc = (run_simulation(x).summary for x in (cfg, cached(cfg), mark, cached(mark), vllm, cached(vllm)))
    assert s.num_finished == c.num_finished == w.num_finished == v.num_finished == 150 and s.num_preemptions > 0
    assert w.num_preemptions != v.num_preemptions  # (the victim rule matters here)
    key, key_mark = (with_value(x, "scheduler.preemption_requeue", "by_key") for x in (cfg, mark))  # (fix 30d)
    k, kc, km, kmc = (run_simulation(x).summary for x in (key, cached(key), key_mark, cached(key_mark)))
    assert (k.num_preemptions, km.num_recomputed_tokens) != (s.num_preemptions, w.num_recomputed_tokens)
    readme = documents.prose("engines")  # (SGLang's admission, in full)
    assert (f"{s.num_preemptions} pre-emptions ({w.num_preemptions} with the watermark), {s.num_recomputed_tokens:,} tokens recomputed "
            f"({w.num_recomputed_tokens:,}), {s.output_tokens_per_s:,.0f} output tokens/s ({w.output_tokens_per_s:,.0f}), TTFT p50 / p99 "
            f"{s.ttft_p50_s:.1f} / {s.ttft_p99_s:.1f} s ({w.ttft_p50_s:.1f} / {w.ttft_p99_s:.1f} s: the queue waits for token room instead "
            f"of being admitted and pre-empted), TPOT p50 {s.tpot_p50_s * 1e3:.1f} ms ({w.tpot_p50_s * 1e3:.1f}); with the prefix cache on, "
            f"{c.num_preemptions} pre-emptions ({wc.num_preemptions}), {c.num_recomputed_tokens:,} recomputed ({wc.num_recomputed_tokens:,}), "
            f"{c.output_tokens_per_s:,.0f} tokens/s ({wc.output_tokens_per_s:,.0f}). With the watermark and vLLM's victims "
            f"(`preemption_victim = last_admitted`, the preset's before fix 30b): {v.num_preemptions} pre-emptions, "
            f"{v.num_recomputed_tokens:,} recomputed, {v.output_tokens_per_s:,.0f} tokens/s, TTFT {v.ttft_p50_s:.1f} / {v.ttft_p99_s:.1f} s, "
            f"TPOT {v.tpot_p50_s * 1e3:.1f} ms; {vc.num_preemptions}, {vc.num_recomputed_tokens:,}, {vc.output_tokens_per_s:,.0f} with the "
            f"prefix cache. With vLLM's requeue (`preemption_requeue = by_key`, the preset's before fix 30d): {k.num_preemptions} "
            f"pre-emption{'s' * (k.num_preemptions != 1)} ({km.num_preemptions} with the watermark), {k.num_recomputed_tokens:,} recomputed ({km.num_recomputed_tokens:,}), "
            f"{k.output_tokens_per_s:,.0f} tokens/s ({km.output_tokens_per_s:,.0f}), TTFT {k.ttft_p50_s:.1f} / {k.ttft_p99_s:.1f} s "
            f"({km.ttft_p50_s:.1f} / {km.ttft_p99_s:.1f} s); {kc.num_preemptions} ({kmc.num_preemptions}), {kc.num_recomputed_tokens:,} "
            f"({kmc.num_recomputed_tokens:,}), {kc.output_tokens_per_s:,.0f} ({kmc.output_tokens_per_s:,.0f}) with the prefix cache.") in readme



def test_the_readme_quotes_sglangs_admission_offline_as_it_runs():
    # The paragraph after the KV-pressure example: offline-batch-h200-llama8b on the sglang engine with a small pool,
    # under SGLang's token budget, vLLM V0's watermark, vLLM's victims and 20 steps of headroom (quoted, unpinned until
    # session 37; the sglang rules changed in fixes 30b and 30d and review 29e)
    from sim_core.presets import config_from_dict
    from sim_core.sweep import with_value

    scenario = read_preset_data("scenarios", "offline-batch-h200-llama8b")  # (its hardware, model and workload, as quoted)
    data = {key: scenario[key] for key in ("name", "hardware", "model", "workload")} | {"engine": "sglang"}
    full = config_from_dict(data)
    cfg = with_value(full, "kv_cache.gpu_memory_utilization", 0.16)
    mark = with_value(cfg, "scheduler.admission", "watermark")
    steps = with_value(mark, "scheduler.preemption_headroom_steps", 20)
    s, w, v, f, h = (run_simulation(x).summary for x in (cfg, mark, with_value(mark, "scheduler.preemption_victim", "last_admitted"), full, steps))
    text = documents.prose("engines")
    assert (f"with `gpu_memory_utilization` 0.16 ({s.kv_capacity_tokens:,} tokens): {s.num_preemptions} pre-emptions "
            f"({w.num_preemptions} with the watermark; {v.num_preemptions} with it and vLLM's victims), {s.output_tokens_per_s:,.0f} "
            f"output tokens/s ({w.output_tokens_per_s:,.0f}; {v.output_tokens_per_s:,.0f}; ") in text  # fmt: skip
    assert (f"makespan {s.makespan_s:.1f} s ({w.makespan_s:.1f}; {v.makespan_s:.1f}); at SGLang's 0.88 nothing changes "
            f"({f.output_tokens_per_s:,.0f} tokens/s). At 0.16 the watermark with 20 steps of headroom pre-empts {h.num_preemptions} "
            f"({h.num_recomputed_tokens:,} tokens recomputed, {h.output_tokens_per_s:,.0f} tokens/s)") in text  # fmt: skip
    assert f.num_preemptions == 0 and full.kv_cache.gpu_memory_utilization == 0.88

# Which running requests a pre-emption takes, per engine (scheduler.preemption_victim, one rule:
# Scheduler._victim_order), and how many (scheduler.preemption_headroom_steps). The scalar core hands every
# pre-emption back to the scheduler, so the three executors must give the same victims.
def _victims(res) -> list[int]:
    from sim_core.types import Event

    return res.events.req[res.events.kind == Event.PREEMPTED].tolist()


def _run_three_ways(cfg):
    """The run with the scalar core (the default), with the general scheduler only (coalesced runs, no scalar core)
    and tick by tick: every output equal; returns the first."""
    from sim_core import fastpath
    from tests.sim_core.test_equivalence import assert_same_result

    with pytest.MonkeyPatch.context() as m:
        advance, ran = fastpath.advance, []
        m.setattr(fastpath, "advance", lambda engine: ran.append(1) or advance(engine))
        fast = run_simulation(cfg, check_invariants=True)
    assert ran  # (the scalar core ran)
    with pytest.MonkeyPatch.context() as m:
        m.setattr(fastpath, "eligible", lambda engine: False)
        general = run_simulation(cfg)
    by_tick = run_simulation(cfg.model_copy(update={"limits": cfg.limits.model_copy(update={"coalesce_ticks": False})}))
    assert_same_result(fast, general)
    assert_same_result(fast, by_tick)
    return fast


def _sglang_retract(rule: str):
    # the sglang preset, a 401-block pool: requests 3 (1,297-token prompt) and 4 (197) join in one tick; at 12.2 s the
    # four decodes (written 919, 828, 250, 250) need a block each and none is free
    return trace_config([1354, 1310, 1247, 1297, 197], [1254, 1424, 539, 420, 300], arrivals=[0.01, 1.23, 1.82, 1.89, 1.97],
                        base="engine-sglang", kv_cache__block_size=16, kv_cache__gpu_memory_utilization=0.198,
                        scheduler__preemption_victim=rule, **SGLANG_SCENARIO_COSTS)  # fmt: skip


def test_sglang_retracts_the_fewest_tokens_written_longest_prompt_first_where_vllm_pops_the_last_admitted():
    # SGLang ScheduleBatch.retract_decode: sort by (len(output_ids), -len(origin_input_ids)) descending, pop the end:
    # of requests 3 and 4 (250 tokens written each) the longer prompt, request 3 (97 blocks), and that is enough.
    # vLLM's rule (the preset's before this fix) pops request 4, the last admitted, whose 28 blocks run out again
    # two seconds later: then request 3 goes too
    sglang, vllm = _run_three_ways(_sglang_retract("fewest_written")), _run_three_ways(_sglang_retract("last_admitted"))
    assert sglang.memory.num_blocks == 401
    assert _victims(sglang) == [3] and _victims(vllm) == [4, 3]
    assert (sglang.summary.num_recomputed_tokens, vllm.summary.num_recomputed_tokens) == (1546, 2142)
    assert sglang.summary.num_finished == vllm.summary.num_finished == 5
    assert read_preset_data("engines", "sglang")["scheduler"]["preemption_victim"] == "fewest_written"


def test_sglang_keeps_a_retracted_requests_written_tokens_so_it_is_not_the_next_victim():
    # Request 1 is retracted, then admitted again with its 2 written tokens kept (SGLang: reset_for_retract keeps
    # output_ids); request 2 joins later, writes less, and is the next victim. vLLM pops the re-admitted request 1.
    from sim_core.engine import Engine

    def second_victim(rule: str) -> tuple[int, list[int]]:
        eng = Engine(trace_config([160] * 3, [140, 400, 400], base="engine-vllm-v1", kv_cache__block_size=16,
                                  limits__coalesce_ticks=False, scheduler__preemption_victim=rule))  # fmt: skip
        st = _decode_instance(eng)
        while st.num_preemptions.sum() == 1:
            assert eng.step()
        victim = int(np.flatnonzero(st.num_preemptions - np.array([0, 1, 0]))[0])
        while eng.step():
            pass
        assert st.num_finished == 3
        return victim, st.num_preemptions.tolist()

    assert second_victim("last_admitted") == (1, [0, 2, 0])
    assert second_victim("fewest_written") == (2, [0, 1, 1])
    assert second_victim("latest_arrival") == (2, [0, 1, 1])


def _decode_instance(eng):
    """`eng` as a decode instance (36 blocks): requests 0 and 1 join with 10 blocks each, grow until request 1 is
    pre-empted; request 2 (the latest arrival) joins while it waits; stepped until request 1 runs again, after
    request 0 finished (running [2, 1]: hand-offs joined out of arrival order)."""
    from sim_core.types import Status

    eng.start_empty()
    eng.take_arrivals_externally()
    for output in (140, 400, 400):
        eng.add_request(0.0, 160, output, 0, -1)
    st, kv = eng.st, eng.kv
    kv.num_blocks = kv.num_free = 36
    eng.reserve(np.array([0, 1]), np.array([10, 10]))
    eng.inject_prefilled(np.array([0, 1]), 0.0, np.array([0.0, 0.0]))
    # The set-up steps tick by tick on every executor: it injects request 2 at the first pre-emption's instant, and a
    # scalar core's run goes on past a pre-emption (`fastpath._preempt_in_run`); the executor decides again after it.
    eng._fast = False
    while st.num_preemptions[1] == 0:
        assert eng.step()
    eng._fast = None
    assert st.running.tolist() == [0] and st.num_preemptions.tolist() == [0, 1, 0]
    eng.reserve(2, 10)
    eng.inject_prefilled(2, st.now_s, st.now_s)
    # (the scalar core re-admits a recompute victim and pre-empts too: its step may run on past that point, to the end)
    while st.status[1] != Status.RUNNING:
        if not eng.step():
            assert eng._fast
            return st
    if not eng._fast:
        assert st.running.tolist() == [2, 1] and st.status[0] == Status.FINISHED
    return st


def _trt_out_of_order(rule: str):
    # shortest_prompt_first admits requests 2, 1, 0 (prompts 4,000, 6,000, 8,000, all at t = 0) into 1,641 blocks
    return trace_config([8000, 6000, 4000], [2800] * 3, base="engine-tensorrt-llm-max-utilization", kv_cache__block_size=16,
                        kv_cache__gpu_memory_utilization=0.05, scheduler__queue_order="shortest_prompt_first",
                        scheduler__preemption_victim=rule)  # fmt: skip


def test_tensorrt_llm_pauses_the_latest_arrival_where_vllm_pops_the_last_admitted():
    # TensorRT-LLM MaxUtilizationScheduler pauses the last started request of its active list, which keeps arrival
    # order: request 2 here, admitted first; vLLM's rule (the preset's before this fix) pops request 0, admitted last
    trt, vllm = _run_three_ways(_trt_out_of_order("latest_arrival")), _run_three_ways(_trt_out_of_order("last_admitted"))
    assert trt.memory.num_blocks == 1641
    assert _victims(trt) == [2, 2, 2, 2] and _victims(vllm) == [0, 0]
    assert (trt.summary.num_recomputed_tokens, vllm.summary.num_recomputed_tokens) == (26654, 20936)
    assert trt.summary.num_finished == vllm.summary.num_finished == 3
    for engine in ("tensorrt-llm-max-utilization", "tensorrt-llm-no-evict", "tensorrt-llm-pytorch"):
        assert read_preset_data("engines", engine)["scheduler"]["preemption_victim"] == "latest_arrival"


def test_a_decode_instance_under_tensorrt_llm_pauses_the_hand_off_that_reached_it_last(monkeypatch):
    # (the fix-29g setup) running [2, 1]: request 1 was re-admitted after request 2 joined. TensorRT-LLM pauses
    # request 2, the last of its active list (a paused request keeps its place); vLLM pops request 1. Stepped with
    # the scalar core, with the general scheduler only and tick by tick: the same victims at the same instants
    from sim_core import fastpath
    from sim_core.engine import Engine
    from sim_core.types import Event

    eligible, fast = fastpath.eligible, [True]
    monkeypatch.setattr(fastpath, "eligible", lambda engine: fast[0] and eligible(engine))  # (asked at the first step)
    for rule, victim in (("latest_arrival", 2), ("last_admitted", 1)):
        runs = []
        for coalesce, fast[0] in ((True, True), (True, False), (False, False)):
            eng = Engine(trace_config([160] * 3, [140, 400, 400], base="engine-tensorrt-llm-max-utilization",
                                      kv_cache__block_size=16, limits__coalesce_ticks=coalesce, scheduler__preemption_victim=rule))  # fmt: skip
            st = _decode_instance(eng)
            while st.num_preemptions.sum() == 1 and eng.step():
                pass
            assert st.num_preemptions[victim] == 1 + (victim == 1)
            while eng.step():
                pass
            res = eng.result()
            runs.append((res.events.req[res.events.kind == Event.PREEMPTED].tolist(),
                         res.events.time_s[res.events.kind == Event.PREEMPTED].tolist(), res.requests.finish_s.tolist()))  # fmt: skip
        assert runs[0] == runs[1] == runs[2] and runs[0][0] == [1, victim]


def _headroom(steps: int):
    # 12 requests of 16 + 300 tokens at t = 0 in 136 blocks: all decode together and run out at once
    return trace_config([16] * 12, [300] * 12, base="engine-vllm-v1", kv_cache__block_size=16,
                        kv_cache__gpu_memory_utilization=0.19855, scheduler__preemption_victim="fewest_written",
                        scheduler__preemption_headroom_steps=steps)  # fmt: skip


def test_sglang_before_pr_9989_retracts_until_twenty_decode_steps_fit():
    # SGLang <= 0.5.1 retract_decode: `while available_size() < retract_decode_steps x requests left or first_iter`;
    # since PR #9989 (and vLLM) only the step's own blocks. Ties (same tokens written, same prompt): the later in the
    # batch first
    from sim_core.types import Event

    def first_retract(res) -> list[int]:
        ev = res.events
        t = ev.time_s[ev.kind == Event.PREEMPTED]
        return ev.req[(ev.kind == Event.PREEMPTED) & (ev.time_s == t[0])].tolist()

    one, twenty = _run_three_ways(_headroom(1)), _run_three_ways(_headroom(20))
    assert one.memory.num_blocks == 136
    assert first_retract(one) == [11] and first_retract(twenty) == [10, 11]
    assert (one.summary.num_preemptions, twenty.summary.num_preemptions) == (6, 8)
    assert one.summary.num_finished == twenty.summary.num_finished == 12
    assert "preemption_headroom_steps" not in read_preset_data("engines", "sglang")["scheduler"]  # today's SGLang: 1


# Where a retracted request waits (scheduler.preemption_requeue): vLLM V1 prepends a pre-empted request to its waiting
# queue (`self.waiting.prepend_request`; the priority policy's heap puts it back by (priority, arrival)); SGLang
# appends it (`Scheduler._extend_requests_to_queue`: `waiting_queue.extend(retracted_reqs)`), and its default
# policy, fcfs, does not sort the queue again (`SchedulePolicy.calc_priority` returns at once).
def _sglang_requeue(where: str, coalesce: bool = True):
    # `_sglang_retract`'s requests, and requests 5 and 6 (300-token prompts) at 5 and 6 s, refused by the token test
    # (request 4's admission filled the pool's tokens): they wait when the retract at 12.2 s takes request 3
    return trace_config([1354, 1310, 1247, 1297, 197, 300, 300], [1254, 1424, 539, 420, 300, 200, 200],
                        arrivals=[0.01, 1.23, 1.82, 1.89, 1.97, 5.0, 6.0], base="engine-sglang", kv_cache__block_size=16,
                        kv_cache__gpu_memory_utilization=0.198, scheduler__preemption_requeue=where,
                        limits__coalesce_ticks=coalesce, **SGLANG_SCENARIO_COSTS)  # fmt: skip


def _scheduled_from(res, t_s: float) -> list[int]:
    from sim_core.types import Event

    ev = res.events
    return ev.req[(ev.kind == Event.SCHEDULED) & (ev.time_s >= t_s)].tolist()


@pytest.mark.parametrize("coalesce", [True, False])
def test_sglang_appends_a_retracted_request_behind_the_waiting_ones_where_vllm_puts_it_back_by_its_key(coalesce):
    from sim_core.engine import Engine

    queues = {}
    for where in ("by_key", "append"):
        eng = Engine(_sglang_requeue(where, coalesce))
        st, preempt, seen = eng.st, eng.sched._preempt, []

        def preempt_and_look(state, ids, plan, queues=None):  # the queue as the requeue leaves it, on whichever executor
            # calls it (the scalar core's run goes on past it with its queue as a list, `fastpath._preempt_in_run`)
            preempt(state, ids, plan, queues)
            keys = state.waiting_keys if queues is None else np.array(queues[0][queues[1] :], dtype=np.int64)
            seen.append((np.asarray(ids).tolist(), state.key_to_id(keys).tolist()))

        eng.sched._preempt = preempt_and_look
        while not seen:
            assert eng.step()
        victims, queues[where] = seen[0]
        assert victims == [3] and st.num_preemptions.tolist() == [0, 0, 0, 1, 0, 0, 0]
    assert queues == {"by_key": [3, 5, 6], "append": [5, 6, 3]}
    assert read_preset_data("engines", "sglang")["scheduler"]["preemption_requeue"] == "append"


def test_an_appended_victim_lets_the_requests_behind_it_in_first_on_every_executor():
    # By key, request 3 (1,297-token prompt, 170 tokens left to write) heads the queue: the token test refuses it until
    # 16.5 s, and requests 5 and 6 wait behind it (no skipping); appended, they are admitted at once (12.2 and 12.9 s)
    vllm, sglang = _run_three_ways(_sglang_requeue("by_key")), _run_three_ways(_sglang_requeue("append"))
    assert _victims(vllm) == _victims(sglang) == [3]
    assert _scheduled_from(vllm, 12.2) == [3, 5, 6] and _scheduled_from(sglang, 12.2) == [5, 6, 3]
    ev = sglang.events
    assert np.round(ev.time_s[(ev.kind == 0) & (ev.time_s >= 12.2)], 2).tolist() == [12.22, 12.87, 16.57]
    assert vllm.requests.first_scheduled_s[5] == pytest.approx(16.52, abs=0.01)
    assert vllm.summary.num_finished == sglang.summary.num_finished == 7


def test_an_appended_victim_waits_at_the_end_of_its_class_ahead_of_later_arrivals():
    # requeue append with priority order: each request enters at the end of its priority's requests (an arrival, whose
    # id follows every waiting one, where its key puts it); by key, the victim by its key
    from sim_core.state import SimState
    from sim_core.workload import Workload

    R = 8
    wl = Workload(arrival_s=np.zeros(R), prompt_tokens=np.full(R, 10), output_tokens=np.full(R, 5),
                  priority=np.array([1, 0, 1, 0, 1, 1, 0, 1]), class_idx=np.full(R, -1), num_samples=1,
                  closed_loop_think_s=None)  # fmt: skip
    for requeue, want in (("by_key", [1, 3, 6, 0, 2, 4, 5, 7]), ("append", [1, 3, 6, 2, 4, 5, 0, 7])):
        st = SimState(wl, "priority", requeue)
        st.push_waiting(np.array([1, 2, 4, 5]))  # arrivals
        st.push_waiting(np.array([3, 0]))  # victims, in the order they were pre-empted
        st.push_waiting(np.array([6, 7]))  # later arrivals
        assert st.key_to_id(st.waiting_keys).tolist() == want, requeue
    st = SimState(wl, "fcfs", "append")
    st.push_waiting(np.array([4, 5, 6]))
    st.push_waiting(np.array([3, 1]))
    st.push_waiting(np.array([7]))
    assert st.key_to_id(st.waiting_keys).tolist() == [4, 5, 6, 3, 1, 7]


@cases(20)
@given(hst.sampled_from(["sglang", "tensorrt-llm-max-utilization", "vllm-v1"]),
       hst.sampled_from(["last_admitted", "fewest_written", "latest_arrival"]), hst.sampled_from([1, 1, 20]),
       hst.sampled_from(["fcfs", "priority", "shortest_prompt_first"]), hst.sampled_from(["recompute", "swap"]), hst.booleans(),
       hst.booleans(), hst.sampled_from(["by_key", "append"]), hst.integers(0, 2**16))  # fmt: skip
def test_every_victim_rule_gives_the_same_run_on_every_executor(engine, rule, steps, order, preemption, cache, greedy, requeue,
                                                                seed):  # fmt: skip
    # a few long requests in a pool of 136-1,641 blocks (the longest fits it): decodes and chunks run short, requests
    # are pre-empted (or swapped, to a host space of a few requests), re-admitted (from where preemption_requeue puts
    # them) and pre-empted again (greedy admission: SGLang's token budget keeps most of these runs from retracting)
    rng = np.random.default_rng(seed)
    n = int(rng.integers(3, 9))
    util = {"sglang": 0.198, "tensorrt-llm-max-utilization": 0.05}.get(engine, 0.2005)
    scale = 8 if engine.startswith("tensorrt") else 1  # (its smallest pool holds 1,641 blocks)
    cfg = trace_config((rng.integers(16, 1000, n) * scale).tolist(), (rng.integers(1, 1000, n) * scale).tolist(),
                       arrivals=np.sort(np.round(rng.uniform(0, 2, n), 2)).tolist(), priorities=rng.integers(0, 3, n).tolist(),
                       base="engine-" + engine, kv_cache__block_size=16, kv_cache__gpu_memory_utilization=util,
                       kv_cache__enable_prefix_caching=cache, kv_cache__swap_space_gb=0.2 * scale, scheduler__queue_order=order,
                       scheduler__preemption=preemption, scheduler__preemption_victim=rule,
                       scheduler__preemption_headroom_steps=steps, scheduler__preemption_requeue=requeue,
                       **({"scheduler__admission": "greedy"} if greedy else {}))  # fmt: skip
    res = _run_three_ways(cfg)
    assert res.summary.num_finished == n


def test_a_bad_victim_rule_or_headroom_is_a_message_naming_the_field_in_links_uploads_and_set(capsys, tmp_path):
    import json

    from app.state import config_from_query
    from sim_core.cli import main
    from sim_core.presets import load_preset

    _, _, warning = config_from_query({"scheduler.preemption_victim": "oldest"})
    assert "scheduler.preemption_victim = 'oldest'" in warning
    assert all(v in warning for v in ("last_admitted", "fewest_written", "latest_arrival"))
    upload = load_preset("chat-h100-llama8b").model_dump(mode="json")
    upload["scheduler"]["preemption_headroom_steps"] = 0
    (tmp_path / "c.json").write_text(json.dumps(upload))
    assert main(["run", str(tmp_path / "c.json")]) == 2
    err = capsys.readouterr().err
    assert "scheduler.preemption_headroom_steps = 0" in err and ">= 1" in err and "<= 4096" in err and "Traceback" not in err
    assert main(["run", "chat-h100-llama8b", "--set", "scheduler.preemption_victim=random"]) == 2
    err = capsys.readouterr().err
    assert "scheduler.preemption_victim = 'random'" in err and "fewest_written" in err and "Traceback" not in err
    # a config from before the fields (a link, a file) gets vLLM's rule
    old = load_preset("chat-h100-llama8b-sglang").model_dump(mode="json")
    del old["scheduler"]["preemption_victim"], old["scheduler"]["preemption_headroom_steps"]
    from sim_core.presets import config_from_dict

    assert config_from_dict(old).scheduler.preemption_victim == "last_admitted"


def test_a_bad_requeue_is_a_message_naming_the_field_value_and_choices_in_links_uploads_and_set(capsys, tmp_path):
    import json

    from app.state import config_from_query
    from sim_core.cli import main
    from sim_core.presets import config_from_dict, load_preset

    _, _, warning = config_from_query({"scheduler.preemption_requeue": "front"})
    assert "scheduler.preemption_requeue = 'front'" in warning and "by_key" in warning and "append" in warning
    upload = load_preset("chat-h100-llama8b").model_dump(mode="json")
    upload["scheduler"]["preemption_requeue"] = "first"
    (tmp_path / "c.json").write_text(json.dumps(upload))
    assert main(["run", str(tmp_path / "c.json")]) == 2
    err = capsys.readouterr().err
    assert "scheduler.preemption_requeue = 'first'" in err and "'by_key', 'append'" in err and "Traceback" not in err
    assert main(["run", "chat-h100-llama8b", "--set", "scheduler.preemption_requeue=tail"]) == 2
    err = capsys.readouterr().err
    assert "scheduler.preemption_requeue = 'tail'" in err and "'by_key', 'append'" in err and "Traceback" not in err
    # a config from before the field (a link, a file) waits by key, as vLLM
    old = load_preset("chat-h100-llama8b-sglang").model_dump(mode="json")
    del old["scheduler"]["preemption_requeue"]
    assert config_from_dict(old).scheduler.preemption_requeue == "by_key"
    assert load_preset("chat-h100-llama8b-sglang").scheduler.preemption_requeue == "append"


@pytest.mark.parametrize("mode", sorted(PHASE_CONTROLLERS))
def test_fixed_kind_is_every_choice(mode):
    """A controller's `fixed_kind` (read by the fast path instead of calling `choose`) is what `choose` returns for
    any tick; None when its choice depends on the tick (every stateful controller)."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    cls = PHASE_CONTROLLERS[mode]
    if cls.fixed_kind is None:
        return
    assert cls.is_stateless

    @settings(max_examples=60, deadline=None)
    @given(st.floats(0, 1e4), st.integers(0, 512), st.booleans(), st.booleans())
    def check(now_s, num_decodes, has_prefill_work, mix):
        assert cls(SchedulerConfig(prefill_mode=mode, mix_decodes=mix)).choose(now_s, num_decodes, has_prefill_work) == cls.fixed_kind

    check()


def test_scheduler_fixed_kind_only_when_the_choice_is_the_kind():
    """`Scheduler.fixed_kind` is the controller's kind only where `kind_by_choice` is (no static batch, no smart
    pre-emption's suspension rule): decode-first's, and None otherwise."""
    from sim_core.engine import Engine

    for mode in sorted(PHASE_CONTROLLERS):
        for smart in (False, True):
            sched = Engine(make_config(scheduler__prefill_mode=mode, scheduler__smart_preemption__enabled=smart)).sched
            want = PHASE_CONTROLLERS[mode].fixed_kind if sched.kind_by_choice is not None else None
            assert sched.fixed_kind == want
            assert (sched.fixed_kind is not None) == (mode == "decode_first" and not smart)


# The rule's own implementation made cheaper (session 51, pre51b): `_victim_order` takes the decoders' flags and
# emitted counts as a callable (called only by fewest_written), `_preempt` writes each victim element by element.
_RULES = [("engine-vllm-v1", "last_admitted"), ("engine-article-priority", "last_admitted"), ("engine-sglang", "fewest_written"),
          ("engine-vllm-v1", "latest_arrival")]  # fmt: skip


def _engine_of(base: str, rule: str, n: int = 1, **overrides):
    from sim_core.engine import Engine

    eng = Engine(trace_config([100 + 37 * i for i in range(8)], [50] * 8, priorities=[i % 3 for i in range(8)], base=base,
                              scheduler__preemption_victim=rule, workload__num_samples=n, **overrides))  # fmt: skip
    st = eng.st
    for k in range(8):
        st.add_request(k, 0.0, int(st.prompt[k]), int(st.output[k]), int(st.priority[k]))
    return eng


@pytest.mark.parametrize("base,rule", _RULES)
@given(data=hst.data())
def test_victim_order_with_the_decoders_given_as_a_callable_is_the_arrays_order(base, rule, data):
    eng = _engine_of(base, rule)
    st, sched = eng.st, eng.sched
    running = data.draw(hst.permutations(range(8)).map(lambda p: p[: max(1, len(p) - 2)]))
    st.running = np.array(running, dtype=np.int64)
    st.computed[:] = data.draw(hst.lists(hst.integers(0, 300), min_size=8, max_size=8))
    st.emitted[:] = data.draw(hst.lists(hst.integers(0, 40), min_size=8, max_size=8))
    calls = []

    def decoders():
        calls.append(1)
        return st.computed[st.running] >= st.prefill_target[st.running], st.emitted[st.running]

    want = sched._victim_order(st)
    assert np.array_equal(sched._victim_order(st, st.running.copy(), decoders), want)
    assert len(calls) == (rule == "fewest_written")  # (the other rules never build them)


def _preempt_with_arrays(sched, st, victims, plan):
    """`Scheduler._preempt`'s recompute writes as the arrays wrote them before pre51b (the reference)."""
    from sim_core.arrays import isin
    from sim_core.schedulers import rules

    kv = sched.kv
    st.running = st.running[~isin(st.running, victims)]
    st.num_preemptions[victims] += 1
    ctx = st.computed[victims]
    kv.preempt(victims, ctx)
    st.num_recomputed[victims] += [rules.chunk_tokens(sched._n, 0, c, p) for c, p in zip(ctx.tolist(), st.prompt[victims].tolist())]
    st.prefill_target[victims] = st.prompt[victims] + st.emitted[victims]
    st.computed[victims] = 0
    plan.preempted_idx = victims
    st.push_waiting(victims)


@pytest.mark.parametrize("n", [1, 2])
@given(data=hst.data())
def test_preempt_element_by_element_writes_what_the_arrays_wrote(n, data):
    import copy

    from sim_core.schedulers.plan import StepPlan

    eng = _engine_of("engine-vllm-v1", "last_admitted", n)
    st, kv = eng.st, eng.kv
    running = data.draw(hst.permutations(range(8)))
    st.running = np.array(running[:6], dtype=np.int64)
    st.push_waiting(np.array(running[6:], dtype=np.int64))
    st.computed[:] = data.draw(hst.lists(hst.integers(0, 400), min_size=8, max_size=8))
    st.emitted[:] = data.draw(hst.lists(hst.integers(0, 40), min_size=8, max_size=8))
    st.num_recomputed[:] = data.draw(hst.lists(hst.integers(0, 99), min_size=8, max_size=8))
    st.num_preemptions[:] = data.draw(hst.lists(hst.integers(0, 3), min_size=8, max_size=8))
    kv.held[st.running] = kv.blocks_for(st.computed[st.running], st.prompt[st.running])
    kv.num_free = kv.num_blocks - int(kv.held.sum())
    victims = np.array(data.draw(hst.lists(hst.sampled_from(running[:6]), min_size=1, max_size=4, unique=True)), dtype=np.int64)
    ref = copy.deepcopy(eng)
    plan, ref_plan = StepPlan(), StepPlan()
    eng.sched._preempt(st, victims, plan)
    _preempt_with_arrays(ref.sched, ref.st, victims, ref_plan)
    for name in ("running", "computed", "prefill_target", "num_recomputed", "num_preemptions", "status", "waiting_keys"):
        assert np.array_equal(getattr(st, name), getattr(ref.st, name)), name
    assert np.array_equal(kv.held, ref.kv.held) and kv.num_free == ref.kv.num_free
    assert np.array_equal(plan.preempted_idx, ref_plan.preempted_idx)


@pytest.mark.parametrize("base", ["engine-vllm-v1", "engine-vllm-v0-swap", "engine-sglang"])
@given(data=hst.data())
def test_preempt_into_lists_of_keys_leaves_what_it_leaves_in_the_arrays(base, data):
    """`_preempt` with the queues given as lists (`queues`: the scalar core's run's, `fastpath._preempt_in_run`) against
    `_preempt` into the state's arrays: the run's `waiting[head:]` and `swapped` hold the arrays' keys after it (by key,
    or with requeue append at the class's end; victims swapped while host blocks last, recomputed after), the keys
    before `head` untouched, every array it writes and the plan the same, and the state's own queues not read or
    written."""
    import copy

    from sim_core.schedulers.plan import StepPlan

    order = data.draw(hst.sampled_from(["fcfs", "priority", "shortest_prompt_first"]))
    requeue = data.draw(hst.sampled_from(["by_key", "append"]))
    eng = _engine_of(base, "last_admitted", data.draw(hst.sampled_from([1, 2])), scheduler__queue_order=order,
                     scheduler__preemption_requeue=requeue)  # fmt: skip
    st, kv = eng.st, eng.kv
    perm = data.draw(hst.permutations(range(8)))
    k = data.draw(hst.integers(1, 7))
    st.running = np.array(perm[:k], dtype=np.int64)
    st.push_waiting(np.array(perm[k:], dtype=np.int64))
    st.computed[:] = data.draw(hst.lists(hst.integers(0, 400), min_size=8, max_size=8))
    st.emitted[:] = data.draw(hst.lists(hst.integers(0, 40), min_size=8, max_size=8))
    kv.held[st.running] = kv.blocks_for(st.computed[st.running], st.prompt[st.running])
    kv.num_free = kv.num_blocks - int(kv.held.sum())
    if eng.sched.use_swap:  # (room for some victims' blocks or none: the rest are recomputed)
        kv.num_host_free = data.draw(hst.integers(0, int(kv.held.sum())))
    victims = np.array(data.draw(hst.lists(hst.sampled_from(perm[:k]), min_size=1, max_size=4, unique=True)), dtype=np.int64)
    ref = copy.deepcopy(eng)
    head = data.draw(hst.integers(0, 3))
    waiting, swapped = [-1] * head + st.waiting_keys.tolist(), st.swapped_keys.tolist()
    keys_before = st.waiting_keys.copy()
    plan, ref_plan = StepPlan(), StepPlan()
    eng.sched._preempt(st, victims, plan, (waiting, head, swapped))
    ref.sched._preempt(ref.st, victims, ref_plan)
    assert waiting[head:] == ref.st.waiting_keys.tolist() and waiting[:head] == [-1] * head
    assert swapped == ref.st.swapped_keys.tolist()
    assert np.array_equal(st.waiting_keys, keys_before) and not st.swapped_keys.size
    for name in ("running", "computed", "prefill_target", "num_recomputed", "num_preemptions", "status"):
        assert np.array_equal(getattr(st, name), getattr(ref.st, name)), name
    assert np.array_equal(kv.held, ref.kv.held) and kv.num_free == ref.kv.num_free
    assert np.array_equal(kv.host_held, ref.kv.host_held) and kv.num_host_free == ref.kv.num_host_free
    assert np.array_equal(plan.preempted_idx, ref_plan.preempted_idx) and plan.swap_blocks == ref_plan.swap_blocks
    assert np.array_equal(plan.swapped_out_idx, ref_plan.swapped_out_idx)
