"""Every lesson's text says what the app shows; each claim is checked on the run of the lesson's
scenario (or its mechanism scenario), on the figures the app draws. Running the scenario (not a
stored number) keeps the lessons honest when the model changes."""

import functools

import pytest

from app.components.claims import CLAIM_METRICS, holds, observe, shows
from sim_core.lessons import Claim, load_lessons, run_lesson_step
from tests import documents


@functools.cache
def _run(lesson_id: str, run: str, step: int):
    lesson = next(x for x in load_lessons() if x.id == lesson_id)
    return run_lesson_step(lesson, step, run)


def test_every_lesson_says_what_to_look_for():
    # the prefix-caching and speculative-decoding lessons had none: their numbers and directions went unchecked
    assert all(x.claims for x in load_lessons())


@pytest.mark.parametrize("lesson", [x for x in load_lessons() if x.claims], ids=lambda x: x.id)
def test_every_claim_of_the_lesson_holds_in_its_run(lesson):
    failed = []
    for claim in lesson.claims:
        assert claim.says in lesson.text, f"claim {claim.says!r} quotes words the lesson does not say"
        value = observe(claim, _run(lesson.id, claim.run, claim.step))
        other = observe(claim, _run(lesson.id, claim.run, 1 - claim.step)) if claim.than_other_step else None
        if not holds(claim, value, other):
            failed.append(f"{claim.says!r}: observed {value!r} (other step {other!r})")
    assert not failed, failed


def test_lessons_that_need_one_have_a_small_mechanism_scenario():
    for lesson in load_lessons():
        if lesson.mechanism:  # (small enough that the timeline opens on every request's row: it shows up to 30)
            assert lesson.config(0, "mechanism").workload.num_requests <= 24
    assert sum(1 for x in load_lessons() if x.mechanism) >= 4


def test_a_claim_that_is_false_is_caught():
    lesson = next(x for x in load_lessons() if x.id == "prefill-first-stalls")
    res = _run(lesson.id, "lesson", 1)  # decode-first: no whole-prompt prefill ticks in view
    claim = Claim(says="x", step=1, view="gantt", element="prefill", at_least=5)
    assert not holds(claim, observe(claim, res))
    assert not holds(Claim(says="x", step=1, view="headline", metric="itl_p99_s", than_other_step="higher"),
                     res.summary.itl_p99_s, _run(lesson.id, "lesson", 0).summary.itl_p99_s)  # fmt: skip


