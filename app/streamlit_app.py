"""Entry point: page config, session init from the link, navigation. Pages live in app_pages/."""

from __future__ import annotations

import sys
from pathlib import Path
from urllib.parse import unquote

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # `streamlit run app/streamlit_app.py` puts only app/ on the path
    sys.path.insert(0, str(ROOT))

import streamlit as st  # noqa: E402  (in the worker processes' forkserver already: free there)

ASSETS = Path(__file__).resolve().parent / "assets"
PAGES_DIR = Path(__file__).resolve().parent / "app_pages"


def main() -> None:
    # Imported here, not at the top: a worker process runs this file as __mp_main__ (the end of the file) and needs
    # none of the page's modules; importing them (Plotly among them) took ~45 ms of every run's CPU, 3x the default
    # preset's simulation.
    from app.components.cluster_timeline import ROW_LABEL_CSS
    from app.components.text import plain
    from app.state import PRESENTER_KEY, ensure_session, page_asked, presenter_params, read_query_params

    if read_query_params().get("present") == "1" and "ui.present_link" not in st.session_state:
        st.session_state[PRESENTER_KEY] = st.session_state["ui.present_link"] = True  # a link can start presenter mode
    elif PRESENTER_KEY in st.session_state:
        # (the toggle is a widget of Simulate's sidebar, and Streamlit drops a widget's state on a page that does not
        # draw it: presenter mode ended when the class went to Learn, whose lesson then opened outside it, a review;
        # set again each run, the value outlives the widget)
        st.session_state[PRESENTER_KEY] = st.session_state[PRESENTER_KEY]
    # A local favicon (offline workshops); presenter mode collapses the sidebar to give the chart the screen.
    st.set_page_config(page_title="LLM serving scheduler explorer", page_icon=str(ASSETS / "favicon.png"), layout="wide",
                       initial_sidebar_state="collapsed" if st.session_state.get(PRESENTER_KEY) else "auto")  # fmt: skip
    ensure_session()
    # Phones: the chart mode bar would cover legends and titles (it appears on tap elsewhere).
    # Spinners ("Simulating…") float at the top right: in view wherever the page is scrolled (the
    # chart is below the headline) and nothing moves when one appears or goes.
    st.html("<style>@media (max-width: 640px) { .modebar-container { display: none !important; } "
            "h1 { font-size: 2rem !important; } "
            # a phone stacks a row's columns, each with its 16-px gap, an empty one too: the Simulate window's three
            # controls beside its width, undrawn for a whole-run window, left ~50 px of blank page under it
            # (empty: its block has no child; a column holding only a popover, Share, has no element container)
            "[data-testid='stColumn']:has(> [data-testid='stVerticalBlock']:empty) { display: none; } } "
            + ROW_LABEL_CSS +  # a deployment timeline's row labels, narrow on a phone
            "[data-testid='stSpinner'] { position: fixed; top: 3.75rem; right: 1.25rem; z-index: 999990; width: auto !important; "
            "background: #fff; padding: .35rem .8rem; border-radius: .5rem; box-shadow: 0 1px 6px rgba(0,0,0,.25); } "
            # Narrow windows (a laptop split screen, a tablet with the sidebar open): columns keep a width their
            # content fits in and wrap to the next line, instead of cutting "1,293 tok/s" to "1,29…" and "Share" to "S".
            ".st-key-about_config [data-testid='stColumn'] { min-width: 9.5rem; } "
            # The headline's cards: four a line down to 7.5rem each (their numbers shrink with the card, below), else two
            # a line, not three and one: at 1024 px with the sidebar open (9.5rem each) each row read three cards and one
            # alone, four lines of cards, and the tabs began below the fold
            ".st-key-headline [data-testid='stColumn'] { min-width: 7.5rem; } "
            ".st-key-headline { container-type: inline-size; } "
            # (and their labels wrap: a 7.5rem card cut "Output throughput" to "Output through…")
            ".st-key-headline [data-testid='stMetricLabel'] [data-testid='stMarkdownContainer'], "
            ".st-key-headline [data-testid='stMetricLabel'] [data-testid='stMarkdownContainer'] * "
            "{ white-space: normal !important; overflow: visible !important; text-overflow: clip !important; } "
            "@container (max-width: 33rem) { .st-key-headline [data-testid='stColumn'] "
            "{ min-width: max(7.5rem, calc(50% - 0.5rem)); } } "
            # and a headline's second line wraps: on a phone a deployment's "decode 0, of its 480,848 tokens" read
            # "…480,848 t…" and "p99 25.6 ms · ITL p99 25.8 ms" lost its end
            ".st-key-headline [data-testid='stMetricDelta'], .st-key-headline [data-testid='stMetricDelta'] * "
            "{ white-space: normal !important; height: auto !important; } "
            # and its numbers take the size their column allows, 36 px at most (a laptop's): on a phone a 1,000-request
            # run read "1,000 / 1,…" and a router preset's prefill saved "1,272,91…" in their 171-px columns (17 % of
            # the column fits 14 characters); a longer one still wraps rather than lose its end
            ".st-key-headline [data-testid='stMetric'] { container-type: inline-size; } "
            ".st-key-headline [data-testid='stMetricValue'] { font-size: min(2.25rem, 17cqi) !important; } "
            ".st-key-headline [data-testid='stMetricValue'], .st-key-headline [data-testid='stMetricValue'] * "
            "{ white-space: normal !important; overflow: visible !important; text-overflow: clip !important; } "
            # About's hardware table: its sources' file paths (presets/calibration/data/vidur_mlp_ops.csv) break anywhere,
            # or on a phone they held the column past the screen's edge
            ".st-key-about_hardware td:last-child { width: 55%; } .st-key-about_hardware td:last-child * { overflow-wrap: anywhere !important; } "
            ".st-key-lesson_open [data-testid='stColumn'], .st-key-lesson_mech [data-testid='stColumn'] { min-width: 18rem; } "
            # and a lesson's buttons and side-by-side numbers wrap their labels: on a phone lesson 11's two buttons read
            # "Open with Deployment (same 8 GPUs) = 4 co-located r…" and "… = 3 prefill + 1 de…", the sides they open cut
            ".st-key-lesson_open button [data-testid='stMarkdownContainer'], .st-key-lesson_open button [data-testid='stMarkdownContainer'] *, "
            ".st-key-lesson_mech button [data-testid='stMarkdownContainer'], .st-key-lesson_mech button [data-testid='stMarkdownContainer'] *, "
            ".st-key-lesson_both [data-testid='stMetricLabel'] [data-testid='stMarkdownContainer'], "
            ".st-key-lesson_both [data-testid='stMetricLabel'] [data-testid='stMarkdownContainer'] * "
            "{ white-space: normal !important; overflow: visible !important; text-overflow: clip !important; } "
            # Compare's charts: two under ~320 px each leave a CDF a 100 px plot beside its legend; stack them instead
            ".st-key-cmp_gantts [data-testid='stColumn'], .st-key-cmp_cdfs [data-testid='stColumn'] { min-width: 20rem; } "
            # Sweep's three charts: side by side from ~850 px of page, else one under the other at the page's width
            ".st-key-sw_figs [data-testid='stColumn'] { min-width: 17rem; } "
            "[data-testid='stColumn']:has(.st-key-ui-share) { min-width: 7rem; } "
            # Above a phone's width, Share and the step buttons keep their size and the caption or tick number beside
            # them gives way: at their 5:1 and 4:1:1 shares, 1024 px with the sidebar open put Share on a full-width line
            # of its own and "Next" on another
            "@media (min-width: 640px) { "
            "[data-testid='stColumn']:has(.st-key-ui-share), [data-testid='stColumn']:has(.st-key-ui-step_prev), "
            "[data-testid='stColumn']:has(.st-key-ui-step_next) { flex: 0 0 8rem !important; } "
            "[data-testid='stColumn']:has(.st-key-ui-leave_presenter) { flex: 0 0 auto !important; } "
            "[data-testid='stHorizontalBlock']:has(.st-key-ui-share) > [data-testid='stColumn']:first-child, "
            "[data-testid='stColumn']:has(.st-key-ui-step_index) { flex: 1 1 8rem !important; min-width: 8rem; } } "
            # Step through: the buttons beside the tick number had an eighth of the row each ("◀…", "N…" at 800 px)
            "[data-testid='stColumn']:has(.st-key-ui-step_prev), [data-testid='stColumn']:has(.st-key-ui-step_next) "
            "{ min-width: 7.5rem; } "
            ".st-key-lesson_banner [data-testid='stColumn']:has([data-testid='stPageLink']) { min-width: 11rem; } "
            "[data-testid='stColumn']:has(.st-key-ui-timeline_plotly) { min-width: 12.5rem; }</style>")
    if st.session_state.get(PRESENTER_KEY):
        # Presenter mode: larger type for a projector.
        # Streamlit sizes text in rem, so a larger root font scales the whole page for a projector.
        # The page's top padding (6rem, room for a header the collapsed sidebar does not need) went too: at 1400x900 the
        # focused timeline began at the foot of the screen, most of it below the fold.
        # The focus row wraps rather than scrolls: at 1024 px beside Share its last options were cut off, reachable only by
        # a sideways scroll nobody sees on a projector.
        st.html("<style>html {font-size: 20px;} [data-testid='stMainBlockContainer'] {padding-top: 4rem !important;} "
                ".st-key-ui-focus [role='radiogroup'] {flex-wrap: wrap; overflow: visible;} "
                # (its way out whole: "Leave presen…" at 1024 px)
                "[data-testid='stColumn']:has(.st-key-ui-leave_presenter) {min-width: 12.5rem;}</style>")

    pages = [
        st.Page(PAGES_DIR / "simulate.py", title="Simulate", icon=":material/play_circle:", default=True),
        st.Page(PAGES_DIR / "compare.py", title="Compare", icon=":material/compare_arrows:"),
        st.Page(PAGES_DIR / "sweep.py", title="Sweep", icon=":material/query_stats:"),
        st.Page(PAGES_DIR / "plan.py", title="Plan", icon=":material/savings:"),
        st.Page(PAGES_DIR / "learn.py", title="Learn", icon=":material/school:"),
        st.Page(PAGES_DIR / "glossary.py", title="Glossary", icon=":material/menu_book:"),
        st.Page(PAGES_DIR / "about.py", title="About the model", icon=":material/info:"),
    ]
    page = st.navigation(pages)
    # Page addresses are lower case; /Learn (or any other casing) opens the page it names, and an unknown
    # address says so instead of silently showing Simulate.
    asked = page_asked(st.context.url)
    # getattr: a page has no url_path outside a script run (a process pool re-importing this file as __mp_main__)
    by_path = {getattr(p, "url_path", "").lower(): p for p in pages if getattr(p, "url_path", "")}
    current = getattr(page, "url_path", None)
    if asked and current is not None and asked != current and asked.lower() in by_path:
        st.switch_page(by_path[asked.lower()])
    elif asked and current == "" and asked.lower() not in by_path:
        # the address is the visitor's text: shown as typed (decoded), never as Markdown (a link, an image)
        st.warning(f"There is no page “{plain(unquote(asked)[:60])}”; showing Simulate. Pages: {', '.join(p.title for p in pages)}.")
    for key, value in presenter_params().items():  # (pages that write no address of their own keep it too)
        if st.query_params.get(key) != value:
            st.query_params[key] = value
    page.run()


# Streamlit runs this file as __main__, so a simulation worker process (app/components/worker.py)
# re-imports it as __mp_main__ when it starts; drawing the page there in bare mode cost every new run
# about 0.2 s before it could simulate, and the page's imports (now inside main) another ~45 ms of CPU
# (tests/app/test_worker.py).
if __name__ != "__mp_main__":
    main()
