"""Learn: guided lessons (data in presets/lessons/). Each: a learning goal, an explanation, the
scenario (and a small "see the mechanism" scenario), the one knob to move, a question, what to look
for (checked on the run), the answer, a button for each other scenario its text names, and a side-by-side run of the knob's two values.

Workshop mode (`?workshop=1`): an agenda with timings, and answers hidden until the presenter
reveals them with `&reveal=1` (or `&reveal=<lesson id>`). Opening a lesson in Simulate keeps its
banner there, with a way back, and in the address (`&lesson=…&lesson_step=…`: a reload or a shared link keeps it).
"""

from __future__ import annotations

import pandas as pd
import streamlit as st

from app.components import config_form, runner, workshop
from app.components.claims import PANEL_METRICS, fmt_metric_value, holds, observe, panel_label, shows
from app.components.text import choices_hint, plain
from app.state import BASE_KEY, CFG_KEY, PRESET_KEY, config_to_query, preset_matching, read_query_params, show_link_notices, write_query_params
from sim_core.lessons import Lesson, load_article, load_lessons, metric_value
from sim_core.presets import load_preset

CHECKS_LABEL = "Check the answer on these runs (what to look for)"


def fmt_metric(metric: str, value: float, strip_zeros: bool = True) -> str:
    kind = PANEL_METRICS.get(metric, (metric, "s" if metric.endswith("_s") else "number"))[1]
    return fmt_metric_value(kind, value, strip_zeros)


def _open_in_simulate(lesson: Lesson, step: int, run: str = "lesson") -> None:
    cfg = lesson.config(step, run)
    _open(cfg, preset_matching(cfg), lesson.side_preset(step, run), (lesson.id, step, run))  # an unmodified preset keeps its name


def _open_also(lesson: Lesson, index: int) -> None:
    """One of the presets the lesson's text names, as it is (banner: the entry's label, not a side of the knob)."""
    name = lesson.also[index].preset
    _open(load_preset(name), name, name, (lesson.id, index, "also"))


def _open(cfg, preset: str | None, base: str, active: tuple[str, int, str]) -> None:
    st.session_state[CFG_KEY] = cfg
    st.session_state[PRESET_KEY] = preset
    st.session_state[BASE_KEY] = preset or base
    st.session_state[workshop.ACTIVE_LESSON_KEY] = active
    config_form.seed_widgets(cfg)
    # (the address names the banner too: a reload, or the address shared, kept the run and lost the lesson)
    st.switch_page("app_pages/simulate.py", query_params={**config_to_query(cfg, preset, base), **workshop.banner_link_params()})


def _revealed(lesson: Lesson, params: dict[str, str]) -> bool | None:
    """None outside workshop mode (answers one click away); else whether the presenter revealed it."""
    if params.get("workshop") != "1":
        return None
    return params.get("reveal") in ("1", "all", lesson.id)


def _stopped(res) -> str | None:
    """Why a run stopped before its requests finished (the server's budget on a busy server), or None."""
    return res.summary.stopped_reason if res is not None else None


def _look_for(lesson: Lesson) -> None:
    """The lesson's claims, each with what this run shows (checked; the tests require them all). A claim on a run
    the server stopped early is not judged: its partial figures say nothing about the lesson (a busy server
    stopped the session lesson's 1,000 requests at the 5 s budget, and every claim on that side read ✗)."""
    lines, stops = [], set()
    labels = workshop.side_labels(lesson)  # (as the buttons name the sides: a deployment's raw dict is unreadable)
    for claim in lesson.claims:
        res = runner.run(lesson.config(claim.step, claim.run)).result
        other_res = runner.run(lesson.config(1 - claim.step, claim.run)).result if claim.than_other_step else None
        side = f"{lesson.knob_label} = {labels[claim.step]}" + (", mechanism scenario" if claim.run == "mechanism" else "")
        stopped = _stopped(res) or _stopped(other_res)
        if stopped:
            stops.add(stopped)
            lines.append(f"? not checked, a run stopped early: “{claim.says}” ({side})")
            continue
        value, other = observe(claim, res), observe(claim, other_res) if claim.than_other_step else None
        lines.append(f"{'✓' if holds(claim, value, other) else '✗ not in this run:'} “{claim.says}” ({side}): "
                     f"{shows(claim, value, other)}")  # fmt: skip
    st.text("\n".join(lines))
    for reason in sorted(stops):
        st.warning(f"**A run stopped early:** {plain(reason)}. Its claims are not checked here; open that side in "
                   "Simulate again when the server is less busy, or run it with the command line.",
                   icon=":material/warning:")  # fmt: skip