def test_the_router_lesson_quotes_the_numbers_its_runs_and_the_presets_it_names_show():
    # numbers the claims cannot reach (per-replica splits, other presets): each recomputed and looked up in the text
    from sim_core import load_preset, run_simulation
    from sim_core.sweep import with_value

    lesson = next(x for x in load_lessons() if x.id == "router-policies")
    rr, lo = _run(lesson.id, "lesson", 0), _run(lesson.id, "lesson", 1)
    prompts = lambda res: [int(res.requests.prompt_tokens[i.request_ids].sum()) for i in res.instances]  # noqa: E731
    counts = lambda res: [i.num_requests for i in res.instances]  # noqa: E731
    assert counts(rr) == [48, 48] and f"{prompts(rr)[0]:,} long-prompt tokens on replica 0 ({prompts(rr)[1]:,}" in lesson.answer
    # "it queues and computes 94 % of the tokens (nearly twice its share) while the other finishes ... by 5 s" (it said
    # "decodes twice the work")
    tokens = [int((rr.requests.prompt_tokens + rr.requests.output_tokens)[i.request_ids].sum()) for i in rr.instances]
    assert f"computes {tokens[0] / sum(tokens):.0%} of the tokens".replace("%", " %") in lesson.explanation
    last = [float(rr.requests.finish_s[i.request_ids].max()) for i in rr.instances]
    assert last[1] <= 5.1 and last[0] > 2 * last[1] and "finishes its short requests by 5 s and idles" in lesson.explanation
    n0, n1 = counts(lo)
    k0, k1 = (round(t / 1000) for t in prompts(lo))
    assert f"Least outstanding: {n0} / {n1} requests and about {k0}k / {k1}k prompt tokens" in lesson.answer

    def p90(preset: str, router: str):
        s = run_simulation(with_value(load_preset(preset), "deployment.router", router)).summary
        return s.ttft_p90_s, s.prefix_hit_rate_tokens

    kv, rrr = p90("cluster-router-4xh100-llama8b", "least_kv")[0], p90("cluster-router-4xh100-llama8b", "round_robin")[0]
    assert f"TTFT p90 about {kv:.1f} s against {rrr:.1f} s with round robin" in lesson.answer
    assert "least KV is the worst of the three" in lesson.answer
    assert kv > p90("cluster-router-4xh100-llama8b", "least_outstanding")[0]
    (t_rr, h_rr), (t_pa, h_pa), (t_ca, h_ca) = (p90("cluster-prefix-4xh100-llama8b", r) for r in
                                                ("round_robin", "prefix_affinity", "cache_aware"))  # fmt: skip
    assert f"from {h_rr:.0%} to {h_pa:.0%} of prompt tokens".replace("%", " %") in lesson.answer
    assert f"(about {t_rr:.2f} s to {t_pa:.2f} s)" in lesson.answer
    assert f"about the same hit rate and a lower TTFT p90 (hit rate {h_ca:.0%}, TTFT p90 {t_ca:.2f} s here".replace("%", " %") in lesson.answer
    assert abs(h_ca - h_pa) < 0.02 and t_ca < t_pa
    t_ws, h_ws = p90("cluster-prefix-4xh100-llama8b", "weighted_score")
    assert f"so it hits less ({h_ws:.0%}) yet keeps the tail as short (TTFT p90 {t_ws:.2f} s here)".replace("%", " %") in lesson.answer
    assert h_rr < h_ws < h_ca - 0.03 and t_ws <= t_ca + 0.02


def test_the_oom_lesson_quotes_the_memory_split_the_app_shows():
    # it said "~7.3 GiB to ~0.03 GiB" while the error names 7.10 GiB and About 0.72 GiB of workspace and runtime
    from sim_core.costmodel import CUDA_RESERVED_BYTES, kv_pool_bytes

    lesson = next(x for x in load_lessons() if x.id == "prefill-oom")
    gib = 2**30
    (_, _, big, _), (_, _, small, kv) = (kv_pool_bytes(lesson.config(step)) for step in (0, 1))
    assert f"~{big / gib:.1f} GiB of activation workspace and runtime" in lesson.explanation
    # it called the driver's 22.5 GiB "usable", while the 12 % (2.6 GiB) is of what is left after the CUDA context
    cfg = lesson.config(1)
    usable = cfg.hardware.memory_gib * gib - CUDA_RESERVED_BYTES
    share = 1 - cfg.kv_cache.gpu_memory_utilization
    weights = kv_pool_bytes(cfg)[1]
    assert (f"24 GB L4 ({cfg.hardware.memory_gib:.1f} GiB, about {usable / gib:.1f} GiB usable after the CUDA context)"
            in lesson.explanation)  # fmt: skip
    assert f"the {weights / gib:.0f} GiB of Llama-3.1-8B weights" in lesson.explanation
    assert f"only the {share:.0%} outside mem_fraction_static (about {share * usable / gib:.1f} GiB)".replace("%", " %") in lesson.explanation
    assert f"from ~{big / gib:.1f} GiB to ~{small / gib:.1f} GiB per GPU" in lesson.answer
    assert f"about {kv / gib:.1f} GiB for KV blocks" in lesson.answer


def _lesson(lesson_id: str):
    return next(x for x in load_lessons() if x.id == lesson_id)


def test_the_roofline_lesson_ttft_grows_far_less_than_tpot():
    # "TPOT grows almost in proportion ... TTFT grows far less": the claims only checked that both grow
    before, after = (_run("roofline", "lesson", step).summary for step in (0, 1))
    tpot_growth = after.tpot_p50_s / before.tpot_p50_s - 1
    ttft_growth = after.ttft_p50_s / before.ttft_p50_s - 1
    assert tpot_growth >= 0.6  # half the bandwidth: 1.7x (a pure bandwidth bound would be 2x)
    assert 0 < ttft_growth < tpot_growth / 2


