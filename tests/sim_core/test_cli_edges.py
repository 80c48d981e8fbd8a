"""Edge and bad arguments of `python -m sim_core run / sweep / capacity / plan`: exit 2 with one message
naming the option, before any simulation (no traceback, no option silently ignored)."""

from __future__ import annotations

import contextlib
import io

import pytest
from hypothesis import given
from hypothesis import strategies as hs

from sim_core import PresetError, load_preset
from sim_core.cli import main
from sim_core.sweep import SWEEP_KNOBS, at_rate, check_range, knob_bounds
from tests.strategies import cases

FAST = ["--no-cache", "--workers", "1"]


@pytest.mark.parametrize("argv, words", [
    (["sweep", "chat-h100-llama8b", "--start", "nan", "--stop", "1"], "--start = nan: must be a finite number"),
    (["sweep", "chat-h100-llama8b", "--start", "1", "--stop", "inf"], "--stop = inf: must be a finite number"),
    (["sweep", "chat-h100-llama8b", "--start", "1", "--stop", "2", "--seeds", "0"], "--seeds = 0: must be >= 1"),
    (["sweep", "chat-h100-llama8b", "--start", "1", "--stop", "2", "--num", "0"], "--num = 0: must be >= 1"),
    (["sweep", "chat-h100-llama8b", "--start", "1", "--stop", "2", "--attainment", "2"], "attainment = 2.0"),
    (["sweep", "chat-h100-llama8b", "--start", "5", "--stop", "2"], "--start = 5 must be below --stop = 2"),
    # (equal ends: it said only "must be below"; one value is a run, and the message says so)
    (["sweep", "chat-h100-llama8b", "--start", "3", "--stop", "3", "--num", "1"],
     "--start = 3 must be below --stop = 3: a sweep runs a range of rate; one value is a single run with it set"),
    (["capacity", "chat-h100-llama8b", "--seeds", "0"], "--seeds = 0: must be >= 1"),
    (["capacity", "chat-h100-llama8b", "--scale", "nan"], "--scale = nan: must be a finite number"),
    (["capacity", "chat-h100-llama8b", "--scale", "-1"], "--scale = -1: must be 0.01 to 100"),
    (["capacity", "chat-h100-llama8b", "--attainment", "nan"], "attainment = nan"),
    (["plan", "chat-h100-llama8b", "--rate", "1", "--attainment", "0"], "attainment = 0.0"),
])  # fmt: skip
def test_bad_capacity_options_exit_2_naming_the_option(capsys, argv, words):
    # each was a traceback: ZeroDivisionError/ValueError from int(nan), min() of no seeds, pydantic's ValidationError
    assert main(argv + FAST) == 2
    err = capsys.readouterr().err
    assert words in err and "Traceback" not in err


def test_a_swept_rate_of_zero_is_a_point_error_not_a_traceback():
    with pytest.raises(PresetError, match="rate_per_s = 0: must be a finite number > 0"):
        at_rate(load_preset("chat-h100-llama8b"), 0.0)
    with pytest.raises(PresetError, match="rate_per_s = nan"):
        at_rate(load_preset("chat-h100-llama8b"), float("nan"))


@pytest.mark.parametrize("option", [["--trace-time-scale", "0.5"], ["--trace-max-requests", "3"], ["--trace-start-s", "1"],
                                    ["--trace-end-s", "9"], ["--trace-format", "mooncake"]])  # fmt: skip
def test_a_trace_option_without_a_trace_file_is_refused(capsys, option):
    # it was ignored: the trace preset replayed all 240 rows at their own rate, as if the option were not given
    assert main(["run", "trace-mooncake-h100-llama8b", *option]) == 2
    err = capsys.readouterr().err
    assert f"{option[0]}: only with --trace FILE" in err and "Traceback" not in err


SWEPT_KNOBS = [k for k in SWEEP_KNOBS if k != "prefill_instances"]  # (that one needs a disaggregated config)