def _lesson(lesson: Lesson, params: dict[str, str]) -> None:
    article = load_article()
    st.subheader(f"{lesson.order}. {lesson.title}")
    # (the English title first: a bare Linux without a CJK font draws the Chinese one as boxes)
    st.caption(f"{lesson.minutes} min · source: “{article.title_en}” (“{article.title}”), {article.cite(lesson.article)} · "
               f"scenario {lesson.scenario}")  # fmt: skip
    if lesson.goal:
        st.markdown(f"**Goal.** {lesson.goal}")
    st.markdown(lesson.explanation)
    a, b = labels = workshop.side_labels(lesson)
    st.markdown(f"**The knob:** {lesson.knob_label} (`{lesson.knob}`): from **{a}** to **{b}**.")
    st.markdown(f"**Question.** {lesson.question}")
    c1, c2 = st.container(key="lesson_open").columns(2)  # wide labels: the columns stack on a narrow screen (app CSS)
    if c1.button(f"Open with {lesson.knob_label} = {a}", key=f"learn.open0.{lesson.id}", type="primary"):
        _open_in_simulate(lesson, 0)
    if c2.button(f"Open with {lesson.knob_label} = {b}", key=f"learn.open1.{lesson.id}"):
        _open_in_simulate(lesson, 1)
    if lesson.mechanism:
        n = lesson.config(0, "mechanism").workload.num_requests
        st.markdown(f"**See the mechanism** with {n} requests, where every tick is a visible bar:")
        m1, m2 = st.container(key="lesson_mech").columns(2)
        if m1.button(f"Mechanism, {lesson.knob_label} = {a}", key=f"learn.mech0.{lesson.id}"):
            _open_in_simulate(lesson, 0, "mechanism")
        if m2.button(f"Mechanism, {lesson.knob_label} = {b}", key=f"learn.mech1.{lesson.id}"):
            _open_in_simulate(lesson, 1, "mechanism")
    if lesson.also:
        st.markdown("**Also open** the scenarios the lesson names:")
        for i, entry in enumerate(lesson.also):
            if st.button(plain(entry.label), key=f"learn.also{i}.{lesson.id}", help=f"Scenario {entry.preset}"):
                _open_also(lesson, i)
    with st.expander("Links that set up each side (for instructors)"):
        kept = st.session_state.get(workshop.LEARN_LINK_KEY, {})  # (a workshop's links keep its answers hidden)
        for step in (0, 1):  # each opens Simulate with the lesson's banner
            st.caption(f"{lesson.knob_label} = {labels[step]}:")
            # a few settings on the scenario read as themselves (`&scheduler.max_num_batched_tokens=512`); a config that
            # only an encoding holds (a deployment's pools: 2,685 characters of `cfg=`, neither readable nor editable)
            # is named by its lesson side instead, which Simulate opens as the same config
            settings = config_to_query(lesson.config(step), None, lesson.scenario)
            query = {**({} if "cfg" in settings else settings), **workshop.banner_params((lesson.id, step, "lesson"), kept)}
            st.code(workshop.full_url(query), language=None, wrap_lines=True)
        for i, entry in enumerate(lesson.also):
            st.caption(f"{plain(entry.label)}:")
            query = {"preset": entry.preset, **workshop.banner_params((lesson.id, i, "also"), kept)}
            st.code(workshop.full_url(query), language=None, wrap_lines=True)
        st.caption("This lesson for a workshop (answers hidden), and with its answer revealed:")
        st.code(workshop.full_url({"lesson": lesson.id, "workshop": "1"}, "learn"), language=None, wrap_lines=True)
        st.code(workshop.full_url({"lesson": lesson.id, "workshop": "1", "reveal": lesson.id}, "learn"), language=None, wrap_lines=True)
    revealed = _revealed(lesson, params)
    if revealed is False:
        st.info("The answer, what to look for and the side-by-side numbers appear when the presenter reveals them.",
                icon=":material/visibility_off:")  # fmt: skip
        return
    # Lazy expanders: the runs behind them happen only when opened. The checks quote the answer with its figures, so
    # they come after it (above it, "What to look for" gave the answer away before "Show the answer" was opened).
    both = st.expander("Run both and compare here", expanded=bool(revealed), key=f"learn.both.{lesson.id}", on_change="rerun")
    if both.open:
        _run_both(lesson, both)
    with st.expander("Show the answer", expanded=bool(revealed)):
        st.markdown(lesson.answer)
    if lesson.claims:
        look = st.expander(CHECKS_LABEL, expanded=bool(revealed), key=f"learn.look.{lesson.id}", on_change="rerun")
        if look.open:
            with look:
                _look_for(lesson)