def test_the_stall_lesson_ends_at_one_mixed_tick_and_stalls_for_whole_prompts():
    import numpy as np

    from sim_core.types import Phase

    lesson = _lesson("prefill-first-stalls")
    before, after = (_run(lesson.id, "lesson", step) for step in (0, 1))
    mixed_s = after.timeline.duration_s[after.timeline.phase == Phase.MIXED]
    # "p99 ITL drops to about one chunk tick (... a mixed tick takes about 20 ms)"
    assert np.median(mixed_s) <= after.summary.itl_p99_s <= mixed_s.max()
    assert "a mixed tick takes about 20 ms" in lesson.answer and 0.018 <= np.median(mixed_s) <= 0.022
    # prefill-first with the lesson's 512-token budget: a prompt is a run of prefill ticks, not one tick
    is_prefill = before.timeline.phase == Phase.PREFILL
    edges = np.flatnonzero(np.diff(np.r_[0, is_prefill.astype(np.int8), 0]))
    runs = edges[1::2] - edges[::2]
    assert np.median(runs) >= 2 and "a run of 512-token prefill ticks" in lesson.explanation


def test_the_time_slice_lesson_tick_is_shorter_than_the_long_slice_only():
    import numpy as np

    from sim_core.types import Phase

    lesson = _lesson("time-slices")
    tl = _run(lesson.id, "lesson", 1).timeline
    prefill_ms = float(np.median(tl.duration_s[tl.phase == Phase.PREFILL])) * 1e3
    assert f"a prefill tick (about {prefill_ms:.0f} ms) is shorter than a 60 ms slice" in lesson.explanation
    assert lesson.values == (10, 60) and 10 < prefill_ms < 60  # a 10 ms slice holds one whole (overrunning) tick


def test_the_prefix_lesson_kv_panel_shows_cached_free_blocks_only_with_caching():
    from app.components import timeline

    def cached_free_peak(step: int) -> float:
        res = _run("shared-system-prompt", "lesson", step)
        fig = timeline.timeline_figure(res, window=timeline.opening_window(res))
        return max((max(t.y) for t in fig.data if t.name == "KV cached, free (%)"), default=0.0)

    assert cached_free_peak(0) == 0.0 and cached_free_peak(1) > 1.0


def test_the_split_lesson_distserve_pair_misses_ttft_even_idle():
    # "one A100 running 2023 vLLM needs more than 0.25 s to prefill the longest ~8 % of prompts (over about 1,550
    # tokens), so barely 90 % meet TTFT even when idle (92 %) and fewer under any real load (88 % at 1 req/s per GPU;
    # ...); the TP2 prefill instance about halves those prompts' TTFT" (session 31: the presets replay DistServe's own
    # requests at profiles fitted on its measured runs; it said ~16 %, 1,300 tokens, 84 %). A trace preset's rate is
    # set by time-scaling its arrivals (`with_rate`; setting the rate field alone left them as they were)
    import numpy as np

    from sim_core import load_preset, run_simulation
    from sim_core.sweep import with_rate

    lesson = _lesson("split-prefill-decode")
    at = lambda name, rate: run_simulation(with_rate(load_preset(name), rate))  # noqa: E731
    colo, split = at("cluster-distserve-opt13b-3xa100-colocated", 0.15), at("cluster-distserve-opt13b-3xa100-p2d1", 0.15)
    assert colo.summary.queue_delay_p99_s < 0.05  # idle: TTFT is (almost all) the prefill
    slow = colo.requests.ttft_s > 0.25
    assert 0.07 <= slow.mean() <= 0.09 and "the longest ~8 % of prompts" in lesson.answer
    # the cut is the longest prompt that still meets the objective: (almost) every longer one misses it, and they are the
    # ~8 % (review 31c: the answer said "over about 1,400 tokens", the shortest prompt that missed after a short wait,
    # while 15.7 % of the prompts are over 1,400 tokens)
    prompt = colo.requests.prompt_tokens
    cut = prompt[~slow].max()
    assert abs(np.mean(prompt > cut) - slow.mean()) <= 0.01
    assert 1520 <= cut <= 1600 and "(over about 1,550 tokens)" in lesson.answer
    assert f"even when idle ({colo.summary.slo_attainment:.0%})".replace("%", " %") in lesson.answer
    busy = at("cluster-distserve-opt13b-3xa100-colocated", 3.0)  # 1 req/s per GPU
    assert f"({busy.summary.slo_attainment:.0%} at 1 req/s per GPU".replace("%", " %") in lesson.answer
    assert (colo.requests.prompt_tokens == split.requests.prompt_tokens).all()
    ratio = split.requests.ttft_s[slow] / colo.requests.ttft_s[slow]
    assert np.all((0.4 <= ratio) & (ratio <= 0.6)) and "about halves those prompts' TTFT" in lesson.answer


