"""Config files and `--set` values as people write them by hand: a JSON object that names a field twice is
refused naming the key (json.loads kept the last value silently, so which one ran depended on the order)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sim_core import PresetError, config_from_json
from sim_core.cli import main
from sim_core.inputs import DuplicateKeyError, loads_bounded
from tests.strategies import cases


def test_a_config_file_naming_a_field_twice_exits_2_naming_it(tmp_path, capsys):
    path = tmp_path / "c.json"
    path.write_text('{"workload": {"num_requests": 5, "num_requests": 7}}')  # ran 7 requests
    assert main(["run", str(path)]) == 2
    err = capsys.readouterr().err
    assert "the key 'num_requests' appears twice" in err and "Traceback" not in err


def test_a_set_value_naming_a_field_twice_is_named_not_read_as_text(capsys):
    # read as the text '{"rate_per_s":1,...}', it was reported as "Input should be a valid dictionary"
    assert main(["run", "chat-h100-llama8b", "--set", 'workload.arrival={"rate_per_s": 1, "rate_per_s": 2}']) == 2
    assert "the key 'rate_per_s' appears twice" in capsys.readouterr().err


@cases(100)
@given(key=st.text(min_size=1, max_size=6), depth=st.integers(0, 5), first=st.integers(), second=st.integers())
def test_a_duplicate_key_at_any_depth_is_refused(key, depth, first, second):
    import json

    inner = "{" + f"{json.dumps(key)}: {first}, {json.dumps(key)}: {second}" + "}"
    text = '{"a": ' * depth + inner + "}" * depth
    with pytest.raises(DuplicateKeyError, match="appears twice"):
        loads_bounded(text)
    with pytest.raises(PresetError, match="appears twice"):
        config_from_json(text)


def test_the_same_key_in_sibling_objects_is_fine():
    assert loads_bounded('{"a": {"x": 1}, "b": {"x": 2}}') == {"a": {"x": 1}, "b": {"x": 2}}


@cases(25)
@given(option=st.sampled_from(["time_scale", "start_s", "end_s", "max_requests"]),
       value=st.sampled_from([-1, 0, -0.5, 1e300, 10**12, -(10**12)]))
def test_a_config_files_trace_option_out_of_range_is_named_with_its_range(option, value):
    # {"trace": {"file": "azure-2023-sample.csv", "time_scale": -1}} said "time_scale = -1: Input should be greater
    # than 0" without the allowed range: the bounds were looked up in SimConfig, which has no such field
    from sim_core import PresetError, config_from_dict
    from sim_core.config import allowed_range
    from sim_core.traces import TraceOptions

    try:
        config_from_dict({"trace": {"file": "azure-2023-sample.csv", option: value}})
    except PresetError as err:
        msg = str(err)
        if f"{option} = " in msg:
            assert f"allowed: {allowed_range((option,), TraceOptions)}" in msg, msg
        else:  # in range, but the window holds no request of the sample
            assert "no request left" in msg or "more than" in msg, msg


def test_an_unknown_pool_hardware_preset_names_the_pool():
    # ?preset=cluster-splitwise-llama70b-4xdgx-ha-3p1d&deployment.disaggregation.decode.hardware="nope" said "unknown
    # hardware preset 'nope'": the top-level hardware, or which pool's?
    from app.state import config_from_query

    _, _, warning = config_from_query({"preset": "cluster-splitwise-llama70b-4xdgx-ha-3p1d",
                                       "deployment.disaggregation.decode.hardware": '"nope"'})  # fmt: skip
    assert "deployment.disaggregation.decode.hardware = 'nope': unknown hardware preset 'nope'" in warning, warning
