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