def test_the_speculative_lesson_numbers_beyond_its_scenario():
    import numpy as np

    from sim_core import load_preset, run_simulation
    from sim_core.sweep import with_value

    lesson = _lesson("spec-decode-saturation")
    # "at 1 req/s it drops (about 9.7 → 6.1 ms)": the preset the lesson names
    low = load_preset("spec-decode-h100-llama8b")
    off, on = (run_simulation(with_value(low, "scheduler.speculative.enabled", x)).summary.tpot_p50_s for x in (False, True))
    assert f"(about {off * 1e3:.1f} → {on * 1e3:.1f} ms)" in lesson.answer
    # and the README's comment on that preset's command (it said 9.7 -> 6.7 ms after the refit: review 27)
    for name in ("README", "prefix-caching"):  # (the short section and the full one both give the command)
        assert (f"# 1 req/s: TPOT p50 {off * 1e3:.1f} -> {on * 1e3:.1f} ms (about {round(10 * (1 - on / off)) * 10} % lower)"
                in _readme(name)), name  # fmt: skip

    # "compute-bound ticks go from about 22 % to 61 % of the GPU's busy time" (it said the batch already filled the compute)
    def compute_bound_share(step: int) -> float:
        tl = _run(lesson.id, "lesson", step).timeline
        busy = tl.phase != 0
        return float((tl.duration_s * tl.is_compute_bound)[busy].sum() / tl.duration_s[busy].sum())

    assert f"from about {compute_bound_share(0):.0%} to {compute_bound_share(1):.0%} of the GPU's busy time".replace(
        "%", " %") in lesson.answer  # fmt: skip
    before, after = (_run(lesson.id, "lesson", step).summary for step in (0, 1))
    gain = after.output_tokens_per_s / before.output_tokens_per_s - 1
    assert f"(output throughput about +{gain:.0%})".replace("%", " %") in lesson.answer
    # "here acceptance 0.55 about breaks even, k = 1 cuts TPOT p50 by about 4 %, and acceptance 0.7 to about 18 ms" (until
    # vllm-v1's session-75 refit k = 1 and acceptance 0.6 both broke even)
    cfg = lesson.config(1)
    tpot = lambda path, value: run_simulation(with_value(cfg, path, value)).summary.tpot_p50_s  # noqa: E731
    assert abs(tpot("scheduler.speculative.acceptance_rate", 0.55) / before.tpot_p50_s - 1) < 0.03
    one = 1 - tpot("scheduler.speculative.num_draft_tokens", 1) / before.tpot_p50_s
    assert f"k = 1 cuts TPOT p50 by about {one:.0%}".replace("%", " %") in lesson.answer and one > 0
    better = tpot("scheduler.speculative.acceptance_rate", 0.7)
    assert f"acceptance 0.7 to about {better * 1e3:.0f} ms" in lesson.answer and better < 0.9 * before.tpot_p50_s
    assert np.isclose(after.spec_tokens_per_step, (1 - 0.4**5) / 0.6, rtol=0.02)


