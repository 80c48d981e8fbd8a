"""The server-drawn HTML timeline shows what the Plotly timeline shows (same bars, rows, lines and
hovers, from the same data), stays small for large runs, and shows any text as typed."""

import re
from html.parser import HTMLParser

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.components import timeline, timeline_html
from app.components.colors import PHASE_COLORS
from sim_core import run_simulation
from tests.conftest import make_config

ALLOWED_TAGS = {"style", "div", "span", "i", "img"}


class Parsed(HTMLParser):
    """Start tags with their attributes, and the text outside <style>."""

    def __init__(self, markup: str):
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str]]] = []
        self.text: list[str] = []
        self._in_style = False
        self.feed(markup)
        self.close()

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        self._in_style = tag == "style"

    def handle_endtag(self, tag):
        self._in_style = False

    def handle_data(self, data):
        if not self._in_style:
            self.text.append(data)

    def with_class(self, cls: str) -> list[dict[str, str]]:
        return [a for t, a in self.tags if cls in (a.get("class") or "").split()]


@pytest.fixture(scope="module")
def v0():
    return run_simulation(make_config("chat-h100-llama8b-vllm-v0", workload__num_requests=120))


def _gpu_panel(markup: str) -> Parsed:
    """The first plot area (the GPU row) on its own."""
    start = markup.index('<div class="sgt-p"')
    end = markup.index('<div class="sgt-t">', start)
    return Parsed(markup[start:end])


def test_the_opening_window_draws_one_hoverable_bar_per_tick(v0):
    window = timeline.opening_window(v0)
    markup = timeline_html.timeline_html(v0, 0, 30, window)
    lo, hi = timeline.tick_range(v0, window)
    bars = _gpu_panel(markup).with_class("b")
    assert len(bars) == hi - lo  # one per tick, as the Plotly figure draws
    assert all(b["title"].startswith(("prefill · tick ", "decode · tick ", "mixed · tick ", "idle · tick ")) for b in bars)
    assert any("compute-bound" in b["title"] for b in bars) and any("memory-bound" in b["title"] for b in bars)
    colours = {c for b in bars for c in b["class"].split() if c.startswith("c")}
    assert colours <= {timeline_html.colour_class(p) for p in ("prefill", "decode", "mixed", "idle")}
    assert f".c{list(PHASE_COLORS).index('prefill')}{{background:{PHASE_COLORS['prefill']}}}" in markup


def test_panels_titles_rows_and_legend_match_the_plotly_figure(v0):
    window = timeline.opening_window(v0)
    fig = timeline.timeline_figure(v0, 0, 30, window=window)
    page = Parsed(timeline_html.timeline_html(v0, 0, 30, window))
    text = " ".join(page.text)
    for ann in fig.layout.annotations:  # the subplot titles
        assert ann.text in text
    rows = [s for s in page.text if s.startswith("req ")]
    assert rows == list(fig.layout.yaxis2.categoryarray)  # the same requests, in the same order
    legend = {t.name for t in fig.data if t.showlegend is not False}
    assert legend <= set(page.text)  # every legend entry of the figure is in the HTML legend
    assert "stalled (no token this tick)" in page.text


def test_the_kv_panel_names_its_peak_in_view_in_both_renderings(v0):
    # a review: the default run's 12 % peak was a line on the floor of the fixed 0-100 % axis, with nothing to read;
    # the deployments' panel had its note since session 60, one engine's had none
    window = timeline.opening_window(v0)
    tl = v0.timeline
    used = tl.kv_blocks_used[(tl.t_end_s >= window[0]) & (tl.t_start_s <= window[1])]
    said = f"peak in view {used.max() / v0.memory.num_blocks * 100:,.1f} %"
    fig = timeline.timeline_figure(v0, 0, 30, window=window)
    assert [a.text for a in fig.layout.annotations if a.text.startswith("peak")] == [said]
    assert f"KV cache in use · {said}" in Parsed(timeline_html.timeline_html(v0, 0, 30, window)).text
    whole = timeline.timeline_figure(v0, 0, 30).layout.annotations[-1].text  # (no window: the whole run's, drawn)
    assert whole == f"peak in view {tl.kv_blocks_used.max() / v0.memory.num_blocks * 100:,.1f} %"


