"""`python -m sim_core fields`: the settings reference is the config model's own fields, defaults and ranges."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as hs

from sim_core.cli import apply_overrides, main
from sim_core.config import SimConfig, field_bounds
from sim_core.fields import config_fields, fields_text
from sim_core.presets import PresetError, list_presets, load_preset
from tests.strategies import cases, leaf_paths

ROWS = config_fields()
PATHS = [r.path for r in ROWS]


def test_every_setting_of_every_preset_is_in_the_reference():
    for name in list_presets():
        data = load_preset(name).model_dump(mode="json")
        for path in leaf_paths(data):
            dotted = ".".join(path)
            # (a section a preset leaves out, deployment: null, lists its fields, which the preset does not hold)
            assert dotted in PATHS or any(p.startswith(dotted + ".") for p in PATHS), (name, dotted)


def test_each_reference_default_is_the_config_models():
    default = SimConfig().model_dump(mode="json")
    for row in ROWS:
        node = default
        for part in row.path.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        if node is not None and row.default_text not in ("required",) and not row.default_text.endswith("..."):
            import json

            assert json.loads(row.default_text) == node, row


@cases(60)
@given(row=hs.sampled_from([r for r in ROWS if r.type_text in ("integer", "number") and r.allowed.startswith(">")]),
       data=hs.data())
def test_a_value_past_a_listed_range_is_refused_naming_that_range(row, data):
    # the reference's range is the one validation applies: a value above it is refused with the same words
    lo, hi = field_bounds(tuple(row.path.split(".")))
    if hi is None or not math.isfinite(hi):
        return
    over = hi * 2 + 1 if row.type_text == "number" else int(hi) * 2 + 1
    # (a trace's fields are set on a config with a trace: without one, the trace is set whole, rows and all)
    names = ["trace-mooncake-h100-llama8b"] if row.path.startswith("workload.trace.") else ["chat-h100-llama8b", "chat-4xh100-llama70b"]
    with pytest.raises(PresetError) as err:
        apply_overrides(load_preset(data.draw(hs.sampled_from(names))), [f"{row.path}={over}"])
    assert row.allowed in str(err.value) or "out of range" in str(err.value), (row, str(err.value))


def test_a_field_of_an_absent_section_with_required_fields_is_named_not_a_traceback(capsys):
    # --set workload.trace.hash_block_tokens=16 on a config without a trace raised pydantic's "3 validation errors for
    # Trace" as a traceback (found by the test above)
    assert main(["run", "chat-h100-llama8b", "--set", "workload.trace.hash_block_tokens=16"]) == 2
    err = capsys.readouterr().err
    assert "'workload.trace' is one field, not a section: set it whole" in err and "Traceback" not in err


def test_fields_prints_a_section_and_names_the_sections_for_an_unknown_one(capsys):
    assert main(["fields", "scheduler.speculative"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("scheduler.speculative.enabled  (true/false, default false)")
    assert "scheduler.speculative.num_draft_tokens  (integer, default 3; allowed: >= 1 and <= 16)" in out
    assert all(line.startswith(("scheduler.speculative.", "    ")) for line in out.splitlines())
    assert main(["fields", "schema_version"]) == 0
    assert capsys.readouterr().out.startswith("schema_version  (integer, default 3")  # (a Literal[3], not text)
    assert main(["fields", "schedulr"]) == 2
    err = capsys.readouterr().err
    assert "no setting starts with it (did you mean 'scheduler'?)" in err and "Traceback" not in err
    with pytest.raises(ValueError, match="sections: schema_version, name"):
        fields_text("nope")
