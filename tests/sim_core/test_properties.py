"""Property-based: random valid configs run with invariants; random malformed configs, JSON, CSV
and command lines give one formatted message (never another exception, never a hang); the run
budget stops runs with partial results. `SIM_PROPERTY_CASES=5000` for many more cases."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
import typing
from pathlib import Path

import numpy as np
import pytest
from hypothesis import event, example, given
from pydantic import BaseModel
from hypothesis import strategies as st

from sim_core import MemoryPlanError, PresetError, SimConfig, config_from_dict, config_from_json, run_simulation
from sim_core.budget import RunBudget, is_budget_stop
from sim_core.cli import format_summary, main
from sim_core.inputs import MAX_JSON_DEPTH, InputError, json_depth, loads_bounded, parse_float_text, parse_int_text
from sim_core.types import Status
from sim_core.traces import parse_trace
from tests.strategies import HOSTILE_VALUES, cases, malformed_config_dicts, nested_text, to_json, valid_configs

MAX_CASE_S = 20  # a single case taking longer is a hang for our purposes


@cases(60)
@given(valid_configs())
def test_random_valid_configs_run_with_invariants(data):
    try:
        cfg = config_from_dict(data)
    except PresetError as err:  # a cross-field rule (e.g. lengths vs chunking): a message, not a crash
        event("rejected by a cross-field rule")
        assert str(err).startswith("Invalid config")
        return
    t0 = time.perf_counter()
    try:
        res = run_simulation(cfg, check_invariants=True)
    except MemoryPlanError as err:
        event("does not fit in memory")
        assert "GiB" in str(err)  # names the numbers in the unit nvidia-smi reports
        return
    event("ran" + (" (stopped by a limit)" if res.summary.stopped_reason else ""))
    event("pre-empted" if res.summary.num_preemptions else "not pre-empted")  # (--hypothesis-show-statistics)
    assert time.perf_counter() - t0 < MAX_CASE_S
    s, req = res.summary, res.requests
    assert s.num_finished + s.num_unfinished == s.num_requests == cfg.workload.num_requests
    finished = req.status == Status.FINISHED
    assert np.all(req.num_emitted[finished] == req.output_tokens[finished])
    assert np.all(req.first_token_s[finished] >= req.arrival_s[finished])
    assert np.all(req.finish_s[finished] >= req.first_token_s[finished])
    # a deployment's timeline merges its instances' ticks; each instance keeps the engine's invariants
    timelines = [x.result.timeline for x in res.instances] if getattr(res, "instances", None) else [res.timeline]
    for tl in timelines:
        assert np.all(np.diff(tl.t_start_s) >= 0)
        assert tl.num_ticks <= cfg.limits.max_ticks
    if s.stopped_reason is None:
        assert s.num_finished == s.num_requests
    json.loads(s.model_dump_json())  # the summary is valid JSON (no NaN leaks into the CLI's --json)
    format_summary(res).encode("utf-8")  # printable


def test_valid_configs_reach_preemption():
    # the property above would pass whatever pre-emption did if no drawn config reached it (none of 59 did, drawn over
    # every knob's range, before the strategy drew KV room for 1-2 of the longest requests in half its cases). A floor,
    # not a count: derandomised draws still move with what the process has imported (Hypothesis mixes constants from
    # loaded modules into them): alone, 40 draws pre-empted in 5-14 runs and swapped in 3; in the whole CI suite 2 and 0
    from hypothesis import HealthCheck, Phase, settings

    seen = {"pre-empted": 0, "swapped": 0}

    @settings(max_examples=60, derandomize=True, database=None, phases=[Phase.generate], deadline=None,
              suppress_health_check=list(HealthCheck))  # fmt: skip
    @given(valid_configs())
    def draw(data):
        try:
            cfg = config_from_dict(data)
            s = run_simulation(cfg).summary
        except (PresetError, MemoryPlanError):
            return
        seen["pre-empted"] += s.num_preemptions > 0
        seen["swapped"] += s.num_preemptions > 0 and cfg.scheduler.preemption == "swap"

    draw()
    assert seen["pre-empted"] >= 1, seen


@cases(15)
@given(valid_configs())
def test_same_config_and_seed_give_the_same_result(data):
    try:
        cfg = config_from_dict(data)
        a, b = run_simulation(cfg), run_simulation(cfg)
    except (PresetError, MemoryPlanError):
        return
    assert a.summary.model_dump_json() == b.summary.model_dump_json()  # JSON: NaN percentiles compare equal
    assert np.array_equal(a.requests.finish_s, b.requests.finish_s, equal_nan=True)


def _takes_bool(path: tuple) -> bool:
    """Whether the config field at `path` is a bool (true or false there is a value, not a hostile one)."""
    model = SimConfig
    for i, part in enumerate(path):
        field = getattr(model, "model_fields", {}).get(part)
        if field is None:
            return False
        kinds = [k for k in (typing.get_args(field.annotation) or (field.annotation,)) if k is not type(None)]
        if i == len(path) - 1:
            return bool in kinds
        model = next((k for k in kinds if isinstance(k, type) and issubclass(k, BaseModel)), None)
    return False


def _traceless_with_closed_loop_sessions_off():
    # (found by a random run, SIM_HYPOTHESIS_PROFILE=explore: the strategy drops a preset's trace, and since cbcf2ff
    # this preset's own length bounds pass its model's max_model_len without it, so the config is refused for that;
    # the value drawn, False for a bool field, is not a hostile one the message must name)
    from sim_core import load_preset

    data = load_preset("mechanism-kv-preemption").model_dump(mode="json")
    data["workload"].pop("trace")
    data["workload"]["sessions"]["closed_loop"] = False
    return data, ("workload", "sessions", "closed_loop"), False


@cases(300)
@given(malformed_config_dicts())
@example(({"hardware": {"memory_gib": True}}, ("hardware", "memory_gib"), True))
@example(({"workload": {"num_samples": "12"}}, ("workload", "num_samples"), "12"))
@example(({"hardware": {"name": "x\ud800y"}}, ("hardware", "name"), "x\ud800y"))
@example(({"workload": {"num_requests": "١٢٣"}}, ("workload", "num_requests"), "١٢٣"))
@example(({"workload": {"num_requests": "1_000"}}, ("workload", "num_requests"), "1_000"))
@example(({"hardware": {"peak_tflops": math.nan}}, ("hardware", "peak_tflops"), math.nan))
@example(_traceless_with_closed_loop_sessions_off())
def test_malformed_configs_give_a_message_naming_the_field(case):
    data, path, value = case
    try:
        cfg = config_from_dict(data)
    except PresetError as err:
        msg = str(err)
        assert msg and "Traceback" not in msg
        msg.encode("utf-8")  # the message itself is printable (surrogates escaped by repr)
        strictly_bad = ((isinstance(value, bool) and not _takes_bool(path)) or (isinstance(value, float) and not math.isfinite(value))
                        or (isinstance(value, str) and any("\ud800" <= c <= "\udfff" for c in value)))  # fmt: skip
        if strictly_bad and len(path) > 1 and isinstance(data.get(path[0]), dict) and path[0] != "calibration":
            assert path[-1] in msg, msg
        return
    assert isinstance(cfg, SimConfig)
    cfg.model_dump_json().encode("utf-8")  # anything accepted can be written out


@cases(40)
@given(st.one_of(st.binary(max_size=300), st.text(max_size=300).map(str.encode),
                 st.integers(MAX_JSON_DEPTH + 1, 20_000).map(lambda d: ("[" * d).encode()),
                 st.integers(MAX_JSON_DEPTH + 1, 5000).map(lambda d: nested_text(d).encode())))  # fmt: skip
def test_config_json_text_gives_a_config_or_a_message(raw):
    try:
        config_from_json(raw, "uploaded file")
    except PresetError as err:
        assert str(err)


def _depth_one_by_one(value) -> int:
    """json_depth as it was written before lists of scalars were skipped in C (the reference)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if not isinstance(node, dict | list):
            continue
        deepest = max(deepest, depth)
        if depth > MAX_JSON_DEPTH:
            return depth
        stack.extend((v, depth + 1) for v in (node.values() if isinstance(node, dict) else node))
    return deepest