def test_the_dynamic_batch_lesson_is_a_cliff_not_a_slope():
    # it said "between the two [targets], it trades throughput for per-token latency": from 13 to 200 ms nothing moves
    from sim_core import run_simulation
    from sim_core.sweep import with_value

    lesson = _lesson("dynamic-batch")
    loose = _run(lesson.id, "lesson", 0).summary
    tight = run_simulation(with_value(lesson.config(0), lesson.knob, 13)).summary  # just above the 12.1 ms one-sequence step
    assert "with any target from 13 to 200 ms the batch and the throughput do not move" in lesson.answer
    assert abs(tight.mean_batch_size / loose.mean_batch_size - 1) < 0.02
    assert abs(tight.output_tokens_per_s / loose.output_tokens_per_s - 1) < 0.02 and tight.ttft_p50_s < 0.2
    # (it said "this run is the same", where the tail of TTFT grows: the browser review read p99 0.39 s -> 1.59 s)
    # (in ms below a second, as the headline writes them: "0.09 s" stood beside a headline's "87.7 ms", a review)
    assert (f"at 13 ms TTFT p50 moves only from about {loose.ttft_p50_s * 1e3:.0f} to {tight.ttft_p50_s * 1e3:.0f} ms, but "
            f"its p99 from about {round(loose.ttft_p99_s * 1e3, -1):.0f} ms to {tight.ttft_p99_s:.1f} s") in lesson.answer  # fmt: skip
    # "about 6 requests run at once and their decode tick (about 12.6 ms) meets even a 13 ms target"
    import numpy as np

    from sim_core.types import Phase

    tl = run_simulation(with_value(lesson.config(0), lesson.knob, 13)).timeline
    busy = tl.phase != Phase.IDLE
    decode_ms = float(np.median(tl.duration_s[tl.phase == Phase.DECODE])) * 1e3
    assert f"their decode tick (about {decode_ms:.1f} ms) meets even a 13 ms target" in lesson.answer and decode_ms < 13
    assert np.median(tl.num_running[busy]) == 6 and "about 6 requests run at once" in lesson.answer


def test_the_short_benchmark_lesson_quotes_its_steady_state_note():
    # "With 300 requests the arrivals last 12 s" and "(its warm-up, 1.5 s, is shorter than one request's mean
    # end-to-end time, 6.3 s)" and the long run's note: the note's figures, never checked before (the answer wrote "6 s"
    # where the Simulate page's note, which students compare it with, wrote 6.3 s: one decimal, as the note)
    lesson = _lesson("short-benchmark")
    short, long = (_run(lesson.id, "lesson", step) for step in (0, 1))
    assert round(float(short.requests.arrival_s.max())) == 12 and "the arrivals last 12 s" in lesson.explanation
    s = short.summary.steady
    assert f"(its warm-up, {s.warmup_s:.1f} s, is shorter than one request's mean end-to-end time, {s.mean_e2e_s:.1f} s)" in lesson.answer
    assert s.note and s.note.startswith("Too short to say")
    # the long run's note says it is overloaded (it advised "Run about 4,000 requests or more", where a longer run only
    # grows the queue), with the window's median TTFT rising as the answer quotes
    import re

    rose = re.search(r"the median TTFT rose from ([\d.]+) s .* to ([\d.]+) s in its last", long.summary.steady.note)
    assert long.summary.steady.note.startswith("Overloaded:") and rose, long.summary.steady.note
    first_s, last_s = (round(float(x)) for x in rose.groups())
    assert f"the median TTFT rising from about {first_s} s to {last_s} s across the steady window" in lesson.answer


def _readme(name: str = "README") -> str:
    return documents.prose(name)


def test_the_readme_quotes_the_session_router_lessons_claims_as_they_run():
    # Regression (review 27): the README said "hit rate 31 % vs 77 % of prompt tokens, TTFT p99 88 vs 44 ms" after the
    # refit had made the lesson (whose claims were restated) 32 % vs 77 %, 84 vs 43 ms
    rr, pinned = (_run("session-router", "lesson", step).summary for step in (0, 1))
    pct = lambda x: f"{x:.0%}".replace("%", " %")  # noqa: E731
    assert (f"its claims (hit rate {pct(rr.prefix_hit_rate_tokens)} vs {pct(pinned.prefix_hit_rate_tokens)} of prompt tokens, "
            f"TTFT p99 {rr.ttft_p99_s * 1e3:.0f} vs {pinned.ttft_p99_s * 1e3:.0f} ms)") in _readme("prefix-caching")  # fmt: skip