def test_request_bars_say_which_request_and_state(v0):
    window = timeline.opening_window(v0)
    page = Parsed(timeline_html.timeline_html(v0, 0, 30, window))
    titles = [b["title"] for b in page.with_class("b") if b["title"].startswith("request ")]
    bars = timeline.request_bars(v0, timeline.requests_in_window(v0, window, 0, 30), window, timeline_html.HTML_STALL_BARS)
    assert len(titles) == bars["req"].size
    assert any(" · stalled (no token this tick)\n" in t for t in titles)


def test_line_hovers_give_the_values_of_each_tick(v0):
    window = timeline.opening_window(v0)
    page = Parsed(timeline_html.timeline_html(v0, 0, 30, window))
    kv = [h["title"] for h in page.with_class("h") if "% of blocks" in h["title"]]
    queues = [h["title"] for h in page.with_class("h") if "running" in h["title"]]
    lo, hi = timeline.tick_range(v0, window)
    assert len(kv) >= hi - lo and len(queues) >= hi - lo  # one column per tick (plus the edges)
    line = timeline.line_series(v0, window, timeline_html.HTML_LINE_POINTS)[0]
    assert f"{line.y[1]:,.1f} % of blocks" in kv[1]
    images = [a["src"] for t, a in page.tags if t == "img"]
    assert len(images) == 2 and all(src.startswith("data:image/svg+xml,") for src in images)


def test_a_whole_run_view_of_a_long_run_stays_small():
    res = run_simulation(make_config(workload__num_requests=4000, workload__arrival__rate_per_s=12.0))
    markup = timeline_html.timeline_html(res, 0, timeline.MAX_REQUEST_ROWS, None)
    page = Parsed(markup)
    gpu_bars = _gpu_panel(markup).with_class("b")
    assert len(gpu_bars) <= timeline_html.HTML_GANTT_BARS
    assert len(page.with_class("h")) <= timeline_html.HTML_LINE_POINTS  # hover columns per bin, not per tick
    assert any("(peak of this stretch)" in h["title"] for h in page.with_class("h"))
    assert len(markup) < 1_500_000


def test_the_gpu_panels_title_says_what_one_bar_is(v0):
    # The whole run (1,400+ ticks) titled its GPU row "one bar per tick" while each bar was a run of ticks of one phase
    # (its hover: "37 ticks from tick 1,204"), or past the bar budget a time bin coloured by its main phase.
    window = timeline.opening_window(v0)
    for view, title in ((window, "GPU: one bar per tick"), (None, "GPU: one bar per run of ticks in one phase")):
        markup = timeline_html.timeline_html(v0, 0, 30, view)
        assert Parsed(markup).text[0] == title
        fig = timeline.timeline_figure(v0, 0, 30, window=view)
        assert fig.layout.annotations[0].text == title  # the Plotly view says the same
    long = run_simulation(make_config(workload__num_requests=4000, workload__arrival__rate_per_s=12.0))
    assert Parsed(timeline_html.timeline_html(long, 0, 30, None)).text[0] == "GPU: one bar per time bin (its main phase)"
    assert "(its main phase)" in timeline.timeline_figure(long, 0, 30).layout.annotations[0].text


def test_only_plain_tags_come_out(v0):
    page = Parsed(timeline_html.timeline_html(v0, 0, 30, None, presenter=True))
    assert {t for t, _ in page.tags} <= ALLOWED_TAGS
    assert all(not k.startswith("on") for _, a in page.tags for k in a)  # no event handlers


hostile = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=80) | st.sampled_from(
    ['"><img src=x onerror=alert(1)>', "</div><script>alert(1)</script>", "a&amp;b", "**bold** [x](http://e.com)",
     "'\n<style>*{display:none}</style>", "$x$ :material/home:"])  # fmt: skip


@given(hostile)
@settings(max_examples=200, deadline=None)
def test_text_shows_as_typed_in_text_and_in_a_hover(text):
    bar = timeline_html._bar(timeline_html._Axis(0.0, 1.0), 0.1, 0.2, text, "b c0")
    page = Parsed(f'<span class="x">{timeline_html.esc(text)}</span>{bar}')
    assert [t for t, _ in page.tags] == ["span", "div"]  # nothing injected
    assert "".join(page.text) == text
    assert page.tags[1][1]["title"] == text


