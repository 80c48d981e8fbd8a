"""Text from links, uploads and configs, made safe to put inside Streamlit's Markdown elements
(st.markdown, st.caption, st.warning, st.error, st.info): it shows as typed, never as a link, an
image, a heading, emphasis, an icon or math (an address stays text: a word joiner, invisible, keeps the
browser from linking it). Plotly text gets `plotly_text` (Plotly renders a
little HTML, including <a href>).

Only characters that can start Markdown syntax are escaped, so ordinary messages such as
`scheduler.max_num_seqs = 0: Input should be >= 1` read the same in the page source and tests.
"""

from __future__ import annotations

import html
import re

from sim_core.inputs import did_you_mean

_ALWAYS = re.compile(r"([\\`*\[\]#$|~&@])")  # links, images, code, math, tables, entities, e-mail autolinks
_ANGLE = re.compile(r"<(?=[A-Za-z/!?])")  # <https://...> autolinks and raw HTML (not "min <= max")
_LONE_UNDERSCORE = re.compile(r"(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])")  # emphasis; intraword _ is literal in GFM
_COLON_WORD = re.compile(r":(?=[A-Za-z0-9/+_-])")  # :emoji:, :material/icon:, :red[...] and scheme://
_INDENT = re.compile(r"(?m)^[ \t]+")  # 4 spaces would start a code block
_LINE_MARK = re.compile(r"(?m)^([ \t]*)([-+=>])")  # lists, block quotes, setext headings at a line start
_LINE_NUMBER = re.compile(r"(?m)^([ \t]*[0-9]+)([.)])")  # ordered lists at a line start
# The browser links bare addresses again after parsing (remark-gfm's transform-time autolinks search the text with its
# escapes resolved, so `http\://`, `www\.` and `\@` still became links): an invisible word joiner inside each pattern.
_AUTOLINK_START = re.compile(r"(?i)https?(?=://)|www(?=\.)|(?=@)")
WORD_JOINER = "\u2060"


MAX_SHOWN_CHARS = 20_000  # a message past this is cut (the longest text of the app's own: ~2,300 characters)


def plain(text: object) -> str:
    """`text` escaped for Markdown; newlines become line breaks. Past MAX_SHOWN_CHARS it is cut and says how much was
    left out: a message that quoted a link's 3,000,000-character name froze the student's tab for four minutes (the
    messages are bounded where they are made; this is the page's own bound)."""
    s = str(text)
    if len(s) > MAX_SHOWN_CHARS:
        s = f"{s[:MAX_SHOWN_CHARS]}… ({len(s) - MAX_SHOWN_CHARS:,} more characters not shown)"
    s = _INDENT.sub("", s.replace("\r", ""))
    s = _AUTOLINK_START.sub(lambda m: m.group(0) + WORD_JOINER, s)
    s = _ALWAYS.sub(r"\\\1", s)
    s = _ANGLE.sub(r"\\<", s)
    s = _LONE_UNDERSCORE.sub(r"\\_", s)
    # (a word joiner after the colon, not a backslash before it: Streamlit matches :emoji: and :material/icon: codes
    # after the escapes are resolved, so `\:smile:` still became an icon; `:\u2060red[` is no colour directive either)
    s = _COLON_WORD.sub(":" + WORD_JOINER, s)
    s = _LINE_MARK.sub(r"\1\\\2", s)
    s = _LINE_NUMBER.sub(r"\1\\\2", s)
    return s.replace("\n", "  \n")


def plotly_text(text: object) -> str:
    """`text` for a Plotly title, legend or hover label (no tags, no links)."""
    return html.escape(str(text), quote=False)


MAX_LISTED_CHOICES = 20  # a list this long is read in a warning; a longer one (52 presets) is named by where it is


def choices_hint(value: str, choices: list[str] | tuple[str, ...], listed_at: str = "") -> str:
    """What a link could have said instead of an unknown `value`, for the warning that names it: the names it most
    likely meant (the CLI's rule, `did_you_mean`: a lesson's file name finds its id, a typo its preset) and every
    allowed one, or, when there are too many to read, how many and `listed_at` (where the page lists them). Only
    `choices` (the app's own names) are written here; the caller names the visitor's value."""
    guess = did_you_mean(value[:100], choices).removeprefix(" (").removesuffix(")")
    guess = f"{guess} " if guess else ""
    if len(choices) <= MAX_LISTED_CHOICES:
        return f" ({guess}allowed: {', '.join(choices)})"
    return f" ({guess}all {len(choices)} are in {listed_at})" if listed_at else f" ({guess.rstrip()})" if guess else ""


WHOLE_CHARS = 600  # a preset's description up to this long is shown whole (the sidebar's caption) ...
LEAD_CHARS = 320  # ... a longer one by its sentences up to about this many characters
# sentence ends: a full stop before a capital, not after an abbreviation ("e.g. H100", "Fig. 8", "vs. Orca")
_NOT_AFTER_ABBREVIATION = r"(?<!\be\.g)(?<!\bi\.e)(?<!\bvs)(?<!\bcf)"  # ("e.g. H100", "vs. Orca": no end there)
_SENTENCE_END = re.compile(_NOT_AFTER_ABBREVIATION + r"(?<!\bFig)(?<!\bSec)[.!?](?=\s+[A-Z'(])")


# a statement's end: a full stop before a space, not after an abbreviation (a hardware source's figures, "989.4 TFLOPS",
# have none; its file references that follow start lower-case, which _SENTENCE_END does not take as a sentence)
_STATEMENT_END = re.compile(_NOT_AFTER_ABBREVIATION + r"\.(?=\s)")


def first_statement(text: str) -> tuple[str, str]:
    """`text`'s first statement and the rest ('' when none): a hardware source's datasheet figures, then where they
    were copied and what was fitted (file paths, which the sidebar leaves to the About page)."""
    text = text.strip()
    m = _STATEMENT_END.search(text)
    return (text, "") if m is None else (text[: m.end()], text[m.end() :].strip())


def lead_and_rest(text: str) -> tuple[str, str]:
    """A long description as its lead (whole sentences up to about LEAD_CHARS, or its first sentence when that is
    longer) and the rest ('' when short): the sidebar shows the lead and puts the rest, sources and details, behind
    an expander (the DistServe pair's 1,400-1,700 characters of artifact paths filled the sidebar, a review)."""
    text = text.strip()
    if len(text) <= WHOLE_CHARS:
        return text, ""
    ends = [m.end() for m in _SENTENCE_END.finditer(text)]
    cut = max((e for e in ends if e <= LEAD_CHARS), default=None) or next((e for e in ends if e > LEAD_CHARS), None)
    if cut is None or len(text) - cut < 60:  # (one sentence, or a short tail: whole)
        return text, ""
    return text[:cut], text[cut:].strip()
