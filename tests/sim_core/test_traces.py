"""Named trace formats: each sample round-trips, malformed rows are rejected with their line, options work."""

from __future__ import annotations

import csv
import json
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs

from sim_core.presets import PresetError, load_preset
from sim_core.traces import TraceError, TraceOptions, detect_format, load_trace, parse_trace, with_trace

TRACES = Path(__file__).resolve().parents[2] / "presets" / "traces"
SAMPLES = {
    "azure-2023": "azure-2023-sample.csv",
    "azure-2024": "azure-2024-sample.csv",
    "burstgpt": "burstgpt-sample.csv",
    "mooncake": "mooncake-sample.jsonl",
}


def _raw_rows(fmt: str) -> list[dict]:
    text = (TRACES / SAMPLES[fmt]).read_text()
    if fmt == "mooncake":
        return [json.loads(line) for line in text.splitlines()]
    return list(csv.DictReader(text.splitlines()))


@pytest.mark.parametrize("fmt", sorted(SAMPLES))
def test_each_sample_is_detected_and_read_row_for_row(fmt):
    raw = _raw_rows(fmt)
    loaded = load_trace(TRACES / SAMPLES[fmt])
    assert loaded.format == (fmt if fmt != "azure-2024" else "azure-2023")  # one schema, detected as one
    t = loaded.trace
    if fmt.startswith("azure"):
        prompts, outs = [int(r["ContextTokens"]) for r in raw], [int(r["GeneratedTokens"]) for r in raw]
    elif fmt == "burstgpt":
        ok = [r for r in raw if int(r["Response tokens"]) > 0]
        prompts, outs = [int(r["Request tokens"]) for r in ok], [int(r["Response tokens"]) for r in ok]
        assert loaded.num_skipped == len(raw) - len(ok) > 0  # failed requests are skipped and counted
    else:
        prompts, outs = [r["input_length"] for r in raw], [r["output_length"] for r in raw]
        assert t.block_hash_ids == [r["hash_ids"] for r in raw] and t.hash_block_tokens == 512
        assert t.arrival_s[-1] == pytest.approx((raw[-1]["timestamp"] - raw[0]["timestamp"]) / 1000)
    assert t.prompt_tokens == prompts and t.output_tokens == outs
    assert t.arrival_s[0] == 0.0 and loaded.num_rows == len(raw)


def test_azure_timestamps_keep_sub_second_precision_and_utc_offsets():
    text = "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.0392540,5,1\n2023-11-16 18:15:47.5392541,5,1\n"
    assert parse_trace(text).trace.arrival_s[1] == pytest.approx(1.5000001, abs=2e-8)
    text24 = "TIMESTAMP,ContextTokens,GeneratedTokens\n2024-05-10 00:00:59.5+00:00,5,1\n2024-05-10 02:01:00.0+02:00,5,1\n"
    assert parse_trace(text24, TraceOptions(format="azure-2024")).trace.arrival_s[1] == pytest.approx(0.5)


def _write(fmt: str, times_s: list[float], prompts: list[int], outs: list[int]) -> str:
    """Serialise rows in a named format (the inverse of the parser)."""
    if fmt == "mooncake":
        return "".join(json.dumps({"timestamp": round(t * 1000), "input_length": p, "output_length": o, "hash_ids": [0]}) + "\n"
                       for t, p, o in zip(times_s, prompts, outs))  # fmt: skip
    if fmt == "burstgpt":
        rows = [f"{t:g},GPT-4,{p},{o},{p + o},API log" for t, p, o in zip(times_s, prompts, outs)]
        return "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n" + "\n".join(rows) + "\n"
    t0 = datetime(2023, 11, 16, 18, 0, 0)
    rows = [f"{(t0 + timedelta(milliseconds=round(t * 1000))).strftime('%Y-%m-%d %H:%M:%S.%f')},{p},{o}"
            for t, p, o in zip(times_s, prompts, outs)]  # fmt: skip
    return "TIMESTAMP,ContextTokens,GeneratedTokens\n" + "\n".join(rows) + "\n"


rows_st = hs.lists(hs.tuples(hs.integers(0, 10**6), hs.integers(1, 9000), hs.integers(1, 4000)), min_size=1, max_size=30)