def _sweep_refused(knob: str, start: float, stop: float) -> str:
    """stderr of a `sweep` of `knob` from start to stop, which must exit 2 without a traceback."""
    buf = io.StringIO()
    with contextlib.redirect_stderr(buf):
        code = main(["sweep", "chat-h100-llama8b", "--knob", knob, f"--start={start!r}", f"--stop={stop!r}", *FAST])
    err = buf.getvalue()
    assert code == 2 and "Traceback" not in err, err
    return err


@cases(40)
@given(knob=hs.sampled_from(SWEPT_KNOBS), data=hs.data(), bad_end=hs.sampled_from(["--start", "--stop"]))
def test_a_sweep_end_outside_the_knobs_range_exits_2_naming_it_before_any_run(knob, data, bad_end):
    # --stop 1e308 (rate) was a traceback (OverflowError in the steady run length); --knob num_gpus --stop 1000 or
    # kv_compression --stop 5 ran and exited 0 with an error for each point past the limit; --start -5 (rate) printed
    # "capacity: below the first rate" although 1 req/s met the SLOs. The app's link had this check, the CLI not.
    lo, hi = knob_bounds(knob)
    finite = {"allow_nan": False, "allow_infinity": False}
    bad = data.draw(hs.one_of(hs.floats(min_value=-1e308, max_value=lo, exclude_max=True, **finite),
                              hs.floats(min_value=hi, max_value=1e308, exclude_min=True, **finite)))  # fmt: skip
    err = _sweep_refused(knob, *((bad, hi) if bad_end == "--start" else (lo, bad)))
    assert f"{bad_end} = {bad:g}: {knob} must be between {lo:,.10g} and {hi:,.10g}" in err


def test_a_given_end_is_checked_before_the_other_ends_default_is_worked_out_or_announced(capsys):
    # `sweep --start -1` announced "sweeping rate from -1 to 27 (the default range: an offline run completes 21.4
    # req/s)" after that saturation run, and only then refused -1 (a review)
    assert main(["sweep", "chat-h100-llama8b", "--start", "-1", *FAST]) == 2
    out, err = capsys.readouterr()
    assert "sweeping" not in out and "--start = -1: rate must be between" in err
    assert main(["sweep", "chat-h100-llama8b", "--knob", "max_num_seqs", "--stop", "2.5", *FAST]) == 2
    out, err = capsys.readouterr()
    assert "sweeping" not in out and "--stop = 2.5: max_num_seqs takes whole numbers" in err
    # an end in range but past the other's default: named as the default it is, and nothing announced
    assert main(["sweep", "chat-h100-llama8b", "--start", "500", *FAST]) == 2
    out, err = capsys.readouterr()
    assert "sweeping" not in out and "--start = 500 must be below the default stop = " in err


@pytest.mark.parametrize("argv", [["run", "chat-h100-llama8b", "--jsn"], ["validate", "--fitt"], ["presets", "extra"],
                                  ["sweep", "chat-h100-llama8b", "--seedz", "2"]])  # fmt: skip
def test_an_unknown_option_is_named_with_its_subcommands_usage(capsys, argv):
    # argparse reported a subcommand's unknown option with the top level's usage, which lists none of its options
    with pytest.raises(SystemExit) as stop:
        main(argv)
    err = capsys.readouterr().err
    assert stop.value.code == 2 and f"usage: python -m sim_core {argv[0]} " in err
    assert f"python -m sim_core {argv[0]}: error: unrecognized arguments: {argv[-1] if argv[0] != 'sweep' else '--seedz 2'}" in err


def test_check_range_names_the_ends_as_the_caller_calls_them():
    with pytest.raises(PresetError, match="start = 8 must be below stop = 4"):
        check_range("rate", 8, 4)
    with pytest.raises(PresetError, match=r"--stop = 1e\+308: rate must be between 1e-06 and 100,000"):
        check_range("rate", 1, 1e308, names=("--start", "--stop"))


@cases(20)
@given(value=hs.sampled_from(["nan", "-nan", "inf", "-inf", "NaN", "1e400"]),
       option=hs.sampled_from([("plan", "--rate", "--rate"), ("plan", "--price", "--price l40s"),
                               ("capacity", "--attainment", "attainment"), ("sweep", "--attainment", "attainment")]))  # fmt: skip
