"""Tampered links and uploads through the entry points a visitor uses: link parsing, every page in
AppTest, the two uploaders. Each must end in a page (possibly with a warning), never an exception,
and all visitor text must be shown as text (no link, image or HTML rendered from it).
`SIM_PROPERTY_CASES=N` for many more cases (a twentieth of N for the page runs)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from markdown_it import MarkdownIt
from streamlit.testing.v1 import AppTest

from app.components.text import plain
from app.state import config_from_query
from sim_core import SimConfig, config_from_dict, load_preset
from sim_core.lessons import load_lessons
from tests.strategies import MARKDOWN_BAITS, cases, deployment_link_params, encode_json, link_params, nested_text

APP = str(Path(__file__).resolve().parents[2] / "app" / "streamlit_app.py")
PAGES = ["app_pages/simulate.py", "app_pages/compare.py", "app_pages/sweep.py", "app_pages/learn.py", "app_pages/about.py",
         "app_pages/plan.py"]
MD = MarkdownIt("gfm-like", {"linkify": True})
MD.linkify.set({"fuzzy_link": False})  # GFM links only www., http(s):// and e-mail, not bare "hardware.name"
NESTED_CFG = encode_json(nested_text(2000))


# The browser (Streamlit's react-markdown with remark-gfm) links bare addresses a second time, after parsing: the
# mdast-util-gfm-autolink-literal transform searches the text nodes, whose backslash escapes are already resolved, so
# `http\://x.invalid`, `www\.x.invalid` and `me\@x.invalid` become links there although markdown-it (MD) leaves them.
_MD_ESCAPE = re.compile(r"\\([!-/:-@\[-`{-~])")  # CommonMark: a backslash before ASCII punctuation
_TRANSFORM_AUTOLINK = re.compile(r"(?i)https?://|www(?=\.)|[-.\w+]+@[-\w]+(?:\.[-\w]+)+")  # the transform's url and e-mail patterns


# Streamlit's own directives, matched in the text with its escapes resolved (as the autolinks above): emoji shortcodes
# (:smile:), Material icons (:material/home:) and colours (:red[...]); `\:smile:` was still an icon in Chromium
_SHORTCODE = re.compile(r":(?:[a-z0-9_+-]+:|material/|[a-z]+\[)")


def browser_shortcodes(markdown: str) -> list[str]:
    """The emoji, icon and colour directives the browser would render in `markdown`."""
    return _SHORTCODE.findall(_MD_ESCAPE.sub(r"\1", markdown))


def browser_autolinks(markdown: str) -> list[str]:
    """The addresses in `markdown` that the browser's transform-time autolinking would find (a superset: it also
    checks the character before an address, which only ever removes matches)."""
    return _TRANSFORM_AUTOLINK.findall(_MD_ESCAPE.sub(r"\1", markdown))


def markdown_sources(at: AppTest) -> list[str]:
    """The Markdown source of every Markdown-rendering element (markdown, caption, alerts, and st.table's cells, index
    and headers, which it renders as Markdown)."""
    tables = [str(x) for t in at.table for x in (*t.value.index, *t.value.columns, *t.value.to_numpy().ravel())]
    return [e.value for e in (*at.markdown, *at.caption, *at.warning, *at.error, *at.info, *at.success,
                              *at.sidebar.markdown, *at.sidebar.caption, *at.sidebar.error, *at.sidebar.warning)] + tables  # fmt: skip


def rendered_markup(at: AppTest) -> list[str]:
    """HTML of every Markdown-rendering element (markdown, caption, alerts) as a GFM renderer makes it."""
    return [MD.render(source) for source in markdown_sources(at)]


def assert_no_markup_from_visitors(at: AppTest) -> None:
    for html in rendered_markup(at):
        assert "<a " not in html and "<img" not in html and "<h1" not in html, html
    for source in markdown_sources(at):
        assert not browser_autolinks(source), source


@cases(300)
@given(link_params())
@example({"cfg": "eNqLjh4Fo2AUDHcQOwpGwSgY9gAAbqbO3w"})
@example({"preset": "chat-h100-llama8b", "hardware.name": '"x\\ud800y"'})
@example({"preset": "[Session expired - log in here](https://example.invalid/login)"})
@example({"cfg": NESTED_CFG})
def test_any_link_gives_a_config_and_at_most_a_warning(params):
    cfg, preset, warning = config_from_query(params)
    assert isinstance(cfg, SimConfig)
    cfg.model_dump_json().encode("utf-8")  # every accepted config can be written to a link or file
    if warning:
        for html in [MD.render(plain(warning))]:
            assert "<a " not in html and "<img" not in html
        assert not browser_autolinks(plain(warning)), warning


@cases(200)
@given(st.text(max_size=80) | MARKDOWN_BAITS)
def test_plain_text_renders_as_itself(text):
    html = MD.render(plain(text))
    for tag in ("<a ", "<img", "<h", "<em", "<strong", "<code", "<pre", "<ul", "<ol", "<blockquote", "<table", "<hr", "<s>"):
        assert tag not in html, (text, html)
    assert not browser_autolinks(plain(text)), (text, plain(text))
    assert not browser_shortcodes(plain(text)), (text, plain(text))


def test_a_message_of_megabytes_is_cut_where_the_page_shows_it():
    # a 3 MB warning quoting a link's name took the browser 230 s to draw, the tab frozen; the page's own bound
    from app.components.text import MAX_SHOWN_CHARS

    shown = plain("name " + "A" * 3_000_000)
    assert len(shown) < MAX_SHOWN_CHARS + 100 and shown.endswith(f"… ({3_000_005 - MAX_SHOWN_CHARS:,} more characters not shown)")
    assert plain("A" * MAX_SHOWN_CHARS) == "A" * MAX_SHOWN_CHARS  # (at the bound: whole)


@pytest.mark.parametrize("text", [":smile:", ":red[RED] :smile: :material/home:", "ok :material/warning: go", ":+1:"])
def test_emoji_and_icon_codes_in_visitor_text_are_shown_as_typed(text):
    # ?workload.name=:red[RED] :smile: :material/home: showed a red word, a smiley and a house in the header: Streamlit
    # matches its codes after the backslash escapes are resolved
    shown = plain(text)
    assert not browser_shortcodes(shown), shown
    assert shown.replace("\u2060", "").replace("\\", "") == text, shown


def test_a_link_key_named_twice_is_used_by_no_page_and_named():
    # ?scheduler.max_num_seqs=2&scheduler.max_num_seqs=4 ran 4 without a word (files and --set refuse a repeated key)
    at = AppTest.from_file(APP, default_timeout=120)
    at.query_params["preset"] = "chat-h100-llama8b"
    at.query_params["scheduler.max_num_seqs"] = ["2", "4"]
    at.run()
    assert not at.exception
    said = " ".join(w.value for w in at.warning)
    assert "'scheduler.max_num_seqs' 2 times ('2', '4')" in said and "none of those values was used" in said, said
    assert at.session_state["sim.cfg"].scheduler.max_num_seqs == load_preset("chat-h100-llama8b").scheduler.max_num_seqs


@pytest.mark.parametrize("text", ["[Session expired - log in here](https://example.invalid/login)", "see HTTP://example.invalid",
                                  "www.example.invalid", "WWW.example.invalid/x", "write to me@example.invalid"])
def test_addresses_in_visitor_text_are_not_linked_by_the_browser(text):
    # The unknown-preset warning of ?preset=[Session expired - log in here](https://example.invalid/login) was a
    # clickable link to https://example.invalid/logi in Chromium (so were a scheduler name's www. and e-mail addresses).
    shown = plain(text)
    assert not browser_autolinks(shown), shown
    assert shown.replace("\u2060", "").replace("\\", "") == text.replace("\\", ""), shown  # reads as typed


def open_page(page: str, params: dict[str, str], open_sections: bool = False) -> AppTest:
    """Open `page` the way a link to it does (`open_sections`: with every lazy sidebar section open)."""
    at = AppTest.from_file(APP, default_timeout=120)
    if open_sections:
        from app.components.config_form import SECTIONS

        for section in SECTIONS:
            at.session_state[f"ui.section.{section}"] = True
    for k, v in params.items():
        at.query_params[k] = v
    at.run()
    if page != PAGES[0]:
        at.switch_page(page)
        for k, v in params.items():
            at.query_params[k] = v
        at.run()
    return at


@pytest.mark.parametrize("page", PAGES)
@cases(2, expensive=True)
@given(params=link_params())
def test_every_page_survives_tampered_links(page, params):
    at = open_page(page, params)
    assert not at.exception, [e.value for e in at.exception]
    assert_no_markup_from_visitors(at)


def test_compares_table_shows_a_links_class_names_as_text():
    # audit 80: Compare's table named each class's rows after the link's class name, and st.table renders Markdown:
    # a class named "[Click here](https://evil.example)" was a link in the table
    classes = '[{"name":"[Click here](https://evil.example)","share":0.5},{"name":"**b**","share":0.5,"priority":1}]'
    at = open_page("app_pages/compare.py", {"a_preset": "chat-h100-llama8b", "a_workload.classes": classes,
                                            "b_preset": "engine-orca"})  # fmt: skip
    assert not at.exception, [e.value for e in at.exception]
    labels = [str(x) for t in at.table for x in t.value.index]
    assert any("Click here" in x for x in labels) and any("b" in x.split("·")[-1] for x in labels), labels
    assert_no_markup_from_visitors(at)
    for label in labels:
        assert "<strong>" not in MD.render(label), label


ISSUE_LINKS = [  # the links of issue 10, page by page
    ("app_pages/simulate.py", {"cfg": "eNqLjh4Fo2AUDHcQOwpGwSgY9gAAbqbO3w"}, "nested"),
    ("app_pages/about.py", {"cfg": "eNqLjh4Fo2AUDHcQOwpGwSgY9gAAbqbO3w"}, "nested"),
    ("app_pages/sweep.py", {"cfg": "eNqLjh4Fo2AUDHcQOwpGwSgY9gAAbqbO3w"}, "nested"),
    ("app_pages/compare.py", {"a_cfg": NESTED_CFG, "b_preset": "engine-orca"}, "nested"),
    ("app_pages/simulate.py", {"preset": "chat-h100-llama8b", "hardware.name": '"x\\ud800y"'}, "surrogate"),
    ("app_pages/sweep.py", {"sweep": "rate", "start": "inf"}, "using defaults"),
    ("app_pages/sweep.py", {"sweep": "rate", "start": "-5"}, "using defaults"),
    ("app_pages/sweep.py", {"sweep": "chunk", "n": "abc"}, "using defaults"),
    ("app_pages/sweep.py", {"sweep": "max_num_seqs", "start": "nan"}, "using defaults"),
    ("app_pages/sweep.py", {"sweep": "num_gpus", "stop": "1e300"}, "using defaults"),
    ("app_pages/sweep.py", {"cfg": "!!!"}, "default scenario"),
    # the sweep link's range problems name the parameter and its value, not only the rule ('max_num_seqs must be between
    # 1 and 8192' for start=0, 'start must be below stop', 'n must be 2 to 16')
    ("app_pages/sweep.py", {"sweep": "max_num_seqs", "start": "0", "stop": "5"}, "start = 0: max_num_seqs must be between 1 and 8,192"),
    ("app_pages/sweep.py", {"sweep": "rate", "start": "8", "stop": "4"}, "start = 8 must be below stop = 4"),
    ("app_pages/sweep.py", {"sweep": "rate", "n": "99"}, "n = 99: n must be 2 to 16"),
    ("app_pages/about.py", {"preset": "/etc/passwd"}, "unknown preset"),
    ("app_pages/learn.py", {"lesson": "nope"}, "unknown lesson"),
    # an unknown name is answered with the one meant and the names allowed: a lesson's file name is not its id
    ("app_pages/learn.py", {"lesson": "05-kv-preemption"}, "unknown lesson '05-kv-preemption' (did you mean "
     "'kv-preemption'? allowed: roofline, static-vs-continuous,"),
    ("app_pages/sweep.py", {"sweep": "rates"}, "unknown sweep knob 'rates' (did you mean 'rate'? allowed: rate, max_num_seqs,"),
    ("app_pages/sweep.py", {"vs": "vllm"}, "unknown engine 'vllm' to compare (did you mean 'vllm-v0', 'vllm-v0-swap' or "
     "'vllm-v1'? allowed: article-dynamic-batch,"),
    # workshop values the page cannot use were dropped without a word (no agenda, the answer still hidden)
    ("app_pages/learn.py", {"lesson": "roofline", "workshop": "1", "reveal": "roofine"}, "The link's reveal = 'roofine' "
     "reveals nothing (did you mean 'roofline'? allowed: 1, all, roofline,"),
    ("app_pages/learn.py", {"workshop": "yes"}, "The link's workshop = 'yes' is not used (allowed: 1, the agenda"),
    ("app_pages/about.py", {"present": "yes"}, "The link's present = 'yes' is not used (allowed: 1, presenter mode)."),
    # and a range value that is not a number is named with its parameter (it said only "'abc' is not a number")
    ("app_pages/sweep.py", {"sweep": "rate", "start": "abc"}, "(start: 'abc' is not a number)"),
    # every problem of the range, not the first alone (n's 99 was replaced without a word)
    ("app_pages/sweep.py", {"sweep": "rate", "start": "abc", "n": "99"}, "(start: 'abc' is not a number; n = 99: n must be 2 to 16)"),
    ("app_pages/about.py", {"foo": "1"}, "ignored link parameter"),
    # the Glossary said nothing of a link it could not use; Simulate took a lesson it cannot show without a word; Learn's list of
    # lessons left out that a number opens one too
    ("app_pages/glossary.py", {"preset": "nope"}, "unknown preset 'nope'"),
    ("app_pages/glossary.py", {"q": "<b>x</b>"}, "ignored link parameter(s) it does not use: 'q'"),
    ("app_pages/simulate.py", {"lesson": "roofine"}, "unknown lesson 'roofine' (did you mean 'roofline'?"),
    ("app_pages/simulate.py", {"lesson": "roofline", "lesson_step": "7"}, "The link's lesson_step = '7' is not used (allowed"),
    ("app_pages/simulate.py", {"reveal": "1"}, "The link's reveal = '1' is not used: it goes with a lesson"),
    ("app_pages/learn.py", {"lesson": "99"}, f"(or its number, 1-{len(load_lessons())})"),
    # the Simulate page rewrote its address before reading it for the notices: a mistyped field vanished unnamed
    ("app_pages/simulate.py", {"preset": "chat-h100-llama8b", "sheduler.max_num_seqs": "64"}, "ignored link parameter(s) it does not use: 'sheduler.max_num_seqs'"),
    ("app_pages/plan.py", {"preset": "/etc/passwd"}, "unknown preset"),
    # a whole number of more than 4,300 digits: int() of its text raised ValueError and every page crashed
    ("app_pages/simulate.py", {"seed": "9" * 5000}, "seed = a number past 1e+308: out of range; allowed: >= 0 and <= 4294967295"),
    ("app_pages/simulate.py", {"cfg": "eNrtwUERACAIALAqHi00DyTgydndFP62TXRVxlkbAAAAAPjuPlC4XLw"}, "seed = a number past 1e+308: out of range"),
    ("app_pages/simulate.py", {"hardware.peak_tflops": "1" + "0" * 5000}, "hardware.peak_tflops = inf: Input should be a finite number"),
    ("app_pages/compare.py", {"a_seed": "9" * 5000}, "seed = a number past 1e+308: out of range"),
    ("app_pages/sweep.py", {"seed": "9" * 5000}, "seed = a number past 1e+308: out of range"),
    ("app_pages/sweep.py", {"sweep": "rate", "n": "9" * 5000}, "(5,000 digits) is too large"),
    ("app_pages/plan.py", {"seed": "9" * 5000}, "seed = a number past 1e+308: out of range"),
    ("app_pages/simulate.py", {"preset": "[Session expired - log in here](https://example.invalid/login)"}, "unknown preset"),
]


@pytest.mark.parametrize("page,params,says", ISSUE_LINKS)
def test_each_page_says_what_it_ignored(page, params, says):
    at = open_page(page, params)
    assert not at.exception
    warnings = " ".join(w.value for w in at.warning)
    assert says in warnings.replace("\\", ""), warnings
    assert_no_markup_from_visitors(at)


def test_a_markdown_scheduler_name_is_shown_as_text():
    at = open_page(PAGES[0], {"preset": "chat-h100-llama8b", "scheduler.name": "![](https://example.invalid/p.png)"})
    assert not at.exception
    assert any("p.png" in c.value for c in at.caption)
    assert_no_markup_from_visitors(at)


def test_a_markdown_scheduler_name_in_a_compare_link_is_shown_as_text():
    # the A — B line under the pickers rendered a linked scheduler name as markdown (an image, a link)
    at = open_page(PAGES[1], {"a_preset": "chat-h100-llama8b", "a_scheduler.name": "![](https://example.invalid/p.png)",
                              "b_preset": "chat-h100-llama8b", "b_scheduler.name": "[log in](https://example.invalid)"})
    assert not at.exception
    assert any("p.png" in m.value for m in at.markdown if m.value.startswith("**A**"))
    assert_no_markup_from_visitors(at)


def _uploader(at: AppTest, key: str):
    return next(u for u in at.file_uploader if u.key == key)


UPLOADS = st.one_of(
    st.binary(max_size=300),
    st.just(nested_text(5000).encode()),
    st.just(b'{"hardware": {"memory_gb": true}}'),
    st.just('{"hardware": {"name": "[x](https://example.invalid)"}, "scheduler": {"max_num_seqs": "12"}}'.encode()),
    st.just(b"\xef\xbb\xbfarrival_s,prompt_tokens,output_tokens\n0,10,5\n0.5,1_000,5\n"),
    st.just(b"arrival_s,prompt_tokens,output_tokens\n0,10,5\n"),
)  # fmt: skip


@cases(3, expensive=True)
@given(raw=UPLOADS, which=st.sampled_from(["w.upload_config", "w.upload_trace"]))
def test_uploads_of_any_content_give_a_config_or_a_message(raw, which):
    at = AppTest.from_file(APP, default_timeout=120)
    at.session_state["ui.section.Workload"] = True  # sidebar sections are lazy: the trace upload lives in Workload
    at.run()
    ext = ".json" if which == "w.upload_config" else ".csv"  # the browser enforces the extension too
    _uploader(at, which).set_value((f"[a](https://example.invalid){ext}", raw, "text/plain"))
    at.run()
    assert not at.exception
    assert_no_markup_from_visitors(at)


def _every_text_field_baited(preset: str) -> SimConfig:
    """`preset` with every free-text field of the config (found by walking it, so a new one is covered)
    set to a Markdown link naming that field, and every request class named by one."""
    data = load_preset(preset).model_dump(mode="json")

    def walk(node: dict, prefix: str) -> None:
        for key, value in node.items():
            if isinstance(value, dict):
                walk(value, f"{prefix}{key}.")
            elif isinstance(value, str):
                node[key] = f"[{prefix}{key}](https://example.invalid/{prefix}{key})"
                try:
                    config_from_dict(json.loads(json.dumps(data)), "test")
                except ValueError:  # a choice (a Literal, a preset name): not free text
                    node[key] = value

    walk(data, "")
    for i, c in enumerate(data["workload"]["classes"]):
        c["name"] = f"[class{i}](https://example.invalid/c)"
    return config_from_dict(data, "test")


@pytest.mark.parametrize("page,preset", [(p, "chat-h100-llama8b") for p in [*PAGES, "app_pages/glossary.py"]]
                         + [(p, "cluster-splitwise-llama70b-4xdgx-ha-3p1d") for p in PAGES[:2]])
def test_every_text_field_of_a_linked_config_is_shown_as_text(page, preset):
    # the sidebar's Hardware caption rendered a linked `hardware.name` and `hardware.source` as Markdown
    # links, Compare's "B's own workload (…)" note a linked `workload.name`, and the Deployment section's
    # "N GPUs = …" line the pools' GPU names
    from app.state import encode_config

    cfg = _every_text_field_baited(preset)
    baited = (cfg.hardware.name, cfg.hardware.source, cfg.model.name, cfg.workload.name, cfg.scheduler.name)
    assert all("example.invalid" in text for text in baited)  # the walk found the free-text fields
    params = {"cfg": encode_config(cfg)}
    if page == PAGES[1]:  # Compare: A from a preset, B from the link (its own workload is then replaced and named)
        params = {"a_preset": preset, "b_cfg": encode_config(cfg)}
    at = open_page(page, params, open_sections=True)  # (sidebar sections are lazy: all open)
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]  # the names are valid: the page draws its results
    assert_no_markup_from_visitors(at)


def test_an_unknown_page_address_is_named_as_text(monkeypatch):
    # "There is no page “…”" rendered the address's last segment as Markdown: /[Session expired, log in](https:evil.invalid)
    # opened the app under a link to https://evil.invalid (https: with no slashes is still a web address)
    import streamlit as st

    address = "http://localhost:8501/[Session%20expired,%20log%20in](https:evil.invalid)"
    monkeypatch.setattr(type(st.context), "url", property(lambda self: address))
    at = AppTest.from_file(APP, default_timeout=120).run()
    assert not at.exception
    assert_no_markup_from_visitors(at)
    warning = next(w.value for w in at.warning if "There is no page" in w.value)
    assert "Session expired, log in" in warning.replace("\\", "")  # decoded, as typed


def test_a_links_bad_value_keeps_its_preset_and_other_values_on_the_page():
    # the page opened the default scenario (Llama-8B on one H100, seed 0) and its address said so: the link's
    # preset and seed were lost with the one bad value
    at = open_page(PAGES[0], {"preset": "chat-4xh100-llama70b", "scheduler.max_num_seqs": "-1", "seed": "7"})
    assert not at.exception
    assert any("scheduler.max_num_seqs = -1" in w.value and "allowed: >= 1 and <= 8192" in w.value for w in at.warning)
    assert at.session_state["sim.cfg"] == load_preset("chat-4xh100-llama70b").model_copy(update={"seed": 7})
    assert dict(at.query_params) == {"preset": "chat-4xh100-llama70b", "seed": "7"}  # readable: it diffs against the preset


def test_a_link_to_a_deployment_too_large_for_the_server_says_what_fits():
    # ?preset=cluster-prefix-4xh100-llama8b&deployment.replicas=64&workload.num_requests=200000 held the worker for its
    # whole 15 s hard timeout (set-up of 64 engines x 200k requests, where the budget's meter never looks), then showed
    # "Nothing to show"; the budget now refuses it up front, naming the fields, their values and what fits
    import time

    t0 = time.perf_counter()
    at = open_page(PAGES[0], {"preset": "cluster-prefix-4xh100-llama8b", "deployment.replicas": "64",
                              "workload.num_requests": "200000"})  # fmt: skip
    assert not at.exception
    errors = " ".join(e.value for e in at.error).replace("\\", "")
    # (the settings by the sidebar's labels: config_form.sidebar_words)
    assert "“Replicas” (Deployment) = 64" in errors and "“Requests” (Workload) = 200,000" in errors, errors
    assert "at most 10,485 requests" in errors, errors
    assert time.perf_counter() - t0 < 12  # (a page, not the worker's hard timeout)
    assert_no_markup_from_visitors(at)


@cases(25)
@given(deployment_link_params())
@example({"preset": "cluster-prefix-4xh100-llama8b", "deployment.replicas": "64", "workload.num_requests": "200000"})
@example({"preset": "cluster-splitwise-llama70b-4xdgx-ha-3p1d", "deployment.disaggregation.link.bandwidth_gb_per_s": "5e-324"})
def test_a_deployment_link_runs_within_the_servers_budget_or_says_why(params):
    # A link's deployment knobs at and past their bounds (64 replicas, 63:1 pools, a subnormal link, 200k requests):
    # the link gives a config (its refused values named in the warning), and the run under a server's budget ends
    # within a bounded time with every request accounted for, or is refused with a message; never another exception
    import time

    from sim_core import MemoryPlanError, PresetError, run_simulation
    from sim_core.budget import RunBudget

    cfg, _, warning = config_from_query(params)
    if warning:  # a refused value is named by its field (a rule between fields: by one of the link's, or their section)
        assert any(part in warning for k in params if k != "preset" for part in k.split(".")[1:]), warning
    budget = RunBudget(max_wall_s=1.0)
    t0 = time.perf_counter()
    try:
        res = run_simulation(cfg, budget=budget)
    except (PresetError, MemoryPlanError) as err:  # refused before the run: the budget's set-up, or KV that cannot fit
        assert str(err) and "Traceback" not in str(err)
        return
    assert time.perf_counter() - t0 < 4 * budget.max_wall_s  # (set-up and result assembly included; a busy machine)
    s = res.summary
    assert s.num_finished + s.num_unfinished == s.num_requests == cfg.workload.num_requests


@pytest.mark.parametrize("field,preset", [
    ("hardware.peak_tflops", "chat-h100-llama8b"), ("hardware.hbm_bandwidth_gb_per_s", "chat-h100-llama8b"),
    ("hardware.hbm_efficiency_scale", "chat-h100-llama8b"), ("hardware.interconnect_gb_per_s", "chat-4xh100-llama70b"),
    ("limits.max_sim_time_s", "chat-h100-llama8b"),
])  # fmt: skip
def test_a_link_of_a_subnormal_rate_or_time_limit_gives_a_page_naming_it(field, preset):
    # each of these at 5e-324 ran (ticks of inf seconds, or one idle row 5e-324 s long) and the Timeline tab raised in the
    # browser: the window slider's max_value inf, the axis ticks' arange of NaN
    at = open_page(PAGES[0], {"preset": preset, field: "5e-324"})
    assert not at.exception, [e.value for e in at.exception]
    warnings = " ".join(w.value for w in at.warning).replace("\\", "")
    assert f"{field} = 5e-324" in warnings and "allowed: >= 1e-06" in warnings, warnings


@given(st.text(alphabet=st.sampled_from("aB .,9\n(e.gicfvs"), max_size=400))
def test_a_hardware_source_splits_at_its_first_statement_without_losing_a_character(text):
    # the sidebar's caption of a GPU's numbers: up to the first full stop before a space ("989.4 TFLOPS" is no end)
    from app.components.text import first_statement

    first, rest = first_statement(text)
    whole = text.strip()
    if not rest:
        assert first == whole or first.endswith(".") and whole[len(first):].strip() == ""
        return
    assert whole.startswith(first) and whole[len(first):].strip() == rest and first.endswith(".")
    assert not any(first[i] == "." and first[i + 1].isspace() and not first[:i].endswith(("e.g", "i.e", "vs", "cf"))
                   for i in range(len(first) - 1))  # (the first such stop)  # fmt: skip


@given(st.text(alphabet=st.sampled_from("aB .!?(',e.gvsFig"), max_size=1500))
def test_a_description_splits_into_its_lead_and_the_rest_without_losing_a_character(text):
    from app.components.text import _SENTENCE_END, LEAD_CHARS, WHOLE_CHARS, lead_and_rest

    lead, rest = lead_and_rest(text)
    whole = text.strip()
    if not rest:
        assert lead == whole
        return
    assert len(whole) > WHOLE_CHARS and whole.startswith(lead) and whole[len(lead):].strip() == rest
    assert lead[-1] in ".!?" and rest[0] in "ABCDEFGHIJKLMNOPQRSTUVWXYZ'("  # (at a sentence's end)
    # whole sentences up to LEAD_CHARS, or the first sentence when even that is longer
    assert len(lead) <= LEAD_CHARS or not any(m.end() <= LEAD_CHARS for m in _SENTENCE_END.finditer(whole))
