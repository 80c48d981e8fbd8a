import contextlib
import io
import json
import re
import subprocess
import sys

import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as hs

from sim_core.cli import main
from tests.strategies import cases

REQUIRED = {"num_requests", "num_finished", "num_preemptions", "makespan_s", "output_tokens_per_s", "ttft_p50_s",
            "ttft_p99_s", "tpot_p50_s", "tpot_p99_s", "itl_p99_s", "e2e_p50_s", "e2e_p99_s", "stopped_reason"}


def test_run_json_has_the_contract_fields(capsys):
    assert main(["run", "chat-h100-llama8b", "--json", "--set", "workload.num_requests=30"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert REQUIRED <= set(out) and out["num_requests"] == 30 and out["stopped_reason"] is None


def test_run_prints_a_readable_summary(capsys):
    assert main(["run", "chat-h100-llama8b", "--set", "workload.num_requests=20"]) == 0
    text = capsys.readouterr().out
    assert "TTFT" in text and "modelled" in text


def test_the_summary_says_what_its_prefill_share_and_hit_rate_count(capsys):
    # "prefill share 95%" under overload read as prefill's share of the work, where it is the busy time of ticks that
    # prefill, a mixed tick counted whole (as the app's help says); hit rates read "7%" against "6%" where the docs
    # quote 7.1 and 5.6 %
    from sim_core import load_preset, run_simulation
    from sim_core.cli import format_summary

    res = run_simulation(load_preset("cluster-prefix-4xh100-llama8b"))
    s, text = res.summary, format_summary(res)
    assert f"({s.prefill_time_fraction:.0%} of it in ticks that prefill)" in text and "prefill share" not in text
    assert f"prefix cache  {100 * s.prefix_hit_rate_tokens:.1f}% of prompt tokens hit" in text


def test_a_one_tick_run_says_tick_not_ticks(capsys):
    # one request of one output token is one tick: the summary read "1 finished / 1 (0 unfinished), 1 ticks"
    assert main(["run", "chat-h100-llama8b", "--set", "workload.num_requests=1",
                 "--set", 'workload.output_tokens={"dist": "fixed", "mean": 1}']) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert "(0 unfinished), 1 busy tick" in out and "1 busy ticks" not in out


def test_a_run_stopped_at_its_tick_limit_counts_the_ticks_the_limit_counts(capsys):
    # limits.max_ticks = 1: "stopped after 1 tick" above "0 ticks" (the limit counts idle ticks, the summary busy ones)
    assert main(["run", "chat-h100-llama8b", "--set", "limits.max_ticks=1"]) == 0
    out = capsys.readouterr().out
    assert "stopped after 1 tick (limits.max_ticks)" in out and "(300 unfinished), 0 busy ticks + 1 idle, makespan" in out


def test_the_summary_names_the_arrivals_its_steady_window_excludes(capsys, monkeypatch):
    # (it printed "first and last 10 %" typed out, whatever the window's fractions in sim_core.metrics)
    from sim_core import metrics

    monkeypatch.setattr(metrics, "STEADY_WARMUP_FRACTION", 0.2)
    assert main(["run", "chat-h100-llama8b", "--set", "workload.num_requests=20"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if "steady state" in x)
    assert "requests 4-17 by arrival (first 20 % and last 10 % excluded;" in line


def test_the_steady_line_reads_goodput_as_a_share_of_the_offered_rate(capsys):
    # It printed "served 7.96 req/s, ... goodput 8.49 req/s": goodput counts the window's arrivals that meet both SLOs,
    # completions count by the time they end, so goodput read as more than what was served. It now names goodput right
    # after the offered rate it is a share of, and the completions as completed.
    assert main(["run", "chat-h100-llama8b"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if "steady state" in x)
    offered, goodput, share = re.search(r"offered ([\d.]+) req/s, goodput ([\d.]+) req/s \((\d+)% of them meet both\), "
                                        r"completed [\d.]+ req/s", line).groups()
    assert float(goodput) == pytest.approx(float(offered) * int(share) / 100, abs=0.01)
    assert "served" not in line


def test_latencies_of_a_second_or_more_are_written_in_seconds_as_the_app_writes_them(capsys):
    # an overloaded run printed "TTFT p50 3,270.4 ms" where the app's figures and tables had switched to seconds
    assert main(["run", "chat-h100-llama8b", "--json", "--set", "workload.arrival.rate_per_s=100"]) == 0
    s = json.loads(capsys.readouterr().out)
    assert s["ttft_p50_s"] >= 1.0 > s["tpot_p50_s"]  # (one latency each side of a second)
    assert main(["run", "chat-h100-llama8b", "--set", "workload.arrival.rate_per_s=100"]) == 0
    lines = capsys.readouterr().out.splitlines()
    ttft = next(x for x in lines if x.strip().startswith("TTFT"))
    tpot = next(x for x in lines if x.strip().startswith("TPOT"))
    steady = next(x for x in lines if "steady state" in x)
    assert f"p50 {s['ttft_p50_s']:,.2f} s" in ttft and f"p99 {s['ttft_p99_s']:,.2f} s" in ttft and " ms" not in ttft
    assert f"p50 {s['tpot_p50_s'] * 1e3:,.1f} ms" in tpot
    assert re.search(r"TTFT p99 \d+\.\d\d s, TPOT p99 [\d.]+ ms", steady)


def test_out_writes_config_and_csvs(tmp_path, capsys):
    assert main(["run", "chat-h100-llama8b", "--set", "workload.num_requests=25", "--out", str(tmp_path)]) == 0
    assert len(pd.read_csv(tmp_path / "requests.csv")) == 25
    ticks = pd.read_csv(tmp_path / "ticks.csv")
    assert {"duration_s", "phase", "kv_blocks_used"} <= set(ticks.columns)
    # the written config reproduces the run
    assert main(["run", str(tmp_path / "config.json"), "--json"]) == 0
    first = json.loads((tmp_path / "summary.json").read_text())
    again = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert first == again


def test_out_reused_keeps_only_this_runs_files_and_what_is_not_ours(tmp_path, capsys):
    # a deployment's instances.csv stayed beside a later single engine's files in the same --out directory
    from sim_core.cli import remove_stale_outputs

    out = tmp_path / "runs"
    assert main(["run", "cluster-router-4xh100-llama8b", "--set", "workload.num_requests=20", "--out", str(out)]) == 0
    assert (out / "instances.csv").exists()
    (out / "notes.txt").write_text("mine")  # (the user's own file: never touched)
    assert main(["run", "chat-h100-llama8b", "--set", "workload.num_requests=20", "--out", str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "notes.txt", "requests.csv", "summary.json", "ticks.csv"]
    # the plan's rule: config-N.json beyond this plan's rows go, a config-foo.json of the user's stays
    for name in ("plan.json", "config-1.json", "config-2.json", "config-10.json", "config-foo.json"):
        (tmp_path / name).write_text("{}")
    removed = remove_stale_outputs(tmp_path, {"plan.json", "config-1.json"}, (r"plan\.json", r"config-\d+\.json"))
    assert removed == ["config-10.json", "config-2.json"]
    assert (tmp_path / "config-foo.json").exists() and (tmp_path / "config-1.json").exists()


def test_bad_value_exits_2_with_field_value_and_range(capsys):
    assert main(["run", "chat-h100-llama8b", "--set", "scheduler.max_num_seqs=0"]) == 2
    err = capsys.readouterr().err
    assert "scheduler.max_num_seqs = 0" in err and ">= 1" in err and "Traceback" not in err


def test_set_engine_applies_an_engine_preset_as_a_scenario_names_one():
    # `--set engine=sglang` was "unknown field 'engine'" although scenario files and config files take "engine": comparing
    # engines from the command line needed a hand-written file. It now does what the sidebar's engine choice does
    # (sim_core.presets.with_engine_data), and later --set values still apply over it.
    from sim_core.cli import apply_overrides
    from sim_core.presets import load_preset

    chat = load_preset("chat-h100-llama8b")
    by_set = apply_overrides(chat, ["engine=sglang"])
    named = load_preset("chat-h100-llama8b-sglang")  # the same traffic with "engine": "sglang" in its file
    assert by_set.model_dump(exclude={"name", "description"}) == named.model_dump(exclude={"name", "description"})
    assert by_set.calibration.profile == "sglang" and by_set.scheduler.admission == "new_token_ratio"
    after = apply_overrides(chat, ["engine=sglang", "scheduler.max_num_seqs=64"])
    assert after.scheduler.max_num_seqs == 64 and after.scheduler.admission == "new_token_ratio"
    # the engine goes first whatever the order: given after a field of its scheduler it replaced that field without a
    # word (max_num_seqs=2 then engine=sglang ran SGLang's 1,024)
    before = apply_overrides(chat, ["scheduler.max_num_seqs=64", "engine=sglang"])
    assert before == after
    # and so does a hardware preset, keeping the GPU count as the sidebar does, so its fields can follow it
    four = load_preset("chat-4xh100-llama70b")
    h200 = apply_overrides(four, ["hardware.num_gpus=8", "hardware=h200"])
    assert h200.hardware.name == "H200 SXM" and h200.hardware.num_gpus == 8
    assert apply_overrides(four, ["hardware=h200"]).hardware.num_gpus == four.hardware.num_gpus == 4


@pytest.mark.parametrize("part", ["engine", "hardware", "model", "workload"])
def test_every_field_of_a_part_can_follow_its_preset(part):
    # A part preset's file names only the fields it sets, and `--set engine=sglang --set scheduler.
    # preemption_headroom_steps=20` said "unknown field" (docs/engines.md's own command): the fields were checked
    # against the preset's dict, not the config's schema. Every plain field of the section can now follow any preset.
    from sim_core.config import field_info, section_model
    from sim_core.presets import PART_FAMILIES, PresetError, config_with, list_presets, load_preset

    chat = load_preset("chat-h100-llama8b")
    key = {"engine": "scheduler"}.get(part, part)
    checked = 0
    for name in list_presets(PART_FAMILIES[part]):
        try:
            base = config_with(chat, {part: name})
        except PresetError:
            continue  # (a model whose context is shorter than the chat workload's longest request: not this test's)
        checked += 1
        section = getattr(base, key)
        for field, value in section.model_dump(mode="json").items():
            # (a nested section as an object of its fields, `--set 'scheduler.speculative={"enabled": true}'`: its
            # merge read the field from the preset's dict, a KeyError, a traceback; and its first field dotted)
            nested = section_model(field_info((key, field)).annotation) is not None and isinstance(value, dict)
            assert config_with(chat, {part: name, f"{key}.{field}": value}) == base, (name, field)
            if nested and value:
                inner, item = next(iter(value.items()))
                assert config_with(chat, {part: name, f"{key}.{field}.{inner}": item}) == base, (name, field, inner)
                assert config_with(chat, {part: name, f"{key}.{field}": {inner: item}}) == base, (name, field, inner)
    assert checked >= 2
    # (a list of models, set whole, is named so after a part preset too: it read "'classes' is not a section")
    with pytest.raises(PresetError, match="'workload.classes' is one field, not a section: set it whole"):
        config_with(chat, {"workload": "chat", "workload.classes.0.name": "x"})


@given(name=hs.text(min_size=1, max_size=20))
def test_set_engine_with_anything_but_an_engine_name_exits_2_naming_the_engines(name):
    import contextlib
    import io

    from sim_core.presets import list_presets

    if name in list_presets("engines"):
        return
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        assert main(["run", "chat-h100-llama8b", "--set", f"engine={name}", "--set", "workload.num_requests=2"]) == 2
    text = err.getvalue()
    assert "engine" in text and "Traceback" not in text
    # (the engines listed; text that starts with { or [ is read as JSON first, and told how to quote it)
    assert "vllm-v1" in text or ("not valid JSON" in text and "engine=" in text)


def test_a_memory_efficiency_past_the_datasheet_exits_2_naming_both_fields(capsys):
    # on an H100 (hbm_efficiency_scale 1.0695) memory_efficiency 0.99 would stream HBM at 1.06 x the datasheet
    assert main(["run", "chat-h100-llama8b", "--set", "calibration.memory_efficiency=0.99"]) == 2
    err = capsys.readouterr().err
    assert "calibration.memory_efficiency = 0.99" in err and "hardware.hbm_efficiency_scale = 1.0695" in err
    assert "<= 0.935" in err and "Traceback" not in err


def test_unknown_key_and_unknown_preset_exit_2(capsys):
    assert main(["run", "chat-h100-llama8b", "--set", "scheduler.nope=1"]) == 2
    assert "unknown field 'nope'" in capsys.readouterr().err
    assert main(["run", "does-not-exist"]) == 2


@pytest.mark.parametrize("argv, words", [
    (["run", "chat-h100-lama8b"], "unknown preset 'chat-h100-lama8b' (did you mean 'chat-h100-llama8b'?); available: "),
    (["capacity", "chat-h100-llama8b-vllm"], "(did you mean 'chat-h100-llama8b-vllm-v0'?)"),
    # (four scenarios hold 'chat-h100'; the three it begins are named, not the multi-turn one it only appears in)
    (["run", "chat-h100"], "(did you mean 'chat-h100-llama8b', 'chat-h100-llama8b-sglang' or 'chat-h100-llama8b-vllm-v0'?)"),
    (["run", "chat-h100-llama8b", "--set", "hardware=h100"], "unknown hardware preset 'h100' (did you mean 'h100-sxm'?)"),
    (["run", "chat-h100-llama8b", "--set", "scheduler.max_num_seq=64"],
     "unknown field 'max_num_seq' (did you mean 'max_num_seqs'?); fields here: "),
    # (one letter off a long name, not the shorter name held inside it, 'preemption'; after an engine preset, whose
    # file names fewer fields than the section has)
    (["run", "chat-h100-llama8b", "--set", "engine=sglang", "--set", "scheduler.preemption_headroom_stepz=20"],
     "unknown field 'preemption_headroom_stepz' (did you mean 'preemption_headroom_steps'?)"),
    (["plan", "chat-h100-llama8b", "--rate", "5", "--engines", "vllm"],
     "unknown engine preset(s) 'vllm' (did you mean 'vllm-v0', 'vllm-v0-swap' or 'vllm-v1'?)"),
    (["run", "does-not-exist"], "unknown preset 'does-not-exist'; available: "),
])  # fmt: skip
def test_a_misspelt_name_is_answered_with_the_one_meant(capsys, argv, words):
    # "unknown preset 'chat-h100-lama8b'; available: " and 52 names: the one meant was left to find
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert words in err and "Traceback" not in err


@pytest.mark.parametrize("value, words", [
    ('workload.prompt_tokens={"dist": "fixed", "mean": 3000', "Expecting ',' delimiter at line 1, column 31"),
    ("workload.prompt_tokens={'dist': 'fixed', 'mean': 30}", "Expecting property name enclosed in double quotes"),
    ("name=[x]", "Invalid --set name: not valid JSON"),
    # json's own message ends in "at": it read "Unterminated string starting at at line 1, column 1"
    ('workload.prompt_tokens={"dist": "fixed', "(Unterminated string starting at line 1, column 10)"),
])  # fmt: skip
def test_a_set_value_of_broken_json_is_named_as_json(capsys, value, words):
    # read as text, it said "workload.prompt_tokens = '{...': Input should be a valid dictionary or instance of
    # LengthDist": not that the JSON was broken, nor where
    assert main(["run", "chat-h100-llama8b", "--set", value]) == 2
    err = capsys.readouterr().err
    assert words in err and "valid dictionary" not in err and "Traceback" not in err


def test_a_section_given_as_an_object_keeps_the_fields_it_does_not_name():
    # `--set scheduler='{"max_num_seqs": 4}'` replaced the whole section: the preset's greedy admission became the
    # default watermark and the engine's name changed, with no word. It now sets what it names, as dotted keys do.
    from sim_core.cli import apply_overrides
    from sim_core.presets import load_preset
    cfg = load_preset("chat-h100-llama8b")
    merged = apply_overrides(cfg, ['scheduler={"max_num_seqs": 4, "speculative": {"num_draft_tokens": 5}}'])
    dotted = apply_overrides(cfg, ["scheduler.max_num_seqs=4", "scheduler.speculative.num_draft_tokens=5"])
    assert merged == dotted and merged.scheduler.max_num_seqs == 4
    assert merged.scheduler.admission == cfg.scheduler.admission and merged.scheduler.name == cfg.scheduler.name
    # an absent optional section is filled with what it stands for, then the named fields set
    assert apply_overrides(cfg, ['deployment={"replicas": 2}']) == apply_overrides(cfg, ["deployment.replicas=2"])
    # an empty object still resets a section; a list or a plain value is still set whole
    assert apply_overrides(cfg, ["scheduler={}"]).scheduler.admission == type(cfg.scheduler)().admission


def test_a_misspelt_field_inside_a_section_object_names_its_whole_path(capsys):
    assert main(["run", "chat-h100-llama8b", "--set", 'scheduler={"max_num_seqz": 4}']) == 2
    err = capsys.readouterr().err
    assert "--set 'scheduler.max_num_seqz': unknown field 'max_num_seqz' (did you mean 'max_num_seqs'?)" in err


def test_a_set_value_in_json_quotes_is_text(capsys):
    assert main(["run", "chat-h100-llama8b", "--set", 'name="[x]"', "--set", "workload.num_requests=3"]) == 0
    assert capsys.readouterr().out.startswith("[x]: ")


@pytest.mark.parametrize("key,field", [("workload.classes.0.name", "workload.classes"), ("seed.x", "seed")])
def test_a_key_into_a_list_or_a_value_says_to_set_the_field_whole(capsys, key, field):
    # "'classes' is not a section of the config" did not say what to write instead
    assert main(["run", "chat-h100-llama8b", "--set", f"{key}=1"]) == 2
    assert f"{field!r} is one field, not a section: set it whole, e.g. --set '{field}=<JSON value>'" in capsys.readouterr().err


def test_out_of_memory_exits_2_with_the_knob(capsys):
    assert main(["run", "chat-l4-llama8b", "--set", "scheduler.max_num_batched_tokens=65536"]) == 2
    assert "max_num_batched_tokens" in capsys.readouterr().err


def test_presets_lists_scenarios(capsys):
    assert main(["presets", "--all"]) == 0
    out = capsys.readouterr().out
    assert "chat-h100-llama8b" in out
    # each family's descriptions start in one column (a fixed 38 misaligned names longer than it)
    starts: dict[str, set[int]] = {}
    for line in out.splitlines():
        if not line.startswith(" "):
            family = line
        elif m := re.match(r"  (\S+ +)\S", line):
            starts.setdefault(family, set()).add(2 + len(m.group(1)))
    assert len(starts) >= 5 and all(len(cols) == 1 for cols in starts.values()), starts


def test_a_long_preset_description_is_cut_at_a_word_and_says_so(capsys):
    # (it was cut at 100 characters mid-word, with nothing to show that text was missing)
    from sim_core.presets import describe_preset, list_presets

    assert main(["presets", "--all"]) == 0
    lines = {x.split()[0]: x for x in capsys.readouterr().out.splitlines() if x.startswith("  ")}
    for name in list_presets("scenarios"):
        desc, shown = describe_preset("scenarios", name), lines[name].split(None, 1)[1]
        assert shown == desc if len(desc) <= 100 else (shown.endswith(" …") and desc.startswith(shown[:-2])
                                                      and desc[len(shown) - 2] == " ")  # fmt: skip


def test_presets_all_help_names_every_family_it_lists(capsys):
    # the help (and the README's comment) said "hardware, models, workloads and engines"; --all lists calibration too
    from sim_core.presets import FAMILIES

    with pytest.raises(SystemExit):
        main(["presets", "--help"])
    shown = " ".join(capsys.readouterr().out.split())
    assert main(["presets", "--all"]) == 0
    listed = [line[:-1].split(":")[0] for line in capsys.readouterr().out.splitlines() if not line.startswith(" ")]
    assert listed == list(FAMILIES)
    assert all(fam.removesuffix("s") in shown for fam in listed if fam != "scenarios"), shown


def test_module_entry_point_runs_without_traceback():
    proc = subprocess.run([sys.executable, "-m", "sim_core", "run", "missing.json"], capture_output=True, text=True)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and "cannot read" in proc.stderr


def test_trace_flag_replays_a_named_format_and_bad_rows_exit_2(tmp_path, capsys):
    from pathlib import Path

    sample = Path(__file__).resolve().parents[2] / "presets" / "traces" / "mooncake-sample.jsonl"
    assert main(["run", "chat-h100-llama8b", "--json", "--trace", str(sample), "--trace-format", "mooncake",
                 "--trace-max-requests", "20", "--trace-time-scale", "2"]) == 0  # fmt: skip
    assert json.loads(capsys.readouterr().out)["num_requests"] == 20
    bad = tmp_path / "bad.csv"
    bad.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.0,5,1\n2023-11-16 18:15:47.0,x,1\n")
    assert main(["run", "chat-h100-llama8b", "--trace", str(bad)]) == 2
    assert "azure-2023 line 3: ContextTokens = 'x'" in capsys.readouterr().err
    assert main(["run", "chat-h100-llama8b", "--trace", str(bad), "--trace-time-scale", "0"]) == 2
    assert "--trace-time-scale = 0.0" in capsys.readouterr().err  # (the option as typed)
    # a file that cannot be read is named once ("error: nope.csv: cannot read trace file 'nope.csv'" named it twice)
    assert main(["run", "chat-h100-llama8b", "--trace", "nope.csv"]) == 2
    assert capsys.readouterr().err.strip() == "error: cannot read trace file 'nope.csv': No such file or directory"


def test_the_memory_knob_says_its_unit_and_its_older_name_still_sweeps(capsys):
    # (the knob was memory_gb for a GiB field, as the field was before it was renamed: the name now says GiB, and
    # commands and links that use the old one run the same sweep)
    from sim_core.sweep import SWEEP_KNOBS, knob_name

    assert "memory_gib" in SWEEP_KNOBS and "memory_gb" not in SWEEP_KNOBS and knob_name("memory_gb") == "memory_gib"
    args = ["sweep", "chat-h100-llama8b", "--start", "40", "--stop", "80", "--num", "2", "--set", "workload.num_requests=30",
            "--workers", "1"]  # fmt: skip
    assert main([*args, "--knob", "memory_gb"]) == 0
    old = capsys.readouterr().out
    assert main([*args, "--knob", "memory_gib"]) == 0
    assert capsys.readouterr().out == old and "memory_gib" in old and "GPU memory (GiB)" in old


@pytest.mark.parametrize("sets, noted", [(["workload.arrival.rate_per_s=5", "scheduler.max_num_seqs=64"], True),
                                         (["workload.output_tokens={\"dist\": \"fixed\", \"mean\": 8}"], True),
                                         (["scheduler.max_num_seqs=64", "workload.num_requests=20"], False)])  # fmt: skip
def test_a_set_the_trace_makes_unused_is_named(sets, noted, capsys):
    # a trace preset replays its rows: --set workload.arrival.rate_per_s=5 ran the trace as it is, without a word
    argv = ["run", "trace-azure-2023-h100-llama8b", "--json"] + [x for s in sets for x in ("--set", s)]
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert ("not used, the workload replays a trace" in err) is noted
    if noted:
        assert sets[0].partition("=")[0] in err and "scheduler" not in err


@cases(12)
@given(n=hs.integers(1, 12), seed=hs.integers(0, 2**32 - 1), preset=hs.sampled_from(["chat-h100-llama8b", "engine-sglang",
       "cluster-router-4xh100-llama8b"]))  # fmt: skip
def test_a_run_of_one_token_outputs_says_it_has_no_tpot_or_itl_and_never_nan(n, seed, preset):
    # `--set workload.output_tokens=...` of one token per request printed "TPOT p50 nan ms  p90 nan ms  p99 nan ms",
    # the same for ITL and the steady window's TPOT p99
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["run", preset, "--set", f"workload.num_requests={n}", "--set", f"seed={seed}",
                     "--set", 'workload.output_tokens={"dist": "fixed", "mean": 1, "min": 1, "max": 1}']) == 0  # fmt: skip
    text = out.getvalue()
    assert "nan" not in text, text
    assert "  TPOT          n/a (one-token outputs have no TPOT)\n" in text, text
    assert "  ITL           n/a (one-token outputs have no gap between tokens)\n" in text, text


def test_a_run_that_finished_nothing_says_so_for_every_latency(capsys):
    assert main(["run", "chat-h100-llama8b", "--set", "workload.num_requests=5", "--set", "limits.max_ticks=1"]) == 0
    text = capsys.readouterr().out
    assert "nan" not in text, text
    for name in ("TTFT", "TPOT", "ITL", "E2E"):
        assert f"  {name:<13s} n/a (no request finished)\n" in text, text
    assert "MFU n/a, MBU n/a" in text


def test_a_run_too_short_to_exclude_arrivals_does_not_say_it_excluded_them(capsys):
    # a 4-request mechanism preset's line said "first and last 10 % excluded" of a window holding all 4
    assert main(["run", "mechanism-chunked-prefill"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if "steady state" in x)
    assert "requests 0-3 by arrival (too few arrivals to exclude any;" in line and "excluded;" not in line, line
    assert main(["run", "chat-h100-llama8b", "--set", "workload.num_requests=20"]) == 0
    assert "(first and last 10 % excluded;" in capsys.readouterr().out


def test_a_run_out_of_memory_names_what_to_lower_not_a_traceback(capsys, monkeypatch):
    # a run whose arrays outgrew the machine ended in numpy's ArrayMemoryError, a traceback
    from sim_core import cli

    def too_big(cfg, *args, **kwargs):  # (numpy's ArrayMemoryError, which a long run's recorder raised, is a MemoryError)
        raise MemoryError("Unable to allocate 8.00 GiB for an array with shape (1073741824,) and data type int64")

    monkeypatch.setattr(cli, "run_simulation", too_big)
    assert main(["run", "chat-h100-llama8b"]) == cli.EXIT_OUT_OF_MEMORY != 0
    err = capsys.readouterr().err
    assert err.startswith("error: out of memory") and all(name in err for name in cli.MEMORY_FIELDS)


@pytest.mark.parametrize("router, noted", [("round_robin", True), ("least_outstanding", True), ("least_kv", False)])
def test_a_refresh_interval_for_a_router_that_reads_no_state_is_named(router, noted, capsys):
    # --set deployment.state_refresh_s=0 with round robin was kept without a word: only least_kv and prefix_affinity read it
    argv = ["run", "cluster-router-4xh100-llama8b", "--json", "--set", f"deployment.router={router}",
            "--set", "deployment.state_refresh_s=0", "--set", "workload.num_requests=20"]  # fmt: skip
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert ("deployment.state_refresh_s: not used, it is read only when deployment.router is" in err) is noted, err
    assert not noted or f"(here {router!r})" in err


def test_strict_exits_3_when_the_run_stopped_at_a_limit(capsys):
    # (a run stopped at its time limit with most requests unfinished exited 0: a script had to parse stopped_reason)
    stopped = ["run", "chat-h100-llama8b", "--json", "--set", "workload.arrival.rate_per_s=200", "--set", "limits.max_sim_time_s=5"]
    from sim_core import cli

    assert main(stopped) == 0 and main([*stopped, "--strict"]) == cli.EXIT_STOPPED == 3
    assert json.loads(capsys.readouterr().out.splitlines()[-1])["stopped_reason"]  # (the summary is printed first)
    assert main(["run", "chat-h100-llama8b", "--set", "workload.num_requests=20", "--strict"]) == 0


def test_a_set_key_given_twice_is_refused_naming_both_values(capsys):
    # the last one won without a word (a JSON object that names a key twice is refused, in files, links and values)
    assert main(["run", "chat-h100-llama8b", "--set", "scheduler.max_num_seqs=8", "--set", "scheduler.max_num_seqs=16"]) == 2
    assert "--set 'scheduler.max_num_seqs' given twice ('8', then '16'): give it once" in capsys.readouterr().err


def test_a_whole_number_of_thousands_of_digits_is_refused_naming_its_field(tmp_path, capsys):
    # int() of more than 4,300 digits raised Python's ValueError: a traceback and exit 1 from --set and a config file
    from sim_core.cli import main

    long = "9" * 5000
    assert main(["run", "chat-h100-llama8b", "--set", f"seed={long}"]) == 2
    err = capsys.readouterr().err
    assert "seed = a number past 1e+308: out of range; allowed: >= 0 and <= 4294967295" in err and "Traceback" not in err
    path = tmp_path / "long.json"
    path.write_text('{"hardware": "h100-sxm", "workload": {"num_requests": -' + long + "}}")
    assert main(["run", str(path)]) == 2
    err = capsys.readouterr().err
    assert "workload.num_requests = a number past -1e+308: out of range" in err and "allowed: >= 1" in err and len(err) < 2000
