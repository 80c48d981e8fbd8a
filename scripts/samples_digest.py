"""A digest of single-engine results with n > 1 samples per request, which `scripts/engine_digest.py`'s presets do not
draw: every engine preset at n = 2, 3, 4 as `tests/sim_core/test_equivalence.py`'s `samples_config` builds it (as it is,
under KV pressure, with the prefix cache), the tests' random configs with n = 2-4, and the bench's engine scenario at
n = 2 and 4. Run it on two trees to check that a speed change leaves every number alone (issue 11: parallel sampling
on the scalar core); `--check` also holds each run to its tick-by-tick run (`limits.coalesce_ticks` off).

    PYTHONPATH=$PWD python scripts/samples_digest.py [--check]   (one line per run, then TOTAL)
"""

from __future__ import annotations

import argparse
import sys

sys.path.insert(0, ".")  # (cluster_digest's hash of a result, and the tests' config builders)

from scripts.engine_digest import print_digests  # noqa: E402
from sim_core.bench import engine_config  # noqa: E402
from sim_core.costmodel import MemoryPlanError, plan_memory  # noqa: E402
from sim_core.engine import run_simulation  # noqa: E402
from sim_core.sweep import with_value  # noqa: E402
from tests.sim_core.test_equivalence import (  # noqa: E402
    ENGINE_SCENARIOS,
    SAMPLES_VARIANTS,
    assert_same_result,
    random_config,
    samples_config,
)

NUM_RANDOM_CASES = 60
BENCH_ENGINES = ("vllm-v1", "sarathi-serve", "vllm-v0", "sglang")


def runs() -> list[tuple[str, object]]:
    out = []
    for scenario in ENGINE_SCENARIOS:
        for n in (2, 3, 4):
            for variant in SAMPLES_VARIANTS:
                cfg = samples_config(scenario, n, variant)
                if cfg is not None:
                    out.append((f"{scenario} n={n} {variant}", cfg))
    for case in range(NUM_RANDOM_CASES):
        cfg = random_config(case)
        if cfg.scheduler.speculative.enabled or cfg.kv_cache.layout != "paged":  # (speculation takes one sample)
            continue
        try:
            cfg = with_value(cfg, "workload.num_samples", 2 + case % 3)
            plan_memory(cfg)
        except (MemoryPlanError, ValueError):
            continue
        out.append((f"random {case} n={cfg.workload.num_samples}", cfg))
    for engine in BENCH_ENGINES:
        for n in (2, 4):
            out.append((f"bench {engine} n={n}", with_value(engine_config(engine)[0], "workload.num_samples", n)))
    return out


def main() -> None:
    def tick_by_tick(res, cfg) -> None:
        assert_same_result(res, run_simulation(with_value(cfg, "limits.coalesce_ticks", False)))

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="also run every config tick by tick and compare")
    print_digests(runs(), tick_by_tick if parser.parse_args().check else None)


if __name__ == "__main__":
    main()
