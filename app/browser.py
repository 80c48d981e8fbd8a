"""A real browser on the app: find headless Chromium, serve the app, and time what a user waits for.

Used by the browser benchmark (`python -m app.bench --browser`) and the browser test. Chromium is
looked up in this order: $CHROMIUM, Debian/Ubuntu's package (/usr/bin/chromium), any `chromium`,
`chromium-browser`, `google-chrome` on PATH, then the browser Playwright downloads with
`python -m playwright install chromium` (no root needed). `find_chromium` says why when none is found.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
APP_SCRIPT = ROOT / "app" / "streamlit_app.py"
FLOOR_SCRIPT = ROOT / "app" / "bench_floor.py"  # the smallest page timed the same way (app.bench --browser)
LAUNCH_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]
CANDIDATES = ("/usr/bin/chromium", "chromium", "chromium-browser", "google-chrome")
# The Simulate page's Gantt: the server-drawn HTML timeline (app/components/timeline_html.py) or,
# with "Zoom with the mouse" on, the Plotly figure. Drawn = its GPU bars are in the page.
GANTT_JS = """() => document.querySelector('[data-testid=timeline-html]') ||
  document.querySelector('.js-plotly-plot .barlayer')"""
GANTT_DRAWN_JS = """() => {
  const h = document.querySelector('[data-testid=timeline-html] .sgt-p .b');
  if (h !== null) return true;
  const p = document.querySelector('.js-plotly-plot');
  return p !== null && p.querySelectorAll('g.barlayer path').length > 0;
}"""


def find_chromium() -> tuple[str | None, str]:
    """(path to a Chromium binary or None, a sentence saying where it came from or why none was found)."""
    try:
        import playwright  # noqa: F401  (the driver is needed whatever the binary)
    except ImportError:
        return None, "Playwright is not installed (pip install -e '.[test]')"
    env = os.environ.get("CHROMIUM")
    if env:
        return (env, "$CHROMIUM") if Path(env).exists() else (None, f"$CHROMIUM={env} does not exist")
    for name in CANDIDATES:
        path = shutil.which(name) if "/" not in name else (name if Path(name).exists() else None)
        if path:
            return path, f"found {path}"
    try:
        from playwright.sync_api import sync_playwright

        with sync_playwright() as p:
            path = p.chromium.executable_path
        if path and Path(path).exists():
            return path, "Playwright's own Chromium"
    except Exception:  # noqa: BLE001  (no driver or no browser: both mean "not available")
        pass
    return None, ("no Chromium found: install Debian's `chromium` (root), or run `python -m playwright install "
                  "chromium` (no root), or set $CHROMIUM to a Chromium binary")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def serve(timeout_s: float = 60.0, env: dict[str, str] | None = None, page: Path = APP_SCRIPT) -> Iterator[str]:
    """Run the app (or another page script, `page`) in a Streamlit server on a free port; yield its base URL; stop it
    afterwards. `env`: variables added to the server's environment (e.g. $SIM_SERVER_CONFIG, its settings file)."""
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", str(page), "--server.port", str(port),
         "--server.address", "127.0.0.1", "--server.headless", "true"],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        env={**os.environ, **(env or {}), "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")},
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                if urllib.request.urlopen(url + "/_stcore/health", timeout=2).read() == b"ok":
                    break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError(f"the Streamlit server did not start within {timeout_s:.0f} s") from None
                time.sleep(0.3)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()


def launch(playwright, chromium: str):
    return playwright.chromium.launch(executable_path=chromium, args=LAUNCH_ARGS)


def main_thread_s(cdp) -> dict[str, float]:
    """The page's main-thread time so far (Chrome's Performance metrics, seconds): all tasks, JS,
    layout and style. Less sensitive to a busy machine than wall time: waiting is not counted."""
    m = {x["name"]: x["value"] for x in cdp.send("Performance.getMetrics")["metrics"]}
    return {"task": m["TaskDuration"], "script": m["ScriptDuration"], "layout": m["LayoutDuration"] + m["RecalcStyleDuration"]}


def time_to_chart_s(browser, url: str, viewport: dict | None = None) -> tuple[float, dict[str, float]]:
    """Open `url` in a fresh browser context (no cache, no cookies); (wall seconds until the Gantt's
    bars are drawn, the main thread's busy time by kind until then)."""
    context = browser.new_context(viewport=viewport or {"width": 1500, "height": 1000})
    page = context.new_page()
    cdp = context.new_cdp_session(page)
    cdp.send("Performance.enable")
    try:
        t0 = time.perf_counter()
        page.goto(url)
        page.wait_for_function(GANTT_DRAWN_JS, timeout=90_000, polling=20)
        return time.perf_counter() - t0, main_thread_s(cdp)
    finally:
        context.close()


REDRAWN_JS = """(before) => {
  const g = (%s)();
  return g !== null && g.innerHTML !== before;
}""" % GANTT_JS


def time_to_redraw_s(page, widget_key: str, key: str = "ArrowRight") -> float:
    """Move a slider (by its widget key) one step with the keyboard; time until the Gantt is drawn
    again with the new run. The knob must change the run (else nothing is redrawn)."""
    before = page.evaluate(f"() => ({GANTT_JS})().innerHTML")
    page.locator(f".st-key-{widget_key.replace('.', '-')} input[type=range]").first.focus()
    t0 = time.perf_counter()
    page.keyboard.press(key)
    page.wait_for_function(REDRAWN_JS, arg=before, timeout=60_000, polling=20)
    return time.perf_counter() - t0
