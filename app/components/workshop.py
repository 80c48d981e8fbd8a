"""Workshop helpers shared by the pages: presenter-mode charts, the lesson banner kept on the page a
lesson opened, and full share URLs.

Presenter mode (a sidebar toggle, or `?present=1` in a link) sets the page's root font larger,
collapses the sidebar and shows one chart at a time; `show_chart` scales every chart's text with it
(titles, ticks, legends, hover) so a projector at the back of a room stays readable.
"""

from __future__ import annotations

import re
from urllib.parse import urlencode

import plotly.graph_objects as go
import streamlit as st

from app.components.text import choices_hint, plain
from app.components.units import fmt_setting
from app.state import PRESENTER_KEY, derived
from sim_core import SimConfig
from sim_core.lessons import DEFAULT_VIEW, Lesson

ACTIVE_LESSON_KEY = "learn.active"  # (lesson id, step, run) of the lesson that opened this page; run "also": step
# is the index of the `also` entry opened
LEARN_LINK_KEY = "learn.link_params"  # the Learn page's workshop values (workshop, reveal) when it opened a lesson:
# "Back to the lesson" keeps them (it dropped ?workshop=1, and the class's way back showed every answer)
WORKSHOP_PARAMS = ("workshop", "reveal")  # the Learn page's workshop values, kept in a lesson's links
# Simulate's link names the lesson banner it shows (a reload or a shared "Open with…" address lost it: the class saw the
# run without its question or a way back): the lesson, the side (a step of its knob, or an `also` entry) and the kind
LESSON_LINK_PARAMS = ("lesson", "lesson_step", "lesson_run", *WORKSHOP_PARAMS)
LESSON_RUNS = ("lesson", "mechanism", "also")
FOCUS_KEY, LAST_FOCUS_KEY = "ui.focus", "ui.focus_last"  # presenter mode's one view (Simulate's focus row)
TAB_KEY = "ui.tab"  # Simulate's tabs
LESSON_LINK_READ_KEY = "learn.link_read"  # the banner values Simulate last took from its link: a closed banner stays
# closed on the reruns before the address is written without it
PRESENTER_FONT_PX = 20  # chart body text in presenter mode; titles +1, ticks and legends -1 (Plotly's default: PLOTLY_FONT_PX)
PRESENTER_EXTRA_HEIGHT_PX = 220
PLOTLY_FONT_PX = 12  # Plotly's default text size
PLOTLY_TITLE_PX = 17  # and its title's (1.4 times it)
_SPAN_PX = re.compile(r"font-size:\s*(\d+)px")  # a span's own size in a Plotly title's text


def presenter_on() -> bool:
    return bool(st.session_state.get(PRESENTER_KEY))


def _leave_presenter() -> None:
    st.session_state[PRESENTER_KEY] = False
    st.query_params.pop("present", None)  # (pages that write no address, Plan's, kept it: a reload came back in it)


def leave_presenter_button(where=st) -> None:
    """Presenter mode's way out, on every page that shows it (Learn had none: its sidebar holds only the pages, and
    the toggle is Simulate's; a review)."""
    where.button("Leave presenter mode", key="ui.leave_presenter", on_click=_leave_presenter,
                 icon=":material/close_fullscreen:", width="stretch")  # fmt: skip


def page_title(text: str) -> None:
    """A page's title, and in presenter mode its way out beside it (every page but Simulate, whose way out is beside
    Share: their sidebars hold only the pages, and the toggle is Simulate's; only Learn had one, a review)."""
    if not presenter_on():
        st.title(text)
        return
    title, leave = st.columns([3, 1], vertical_alignment="center")
    title.title(text)
    leave_presenter_button(leave)