def test_a_non_finite_plan_or_objective_number_is_named_as_not_finite(value, option):
    # NaN was refused by the upper bound: "target_rate_per_s = nan: Input should be less than or equal to 100000"
    cmd, flag, field = option
    arg = f"{flag}=l40s={value}" if flag == "--price" else f"{flag}={value}"
    argv = [cmd, "chat-h100-llama8b", arg, *(["--rate", "1"] if cmd == "plan" and flag != "--rate" else []), *FAST]
    buf = io.StringIO()
    with contextlib.redirect_stderr(buf):
        assert main(argv) == 2
    err = buf.getvalue()
    assert f"{field} = " in err and "Input should be a finite number" in err and "Traceback" not in err, err


@pytest.mark.parametrize("process", ["offline", "closed_loop"])
@pytest.mark.parametrize("argv", [
    ["sweep", "chat-h100-llama8b", "--knob", "rate"], ["sweep", "chat-h100-llama8b", "--knob", "rate", "--start", "1", "--stop", "9"],
    ["capacity", "chat-h100-llama8b", "--seeds", "1"],
    ["plan", "chat-h100-llama8b", "--rate", "5", "--gpus", "h100-sxm", "--tp", "1", "--engines", "vllm-v1"],
])  # fmt: skip
def test_a_load_by_rate_of_arrivals_that_ignore_the_rate_exits_2_naming_the_process(capsys, argv, process):
    # offline and closed-loop arrivals do not follow workload.arrival.rate_per_s: the offline preset's rate sweep ran one
    # queue at every point ("below the first rate"), capacity said 0.00 req/s and plan "no configuration meets the SLOs"
    assert main(argv + ["--set", f"workload.arrival.process={process}"] + FAST) == 2
    err = capsys.readouterr().err
    assert f"workload.arrival.process = '{process}'" in err and "'poisson', 'gamma' or 'constant'" in err and "Traceback" not in err


def test_other_knobs_still_sweep_offline_arrivals(capsys):
    argv = ["sweep", "offline-batch-h200-llama8b", "--knob", "max_num_seqs", "--start", "64", "--stop", "128", "--num", "2",
            "--set", "workload.num_requests=40"]  # fmt: skip
    assert main(argv + FAST) == 0


def test_a_plan_that_pruned_nothing_says_none(capsys):
    # it printed "pruned: " with nothing after it
    argv = ["plan", "cluster-dynamo-llama70b-fp8-8xh100-3p1d", "--rate", "2", "--gpus", "h100-sxm", "--tp", "2", "--engines",
            "vllm-v1", "--max-replicas", "2", "--set", "workload.num_requests=60"]  # fmt: skip
    main(argv + FAST)
    out = capsys.readouterr().out
    assert "; pruned: none\n" in out, out


def test_a_sweep_of_a_knob_both_pools_set_exits_2_before_any_run(capsys, monkeypatch):
    # `sweep cluster-distserve-opt13b-3xa100-p2d1 --knob num_gpus --start 1 --stop 2` ran point 1 (the config itself)
    # and printed "error: ... no instance of this deployment runs with the top-level hardware.num_gpus" for point 2,
    # exit 0 (fuzz39)
    from sim_core import sweep

    monkeypatch.setattr(sweep, "run_sweep", lambda *a, **k: pytest.fail("ran a sweep"))
    argv = ["sweep", "cluster-distserve-opt13b-3xa100-p2d1", "--knob", "num_gpus", "--start", "1", "--stop", "2", *FAST]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "num_gpus (hardware.num_gpus): no instance of this deployment runs with it" in err and "Traceback" not in err


