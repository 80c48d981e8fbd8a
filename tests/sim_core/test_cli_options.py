"""Options of `python -m sim_core bench / sweep / capacity / plan` as users type them: a bad value exits 2 with a
message naming the option and the value (argparse's or ours), before any run; defaults and choices come from
the module that owns them (one source of truth)."""

from __future__ import annotations

import contextlib
import io

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sim_core import load_preset
from sim_core.cli import main
from sim_core.result import Summary
from sim_core.sweep import SWEEP_KNOBS, SweepPoint, capacity_from_sweep
from tests.strategies import cases

FAST = ["--no-cache", "--workers", "1"]
PLAN = ["plan", "chat-h100-llama8b", "--rate", "5", "--gpus", "h100-sxm", "--engines", "vllm-v1", "--tp", "1",
        "--max-replicas", "1", *FAST]  # fmt: skip


def _exit_code(argv: list[str]) -> int:
    try:
        return main(argv)
    except SystemExit as stop:  # argparse's own errors
        return int(stop.code)


@pytest.mark.parametrize("repeats", ["0", "-1", "x"])
def test_bench_repeats_below_one_is_refused(capsys, repeats):
    # 0 and -1 ran no timed run, then measure() read `res` before assignment: UnboundLocalError
    assert _exit_code(["bench", "--repeats", repeats, "--engines-only"]) == 2
    err = capsys.readouterr().err
    assert "argument --repeats" in err and repeats in err and "Traceback" not in err


@cases(30)
@given(repeats=st.one_of(st.integers(21, 10**30), st.integers(-(10**6), 0)))
def test_bench_repeats_outside_its_bound_is_refused_with_the_bound(repeats, monkeypatch):
    # --repeats 1000000 was accepted: 3 million timed runs of every engine preset, days of the machine, no message
    from sim_core import bench

    monkeypatch.setattr(bench, "run", lambda args: pytest.fail(f"ran the benchmark with --repeats {args.repeats}"))
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        assert _exit_code(["bench", "--repeats", str(repeats), "--engines-only"]) == 2
    assert f"argument --repeats: {repeats} is outside [1, 20]: " in err.getvalue(), err.getvalue()


def test_bench_help_states_the_repeats_bound(capsys):
    assert _exit_code(["bench", "--help"]) == 0
    assert "1 to 20" in " ".join(capsys.readouterr().out.split())


@pytest.mark.parametrize("workers", ["0", "-3"])
def test_workers_below_one_is_refused(capsys, workers):
    # 0 ran on every CPU and -3 in this process, silently
    assert main(["sweep", "chat-h100-llama8b", "--start", "1", "--stop", "2", "--no-cache", "--workers", workers]) == 2
    assert f"--workers = {workers}: must be >= 1" in capsys.readouterr().err


@pytest.mark.parametrize("option, value, words", [
    ("--tp", "a", "--tp 'a': 'a' is not a whole number"),
    ("--tp", "1,,2", "--tp '1,,2': an empty item"),
    ("--token-budgets", "1.5", "--token-budgets '1.5': '1.5' is not a whole number"),
    ("--max-batches", "2,x", "--max-batches '2,x': 'x' is not a whole number"),
    ("--tp", "0", "--tp item 1 = 0: out of range; allowed: >= 1 and <= 64"),
    ("--tp", "1,65", "--tp item 2 = 65: out of range; allowed: >= 1 and <= 64"),
    ("--max-batches", "9000", "--max-batches item 1 = 9000: out of range; allowed: >= 1 and <= 8192"),
    ("--token-budgets", "-5", "--token-budgets item 1 = -5: out of range; allowed: >= 1 and <= 1048576"),
    ("--engines", "nope", "--engines = ['nope']: unknown engine preset(s) 'nope'"),
    ("--gpus", "nope", "--gpus = ['nope']: unknown hardware preset(s) 'nope'"),
    ("--price", "=1", "--price = {'': 1.0}: unknown hardware preset(s) ''"),
    ("--top", "0", "--top = 0: out of range; allowed: >= 1 and <= 100"),
    ("--max-replicas", "0", "--max-replicas = 0:"),
    ("--price", "nope=2", "--price = {'nope': 2.0}: unknown hardware preset(s) 'nope'"),
])  # fmt: skip
def test_bad_plan_search_lists_are_named_before_the_search(capsys, option, value, words):
    # int('a') was a ValueError traceback; an unknown engine or TP 0 was pruned as "1 invalid configuration" with
    # no word of why; a price for an unknown GPU was ignored
    argv = [a for a in PLAN]
    if option in argv:
        argv[argv.index(option) + 1] = value
    else:
        argv += [option, value]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert words in err and "Traceback" not in err and "invalid configuration" not in err


