"""A digest of single-engine results: every scenario preset, every engine preset on the bench's 70B scenario, and
the bench's scenarios (quick sizes): run it on two trees to check that a speed change leaves every number alone
(issue 11: the fast paths are bit-identical to tick-by-tick stepping; `scripts/cluster_digest.py` does the same for
deployments).

    PYTHONPATH=$PWD python scripts/engine_digest.py   (one line per run, then TOTAL)
"""

from __future__ import annotations

import argparse
import hashlib
import sys

sys.path.insert(0, ".")  # (cluster_digest's hash of a result, and the tests' config builders it imports)

from scripts.cluster_digest import _update  # noqa: E402
from sim_core.bench import engine_config, engine_presets, scenarios  # noqa: E402
from sim_core.engine import run_simulation  # noqa: E402
from sim_core.presets import list_presets, load_preset  # noqa: E402


def runs() -> list[tuple[str, object]]:
    out = [(name, lambda name=name: load_preset(name)) for name in list_presets("scenarios")]
    out += [(f"bench {e}", lambda e=e: engine_config(e)[0]) for e in engine_presets()]
    return out + [(f"bench {name}", make) for name, make in scenarios(quick=True).items()]


def print_digests(named_runs: list[tuple[str, object]], check=None) -> None:
    """One line per run (name, ticks, digest of every result column), then the TOTAL over them. Each run is a config
    or a function making one; `check(result, cfg)`, if given, is called on each (e.g. against its tick-by-tick run)."""
    total = hashlib.sha256()
    for name, make in named_runs:
        cfg = make() if callable(make) else make
        res = run_simulation(cfg)
        if check is not None:
            check(res, cfg)
        m = hashlib.sha256()
        _update(res, m)
        digest = m.hexdigest()[:16]
        total.update(digest.encode())
        print(f"{name:60s} {res.timeline.num_ticks:>9,} {digest}", flush=True)
    print("TOTAL", total.hexdigest()[:16])


def main() -> None:
    print_digests(runs())


if __name__ == "__main__":
    argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()  # --help prints the docstring, not a run
    main()
