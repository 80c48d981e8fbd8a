"""Speculative decoding rule and cost term."""

from __future__ import annotations

from unittest import mock

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim_core.config import SimConfig, SpeculativeConfig
from sim_core.costmodel import CostModel
from sim_core.speculative import SCALAR_DRAFT_STEPS, Speculator, tokens_emitted, verify_aggregates


def spec_cfg(**kw) -> SimConfig:
    return SimConfig.model_validate({"scheduler": {"speculative": {"enabled": True} | kw}})


def test_acceptance_draws_follow_the_leviathan_expectation():
    for alpha in (0.0, 0.5, 0.8, 1.0):
        cfg = spec_cfg(acceptance_rate=alpha, num_draft_tokens=4)
        acc = Speculator(cfg, CostModel(cfg)).accepted(20000)
        expected = (1 - alpha**5) / (1 - alpha) if alpha < 1 else 5.0
        assert (1 + acc).mean() == pytest.approx(expected, rel=0.02, abs=1e-9)
        assert cfg.scheduler.speculative.expected_tokens_per_step() == pytest.approx(expected)


def test_per_position_table_and_same_seed_same_draws():
    cfg = spec_cfg(num_draft_tokens=3, acceptance_by_position=[1.0, 0.0, 1.0])
    acc = Speculator(cfg, CostModel(cfg)).accepted(100)
    assert (acc == 1).all()  # the second position always rejects: nothing after it counts
    a = Speculator(spec_cfg(), CostModel(spec_cfg())).accepted(50)
    b = Speculator(spec_cfg(), CostModel(spec_cfg())).accepted(50)
    assert np.array_equal(a, b)
    with pytest.raises(ValueError, match=r"has 1 entries; it needs one per draft token, num_draft_tokens \(2\)"):
        SpeculativeConfig(num_draft_tokens=2, acceptance_by_position=[0.5])


def test_looking_ahead_at_the_draws_leaves_the_stream_and_cuts_unchanged():
    """A coalesced run looks at draws ahead (`upcoming`) and uses only those of the ticks it ran (`use`); single ticks
    take theirs with `accepted`. However the stream is looked at and cut, each sequence-step accepts what drawing k
    uniforms for it, in order, gives: the leading draft tokens below their position's acceptance, of the first d."""
    cfg = spec_cfg(num_draft_tokens=4, acceptance_by_position=[0.9, 0.7, 0.5, 0.3])
    alpha = np.array(cfg.scheduler.speculative.acceptance)
    rng = np.random.default_rng([cfg.seed, 0x5BEC])

    def expected(num_seqs, drafts):  # the rule drawn tick by tick: k uniforms per sequence, the first `drafts` compared
        ok = rng.random((num_seqs, 4))[:, :drafts] < alpha[:drafts]
        return np.cumprod(ok, axis=1).sum(axis=1)

    spec = Speculator(cfg, CostModel(cfg))
    assert np.array_equal(spec.accepted(5), expected(5, 4))
    ahead = spec.upcoming(3000).copy()  # past the first batch drawn ahead
    assert np.array_equal(spec.upcoming(7), ahead[:7])  # looking again changes nothing
    spec.use(6)
    many = np.full(3, 99)  # (tokens left: none is cut by its last token)
    assert np.array_equal(tokens_emitted(spec.accepted(3), 2, many, np.minimum), 1 + np.minimum(ahead[6:9], 2))
    expected(6, 4)  # (the six steps used)
    assert np.array_equal(ahead[6:9], expected(3, 4))
    assert np.array_equal(tokens_emitted(spec.accepted(2500), 0, 99, np.minimum), np.ones(2500))
    expected(2500, 4)
    assert np.array_equal(tokens_emitted(spec.accepted(4000), 3, 99, np.minimum) - 1, expected(4000, 3))  # across the end
    assert spec.upcoming(1).dtype == np.int64


def test_verify_of_one_position_is_a_plain_decode():
    assert verify_aggregates(1, 8, 8000) == (8, 8, 8000 + 8, 8000)  # Engine's plain decode aggregates
    tokens, rows, pairs, kv = verify_aggregates(4, 8, 8000)
    assert tokens == rows == 32 and kv == 8000 and pairs == 4 * 8000 + 8 * (1 + 2 + 3 + 4)


