"""Hostile trace files (sim_core/traces.py): every one gives one TraceError naming the format and line, or a
refusal before the file is opened; none raises another exception, hangs or quotes megabytes back."""

from __future__ import annotations

import os
import threading

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sim_core import PresetError, config_from_dict
from sim_core.cli import main
from sim_core.traces import TraceError, TraceOptions, load_trace, parse_trace
from tests.strategies import cases

AZURE_HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens\n"


def _load_in_time(path, seconds: float = 10.0):
    """load_trace(path) on a daemon thread: (outcome, error); 'hang' if it is still reading after `seconds`."""
    out: dict = {}

    def go():
        try:
            load_trace(path)
            out["r"] = ("ok", None)
        except TraceError as err:
            out["r"] = ("error", err)

    t = threading.Thread(target=go, daemon=True)
    t.start()
    t.join(seconds)
    return out.get("r", ("hang", None))


def test_a_device_or_fifo_is_refused_before_it_is_opened(tmp_path):
    # /dev/zero was read forever (one endless line, memory without bound) and a FIFO blocked `run --trace` waiting
    # for a writer. /dev/null stands for the devices here: before the fix it was read (as an empty trace), and a
    # test must not read /dev/zero unguarded.
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for path in ("/dev/null", fifo):
        outcome, err = _load_in_time(path)
        assert outcome == "error", outcome
        assert "not a regular file" in str(err)


def test_cli_refuses_a_device_as_trace_with_exit_2(capsys):
    assert main(["run", "chat-h100-llama8b", "--trace", "/dev/null"]) == 2
    err = capsys.readouterr().err
    assert "not a regular file" in err and "Traceback" not in err


@pytest.mark.parametrize("key", ["timestamp", "input_length", "output_length"])
def test_a_mooncake_integer_too_large_for_a_float_is_named(key):
    # math.isfinite(10**400) raised OverflowError: a traceback from the CLI and the app's upload
    row = {"timestamp": 0, "input_length": 10, "output_length": 5} | {key: "HUGE"}
    text = str(row).replace("'", '"').replace('"HUGE"', str(10**400))
    with pytest.raises(TraceError, match=rf"mooncake line 1: {key} is too large; it must be below 1e300"):
        parse_trace(text)


@pytest.mark.parametrize("fraction", ["\u00b2", "\u0661\u0662", "1" * 5000, "1" * 19],
                         ids=["superscript", "arabic-indic", "5000-digits", "19-digits"])
def test_an_azure_fraction_of_a_second_must_be_a_few_ascii_digits(fraction):
    # '²' passed str.isdigit() and int() raised ValueError; 5,000 digits hit int()'s digit limit (ValueError);
    # Arabic-Indic digits were read as a time (".١٢" as 0.12 s) where every other number must be ASCII
    text = AZURE_HEADER + f"2023-11-16 18:15:46.{fraction},10,5\n"
    with pytest.raises(TraceError, match="azure-2023 line 2: TIMESTAMP = .* is not a date-time") as info:
        parse_trace(text)
    assert len(str(info.value)) < 200  # the cell is quoted cut short, not all 5,000 digits


def test_an_azure_fraction_of_eighteen_digits_still_reads():
    text = AZURE_HEADER + "2023-11-16 18:15:46.0,10,5\n2023-11-16 18:15:47.500000000000000000,10,5\n"
    assert parse_trace(text).trace.arrival_s == [0.0, 1.5]


@pytest.mark.parametrize("column", [0, 1, 2])
def test_a_long_bad_csv_cell_is_quoted_cut_short(column):
    cells = ["0", "10", "5"]
    cells[column] = "x" * 100_000
    with pytest.raises(TraceError, match="csv line 2") as info:
        parse_trace("arrival_s,prompt_tokens,output_tokens\n" + ",".join(cells) + "\n")
    assert len(str(info.value)) < 200


CSV_HEADERS = {"csv": "arrival_s,prompt_tokens,output_tokens", "azure-2023": AZURE_HEADER.strip(),
               "burstgpt": "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type"}  # fmt: skip
CSV_ROWS = {"csv": "0,10,5", "azure-2023": "2023-11-16 18:15:46.0,10,5", "burstgpt": "0,ChatGPT,10,5,15,API log"}
CSV_FIELD_LIMIT = 131_072  # the csv module's default field_size_limit()


