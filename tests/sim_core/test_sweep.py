"""Sweeps and capacity: throughput rises with load up to saturation; capacity search brackets it."""

import numpy as np

from sim_core.sweep import capacity_from_sweep, capacity_search, run_sweep, sweep_values
from tests.conftest import make_config


def _simple():
    return make_config(workload__num_requests=400,
                       workload__prompt_tokens={"dist": "fixed", "mean": 512, "min": 1, "max": 512},
                       workload__output_tokens={"dist": "fixed", "mean": 128, "min": 1, "max": 128})  # fmt: skip


def test_throughput_is_monotone_in_rate_up_to_saturation():
    cfg = _simple()
    pts = run_sweep(cfg, "rate", sweep_values("rate", 2, 120, 8))
    thr = np.array([p.summary.output_tokens_per_s for p in pts])
    peak = int(np.argmax(thr))
    assert peak > 0
    assert np.all(np.diff(thr[: peak + 1]) > 0)  # rises with the offered load...
    assert thr[-1] >= 0.9 * thr.max()  # ...then flattens instead of collapsing


def test_capacity_from_sweep_is_the_last_point_meeting_the_slo():
    cfg = _simple()
    pts = run_sweep(cfg, "rate", sweep_values("rate", 5, 200, 6))
    cap = capacity_from_sweep(pts, cfg)
    meets = [p.summary.slo_attainment >= 0.9 and p.summary.stopped_reason is None for p in pts]
    assert meets[0] and not meets[-1]  # the range brackets the capacity
    first_miss = meets.index(False)
    assert cap == pts[first_miss - 1].value


def test_capacity_search_brackets_the_objective():
    cfg = _simple()
    meets = lambda s: s.stopped_reason is None and s.ttft_p99_s <= 0.5  # noqa: E731
    rate, probes = capacity_search(cfg, meets, 1.0, 8.0, iters=6)
    assert rate > 0
    assert all(meets(s) for r, s in probes if r <= rate)
    assert any(not meets(s) for r, s in probes if r > rate)


def test_integer_knobs_sweep_integers_and_bad_points_are_reported():
    assert sweep_values("max_num_seqs", 1, 8, 4) == [1, 3, 6, 8]
    pts = run_sweep(make_config("chat-l4-llama8b"), "chunk", [256, 65536])
    assert pts[0].summary is not None and pts[1].error and "Out of memory" in pts[1].error
