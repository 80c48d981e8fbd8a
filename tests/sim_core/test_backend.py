"""Backends return the same bytes; the point cache resumes an interrupted search and stays bounded."""

import functools
import json
import math
import os

import pytest

from sim_core import run_simulation
from sim_core.backend import (LocalBackend, PointCache, RayBackend, SearchCancelled, decode_point, get_backend, run_points,
                              simulate_point)
from sim_core.presets import PresetError
from sim_core.sweep import band, capacity_interval, point_metric, run_sweep
from tests.conftest import make_config


def _small(**kw):
    return make_config(workload__num_requests=60, **kw)


def _table(points):
    return [(p.value, p.error, [s.model_dump_json() for s in p.seeds]) for p in points]


def _plan_table(backend):
    from sim_core.planner import PlanSpec, plan

    base = make_config(workload__prompt_tokens={"dist": "fixed", "mean": 512, "min": 1, "max": 512},
                       workload__output_tokens={"dist": "lognormal", "mean": 64, "min": 1, "max": 256, "sigma": 0.5},
                       slo__ttft_s=0.5, slo__tpot_s=0.05)  # fmt: skip
    spec = PlanSpec(target_rate_per_s=40.0, gpus=("a100-80gb", "h100-sxm"), tp_degrees=(1,), max_replicas=3,
                    engines=("vllm-v1",), num_results=2)  # fmt: skip
    p = plan(base, spec, backend=backend, with_band=False)
    return json.dumps(p.table()), [(r.label, r.summary.model_dump_json()) for r in p.evaluated], p.pruned


def test_process_pool_and_ray_return_identical_tables():
    cfg = _small()
    serial = run_sweep(cfg, "rate", [4.0, 40.0, 400.0], num_seeds=2, backend=LocalBackend(1))
    with LocalBackend(2) as pool_backend:
        pool = run_sweep(cfg, "rate", [4.0, 40.0, 400.0], num_seeds=2, backend=pool_backend)
        pool_plan = _plan_table(pool_backend)
    import ray

    try:
        ray.init(num_cpus=2, include_dashboard=False, ignore_reinit_error=True, log_to_driver=False)
        remote = run_sweep(cfg, "rate", [4.0, 40.0, 400.0], num_seeds=2, backend=RayBackend())
        remote_plan = _plan_table(RayBackend())
        _ray_failures_are_one_line(RayBackend())
    finally:
        ray.shutdown()
    assert _table(serial) == _table(pool) == _table(remote)
    assert len(serial[0].seeds) == 2
    assert pool_plan == remote_plan == _plan_table(LocalBackend(1))
    assert json.loads(pool_plan[0])  # the plan found something to compare


def _refuse(message: str) -> None:
    raise PresetError(message)


def _ray_failures_are_one_line(backend) -> None:
    """A task that fails on a worker, and a worker whose code is not the driver's, are one line naming what failed
    (an 80-line RayTaskError, exit 1; a node with another version filled the shared cache with its results)."""
    import sim_core.backend as backend_module

    with pytest.raises(PresetError) as err:
        backend.map(lambda x: 1 / x, [1, 0])
    said = str(err.value)
    assert said == "a task failed on the Ray cluster: ZeroDivisionError: division by zero", said
    # a config the task cannot run says so in its own words, as on the local pool (it read as a version mismatch)
    with pytest.raises(PresetError) as err:
        backend.map(_refuse, ["Invalid capacity probe at 5e-07 req/s:\n  workload.arrival.rate_per_s = 5e-07"])
    assert str(err.value) == "Invalid capacity probe at 5e-07 req/s:\n  workload.arrival.rate_per_s = 5e-07"
    real = backend_module.code_fingerprint
    try:  # (the driver's fingerprint forged: the workers run the real one)
        backend_module.code_fingerprint = lambda *a: "0123456789abcdef"
        with pytest.raises(PresetError) as err:
            backend.map(str, [1])
    finally:
        backend_module.code_fingerprint = real
    said = str(err.value)
    assert "CodeMismatch: this worker runs other sim_core code" in said and "(0123456789abcdef)" in said and "same version" in said


def test_starting_ray_keeps_the_clis_sigterm_handler():
    # ray.init put in a SIGTERM handler of its own: a search on Ray ended by `kill` or `timeout` exited with 15 and no
    # word, where a local one says "interrupted" and exits 130 (the CLI's handler, sim_core/cli.py)
    import signal

    import ray

    def ours(signum, frame):  # (a stand-in for the CLI's)
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, ours)
    try:
        RayBackend()  # (starts a local Ray)
        assert signal.getsignal(signal.SIGTERM) is ours
    finally:
        ray.shutdown()
        signal.signal(signal.SIGTERM, previous)


