"""The app's runner: results cache bounded in bytes, one run per config in flight, a page budget,
worker processes with a hard timeout and a memory ceiling, settings from app/server.toml."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from app.components.runner import Outcome, ResultCache, outcome_bytes
from app.components.worker import WorkerPool
from app.settings import load_settings
from app.state import canonical_json
from sim_core import run_simulation
from sim_core.budget import RunBudget
from tests.conftest import make_config


def _outcome(num_bytes: int) -> Outcome:
    """An outcome whose result holds `num_bytes` of arrays (a stand-in with the same shape of data)."""
    from dataclasses import dataclass

    @dataclass(frozen=True)
    class Fake:
        data: np.ndarray

    return Outcome(Fake(np.zeros(num_bytes, dtype=np.uint8)), None)  # type: ignore[arg-type]


def test_cache_is_bounded_in_bytes_and_drops_least_recently_used():
    one = outcome_bytes(_outcome(1000))
    cache = ResultCache(max_bytes=3 * one)
    for key in "abc":
        cache.put(key, _outcome(1000))
    assert cache.get("a") is not None  # a is now the most recent
    cache.put("d", _outcome(1000))
    assert cache.get("b") is None and cache.get("a") is not None and len(cache) == 3
    assert cache.num_bytes <= cache.max_bytes
    cache.put("huge", _outcome(10 * one))  # larger than the whole cache: returned to the caller, not kept
    assert cache.get("huge") is None and cache.num_bytes <= cache.max_bytes


def test_identical_requests_in_flight_run_once():
    cache = ResultCache(max_bytes=1 << 30)
    calls = []

    def compute():
        calls.append(1)
        time.sleep(0.3)
        return Outcome(None, "done")

    threads = [threading.Thread(target=cache.get_or_run, args=("k", compute)) for _ in range(5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1


def test_result_bytes_count_the_arrays():
    res = run_simulation(make_config(workload__num_requests=30))
    size = outcome_bytes(Outcome(res, None))
    assert res.requests.arrival_s.nbytes + res.timeline.t_start_s.nbytes < size < 50 * 2**20


def _held_bytes(blob: bytes, copies: int = 1) -> tuple[list, int]:
    """(`copies` results unpickled from `blob`, as the server holds a worker's reply; the bytes they hold)."""
    import gc
    import pickle
    import tracemalloc

    gc.collect()
    tracemalloc.start()
    try:
        objs = [pickle.loads(blob) for _ in range(copies)]
        return objs, tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()


def _trace_with_hash_ids(rows: int, ids_per_row: int):
    """A config whose trace carries block hash ids (an uploaded Mooncake trace), as the config model holds it."""
    trace = {"arrival_s": [0.01 * i for i in range(rows)], "prompt_tokens": [16 * ids_per_row + i % 7 for i in range(rows)],
             "output_tokens": [4 + i % 300 for i in range(rows)], "priority": None, "hash_block_tokens": 16,
             "block_hash_ids": [[(i * 31 + j) * 1_000_003 for j in range(ids_per_row)] for i in range(rows)]}  # fmt: skip
    return make_config(workload__trace=trace, workload__num_requests=rows)


def test_a_result_is_counted_with_its_configs_trace_and_a_cache_of_them_stays_in_its_bound():
    # audit 35: a result holds its config, and a config may hold an uploaded trace (the largest legal one: 100,000 rows and
    # 4 million block hash ids, ~150 MB once parsed), yet every config was counted as 64 KiB: a 1 GiB cache could hold
    # many GB. The count is an estimate from the trace's lengths, never below what the unpickled result holds.
    import pickle

    res = run_simulation(_trace_with_hash_ids(20_000, 20), budget=RunBudget(max_ticks=20))
    blob = pickle.dumps(res)
    (copy,), held = _held_bytes(blob)
    counted = outcome_bytes(Outcome(copy, None))
    assert held > 15 * 2**20 and held <= counted <= 1.4 * held, (held, counted)
    cache = ResultCache(max_bytes=int(2.5 * counted))
    results, held_all = _held_bytes(blob, copies=5)
    for k, r in enumerate(results):
        cache.put(str(k), Outcome(r, None))
    del results
    import gc

    gc.collect()
    kept = [cache.get(str(k)) for k in range(5) if cache.get(str(k)) is not None]
    assert len(kept) == 2 and cache.num_bytes <= cache.max_bytes
    assert held_all / 5 * len(kept) <= cache.max_bytes  # what the cache really holds is within its bound


def test_a_deployments_result_counts_every_instances_arrays():
    # (the walk stopped 4 levels down: a deployment's instance timelines, 5 levels down, were not counted)
    import pickle

    res = run_simulation(make_config(workload__num_requests=200, deployment={"replicas": 4}))
    (copy,), held = _held_bytes(pickle.dumps(res))
    assert held <= outcome_bytes(Outcome(copy, None)) <= 1.3 * held


def test_the_shipped_settings_load_with_workshop_defaults():
    s = load_settings()
    assert s.run.max_wall_s == 5.0 and s.run.max_bytes == 512 * 2**20
    assert s.worker.enabled and s.worker.hard_timeout_s > s.run.max_wall_s
    assert s.cache_max_bytes >= s.run.max_bytes
    assert s.uploads_max_bytes == 2 * 2**30  # (the uploaded traces every session holds: upload_ledger)


def test_the_upload_limit_is_read_from_its_section_and_must_be_positive(tmp_path):
    f = tmp_path / "s.toml"
    f.write_text("[uploads]\nmax_bytes = 1_048_576\n")
    assert load_settings(f).uploads_max_bytes == 2**20
    f.write_text("[uploads]\nmax_bytes = 0\n")
    with pytest.raises(ValueError, match="limits must be positive"):
        load_settings(f)


def test_settings_reject_unknown_keys(tmp_path):
    bad = tmp_path / "s.toml"
    bad.write_text("[run]\nmax_wall = 3\n")
    with pytest.raises(ValueError, match="unknown keys max_wall"):
        load_settings(bad)


# A run that cannot finish within the tests' 1 s timeouts however fast the engine gets: 200k requests stepped tick by
# tick (no coalescing, no scalar core: ~45 us a tick over millions of ticks). With coalescing on, the engine became
# fast enough to finish 200k offline requests within 1 s on a quiet machine, and the kill test passed or failed by load.
HEAVY = make_config(workload__num_requests=200_000, workload__arrival__process="offline", limits__coalesce_ticks=False)


def test_worker_returns_results_and_messages():
    pool = WorkerPool(RunBudget(), max_parallel=1, hard_timeout_s=60, slack_bytes=1 << 30)
    ok = pool.run(canonical_json(make_config(workload__num_requests=20)))
    assert ok.kind == "ok" and ok.payload.summary.num_finished == 20
    oom = pool.run(canonical_json(make_config("chat-l4-llama8b", scheduler__max_num_batched_tokens=65536)))
    assert oom.kind == "error" and "max_num_batched_tokens" in oom.payload


@pytest.mark.parametrize("deployment", [None, {"replicas": 2}, {"disaggregation": {"prefill": {"replicas": 1},
                                                                                 "decode": {"replicas": 1}}}])  # fmt: skip
def test_a_workers_result_holds_the_callers_trace_not_a_copy_of_it(deployment, monkeypatch):
    # The result of a config with an uploaded trace came back with a copy of it in every config it holds: unpickling the
    # largest one took ~0.5 s of the server's interpreter, and each cached result held another ~150 MB. The worker now
    # leaves the trace out and the pool puts the caller's workload back: the same run, the same configs.
    import pickle

    from app.components import worker

    cfg = _trace_with_hash_ids(2_000, 20)
    if deployment is not None:
        cfg = cfg.model_copy(update={"deployment": make_config(deployment=deployment).deployment})
    sent = []
    real_call = WorkerPool.call

    def call(self, *args, **kwargs):
        reply = real_call(self, *args, **kwargs)
        sent.append(len(pickle.dumps(reply)))  # (what came through the pipe)
        return reply

    monkeypatch.setattr(WorkerPool, "call", call)
    pool = worker.WorkerPool(RunBudget(max_ticks=50), max_parallel=1, hard_timeout_s=60, slack_bytes=1 << 30)
    res = pool.run(cfg).payload
    assert res.config == cfg and res.config.workload is cfg.workload
    assert all(x.result.config.workload is cfg.workload for x in getattr(res, "instances", ()))
    assert sent[0] < len(pickle.dumps(res)) - 0.9 * len(pickle.dumps(cfg.workload.trace))  # (the trace was not sent)
    here = run_simulation(cfg, budget=RunBudget(max_ticks=50))
    assert res.summary.num_ticks == here.summary.num_ticks and np.array_equal(res.requests.finish_s, here.requests.finish_s, equal_nan=True)


def test_worker_kills_a_run_past_the_hard_timeout():
    pool = WorkerPool(RunBudget(max_wall_s=60), max_parallel=1, hard_timeout_s=1.0, slack_bytes=1 << 30)
    t0 = time.perf_counter()
    reply = pool.run(canonical_json(HEAVY))
    assert reply.kind == "killed" and "still busy" in reply.payload
    assert time.perf_counter() - t0 < 10


def test_worker_memory_is_capped():
    pool = WorkerPool(RunBudget(max_wall_s=60, max_bytes=32 << 20), max_parallel=1, hard_timeout_s=60, slack_bytes=0)
    reply = pool.run(canonical_json(HEAVY))
    # the budget stops the run gracefully, or the address-space ceiling stops the process
    assert (reply.kind == "ok" and "MiB" in reply.payload.summary.stopped_reason) or reply.kind == "killed"


def test_a_page_budget_refuses_new_runs_once_spent_but_serves_cached_ones():
    from app.components import runner

    cached_cfg = make_config(workload__num_requests=12, seed=101)
    assert runner.run(cached_cfg).result is not None
    budget = runner.PageBudget(max_wall_s=0.0)
    time.sleep(0.01)
    assert budget.run(cached_cfg).result is not None  # cached: free
    refused = budget.run(make_config(workload__num_requests=12, seed=102))
    assert refused.result is None and "may spend 0 s of server time" in refused.error


def test_tables_are_built_once_and_counted_in_the_cache():
    from app.components import runner

    res = runner.run(make_config(workload__num_requests=15, seed=103)).result
    before = runner.server().cache.num_bytes
    first = runner.frames(res)
    assert runner.frames(res) is first
    assert runner.server().cache.num_bytes > before


def _server_with(tmp_path, monkeypatch, settings_toml: str):
    """The app's runner under these server settings, with a fresh cache (cleared again after the test)."""
    from app.components import runner

    settings = tmp_path / "server.toml"
    settings.write_text(settings_toml)
    monkeypatch.setenv("SIM_SERVER_CONFIG", str(settings))
    runner.server.clear()
    yield runner
    runner.server.clear()


@pytest.fixture
def tiny_budget(tmp_path, monkeypatch):
    """The app with a server budget of 50 ticks per run (and no workers: in-process is enough here)."""
    yield from _server_with(tmp_path, monkeypatch, "[run]\nmax_ticks = 50\n[worker]\nenabled = false\n")


def test_a_link_cannot_raise_the_budget_and_the_page_says_so(tiny_budget):
    from pathlib import Path

    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(Path(__file__).resolve().parents[2] / "app" / "streamlit_app.py"), default_timeout=120)
    at.query_params["preset"] = "chat-h100-llama8b"
    at.query_params["limits.max_ticks"] = "50000000"  # the config's own limit: the server's still applies
    at.run()
    assert not at.exception
    text = " ".join(w.value for w in at.warning)
    assert "budget of 50 ticks" in text and "limits what one run may cost" in text


