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


def test_every_public_name_says_what_it_is_in_its_own_docstring():
    # `help(sim_core.X)` is a researcher's second step after the README: SimConfig and TraceOptions showed only the
    # base model's note on strict types, default_config nothing at all
    import sim_core

    def own_doc(obj: object) -> str | None:  # a class's own, not the one it inherits
        return vars(obj).get("__doc__") if isinstance(obj, type) else obj.__doc__

    undocumented = [name for name in sim_core.__all__ if not own_doc(getattr(sim_core, name))]
    assert undocumented == []
