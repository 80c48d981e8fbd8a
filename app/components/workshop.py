"""Workshop helpers shared by the pages: presenter-mode charts, the lesson banner kept on the page a
lesson opened, and full share URLs.

Presenter mode (a sidebar toggle, or `?present=1` in a link) sets the page's root font larger,
collapses the sidebar and shows one chart at a time; `show_chart` scales every chart's text with it
(titles, ticks, legends, hover) so a projector at the back of a room stays readable.
"""

from __future__ import annotations

from urllib.parse import urlencode

import plotly.graph_objects as go
import streamlit as st

from app.components.text import plain
from app.components.units import fmt_setting
from app.state import PRESENTER_KEY

ACTIVE_LESSON_KEY = "learn.active"  # (lesson id, step, run) of the lesson that opened this page; run "also": step
# is the index of the `also` entry opened
LEARN_LINK_KEY = "learn.link_params"  # the Learn page's workshop values (workshop, reveal) when it opened a lesson:
# "Back to the lesson" keeps them (it dropped ?workshop=1, and the class's way back showed every answer)
PRESENTER_FONT_PX = 20  # chart body text in presenter mode; titles +1, ticks and legends -1 (Plotly's default is 12)
PRESENTER_EXTRA_HEIGHT_PX = 220


def presenter_on() -> bool:
    return bool(st.session_state.get(PRESENTER_KEY))


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
        fig.update_layout(title=dict(font=dict(size=size + 1)))
    fig.update_xaxes(tickfont=dict(size=size - 1), title_font=dict(size=size))
    fig.update_yaxes(tickfont=dict(size=size - 1), title_font=dict(size=size))
    fig.update_annotations(font_size=size + 1)  # subplot titles are annotations
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


def lesson_banner() -> None:
    """On the page a lesson opened: its question, the knob, and the way back (the lesson stays open)."""
    active = st.session_state.get(ACTIVE_LESSON_KEY)
    if not active:
        return
    from sim_core.lessons import load_lessons

    lesson_id, step, run = active
    lesson = next((x for x in load_lessons() if x.id == lesson_id), None)
    if lesson is None:
        return
    with st.container(border=True, key="lesson_banner"):
        c1, c2, c3 = st.columns([6, 2, 1], vertical_alignment="center")
        if run == "also":  # a scenario the lesson's text names, opened as it is: no side of the knob
            entry = lesson.also[step] if step < len(lesson.also) else None
            c1.markdown(f"**Lesson {lesson.order}: {lesson.title}** · {plain(entry.label) if entry else 'a scenario it names'}")
        else:
            where = " · the mechanism scenario" if run == "mechanism" else ""
            shown = side_labels(lesson)[step]  # a whole section (a deployment) by its label, not its dict
            c1.markdown(f"**Lesson {lesson.order}: {lesson.title}**{where} · {lesson.knob_label} = `{shown}`")
        c1.text(f"Question: {lesson.question}")
        back = {"lesson": lesson.id, **st.session_state.get(LEARN_LINK_KEY, {})}
        c2.page_link("app_pages/learn.py", label="Back to the lesson", icon=":material/arrow_back:", query_params=back)
        if c3.button("✕", key="lesson_banner.close", help="Hide the lesson banner"):
            st.session_state.pop(ACTIVE_LESSON_KEY, None)
            st.rerun()
