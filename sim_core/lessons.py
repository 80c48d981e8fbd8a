"""Lessons are data (presets/lessons/*.json): a scenario, one knob with two values to try, a
question, the answer, the direction a metric must move, and the *claims* its text makes about what
the app shows (each checked against the run by the tests). A lesson can name a small "see the
mechanism" scenario (a handful of requests) where the effect is visible tick by tick, the minutes
it takes in a workshop and its learning goal, and (`also`) the other presets its text names, each
opened by a button. The source article is `ARTICLE` (presets/article.json).

An instructor adds a lesson by adding a file; no code changes.
"""

from __future__ import annotations

import functools
import json
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from sim_core.config import SimConfig, format_validation_error
from sim_core.costmodel import MemoryPlanError
from sim_core.engine import run_simulation
from sim_core.inputs import did_you_mean
from sim_core.presets import PRESETS_DIR, PresetError, list_presets, load_preset
from sim_core.result import SimResult, Summary
from sim_core.sweep import with_value
from sim_core.unused import replaced_by_trace

LESSONS_DIR = PRESETS_DIR / "lessons"
SAME_TOLERANCE = 0.05  # "unchanged" in a lesson's text: within 5 %
# A priority class's TTFT p99, for the priority lesson: the class that jumps the queue (0) and the one that pays (1).
CLASS_METRICS = {"ttft_p99_priority0_s": 0, "ttft_p99_priority1_s": 1}