@given(st.floats(-1e6, 1e6), st.floats(1e-6, 1e6))
def test_axis_ticks_are_round_evenly_spaced_and_inside(t0, span):
    t1 = t0 + span
    ticks = timeline_html.nice_ticks(t0, t1)
    assert 1 <= ticks.size <= 12
    assert np.all(ticks >= t0 - 1e-9 * max(1, abs(t0))) and np.all(ticks <= t1 + 1e-9 * max(1, abs(t1)))
    if ticks.size > 2:
        steps = np.diff(ticks)
        assert np.allclose(steps, steps[0], rtol=1e-6)
        mantissa = steps[0] / 10 ** np.floor(np.log10(steps[0]))
        assert min(abs(mantissa - m) for m in (1, 2, 5, 10)) < 1e-3  # round (to float precision far from 0)


@pytest.fixture(scope="module")
def chunked():
    """The default scenario: chunked prefill, so the opening window's GPU row is decode and mixed ticks only
    while its request rows still show their (orange) prefill chunks."""
    return run_simulation(make_config("chat-h100-llama8b"))


def test_every_colour_drawn_has_a_legend_entry(chunked, v0):
    # the default page's legend named decode, mixed and waiting but not prefill, whose orange was in the request rows
    for res in (chunked, v0):
        window = timeline.opening_window(res)
        page = Parsed(timeline_html.timeline_html(res, 0, 30, window))
        drawn = {c for a in page.with_class("b") for c in a["class"].split() if c[0] == "c" and c[1:].isdigit()}
        start = [i for i, (_, a) in enumerate(page.tags) if "sgt-lg" in (a.get("class") or "").split()][0]
        legend = {a.get("class") for _, a in page.tags[start:]}
        assert drawn <= legend, sorted(drawn - legend)
        fig = timeline.timeline_figure(res, 0, 30, window=window)  # the Plotly view (zoom with the mouse)
        bars = [t for t in fig.data if t.type == "bar"]
        shown = {t.legendgroup for t in bars if t.showlegend is not False}
        assert {t.legendgroup for t in bars} <= shown
    gpu = _gpu_panel(timeline_html.timeline_html(chunked, 0, 30, timeline.opening_window(chunked)))
    assert timeline_html.colour_class("prefill") not in {c for a in gpu.with_class("b") for c in a["class"].split()}  # the case


def test_a_gantt_bar_of_one_tick_says_tick_on_hover():
    # the whole run's bars are runs of ticks: one a single tick long read "decode · 1 ticks from tick 12"
    res = run_simulation(make_config("kv-pressure-a100-llama8b", workload__num_requests=60))
    markup = timeline_html.timeline_html(res)
    assert " · 1 tick from tick " in markup and not re.search(r"[^\d,]1 ticks", markup)


@settings(max_examples=30, deadline=None)
@given(y=st.lists(st.floats(0, 1e6, allow_nan=False), min_size=2, max_size=20), y_max=st.floats(1e-9, 1e6))
def test_a_line_keeps_its_whole_stroke_inside_its_box_even_at_zero(y, y_max):
    # an empty queue's line (0 waiting) sat on the box's bottom edge with half its stroke cut off: not visible
    line = timeline.LineSeries(4, "waiting requests", "#9aa0a6", "solid", "waiting", 0, "", np.linspace(0, 1, len(y)),
                               np.array(y), False)  # fmt: skip
    axis = timeline_html._Axis(0.0, 1.0)
    svg = timeline_html._polyline(axis, line, y_max)
    ys = [float(pt.split(",")[1]) for pt in re.search(r'points="([^"]+)"', svg)[1].split()]
    assert all(timeline_html.LINE_INSET <= v <= 100 - timeline_html.LINE_INSET for v in ys)
    if 0.0 in y:
        assert 100 - timeline_html.LINE_INSET in ys


def test_the_request_rows_title_counts_the_rows_of_the_requests_alive():
    # "30 requests alive in this window" where 34 were: the rows' count read as the window's (browser review)
    res = run_simulation(make_config())
    window = timeline.opening_window(res)
    alive = timeline.alive_in_window(res, window)
    assert alive.size > 12
    ids = timeline.requests_in_window(res, window, 0, 12)
    assert set(ids.tolist()) <= set(alive.tolist())
    title = f"12 of the {alive.size:,} requests alive in this window"
    assert title in timeline_html.timeline_html(res, 0, 12, window=window)
    assert timeline.timeline_figure(res, 0, 12, window=window).layout.annotations[1].text == title
    every = timeline.requests_in_window(res, window, 0, alive.size)
    assert timeline.panel_titles(["GPU 0"], every, window, 0, "tick", alive.size)[1] == f"{alive.size} requests alive in this window"
    assert timeline.panel_titles(["GPU 0"], ids, window, 5, "tick", alive.size)[1] == f"{title} (after skipping 5)"