@pytest.fixture
def spent_page_budget(tmp_path, monkeypatch):
    """A page budget that a new run no longer fits in (5.01 s of page time for runs of up to 5 s)."""
    from app.components import runner

    settings = tmp_path / "server.toml"
    settings.write_text("[run]\nmax_wall_s = 5.0\n[page]\nmax_wall_s = 5.01\n")
    monkeypatch.setenv("SIM_SERVER_CONFIG", str(settings))
    monkeypatch.setenv("SIM_CORE_CACHE_DIR", str(tmp_path / "points"))  # no point cached by another test
    runner.server.clear()
    yield
    runner.server.clear()


def test_compares_seed_bands_stop_at_the_page_budget_and_keep_the_comparison(spent_page_budget):
    # Compare's "Repeat over seeds" ran its 2 x (k - 1) new runs under no page budget: 5 seeds of two
    # heavy setups kept a page view busy for 8 runs of up to 5 s each, past the [page] max_wall_s of 20 s
    from pathlib import Path

    from streamlit.testing.v1 import AppTest

    from app.state import encode_config

    at = AppTest.from_file(str(Path(__file__).resolve().parents[2] / "app" / "streamlit_app.py"), default_timeout=120)
    at.run()
    at.switch_page("app_pages/compare.py")
    at.query_params["a_cfg"] = encode_config(make_config(workload__num_requests=20, seed=104))
    at.query_params["b_cfg"] = encode_config(make_config("engine-orca", workload__num_requests=20, seed=104))
    at.run()
    at.number_input(key="cmp.seeds").set_value(3).run()
    assert not at.exception, [e.value for e in at.exception]
    text = " ".join(w.value for w in at.warning)
    assert "seed bands stopped" in text and "may spend 5.01 s of server time" in text
    assert len(at.table) == 1 and not any(d.key == "cmp.seed_table" for d in at.dataframe)  # the comparison is kept


