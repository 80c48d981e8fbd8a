"""The README's Python example runs as written: a researcher's first lines against the API."""

from __future__ import annotations

import re

from sim_core import SimResult
from tests.documents import text


def test_the_readmes_python_example_runs_as_written():
    blocks = re.findall(r"^```python\n(.*?)^```", text(), flags=re.S | re.M)
    assert len(blocks) == 1
    scope: dict = {}
    exec(compile(blocks[0], "README.md", "exec"), scope)  # noqa: S102 (the project's own document)
    res = scope["res"]
    assert isinstance(res, SimResult)
    # its config_with line took effect: SGLang's scheduler with the batch cap it sets
    assert res.config.scheduler.name == "SGLang" and res.config.scheduler.max_num_seqs == 64
    assert set(scope["frames"]) >= {"requests", "ticks"}