def test_a_bad_plan_value_is_not_also_called_an_empty_list(capsys):
    # with min_length=1 pydantic added "Tuple should have at least 1 item" to a list of one bad value
    assert main([*PLAN, "--max-batches", "0"]) == 2
    assert "at least 1 item" not in capsys.readouterr().err


def test_plan_out_that_is_a_file_is_refused_before_the_search(tmp_path, capsys):
    # out.mkdir raised FileExistsError after the whole plan had run
    existing = tmp_path / "file"
    existing.write_text("x")
    assert main([*PLAN, "--out", str(existing)]) == 2
    captured = capsys.readouterr()
    assert "is an existing file" in captured.err and "Traceback" not in captured.err
    assert "candidates" not in captured.out  # nothing searched


def _point(value: float, ok: bool) -> SweepPoint:
    # only what meets_slo reads (the whole-run rule): the run was not stopped and >= 90 % met the SLOs
    summary = Summary.model_construct(stopped_reason=None, slo_attainment=1.0 if ok else 0.0)
    return SweepPoint(value, summary, None, (summary,))


def test_capacity_from_a_descending_sweep_is_the_highest_rate_meeting_the_slo():
    # read in the given order, a sweep from 5 down to 1 req/s (both meeting the SLO) said capacity 1
    cfg = load_preset("chat-h100-llama8b")
    meets = [_point(v, True) for v in (1.0, 3.0, 5.0)]
    assert capacity_from_sweep(meets[::-1], cfg) == capacity_from_sweep(meets, cfg) == 5.0
    with_miss = [_point(1.0, True), _point(3.0, True), _point(5.0, False)]
    assert capacity_from_sweep(with_miss[::-1], cfg) == capacity_from_sweep(with_miss, cfg) == 3.0


def _help(argv: list[str], capsys) -> str:
    with contextlib.suppress(SystemExit):
        main([*argv, "--help"])
    return " ".join(capsys.readouterr().out.split())


def test_sweep_help_names_every_knob_with_its_unit(capsys):
    # the help listed 8 of the 10 knobs (replicas and prefill_instances were missing) and no unit for --start
    text = _help(["sweep"], capsys)
    assert all(f"{knob} = {label}" in text for knob, (_, label, _) in SWEEP_KNOBS.items())
    assert "--start START first value, in the knob's unit" in text


def test_sweep_help_says_how_far_past_saturation_a_default_rate_sweep_runs(capsys, monkeypatch):
    # ("past 1.1x the saturation rate" was typed out beside sweep.RATE_SWEEP_PAST_SATURATION)
    from sim_core import sweep

    monkeypatch.setattr(sweep, "RATE_SWEEP_PAST_SATURATION", 1.3)
    assert "(the rate: past 1.3x the saturation rate" in _help(["sweep"], capsys)


def test_run_help_names_every_file_out_writes(capsys, tmp_path):
    # (a deployment's run also writes instances.csv, which the help left out)
    text = _help(["run"], capsys)
    assert main(["run", "chat-h100-llama8b", "--set", "workload.num_requests=8", "--set", "deployment.replicas=2",
                 "--out", str(tmp_path)]) == 0  # fmt: skip
    assert all(p.name in text for p in tmp_path.iterdir()) and len(list(tmp_path.iterdir())) == 5


def test_bench_options_are_one_definition(capsys):
    # `python -m sim_core bench` restated bench.main's options (and said less: no unit, no CI note)
    from sim_core.bench import main as bench_main

    with contextlib.suppress(SystemExit):
        bench_main(["--help"])
    own = " ".join(capsys.readouterr().out.split())
    options = lambda text: text.split("options:")[1]  # noqa: E731
    assert options(_help(["bench"], capsys)) == options(own)


def _bounded_fields(model, prefix=()):
    """(location, FieldInfo) of every numeric config field with a declared bound, nested sections included."""
    from pydantic import BaseModel

    for name, info in model.model_fields.items():
        ann = info.annotation
        sub = next((a for a in getattr(ann, "__args__", (ann,)) if isinstance(a, type) and issubclass(a, BaseModel)), None)
        if sub is not None:
            yield from _bounded_fields(sub, (*prefix, name))
        elif any(getattr(m, a, None) is not None for m in info.metadata for a in ("ge", "gt", "le", "lt")):
            yield (*prefix, name), info