def style_figure(fig: go.Figure, presenter: bool) -> go.Figure:
    """In presenter mode a copy with projector-sized text (cached figures stay as built); otherwise
    the figure itself (no copy: a rerun spends its time on Plotly objects, not on data)."""
    if not presenter:
        return fig
    size = PRESENTER_FONT_PX
    fig = go.Figure(fig)
    height = (fig.layout.height or 450) + PRESENTER_EXTRA_HEIGHT_PX
    fig.update_layout(font=dict(size=size), legend=dict(font=dict(size=size - 1)), hoverlabel=dict(font=dict(size=size)),
                      height=height)  # fmt: skip
    if fig.layout.title and fig.layout.title.text:
        # (a title's second line in a span of its own size, "SLO 2,000 ms (off the chart, right)", kept its 12 px on a
        # projector, a review: it grows as the title does)
        scale = (size + 1) / (fig.layout.title.font.size or PLOTLY_TITLE_PX)
        text = _SPAN_PX.sub(lambda m: f"font-size:{round(int(m.group(1)) * scale)}px", fig.layout.title.text)
        fig.update_layout(title=dict(text=text, font=dict(size=size + 1)))
    fig.update_xaxes(tickfont=dict(size=size - 1), title_font=dict(size=size))
    fig.update_yaxes(tickfont=dict(size=size - 1), title_font=dict(size=size))
    # Annotations grow in proportion, up to a title's size: a label sized for the plot (an SLO line's, 10-11 px) at a
    # title's 21 px covered the curves it labels (Sweep's latency, a review); subplot titles (make_subplots' 16 px)
    # take a title's size.
    title_px = size + 1
    fig.for_each_annotation(
        lambda a: a.update(font_size=min(round((a.font.size or title_px) * size / PLOTLY_FONT_PX), title_px)))
    fig.update_layout(margin=dict(t=(fig.layout.margin.t or 40) + 30))
    return fig


PLOT_CONFIG = {"displaylogo": False, "displayModeBar": "hover"}


def show_chart(fig: go.Figure, key: str, **kwargs) -> None:
    config = {**PLOT_CONFIG, **kwargs.pop("config", {})}
    st.plotly_chart(style_figure(fig, presenter_on()), key=key, config=config, **kwargs)


def full_url(params: dict[str, str], page: str = "") -> str:
    """The address a link opens: this server's URL (as the browser sees it), the page and the query.
    Without a browser (tests) only the query part."""
    query = urlencode(params)
    base = ""
    try:
        url = st.context.url
    except Exception:  # noqa: BLE001  (no browser context: tests, bare mode)
        url = None
    if url:
        root = url.split("?")[0].split("#")[0]
        # the URL names the current page; links name theirs
        parts = root.rstrip("/").split("/")
        if len(parts) > 3 and parts[-1].lower() in ("simulate", "compare", "sweep", "plan", "learn", "glossary", "about"):
            parts = parts[:-1]
        base = "/".join(parts) + "/" + page
    return f"{base}?{query}" if query else base


def side_labels(lesson) -> tuple[str, str]:
    """How a lesson's two sides are named on the page (buttons, metrics, claims, the banner): its labels, numbers
    written as the app writes them ("HBM bandwidth (GB/s) = 3,350", not "= 3350")."""
    a, b = lesson.side_labels
    return fmt_setting(a), fmt_setting(b)


def lesson_from_link(wanted: str, ids: list[str]) -> str:
    """A link's lesson as its id: `?lesson=11` is the number the lesson list shows (an unknown value comes back as is)."""
    if len(wanted) <= 3 and wanted.isdecimal() and 1 <= int(wanted) <= len(ids):
        return ids[int(wanted) - 1]
    return wanted


def usable_workshop_params(params: dict[str, str], ids: list[str]) -> dict[str, str]:
    """The link's workshop values a page can use (a refused ?reveal=roofine stayed in the address, and a copied link
    carried it on)."""
    usable = {"workshop": ("0", "1"), "reveal": ("1", "all", *ids)}
    return {k: params[k] for k in WORKSHOP_PARAMS if params.get(k) in usable[k]}


def workshop_problems(params: dict[str, str], ids: list[str]) -> tuple[str, ...]:
    """The link's workshop and reveal values no page can use, each named with what it takes (?reveal=roofine or
    ?workshop=yes were dropped without a word: the class saw no agenda, or the answer stayed hidden)."""
    out = []
    if params.get("workshop", "1") not in ("0", "1"):
        out.append(f"The link's workshop = {params['workshop'][:40]!r} is not used (allowed: 1, the agenda with "
                   "answers hidden).")  # fmt: skip
    reveal = params.get("reveal")
    if reveal is not None and reveal not in ("1", "all", *ids):
        out.append(f"The link's reveal = {reveal[:40]!r} reveals nothing{choices_hint(reveal, ['1', 'all', *ids])}.")
    return tuple(out)