@settings(max_examples=40, deadline=None)
@given(rows=rows_st, fmt=hs.sampled_from(["azure-2023", "burstgpt", "mooncake"]))
def test_written_rows_round_trip(rows, fmt):
    ms = sorted(r[0] for r in rows)
    times = [m / 1000 for m in ms] if fmt != "burstgpt" else [float(m // 1000) for m in ms]
    prompts, outs = [r[1] for r in rows], [r[2] for r in rows]
    t = parse_trace(_write(fmt, times, prompts, outs), TraceOptions(format=fmt)).trace
    assert t.prompt_tokens == prompts and t.output_tokens == outs
    assert t.arrival_s == pytest.approx([x - times[0] for x in times], abs=1e-6)


@settings(max_examples=40, deadline=None)
@given(rows=rows_st, fmt=hs.sampled_from(["azure-2023", "burstgpt", "mooncake"]), data=hs.data())
def test_unsorted_rows_are_all_replayed_in_time_order(rows, fmt, data):
    """Rows out of time order, the first one not the earliest: every row is replayed, sorted, from the earliest.
    (Rows earlier than the first were dropped uncounted: 3 rows at 10, 5, 12 s replayed 2, the 5 s one lost.)"""
    ms = sorted(r[0] for r in rows)
    times = [m / 1000 for m in ms] if fmt != "burstgpt" else [float(m // 1000) for m in ms]
    prompts, outs = [r[1] for r in rows], [r[2] for r in rows]
    order = data.draw(hs.permutations(range(len(rows))))  # file position -> row
    loaded = parse_trace(_write(fmt, [times[i] for i in order], [prompts[i] for i in order], [outs[i] for i in order]),
                         TraceOptions(format=fmt))  # fmt: skip
    t = loaded.trace
    assert loaded.num_in_window == len(rows) and len(t.arrival_s) == len(rows)
    assert t.arrival_s == pytest.approx([x - times[0] for x in times], abs=1e-6)
    # (equal times keep file order: compare the rows as multisets, times in whole ms)
    ms_of = lambda xs: [round(x * 1000) for x in xs]  # noqa: E731
    assert sorted(zip(ms_of(t.arrival_s), t.prompt_tokens, t.output_tokens)) == sorted(
        zip(ms_of([x - times[0] for x in times]), prompts, outs))


@pytest.mark.parametrize("fmt", ["azure-2023", "burstgpt", "mooncake"])
def test_a_window_on_rows_earlier_than_the_first_is_refused_naming_the_line(fmt):
    text = _write(fmt, [10.0, 5.0, 12.0], [100, 200, 300], [20, 30, 40])
    assert parse_trace(text, TraceOptions(format=fmt)).trace.prompt_tokens == [200, 100, 300]
    line = 2 if fmt == "mooncake" else 3
    with pytest.raises(TraceError, match=f"{fmt} line {line}: .*earlier than the first row"):
        parse_trace(text, TraceOptions(format=fmt, start_s=1))
    with pytest.raises(TraceError, match=f"{fmt} line {line}: .*earlier than the first row"):
        parse_trace(text, TraceOptions(format=fmt, end_s=100))


@settings(max_examples=40, deadline=None)
@given(n=hs.integers(2, 20), data=hs.data(), fmt=hs.sampled_from(["azure-2023", "burstgpt", "mooncake"]),
       junk=hs.sampled_from(["abc", "-5", "1e999", "", "2.5"]))  # fmt: skip
def test_a_malformed_row_is_rejected_with_its_line_number(n, data, fmt, junk):
    text = _write(fmt, [float(i) for i in range(n)], [100] * n, [10] * n)
    lines = text.splitlines()
    bad = data.draw(hs.integers(0, n - 1))
    row_line = bad + (0 if fmt == "mooncake" else 1)  # index into `lines`
    if fmt == "mooncake":
        lines[row_line] = lines[row_line].replace('"input_length": 100', f'"input_length": "{junk}"')
    else:
        cells = lines[row_line].split(",")
        cells[-2 if fmt.startswith("azure") else 2] = junk
        lines[row_line] = ",".join(cells)
    with pytest.raises(TraceError, match=f"{fmt} line {row_line + 1}:"):
        parse_trace("\n".join(lines) + "\n", TraceOptions(format=fmt))


@settings(max_examples=60, deadline=None)
@given(text=hs.text(max_size=300))
def test_hostile_text_raises_only_trace_errors(text):
    try:
        parse_trace(text)
    except TraceError:
        pass


def test_bom_wrong_columns_and_wrong_format_are_explained():
    body = "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.0,5,1\n"
    assert len(parse_trace(("\ufeff" + body).encode("utf-8")).trace.arrival_s) == 1
    with pytest.raises(TraceError, match="missing GeneratedTokens"):
        parse_trace("TIMESTAMP,ContextTokens\n2023-11-16 18:15:46.0,5\n", TraceOptions(format="azure-2023"))
    with pytest.raises(TraceError, match="looks like azure-2023"):
        parse_trace(body, TraceOptions(format="burstgpt"))
    with pytest.raises(TraceError, match="unrecognised trace header"):
        parse_trace("foo,bar\n1,2\n")
    # a header with some of a format's columns is named against it (it was "unrecognised", and every format listed)
    with pytest.raises(TraceError, match=r"^line 1: the header 'arrival_s,prompt_tokens' lacks output_tokens \(csv: arrival_s,"):
        parse_trace("arrival_s,prompt_tokens\n1,2\n")
    with pytest.raises(TraceError, match=r"must start with arrival_s, prompt_tokens, output_tokens, in that order"):
        parse_trace("prompt_tokens,arrival_s,output_tokens\n1,2,3\n")
    with pytest.raises(TraceError, match=r"lacks Response tokens, Total tokens, Log Type \(BurstGPT: CSV"):
        parse_trace("Timestamp,Model,Request tokens\n1,x,2\n")
    with pytest.raises(TraceError, match="unrecognised trace header 'Timestamp,prompt_tokens'"):  # (as much one as the other)
        parse_trace("Timestamp,prompt_tokens\n1,2\n")
    with pytest.raises(TraceError, match="line 2: expected a JSON object|line 2: not a JSON"):
        parse_trace('{"timestamp": 0, "input_length": 5, "output_length": 1}\n[1]\n')
    with pytest.raises(TraceError, match="hash_ids for 5 input tokens"):
        parse_trace('{"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": [1, 2]}\n')


def test_window_time_scale_and_seeded_sampling():
    path = TRACES / SAMPLES["azure-2023"]
    full = load_trace(path).trace
    win = load_trace(path, TraceOptions(start_s=10, end_s=20)).trace
    inside = [a for a in full.arrival_s if 10 <= a < 20]
    assert len(win.arrival_s) == len(inside) and win.arrival_s[0] == 0.0
    fast = load_trace(path, TraceOptions(time_scale=0.5)).trace
    assert fast.arrival_s == pytest.approx([a * 0.5 for a in full.arrival_s])
    a = load_trace(path, TraceOptions(max_requests=50, seed=1)).trace
    b = load_trace(path, TraceOptions(max_requests=50, seed=1)).trace
    c = load_trace(path, TraceOptions(max_requests=50, seed=2)).trace
    assert a == b and a != c and len(a.arrival_s) == 50
    assert set(a.prompt_tokens) <= set(full.prompt_tokens)
    only_gpt4 = load_trace(TRACES / SAMPLES["burstgpt"], TraceOptions(model="GPT-4")).trace
    assert 0 < len(only_gpt4.arrival_s) < len(load_trace(TRACES / SAMPLES["burstgpt"]).trace.arrival_s)
    with pytest.raises(TraceError, match="no request left"):
        load_trace(path, TraceOptions(start_s=1e6))


def test_python_api_and_scenario_presets_replay_a_trace():
    cfg = with_trace(load_preset("chat-h100-llama8b"), load_trace(TRACES / SAMPLES["burstgpt"]).trace, "bg")
    assert cfg.workload.trace is not None and cfg.workload.num_requests == len(cfg.workload.trace.arrival_s)
    for name in ("trace-azure-2023-h100-llama8b", "trace-mooncake-h100-llama8b"):
        assert load_preset(name).workload.trace is not None


def test_with_trace_takes_load_traces_result_as_it_takes_its_trace():
    # with_trace(cfg, load_trace(path)) is the call one writes first: it raised AttributeError ('LoadedTrace' object
    # has no attribute 'model_dump') from inside the config code
    loaded, cfg = load_trace(TRACES / SAMPLES["burstgpt"]), load_preset("chat-h100-llama8b")
    assert with_trace(cfg, loaded, "bg") == with_trace(cfg, loaded.trace, "bg")
    with pytest.raises(TypeError, match="with_trace expects a Trace or load_trace's result, got str"):
        with_trace(cfg, "burstgpt.csv")
    # a request the config refuses is named by its line in the file, as the CLI and an upload name it
    late = parse_trace("arrival_s,prompt_tokens,output_tokens\n5,10,10\n1,200000,20\n")  # (replayed sorted: 2nd line first)
    with pytest.raises(PresetError, match="csv line 3: prompt_tokens 200000 \\+ output_tokens 20"):
        with_trace(cfg, late)


def test_detect_format_names_every_schema():
    assert detect_format("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type") == "burstgpt"
    assert detect_format('{"timestamp": 0}') == "mooncake"
    assert detect_format("arrival_s,prompt_tokens,output_tokens") == "csv"