def test_the_admission_lesson_quotes_its_scenarios_and_the_reserve_run():
    # the lesson's figures the claims cannot reach: the scenarios' setup, who SGLang admits and pre-empts in the
    # mechanism scenario, the ratio's start, and TensorRT-LLM's reserve admission (a third value of the knob)
    import numpy as np

    from sim_core import run_simulation
    from sim_core.sweep import with_value
    from sim_core.types import Event

    lesson = _lesson("admission-kv-pressure")
    text = " ".join(lesson.text.split())
    cfg = lesson.config(0)
    w = cfg.workload
    assert f"{w.num_requests} chat requests at {w.arrival.rate_per_s:g} req/s" in text
    assert f"(about {w.output_tokens.mean:.0f} tokens each, up to {w.output_tokens.max:,})" in text
    assert f"the TTFT objective is {cfg.slo.ttft_s:g} s" in text
    ratio = cfg.scheduler.new_token_ratio.init_new_token_ratio
    assert f"The ratio starts at {ratio:g}" in text and f"({ratio:.0%} at first".replace("%", " %") in text
    # mechanism: 8 requests of 1,000 + 1,500 tokens; greedy lets all eight in, SGLang five, and pre-empts the 5th
    mech = lesson.config(1, "mechanism")
    r = mech.workload.trace
    assert len(set(r.prompt_tokens)) == len(set(r.output_tokens)) == 1
    assert f"({len(r.prompt_tokens)} requests of {r.prompt_tokens[0]:,} + {r.output_tokens[0]:,} tokens" in text
    greedy, sglang = (_run(lesson.id, "mechanism", step) for step in (0, 1))
    admitted_at_once = lambda res: int((res.requests.ttft_s < 1.0).sum())  # noqa: E731
    assert admitted_at_once(greedy) == 8 and "greedy lets all eight in" in text
    assert admitted_at_once(sglang) == 5 and "SGLang admits five and the other three wait" in text
    victims = sglang.events.req[sglang.events.kind == Event.PREEMPTED]
    assert sorted(set(victims.tolist())) == [4] and "the fifth request it let in" in text
    assert np.all(sglang.requests.output_tokens == r.output_tokens[0]) and "every answer grows to its full 1,500 tokens" in text
    # "reserve ... no pre-emption at all, but TTFT p50 about 15 s and about 10 % less output"
    greedy_s = _run(lesson.id, "lesson", 0).summary
    reserve = run_simulation(with_value(cfg, lesson.knob, "reserve")).summary
    assert reserve.num_preemptions == 0 and "no pre-emption at all" in text
    less = 1 - reserve.output_tokens_per_s / greedy_s.output_tokens_per_s
    assert (f"TTFT p50 about {reserve.ttft_p50_s:.0f} s and about {round(less * 10) * 10} % less output" in text)


def test_a_claim_counted_once_says_its_noun_in_the_singular():
    # a claim holds from one element (at_least defaults to 1): one read "1 prefill ticks in the GPU row", "1 swap bars"
    # and "1 stalled stretches in the request rows"
    gantt = shows(Claim(says="x", step=0, view="gantt", element="prefill"), 1.0)
    assert gantt.startswith("1 prefill tick in the GPU row"), gantt
    assert shows(Claim(says="x", step=0, view="gantt", element="swap"), 1.0).startswith("1 swap bar in the GPU row")
    assert shows(Claim(says="x", step=0, view="requests", element="stalled"), 1.0).startswith("1 stalled stretch in the request rows")
    assert shows(Claim(says="x", step=0, view="gantt", element="swap"), 5.0).startswith("5 swap bars in the GPU row")