def test_every_allowed_range_states_the_exact_bounds():
    # ':g' printed 1048576 as 1.04858e+06 and the largest seed as 4.29497e+09: numbers that are not the bounds
    import re

    from sim_core.config import SimConfig, allowed_range

    checked = 0
    for loc, info in _bounded_fields(SimConfig):
        bounds = sorted(float(getattr(m, a)) for m in info.metadata for a in ("ge", "gt", "le", "lt")
                        if getattr(m, a, None) is not None)  # fmt: skip
        stated = sorted(float(x) for x in re.findall(r"[<>]=? (\S+)", allowed_range(loc)))
        assert stated == bounds, (loc, allowed_range(loc))
        checked += 1
    assert checked > 80



def test_field_bounds_are_the_declared_bounds_allowed_range_states():
    # the UI's number boxes read field_bounds; the CLI's messages allowed_range: one reading of the model's limits
    from sim_core.config import SimConfig, field_bounds

    for loc, info in _bounded_fields(SimConfig):
        lo, hi = field_bounds(loc)
        declared = {a: getattr(m, a) for m in info.metadata for a in ("ge", "gt", "le", "lt") if getattr(m, a, None) is not None}
        assert lo == declared.get("ge", declared.get("gt")) and hi == declared.get("le", declared.get("lt")), loc
    assert field_bounds(("slo", "ttft_s")) == (0, 3600)  # gt 0: the strict bound's value (validation names the strictness)
    assert field_bounds(("no_such_field",)) == (None, None)


def test_setting_one_field_of_a_pool_keeps_the_rest_of_what_the_pool_ran():
    # A pool without its own scheduler/hardware runs the top-level one; --set ...decode.scheduler.max_num_seqs=64
    # filled the pool with SchedulerConfig's defaults (vLLM V1, watermark) and ...prefill.hardware.memory_gib=40
    # with HardwareSpec's (an H100) on a TensorRT-LLM A100 preset
    from sim_core.cli import apply_overrides
    from sim_core.config import pool_config

    cfg = load_preset("engine-tensorrt-llm-max-utilization")
    out = apply_overrides(cfg, ["deployment.disaggregation.decode.scheduler.max_num_seqs=64",
                                "deployment.disaggregation.prefill.hardware.memory_gib=40"])  # fmt: skip
    decode, prefill = pool_config(out, "decode"), pool_config(out, "prefill")
    assert decode.scheduler == cfg.scheduler.model_copy(update={"max_num_seqs": 64})
    assert prefill.hardware == cfg.hardware.model_copy(update={"memory_gib": 40.0})
    assert prefill.scheduler == cfg.scheduler and decode.hardware == cfg.hardware


ONE_TOKEN = ["--set", 'workload.prompt_tokens={"dist": "fixed", "mean": 1, "min": 1, "max": 1}',
             "--set", 'workload.output_tokens={"dist": "fixed", "mean": 1, "min": 1, "max": 1}']  # fmt: skip


def test_points_whose_percentiles_are_undefined_come_back_from_a_worker():
    # Every output is 1 token, so TPOT and ITL are NaN. The task payload went through model_dump_json (NaN -> null),
    # which Summary refuses: sweep, capacity and plan ended in a pydantic ValidationError traceback.
    from sim_core.backend import LocalBackend
    from sim_core.cli import apply_overrides
    from sim_core.sweep import run_sweep

    cfg = apply_overrides(load_preset("chat-h100-llama8b"), [ONE_TOKEN[1], ONE_TOKEN[3], "workload.num_requests=20"])
    (pt,) = run_sweep(cfg, "rate", [5.0], backend=LocalBackend(1))
    assert pt.error is None and pt.summary.num_finished == 20
    assert pt.summary.tpot_p99_s != pt.summary.tpot_p99_s  # NaN, as in this process's own summary


def test_a_capacity_at_the_search_ceiling_is_printed_as_a_lower_bound(capsys):
    # it printed "capacity 5,000.00-5,000.00 req/s" as if the search had found where the objective fails
    assert main(["capacity", "chat-h100-llama8b", "--seeds", "1", "--scale", "0.01", *ONE_TOKEN, *FAST]) == 0
    out = capsys.readouterr().out
    assert "capacity >= 5,000.00 req/s" in out and "a lower bound" in out