@cases(30)
@given(fmt=st.sampled_from(sorted(CSV_HEADERS)), line=st.integers(1, 3), column=st.integers(0, 5),
       extra=st.integers(1, 50_000), quoted=st.booleans(), named=st.booleans())  # fmt: skip
def test_a_csv_cell_over_the_field_limit_is_a_trace_error_naming_the_line(fmt, line, column, extra, quoted, named):
    # a cell of more than 131,072 characters raised _csv.Error (no ValueError): a traceback from `run --trace` and
    # from the app's upload callback, in the header (format detection) as in a row
    from sim_core.traces import TraceOptions

    lines = [CSV_HEADERS[fmt], CSV_ROWS[fmt], CSV_ROWS[fmt]]
    cells = lines[line - 1].split(",")
    long_cell = "x" * (CSV_FIELD_LIMIT + extra)
    cells[column % len(cells)] = f'"{long_cell}"' if quoted else long_cell
    lines[line - 1] = ",".join(cells)
    with pytest.raises(TraceError, match=rf"line {line}: not readable as CSV \(field larger than field limit") as info:
        parse_trace("\n".join(lines) + "\n", TraceOptions(format=fmt) if named else None, max_bytes=10**6)
    assert len(str(info.value)) < 300


def test_cli_names_a_csv_cell_over_the_field_limit_with_exit_2(tmp_path, capsys):
    path = tmp_path / "long.csv"
    path.write_text("arrival_s,prompt_tokens,output_tokens\n0,10,5\n" + "x" * 200_000 + "\n")
    assert main(["run", "chat-h100-llama8b", "--trace", str(path)]) == 2
    err = capsys.readouterr().err
    assert "csv line 3: not readable as CSV" in err and "Traceback" not in err


def test_trace_rows_of_bad_block_hash_ids_are_numbered_from_one():
    # the other trace checks number rows from 1 (the first request); these two said row 0 for the first
    trace = {"arrival_s": [0.0, 1.0], "prompt_tokens": [512, 512], "output_tokens": [3, 3], "block_hash_ids": [[1], [2, 3]]}
    with pytest.raises(PresetError, match="trace row 2: 2 block hash ids for 512 prompt tokens"):
        config_from_dict({"workload": {"num_requests": 2, "trace": trace}})
    trace["block_hash_ids"] = [[-1], [2]]
    with pytest.raises(PresetError, match="trace row 1: block hash ids must be >= 0"):
        config_from_dict({"workload": {"num_requests": 2, "trace": trace}})


JSON_VALUES = st.one_of(st.integers(-(10**400), 10**400), st.floats(allow_nan=True), st.booleans(), st.none(),
                        st.text(max_size=8), st.lists(st.integers(-3, 2**64), max_size=3))  # fmt: skip


@cases(150)
@given(rows=st.lists(st.dictionaries(st.sampled_from(["timestamp", "input_length", "output_length", "hash_ids", "x"]),
                                     JSON_VALUES, max_size=5), min_size=1, max_size=4))  # fmt: skip
def test_mooncake_rows_of_any_json_values_give_a_trace_or_one_trace_error(rows):
    import json

    text = "\n".join(json.dumps(r, allow_nan=True) for r in rows)
    try:
        parse_trace(text, None)
    except TraceError as err:
        assert str(err)


@pytest.mark.parametrize("option", [{"model": "GPT-4"}, {"log_type": "API log"}])
def test_burstgpt_filters_on_another_format_are_refused_not_ignored(option):
    # the Mooncake sample replayed all 240 rows as if filtered by model
    from pathlib import Path

    from sim_core.traces import TraceOptions

    sample = Path(__file__).resolve().parents[2] / "presets" / "traces" / "mooncake-sample.jsonl"
    with pytest.raises(TraceError, match="mooncake: the model and log_type filters select BurstGPT rows"):
        load_trace(sample, TraceOptions(**option))
    burst = sample.with_name("burstgpt-sample.csv")
    assert load_trace(burst, TraceOptions(**option)).num_skipped > 0  # still a filter there


