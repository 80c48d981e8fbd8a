"""Does one heavy session slow the others? `python -m app.loadcheck [--rounds N] [--in-thread]`;
what do the costly links of issue 10 cost now? `python -m app.loadcheck --costly`

Times reruns of the default Simulate page (AppTest, in this process, as the server runs sessions in
threads of one process) while idle, then while another session opens a costly link in a thread (a
fresh seed each time so nothing is cached). Prints median rerun times and their ratio; the target
is loaded / idle <= 2. `--in-thread` runs simulations in the server process instead of workers
(the old behaviour) for comparison. Timings are noisy on a shared machine: compare the ratio.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
APP = str(ROOT / "app" / "streamlit_app.py")
HEAVY = {"preset": "chat-h100-llama8b", "workload.num_requests": "200000", "workload.arrival.process": '"offline"'}


def _rerun_times(at, n: int, until=lambda: True) -> list[float]:
    """At least `n` reruns, and more until `until()` holds."""
    out: list[float] = []
    while len(out) < n or not until():
        t0 = time.perf_counter()
        at.run()
        out.append(time.perf_counter() - t0)
    return out


COSTLY = {  # the costly links of issue 10 (the 1M-token case at 300k tokens with an FP8 cache, so that it fits)
    "200k offline requests": HEAVY,
    "200k queued, max_num_seqs=1": HEAVY | {"scheduler.max_num_seqs": "1"},
    "batch-1 decode of 300k-token outputs": {
        "preset": "chat-h100-llama8b", "workload.num_requests": "2", "workload.output_tokens.dist": '"fixed"',
        "workload.output_tokens.mean": "300000", "workload.prompt_tokens.max": "4096", "model.max_model_len": "400000",
        "kv_cache.kv_dtype": '"fp8"', "scheduler.max_num_seqs": "1", "limits.max_ticks": "50000000",
        "limits.max_sim_time_s": "10000000"},
    "100k recorded batches of 8192": {
        "preset": "chat-h100-llama8b", "workload.num_requests": "100000", "workload.arrival.process": '"offline"',
        "scheduler.max_num_seqs": "8192", "scheduler.max_num_batched_tokens": "16384",
        "limits.num_recorded_batches": "100000"},
}  # fmt: skip
SWEEP_LINK = {"preset": "chat-h100-llama8b", "workload.num_requests": "20000", "sweep": "rate", "start": "1",
              "stop": "400", "n": "16", "vs": "vllm-v0"}  # 32 simulations in one page view  # fmt: skip


def costly() -> int:
    """Each costly link through the app's runner (worker process, server budget), then the Sweep link."""
    from streamlit.testing.v1 import AppTest

    from app.components import runner
    from app.state import config_from_query

    budget = runner.server().settings
    print(f"server budget: {budget.run.describe()}; page {budget.page_max_wall_s:g} s")
    pool = runner.server().pool
    assert pool is not None, "the worker pool is off in the server settings"
    pool.run(config_from_query({})[0])  # start the forkserver outside the timings
    for name, params in COSTLY.items():
        cfg, _, warning = config_from_query(params)
        assert warning is None, warning
        t0 = time.perf_counter()
        reply = pool.run(cfg)  # what runner.run does on a cache miss
        took = time.perf_counter() - t0
        said = reply.payload.summary.stopped_reason or "finished" if reply.kind == "ok" else reply.payload
        print(f"{name}: {took:.1f} s until the page has the result; run process peak {reply.peak_rss_bytes / 2**20:,.0f} MiB; "
              f"{said[:150]}")  # fmt: skip
    at = AppTest.from_file(APP, default_timeout=300)
    at.run()
    at.switch_page("app_pages/sweep.py")
    for k, v in SWEEP_LINK.items():
        at.query_params[k] = v
    t0 = time.perf_counter()
    at.run()
    took = time.perf_counter() - t0
    stopped = [w.value for w in at.warning if "sweep stopped" in w.value]
    print(f"Sweep link ({len(SWEEP_LINK)} params, 32 simulations): page took {took:.1f} s; "
          f"{stopped[0][:160] if stopped else 'all points ran'}")  # fmt: skip
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15, help="reruns timed in each phase")
    parser.add_argument("--heavy-loads", type=int, default=2, help="heavy page loads to span while timing (loaded phase)")
    parser.add_argument("--costly", action="store_true", help="time the costly links of issue 10 instead")
    parser.add_argument("--in-thread", action="store_true", help="simulate in the server process (no workers)")
    args = parser.parse_args(argv)
    if args.in_thread:
        settings = Path(tempfile.mkdtemp()) / "server.toml"
        settings.write_text((ROOT / "app" / "server.toml").read_text().replace("enabled = true", "enabled = false"))
        os.environ["SIM_SERVER_CONFIG"] = str(settings)

    if args.costly:
        return costly()
    from streamlit.testing.v1 import AppTest

    light = AppTest.from_file(APP, default_timeout=300).run()  # warm: the default result is cached
    light.run()
    idle = _rerun_times(light, args.rounds)

    busy = threading.Event()
    done = threading.Event()
    heavy_runs: list[float] = []
    notes: list[str] = []

    def heavy() -> None:
        seed = 1
        while not done.is_set():
            at = AppTest.from_file(APP, default_timeout=300)
            for k, v in HEAVY.items():
                at.query_params[k] = v
            at.query_params["seed"] = str(seed)  # a new config each time: never a cache hit
            t0 = time.perf_counter()
            busy.set()
            at.run()
            heavy_runs.append(time.perf_counter() - t0)
            if seed == 1:
                notes.extend(w.value[:160] for w in at.warning)
                notes.extend(e.value[:160] for e in at.error)
            seed += 1

    worker = threading.Thread(target=heavy, daemon=True)
    worker.start()
    busy.wait()
    time.sleep(0.5)  # let the heavy run get going
    # the loaded phase spans whole heavy page loads: simulation (in a worker) and drawing (here)
    loaded = _rerun_times(light, args.rounds, until=lambda: len(heavy_runs) >= args.heavy_loads)
    done.set()
    worker.join(timeout=120)
    mi, ml = statistics.median(idle), statistics.median(loaded)
    p90 = lambda xs: sorted(xs)[int(0.9 * (len(xs) - 1))]  # noqa: E731
    mode = "in-thread (no workers)" if args.in_thread else "worker processes"
    print(f"mode: {mode}")
    print(f"default page rerun, idle:   median {mi * 1e3:.0f} ms, p90 {p90(idle) * 1e3:.0f} ms over {len(idle)} reruns")
    print(f"default page rerun, loaded: median {ml * 1e3:.0f} ms, p90 {p90(loaded) * 1e3:.0f} ms over {len(loaded)} reruns "
          f"(heavy session page loads: {', '.join(f'{t:.1f} s' for t in heavy_runs)})")  # fmt: skip
    print(f"ratio loaded / idle: median {ml / mi:.2f}, p90 {p90(loaded) / p90(idle):.2f} (target <= 2)")
    print("heavy page said: " + " | ".join(notes))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
