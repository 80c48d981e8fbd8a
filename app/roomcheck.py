"""What a workshop room sees: N browser sessions on one real server at once. `python -m app.roomcheck [--sessions 30]`

Starts the app (`streamlit run`, its own port, a fresh point cache) and opens N sessions over the websocket a browser
uses (Streamlit's own protocol messages: a session asks for its page with the link's query string and the page is done
at the script's end), all at the same moment, in each scenario:

- one link, cached: the instructor's link, already run once (every session reads the cached result)
- one link, new: the same new link for everyone at once (run once, the other sessions wait for it)
- everyone a different run: each session its own seed (a room that moved one knob each its own way)
- two heavy links among them: 2 sessions open a 200k-request link (the whole 5 s run budget), the rest as above
- one Sweep link: the same 4-point Sweep link for everyone (its points computed once, on the server's pool)

It prints, per scenario, the seconds from a session's request until its page is complete (p50, p90, max over the
sessions) and the exceptions the pages showed (must be 0). The browser's own drawing is not in it (`python -m app.bench
--browser` times that for one session); the server's share of a room is. Timings are noisy on a shared machine: run the
comparison (`--streamlit-option runner.postScriptGC=true`, say) in the same minute.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT = "preset=chat-h100-llama8b"
HEAVY = DEFAULT + "&workload.num_requests=200000&workload.arrival.process=%22offline%22"
SWEEP = DEFAULT + "&sweep=rate&start=4&stop=16&n=4"
SCRIPT_FINISHED_EARLY_FOR_RERUN = 2  # (ForwardMsg.ScriptFinishedStatus: the page runs again at once)


@dataclass(frozen=True)
class Visit:
    seconds: float
    num_exceptions: int


async def visit(port: int, query: str, page: str = "", delay_s: float = 0.0) -> Visit:
    """One browser session asking for `page` with `query`, until the page's script has finished."""
    import websockets
    from streamlit.proto.BackMsg_pb2 import BackMsg
    from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

    await asyncio.sleep(delay_s)
    async with websockets.connect(f"ws://127.0.0.1:{port}/_stcore/stream", subprotocols=["streamlit"], max_size=None) as ws:
        ask = BackMsg()
        ask.rerun_script.query_string, ask.rerun_script.page_name = query, page
        t0 = time.perf_counter()
        await ws.send(ask.SerializeToString())
        num_exceptions = 0
        while True:
            msg = ForwardMsg()
            msg.ParseFromString(await ws.recv())
            kind = msg.WhichOneof("type")
            if kind == "delta" and msg.delta.WhichOneof("type") == "new_element":
                num_exceptions += msg.delta.new_element.WhichOneof("type") == "exception"
            elif kind == "script_finished" and msg.script_finished != SCRIPT_FINISHED_EARLY_FOR_RERUN:
                return Visit(time.perf_counter() - t0, num_exceptions)


async def room(port: int, asks: list[tuple[str, str, float]]) -> list[Visit]:
    return await asyncio.gather(*(visit(port, q, page, delay) for q, page, delay in asks))


def scenarios(n: int, seed0: int) -> dict[str, tuple[list[tuple[str, str, float]], int]]:
    """Scenario -> (the sessions' (query, page, delay s), how many leading sessions are not timed: the heavy ones)."""
    seeds = range(seed0, seed0 + n)
    return {
        "one link, cached": ([(DEFAULT, "", 0.0)] * n, 0),
        "one link, new": ([(f"{DEFAULT}&seed={seed0 - 1}", "", 0.0)] * n, 0),
        "everyone a different run": ([(f"{DEFAULT}&seed={s}", "", 0.0) for s in seeds], 0),
        # (the heavy links first, the others 0.3 s later: their runs have started)
        "two heavy links among them": ([(f"{HEAVY}&seed={s}", "", 0.0) for s in (1, 2)]
                                       + [(f"{DEFAULT}&seed={s + n}", "", 0.3) for s in seeds[2:]], 2),
        "one Sweep link": ([(SWEEP, "sweep", 0.0)] * n, 0),
    }  # fmt: skip


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(port: int, options: list[str], cache_dir: str) -> subprocess.Popen:
    """The app as `streamlit run` serves it, on `port`, until its health check answers (60 s)."""
    cmd = [sys.executable, "-m", "streamlit", "run", str(ROOT / "app" / "streamlit_app.py"), "--server.port", str(port),
           "--server.headless", "true", *(f"--{o.split('=', 1)[0]}={o.split('=', 1)[1]}" for o in options)]  # fmt: skip
    env = os.environ | {"SIM_CORE_CACHE_DIR": cache_dir, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=1) as reply:
                if reply.status == 200:
                    return proc
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise RuntimeError(f"the app did not answer on port {port} within 60 s: {' '.join(cmd)}")


def measure(port: int, n: int, names: list[str] | None = None, seed0: int = 1000) -> dict[str, list[Visit]]:
    """Each scenario's timed visits (after one warm-up visit: the worker's first start is not a room's cost)."""
    asyncio.run(room(port, [(DEFAULT, "", 0.0)]))
    out = {}
    for name, (asks, skip) in scenarios(n, seed0).items():
        if names is None or name in names:
            out[name] = asyncio.run(room(port, asks))[skip:]
    return out


def format_table(results: dict[str, list[Visit]]) -> str:
    lines = [f"{'scenario':28s} {'sessions':>8s} {'p50 s':>7s} {'p90 s':>7s} {'max s':>7s} {'exceptions':>10s}"]
    for name, visits in results.items():
        ts = sorted(v.seconds for v in visits)
        p90 = statistics.quantiles(ts, n=10, method="inclusive")[-1] if len(ts) > 1 else ts[0]
        lines.append(f"{name:28s} {len(ts):8d} {statistics.median(ts):7.2f} {p90:7.2f} {ts[-1]:7.2f} "
                     f"{sum(v.num_exceptions for v in visits):10d}")  # fmt: skip
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m app.roomcheck", description=__doc__.split("\n\n")[0])
    p.add_argument("--sessions", type=int, default=30, help="browser sessions at once (default 30)")
    p.add_argument("--scenario", action="append", choices=list(scenarios(3, 0)), help="only these (repeatable)")
    p.add_argument("--streamlit-option", action="append", default=[], metavar="KEY=VALUE",
                   help="passed to streamlit run as --KEY=VALUE, e.g. runner.postScriptGC=true")  # fmt: skip
    args = p.parse_args(argv)
    for option in args.streamlit_option:
        if "=" not in option:
            p.error(f"--streamlit-option {option!r}: KEY=VALUE, e.g. runner.postScriptGC=true")
    if args.sessions < 3:
        p.error(f"--sessions {args.sessions}: at least 3 (two of them heavy in one scenario)")
    port = _free_port()
    with tempfile.TemporaryDirectory() as cache_dir:
        server = start_server(port, args.streamlit_option, cache_dir)
        try:
            results = measure(port, args.sessions, args.scenario)
        finally:
            server.terminate()
            server.wait(10)
    print(f"{args.sessions} sessions at once on one server ({os.cpu_count()} cores), seconds until each page is complete")
    print(format_table(results))
    return 0 if all(v.num_exceptions == 0 for vs in results.values() for v in vs) else 1


if __name__ == "__main__":
    sys.exit(main())