def banner_from_params(params: dict[str, str], lessons: tuple) -> tuple[tuple[str, int, str] | None, tuple[str, ...]]:
    """The lesson banner a Simulate link names, as (lesson id, step, run) or None, and what of the link's lesson values
    cannot be used, each named with its value and what it takes."""
    wanted = params.get("lesson")
    if wanted is None:
        stray = [k for k in LESSON_LINK_PARAMS[1:] if k in params]
        return None, tuple(f"The link's {k} = {params[k][:40]!r} is not used: it goes with a lesson (lesson=…), and "
                           "the link names none." for k in stray)  # fmt: skip
    ids = [x.id for x in lessons]
    lesson_id = lesson_from_link(wanted, ids)
    lesson = next((x for x in lessons if x.id == lesson_id), None)
    if lesson is None:
        return None, (f"The link names an unknown lesson {wanted[:60]!r}{choices_hint(wanted, ids)} (or its number, "
                      f"1-{len(ids)}); no lesson banner is shown.",)  # fmt: skip
    runs = [r for r in LESSON_RUNS if r == "lesson" or (r == "mechanism" and lesson.mechanism) or (r == "also" and lesson.also)]
    run = params.get("lesson_run", "lesson")
    if run not in runs:
        return None, (f"The link's lesson_run = {run[:40]!r} is not used (allowed for lesson {lesson.id!r}: "
                      f"{', '.join(runs)}); no lesson banner is shown.",)  # fmt: skip
    num_steps = len(lesson.also) if run == "also" else 2
    step_text = params.get("lesson_step", "0")
    if not (len(step_text) <= 3 and step_text.isdecimal() and int(step_text) < num_steps):
        # (a review: "allowed for lesson_run = 'lesson': 0-1" under a link that named no lesson_run, where an instructor
        # counting sides from 1 had written lesson_step=2 for the second)
        sides = (f"0-{num_steps - 1}, the presets its text names, counted from 0" if run == "also" else
                 "0 or 1: its first side is 0, its second 1")  # fmt: skip
        return None, (f"The link's lesson_step = {step_text[:40]!r} is not used (allowed for lesson {lesson.order}"
                      f"{'' if run == 'lesson' else f', lesson_run = {run!r}'}: {sides}); no lesson banner is shown.",)  # fmt: skip
    return (lesson.id, int(step_text), run), ()


def open_on_view(lesson, run: str) -> None:
    """A lesson's run opens on the view its answer reads (`Lesson.opens_on`; a mechanism run on the timeline, a preset
    its text names as the session left it): presenter mode's focus, or the tab under the headline."""
    if run == "also":
        return
    view = lesson.opens_on if run == "lesson" else DEFAULT_VIEW
    st.session_state[FOCUS_KEY] = st.session_state[LAST_FOCUS_KEY] = view
    st.session_state[TAB_KEY] = DEFAULT_VIEW if view == "Headline" else view  # (the headline is above every tab)


def banner_params(active: tuple[str, int, str], kept: dict[str, str]) -> dict[str, str]:
    """A lesson banner, (lesson id, step, run), as Simulate's link parameters: the lesson, its side (the first step and
    run left out) and the Learn page's workshop values `kept`, which "Back to the lesson" keeps."""
    lesson_id, step, run = active
    out = {"lesson": lesson_id}
    if step:
        out["lesson_step"] = str(step)
    if run != "lesson":
        out["lesson_run"] = run
    return {**out, **kept}


def banner_link_params() -> dict[str, str]:
    """The open lesson banner as Simulate's link parameters; none when no banner is open."""
    active = st.session_state.get(ACTIVE_LESSON_KEY)
    return banner_params(active, st.session_state.get(LEARN_LINK_KEY, {})) if active else {}


def _open_banner() -> tuple[Lesson, int, str] | None:
    """(lesson, step, run) of the open lesson banner, or None (no banner, or a lesson no longer there)."""
    active = st.session_state.get(ACTIVE_LESSON_KEY)
    if not active:
        return None
    from sim_core.lessons import load_lessons

    lesson_id, step, run = active
    lesson = next((x for x in load_lessons() if x.id == lesson_id), None)
    return None if lesson is None else (lesson, step, run)


def _side_config(lesson: Lesson, step: int, run: str) -> SimConfig | None:
    """The config of a lesson side a banner names (None: an `also` entry the lesson no longer has)."""
    return None if run == "also" and step >= len(lesson.also) else lesson.side_config(step, run)


def banner_side_config() -> SimConfig | None:
    """The config of the lesson side the open banner names (None: no banner, or a side it cannot rebuild)."""
    return None if (opened := _open_banner()) is None else _side_config(*opened)


