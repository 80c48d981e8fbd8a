"""Entry point: page config, session init from the link, navigation. Pages live in app_pages/."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # `streamlit run app/streamlit_app.py` puts only app/ on the path
    sys.path.insert(0, str(ROOT))

import streamlit as st  # noqa: E402

from app.state import PRESENTER_KEY, ensure_session  # noqa: E402

st.set_page_config(page_title="LLM serving scheduler explorer", page_icon=":material/schedule:", layout="wide")
ensure_session()
if st.session_state.get(PRESENTER_KEY):
    # Presenter mode: larger type for a projector.
    # Streamlit sizes text in rem, so a larger root font scales the whole page for a projector.
    st.html("<style>html {font-size: 20px;}</style>")

PAGES_DIR = Path(__file__).resolve().parent / "app_pages"
pages = [
    st.Page(PAGES_DIR / "simulate.py", title="Simulate", icon=":material/play_circle:", default=True),
    st.Page(PAGES_DIR / "compare.py", title="Compare", icon=":material/compare_arrows:"),
    st.Page(PAGES_DIR / "sweep.py", title="Sweep", icon=":material/query_stats:"),
    st.Page(PAGES_DIR / "plan.py", title="Plan", icon=":material/savings:"),
    st.Page(PAGES_DIR / "learn.py", title="Learn", icon=":material/school:"),
    st.Page(PAGES_DIR / "about.py", title="About the model", icon=":material/info:"),
]
st.navigation(pages).run()