def _kv_panel_top(markup: str) -> str:
    """The top label of the panel after the "KV cache in use" title (its y labels: top, 0, the unit)."""
    after = markup.split('<div class="sgt-t">KV cache in use', 1)[1]
    return re.search(r'<div class="sgt-l"><span style="top:0;transform:translateY\(-50%\)">([^<]*)</span>', after)[1]


def test_the_kv_panel_scales_to_its_lines_in_view_and_keeps_a_full_cache_on_the_whole_scale():
    # a review: on a fixed 0-100 axis the lessons' mechanism runs (0.5-12 % of the cache) drew a line on the floor;
    # the panel's top is now the peak of its lines in view with a quarter's headroom, in steps of 5
    light = run_simulation(make_config("mechanism-prefill-stall"))
    window = timeline.opening_window(light)
    peak = timeline.kv_lines_peak_pct(timeline.line_series(light, window, timeline_html.HTML_LINE_POINTS))
    top = timeline.kv_axis_top_pct(peak)
    assert 0 < peak < 20 and peak * 1.25 <= top < 25
    assert _kv_panel_top(timeline_html.timeline_html(light, 0, 30, window)) == f"{top:,.0f}"
    fig = timeline.timeline_figure(light, 0, 30, window=window)
    assert tuple(fig.layout.yaxis3.range) == (0, timeline.kv_axis_top_pct(timeline.kv_lines_peak_pct(timeline.line_series(light, window))))
    # a cache past 60 % in view keeps the whole scale (100 in the HTML panel, 105 in Plotly's with its margin)
    full = run_simulation(make_config("kv-pressure-a100-llama8b", workload__num_requests=60))
    assert _kv_panel_top(timeline_html.timeline_html(full)) == "100"
    assert tuple(timeline.timeline_figure(full).layout.yaxis3.range) == (0, 105)


def test_the_queue_lines_draw_running_solid_under_dotted_waiting_and_swapped():
    # a review: in lesson 5's swap run the pink swapped line (4) covered the black running line (4) for seconds, and in
    # its recompute run the waiting line hid under the running one; the running line now comes first, the others dotted
    res = run_simulation(make_config("mechanism-kv-preemption", scheduler__preemption="swap"))
    queues = [ln for ln in timeline.line_series(res, None) if ln.panel == 4]
    assert [(ln.name, ln.dash) for ln in queues] == [("running requests", "solid"), ("waiting requests", "dot"),
                                                     ("swapped requests", "dot")]  # fmt: skip
    running, _, swapped = (ln.y for ln in queues)
    assert ((running == swapped) & (running > 0)).any()  # (the case: equal counts, which a solid line hid)


def test_presenter_mode_puts_the_legend_above_the_panels(v0):
    # at 1280x720 under a lesson's banner the legend, the key to the colours the answers name, was below the screen
    window = timeline.opening_window(v0)
    plain, projected = (timeline_html.timeline_html(v0, 0, 12, window, presenter=p) for p in (False, True))
    first_title = projected.index('class="sgt-t"')
    assert projected.index('class="sgt-lg top"') < first_title and plain.index('class="sgt-lg"') > plain.index('class="sgt-x"')

    def legend(markup: str) -> list[str]:
        start = markup.index('<div class="sgt-lg')
        return Parsed(markup[start : markup.index("</div>", start)]).text

    assert len(legend(plain)) >= 4
    assert legend(projected) == legend(plain)


def test_a_line_panels_value_labels_are_centred_on_their_values():
    # a review: "0" sat with its bottom on the floor, half a line above zero, so a waiting count of 1 was drawn level
    # with it; the top label likewise sat below the top. Each is now centred on its value (the unit's label is not one)
    markup = timeline_html.timeline_html(run_simulation(make_config("mechanism-prefill-stall")))
    labels = re.findall(r'<div class="sgt-l">(<span style="top:0[^"]*">[^<]*</span><span style="[^"]*">0</span>)', markup)
    assert len(labels) >= 2  # the queue and KV panels
    assert all('style="top:0;transform:translateY(-50%)"' in lb and 'style="bottom:0;transform:translateY(50%)">0<' in lb
               for lb in labels)  # fmt: skip
