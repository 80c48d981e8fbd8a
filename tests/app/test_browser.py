"""The main path in a real browser: start the server, load the default page and a shared link in
headless Chromium (Debian's package, driven by Playwright), check that the Gantt and a latency
chart were drawn, and save screenshots to artifacts/."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from app.state import encode_config
from tests.conftest import make_config

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"
ARTIFACTS = ROOT / "artifacts"
LAUNCH_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]

pytestmark = pytest.mark.browser


def _require_browser():
    missing = not Path(CHROMIUM).exists() or shutil.which("streamlit") is None
    try:
        import playwright  # noqa: F401  (availability check)
    except ImportError:
        missing = True
    if missing:
        if os.environ.get("CI"):
            pytest.fail("CI must run the browser test: install Debian's chromium and the test extra (.ci/run does)")
        pytest.skip("headless Chromium or Playwright is not installed here")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server():
    _require_browser()
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", str(ROOT / "app" / "streamlit_app.py"), "--server.port", str(port),
         "--server.address", "127.0.0.1", "--server.headless", "true"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if urllib.request.urlopen(url + "/_stcore/health", timeout=2).read() == b"ok":
                break
        except OSError:
            time.sleep(0.5)
    else:
        proc.kill()
        pytest.fail("the Streamlit server did not start within 60 s")
    yield url
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()


@pytest.fixture(scope="module")
def browser():
    _require_browser()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=LAUNCH_ARGS)
        yield b
        b.close()


def _open(browser, url: str):
    page = browser.new_page(viewport={"width": 1500, "height": 1300})
    page.goto(url)
    page.wait_for_selector("[data-testid='stMetric']", timeout=90_000)
    page.wait_for_selector(".js-plotly-plot", timeout=90_000)
    return page


def _metric_values(page) -> list[str]:
    return page.locator("[data-testid='stMetricValue']").all_inner_texts()


def test_default_page_draws_the_gantt_and_a_latency_chart(server, browser):
    ARTIFACTS.mkdir(exist_ok=True)
    page = _open(browser, server + "/")
    assert "preset=chat-h100-llama8b" in page.url
    gantt = page.locator(".js-plotly-plot").first
    assert "GPU occupancy" in gantt.inner_text()
    assert gantt.locator("g.barlayer path").count() > 10  # the bars were drawn
    assert page.locator("text=Traceback").count() == 0
    page.screenshot(path=str(ARTIFACTS / "default-timeline.png"))
    page.get_by_role("tab", name="Latency").click()
    page.wait_for_selector("text=Histogram", timeout=30_000)
    hist = page.locator(".js-plotly-plot", has_text="Histogram").first
    assert hist.locator("g.barlayer path").count() > 5
    page.screenshot(path=str(ARTIFACTS / "default-latency.png"))
    page.get_by_role("tab", name="Share & export").click()
    with page.expect_download(timeout=60_000) as dl:
        page.get_by_role("button", name="Ticks (CSV)").click()
    header = Path(dl.value.path()).read_text().splitlines()[0]
    assert header.startswith("tick,t_start_s,duration_s,phase")
    page.close()


def test_shared_link_reproduces_the_same_numbers_in_a_fresh_browser(server, browser):
    cfg = make_config("chat-h100-llama8b-vllm-v0", seed=3, workload__num_requests=150)
    link = f"{server}/?cfg={encode_config(cfg)}"
    first = _open(browser, link)
    values = _metric_values(first)
    first.close()
    context = browser.new_context()  # a fresh browser profile: nothing shared but the link
    second = context.new_page()
    second.set_viewport_size({"width": 1500, "height": 1300})
    second.goto(link)
    second.wait_for_selector("[data-testid='stMetric']", timeout=90_000)
    assert _metric_values(second) == values
    assert "scheduler vLLM V0" in second.locator("[data-testid='stMain']").inner_text()
    second.screenshot(path=str(ARTIFACTS / "shared-link.png"))
    context.close()


def test_broken_link_shows_a_warning_not_a_traceback(server, browser):
    page = _open(browser, server + "/?cfg=garbage")
    assert page.locator("text=default scenario").count() >= 1
    assert page.locator("text=Traceback").count() == 0
    page.close()
