"""A prefill instance's idle rows end where its own state changes (an arrival routed to it, a release of the KV blocks it
holds for handed-off requests, a limit), not at the horizons the deployment's loop gives it (`Engine.merge_idle_rows`).

Found: a prefill instance that idles while it holds handed-off KV (back-pressure: its requests wait for a decode slot)
idled up to each horizon, and those follow the loop's order of steps (retries after decode ticks, other instances'
clocks plus the shortest tick): the same run was cut into more or fewer idle rows. A looser lower bound on a tick (the
lookahead `Deployment.min_tick_s`; any valid bound must give the same result) cut 10 of 40 generated xPyD runs under
back-pressure differently; with a scheduler that pre-empts by swapping and a swap-only tick priced without a weight
read, the reference orders (`pause_runs=False`, `lazy_decode=False`) did in 5 of 30. An idle row that goes on from the
last one, in the same state with nothing run between, now extends it (general steps and the scalar core's runs)."""

from __future__ import annotations

import random

import numpy as np
import pytest

from sim_core.costmodel import MemoryPlanError
from sim_core.sweep import with_value
from sim_core.types import Phase
from tests.sim_core.cluster.test_disagg_fastpath import _assert_same_deployment, _xpyd
from tests.sim_core.cluster.test_limits_order import _run


def _back_pressure(seed: int, swap: bool):
    """Generated xPyD configs with small KV on both sides (prefill instances hold handed-off KV while decode is full)."""
    rng = random.Random(seed)
    cfg = _xpyd(seed, rng.randint(5, 60), rng.choice([5.0, 40.0]), rng.choice([300, 1500]), rng.choice([50, 300]),
                rng.randint(1, 3), rng.randint(1, 3), rng.choice(["round_robin", "least_outstanding", "least_kv"]),
                prefill_gib=18.5, decode_gib=19.5)  # fmt: skip
    if swap:
        cfg = with_value(with_value(cfg, "scheduler.preemption", "swap"), "kv_cache.swap_space_gb", 4)
    return cfg


def _assert_same(dep, res, other_dep, other):
    assert dep.stopped_reason == other_dep.stopped_reason
    _assert_same_deployment(res, other)
    for x, y in zip(dep.instances, other_dep.instances, strict=True):
        assert x.engine.stopped_reason == y.engine.stopped_reason
        assert x.engine.st.now_s == y.engine.st.now_s


def _assert_one_row_per_idle_state(res):
    """No prefill idle row goes on from the one before it in the same state (it would have extended it)."""
    for x in res.instances:
        if x.role != "prefill":
            continue
        c = x.result.timeline.columns
        idle = c["phase"] == Phase.IDLE
        same = np.ones(idle.size - 1, dtype=bool) if idle.size else np.ones(0, dtype=bool)
        for name in ("num_waiting", "num_swapped", "kv_blocks_used", "batch_cap"):
            same &= c[name][1:] == c[name][:-1]
        assert not np.any(idle[1:] & idle[:-1] & same)


@pytest.mark.parametrize("seed", range(0, 40, 2))
def test_prefill_idle_rows_do_not_depend_on_the_lookahead(seed):
    # (a quarter of the shortest tick is a lower bound on every tick too: horizons 4x denser, the same run)
    try:
        dep, res = _run(_back_pressure(seed, swap=seed % 4 == 0))
    except MemoryPlanError:
        return
    _assert_same(dep, res, *_run(_back_pressure(seed, swap=seed % 4 == 0), 0.25))
    _assert_one_row_per_idle_state(res)


@pytest.mark.parametrize("seed", [5, 6, 12, 17])
def test_prefill_idle_rows_under_a_tick_cap(seed):
    # (rows merged into one count once: a cap at each of a prefill instance's idle rows stops it at the same point in
    # every order of steps)
    cfg = _back_pressure(seed, swap=True)
    _, res = _run(cfg)
    caps = sorted({k + 1 for x in res.instances if x.role == "prefill" for k, p in enumerate(x.result.timeline.phase)
                   if p == Phase.IDLE})  # fmt: skip
    for cap in caps[:: max(1, len(caps) // 4)]:
        capped = with_value(cfg, "limits.max_ticks", cap)
        dep, res = _run(capped)
        for flags in ({"pause_runs": False}, {"lazy_decode": False}):
            _assert_same(dep, res, *_run(capped, **flags))


@pytest.mark.parametrize("seed", range(30))
def test_swap_preempting_xpyd_is_the_same_in_every_order_of_steps(seed):
    # Swap-only ticks cost no weight read (CostModel.tick) and the lookahead of a swapping instance is its fixed
    # overhead: denser horizons, where 5 of these 30 differed in prefill idle rows before they merged
    cfg = _back_pressure(seed, swap=True)
    try:
        dep, res = _run(cfg)
    except MemoryPlanError:
        return
    for flags in ({"pause_runs": False}, {"lazy_decode": False}):
        _assert_same(dep, res, *_run(cfg, **flags))
    _assert_one_row_per_idle_state(res)