def _run_both(lesson: Lesson, box) -> None:
    """The lesson's metric, then any its question weighs it against, one row each with both sides in it: on a phone
    the two columns stack, and side A's numbers all came before side B's (lesson 11: 1.5 screens apart)."""
    with box:
        labels = workshop.side_labels(lesson)
        cfgs = [lesson.config(step) for step in (0, 1)]
        outs = [runner.run(c) for c in cfgs]
        # the knob named once, each number under its side's value (lesson 11 repeated "Deployment (same 8 GPUs) = " six
        # times, the metric's name the smallest thing in each cell)
        # ("(left) against (right)" was wrong on a phone, where the two columns stack: each figure is labelled by its
        # side's value instead)
        st.caption(f"{plain(lesson.knob_label)}: {plain(labels[0])} against {plain(labels[1])}, each figure under its "
                   "setting")  # fmt: skip
        panel = st.container(key="lesson_both")  # (labels that wrap: app CSS)
        for metric in (lesson.expect.metric, *lesson.also_show):
            label = panel_label(metric, cfgs[0])
            for step, col in enumerate(panel.columns(2)):
                # (trailing zeros kept: "9.17 ms" beside "9 ms" read as two precisions, a review)
                col.metric(str(labels[step]), fmt_metric(metric, metric_value(metric, outs[step].result), strip_zeros=False),
                           label, delta_color="off", delta_arrow="off")  # fmt: skip
        for step, out in enumerate(outs):
            side = f"{lesson.knob_label} = {labels[step]}: "
            if out.error:
                panel.caption(side + plain(config_form.sidebar_words(out.error)))
            elif _stopped(out.result):
                panel.caption(f"{side}stopped early, partial figures: {plain(_stopped(out.result))}")


def _agenda(lessons: tuple[Lesson, ...], pick: str, expanded: bool) -> None:
    """The lessons with their times, as a table (st.text's proportional font left the times' rows out of line). Open only
    on a link that names no lesson: open above a named one, it pushed the lesson below a 1,400x900 screen's fold, and
    two screens down on a phone."""
    total = sum(x.minutes for x in lessons)
    rows, t = [], 0
    for x in lessons:
        rows.append({"minutes": f"{t}–{t + x.minutes}", "lesson": f"{'▶ ' if x.id == pick else ''}{x.order}. {x.title}",
                     "source": x.article})  # fmt: skip
        t += x.minutes
    with st.expander(f"Agenda: {len(lessons)} lessons, {total} minutes", expanded=expanded):
        # (a static table: its cells wrap, where a grid cut the titles on a phone; st.table reads Markdown, so escaped)
        st.table(pd.DataFrame([{k: plain(v) for k, v in row.items()} for row in rows]).set_index("minutes"))