def test_capacity_says_the_bisections_tolerance_it_ran_with(capsys, monkeypatch):
    # ("bisection to 1 %" was typed out beside find_capacities' rel_tol default of 0.01)
    from sim_core import sweep

    searched, interval = [], sweep.capacity_interval
    monkeypatch.setattr(sweep, "CAPACITY_REL_TOL", 0.05)
    monkeypatch.setattr(sweep, "capacity_interval", lambda *a, **kw: searched.append(kw["rel_tol"]) or interval(*a, **kw))
    assert main(["capacity", "chat-h100-llama8b", "--seeds", "1", "--scale", "0.02", *FAST]) == 0
    assert "bisection to 5 %)" in capsys.readouterr().out and searched == [0.05]


def test_capacity_says_how_long_its_probes_ran(capsys, monkeypatch):
    # ("runs of N+ requests" named seed 0's last probe; the search's probes at lower rates ran fewer requests)
    from sim_core import sweep

    probed, interval = [], sweep.capacity_interval
    monkeypatch.setattr(sweep, "capacity_interval", lambda *a, **kw: probed.append(interval(*a, **kw)) or probed[-1])
    assert main(["capacity", "chat-h100-llama8b", "--seeds", "2", "--scale", "0.2", *FAST]) == 0
    sizes = [s.num_requests for cap in probed[0][2] for _, s in cap.probes]
    assert min(sizes) < max(sizes) and f"runs of {min(sizes):,}-{max(sizes):,} requests" in capsys.readouterr().out


def test_a_sweep_whose_highest_rate_meets_the_objective_prints_a_lower_bound(capsys):
    # it printed "capacity ...: 20 req/s" when 20 req/s was only the last rate tried
    assert main(["sweep", "chat-h100-llama8b", "--start", "10", "--stop", "20", "--num", "2", *ONE_TOKEN, *FAST]) == 0
    assert "steady-state window): >= 20 req/s (a swept rate" in capsys.readouterr().out


def test_summary_json_written_by_run_out_reads_back_as_the_summary(tmp_path):
    # NaN metrics are written as null; reading summary.json back as a Summary refused every null
    from sim_core.result import Summary

    assert main(["run", "chat-h100-llama8b", "--set", "workload.num_requests=5", *ONE_TOKEN, "--out", str(tmp_path)]) == 0
    text = (tmp_path / "summary.json").read_text()
    back = Summary.model_validate_json(text)
    assert back.model_dump_json(indent=2) + "\n" == text and back.tpot_p99_s != back.tpot_p99_s  # NaN again


@cases(60)
@given(option=st.sampled_from(["--tp", "--token-budgets", "--max-batches", "--engines", "--gpus", "--price"]),
       text=st.text(alphabet=st.sampled_from("0123456789,.-=+ ex\u0661\u00b2"), max_size=12))  # fmt: skip
def test_any_plan_list_text_gives_a_message_not_a_traceback(option, text):
    # --rate 0 keeps every case from searching: a list that parses is then refused with the rate
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = _exit_code(["plan", "chat-h100-llama8b", "--rate", "0", option, text, *FAST])
    assert code == 2 and "Traceback" not in err.getvalue() and err.getvalue().strip()


def test_presets_all_describes_every_preset(capsys):
    # hardware and model presets have no description field: `presets --all` printed their names on blank lines
    assert main(["presets", "--all"]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("  ")]
    assert rows and all(len(line.split()) > 1 for line in rows)
    assert any(line.split()[0] == "h100-sxm" and "H100 SXM - NVIDIA H100 datasheet" in line for line in rows)


def test_the_out_of_memory_message_states_every_term_of_its_arithmetic(capsys):
    # 0.9 x 17.8 GiB - 14.96 - 0.72 = 0.34 GiB by the message's own numbers, yet it said 0.00: the 0.5 GiB the CUDA
    # context takes was not among them (17.8 GiB then; 17.7 since the vLLM V1 preset's workspace is V1's own, 0.56 GiB)
    assert main(["run", "chat-h100-llama8b", "--set", "hardware.memory_gib=17.7"]) == 2
    assert "17.7 GiB per GPU less 0.5 GiB for the CUDA context" in capsys.readouterr().err


def test_percentile_and_attainment_together_are_refused_not_one_dropped(capsys):
    # --attainment silently replaced the --percentile rule given beside it
    assert main(["capacity", "chat-h100-llama8b", "--percentile", "50", "--attainment", "0.9", *FAST]) == 2
    assert "--percentile 50 and --attainment 0.9 are two rules" in capsys.readouterr().err