def test_draft_cost_scales_with_k_and_a_draft_model_costs_less_than_the_target():
    head = spec_cfg(num_draft_tokens=4, draft_cost_fraction=0.1)
    s = Speculator(head, CostModel(head))
    model = spec_cfg(num_draft_tokens=4, draft="model", draft_model="llama-3.2-1b")
    m = Speculator(model, CostModel(model))
    cal = head.calibration  # a step's busy time: the decode tick without its CPU overheads
    target_step = CostModel(head).decode_time_s(16, 1000) - cal.tick_overhead_ms * 1e-3 - 16 * cal.per_seq_overhead_us * 1e-6
    assert s.draft_s(16, 16000) == pytest.approx(0.4 * target_step, rel=0.05)
    assert 0 < m.draft_s(16, 16000) < 4 * target_step
    assert s.draft_s(0, 0) == 0.0


@pytest.mark.parametrize("draft", [{"draft": "model", "draft_model": "llama-3.2-1b"}, {"draft": "head", "draft_cost_fraction": 0.1}])
def test_a_draft_step_costs_a_decode_step_less_only_the_cpu_overheads(draft):
    # Draft step j of a batch of one at context C is priced as a plain decode step at context C + j minus the tick's
    # CPU overheads (the target's step pays them once), by hand from decode_time_s. The draft's weights are streamed
    # by every step: the 'empty tick' subtracted before also held the weight read (1B draft: 2.2 instead of 4.4 ms).
    cfg = spec_cfg(num_draft_tokens=3, **draft)
    spec = Speculator(cfg, CostModel(cfg))
    cal = cfg.calibration
    if draft["draft"] == "model":
        from sim_core.config import ModelSpec
        from sim_core.presets import read_preset_data

        data = {k: v for k, v in read_preset_data("models", "llama-3.2-1b").items() if k != "description"}
        drafter = CostModel(cfg.model_copy(update={"model": ModelSpec.model_validate(data)}))
    else:
        drafter = CostModel(cfg)
    fraction = 1.0 if draft["draft"] == "model" else 0.1
    overhead_s = cal.tick_overhead_ms * 1e-3 + cal.per_seq_overhead_us * 1e-6
    expected = fraction * sum(drafter.decode_time_s(1, 1000 + j) - overhead_s for j in range(3))
    assert spec.draft_s(1, 1000) == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize("draft", [{"draft": "model", "draft_model": "llama-3.2-1b"}, {"draft": "head", "draft_cost_fraction": 0.1}])