class Expectation(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    metric: str = Field(description="A Summary field, 'fits' (the config runs), or a class's TTFT p99 (CLASS_METRICS).")
    direction: Literal["increase", "decrease"]


class Claim(BaseModel):
    """One thing the lesson's text says the app shows, and where to look for it in the run."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    says: str = Field(description="Words quoted from the lesson's explanation, question or answer.")
    run: Literal["lesson", "mechanism"] = Field("lesson", description="The lesson's scenario or its mechanism scenario.")
    step: Literal[0, 1] = Field(description="The knob's first (0) or second (1) value.")
    view: Literal["gantt", "requests", "roofline", "headline", "classes"] = Field(
        description="gantt/requests: the timeline at the window it opens on; roofline: the roofline chart; "
        "headline: a Summary field; classes: a per-class field of the priority-0 class."
    )
    element: str | None = Field(None, description="gantt: a phase or 'swap'; requests: a state; roofline: a trace "
                                "name; classes: the class's priority (default '0').")
    metric: str | None = Field(None, description="headline/classes: the field compared.")
    at_least: float | None = Field(None, description="Minimum count of the element (default 1) or of the metric.")
    at_most: float | None = Field(None, description="Maximum count of the element or of the metric.")
    than_other_step: Literal["higher", "lower", "same"] | None = Field(
        None, description="This step's value against the other step's ('same': within SAME_TOLERANCE).")


class SeeAlso(BaseModel):
    """A preset the lesson's text asks the student to open (the Learn page gives it a button)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    label: str = Field(min_length=1, max_length=120, pattern=r"\S", description="The button's text (shown as typed).")
    preset: str = Field(description="A scenario preset (presets/scenarios/<name>.json).")


# Where a run's figures are read on Simulate: its headline or one of its views (presenter mode shows one at a time)
LessonView = Literal["Headline", "Timeline", "Latency", "Roofline", "Step through", "Requests"]
LESSON_VIEWS: tuple[str, ...] = LessonView.__args__
DEFAULT_VIEW: LessonView = "Timeline"  # where a run opens unless its lesson says otherwise (presenter mode's first focus)


class Lesson(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    id: str
    order: int
    title: str
    article: str = Field(description="Section of the source article the lesson illustrates.")
    minutes: int = Field(5, ge=1, le=60, description="Workshop time for the lesson (agenda).")
    goal: str = Field("", description="Learning goal: what a student can explain afterwards.")
    explanation: str
    scenario: str
    mechanism: str | None = Field(None, description="A small scenario (a handful of requests) that shows the mechanism.")
    overrides: dict[str, Any] = Field(default_factory=dict, description="dotted.path -> value applied to the scenario")
    knob: str
    knob_label: str
    values: tuple[Any, Any] = Field(description="The knob's value before and after the move.")
    value_labels: tuple[str, str] | None = Field(
        None, description="How the two values are shown (for values that are whole sections); default: the values."
    )
    question: str
    answer: str
    expect: Expectation
    # (lesson 1 asks whether TTFT or TPOT suffers more, and its panel showed TPOT alone)
    also_show: tuple[str, ...] = Field((), max_length=3, description="More metrics the Run-both panel shows after "
                                       "expect.metric, for a question that weighs several: Summary fields or CLASS_METRICS.")
    claims: tuple[Claim, ...] = ()
    also: tuple[SeeAlso, ...] = Field((), description="Presets the lesson's text refers to, each opened by a button.")
    # (a review in presenter mode: six lessons quote headline figures, and their links opened on the timeline)
    opens_on: LessonView = Field(DEFAULT_VIEW, description="Where the lesson's runs open on Simulate (the view its answer "
                                 "reads; in presenter mode the one shown). A mechanism run opens on the timeline.")

    def config(self, step: int = 0, run: str = "lesson") -> SimConfig:
        """The scenario (or the mechanism scenario) with the overrides and the knob at values[step]."""
        cfg = load_preset(self.side_preset(step, run))
        for path, value in self.overrides.items():
            # (a mechanism scenario replays its few requests: a rate means nothing, and the lesson scenario's length,
            # set so that its run reaches a steady state, is not the mechanism's: its point is a handful of rows)
            if not replaced_by_trace(cfg, path) and not (cfg.workload.trace is not None and path == "workload.num_requests"):
                cfg = with_value(cfg, path, value)
        return with_value(cfg, self.knob, self.values[step])

    def side_preset(self, step: int, run: str = "lesson") -> str:
        """The scenario preset a side of the lesson is built on: its mechanism scenario (when it has one) for run
        "mechanism", the step-th preset its text names for "also", else its scenario."""
        if run == "also":
            return self.also[step].preset
        return self.mechanism if run == "mechanism" and self.mechanism else self.scenario

    def side_config(self, step: int, run: str = "lesson") -> SimConfig:
        """The config a side of the lesson opens: `run` "lesson" or "mechanism" at the knob's step, or "also": the
        step-th preset its text names, as it is (the page's banner and a link naming only the lesson read it)."""
        return load_preset(self.side_preset(step, run)) if run == "also" else self.config(step, run)

    @property
    def side_labels(self) -> tuple[Any, Any]:
        """How the two sides are named (buttons, metrics, checked claims, workshop): value_labels, else the values."""
        return self.value_labels or self.values

    @property
    def text(self) -> str:
        return " ".join((self.explanation, self.question, self.answer))


def parse_lesson(raw: Any, source: str) -> Lesson:
    """One lesson file's JSON as a Lesson, every preset it names checked.

    Raises:
        PresetError: naming the lesson (`source`), the field and the value.
    """
    try:
        lesson = Lesson.model_validate(raw)
    except ValidationError as err:
        raise PresetError(format_validation_error(err, f"lesson {source}", Lesson)) from None
    for i, metric in enumerate(lesson.also_show):
        if metric not in Summary.model_fields and metric not in CLASS_METRICS:
            raise PresetError(f"lesson {source}: also_show[{i}] = {metric[:80]!r}: not a metric of a run's summary"
                              f"{did_you_mean(metric, [*Summary.model_fields, *CLASS_METRICS])}")  # fmt: skip
    named = [("scenario", lesson.scenario), ("mechanism", lesson.mechanism)]
    named += [(f"also[{i}].preset", x.preset) for i, x in enumerate(lesson.also)]
    for field, name in named:
        if name is not None and name not in list_presets():
            shown = name if len(name) <= 80 else name[:77] + "..."
            raise PresetError(f"lesson {source}: {field} = {shown!r}: unknown scenario preset")
    return lesson


@functools.cache
def load_lessons() -> tuple[Lesson, ...]:
    lessons = []
    for path in sorted(LESSONS_DIR.glob("*.json")):
        try:
            raw = json.loads(path.read_text())
        except json.JSONDecodeError as err:
            raise PresetError(f"lesson {path.name}: {err}") from None
        lessons.append(parse_lesson(raw, path.name))
    return tuple(sorted(lessons, key=lambda x: x.order))


def metric_value(metric: str, result: SimResult | None) -> float:
    """A lesson's metric for one run; 'fits' is 1 when the config ran and 0 when it did not fit."""
    if metric == "fits":
        return 0.0 if result is None else 1.0
    if result is None:
        return float("nan")
    if metric in CLASS_METRICS:
        r = result.requests
        v = r.ttft_s[(r.priority == CLASS_METRICS[metric]) & r.is_finished]
        return float(np.percentile(v, 99)) if v.size else float("nan")
    return float(getattr(result.summary, metric))


def run_lesson_step(lesson: Lesson, step: int, run: str = "lesson") -> SimResult | None:
    """Run one side of the lesson; None when the config does not fit in memory (the OOM lesson)."""
    try:
        return run_simulation(lesson.config(step, run))
    except MemoryPlanError:
        return None


class Article(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    title: str
    title_en: str
    publisher: str
    file: str = Field(description="Where the text lives in the project's shared material.")
    sections: dict[str, str] = Field(description="'§2.1' -> the section's title (Chinese · English).")

    def cite(self, refs: str) -> str:
        """'§2.2, §4.2' -> '§2.2 Exclusive vs time-sharing vs mixed scheduling (典型调度模式对比); §4.2 …': the English
        first, as the title's (a browser without a CJK font draws the Chinese as boxes, and a reader without Chinese
        reads the English)."""
        parts = [r.strip() for r in refs.split(",")]

        def section(ref: str) -> str:
            zh, _, en = self.sections[ref].partition(" · ")
            return f"{ref} {en} ({zh})" if en else f"{ref} {zh}"

        return "; ".join(section(r) if r in self.sections else r for r in parts)


@functools.cache
def load_article() -> Article:
    return Article.model_validate(json.loads((PRESETS_DIR / "article.json").read_text()))
