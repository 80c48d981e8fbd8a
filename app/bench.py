"""The app's cost per rerun on the default preset: `python -m app.bench`.

A rerun that changes a knob simulates the new config and builds every figure the Simulate page
shows (the HTML timeline and its Plotly version, four latency distributions, roofline,
step-through). Reported as the median of several runs and as a ratio to the same in-process
baseline as the engine benchmark.

`python -m app.bench --browser` times what a user waits for in headless Chromium: a shared link
opened in a fresh browser until its Gantt is drawn (the server-drawn HTML timeline), and, once the
page has loaded, one slider step until the Gantt is redrawn (targets 2 s and 0.5 s), plus the
page's main-thread time and the bytes of its chart data.
"""

from __future__ import annotations

import argparse
import statistics
import time

from app.components import charts, timeline, timeline_html
from sim_core import load_preset, run_simulation
from sim_core.bench import baseline_s
from sim_core.presets import DEFAULT_SCENARIO, config_with


def build_figures(res) -> int:
    timeline_html.timeline_html(res, 0, 30, window=timeline.opening_window(res))  # what the default page draws
    figs = [timeline.timeline_figure(res, 0, 30, window=timeline.opening_window(res)), charts.roofline_figure(res)]
    figs += [charts.distribution_figure(res, m) for m in charts.METRICS]
    if res.batches.tick.size:
        figs.append(charts.step_figure(res, int(res.batches.tick[0])))
    return sum(timeline.count_points(f) for f in figs)


def main(repeats: int = 7) -> int:
    base = baseline_s()
    cfg = load_preset(DEFAULT_SCENARIO)
    sim, figs = [], []
    for i in range(repeats):
        cfg_i = config_with(cfg, {"seed": i})  # a knob moved: nothing cached
        t0 = time.perf_counter()
        res = run_simulation(cfg_i)
        t1 = time.perf_counter()
        points = build_figures(res)
        t2 = time.perf_counter()
        sim.append(t1 - t0)
        figs.append(t2 - t1)
    s, f = statistics.median(sim), statistics.median(figs)
    print(f"baseline: {base * 1e3:.1f} ms")
    print(f"default preset, per rerun: simulate {s * 1e3:.0f} ms ({s / base:.2f}x base), build all figures "
          f"{f * 1e3:.0f} ms ({f / base:.2f}x base), total {(s + f) * 1e3:.0f} ms; {points:,} points drawn")
    return 0


def _time_page(browser, url: str, link, widget_key: str, repeats: int) -> dict:
    """Time one served page: `repeats` fresh-browser opens of `link(i)` until the Gantt is drawn (after one untimed
    open that warms the server), then, on one loaded page, `repeats` steps of the slider `widget_key` until it is
    redrawn. Also the loaded page's chart data (Plotly JSON and server-drawn timeline HTML), in bytes."""
    from app.browser import GANTT_DRAWN_JS, time_to_chart_s, time_to_redraw_s

    time_to_chart_s(browser, url + "/")  # warm the server (imports, first script run), not measured
    runs = [time_to_chart_s(browser, link(i)) for i in range(repeats)]
    page = browser.new_page(viewport={"width": 1500, "height": 1000})
    page.goto(url + "/")
    page.wait_for_function(GANTT_DRAWN_JS, timeout=90_000)
    page.wait_for_load_state("networkidle")  # the page has loaded
    page.wait_for_timeout(500)
    figure_bytes = page.evaluate("""() => [...document.querySelectorAll('.js-plotly-plot')].filter(p => p.offsetParent !== null)
        .reduce((n, p) => n + JSON.stringify(p.data).length + JSON.stringify(p.layout).length, 0)""")
    html_bytes = page.evaluate("() => (document.querySelector('[data-testid=timeline-html]') || {outerHTML: ''}).outerHTML.length")
    redraws = []
    for _ in range(repeats):
        redraws.append(time_to_redraw_s(page, widget_key))
        page.wait_for_timeout(300)
    page.close()
    busy = {k: statistics.median(m[k] for _, m in runs) for k in ("task", "script", "layout")}
    return {"opens": [w for w, _ in runs], "redraws": redraws, "busy": busy, "figure_bytes": figure_bytes,
            "html_bytes": html_bytes}


def browser_main(repeats: int = 5) -> int:
    """Median time to the first chart from a shared link (fresh browser each time, a new config
    each time so nothing is cached) and median redraw after one slider step; then the same two
    figures for the smallest Streamlit page (`app/bench_floor.py`): what Streamlit itself costs on
    this machine, so that a slower machine's figures can be read as that floor plus the page's own."""
    from playwright.sync_api import sync_playwright

    from app.browser import FLOOR_SCRIPT, find_chromium, launch, serve
    from app.state import encode_config

    chromium, why = find_chromium()
    if chromium is None:
        print(f"browser benchmark skipped: {why}")
        return 1
    base = baseline_s()
    cfg = load_preset(DEFAULT_SCENARIO)
    with sync_playwright() as p:
        browser = launch(p, chromium)
        with serve() as url:  # a new peak at each slider step: a new run each time
            app = _time_page(browser, url, lambda i: f"{url}/?cfg={encode_config(config_with(cfg, {'seed': 1000 + i}))}",
                             "w.hardware.peak_tflops", repeats)  # fmt: skip
        with serve(page=FLOOR_SCRIPT) as url:
            floor = _time_page(browser, url, lambda i: f"{url}/?run={i}", "w.floor", repeats)
        browser.close()
    o, r = statistics.median(app["opens"]), statistics.median(app["redraws"])
    fo, fr = statistics.median(floor["opens"]), statistics.median(floor["redraws"])
    busy = app["busy"]
    print(f"baseline: {base * 1e3:.1f} ms · Chromium: {why}")
    print(f"shared link, fresh browser, until the Gantt is drawn: median {o:.2f} s ({o / base:.1f}x base; "
          f"runs {', '.join(f'{x:.2f}' for x in app['opens'])}) · target 2 s")
    print(f"one slider step until the Gantt is redrawn: median {r:.2f} s ({r / base:.1f}x base; "
          f"runs {', '.join(f'{x:.2f}' for x in app['redraws'])}) · target 0.5 s")
    print(f"  of which the page's main thread was busy {busy['task']:.2f} s (JavaScript {busy['script']:.2f} s, "
          f"layout and style {busy['layout']:.2f} s); the rest is waiting (server, network, other processes)")
    print(f"figure data on the default page: {app['figure_bytes'] / 1024:,.0f} KiB of Plotly JSON, "
          f"{app['html_bytes'] / 1024:,.0f} KiB of server-drawn timeline HTML")
    print(f"Streamlit's floor here (app/bench_floor.py: one slider, one element): open {fo:.2f} s (runs "
          f"{', '.join(f'{x:.2f}' for x in floor['opens'])}), slider step {fr:.2f} s (runs "
          f"{', '.join(f'{x:.2f}' for x in floor['redraws'])}); the page adds {o - fo:+.2f} s and {r - fr:+.2f} s")
    return 0


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--browser", action="store_true", help="time the page in headless Chromium")
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    raise SystemExit(browser_main(args.repeats) if args.browser else main())
