"""The smallest Streamlit page the browser benchmark can time the same way as the app: one slider and one element
that the benchmark's chart detector recognises (`app.browser.GANTT_DRAWN_JS`), redrawn with the slider's value.

`python -m app.bench --browser` serves it beside the app to measure what Streamlit itself costs on this machine, in
this browser (its bundles, the websocket, one rerun), so the app's figures can be read as that floor plus what the
page adds. Not a page of the app: `streamlit_app.py` never lists it.
"""

import streamlit as st

value = st.slider("value", 0, 100, 50, key="w.floor")
# (the same markers as the server-drawn timeline: a container with data-testid=timeline-html holding a bar `.b` inside
# a panel `.sgt-p`; st.html keeps data-testid and class attributes through its sanitiser)
st.html(f'<div data-testid="timeline-html"><div class="sgt-p"><div class="b">{int(value)}</div></div></div>')