def test_plans_simulations_run_under_the_server_budget_and_the_page_says_so(tiny_budget, tmp_path, monkeypatch):
    # the Plan page ran every candidate, saturation probe and headroom bisection with no budget at all: at
    # 1,000-3,000 req/s a candidate is a 200,000-request deployment of 48-64 replicas (8-11 s per run here),
    # in pool processes that kept running after the page stopped the search
    from pathlib import Path

    from streamlit.testing.v1 import AppTest

    from tests.app.test_pages import narrow_plan_search

    monkeypatch.setenv("SIM_CORE_CACHE_DIR", str(tmp_path / "points"))
    at = AppTest.from_file(str(Path(__file__).resolve().parents[2] / "app" / "streamlit_app.py"), default_timeout=120)
    at.run()
    at.switch_page("app_pages/plan.py").run()
    narrow_plan_search(at, 2)
    at.button(key="plan.go").click().run()
    assert not at.exception, [e.value for e in at.exception]
    text = " ".join(w.value for w in at.warning)
    assert "stopped by this server's budget per run" in text and "50 ticks" in text  # here: the saturation probes


def test_a_plan_under_a_budget_stops_every_run_at_it():
    from sim_core.budget import RunBudget, is_budget_stop
    from sim_core.planner import PlanSpec, plan

    spec = PlanSpec(target_rate_per_s=8.0, gpus=("h100-sxm",), tp_degrees=(1,), max_replicas=2, engines=("vllm-v1",))
    base = make_config(workload__num_requests=50)
    result = plan(base, spec, budget=RunBudget(max_ticks=1000), with_band=False)  # saturation measured, candidates stopped
    assert result.evaluated and all(is_budget_stop(r.summary.stopped_reason) for r in result.evaluated)
    assert not result.rows  # a stopped run misses the objective
    probes_stopped = plan(base, spec, budget=RunBudget(max_ticks=50), with_band=False)
    assert not probes_stopped.evaluated and all(is_budget_stop(why) for why in probes_stopped.pruned)  # said, not "error"