def test_the_draft_runs_over_a_ticks_prompt_chunks_as_vllm_v1s_drafter_does(draft):
    # vLLM V1's drafter takes every scheduled token (target_token_ids = input_ids[:num_scheduled_tokens]): its first
    # forward runs over the decodes' tokens and the prefill chunks' in one pass, one sampled row per request, and its
    # k - 1 later steps over one token of every request, a chunk's included (the padded drafter batch). By hand, from
    # the drafter's own tick: 3 decoders over 3,000 tokens beside two chunks (512 after 1,024 cached; 256 from 0).
    cfg = spec_cfg(num_draft_tokens=3, **draft)
    spec = Speculator(cfg, CostModel(cfg))
    drafter = spec._draft_cost
    fraction = 1.0 if draft["draft"] == "model" else 0.1
    busy = lambda *agg: drafter.tick(*agg, 0)[0] - cfg.calibration.tick_overhead_ms * 1e-3  # noqa: E731
    chunks = [(512, 1024), (256, 0)]  # (tokens, cached before)
    p_tokens = sum(m for m, _ in chunks)
    p_pairs = sum(m * c + m * (m + 1) // 2 for m, c in chunks)
    p_read = sum(c for _, c in chunks)
    after = p_read + p_tokens
    expected = busy(3 + p_tokens, 3 + 2, 3000 + 3 + p_pairs, 3000 + p_read)
    for j in (1, 2):
        expected += busy(3 + 2, 3 + 2, 3000 + 3 * j + 3 + after + 2 * (j - 1) + 2, 3000 + 3 * j + after + 2 * (j - 1))
    got = spec.tick_draft_s(3, 3000, p_tokens, p_pairs, p_read, 2)
    assert got == pytest.approx(fraction * expected, rel=1e-12)
    assert got > spec.tick_draft_s(3, 3000)  # the chunks cost the draft time
    # a prefill-only tick drafts too; without chunks the decodes' steps are what they were, bit for bit
    assert spec.tick_draft_s(0, 0, p_tokens, p_pairs, p_read, 2) > 0
    assert spec.tick_draft_s(3, 3000, 0, 0, 0, 0) == spec.tick_draft_s(3, 3000) == spec.draft_s(3, 3000)


@pytest.mark.parametrize("path", ["fast", "reference"])
def test_a_prefill_only_run_pays_the_drafts_pass_over_its_prompts(path, monkeypatch):
    # One-token outputs never decode: before, no draft time at all; vLLM's drafter still runs over every prompt chunk
    from sim_core import fastpath, run_simulation
    from sim_core.presets import config_from_dict

    if path == "reference":  # (tick by tick: `Engine._advance_tick`)
        monkeypatch.setattr(fastpath, "speculates_here", lambda engine: False)

    def run(enabled):
        return run_simulation(config_from_dict({
            "workload": {"num_requests": 8, "prompt_tokens": {"dist": "fixed", "mean": 3000},
                         "output_tokens": {"dist": "fixed", "mean": 1}},
            "scheduler": {"speculative": {"enabled": enabled, "draft": "model"}}})).summary  # fmt: skip

    plain, s = run(False), run(True)
    assert plain.spec_draft_time_s is None and s.spec_draft_time_s > 0 and s.ttft_p50_s > plain.ttft_p50_s


@pytest.mark.parametrize("deployment", [None, {"replicas": 2}, {"disaggregation": {}}])
def test_itl_gap_count_is_one_per_verify_step(deployment):
    # Acceptance 1, k = 3: after the first token each verify step emits 4 tokens (the last step what is left), so a
    # 50-token output has ceil(49 / 4) = 13 gaps, not 49: the ITL chart's count said '49 per request' and claimed
    # the 13 it drew were 'an even sample'.
    from sim_core.engine import run_simulation
    from sim_core.sweep import with_value
    from tests.conftest import trace_config

    cfg = trace_config([200] * 6, [50] * 6, arrivals=[0.1 * i for i in range(6)],
                       scheduler__speculative={"enabled": True, "num_draft_tokens": 3, "acceptance_rate": 1.0})  # fmt: skip
    res = run_simulation(cfg if deployment is None else with_value(cfg, "deployment", deployment))
    assert res.summary.num_finished == 6
    assert res.num_itl_gaps == res.itl_s.size == 6 * 13


@pytest.mark.parametrize("coalesce", [False, True])
def test_phase_controllers_see_decode_tokens_emitted_not_verified(monkeypatch, coalesce):
    # The quota controller's decode floor (article §5.3, tokens/s) reads the decode tokens of each tick. At acceptance 0
    # a verify pass emits one token per sequence but prices k+1 = 4 positions: it was told 4x the throughput.
    from sim_core.engine import run_simulation
    from sim_core.schedulers.phase import Quota
    from tests.conftest import trace_config

    seen = []
    real, real_run = Quota.observe, Quota.decode_run
    monkeypatch.setattr(Quota, "observe", lambda self, end_s, dur_s, pre, dec: (seen.append(dec), real(self, end_s, dur_s, pre, dec)))
    # (the scalar core advances the controller over an all-decode stretch in one call, with each tick's tokens)
    monkeypatch.setattr(Quota, "decode_run", lambda self, start_s, durs, tokens: (seen.extend(tokens), real_run(self, start_s, durs, tokens)))
    cfg = trace_config([300] * 8, [40] * 8, arrivals=[0.02 * i for i in range(8)], limits__coalesce_ticks=coalesce,
                       scheduler__prefill_mode="quota",
                       scheduler__speculative={"enabled": True, "num_draft_tokens": 3, "acceptance_rate": 0.0})  # fmt: skip
    res = run_simulation(cfg)
    assert res.summary.num_finished == 8 and res.summary.num_preemptions == 0
    assert sum(seen) == 8 * 39  # every token after the first, each emitted by a decode tick


@pytest.mark.parametrize("alpha,k,coalesce", [(0.7, 3, True), (0.7, 3, False), (0.5, 5, True), (0.9, 2, True), (0.0, 4, True)])
def test_a_runs_tokens_per_verify_step_match_leviathan_within_its_sampling_error(alpha, k, coalesce):
    """Over a run, the tokens emitted per verify step average E = (1 - a^(k+1)) / (1 - a). Tolerance from the
    variance, not tuned: each step emits X = 1 + leading accepted drafts (P(X = j + 1) = a^j (1 - a) for j < k,
    P(X = k + 1) = a^k), independent, so the mean of N steps is within 5 sd / sqrt(N) of E but for a chance below
    1e-6; a request's last step is cut to what it has left, at most k tokens fewer per request (a bias below
    k R / N, added). Acceptance 0: exactly one token per step."""
    from sim_core.engine import run_simulation
    from tests.conftest import trace_config

    R, L = 12, 801
    cfg = trace_config([100] * R, [L] * R, arrivals=[0.05 * i for i in range(R)], limits__coalesce_ticks=coalesce,
                       scheduler__speculative={"enabled": True, "num_draft_tokens": k, "acceptance_rate": alpha})  # fmt: skip
    s = run_simulation(cfg).summary
    assert s.num_finished == R
    probs = np.array([alpha**j * (1 - alpha) for j in range(k)] + [alpha**k])
    tokens = np.arange(1, k + 2)
    mean = float(probs @ tokens)
    assert mean == pytest.approx(cfg.scheduler.speculative.expected_tokens_per_step())
    sd = float(np.sqrt(probs @ (tokens - mean) ** 2))
    steps = R * (L - 1) / s.spec_tokens_per_step  # every token after the first comes from a verify step
    assert steps == pytest.approx(round(steps))
    assert abs(s.spec_tokens_per_step - mean) <= 5 * sd / np.sqrt(steps) + k * R / steps
    if alpha == 0:
        assert s.spec_tokens_per_step == 1.0


@pytest.mark.parametrize("alpha,coalesce", [(0.0, False), (0.0, True), (1.0, False), (1.0, True)])
def test_a_speculating_decode_holds_kv_slots_for_the_drafts_lookahead(alpha, coalesce):
    """vLLM V1 gives a running request k lookahead slots beyond the 1 + k positions it verifies when the proposer keeps
    KV in the cache (EAGLE/MTP heads and draft models: Scheduler.__init__ sets num_lookahead_tokens = k, and schedule()
    calls KVCacheManager.allocate_slots(request, num_new_tokens, num_lookahead_tokens=k), which allocates up to
    num_computed_tokens + num_new_tokens + num_lookahead_tokens); a request admitted from the queue gets none (its
    num_computed_tokens is 0). The scheduler held only the 1 + k verified positions."""
    from sim_core.engine import run_simulation
    from sim_core.types import Phase
    from tests.conftest import trace_config

    k, prompt, output = 4, 59, 31
    cfg = trace_config([prompt], [output], limits__coalesce_ticks=coalesce,
                       scheduler__speculative={"enabled": True, "num_draft_tokens": k, "acceptance_rate": alpha})  # fmt: skip
    res = run_simulation(cfg, check_invariants=True)
    tl = res.timeline
    assert res.summary.num_finished == 1
    assert tl.phase[0] == Phase.PREFILL and tl.kv_blocks_used[0] == -(-prompt // 16)  # admitted: no lookahead
    dec = np.flatnonzero(tl.phase == Phase.DECODE)[:-1]  # (the last decode tick's row is after the request freed its KV)
    step = 1 + k if alpha == 1.0 else 1  # tokens each verify pass emits
    ctx = prompt + step * np.arange(dec.size)  # KV computed before each decode tick
    assert dec.size == (output - 1) // step - 1
    assert np.array_equal(tl.kv_blocks_used[dec], -(-(ctx + 1 + 2 * k) // 16))


@pytest.mark.parametrize("path", ["scalar core", "coalesced runs"])
def test_a_verify_tick_never_passes_the_token_budget_offline(monkeypatch, path):
    """The review's reproducer: every request at t = 0, prompts of 1-16 tokens, k = 8, 256 sequences, a 2,048-token
    budget. Each decode verified k + 1 = 9 positions whatever the budget: 256 x 9 = 2,304 > 2,048, and ticks reached
    2,187 tokens (243 decodes x 9). vLLM V1's Scheduler.schedule cuts each running request's 1 + k tokens to the
    budget left. Here every decoder's drafts are cut alike to floor(2048 / B) - 1 (Scheduler.verify_width): at
    acceptance 1 a full batch of 256 verifies and emits 8 tokens each, 2,048 a tick; the scalar core and coalesced runs
    (with the core off for speculation), which take cut ticks here, give the same result as tick by tick."""
    from sim_core import fastpath
    from sim_core.engine import Engine, run_simulation
    from tests.sim_core.test_equivalence import count_fast_ticks
    from tests.conftest import make_config
    from tests.sim_core.test_equivalence import assert_same_result

    run_ticks = []
    original = Engine._advance_spec_run

    def counting(engine, plan, planned):
        before = engine.rec.num_ticks
        ran = original(engine, plan, planned)
        run_ticks.append(engine.rec.num_ticks - before)
        return ran

    monkeypatch.setattr(Engine, "_advance_spec_run", counting)
    if path == "coalesced runs":
        monkeypatch.setattr(fastpath, "speculates_here", lambda engine: False)
    fast = count_fast_ticks(monkeypatch)
    results = []
    for coalesce in (False, True):
        cfg = make_config("spec-decode-offline-h200-llama8b", workload__num_requests=300,
                          workload__prompt_tokens={"dist": "uniform", "mean": 8, "min": 1, "max": 16},
                          workload__output_tokens={"dist": "uniform", "mean": 150, "min": 100, "max": 200},
                          scheduler__speculative={"enabled": True, "num_draft_tokens": 8, "acceptance_rate": 1.0},
                          scheduler__max_num_seqs=256, scheduler__max_num_batched_tokens=2048, limits__coalesce_ticks=coalesce)  # fmt: skip
        results.append(run_simulation(cfg, check_invariants=True))
    if path == "coalesced runs":
        assert max(run_ticks) > 1  # the coalesced path ran cut ticks (every decode tick here is cut: 256 x 9 > 2048)
    else:
        assert fast[0] > 0.9 * results[1].timeline.num_ticks
    assert_same_result(*results)
    res = results[1]
    tl = res.timeline
    assert res.summary.num_finished == 300
    assert (tl.num_prefill_tokens + tl.num_decode_tokens).max() == 2048
    full = tl.num_decode_seqs == 256
    assert full.any() and np.array_equal(tl.num_decode_tokens[full], np.full(full.sum(), 2048))
    emitted = tl.num_decode_emitted
    all_decode = full & (tl.num_prefill_tokens == 0)
    assert all_decode.any() and emitted[all_decode].max() == 2048  # 8 per decoder: the cut draft, all accepted
    assert emitted.max() == 2048  # (a tick in which a request finishes emits less)


def test_no_tick_passes_the_token_budget_with_speculation():
    """Generated: whatever the draft length, batch, budget, traffic and prefill mode, a tick's prefill tokens plus
    its decode tokens (the positions verified) stay within max_num_batched_tokens, tick by tick and in coalesced
    runs (which give the same result). (Budgets of at least max_num_seqs: below one token per decoder a decode still advances; and not with
    prefill_first's mix_decodes, whose decodes run outside the budget by design, SGLang's mixed chunk.)"""
    from hypothesis import given
    from hypothesis import strategies as hs

    from sim_core.engine import run_simulation
    from tests.conftest import trace_config
    from tests.sim_core.test_equivalence import assert_same_result
    from tests.strategies import cases

    @cases(25)
    @given(hs.data())
    def check(data):
        k = data.draw(hs.integers(1, 16), label="k")
        seqs = data.draw(hs.integers(1, 40), label="max_num_seqs")
        budget = data.draw(hs.integers(seqs, seqs * (k + 1) + 64), label="max_num_batched_tokens")
        n = data.draw(hs.integers(1, 60), label="requests")
        prompts = data.draw(hs.lists(hs.integers(1, 400), min_size=n, max_size=n), label="prompts")
        outputs = data.draw(hs.lists(hs.integers(1, 80), min_size=n, max_size=n), label="outputs")
        arrivals = sorted(data.draw(hs.lists(hs.floats(0, 0.5), min_size=n, max_size=n), label="arrivals"))
        mode = data.draw(hs.sampled_from(["decode_first", "prefill_first", "quota", "time_slice"]), label="mode")
        alpha = data.draw(hs.sampled_from([0.0, 0.4, 0.8, 1.0]), label="acceptance")
        results = []
        for coalesce in (False, True):
            cfg = trace_config(prompts, outputs, arrivals=arrivals, limits__coalesce_ticks=coalesce,
                               scheduler__prefill_mode=mode, scheduler__max_num_seqs=seqs, scheduler__max_num_batched_tokens=budget,
                               scheduler__speculative={"enabled": True, "num_draft_tokens": k, "acceptance_rate": alpha})  # fmt: skip
            res = run_simulation(cfg, check_invariants=True)
            tl = res.timeline
            assert res.summary.num_finished == n
            assert (tl.num_prefill_tokens + tl.num_decode_tokens).max() <= budget
            results.append(res)
        assert_same_result(*results)

    check()


def test_verify_width_cuts_every_decoders_drafts_alike_to_the_budget():
    """Positions each of B decodes verifies: 1 + k while B x (1 + k) fits the budget, then floor(budget / B), never
    below 1 (a running decode always advances); without speculation always 1."""
    from sim_core.engine import Engine
    from tests.conftest import make_config

    spec = {"enabled": True, "num_draft_tokens": 8}
    s = Engine(make_config(scheduler__speculative=spec, scheduler__max_num_batched_tokens=2048)).sched
    assert [s.verify_width(b) for b in (0, 1, 227, 228, 256, 300, 1024, 2048, 5000)] == [9, 9, 9, 8, 8, 6, 2, 1, 1]
    assert Engine(make_config()).sched.verify_width(5000) == 1


@given(st.integers(1, 8), st.data())
@settings(max_examples=200, deadline=None)
def test_the_rules_values_by_leading_drafts_are_the_rules_wherever_the_tokens_left_cannot_cut(k, data):
    """`Speculator.emitted_by_lead(drafts)[a]` (what the scalar core reads instead of calling the rule for a decoder
    with more tokens left than drafts) is `tokens_emitted(a, drafts, left)` for every leading accepted count a of
    0..k and every such `left`; a decoder nearer its end is not in its domain (the rule's cut binds there)."""
    cfg = spec_cfg(num_draft_tokens=k)
    spec = Speculator(cfg, CostModel(cfg))
    drafts = data.draw(st.integers(0, k))
    left = data.draw(st.integers(drafts + 1, 10**6))
    table = spec.emitted_by_lead(drafts)
    assert len(table) == k + 1
    assert list(table) == [tokens_emitted(a, drafts, left) for a in range(k + 1)]
    assert spec.emitted_by_lead(drafts) is table  # (taken once per draft count)


@given(st.integers(0, 9), st.integers(1, 5000), st.integers(0, 20000))
@settings(max_examples=500, deadline=None)
def test_verify_width_in_comparisons_is_the_budgets_floor_between_1_and_1_plus_k(k, budget, num_decodes):
    """`Scheduler.verify_width`'s comparisons (no builtin min/max, session 51) give max(1, min(1 + k, budget // B)) for
    B decoders, 1 + k with none, and 1 without speculation."""
    from types import SimpleNamespace

    from sim_core.schedulers.scheduler import Scheduler

    s = SimpleNamespace(decode_width=1 + k, cfg=SimpleNamespace(max_num_batched_tokens=budget))
    expected = 1 + k if k == 0 or num_decodes == 0 else max(1, min(1 + k, budget // num_decodes))
    assert Scheduler.verify_width(s, num_decodes) == expected


@pytest.mark.parametrize("draft", [{"draft": "head", "draft_cost_fraction": 0.3}, {"draft": "model"}])
@given(st.lists(st.tuples(st.integers(1, 300), st.integers(0, 400_000)), min_size=1, max_size=30), st.integers(1, 6))
@settings(max_examples=60, deadline=None)
def test_a_ticks_draft_steps_in_ints_price_what_the_array_path_prices(draft, ticks, k):
    """`Speculator.tick_draft_s` (the scalar core calls it with ints, its steps' contexts as a range) equals `draft_s`
    on a scalar and, bit for bit, the array path's sum for each tick (above `SCALAR_DRAFT_STEPS` steps: one array call)
    and its per-tick path below it. (Ticks with decoders: a tick of none has no draft, 0.0, and the array path is
    only given ticks that decode.)"""
    cfg = spec_cfg(num_draft_tokens=k, **draft)
    spec = Speculator(cfg, CostModel(cfg))
    b = np.array([t[0] for t in ticks], dtype=np.int64)
    c = np.array([t[1] for t in ticks], dtype=np.int64)
    each = [spec.tick_draft_s(x, y) for x, y in ticks]
    assert each == spec.draft_s(b, c).tolist()
    assert each == [spec.draft_s(np.int64(x), np.int64(y)) for x, y in ticks]
    # (below SCALAR_DRAFT_STEPS `draft_s` itself calls `tick_draft_s`: the one-array-call path, forced, is the other
    # statement the ints must equal bit for bit)
    with mock.patch("sim_core.speculative.SCALAR_DRAFT_STEPS", 0):
        assert each == spec.draft_s(b, c).tolist()
    wide = np.repeat(b, 50 // (k * len(ticks)) + 1), np.repeat(c, 50 // (k * len(ticks)) + 1)  # (past SCALAR_DRAFT_STEPS)
    assert wide[0].size * k > SCALAR_DRAFT_STEPS
    assert spec.draft_s(*wide).tolist() == [spec.tick_draft_s(x, y) for x, y in zip(*(w.tolist() for w in wide))]
