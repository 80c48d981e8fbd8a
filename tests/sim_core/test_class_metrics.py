"""Per-class latency (sim_core.metrics.class_metrics): one row per class, computed from its own requests."""

import numpy as np

from sim_core import run_simulation
from sim_core.metrics import class_metrics
from tests.conftest import make_config, trace_config


def test_one_row_per_class_from_its_own_requests():
    cfg = make_config("engine-article-priority", workload__num_requests=80)
    res = run_simulation(cfg)
    rows = class_metrics(cfg, res.requests)
    assert [r["class"] for r in rows] == ["interactive", "batch"]
    assert sum(r["num_requests"] for r in rows) == 80
    r = res.requests
    hi = (r.priority == 0) & r.is_finished
    assert rows[0]["ttft_p99_s"] == float(np.percentile(r.ttft_s[hi], 99))


def test_a_single_class_run_has_no_class_rows():
    cfg = make_config(workload__num_requests=20)
    assert class_metrics(cfg, run_simulation(cfg).requests) == []


def test_a_trace_with_priorities_is_grouped_by_priority():
    cfg = trace_config([100, 100, 100], [5, 5, 5], arrivals=[0, 0, 0], priorities=[1, 0, 1])
    rows = class_metrics(cfg, run_simulation(cfg).requests)
    assert [(r["class"], r["num_requests"]) for r in rows] == [("priority 0", 1), ("priority 1", 2)]
