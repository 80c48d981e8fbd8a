"""Edge and bad arguments of `python -m sim_core run / sweep / capacity / plan`: exit 2 with one message
naming the option, before any simulation (no traceback, no option silently ignored)."""

from __future__ import annotations

import pytest

from sim_core import PresetError, load_preset
from sim_core.cli import main
from sim_core.sweep import at_rate

FAST = ["--no-cache", "--workers", "1"]


@pytest.mark.parametrize("argv, words", [
    (["sweep", "chat-h100-llama8b", "--start", "nan", "--stop", "1"], "--start = nan: must be a finite number"),
    (["sweep", "chat-h100-llama8b", "--start", "1", "--stop", "inf"], "--stop = inf: must be a finite number"),
    (["sweep", "chat-h100-llama8b", "--start", "1", "--stop", "2", "--seeds", "0"], "--seeds = 0: must be >= 1"),
    (["sweep", "chat-h100-llama8b", "--start", "1", "--stop", "2", "--num", "0"], "--num = 0: must be >= 1"),
    (["sweep", "chat-h100-llama8b", "--start", "1", "--stop", "2", "--attainment", "2"], "attainment = 2.0"),
    (["sweep", "chat-h100-llama8b", "--start", "5", "--stop", "2"], "--start (5) must be below --stop (2)"),
    (["capacity", "chat-h100-llama8b", "--seeds", "0"], "--seeds = 0: must be >= 1"),
    (["capacity", "chat-h100-llama8b", "--scale", "nan"], "--scale = nan: must be a finite number"),
    (["capacity", "chat-h100-llama8b", "--scale", "-1"], "--scale = -1.0: must be > 0"),
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
