"""A digest of closed-loop-session deployments (multi-turn conversations whose next turn is sent a think time after the
last reply): every router over 1-3 replicas, think time 0 and 0.5 s, plain, prefix caching, speculative decoding, fewer
sequences and KV pressure; least_kv's refreshed views at refresh intervals 0.01-0.5 s over 2 and 4 replicas; xPyD 1P1D
and 2P2D; both sides of lesson 14 and lesson 14 under least_kv. Run it on two trees to check that a speed change to how
replicas stop under sessions leaves every number alone (issue 13: cost; docs/performance.md, *Replicas under
closed-loop sessions*).

    PYTHONHASHSEED=0 PYTHONPATH=$PWD python scripts/session_digest.py   (one line per config, then TOTAL and the CPU time)
"""

from __future__ import annotations

import argparse
import hashlib
import sys
import time

import numpy as np

sys.path.insert(0, ".")  # (the tests' config builders)

from sim_core.bench import _set  # noqa: E402
from sim_core.cluster import run_deployment  # noqa: E402
from sim_core.lessons import load_lessons  # noqa: E402
from tests.sim_core.cluster.test_sessions_cluster import ROUTERS, closed_sessions  # noqa: E402

OVERRIDES = ({}, {"kv_cache__enable_prefix_caching": True}, {"scheduler__speculative": {"enabled": True, "num_draft_tokens": 3}},
             {"scheduler__max_num_seqs": 8}, {"hardware__memory_gib": 20.5})  # fmt: skip
XPYD = ({"disaggregation": {"prefill": {"replicas": 2}, "decode": {"replicas": 2}}},
        {"disaggregation": {"prefill": {"replicas": 1}, "decode": {"replicas": 1}}})  # fmt: skip


def configs() -> list[tuple[str, object]]:
    out = []
    k = 0
    for router in ROUTERS:
        for reps in (1, 2, 3):
            for think_s in (0.0, 0.5):
                for over in OVERRIDES:
                    dep = {"replicas": reps, "router": router}
                    if router in ("least_kv", "prefix_affinity", "weighted_score") and k % 2:
                        dep["state_refresh_s"] = 0.05
                    out.append((f"{router}-{reps}-{think_s}-{list(over)}-{k}", closed_sessions(
                        dep, n=80, think_s=think_s, seed=k, workload__arrival__rate_per_s=20.0 + 10 * (k % 3), **over)))
                    k += 1
    for i, dep in enumerate(XPYD):
        for think_s in (0.0, 1.0):
            out.append((f"xpyd{i}-{think_s}", closed_sessions(dep, n=80, think_s=think_s, seed=i, workload__arrival__rate_per_s=20.0)))
    lesson = next(x for x in load_lessons() if x.id == "session-router")
    out += [("lesson14-0", lesson.config(0)), ("lesson14-1", lesson.config(1))]
    for refresh_s in (0.01, 0.05, 0.5):  # least_kv's refreshed views (turns.RefreshedViews)
        for think_s in (0.0, 0.5):
            for reps in (2, 4):
                for over in ({}, {"scheduler__max_num_seqs": 8}, {"hardware__memory_gib": 20.5}):
                    dep = {"replicas": reps, "router": "least_kv", "state_refresh_s": refresh_s}
                    out.append((f"lkv-{refresh_s}-{think_s}-{reps}-{list(over)}-{k}", closed_sessions(
                        dep, n=80, think_s=think_s, seed=k, workload__arrival__rate_per_s=20.0 + 10 * (k % 3), **over)))
                    k += 1
    for refresh_s in (0.05, 0.5):
        dep = {**XPYD[0], "router": "least_kv", "state_refresh_s": refresh_s}
        out.append((f"xpyd-lkv-{refresh_s}", closed_sessions(dep, n=80, think_s=0.5, seed=3, workload__arrival__rate_per_s=20.0)))
    out.append(("lesson14-lkv", _set(lesson.config(0), deployment__router="least_kv")))
    return out


def digest(res) -> str:
    m = hashlib.sha256()
    r = res.requests
    for a in (r.arrival_s, r.first_scheduled_s, r.first_token_s, r.finish_s, res.instance_of):
        m.update(np.ascontiguousarray(a).tobytes())
    m.update(res.summary.model_dump_json().encode())
    m.update(np.ascontiguousarray(res.timeline.t_end_s).tobytes())
    m.update(np.ascontiguousarray(res.timeline.kv_blocks_used).tobytes())
    return m.hexdigest()[:16]


def main() -> None:
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()
    total = hashlib.sha256()
    t0_s = time.process_time()
    for name, cfg in configs():
        res = run_deployment(cfg)
        h = digest(res)
        total.update(h.encode())
        print(name, h, res.summary.num_finished, flush=True)
    print("TOTAL", total.hexdigest()[:16], "cpu", round(time.process_time() - t0_s, 1))


if __name__ == "__main__":
    main()
