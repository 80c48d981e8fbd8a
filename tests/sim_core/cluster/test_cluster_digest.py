"""scripts/cluster_digest.py: the configs the README's Beyond one engine (docs/cluster.md) says it hashes."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

from tests.documents import prose

ROOT = Path(__file__).parents[3]


def _digest_script():
    if str(ROOT) not in sys.path:  # (the script imports scripts.cluster_cost)
        sys.path.insert(0, str(ROOT))
    spec = importlib.util.spec_from_file_location("cluster_digest", ROOT / "scripts" / "cluster_digest.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_readme_counts_the_configs_the_cluster_digest_hashes():
    # the README said "52 deployment configs, 12 of them xPyD under decode back-pressure" after session 28 added six
    # with first_token_from = decode (four of them under back-pressure): the script hashes 58, its docstring said so
    configs = _digest_script().configs()
    back_pressure = [cfg for seed, cfg in configs if 300 <= seed < 412]  # (the 300 series and its decode-side copies)
    assert all(cfg.deployment.disaggregation is not None for cfg in back_pressure)
    readme = prose("cluster")  # (Beyond one engine, in full)
    stated = re.search(r"hashes every result array of (\d+) deployment configs, (\d+) of them xPyD under decode back-pressure", readme)
    assert stated and (int(stated[1]), int(stated[2])) == (len(configs), len(back_pressure))
    assert f"over {len(configs)} configs" in (ROOT / "scripts" / "cluster_digest.py").read_text()