@pytest.mark.parametrize("fmt", ["csv", "mooncake"])
def test_a_trace_over_the_row_limit_is_refused_at_the_row_past_it_not_after_the_last(fmt):
    # an 8 MB upload of 1.4 million rows was read to its last row (10 s and 270 MB of the server) to be refused for
    # having more than 100,000: the refusal now comes at row 100,001, so whatever follows (here a bad row) is not read
    from sim_core.config import MAX_TRACE_ROWS

    row = "0,10,5" if fmt == "csv" else '{"timestamp": 0, "input_length": 10, "output_length": 5}'
    header = ["arrival_s,prompt_tokens,output_tokens"] if fmt == "csv" else []
    text = "\n".join([*header, *[row] * (MAX_TRACE_ROWS + 1), "not a row"]) + "\n"
    with pytest.raises(TraceError, match=rf"{fmt} line {MAX_TRACE_ROWS + 1 + len(header)}: more than 100,000 requests"):
        parse_trace(text, max_bytes=len(text))


FAILED_ROW_FORMATS = {  # a header, and a row of (prompt, output) tokens, in each format
    "csv": ("arrival_s,prompt_tokens,output_tokens\n", lambda i, p, o: f"{i},{p},{o}\n", ("prompt_tokens", "output_tokens")),
    "azure-2023": (AZURE_HEADER, lambda i, p, o: f"2023-11-16 18:15:{i:02d}.0000000,{p},{o}\n", ("ContextTokens", "GeneratedTokens")),
    "mooncake": ("", lambda i, p, o: f'{{"timestamp": {i}, "input_length": {p}, "output_length": {o}}}\n', ("input_length", "output_length")),
}  # fmt: skip


@cases(40)
@given(fmt=st.sampled_from(sorted(FAILED_ROW_FORMATS)),
       rows=st.lists(st.tuples(st.integers(0, 3), st.integers(0, 3)).filter(lambda r: 0 in r), min_size=1, max_size=6))  # fmt: skip
def test_a_trace_of_only_failed_rows_names_the_first_ones_line_columns_and_values(fmt, rows):
    # it said "no request left after skipping 1 failed rows and applying the window": which column, which value, why
    header, row, (p, o) = FAILED_ROW_FORMATS[fmt]
    text = header + "".join(row(i, *r) for i, r in enumerate(rows))
    with pytest.raises(TraceError) as err:
        parse_trace(text.encode())
    line = 1 + bool(header)
    assert str(err.value) == (f"{fmt}: no request left: {len(rows):,} of {len(rows):,} rows skipped as failed requests (0 {p} "
                              f"or {o}: the first at line {line}, {p} = {rows[0][0]}, {o} = {rows[0][1]}; allowed: >= 1)")


def test_a_trace_window_that_holds_no_row_says_its_bounds():
    text = "arrival_s,prompt_tokens,output_tokens\n0,5,5\n1,0,5\n"
    with pytest.raises(TraceError, match=r"1 of 2 rows skipped .* the others outside the window \(start_s = 5 s, end_s = none"):
        parse_trace(text.encode(), TraceOptions(start_s=5))


def test_a_csv_traces_window_is_on_its_own_clock_and_says_so():
    # (the project's csv is relative to its start already: its window counts from 0 s, and the message said "from the
    # first row", which a file whose first row is at 5 s contradicted)
    text = "arrival_s,prompt_tokens,output_tokens\n5,5,5\n6,5,5\n9,5,5\n"
    with pytest.raises(TraceError, match=r"all 3 rows are outside the window \(start_s = 0 s, end_s = 3 s, on the file's clock\)"):
        parse_trace(text.encode(), TraceOptions(end_s=3))
    assert parse_trace(text.encode(), TraceOptions(start_s=5.5)).trace.arrival_s == [0.0, 3.0]  # (6 and 9 s, from the first kept)


# Arrival times past the longest run (limits.max_sim_time_s's largest value): a 1e300 s row was read, ran until the
# time limit and only then said "the next arrives at 1e+300 s"
LATE_ROW_FORMATS = {  # a header, and a row at t seconds after the first (the column each format names)
    "csv": ("arrival_s,prompt_tokens,output_tokens\n", lambda t: f"{t!r},10,5\n", "arrival_s"),
    "burstgpt": ("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n",
                 lambda t: f"{t!r},ChatGPT,10,5,15,Conversation log\n", "Timestamp"),
    "mooncake": ("", lambda t: f'{{"timestamp": {t * 1000!r}, "input_length": 10, "output_length": 5}}\n', "timestamp"),
}  # fmt: skip


