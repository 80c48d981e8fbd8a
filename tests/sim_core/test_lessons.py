"""Each lesson's knob moves its metric in the direction the lesson claims."""

import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs

from sim_core.lessons import load_lessons, metric_value, run_lesson_step
from tests import documents


def test_there_are_at_least_eight_lessons_covering_the_article():
    lessons = load_lessons()
    assert len(lessons) >= 8
    covered = " ".join(x.article for x in lessons)
    for section in ("§1", "§2.1", "§3.1", "§4.1", "§5.1", "§5.2", "§5.3"):
        assert section in covered


@pytest.mark.parametrize("lesson", load_lessons(), ids=lambda x: x.id)
def test_the_knob_moves_the_metric_as_claimed(lesson):
    before = metric_value(lesson.expect.metric, run_lesson_step(lesson, 0))
    after = metric_value(lesson.expect.metric, run_lesson_step(lesson, 1))
    if lesson.expect.direction == "increase":
        assert after > before
    else:
        assert after < before


def test_the_priority_lesson_shows_who_pays_the_batch_classs_longer_tail():
    # "who pays for it?": the Run-both panel showed the interactive class's p99 alone; the batch class (priority 1)
    # is a class metric too, and its tail grows where the interactive one's falls
    lesson = next(x for x in load_lessons() if x.id == "priority-tail")
    fcfs, priority = run_lesson_step(lesson, 0), run_lesson_step(lesson, 1)
    assert "ttft_p99_priority1_s" in lesson.also_show
    assert metric_value("ttft_p99_priority0_s", priority) < metric_value("ttft_p99_priority0_s", fcfs)
    assert metric_value("ttft_p99_priority1_s", priority) > metric_value("ttft_p99_priority1_s", fcfs)
    r = priority.requests  # (the class's own percentile, not the run's)
    assert metric_value("ttft_p99_priority1_s", priority) == np.percentile(r.ttft_s[(r.priority == 1) & r.is_finished], 99)


@pytest.mark.parametrize("lesson", load_lessons(), ids=lambda x: x.id)
def test_a_lesson_run_is_long_enough_to_settle_unless_it_is_about_a_short_run(lesson):
    # lessons 1, 3, 4, 10 and 11 ran 200-400 requests: a side's warm-up ended before a request's mean end-to-end time,
    # so the page hid its steady window under "Too short to say ... Run about 500 requests or more", beside a question
    # about something else. An overloaded side (the lesson's point: static batching, KV pressure) and a demonstration-
    # sized run (its one-line caption) keep their notes; the short-benchmark lesson is about that note.
    from sim_core.metrics import MIN_STEADY_REQUESTS, SHORT_NOTE

    if lesson.id == "short-benchmark":
        return
    for step in (0, 1):
        res = run_lesson_step(lesson, step)
        steady = res.summary.steady if res is not None else None
        if steady is None or steady.num_requests < MIN_STEADY_REQUESTS:
            continue
        assert not (steady.note or "").startswith(SHORT_NOTE), (step, steady.note)


def test_lesson_numbers_are_unique_and_match_their_files():
    """The Learn page lists lessons by position and heads each with its `order`: the two must agree (two
    lessons once both read 10 and 11, so a lesson's heading and cross-references named another lesson)."""
    from sim_core.lessons import LESSONS_DIR

    lessons = load_lessons()
    assert [x.order for x in lessons] == list(range(1, len(lessons) + 1))
    files = sorted(p.name for p in LESSONS_DIR.glob("*.json"))
    assert [int(name.split("-")[0]) for name in files] == [x.order for x in lessons]


def test_the_readme_counts_the_lessons_and_their_minutes():
    # the README said "nine lessons ... (45 minutes)" after six more lessons had been added (15 lessons, 75 minutes)
    words = {9: "nine", 10: "ten", 11: "eleven", 12: "twelve", 13: "thirteen", 14: "fourteen", 15: "fifteen",
             16: "sixteen", 17: "seventeen", 18: "eighteen", 19: "nineteen", 20: "twenty"}  # fmt: skip
    lessons = load_lessons()
    for name in ("README", "workshop"):  # (the tour and the short section; the workshop's agenda in full)
        readme = documents.text(name)
        counted = re.findall(r"the (\w+) (?:\*\*Learn\*\* )?lessons", readme)
        assert counted and set(counted) == {words[len(lessons)]}, (name, counted)
        assert f"with their timings ({sum(x.minutes for x in lessons)} minutes)" in documents.prose(name), name


def _lesson_file(name: str) -> dict:
    import json

    from sim_core.lessons import LESSONS_DIR

    return json.loads(next(LESSONS_DIR.glob(f"*-{name}.json")).read_text())


def test_a_lesson_names_the_presets_its_text_refers_to():
    # lesson 11 asked the student to "open the DistServe pair" with no way to open it but the sidebar's dropdown
    lesson = next(x for x in load_lessons() if x.id == "split-prefill-decode")
    assert [x.preset for x in lesson.also] == ["cluster-distserve-opt13b-3xa100-colocated", "cluster-distserve-opt13b-3xa100-p2d1",
                                               "cluster-dynamo-llama70b-fp8-8xh100-3p1d"]  # fmt: skip
    assert lesson.also[0].preset in lesson.question
    # the answer's "the 3P1D preset streams it from the decode side" read as this lesson's own right side (3 prefill +
    # 1 decode), a review: it names the Dynamo scenario, which the student can now open
    assert "cluster-dynamo-llama70b-fp8-8xh100-3p1d (under Also open; not this lesson's right side)" in lesson.answer