def test_a_claim_says_what_the_run_shows_in_words_with_units():
    # "What to look for" quoted each claim alone: lesson 11 read "✓ “from about 49% to 100%” (… = 4 co-located
    # replicas (TP2))" and the same line for the other side, without saying what went from 49 % to 100 % or what each
    # run measured; it now ends in the measured quantity, named, with its unit
    slo = Claim(says="from about 49% to 100%", step=0, view="headline", metric="slo_attainment")
    assert shows(slo, 0.4912) == "SLO attainment 49%"
    ttft = Claim(says="TTFT falls", step=1, view="headline", metric="ttft_p50_s", than_other_step="lower")
    assert shows(ttft, 0.1404, 0.4712) == "TTFT p50 140 ms (471 ms on the other side)"
    assert shows(Claim(says="x", step=1, view="headline", metric="output_tokens_per_s"), 658.4) == "output throughput 658 tok/s"
    assert shows(Claim(says="x", step=1, view="classes", element="0", metric="ttft_p99_s"), 1.07) == "priority-0 class TTFT p99 1.07 s"
    assert shows(Claim(says="x", step=0, view="gantt", element="prefill"), 41.0) == \
        "41 prefill ticks in the GPU row (the timeline's opening window)"
    assert shows(Claim(says="x", step=0, view="requests", element="stalled"), 222.0).startswith("222 stalled stretches in the request rows")
    assert shows(Claim(says="x", step=0, view="headline", metric="fits"), 0.0) == "does not fit in memory"
    assert shows(Claim(says="x", step=0, view="headline", metric="num_recomputed_tokens"), 74769.0) == "recomputed tokens 74,769"
    # every metric a lesson checks is named (a new one would read as its field name)
    used = {c.metric for x in load_lessons() for c in x.claims if c.view in ("headline", "classes")} - {"fits"}
    assert used <= set(CLAIM_METRICS), used - set(CLAIM_METRICS)


def test_a_roofline_count_is_the_legends_when_the_chart_samples_its_dots():
    # lesson 1's 600 requests run 6,357 ticks, past the 4,000 dots the roofline draws: "What to look for" read "330
    # prefill ticks on the roofline" beside the legend's "prefill ticks (542)"
    import re

    from app.components import charts

    lesson = next(x for x in load_lessons() if x.id == "roofline")
    res = _run(lesson.id, "lesson", 0)
    fig = charts.roofline_figure(res)
    assert sum(len(t.x) for t in fig.data if t.mode == "markers") <= charts.MAX_ROOFLINE_POINTS < res.timeline.num_ticks
    for kind in ("prefill ticks", "decode ticks"):
        legend = next(t.name for t in fig.data if t.legendgroup == kind)
        drawn = next(len(t.x) for t in fig.data if t.legendgroup == kind)
        counted = int(re.search(r"\(([\d,]+)\)", legend).group(1).replace(",", ""))
        claim = Claim(says="x", step=0, view="roofline", element=kind)
        assert observe(claim, res) == counted > drawn
        assert shows(claim, observe(claim, res)).startswith(f"{counted:,} {kind} on the roofline")


def test_the_split_lesson_quotes_its_steady_window_beside_the_headline():
    # a review: lesson 11's answer quoted the headline's 56 % and 4.5 req/s, and the steady window under it read 46 %
    # and 3.90 req/s of 8.43 offered, with nothing saying which is which
    lesson = next(x for x in load_lessons() if x.id == "split-prefill-decode")
    co, split = (_run(lesson.id, "lesson", step).summary.steady for step in (0, 1))
    assert co.note is None and split.note is None  # (the runs settle: their steady windows are shown)
    said = (f"in the steady window under it, warm-up and drain left out, {co.slo_attainment:.0%} to {split.slo_attainment:.0%} "
            f"and {co.goodput_requests_per_s:.1f} to {split.goodput_requests_per_s:.1f} req/s of the "
            f"{split.arrival_rate_per_s:.1f} offered")  # fmt: skip
    assert said in lesson.answer, said


def test_two_values_side_by_side_keep_their_trailing_zeros():
    # Learn's "Run both and compare here" wrote lesson 14's TPOT p50 as "9.17 ms" beside "9 ms" (two precisions, a
    # projector review); a claim's own value still drops them
    from app.components.claims import fmt_metric_value

    assert fmt_metric_value("s", 0.009, strip_zeros=False) == "9.00 ms" and fmt_metric_value("s", 0.009) == "9 ms"
    assert fmt_metric_value("number", 2.5, strip_zeros=False) == "2.50" and fmt_metric_value("share", 0.3) == "30%"