@pytest.fixture
def in_thread_server(tmp_path, monkeypatch):
    """The app's runner with in-process runs (a fake clock in sim_core.budget reaches them) and a fresh cache."""
    yield from _server_with(tmp_path, monkeypatch, "[run]\nmax_wall_s = 1.0\nmax_ticks = 200\n[worker]\nenabled = false\n")


def test_a_run_a_busy_server_stopped_is_run_again_when_asked_later(in_thread_server, monkeypatch):
    """Simulate's result cache kept a run stopped by the server's wall-time (or memory) budget for the life of the
    server: a config a busy minute stopped stayed stopped for every later visitor, however quiet the server became
    (the Plan page's point cache had the same fault, sim_core/backend.py). Such a run is kept only for the page view
    that asked (its charts and tables ask again), then run again; a stop at the tick or row limit, the same on any
    machine, stays cached."""
    import types

    import sim_core.budget
    from sim_core.budget import is_load_dependent_stop

    runner = in_thread_server
    cache = runner.server().cache
    now_s = [1000.0]
    monkeypatch.setattr(cache, "clock", lambda: now_s[0], raising=False)  # the cache's own clock (fake)
    cfg = make_config(workload__num_requests=5, workload__output_tokens={"dist": "fixed", "mean": 8, "min": 1, "max": 8})
    run_clock = [0.0]

    def busy_clock() -> float:  # every look at the clock: 10 s later (a loaded machine)
        run_clock[0] += 10.0
        return run_clock[0]

    with monkeypatch.context() as busy:
        busy.setattr(sim_core.budget, "time", types.SimpleNamespace(perf_counter=busy_clock))
        stopped = runner.run(cfg)
    assert is_load_dependent_stop(stopped.result.summary.stopped_reason)
    assert runner.run(cfg) is stopped  # the same page view asks again (charts, tables): the same run
    runner.frames(stopped.result)  # its tables are made from the run, not kept under the config (they would outlive it)
    assert cache.get("frames:" + canonical_json(cfg)) is None
    now_s[0] += 3600.0  # an hour later, on a quiet server
    again = runner.run(cfg)
    assert again.result.summary.stopped_reason is None and again.result.summary.num_finished == 5
    assert runner.run(cfg) is again  # a finished run stays cached
    long_cfg = make_config(workload__num_requests=50)  # > 200 ticks: the server's tick budget stops it
    ticked = runner.run(long_cfg)
    assert "200 ticks" in ticked.result.summary.stopped_reason and not is_load_dependent_stop(ticked.result.summary.stopped_reason)
    now_s[0] += 3600.0
    assert runner.run(long_cfg) is ticked  # deterministic: kept