def _step_lesson(ids: list[str], step: int) -> None:
    """The previous (-1) or next (+1) lesson, as if picked (a callback: it runs before the picker is drawn again)."""
    at = ids.index(st.session_state["learn.pick"])
    st.session_state["learn.pick"] = ids[min(max(at + step, 0), len(ids) - 1)]


def main() -> None:
    workshop.page_title("Learn: scheduling, one knob at a time")
    lessons = load_lessons()
    ids = [lesson.id for lesson in lessons]
    params = read_query_params()
    wanted = params.get("lesson")
    if wanted is not None:
        wanted = workshop.lesson_from_link(wanted, ids)  # (?lesson=11: the address then names its id)
    bad = () if wanted is None or wanted in ids or "learn.pick" in st.session_state else (
        f"The link names an unknown lesson {wanted[:60]!r}{choices_hint(wanted, ids)} (or its number, 1-{len(ids)}); "
        "showing the first lesson.",)  # fmt: skip
    show_link_notices(("lesson", "workshop", "reveal"), problems=bad + workshop.workshop_problems(params, ids))
    # A link (or "Back to the lesson") names one: an address this page did not write itself last run. (The
    # address it wrote, e.g. ?lesson=roofline on opening Learn from the menu, is not a link: read as one, it put
    # the radio back on lesson 1 and a class's first pick of another lesson did nothing.)
    if wanted in ids and ("learn.pick" not in st.session_state or st.session_state.get("learn.linked") != wanted):
        st.session_state["learn.pick"] = wanted
    if "learn.pick" not in st.session_state:
        st.session_state["learn.pick"] = ids[0]
    workshop_mode = params.get("workshop") == "1"
    if workshop_mode:
        _agenda(lessons, st.session_state["learn.pick"], expanded=wanted not in ids)
    # One line to pick a lesson, and the next or the one before a click away: a list of all seventeen titles filled a
    # phone's first screen, and six rows of a 1,400-px one, above the lesson itself (a browser review; the workshop's
    # agenda lists them all)
    titles = {x.id: f"{ids.index(x.id) + 1}. {x.title}" for x in lessons}
    row = st.container(horizontal=True, vertical_alignment="bottom", key="learn_pick_row")
    pick = row.selectbox("Lesson", ids, key="learn.pick", format_func=titles.__getitem__, width=520)
    at = ids.index(pick)
    row.button("◀ Previous", key="learn.prev", disabled=at == 0, on_click=_step_lesson, args=(ids, -1),
               help="The lesson before this one")  # fmt: skip
    row.button("Next ▶", key="learn.next", disabled=at == len(ids) - 1, on_click=_step_lesson, args=(ids, 1),
               help="The next lesson")  # fmt: skip
    kept = workshop.usable_workshop_params(params, ids)
    write_query_params({"lesson": pick, **kept})
    st.session_state[workshop.LEARN_LINK_KEY] = kept  # (for "Back to the lesson" on the page a lesson opens)
    st.session_state["learn.linked"] = pick
    st.divider()
    _lesson(next(x for x in lessons if x.id == pick), params)
    article = load_article()
    # (in workshop or presenter mode the foot does not tell the class how to reveal the answers the presenter keeps hidden)
    how = ("" if workshop_mode or workshop.presenter_on() else "Instructors: a lesson is one JSON file in presets/lessons/; add ?workshop=1 to this "
           "page's link for the agenda with answers hidden, and &reveal=1 to reveal them. ")
    st.caption(f"The lessons follow “{article.title_en}” (“{article.title}”), {article.publisher}. {how}"
               "Terms are explained on the Glossary page.")  # fmt: skip


main()