@pytest.mark.parametrize("address", ["127.0.0.1:1", "ray://127.0.0.1:1", "[::1]:1"])
def test_an_address_nothing_listens_on_is_refused_in_seconds(address):
    # (a bare HOST:PORT nobody listens on: ray.init retried without end, 205 s and counting)
    from sim_core.backend import check_reachable

    with pytest.raises(PresetError, match=r"cannot reach Ray at .*nothing accepted a connection"):
        check_reachable(address, timeout_s=2.0)
    check_reachable("auto")  # (Ray resolves these itself)
    check_reachable(None)


def test_seeds_give_a_band_and_capacity_an_interval():
    cfg = _small()
    (pt,) = run_sweep(cfg, "rate", [20.0], num_seeds=3)
    ttft = point_metric(pt, "ttft_p99_s")
    assert len(set(ttft)) > 1  # different seeds, different arrivals
    lo, mid, hi = band(ttft)
    assert lo == min(ttft) and hi == max(ttft) and lo <= mid <= hi
    assert point_metric(pt, "steady.slo_attainment")[0] == pt.summary.steady.slo_attainment
    cfg = make_config(workload__prompt_tokens={"dist": "fixed", "mean": 512, "min": 1, "max": 512},
                      workload__output_tokens={"dist": "fixed", "mean": 32, "min": 1, "max": 32}, slo__ttft_s=0.5)  # fmt: skip
    low, high, caps = capacity_interval(cfg, num_seeds=2)
    assert low == min(c.rate_per_s for c in caps) and high == max(c.rate_per_s for c in caps) and low > 0


def test_an_interrupted_search_resumes_from_the_cache(tmp_path):
    cache = PointCache(tmp_path)
    configs = [_small(seed=s) for s in range(3)]
    calls = []

    def stop_after_one():
        return len(calls) >= 1

    with pytest.raises(SearchCancelled):
        run_points(configs, LocalBackend(1), cache, on_progress=lambda d, t: calls.append(d), cancelled=stop_after_one)
    assert len(list(tmp_path.glob("*/*.json"))) == 1
    # The cached point is read back, not recomputed: plant a marker in it.
    first = configs[0].model_dump_json()
    payload = json.loads(cache.get(first))
    payload["summary"]["num_ticks"] = -1
    cache.put(first, json.dumps(payload))
    out = run_points(configs, LocalBackend(1), cache)
    assert out[0][0].num_ticks == -1 and out[1][0].num_ticks > 0
    assert len(list(tmp_path.glob("*/*.json"))) == 3


@pytest.mark.parametrize("damage", ["garbage", "", "[1, 2]", "null", "\x00\xff"])
def test_a_damaged_cache_entry_is_a_miss_and_is_computed_again(tmp_path, damage):
    # a cache entry overwritten from outside (disk damage, a hand edit) crashed `capacity` with a JSONDecodeError
    # from decode_point; it is now a miss: the point is computed again and the entry rewritten
    cache = PointCache(tmp_path)
    cfg = _small()
    (want, _), = run_points([cfg], LocalBackend(1), cache)
    (entry,) = tmp_path.glob("*/*.json")
    entry.write_text(damage, encoding="latin-1")
    (again, err), = run_points([cfg], LocalBackend(1), cache)
    assert err is None and again == want and json.loads(entry.read_text())["summary"]


def test_cache_stays_within_its_byte_bound(tmp_path):
    one = len(simulate_point(_small().model_dump_json()))
    cache = PointCache(tmp_path, max_bytes=int(2.5 * one))
    run_points([_small(seed=s) for s in range(5)], LocalBackend(1), cache)
    assert sum(p.stat().st_size for p in tmp_path.glob("*/*.json")) <= 2.5 * one


def test_a_large_cache_is_scanned_on_a_few_writes_and_stays_near_its_bound(tmp_path, monkeypatch):
    # every write listed every file to trim: 0.16 s a write at 20,000 files, ~1 s at the 256 MB bound (a review)
    from sim_core import backend as backend_module

    payload = json.dumps({"summary": "x" * 90})
    cache = PointCache(tmp_path, max_bytes=len(payload) * 1100, fingerprint="f")  # (each write under 1/1,024 of it)
    scans = []
    real = PointCache._trim
    monkeypatch.setattr(PointCache, "_trim", lambda self: (scans.append(1), real(self)))
    for i in range(1500):
        cache.put(f"point {i}", payload)
    total = sum(p.stat().st_size for p in tmp_path.glob("*/*.json"))
    assert 0 < len(scans) < 1500 / backend_module.TRIM_EVERY * 2  # (about one write in 64)
    assert total <= cache.max_bytes * 1.3, total / cache.max_bytes


