"""Each lesson's knob moves its metric in the direction the lesson claims."""

import re
from pathlib import Path

import pytest

from sim_core.lessons import load_lessons, metric_value, run_lesson_step


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
    readme = (Path(__file__).parents[2] / "README.md").read_text()
    counted = re.findall(r"the (\w+) (?:\*\*Learn\*\* )?lessons", readme)
    assert counted and set(counted) == {words[len(lessons)]}, counted
    assert f"with their timings ({sum(x.minutes for x in lessons)} minutes)" in readme