def take_banner_from_link(params: dict[str, str]) -> tuple[str, ...]:
    """Open the lesson banner a Simulate link names (a reload, a shared address) unless this session took those same
    values already (then the banner is as the session left it: closed stays closed). Returns what of the link's lesson
    values cannot be used."""
    from sim_core.lessons import load_lessons

    lessons = load_lessons()
    active, problems = banner_from_params(params, lessons)
    ids = [x.id for x in lessons]
    kept = usable_workshop_params(params, ids) if active else {}
    problems += workshop_problems(params, ids) if "lesson" in params else ()
    read = (active, tuple(sorted(kept.items())))
    if active is not None and st.session_state.get(LESSON_LINK_READ_KEY) != read:
        st.session_state[ACTIVE_LESSON_KEY] = active
        st.session_state[LEARN_LINK_KEY] = kept
        open_on_view(next(x for x in lessons if x.id == active[0]), active[2])
    st.session_state[LESSON_LINK_READ_KEY] = read
    return problems


def lesson_banner(cfg: SimConfig | None = None) -> None:
    """On the page a lesson opened: its question, the knob, and the way back (the lesson stays open); with the page's
    config `cfg`, what of it differs from the side the banner names (a review: a student who switched lesson 14's
    router to prefix_affinity read "Router = round_robin" above a prefix_affinity run)."""
    if (opened := _open_banner()) is None:
        return
    lesson, step, run = opened
    active = st.session_state[ACTIVE_LESSON_KEY]
    with st.container(border=True, key="lesson_banner"):
        # (the way back and the close in one right-hand row: a third column of its own, a ninth of the banner, was
        # narrower than Streamlit's least column at 1280 px, and its ✕ wrapped onto a line of its own under the question)
        c1, c2 = st.columns([6, 3], vertical_alignment="center")
        if run == "also":  # a scenario the lesson's text names, opened as it is: no side of the knob
            entry = lesson.also[step] if step < len(lesson.also) else None
            c1.markdown(f"**Lesson {lesson.order}: {lesson.title}** · {plain(entry.label) if entry else 'a scenario it names'}")
        else:
            where = " · the mechanism scenario" if run == "mechanism" else ""
            shown = side_labels(lesson)[step]  # a whole section (a deployment) by its label, not its dict
            # ("opened with": the side this run started from; a student who moved the knob read "Router = round_robin"
            # above a session run, beside the line below that said the router had changed, a review)
            c1.markdown(f"**Lesson {lesson.order}: {lesson.title}**{where} · opened with {lesson.knob_label} = `{shown}`")
        # (the question is about the lesson's main run: lesson 17's "1,000 requests wait at t = 0 on an H200" sat above
        # its 24-request mechanism run without a word, a review; the mechanism preset's own description names its knob's
        # default, which the lesson's side overrides, so it is not shown in its place)
        c1.text(f"Question (about the lesson's main run): {lesson.question}" if run == "mechanism" else
                f"Question: {lesson.question}")  # fmt: skip
        # (once per config object: an uploaded trace's config took seconds to dump, at every rerun, `derived`)
        if cfg is not None and (changed := derived(cfg, ("lesson_changes", *active),
                                                   lambda c: _changed_since_opened(lesson, step, run, c))) is not None:
            c1.caption(plain(changed), help="The lesson's figures and its answer are about the side it opened; the "
                       "lesson's own buttons open that side again.")  # fmt: skip
        back = {"lesson": lesson.id, **st.session_state.get(LEARN_LINK_KEY, {})}
        row = c2.container(horizontal=True, horizontal_alignment="right", vertical_alignment="center")
        row.page_link("app_pages/learn.py", label="Back to the lesson", icon=":material/arrow_back:", query_params=back)
        if row.button("✕", key="lesson_banner.close", help="Hide the lesson banner"):
            st.session_state.pop(ACTIVE_LESSON_KEY, None)
            st.rerun()


def _changed_since_opened(lesson, step: int, run: str, cfg: SimConfig) -> str | None:
    """What of `cfg` differs from the lesson side the banner names (None: nothing, or a side it cannot rebuild)."""
    from app.components.setup_notes import setup_differences

    side = _side_config(lesson, step, run)
    return None if side is None else setup_differences(side, cfg, lead="Changed since the lesson opened this run:")