def test_a_run_the_worker_killed_is_not_kept_for_later_visitors(in_thread_server, monkeypatch):
    # the hard timeout and the memory ceiling are the backstops of the wall-time and memory budgets: a busy server
    # kills what a quiet one finishes, so their outcome is kept only for the page view that asked, like their stops
    runner = in_thread_server
    cache = runner.server().cache
    now_s = [1000.0]
    monkeypatch.setattr(cache, "clock", lambda: now_s[0], raising=False)
    calls = []

    def killed(srv, cfg_json):
        calls.append(cfg_json)
        return runner.Outcome(None, "Nothing to show: the run was still busy after 15 s and was stopped.", killed=True)

    monkeypatch.setattr(runner, "_simulate", killed)
    cfg = make_config(workload__num_requests=5)
    assert runner.run(cfg).error and runner.run(cfg).error and len(calls) == 1
    now_s[0] += 3600.0
    runner.run(cfg)
    assert len(calls) == 2


def test_an_expired_load_dependent_outcome_leaves_the_cache_when_anything_is_put():
    # a killed or budget-stopped outcome is kept LOAD_DEPENDENT_KEEP_S only, but it left only when its own key was asked
    # again: stale heavy results counted against the bytes and pushed out results still good
    from app.components.runner import LOAD_DEPENDENT_KEEP_S

    now = [0.0]
    one = outcome_bytes(_outcome(1))
    cache = ResultCache(max_bytes=10 * one, clock=lambda: now[0])
    cache.put("stale", Outcome(None, "killed", killed=True), one)
    cache.put("good", _outcome(1), one)
    now[0] = LOAD_DEPENDENT_KEEP_S + 1
    cache.put("new", _outcome(1), one)
    assert "stale" not in cache._items and cache.num_bytes == 2 * one  # (without anyone asking for "stale")
    assert cache.get("good") is not None and cache.get("new") is not None
