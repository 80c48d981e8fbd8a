"""Presenter-mode styling scales every chart text; normal mode leaves the cached figure untouched; a Simulate link's
lesson banner is read, and written back, as the same banner."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.components import timeline, workshop
from sim_core import run_simulation
from sim_core.lessons import load_lessons
from tests.conftest import make_config
from tests.strategies import cases


def test_presenter_mode_scales_every_text_of_a_copy():
    fig = timeline.timeline_figure(run_simulation(make_config(workload__num_requests=20)))
    big = workshop.style_figure(fig, presenter=True)
    size = workshop.PRESENTER_FONT_PX
    assert big is not fig and fig.layout.font.size is None  # the cached figure stays as built
    assert big.layout.font.size == size and big.layout.legend.font.size == size - 1
    assert big.layout.xaxis4.tickfont.size == size - 1
    sizes = [(a.font.size, b.font.size) for a, b in zip(fig.layout.annotations, big.layout.annotations, strict=True)]
    assert (16, size + 1) in sizes and (11, 18) in sizes  # subplot titles take a title's size; a label grows in proportion
    assert all(after == (size + 1 if before == 16 else 18) for before, after in sizes), sizes
    assert big.layout.height > fig.layout.height
    assert workshop.style_figure(fig, presenter=False) is fig


def test_presenter_mode_scales_a_titles_own_spans_and_a_plots_labels_in_proportion():
    # (a review: Compare's "SLO 2,000 ms (off the chart, right)" kept its 12 px, and Sweep's 10-px SLO labels at a
    # title's 21 px covered the curves they label)
    import plotly.graph_objects as go

    fig = go.Figure(layout=dict(title=dict(text="TTFT<br><span style='font-size:12px'>SLO 2,000 ms</span>", font_size=14)))
    fig.add_annotation(text="TPOT SLO 100 ms", font=dict(size=10), x=0, y=0)
    fig.add_annotation(text="a subplot's title", font=dict(size=16), x=0, y=1)
    big = workshop.style_figure(fig, presenter=True)
    assert big.layout.title.text == "TTFT<br><span style='font-size:18px'>SLO 2,000 ms</span>"  # 12 x 21 / 14
    assert [a.font.size for a in big.layout.annotations] == [17, 21]  # 10 x 20 / 12; 16 x 20 / 12 = 27, past a title's 21


def test_every_chart_is_drawn_through_show_chart():
    # (Sweep and Plan called st.plotly_chart themselves, so presenter mode left their text at its normal size and Plan's
    # axis title fell on its legend at 1280x720, a review)
    from pathlib import Path

    app_dir = Path(workshop.__file__).resolve().parents[1]
    callers = [str(p.relative_to(app_dir)) for p in app_dir.rglob("*.py")
               if "st.plotly_chart(" in p.read_text() and p.name != "workshop.py"]  # fmt: skip
    assert callers == []


def test_a_full_url_without_a_browser_is_the_query():
    assert workshop.full_url({"preset": "chat-h100-llama8b"}) == "?preset=chat-h100-llama8b"


# Simulate's link names the lesson banner it shows (a reload or a shared "Open with…" address lost it)
LESSON_VALUES = st.one_of(st.text(max_size=12), st.sampled_from(["roofline", "kv-preemption", "split-prefill-decode", "11",
                                                                "0", "99", "lesson", "mechanism", "also", "1", "2", "٣"]))
LESSON_LINKS = st.dictionaries(st.sampled_from(workshop.LESSON_LINK_PARAMS), LESSON_VALUES, max_size=5)


@cases(300)
@given(LESSON_LINKS)
def test_any_lesson_link_gives_a_banner_it_can_show_or_says_why_not(params):
    lessons = load_lessons()
    active, problems = workshop.banner_from_params(params, lessons)
    if active is None:
        # every value it did not use is named, as text, with what it takes
        named = [k for k in workshop.LESSON_LINK_PARAMS if k in params]
        assert problems or not named, (params, problems)
        for problem in problems:
            assert problem.startswith("The link") and ("allowed" in problem or "names none" in problem), problem
    else:
        lesson_id, step, run = active
        lesson = next(x for x in lessons if x.id == lesson_id)
        assert not problems
        assert (lesson.config(step, run) if run != "also" else lesson.also[step]) is not None  # a side it can open
        # and written back, the link names the same banner (the address a reload reads)
        again = workshop.banner_params(active, {})
        assert workshop.banner_from_params(again, lessons) == (active, ())


@pytest.mark.parametrize("params, says", [
    ({"lesson": "nope"}, "unknown lesson 'nope'"),
    ({"lesson": "roofline", "lesson_run": "mechanism"}, "lesson_run = 'mechanism' is not used (allowed for lesson 'roofline': lesson)"),
    ({"lesson": "kv-preemption", "lesson_step": "2"}, "lesson_step = '2' is not used (allowed for lesson 5: 0 or 1: its first side is 0, its second 1)"),
    ({"lesson": "3", "lesson_run": "mechanism", "lesson_step": "x"}, "(allowed for lesson 3, lesson_run = 'mechanism': 0 or 1"),
    ({"lesson": "11", "lesson_run": "also", "lesson_step": "9"}, "(allowed for lesson 11, lesson_run = 'also': 0-2, the presets its text names, counted from 0)"),
    ({"lesson_step": "1"}, "lesson_step = '1' is not used: it goes with a lesson (lesson=…)"),
])  # fmt: skip
def test_a_lesson_link_value_it_cannot_use_is_named_with_what_it_takes(params, says):
    active, problems = workshop.banner_from_params(params, load_lessons())
    assert active is None and says in " ".join(problems), problems


def test_a_lesson_number_in_a_link_names_that_lesson():
    lessons = load_lessons()
    assert workshop.banner_from_params({"lesson": "11", "lesson_step": "1"}, lessons) == ((lessons[10].id, 1, "lesson"), ())
    assert workshop.lesson_from_link("99", [x.id for x in lessons]) == "99"


def test_every_lessons_every_side_round_trips_through_its_link():
    lessons = load_lessons()
    sides = [(x.id, step, run) for x in lessons for run, num in (("lesson", 2), ("mechanism", 2 if x.mechanism else 0),
                                                                   ("also", len(x.also))) for step in range(num)]  # fmt: skip
    assert any(run == "also" for _, _, run in sides) and any(run == "mechanism" for _, _, run in sides)
    kept = {"workshop": "1", "reveal": "all"}
    for active in sides:
        params = workshop.banner_params(active, kept)
        assert workshop.banner_from_params(params, lessons) == (active, ()), params
        assert workshop.usable_workshop_params(params, [x.id for x in lessons]) == kept


def test_a_lessons_knob_is_named_as_the_sidebar_names_its_control():
    # a review: the banner's "Token budget / chunk (tokens)" beside the sidebar's "Token budget / chunk size (tokens per
    # tick)", "Prefix caching" beside "Prefix caching (reuse cached prompt blocks)": a student looked for a name not there
    from app.components import config_form, deployment_form

    labels = {spec.path: spec.label for spec in config_form.ALL_SPECS} | deployment_form.LABELS
    named = [(x.order, x.knob_label, labels[x.knob]) for x in load_lessons() if x.knob in labels]
    assert len(named) >= 15 and all(mine == theirs for _, mine, theirs in named), named
