"""Pre-emption by swap on the scalar core (issue 11, "fast for every strategy"): a victim swapped out by
`Scheduler._preempt` inside a core run, compose_tick's swap-in step served by `fastpath._Steps.swap_in` through
`Scheduler.swap_in_count`, the requests swapped before a run joining it, the PCIe time priced by the one cost function.
Every output equals tick-by-tick stepping (`limits.coalesce_ticks = false`), and the core ran the swap ticks."""

from __future__ import annotations

import numpy as np
import pytest

from sim_core.types import Event, Status
from tests.conftest import case_numbers
from tests.sim_core.test_equivalence import ENGINE_SCENARIOS, assert_same_result, buildable, run_both

PAGED = [s for s in ENGINE_SCENARIOS if s not in ("engine-orca", "engine-fastertransformer")]
# KV room (units of the longest request, `_with_kv_room`) per n, and host swap space: room for all of the victims
# (4 GiB) or for a few (0.02 GiB: the rest are recomputed, `Scheduler.swaps_out`)
SWAP_ROOM = {1: 1.0, 2: 0.75, 4: 0.6}
SWAP_VARIANTS = ("kv pressure", "hard pressure", "small swap space", "closed loop")


def swap_config(scenario: str, n: int, variant: str):
    """Engine preset `scenario` with pre-emption by swap (the prefix cache off: with it, swap is the scheduler's), n
    samples per request under KV pressure, requests arriving fast enough that many decode at once, the batch log on."""
    over = dict(seed=5 + n, workload__num_requests=60, workload__num_samples=n, workload__arrival__rate_per_s=20.0,
                limits__num_recorded_batches=2000, scheduler__preemption="swap", kv_cache__enable_prefix_caching=False,
                kv_cache__swap_space_gb=0.02 if variant == "small swap space" else 4.0)  # fmt: skip
    if variant == "closed loop":
        over.update(workload__num_requests=90, workload__arrival__process="closed_loop", workload__arrival__num_clients=24,
                    workload__arrival__think_time_s=0.0)  # fmt: skip
    return buildable(scenario, over, SWAP_ROOM[n] * (0.6 if variant == "hard pressure" else 1.0))


SWAP_CASES = [(s, n, v) for s in PAGED for n in SWAP_ROOM for v in SWAP_VARIANTS if swap_config(s, n, v) is not None]


def core_swaps(monkeypatch) -> dict[str, int]:
    """Count, from now on, the ticks the scalar core runs and the swap events it records (its write-back's `swapping`)."""
    from sim_core import fastpath

    counts = {"ticks": 0, "out": 0, "in": 0}
    advance, write_back = fastpath.advance, fastpath._write_back

    def counted_advance(engine):
        before = engine.rec.num_ticks
        done = advance(engine)
        counts["ticks"] += engine.rec.num_ticks - before
        # the swapped queue as `Scheduler._preempt` and `_swap_in` leave it: every swapped request SWAPPED, its blocks in
        # host memory only (a victim of a chunk's pre-emption holds its decode's new block too: not always its context's),
        # the host blocks conserved
        st, kv = engine.st, engine.kv
        ids = st.key_to_id(st.swapped_keys)
        assert np.all(st.status[ids] == Status.SWAPPED) and not kv.held[ids].any() and kv.host_held[ids].all()
        assert kv.num_host_free + int(kv.host_held.sum()) == kv.num_host_blocks
        return done

    def counted_write_back(*args, swapping=None, **kwargs):
        if swapping is not None:
            for ids, _, kind in swapping[1]:
                counts["out" if kind == Event.SWAPPED_OUT else "in"] += ids.size
        return write_back(*args, swapping=swapping, **kwargs)

    monkeypatch.setattr(fastpath, "advance", counted_advance)
    monkeypatch.setattr(fastpath, "_write_back", counted_write_back)
    return counts


def test_the_swap_cases_cover_every_paged_preset_and_variant():
    assert {c[0] for c in SWAP_CASES} == set(PAGED) and {c[2] for c in SWAP_CASES} == set(SWAP_VARIANTS)
    assert {c[1] for c in SWAP_CASES} == set(SWAP_ROOM)