@cases(40)
@given(fmt=st.sampled_from(sorted(LATE_ROW_FORMATS)), early=st.integers(0, 4),
       late_s=st.one_of(st.floats(1.0001e7, 1e300), st.sampled_from([1e7 + 1, 1e300])), scale=st.sampled_from([1.0, 0.5]))  # fmt: skip
def test_a_row_arriving_past_the_longest_run_is_refused_naming_line_column_value_and_range(fmt, early, late_s, scale):
    header, row, col = LATE_ROW_FORMATS[fmt]
    text = header + row(0.0) + "".join(row(float(i + 1)) for i in range(early)) + row(late_s / scale)
    with pytest.raises(TraceError) as err:
        parse_trace(text.encode(), TraceOptions(time_scale=scale))
    msg, line = str(err.value), 2 + early + bool(header)
    assert msg.startswith(f"{fmt} line {line}: {col} ") and "outside [0, 10,000,000] s" in msg, msg
    assert "limits.max_sim_time_s" in msg and f"{late_s:g}"[:4] in msg, msg


def test_a_row_at_the_longest_run_is_replayed_and_one_past_it_is_refused():
    text = "arrival_s,prompt_tokens,output_tokens\n0,10,5\n10000000,10,5\n"
    assert parse_trace(text).trace.arrival_s == [0.0, 1e7]
    with pytest.raises(TraceError, match=r"^csv line 3: arrival_s = 1e\+07 s is outside \[0, 10,000,000\] s: "):
        parse_trace(text.replace("10000000", "10000000.5"))
    with pytest.raises(TraceError, match=r"csv line 3: arrival_s puts this request at 2e\+07 s into the replay .* time_scale 2"):
        parse_trace(text, TraceOptions(time_scale=2))


@cases(30)
@given(late_s=st.one_of(st.floats(1.0001e7, 1e308), st.sampled_from([1e7 + 1, 1.7976931348623157e308])))
def test_a_configs_trace_arriving_past_the_longest_run_names_the_row_value_and_range(late_s):
    # a link's or a file's config carries its trace as lists: the Trace model holds the same bound
    data = {"workload": {"num_requests": 2, "trace": {"arrival_s": [0.0, late_s], "prompt_tokens": [10, 10], "output_tokens": [5, 5]}}}
    with pytest.raises(PresetError) as err:
        config_from_dict(data)
    assert f"trace row 2: arrival_s = {late_s} s is outside [0, 10,000,000] s" in str(err.value)


def test_a_csv_of_clock_times_is_refused_saying_the_column_counts_from_the_start():
    # arrival_s in Unix seconds ran no tick until the time limit; it is refused at its first row, saying what the column is
    with pytest.raises(TraceError, match=r"^csv line 2: arrival_s = 1\.7e\+09 s is outside .*; arrival_s counts seconds from "
                       r"the start of the replay, not a clock time$"):
        parse_trace("arrival_s,prompt_tokens,output_tokens\n1700000000,10,5\n1700000001,10,5\n")


def test_cli_refuses_a_trace_row_past_the_longest_run_before_running(tmp_path, capsys):
    path = tmp_path / "late.csv"
    path.write_text("arrival_s,prompt_tokens,output_tokens\n0,10,5\n1e300,10,5\n")
    assert main(["run", "chat-h100-llama8b", "--trace", str(path)]) == 2
    out, err = capsys.readouterr()
    assert "csv line 3: arrival_s = 1e+300 s is outside [0, 10,000,000] s" in err and "Traceback" not in err
    assert "stopped at" not in out + err  # (it ran to the time limit and said so)


@pytest.mark.parametrize("digits", [400, 4301, 6000])
def test_a_mooncake_integer_of_thousands_of_digits_is_named_not_a_traceback(digits):
    # past 4,300 digits json.loads itself raised ValueError (int() of the text): a traceback from the CLI and the upload
    text = '{"timestamp": 0, "input_length": ' + "9" * digits + ', "output_length": 5}'
    with pytest.raises(TraceError, match="mooncake line 1: input_length is too large; it must be below 1e300"):
        parse_trace(text)
    hashes = '{"timestamp": 0, "input_length": 10, "output_length": 5, "hash_ids": [' + "9" * digits + "]}"
    with pytest.raises(TraceError, match="hash_ids must be a list of non-negative integers"):
        parse_trace(hashes)