JSON_VALUES = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=3),
                           lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=3), kids, max_size=4),
                           max_leaves=60)  # fmt: skip


@cases(300)
@given(JSON_VALUES)
@example([[1, 2, [3]], {"a": [4, [5, [6]]]}, 7])
@example(json.loads("[" * (MAX_JSON_DEPTH + 3) + "]" * (MAX_JSON_DEPTH + 3)))
def test_json_depth_is_the_depth_counted_one_value_at_a_time(value):
    assert json_depth(value) == _depth_one_by_one(value)


@pytest.mark.parametrize("depth", [MAX_JSON_DEPTH + 1, 1000, 100_000])
def test_deep_json_is_refused_without_recursion(depth):
    with pytest.raises(InputError, match="nested more than"):
        loads_bounded("[" * depth + "]" * depth)


@cases(200)
@given(st.text(max_size=12))
@example("١٢٣")
@example("1_000")
@example("nan")
@example("inf")
def test_number_text_is_ascii_decimal_only(text):
    try:
        value = parse_int_text(text)
    except ValueError:
        pass
    else:
        assert str(value) == str(int(text.strip())) and text.strip().lstrip("+-").isascii()
    try:
        f = parse_float_text(text)
    except ValueError:
        pass
    else:
        assert math.isfinite(f) and text.strip().isascii() and "_" not in text