@pytest.mark.parametrize("scenario,n,variant", SWAP_CASES)
def test_swap_on_the_scalar_core_equals_tick_by_tick(scenario, n, variant, monkeypatch):
    """Every output is the tick-by-tick one; where swap runs on the core (`fastpath.swaps_here`) the core ran nearly
    every tick and made most swap-outs and swap-ins (the rest: a pre-emption in a tick that swapped in, a swap-in of a
    recompute victim's prefill, which hand the tick back to the scheduler; a swap-in of a request the run swapped out
    ends the run, and the next run swaps it in)."""
    from sim_core import fastpath
    from sim_core.engine import Engine

    cfg = swap_config(scenario, n, variant)
    counts = core_swaps(monkeypatch)
    on, off = run_both(cfg)
    assert_same_result(on, off)
    kinds = on.events.kind
    swapped_out, swapped_in = int((kinds == int(Event.SWAPPED_OUT)).sum()), int((kinds == int(Event.SWAPPED_IN)).sum())
    engine = Engine(cfg)
    if not (fastpath.eligible(engine) and fastpath.swaps_here(engine)):
        return
    ticks = on.timeline.num_ticks
    assert counts["ticks"] >= 0.85 * ticks
    if swapped_out >= 4:  # (the swap ticks are the core's)
        assert counts["out"] >= 0.9 * swapped_out and counts["in"] >= 0.4 * swapped_in
        swap_ticks = (on.timeline.columns["swap_blocks"] > 0).sum()
        assert swap_ticks > 0


# Presets that swap under KV pressure, at n = 1 and at n = 4 (the core must swap there: no vacuous pass). (Sarathi-Serve
# at n = 4 swapped with the small swap space until session 56; taking whole prompts at admission, all 24 of its
# pre-emptions there are recomputes (1 swap at 0.06 GB): its swaps are under KV pressure, 22 of 22 pre-emptions)
SWAPS_ON_THE_CORE = [("engine-vllm-v0-swap", 1, "kv pressure"), ("engine-vllm-v0-swap", 4, "kv pressure"),
                     ("engine-vllm-v0", 2, "kv pressure"), ("engine-vllm-v1", 1, "closed loop"),
                     ("engine-sarathi-serve", 4, "kv pressure")]  # fmt: skip


@pytest.mark.parametrize("scenario,n,variant", SWAPS_ON_THE_CORE)
def test_the_core_swaps_out_and_in(scenario, n, variant, monkeypatch):
    cfg = swap_config(scenario, n, variant)
    counts = core_swaps(monkeypatch)
    on, off = run_both(cfg)
    assert_same_result(on, off)
    assert counts["out"] > 0 and counts["in"] > 0


@pytest.mark.parametrize("engine,over", [("vllm-v0-swap", {"workload__num_samples": 4}),
                                         ("vllm-v0-swap", {"kv_cache__gpu_memory_utilization": 0.85}),
                                         ("vllm-v0-swap", {"workload__arrival__process": "closed_loop",
                                                           "workload__arrival__num_clients": 64})])  # fmt: skip
def test_the_bench_swap_rows_run_on_the_core(engine, over, monkeypatch):
    """The bench's engine scenario (512 requests) under the vllm-v0-swap preset: identical to tick by tick, >= 99 % of
    the ticks and >= 90 % of the swap-outs and swap-ins on the core (before: ~91 % of the ticks, none of the swaps)."""
    from sim_core.bench import _set, engine_config

    cfg = _set(engine_config(engine)[0], **over)
    counts = core_swaps(monkeypatch)
    on, off = run_both(cfg)
    assert_same_result(on, off)
    kinds = on.events.kind
    swapped_out, swapped_in = int((kinds == int(Event.SWAPPED_OUT)).sum()), int((kinds == int(Event.SWAPPED_IN)).sum())
    assert counts["ticks"] >= 0.99 * on.timeline.num_ticks
    if swapped_out:
        assert counts["out"] >= 0.9 * swapped_out and counts["in"] >= 0.9 * swapped_in


@pytest.mark.parametrize("case", case_numbers(16))
def test_random_swap_configs_equal_tick_by_tick(case):
    """Random swap configs (any paged preset, n = 1-4, open or closed loop, priority order, KV room 0.4-2, host swap
    space for a few victims or all, a tick limit): identical to tick-by-tick stepping."""
    rng = np.random.default_rng([case, 46])
    while True:
        n = int(rng.integers(1, 5))
        over = dict(seed=int(rng.integers(1000)), workload__num_requests=int(rng.integers(30, 80)), workload__num_samples=n,
                    workload__arrival__rate_per_s=float(rng.uniform(5.0, 40.0)), scheduler__preemption="swap",
                    kv_cache__swap_space_gb=float(rng.choice([0.01, 0.05, 4.0])),
                    limits__num_recorded_batches=int(rng.choice([0, 50, 3000])))  # fmt: skip
        if rng.random() < 0.3:
            over.update(workload__arrival__process="closed_loop", workload__arrival__num_clients=int(rng.integers(4, 40)),
                        workload__arrival__think_time_s=float(rng.choice([0.0, 0.02])))  # fmt: skip
        if rng.random() < 0.2:
            over.update(scheduler__queue_order="priority", workload__classes=[
                {"name": "a", "share": 0.5, "priority": 0}, {"name": "b", "share": 0.5, "priority": 2}])  # fmt: skip
        if rng.random() < 0.2:
            over.update(limits__max_ticks=int(rng.integers(50, 400)))
        cfg = buildable(str(rng.choice(PAGED)), over, float(rng.uniform(0.4, 2.0)))
        if cfg is not None:
            break
    on, off = run_both(cfg)
    assert_same_result(on, off)