@pytest.mark.parametrize("argv, said", [
    (["run", ""], "an empty preset name '': give a preset"),
    (["run", "chat-h100-llama8b", "--out", ""], "--out '': empty; give a path"),
    (["run", "chat-h100-llama8b", "--trace", " "], "--trace ' ': empty; give a path"),
    (["sweep", "chat-h100-llama8b", "--start", "1", "--stop", "2", "--cache-dir", ""], "--cache-dir '': empty; give a path"),
    (["capacity", "chat-h100-llama8b", "--ray", ""], "--ray '': empty; give a ray:// address or 'auto' (or --ray alone)"),
    (["plan", "chat-h100-llama8b", "--rate", "1", "--out", ""], "--out '': empty; give a path"),
])  # fmt: skip
def test_an_empty_path_or_address_is_refused_not_read_as_not_given(capsys, monkeypatch, argv, said):
    # each was read as the option left out: `--out ''` ran and wrote nothing, `--trace ''` replayed the preset's own
    # workload, `--cache-dir ''` used the default cache, `--ray ''` ran on local processes; `run ''` said "cannot read
    # config file '.': it is a directory" (fuzz39)
    from sim_core import cli

    monkeypatch.setattr(cli, "run_simulation", lambda *a, **k: pytest.fail("ran"))
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert said in err and "Traceback" not in err, err


def test_a_cache_dir_the_cache_cannot_use_is_refused_before_any_run(capsys, tmp_path):
    # the point cache ignores what it cannot read or write (best effort): a file as --cache-dir ran every point again
    # without a word, and --cache-dir with --no-cache dropped the directory silently (fuzz39)
    file = tmp_path / "a-file"
    file.write_text("")
    sweep = ["sweep", "chat-h100-llama8b", "--start", "1", "--stop", "2", "--workers", "1"]
    assert main([*sweep, "--cache-dir", str(file)]) == 2
    assert f"--cache-dir {str(file)!r} is an existing file; give a directory" in capsys.readouterr().err
    assert main([*sweep, "--cache-dir", str(tmp_path / "c"), "--no-cache"]) == 2
    assert f"--cache-dir {str(tmp_path / 'c')!r} and --no-cache: give one" in capsys.readouterr().err


@pytest.mark.parametrize("argv, said", [
    (["sweep", "chat-h100-llama8b", "--start", "1", "--stop", "2", "--num", "1000000"], "--num = 1000000: at most 1,000 points"),
    (["sweep", "chat-h100-llama8b", "--start", "1", "--stop", "2", "--seeds", "101"], "--seeds = 101: at most 100 seeds"),
    (["capacity", "chat-h100-llama8b", "--seeds", "100000"], "--seeds = 100000: at most 100 seeds"),
])  # fmt: skip
def test_a_sweep_or_capacity_search_too_large_to_finish_is_refused_with_its_bound(capsys, monkeypatch, argv, said):
    # `sweep --num 1000000` built a million configs (minutes and gigabytes) before its first run and `capacity --seeds
    # 100000` queued 100,000 bisections: a hang, not a message (fuzz39)
    from sim_core import sweep

    monkeypatch.setattr(sweep, "run_sweep", lambda *a, **k: pytest.fail("ran a sweep"))
    monkeypatch.setattr(sweep, "capacity_interval", lambda *a, **k: pytest.fail("ran a search"))
    assert main(argv + FAST) == 2
    err = capsys.readouterr().err
    assert said in err and "Traceback" not in err, err


INTEGER_KNOBS = [k for k in SWEPT_KNOBS if SWEEP_KNOBS[k][2]]


@cases(40)
@given(knob=hs.sampled_from(INTEGER_KNOBS), data=hs.data(), bad_end=hs.sampled_from(["--start", "--stop"]))
def test_a_fractional_end_of_an_integer_knobs_sweep_exits_2_naming_knob_value_and_whole_numbers(knob, data, bad_end, monkeypatch):
    # `sweep --knob max_num_seqs --start 1.5` ran 2 (sweep_values rounds) without a word; the app's link refused 1.5 as
    # "not a whole number" without naming the knob: both now say check_range's sentence
    from sim_core import sweep

    monkeypatch.setattr(sweep, "run_sweep", lambda *a, **k: pytest.fail("ran a sweep"))
    lo, hi = knob_bounds(knob, load_preset("chat-h100-llama8b"))
    bad = data.draw(hs.floats(min_value=lo, max_value=hi, allow_nan=False).filter(lambda v: not v.is_integer()))
    err = _sweep_refused(knob, *((bad, hi) if bad_end == "--start" else (lo, bad)))
    assert f"{bad_end} = {bad:g}: {knob} takes whole numbers; give an integer such as " in err, err