CSV_HEADER = "arrival_s,prompt_tokens,output_tokens"


@cases(150)
@given(st.one_of(
    st.binary(max_size=200),
    st.lists(st.tuples(st.one_of(st.floats(allow_nan=True), st.text(max_size=4)), st.integers(-5, 2_000_000),
                       st.one_of(st.integers(-5, 50), st.sampled_from(["1_0", "١٢", "x", ""]))), max_size=6)
    .map(lambda rows: ("\ufeff" + CSV_HEADER + "\n" + "\n".join(",".join(map(str, r)) for r in rows)).encode()),
))  # fmt: skip
def test_trace_csv_gives_a_trace_or_one_message(raw):
    try:
        trace = parse_trace(raw).trace
    except ValueError as err:
        msg = str(err)
        # one line naming the format and the line (e.g. "csv line 4: expected 3 values, got 1"), no pydantic dump
        assert msg and "\n" not in msg, msg
        assert "validation error" not in msg
        return
    assert len(trace.arrival_s) >= 1


def test_excel_bom_csv_is_accepted():
    trace = parse_trace(b"\xef\xbb\xbf" + CSV_HEADER.encode() + b"\r\n0,10,5\r\n1.5,20,5\r\n").trace
    assert trace.prompt_tokens == [10, 20]


@cases(40)
@given(st.lists(st.tuples(st.sampled_from(["workload.num_requests", "hardware.memory_gb", "hardware.name", "limits.max_ticks",
                                           "scheduler.nope", "nope.x", "workload", "=", ""]),
                          HOSTILE_VALUES.map(lambda v: v if isinstance(v, str) else to_json(v))), max_size=3))  # fmt: skip
def test_cli_set_gives_exit_0_or_2_and_no_traceback(capsys, assignments):
    args = ["run", "chat-h100-llama8b", "--set", "workload.num_requests=5", "--set", "limits.max_ticks=2000"]
    for key, value in assignments:
        args += ["--set", f"{key}={value}"[:3000]]
    code = main(args)
    out = capsys.readouterr()
    assert code in (0, 2)
    assert "Traceback" not in out.err
    if code == 2:
        assert out.err.startswith("error: ")


@cases(20)
@given(st.binary(max_size=200))
def test_cli_config_files_of_any_content(tmp_path_factory, raw):
    path = tmp_path_factory.mktemp("cfg") / "c.json"
    path.write_bytes(raw)
    assert main(["run", str(path)]) in (0, 2)


def test_cli_refuses_devices_fifos_and_bad_out_paths(tmp_path, capsys):
    import os

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    assert main(["run", "/dev/zero"]) == 2
    assert main(["run", str(fifo)]) == 2  # returns at once: a FIFO is never opened
    existing = tmp_path / "file"
    existing.write_text("x")
    assert main(["run", "chat-h100-llama8b", "--out", str(existing)]) == 2
    assert main(["run", "chat-h100-llama8b", "--out", str(existing / "sub")]) == 2
    err = capsys.readouterr().err
    assert "not a regular file" in err and "existing file" in err and "Not a directory" in err
    assert "Traceback" not in err


def test_unknown_calibration_preset_names_the_family():
    with pytest.raises(PresetError, match="unknown calibration preset"):
        config_from_dict({"calibration": "h100-sxm"})


# ---------------------------------------------------------------- the run budget
# Stepped tick by tick (no coalescing, no scalar core) so that it cannot finish within the 1 s budget however fast
# the engine gets: with the fast paths the whole run takes ~1.3 s on a quiet machine, too close to the budget.
HEAVY = {"workload": {"num_requests": 200_000, "arrival": {"process": "offline"}}, "limits": {"coalesce_ticks": False}}


def test_a_budget_stops_a_heavy_run_with_partial_results_in_time():
    cfg = config_from_dict(HEAVY | {"hardware": "h100-sxm", "model": "llama-3.1-8b"})
    t0 = time.perf_counter()
    res = run_simulation(cfg, budget=RunBudget(max_wall_s=1.0))
    took = time.perf_counter() - t0
    assert res.summary.stopped_reason and "server time" in res.summary.stopped_reason
    assert is_budget_stop(res.summary.stopped_reason)
    assert res.summary.num_ticks > 0 and res.summary.num_finished < res.summary.num_requests  # partial results
    assert took < 2.5  # the loop stops early enough to assemble the result within the budget (+ slack for a busy machine)


