"""Lessons are data (presets/lessons/*.json): a scenario, one knob with two values to try, a
question, the answer, and the direction a metric must move (checked by the tests).

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
from sim_core.presets import PRESETS_DIR, PresetError, list_presets, load_preset
from sim_core.result import SimResult
from sim_core.sweep import with_value

LESSONS_DIR = PRESETS_DIR / "lessons"


class Expectation(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    metric: str = Field(description="A Summary field, 'fits' (the config runs), or 'ttft_p99_priority0_s'.")
    direction: Literal["increase", "decrease"]


class Lesson(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    id: str
    order: int
    title: str
    article: str = Field(description="Section of the source article the lesson illustrates.")
    explanation: str
    scenario: str
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

    def config(self, step: int = 0) -> SimConfig:
        """The scenario with the overrides and the knob at values[step]."""
        cfg = load_preset(self.scenario)
        for path, value in self.overrides.items():
            cfg = with_value(cfg, path, value)
        return with_value(cfg, self.knob, self.values[step])


@functools.cache
def load_lessons() -> tuple[Lesson, ...]:
    lessons = []
    for path in sorted(LESSONS_DIR.glob("*.json")):
        try:
            lesson = Lesson.model_validate(json.loads(path.read_text()))
        except (ValidationError, json.JSONDecodeError) as err:
            detail = format_validation_error(err, f"lesson {path.name}") if isinstance(err, ValidationError) else str(err)
            raise PresetError(detail) from None
        if lesson.scenario not in list_presets():
            raise PresetError(f"lesson {path.name}: unknown scenario {lesson.scenario!r}")
        lessons.append(lesson)
    return tuple(sorted(lessons, key=lambda x: x.order))


def metric_value(metric: str, result: SimResult | None) -> float:
    """A lesson's metric for one run; 'fits' is 1 when the config ran and 0 when it did not fit."""
    if metric == "fits":
        return 0.0 if result is None else 1.0
    if result is None:
        return float("nan")
    if metric == "ttft_p99_priority0_s":
        r = result.requests
        v = r.ttft_s[(r.priority == 0) & r.is_finished]
        return float(np.percentile(v, 99)) if v.size else float("nan")
    return float(getattr(result.summary, metric))


def run_lesson_step(lesson: Lesson, step: int) -> SimResult | None:
    """Run one side of the lesson; None when the config does not fit in memory (the OOM lesson)."""
    try:
        return run_simulation(lesson.config(step))
    except MemoryPlanError:
        return None