def test_a_ray_address_that_cannot_be_used_is_a_message(capsys, monkeypatch):
    # ray.init's error (here: no running cluster for 'auto') was a traceback; a stand-in module plays Ray, so the
    # test needs no Ray and no network
    import sys
    import types

    def no_cluster(**_kw):
        raise ConnectionError("Could not find any running Ray instance")

    monkeypatch.setitem(sys.modules, "ray", types.SimpleNamespace(is_initialized=lambda: False, init=no_cluster))
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert main(["sweep", "chat-h100-llama8b", "--start", "1", "--stop", "2", "--no-cache", "--ray", "auto"]) == 2
    assert "cannot start or reach Ray at 'auto' (--ray or $RAY_ADDRESS): ConnectionError" in capsys.readouterr().err


def test_ctrl_c_during_a_run_exits_130_with_one_line(capsys, monkeypatch):
    # a KeyboardInterrupt from deep in a tick printed a traceback
    import sim_core.cli as cli

    def interrupted(_cfg):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "run_simulation", interrupted)
    assert main(["run", "chat-h100-llama8b"]) == 130
    err = capsys.readouterr().err
    assert err == "interrupted\n"


def test_set_num_requests_with_a_trace_file_replays_that_many_rows(capsys):
    # with_trace set num_requests to the trace's length afterwards: --set workload.num_requests=5 replayed all 240
    import json
    from pathlib import Path

    sample = Path(__file__).resolve().parents[2] / "presets" / "traces" / "mooncake-sample.jsonl"
    assert main(["run", "chat-h100-llama8b", "--trace", str(sample), "--set", "workload.num_requests=5", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["num_requests"] == 5
    assert main(["run", "chat-h100-llama8b", "--trace", str(sample), "--set", "workload.num_requests=500"]) == 2
    assert "workload.num_requests = 500: exceeds the trace's 240 rows; allowed: >= 1 and <= 240" in capsys.readouterr().err


def test_set_with_a_trace_file_is_checked_against_the_trace_not_the_replaced_workload(tmp_path, capsys):
    """--set model.max_model_len=4096 with --trace: the preset's generated workload (prompts up to 8192 tokens), which
    the trace replaces, refused it ('8192 prompt + 2048 output = 10240 tokens'); the trace's rows fit."""
    import json

    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n0,4000,10\n0.5,100,2000\n")
    args = ["run", "chat-h100-llama8b", "--trace", str(trace), "--set", "model.max_model_len=4096", "--json"]
    assert main(args) == 0
    assert json.loads(capsys.readouterr().out)["num_finished"] == 2
    assert main(args[:-2] + ["model.max_model_len=4000"]) == 2  # a row that does not fit is still named
    assert "csv line 2: prompt_tokens 4000 + output_tokens 10 = 4010 tokens" in capsys.readouterr().err  # (the file's line)
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n0.5,4000,10\n0,100,20\n")  # replayed sorted: the 2nd request
    assert main(args[:-2] + ["model.max_model_len=4000"]) == 2
    assert "csv line 2: prompt_tokens 4000 + output_tokens 10 = 4010 tokens" in capsys.readouterr().err  # (it said "trace row 2")
    assert main(args[:-1] + ["--set", "seed=-1"]) == 2  # a bad --set is still named as such
    assert "seed" in capsys.readouterr().err


@pytest.mark.parametrize("first, second", [("1.5", "2.5"), ("2", "2")])
def test_a_gpu_priced_twice_is_refused_naming_the_option_and_the_gpu(capsys, first, second):
    # `--price h100-sxm=1.5 --price h100-sxm=2.5` planned silently at the last price (a typo in a long command
    # line went unnoticed); the same price twice is refused too: one price per GPU, stated once
    assert main([*PLAN, "--price", f"h100-sxm={first}", "--price", f"h100-sxm={second}"]) == 2
    captured = capsys.readouterr()
    assert "--price" in captured.err and "'h100-sxm'" in captured.err and "twice" in captured.err
    assert "Traceback" not in captured.err and "candidates" not in captured.out  # refused before any search


TRACE_NUMBER_OPTIONS = {"--trace-time-scale": "> 0 and <= 10000", "--trace-start-s": ">= 0 and <= 1e+09",
                        "--trace-end-s": "> 0 and <= 1e+09", "--trace-max-requests": ">= 1 and <= 100000"}  # fmt: skip


@cases(30)
@given(option=st.sampled_from(sorted(TRACE_NUMBER_OPTIONS)),
       value=st.one_of(st.sampled_from(["nan", "inf", "-inf", "-1", "0", "1e300", "-0"]), st.integers(-(10**12), 0).map(str),
                       st.floats(allow_nan=True, allow_infinity=True).map(repr)))  # fmt: skip
def test_a_bad_trace_option_names_the_option_as_typed_its_value_and_range(tmp_path_factory, option, value):
    # `run --trace f --trace-max-requests -5` said "max_requests = -5: Input should be greater than or equal to 1": not the
    # option the user typed, and no range (the message looked the bounds up in SimConfig, which has no such field)
    trace = tmp_path_factory.mktemp("t") / "t.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n0,10,5\n")
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = _exit_code(["run", "chat-h100-llama8b", "--trace", str(trace), f"{option}={value}"])  # (= : a value "-inf")
    if code == 0:
        return  # a value in range (a float option's 1e300 is not, but "0" is a start_s)
    msg = err.getvalue()
    assert code == 2 and "Traceback" not in msg, msg
    if "invalid" in msg and "value:" in msg:  # argparse's own (--trace-max-requests 1.5): names the option and value
        assert option in msg, msg
        return
    if "Invalid trace options" not in msg:  # a value in range that leaves no request (--trace-start-s=1e300)
        assert msg.startswith("error: t.csv: "), msg
        return
    assert f"{option} = " in msg and f"allowed: {TRACE_NUMBER_OPTIONS[option]}" in msg, msg


def test_a_pools_out_of_memory_advice_names_the_pools_own_fields(capsys):
    # "prefill pool: Out of memory ..." advised the top-level hardware.num_gpus and (a pool with its own scheduler) the
    # top-level scheduler.max_num_batched_tokens, which that pool's instances do not read
    pool = "deployment.disaggregation.prefill"
    # (12.7 GiB holds the weights, 11.96 GiB per GPU, but not the workspace and one block)
    assert main(["run", "cluster-distserve-opt13b-3xa100-p2d1", "--set", f"{pool}.hardware.memory_gib=12.7",
                 "--set", f"{pool}.scheduler.max_num_batched_tokens=4096"]) == 2  # fmt: skip
    err = capsys.readouterr().err
    assert err.startswith("error: prefill pool: Out of memory"), err
    assert f"({pool}.hardware.memory_gib = 12.7 GiB per GPU less 0.5 GiB" in err, err
    assert f"grows with {pool}.scheduler.max_num_batched_tokens (4096)" in err, err
    assert f"add GPUs ({pool}.tensor_parallel, now 2)" in err and f"more memory ({pool}.hardware.memory_gib)" in err, err
    assert "hardware.num_gpus" not in err, err
    # where the weights alone do not fit, the advice names the pool's fields too
    assert main(["run", "cluster-distserve-opt13b-3xa100-p2d1", "--set", f"{pool}.hardware.memory_gib=1"]) == 2
    err = capsys.readouterr().err
    assert "the weights alone, 11.96 GiB per GPU, do not fit" in err and f"more GPUs ({pool}.tensor_parallel, now 2)" in err, err
    assert "hardware.num_gpus" not in err, err


@pytest.mark.parametrize("command,option,root,loc", [
    ("run", "--trace-start-s", "TraceOptions", ("start_s",)), ("run", "--trace-max-requests", "TraceOptions", ("max_requests",)),
    ("run", "--trace-time-scale", "TraceOptions", ("time_scale",)), ("plan", "--rate", "PlanSpec", ("target_rate_per_s",)),
    ("plan", "--top", "PlanSpec", ("num_results",)), ("plan", "--price", "PlanSpec", ("prices_usd_per_gpu_hour", "x")),
])  # fmt: skip
def test_an_options_help_names_the_range_its_model_checks(capsys, command, option, root, loc):
    # the help named no range where the model refuses values out of one (--trace-max-requests 1 to 100,000, --rate, --top)
    from sim_core.config import allowed_range
    from sim_core.planner import PlanSpec
    from sim_core.traces import TraceOptions

    with pytest.raises(SystemExit):
        main([command, "--help"])
    text = " ".join(capsys.readouterr().out.split())
    rng = allowed_range(loc, {"TraceOptions": TraceOptions, "PlanSpec": PlanSpec}[root])
    entry = text.split("options:", 1)[1].split(f" {option} ", 1)[1][:160]  # (its entry, not the usage line)
    assert rng and rng in entry, entry