@cases(40)
@given(knob=hs.sampled_from([k for k in SWEEP_KNOBS if SWEEP_KNOBS[k][2]]),
       value=hs.one_of(hs.floats(allow_nan=True, allow_infinity=True).filter(lambda v: not v.is_integer()), hs.text(max_size=5)))  # fmt: skip
def test_the_python_apis_integer_knob_refuses_what_is_not_a_whole_number_naming_the_knob(knob, value):
    # apply_knob(cfg, "prefill_instances", 2.5) ran 2 prefill instances (int()); "max_num_seqs" 4.0 was refused as
    # "Input should be a valid integer" and 2.5 the same, without saying the knob counts whole things
    from sim_core.sweep import apply_knob, whole_value

    with pytest.raises(PresetError, match=rf"^{knob} = .*: {knob} takes whole numbers"):
        whole_value(knob, value)
    cfg = load_preset("cluster-distserve-opt13b-3xa100-p2d1" if knob == "prefill_instances" else "chat-h100-llama8b")
    with pytest.raises(PresetError, match=f"{knob} takes whole numbers"):
        apply_knob(cfg, knob, value)


def test_a_whole_float_is_the_integer_knobs_value():
    from sim_core.sweep import apply_knob

    assert apply_knob(load_preset("chat-h100-llama8b"), "max_num_seqs", 4.0).scheduler.max_num_seqs == 4


def test_a_sweep_whose_points_round_says_what_they_became(capsys):
    argv = ["sweep", "chat-h100-llama8b", "--knob", "max_num_seqs", "--start", "1", "--stop", "4", "--num", "8",
            "--fixed-length", "--set", "workload.num_requests=8"]  # fmt: skip
    assert main(argv + FAST) == 0
    out = capsys.readouterr().out
    assert ("NOTE: max_num_seqs takes whole numbers: 8 evenly spaced points from 1 to 4 are rounded to 1, 2, 3, 4 "
            "(4 points: the whole numbers there, each once)") in out, out


def test_a_gpu_count_sweep_of_fewer_tp_degrees_than_points_says_so(capsys):
    # --knob num_gpus --num 4 over the default 1-2 ran 2 points without a word; and no row of a knob other than the
    # rate reads a capacity verdict (its runs keep the preset's length, too short for the keep-up rule)
    argv = ["sweep", "chat-h100-llama8b", "--knob", "num_gpus", "--num", "4", "--set", "workload.num_requests=8"]
    assert main(argv + FAST) == 0
    out = capsys.readouterr().out
    assert "NOTE: num_gpus runs the TP degrees the model allows from 1 to 2: 1, 2 (2 of the 4 points asked)" in out, out
    rows = [x.split() for x in out.splitlines() if x.strip()[:2] in ("1 ", "2 ")]
    assert len(rows) == 2 and all(r[4].startswith("-") for r in rows), rows


def test_fixed_length_on_a_sweep_of_another_knob_says_it_changes_nothing(capsys):
    argv = ["sweep", "chat-h100-llama8b", "--knob", "max_num_seqs", "--start", "8", "--stop", "16", "--num", "2",
            "--fixed-length", "--set", "workload.num_requests=8"]  # fmt: skip
    assert main(argv + FAST) == 0
    out = capsys.readouterr().out
    assert "NOTE: --fixed-length is for rate sweeps; a sweep of max_num_seqs always runs the config's 8 requests" in out
    assert main(argv[:-3] + ["--set", "workload.num_requests=8"] + FAST) == 0  # (without it: no such note)
    assert "--fixed-length" not in capsys.readouterr().out


def test_a_trace_file_that_is_not_text_is_named_once(tmp_path, capsys):
    # "garbage.json: garbage.json: not UTF-8 text (byte 0)": the CLI put the name before a message that had it
    bad = tmp_path / "garbage.json"
    bad.write_bytes(b"\xff\xfe\x00garbage")
    assert main(["run", "chat-h100-llama8b", "--trace", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "garbage.json: not UTF-8 text" in err and err.count("garbage.json") == 1, err
