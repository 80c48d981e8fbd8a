"""Learn: guided lessons (data in presets/lessons/). Each: an explanation, the scenario link, the one
knob to move, a question, the answer on demand, and a side-by-side run of the knob's two values."""

from __future__ import annotations

import numpy as np
import streamlit as st

from app.components import config_form, runner
from app.components.text import plain
from app.state import BASE_KEY, CFG_KEY, PRESET_KEY, config_to_query, read_query_params, show_link_notices, write_query_params
from sim_core.lessons import Lesson, load_lessons, metric_value

METRIC_LABELS = {
    "tpot_p50_s": ("TPOT p50", 1e3, "ms"), "output_tokens_per_s": ("output throughput", 1, "tok/s"),
    "itl_p99_s": ("ITL p99", 1e3, "ms"), "num_recomputed_tokens": ("recomputed tokens", 1, ""),
    "fits": ("fits in memory (1 = yes)", 1, ""), "ttft_p99_priority0_s": ("TTFT p99 of the priority-0 class", 1e3, "ms"),
    "mean_batch_size": ("mean batch", 1, "seqs"),
}  # fmt: skip


def _open_in_simulate(lesson: Lesson, step: int) -> None:
    cfg = lesson.config(step)
    st.session_state[CFG_KEY] = cfg
    st.session_state[PRESET_KEY] = None
    st.session_state[BASE_KEY] = lesson.scenario
    config_form.seed_widgets(cfg)
    st.switch_page("app_pages/simulate.py", query_params=config_to_query(cfg, None, lesson.scenario))


def _lesson(lesson: Lesson) -> None:
    st.subheader(f"{lesson.order}. {lesson.title}")
    st.caption(f"Source article {lesson.article} · scenario `{lesson.scenario}`")
    st.markdown(lesson.explanation)
    a, b = lesson.values
    st.markdown(f"**The knob:** {lesson.knob_label} (`{lesson.knob}`): from **{a}** to **{b}**.")
    st.markdown(f"**Question.** {lesson.question}")
    c1, c2 = st.columns(2)
    if c1.button(f"Open with {lesson.knob_label} = {a}", key=f"learn.open0.{lesson.id}", type="primary"):
        _open_in_simulate(lesson, 0)
    if c2.button(f"Open with {lesson.knob_label} = {b}", key=f"learn.open1.{lesson.id}"):
        _open_in_simulate(lesson, 1)
    from urllib.parse import urlencode

    with st.expander("Links that set up each side (for instructors)"):
        for step in (0, 1):
            st.caption(f"{lesson.knob_label} = {lesson.values[step]} — append to the app's address:")
            st.code("?" + urlencode(config_to_query(lesson.config(step), None, lesson.scenario)), language=None, wrap_lines=True)
    with st.expander("Run both and compare here"):
        label, scale, unit = METRIC_LABELS.get(lesson.expect.metric, (lesson.expect.metric, 1, ""))
        cols = st.columns(2)
        for step, col in enumerate(cols):
            out = runner.run(lesson.config(step))
            value = metric_value(lesson.expect.metric, out.result)
            shown = "does not fit" if out.result is None and lesson.expect.metric == "fits" else (
                "–" if np.isnan(value) else f"{value * scale:,.1f} {unit}")  # fmt: skip
            col.metric(f"{lesson.knob_label} = {lesson.values[step]}", shown, label, delta_color="off")
            if out.error:
                col.caption(plain(out.error))
    with st.expander("Show the answer"):
        st.markdown(lesson.answer)


def main() -> None:
    st.title("Learn: scheduling, one knob at a time")
    lessons = load_lessons()
    ids = [lesson.id for lesson in lessons]
    wanted = read_query_params().get("lesson")
    bad = () if wanted is None or wanted in ids or "learn.pick" in st.session_state else (
        f"The link names an unknown lesson {wanted[:60]!r}; showing the first lesson.",)  # fmt: skip
    show_link_notices(("lesson",), problems=bad)
    if "learn.pick" not in st.session_state:
        st.session_state["learn.pick"] = wanted if wanted in ids else ids[0]
    pick = st.radio("Lesson", ids, key="learn.pick", horizontal=True,
                    format_func=lambda i: f"{ids.index(i) + 1}. {next(x.title for x in lessons if x.id == i)}")  # fmt: skip
    write_query_params({"lesson": pick})
    st.divider()
    _lesson(next(x for x in lessons if x.id == pick))
    st.caption("Instructors: a lesson is one JSON file in presets/lessons/; share this page's link to open it directly.")


main()