def check_swapped_queue_after_core_runs(monkeypatch) -> None:
    """From now on, after each run of the scalar core, assert that its swapped queue is as tick-by-tick steps leave it
    (`Scheduler._preempt`): a swapped decoder's counts its context's (emitted = context - prompt + 1), its last token
    written (the write-back puts back what the last swap-out left, not a later stretch's progress, and writes a
    victim's last token in the run)."""
    from sim_core import fastpath

    advance = fastpath.advance

    def checked(engine):
        ran = advance(engine)
        st = engine.st
        ids = st.key_to_id(st.swapped_keys)
        dec = ids[st.computed[ids] >= st.prefill_target[ids]]
        assert np.array_equal(st.emitted[dec], st.computed[dec] - st.prompt[dec] + 1)
        assert not np.isnan(st.last_token_s[dec]).any()
        return ran

    monkeypatch.setattr(fastpath, "advance", checked)


BENCH_SWAP_ROWS = [{"workload__num_samples": 4}, {"kv_cache__gpu_memory_utilization": 0.85},
                   {"kv_cache__gpu_memory_utilization": 0.84},
                   {"workload__arrival__process": "closed_loop", "workload__arrival__num_clients": 64}]  # fmt: skip


@pytest.mark.parametrize("over", BENCH_SWAP_ROWS)
@pytest.mark.parametrize("num_recorded_batches", [2000, 0])
def test_a_core_run_goes_on_past_swapping_its_victims_in_again(over, num_recorded_batches, monkeypatch):
    """The vllm-v0-swap preset on the bench's engine scenario (`scripts/episode_cost.py --swap`: n = 4, its KV cache
    short at 85 % and 84 % of GPU memory, a closed loop of 64 clients), where a victim swapped out is swapped in a few
    ticks later: a core run swaps its own victims in again and goes on (`_Again.swapped_in`: the victim's first
    decoding stretch filed apart, its second a decoder that joins, resuming with its KV), so the core's runs are far
    fewer than those swap-ins, and every output, the batch log (its first 2,000 ticks) included, is the tick-by-tick
    one; after every core run the waiting and swapped queues are as tick-by-tick steps leave them."""
    from sim_core.bench import _set, engine_config
    from tests.sim_core.test_equivalence import check_queue_after_core_runs, count_runs_and_agains

    cfg = _set(engine_config("vllm-v0-swap")[0], **over, limits__num_recorded_batches=num_recorded_batches)
    # (a swap-in takes again those it takes of the run's own swapped-out victims, `_Again.out`)
    runs, again = count_runs_and_agains(monkeypatch, "swapped_in", lambda self, taken, *args: len(self.out.intersection(taken)))
    check_queue_after_core_runs(monkeypatch)
    check_swapped_queue_after_core_runs(monkeypatch)
    on, off = run_both(cfg)
    assert_same_result(on, off)
    swapped_out = int((on.events.kind == int(Event.SWAPPED_OUT)).sum())
    assert swapped_out > 20
    assert again[0] > 0.8 * swapped_out  # (nearly every victim is swapped in again in the run that swapped it out)
    assert runs[0] * 8 < again[0]


@pytest.mark.parametrize("scenario,n", [("engine-vllm-v0-swap", 1), ("engine-vllm-v0-swap", 4), ("engine-vllm-v1", 2),
                                        ("engine-sarathi-serve", 1)])  # fmt: skip
def test_a_run_that_ends_as_it_swaps_its_victim_in_again_equals_tick_by_tick(scenario, n):
    """Runs stopped by a tick limit just after a swap-in (`limits.max_ticks`: each of the first swap-ins' ticks + 1),
    so that a victim the run swapped out joins it again and the run ends before it decodes: its counts are the ones its
    swap-out left (`_Again.rejoined`: nothing in the run writes later progress of it), not its first token's or a
    closed stretch's. Identical to tick by tick."""
    from sim_core.sweep import with_value

    cfg = swap_config(scenario, n, "kv pressure")
    full = run_simulation_of(cfg)
    events = full.events
    swap_ins = np.unique(events.time_s[events.kind == int(Event.SWAPPED_IN)])
    starts = full.timeline.columns["t_start_s"]
    ticks = np.searchsorted(starts, swap_ins)[:12]  # (the tick each swap-in starts)
    assert ticks.size >= 5
    for tick in ticks.tolist():
        on, off = run_both(with_value(cfg, "limits.max_ticks", tick + 1))
        assert_same_result(on, off)


def run_simulation_of(cfg):
    from sim_core.engine import run_simulation

    return run_simulation(cfg)