@pytest.mark.parametrize("field,value,words", [
    ("max_ticks", 500, "ticks, the server's budget"),
    ("max_recorded_rows", 3000, "recorded rows"),
])  # fmt: skip
def test_budget_limits_ticks_and_rows(field, value, words):
    cfg = config_from_dict({"workload": {"num_requests": 300, "arrival": {"process": "offline"}},
                            "limits": {"num_recorded_batches": 100_000}})  # fmt: skip
    res = run_simulation(cfg, budget=RunBudget(**{field: value, "check_every_ticks": 64}))
    assert words in res.summary.stopped_reason and is_budget_stop(res.summary.stopped_reason)
    if field == "max_ticks":  # every path (coalesced runs, scalar core, batch of one) stops at the ceiling
        assert res.timeline.num_ticks == value
    else:  # right after the tick whose rows (timeline and step-through) pass the budget, on every path
        rows = np.arange(1, res.timeline.num_ticks + 1) + np.cumsum(np.bincount(res.batches.tick, minlength=res.timeline.num_ticks))
        assert rows[-1] > value >= rows[-2]


def test_budget_limits_memory():
    # The meter reads the process's resident memory growth, so run in a fresh interpreter: a test
    # worker that already freed a few hundred MiB would reuse them without its RSS growing.
    code = """
from sim_core import config_from_dict, run_simulation
from sim_core.budget import RunBudget, is_budget_stop
cfg = config_from_dict({"workload": {"num_requests": 20_000, "arrival": {"process": "offline"}},
                        "scheduler": {"max_num_seqs": 2048, "max_num_batched_tokens": 8192},
                        "limits": {"num_recorded_batches": 100_000}})
res = run_simulation(cfg, budget=RunBudget(max_wall_s=120, max_bytes=8 << 20, check_every_ticks=16))
assert "MiB" in res.summary.stopped_reason and is_budget_stop(res.summary.stopped_reason), res.summary.stopped_reason
"""
    root = Path(__file__).resolve().parents[2]
    env = dict(os.environ, PYTHONPATH=str(root))
    out = subprocess.run([sys.executable, "-c", code], cwd=root, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]


def test_without_a_budget_the_api_has_full_control():
    cfg = config_from_dict({"workload": {"num_requests": 300, "arrival": {"process": "offline"}}})
    assert run_simulation(cfg).summary.stopped_reason is None
    limited = run_simulation(config_from_dict({"limits": {"max_ticks": 5}})).summary.stopped_reason
    assert limited and not is_budget_stop(limited)  # the config's own limit is not the server's
    roomy = run_simulation(cfg, budget=RunBudget()).summary.model_dump_json()
    assert roomy == run_simulation(cfg).summary.model_dump_json()  # a roomy budget changes nothing


@pytest.mark.parametrize("bad", [{"max_wall_s": 0}, {"max_ticks": -1}, {"max_bytes": True}, {"max_wall_s": math.nan}])
def test_a_budget_must_be_positive(bad):
    with pytest.raises(ValueError, match="RunBudget"):
        RunBudget(**bad)


TP_FIELDS = ("hardware.num_gpus", "deployment.disaggregation.prefill.tensor_parallel",
             "deployment.disaggregation.decode.hardware.num_gpus")  # fmt: skip


@cases(200)
@given(kv=st.integers(1, 64), group=st.integers(1, 8), tp=st.integers(1, 64), field=st.sampled_from(TP_FIELDS))
@example(kv=8, group=4, tp=3, field=TP_FIELDS[0])  # Llama-3.1-8B on 3 GPUs
@example(kv=4, group=7, tp=8, field=TP_FIELDS[1])  # Qwen2.5-7B on 8
@example(kv=4, group=7, tp=7, field=TP_FIELDS[2])  # its 28 heads split over 7, its 4 KV heads do not
def test_any_tp_degree_the_heads_do_not_split_over_is_refused_naming_field_value_and_degrees(kv, group, tp, field):
    from sim_core.config import tp_degrees_allowed

    data = SimConfig().model_dump(mode="json")
    data["model"] |= {"name": "M", "num_heads": kv * group, "num_kv_heads": kv}
    if field != "hardware.num_gpus":
        data["deployment"] = {"disaggregation": {}}
    node = data
    *parts, last = field.split(".")
    for part in parts:
        node = node.setdefault(part, {})
    node[last] = tp
    allowed = tp_degrees_allowed(kv * group, kv)
    try:
        cfg = config_from_dict(data)
    except PresetError as err:
        msg = str(err)
        if tp in allowed:  # refused for another reason (memory is not checked here): never for its TP degree
            assert f"{field} = {tp}:" not in msg
            return
        listed = ", ".join(map(str, allowed[:-1])) + f" or {allowed[-1]}" if len(allowed) > 1 else "1"
        assert f"\n  {field} = {tp}: M's {kv * group} attention heads" in msg and f"only over {listed} GPU" in msg
        return
    assert tp in allowed and tp in cfg.tp_fields().values()