def test_errors_are_results_not_crashes():
    (summary, err), = run_points([make_config("chat-l4-llama8b", scheduler__max_num_batched_tokens=65536)])
    assert summary is None and "Out of memory" in err


def test_backend_choice(monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert get_backend().name == "local" and get_backend(max_workers=1).max_workers == 1


def test_trimming_a_file_another_process_removed_is_not_an_error(tmp_path, monkeypatch):
    # every worker process trims the shared cache once it is full: a file listed by one and removed by
    # another before the first read its size raised FileNotFoundError into the Sweep/Compare/Plan page
    cache = PointCache(tmp_path, max_bytes=10)
    cache.put("a", "x" * 8)
    (first,) = tmp_path.glob("*/*.json")
    os.utime(first, (1.0, 1.0))  # written long ago: trimmed first
    gone = tmp_path / "zz" / "removed-by-another-process.json"
    real_glob = type(tmp_path).glob
    monkeypatch.setattr(type(tmp_path), "glob", lambda self, pattern: iter([*real_glob(self, pattern), gone]))
    cache.put("b", "y" * 8)  # over the bound: trims
    assert cache.get("b") == "y" * 8 and cache.get("a") is None


def test_two_threads_writing_one_point_use_their_own_temporary_files(tmp_path, monkeypatch):
    # the temporary name was per process: two sessions' threads writing the same point truncated one file
    import threading
    from pathlib import Path

    both_writing = threading.Barrier(2, timeout=10)
    written: list[str] = []
    real_write = Path.write_text

    def write_text(self, text, *args, **kwargs):
        written.append(self.name)
        both_writing.wait()
        return real_write(self, text, *args, **kwargs)

    monkeypatch.setattr(Path, "write_text", write_text)
    cache = PointCache(tmp_path)
    threads = [threading.Thread(target=cache.put, args=("same point", "payload")) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(written)) == 2
    assert cache.get("same point") == "payload"


def test_a_point_where_no_request_finished_reads_back_with_nan_percentiles():
    # model_dump_json wrote the NaN percentiles of a run with no finished request as null and decode_point
    # raised a ValidationError: the Sweep page showed a traceback for ?sweep=tflops&start=0.001
    cfg = make_config(hardware__peak_tflops=0.001, workload__num_requests=5)
    summary, err = decode_point(simulate_point(cfg.model_dump_json()))
    assert err is None and summary.num_finished == 0 and math.isnan(summary.ttft_p99_s)
    fine = make_config(workload__num_requests=30)
    assert decode_point(simulate_point(fine.model_dump_json()))[0] == run_simulation(fine).summary  # the same numbers


def test_a_run_the_wall_clock_budget_stopped_is_not_cached(tmp_path, monkeypatch):
    """A budget's wall-time (or memory) stop depends on the machine's load at that moment, not on the config: cached,
    it was read back by every later search (the Plan page's "press Plan again to continue" met the same stop, and a
    busy minute made a candidate fail for good). Points a tick or row limit stops are the same on any machine and
    stay cached."""
    import types

    import sim_core.budget
    from sim_core.backend import cached_map
    from sim_core.budget import RunBudget, is_budget_stop
    from sim_core.planner import saturation_config, saturation_rate

    budget = RunBudget(max_wall_s=1.0)
    cfg = _small()
    sat = functools.partial(saturation_rate, budget=budget)
    now = [0.0]

    def slow_clock() -> float:  # every look at the clock: 10 s later (a loaded machine)
        now[0] += 10.0
        return now[0]

    monkeypatch.setattr(sim_core.budget, "time", types.SimpleNamespace(perf_counter=slow_clock))
    (stopped, _), = run_points([cfg], LocalBackend(1), PointCache(tmp_path), budget=budget)
    assert is_budget_stop(stopped.stopped_reason) and "server time" in stopped.stopped_reason
    assert is_budget_stop(json.loads(cached_map(sat, "sat", [saturation_config(cfg)], LocalBackend(1), PointCache(tmp_path))[0])["error"])
    monkeypatch.undo()  # the machine is idle again: both run to the end
    (summary, _), = run_points([cfg], LocalBackend(1), PointCache(tmp_path), budget=budget)
    assert summary.stopped_reason is None and summary.num_finished == cfg.workload.num_requests
    assert "rate" in json.loads(cached_map(sat, "sat", [saturation_config(cfg)], LocalBackend(1), PointCache(tmp_path))[0])
    ticks = RunBudget(max_ticks=20, max_wall_s=60.0)  # a tick limit stops a run at the same tick anywhere: cached
    (first, _), = run_points([cfg], LocalBackend(1), PointCache(tmp_path), budget=ticks)
    assert is_budget_stop(first.stopped_reason) and len(list(tmp_path.glob("*/*.json"))) == 3


def test_a_stopped_run_is_kept_only_in_its_scope_and_a_finished_one_everywhere(tmp_path, monkeypatch):
    """Pressing Plan again met every candidate its budget had stopped and ran each for the whole budget again: a P:D
    search of 17,280 candidates settled ~6 per press, the same ones each time, and never finished. A PointCache with a
    `stops_scope` (the Plan page's: its browser session) keeps those stops, read back in that scope only: elsewhere a
    busy minute must not fail the point for good."""
    import types

    import sim_core.budget
    from sim_core.budget import RunBudget, is_budget_stop

    budget, cfg = RunBudget(max_wall_s=1.0), _small()
    now = [0.0]

    def slow_clock() -> float:  # every look at the clock: 10 s later (a loaded machine)
        now[0] += 10.0
        return now[0]

    monkeypatch.setattr(sim_core.budget, "time", types.SimpleNamespace(perf_counter=slow_clock))
    scoped = PointCache(tmp_path, stops_scope="session a")
    (stopped, _), = run_points([cfg], LocalBackend(1), scoped, budget=budget)
    assert is_budget_stop(stopped.stopped_reason)
    monkeypatch.undo()  # the machine is idle again
    (again, _), = run_points([cfg], LocalBackend(1), scoped, budget=budget)
    assert again == stopped  # read back in its scope, not run again
    for other in (PointCache(tmp_path), PointCache(tmp_path, stops_scope="session b")):
        (summary, _), = run_points([cfg], LocalBackend(1), other, budget=budget)
        assert summary.stopped_reason is None and summary.num_finished == cfg.workload.num_requests
    (finished, _), = run_points([cfg], LocalBackend(1), scoped, budget=budget)
    assert finished == summary  # once finished anywhere, the point is read in every scope (its stop no longer)


def test_the_ray_extra_installs_what_a_ray_address_needs():
    # docs/capacity.md's `pip install -e ".[ray]"` then `--ray ray://HOST:10001` failed with "Ray Client requires pip package
    # `ray[client]`": the extra installed plain ray, which connects to a local or "auto" cluster only
    import tomllib
    from pathlib import Path

    extras = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert any(req.replace(" ", "").startswith("ray[client]") for req in extras["ray"]), extras["ray"]


def test_a_cached_point_is_not_reused_after_an_edit_of_a_model_preset_a_run_reads_by_name(tmp_path):
    # a speculative draft model is named, not held, by the config (speculative.Speculator reads its preset at run time):
    # the points cache's key covered sim_core's code only, so an edited draft preset served the old results from disk
    import shutil

    from sim_core.backend import code_fingerprint
    from sim_core.presets import PRESETS_DIR

    shutil.copytree(PRESETS_DIR / "models", tmp_path / "models")
    before = code_fingerprint(tmp_path)
    assert code_fingerprint(tmp_path) == before == code_fingerprint()  # the same files: the same key
    draft = min((tmp_path / "models").glob("*.json"))
    draft.write_text(draft.read_text().replace('"num_layers": ', '"num_layers": 1', 1))
    assert code_fingerprint(tmp_path) != before


def _exit_in_worker(x):
    os._exit(3)  # a worker that dies mid-task, as one killed for memory does


def test_a_broken_pool_says_what_to_do_and_the_next_search_gets_a_fresh_one():
    with LocalBackend(2) as backend:
        with pytest.raises(RuntimeError, match=r'if __name__ == "__main__":.*ran out of memory'):
            backend.map(_exit_in_worker, [1, 2])
        assert backend.map(abs, [-1, -2, 3]) == [1, 2, 3]  # the broken pool was dropped, not reused


def test_the_progress_bar_redraws_on_a_terminal_and_writes_one_line_to_a_log():
    # (`sweep ... 2>log` left a carriage return and a bar for every finished point in the log)
    import io

    from sim_core.backend import ProgressBar

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    log, tty = io.StringIO(), Terminal()
    for stream in (log, tty):
        bar = ProgressBar("sweep", stream, width=4)
        for done in range(4):
            bar(done, 3)
    assert "\r" not in log.getvalue() and log.getvalue().startswith("sweep [####] 3/3 ") and log.getvalue().count("\n") == 1
    assert tty.getvalue().count("\r") == 4 and tty.getvalue().endswith("\n") and "[##..] 2/3" in tty.getvalue()