def test_every_preset_a_lesson_text_names_can_be_opened_from_it():
    """A scenario preset named in a lesson's text is its scenario, its mechanism scenario or one of its `also` entries."""
    from sim_core.presets import list_presets

    for lesson in load_lessons():
        named = {p for p in list_presets() if re.search(rf"(?<![\w-]){re.escape(p)}(?![\w-])", lesson.text + " " + lesson.goal)}
        openable = {lesson.scenario, lesson.mechanism, *(x.preset for x in lesson.also)}
        assert named <= openable, (lesson.id, named - openable)


def test_an_unknown_also_preset_is_named_with_its_lesson_and_field():
    from sim_core.lessons import parse_lesson
    from sim_core.presets import PresetError

    raw = _lesson_file("split-prefill-decode")
    raw["also"] = [{"label": "ok", "preset": "cluster-distserve-opt13b-3xa100-p2d1"}, {"label": "typo", "preset": "no-such-preset"}]
    with pytest.raises(PresetError) as err:
        parse_lesson(raw, "11-split-prefill-decode.json")
    msg = str(err.value)
    assert "11-split-prefill-decode.json" in msg and "also[1].preset" in msg and "'no-such-preset'" in msg


_SCALARS = hs.none() | hs.booleans() | hs.integers() | hs.floats(allow_nan=True) | hs.text(max_size=30)
_JUNK = hs.recursive(_SCALARS, lambda c: hs.lists(c, max_size=3) | hs.dictionaries(hs.text(max_size=8), c, max_size=3), max_leaves=8)
_ENTRY = hs.fixed_dictionaries({"label": _JUNK, "preset": _JUNK}) | hs.fixed_dictionaries(
    {"label": hs.text(max_size=20), "preset": hs.text(max_size=40)}, optional={"extra": _JUNK})


@settings(max_examples=150, deadline=None)
@given(value=_JUNK | hs.lists(_ENTRY, min_size=1, max_size=3))
def test_junk_also_values_are_refused_with_a_message_not_a_crash(value):
    from sim_core.lessons import parse_lesson
    from sim_core.presets import PresetError, list_presets

    raw = _lesson_file("split-prefill-decode")
    try:
        lesson = parse_lesson({**raw, "also": value}, "11-split-prefill-decode.json")
    except PresetError as err:
        assert str(err).startswith(("Invalid lesson 11-split-prefill-decode.json", "lesson 11-split-prefill-decode.json: also"))
        return
    # accepted only as no entries, or entries naming real presets with a visible label
    assert all(x.preset in list_presets() and x.label.strip() for x in lesson.also)


def test_the_readme_counts_the_mechanism_scenarios_and_their_requests():
    # it said "Five lessons also have a see the mechanism scenario of 6-8 requests" while the chunk-size lesson's has 4
    # (a 4,096-token prompt arriving while three requests decode, as its text says)
    words = {3: "Three", 4: "Four", 5: "Five", 6: "Six", 7: "Seven", 8: "Eight", 9: "Nine", 10: "Ten"}
    sizes = [x.config(0, "mechanism").workload.num_requests for x in load_lessons() if x.mechanism]
    readme = documents.prose("workshop")  # (Running a workshop, in full)
    assert (f"{words[len(sizes)]} lessons also have a **see the mechanism** scenario of {min(sizes)}–{max(sizes)} "
            f"requests") in readme  # fmt: skip


def test_each_side_has_one_label_the_buttons_checks_and_workshop_all_read():
    # 'value_labels or values' was restated in four places (Learn's knob line, metrics and checked lines, workshop)
    for lesson in load_lessons():
        assert lesson.side_labels == (lesson.value_labels or lesson.values)
        assert all(isinstance(x, str) and x and not x.startswith("{") for x in map(str, lesson.side_labels))


def test_an_article_section_is_cited_english_first_with_its_chinese_title_after():
    # a review: "§1 Prefill与Decode…" led the lesson's source line, drawn as boxes where the browser has no CJK font
    from sim_core.lessons import load_article

    article = load_article()
    for ref, title in article.sections.items():
        zh, _, en = title.partition(" · ")
        assert article.cite(ref) == f"{ref} {en} ({zh})"
    assert article.cite("§2.2, beyond the article").endswith("(典型调度模式对比); beyond the article")


def test_a_lesson_opens_on_the_view_its_answer_reads():
    # a review: lessons whose every claim is a headline figure opened on the timeline (11, 14), and lesson 12, whose
    # question sends the room to the Requests tab, too; the timeline stays for a question about one of its panels
    for lesson in load_lessons():
        views = {c.view for c in lesson.claims}
        if views == {"headline"}:
            named = lesson.opens_on in lesson.question or (lesson.opens_on == "Timeline" and "panel" in lesson.question)
            assert lesson.opens_on == "Headline" or named, (lesson.order, lesson.opens_on, lesson.question)
