"""Every lesson's text says what the app shows; each claim is checked on the run of the lesson's
scenario (or its mechanism scenario), on the figures the app draws. Running the scenario (not a
stored number) keeps the lessons honest when the model changes."""

import functools

import pytest

from app.components.claims import holds, observe
from sim_core.lessons import Claim, load_lessons, run_lesson_step


@functools.cache
def _run(lesson_id: str, run: str, step: int):
    lesson = next(x for x in load_lessons() if x.id == lesson_id)
    return run_lesson_step(lesson, step, run)


def test_the_workshop_lessons_say_what_to_look_for():
    core = [x for x in load_lessons() if x.order <= 9]  # the article's nine; later lessons should add claims too
    assert len(core) == 9 and all(x.claims for x in core)


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
        if lesson.mechanism:
            assert lesson.config(0, "mechanism").workload.num_requests <= 8
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
    n0, n1 = counts(lo)
    k0, k1 = (round(t / 1000) for t in prompts(lo))
    assert f"Least outstanding: {n0} / {n1} requests and about {k0}k / {k1}k prompt tokens" in lesson.answer

    def p90(preset: str, router: str):
        s = run_simulation(with_value(load_preset(preset), "deployment.router", router)).summary
        return s.ttft_p90_s, s.prefix_hit_rate_tokens

    kv, rrr = p90("cluster-router-4xh100-llama8b", "least_kv")[0], p90("cluster-router-4xh100-llama8b", "round_robin")[0]
    assert f"TTFT p90 about {kv:.1f} s against {rrr:.1f} s" in lesson.explanation
    (t_rr, h_rr), (t_pa, h_pa), (t_ca, h_ca) = (p90("cluster-prefix-4xh100-llama8b", r) for r in
                                                ("round_robin", "prefix_affinity", "cache_aware"))  # fmt: skip
    assert f"from {h_rr:.0%} to {h_pa:.0%} of prompt tokens".replace("%", " %") in lesson.explanation
    assert f"(about {t_rr:.2f} s to {t_pa:.2f} s)" in lesson.explanation
    assert f"nearly as good ({h_ca:.0%}, {t_ca:.2f} s)".replace("%", " %") in lesson.explanation


def test_the_oom_lesson_quotes_the_memory_split_the_app_shows():
    # it said "~7.3 GiB to ~0.03 GiB" while the error names 7.10 GiB and About 0.72 GiB of workspace and runtime
    from sim_core.costmodel import kv_pool_bytes

    lesson = next(x for x in load_lessons() if x.id == "prefill-oom")
    gib = 2**30
    (_, _, big, _), (_, _, small, kv) = (kv_pool_bytes(lesson.config(step)) for step in (0, 1))
    assert f"~{big / gib:.1f} GiB of activation workspace and runtime" in lesson.explanation
    assert f"from ~{big / gib:.1f} GiB to ~{small / gib:.1f} GiB per GPU" in lesson.answer
    assert f"about {kv / gib:.1f} GiB for KV blocks" in lesson.answer
