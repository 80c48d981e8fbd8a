"""Text from links, uploads and configs, made safe to put inside Streamlit's Markdown elements
(st.markdown, st.caption, st.warning, st.error, st.info): it shows as typed, never as a link, an
image, a heading, emphasis, an icon or math. Plotly text gets `plotly_text` (Plotly renders a
little HTML, including <a href>).

Only characters that can start Markdown syntax are escaped, so ordinary messages such as
`scheduler.max_num_seqs = 0: Input should be >= 1` read the same in the page source and tests.
"""

from __future__ import annotations

import html
import re

_ALWAYS = re.compile(r"([\\`*\[\]#$|~&@])")  # links, images, code, math, tables, entities, e-mail autolinks
_ANGLE = re.compile(r"<(?=[A-Za-z/!?])")  # <https://...> autolinks and raw HTML (not "min <= max")
_LONE_UNDERSCORE = re.compile(r"(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])")  # emphasis; intraword _ is literal in GFM
_COLON_WORD = re.compile(r":(?=[A-Za-z0-9/+_-])")  # :emoji:, :material/icon:, :red[...] and scheme://
_DOTTED_WWW = re.compile(r"(?i)(?<=www)\.")  # www.example.com autolinks
_INDENT = re.compile(r"(?m)^[ \t]+")  # 4 spaces would start a code block
_LINE_MARK = re.compile(r"(?m)^([ \t]*)([-+=>])")  # lists, block quotes, setext headings at a line start
_LINE_NUMBER = re.compile(r"(?m)^([ \t]*[0-9]+)([.)])")  # ordered lists at a line start


def plain(text: object) -> str:
    """`text` escaped for Markdown; newlines become line breaks."""
    s = _INDENT.sub("", str(text).replace("\r", ""))
    s = _ALWAYS.sub(r"\\\1", s)
    s = _ANGLE.sub(r"\\<", s)
    s = _LONE_UNDERSCORE.sub(r"\\_", s)
    s = _COLON_WORD.sub(r"\\:", s)
    s = _DOTTED_WWW.sub(r"\\.", s)
    s = _LINE_MARK.sub(r"\1\\\2", s)
    s = _LINE_NUMBER.sub(r"\1\\\2", s)
    return s.replace("\n", "  \n")


def plotly_text(text: object) -> str:
    """`text` for a Plotly title, legend or hover label (no tags, no links)."""
    return html.escape(str(text), quote=False)
