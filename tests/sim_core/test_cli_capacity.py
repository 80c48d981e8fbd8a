"""`python -m sim_core capacity` and `plan`: tables on stdout, bad input named with exit code 2."""

import contextlib
import io
import json
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim_core.cli import EXIT_BAD_INPUT, main

SMALL = ["--set", 'workload.prompt_tokens={"dist": "fixed", "mean": 512, "min": 1, "max": 512}',
         "--set", 'workload.output_tokens={"dist": "fixed", "mean": 32, "min": 1, "max": 32}',
         "--set", "slo.ttft_s=0.5", "--workers", "1", "--no-cache"]  # fmt: skip


def test_plan_prints_the_cheapest_rows_and_writes_their_configs(capsys, tmp_path):
    code = main(["plan", "chat-h100-llama8b", "--rate", "40", "--gpus", "h100-sxm", "--tp", "1", "--engines", "vllm-v1",
                 "--max-replicas", "3", "--out", str(tmp_path), *SMALL])  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0
    assert "h100-sxm TP1 · vllm-v1" in out and "P99 TTFT ≤ 0.5 s" in out and "confirmed as deployments" in out
    rows = json.loads((tmp_path / "plan.json").read_text())
    assert rows[0]["usd_per_hour"] == 3.0 * rows[0]["gpus"]
    # the columns' words: the steady window's latencies, a capacity bisected to a lower bound, "ms" spaced
    assert "over the steady-state window" in out and "bisected to within 3% (a lower bound)" in out
    row = next(ln for ln in out.splitlines() if "h100-sxm TP1 · vllm-v1" in ln)
    assert re.search(r"\d ms +\d[\d.]* ms ", row), row
    # its config file does not carry the scenario's own description ("... (8 req/s) on one H100")
    saved = json.loads((tmp_path / "config-1.json").read_text())
    assert saved["description"].startswith("A deployment planned for the traffic, model and SLOs of chat-h100-llama8b")


def test_capacity_prints_an_interval_over_seeds(capsys):
    assert main(["capacity", "chat-h100-llama8b", "--seeds", "2", "--percentile", "90", *SMALL]) == 0
    out = capsys.readouterr().out
    assert "capacity" in out and "over 2 seed(s)" in out and "P90 TTFT" in out and "seed 1:" in out
    assert out.startswith("chat-h100-llama8b (vLLM V1): capacity ")  # (the scheduler named: --set engine= changes it)


def test_one_seeds_capacity_is_one_number_not_a_range_of_it(capsys):
    # "capacity 19.98-19.98 req/s" over --seeds 1 (a review)
    assert main(["capacity", "chat-h100-llama8b", "--seeds", "1", *SMALL]) == 0
    line = next(ln for ln in capsys.readouterr().out.splitlines() if " capacity " in ln)
    value = line.split(" capacity ")[1].split(" req/s")[0]
    assert value.replace(",", "").replace(".", "").isdigit(), line  # (one figure: no "-" between two)


@settings(max_examples=25, deadline=None)
@given(price=st.text(min_size=0, max_size=12), rate=st.sampled_from(["0", "-3", "nan", "1e9"]))
def test_bad_plan_input_is_named_not_a_traceback(price, rate):
    buf = io.StringIO()
    with contextlib.redirect_stderr(buf):
        code = main(["plan", "chat-h100-llama8b", "--rate", rate, "--price", f"h100-sxm={price}", "--no-cache", "--workers", "1",
                     "--gpus", "h100-sxm", "--tp", "1", "--engines", "vllm-v1", "--max-replicas", "1"])  # fmt: skip
    err = buf.getvalue()
    assert code == EXIT_BAD_INPUT
    # (the rate named as typed, "--rate = 0.0": "target_rate_per_s" passed only while every example also had a bad price)
    assert "error:" in err and ("price" in err or "--rate = " in err)


def test_sweep_prints_bands_over_seeds_and_a_capacity(capsys):
    assert main(["sweep", "chat-h100-llama8b", "--start", "20", "--stop", "200", "--num", "3", "--seeds", "2", *SMALL]) == 0
    out = capsys.readouterr().out
    assert "median [min-max] over 2 seed(s)" in out and "capacity (P99 TTFT ≤ 0.5 s" in out
    assert out.count("[") >= 3  # bands drawn as [min-max]


def test_sweep_prints_a_points_whole_note(capsys):
    # cut at 60 characters, a short run's note read "Too short to say: the warm-up (first 10% of arrivals) lasted"
    assert main(["sweep", "chat-h100-llama8b", "--start", "16", "--stop", "17", "--num", "1", "--fixed-length",
                 "--workers", "1", "--no-cache"]) == 0  # fmt: skip
    row = next(line for line in capsys.readouterr().out.splitlines() if line.strip().startswith("16 "))
    assert "Too short to say" in row and row.rstrip().endswith("requests or more.")


def test_sweep_rows_read_their_rate_in_four_digits_and_goodput_in_hundredths(capsys):
    # a rate point read "1.06667" and its goodput "0.1" (every low rate's goodput read alike)
    assert main(["sweep", "chat-h100-llama8b", "--start", "0.1", "--stop", "3", "--num", "4", "--fixed-length",
                 "--workers", "1", "--no-cache"]) == 0  # fmt: skip
    rows = [line.split() for line in capsys.readouterr().out.splitlines() if line.startswith("  ") and "met" in line]
    assert [r[0] for r in rows] == ["0.1", "1.067", "2.033", "3"], rows
    assert all(len(r[2].split(".")[1]) == 2 for r in rows), rows


def test_sweep_without_a_range_runs_the_sweep_pages_default_past_the_knee(capsys):
    # --start and --stop were required; the CLI now takes the Sweep page's range (sweep.default_range: the rate past
    # the saturation rate of an offline run, in round steps) and says which
    from sim_core import load_preset
    from sim_core.sweep import default_rate_range, saturation_per_s

    assert main(["sweep", "chat-h100-llama8b", "--num", "3", "--fixed-length", "--workers", "1", "--no-cache"]) == 0
    out = capsys.readouterr().out
    cfg = load_preset("chat-h100-llama8b")
    saturation = saturation_per_s(cfg)
    start, stop = default_rate_range(cfg.workload.arrival.rate_per_s, saturation, 3)
    assert f"sweeping rate from {start:g} to {stop:g} (the default range: an offline run completes {saturation:,.1f} req/s)" in out
    assert stop > saturation and [line.split()[0] for line in out.splitlines()[3:6]] == [f"{v:g}" for v in (start, (start + stop) / 2, stop)]
    assert main(["sweep", "chat-h100-llama8b", "--knob", "max_num_seqs", "--num", "2", "--fixed-length", "--workers", "1", "--no-cache"]) == 0
    assert "sweeping max_num_seqs from 128 to 512 (the default range)" in capsys.readouterr().out  # (half to twice 256)


def test_sweep_without_a_range_stays_within_the_knobs_allowed_values(capsys):
    # the default range (half to twice the current value) was clamped to the knob's allowed range on the page only:
    # the CLI swept kv_compression 0.5-2 (the point at 2 an error row) and num_gpus 0-2 (0 an error row)
    for knob, said in (("kv_compression", "from 0.5 to 1 "), ("num_gpus", "from 1 to 2 ")):
        assert main(["sweep", "chat-h100-llama8b", "--knob", knob, "--num", "2", "--fixed-length", *SMALL]) == 0
        out = capsys.readouterr().out
        assert f"sweeping {knob} {said}" in out and "error" not in out


def test_a_one_point_sweep_without_a_range_is_not_a_traceback(capsys):
    # --num 1 divided the default rate range's span by num - 1 = 0 (ZeroDivisionError)
    assert main(["sweep", "chat-h100-llama8b", "--num", "1", "--fixed-length", *SMALL]) == 0
    assert "sweeping rate from" in capsys.readouterr().out


def test_plan_offers_every_router_and_plans_behind_the_session_router(capsys):
    from typing import get_args

    from sim_core.config import Router

    with contextlib.suppress(SystemExit):
        main(["plan", "--help"])
    usage = " ".join(capsys.readouterr().out.split())
    assert all(router in usage for router in get_args(Router))
    code = main(["plan", "chat-h100-llama8b", "--rate", "20", "--gpus", "h100-sxm", "--tp", "1", "--engines", "vllm-v1",
                 "--max-replicas", "2", "--router", "session", "--evaluation", "deployment", *SMALL])  # fmt: skip
    assert code == 0 and "(cluster, session router)" in capsys.readouterr().out


PLAN_NUMBERS = {  # option -> (PlanSpec field, allowed range as the message writes it)
    "--rate": ("target_rate_per_s", ">= 6.4e-05 and <= 100000"), "--max-replicas": ("max_replicas", ">= 1 and <= 64"),
    "--top": ("num_results", ">= 1 and <= 100"), "--tp": ("tp_degrees", ">= 1 and <= 64"),
    "--price": ("prices_usd_per_gpu_hour", "> 0 and <= 1000"),
}


@settings(max_examples=40, deadline=None)
@given(option=st.sampled_from(sorted(PLAN_NUMBERS)),
       value=st.sampled_from(["0", "-1", "nan", "inf", "-inf", "1e9", "100001"]))  # fmt: skip
def test_an_out_of_range_plan_number_names_its_field_value_and_allowed_range(option, value):
    """`--rate nan` said only "Input should be less than or equal to 100000" (no range: PlanSpec's bounds were looked
    up in SimConfig, where they are not); every plan option out of range is named with its value and its range."""
    if option in ("--max-replicas", "--top", "--tp") and value in ("nan", "inf", "-inf", "1e9"):
        value = "100000"  # whole-number options: argparse's own message covers non-integers
    given_value = f"h100-sxm={value}" if option == "--price" else value
    args = ["plan", "chat-h100-llama8b", "--rate", "10", "--gpus", "h100-sxm", "--engines", "vllm-v1", "--no-cache",
            "--workers", "1", f"{option}={given_value}"]  # fmt: skip (= : "-inf" is a value, not an option)
    buf = io.StringIO()
    with contextlib.redirect_stderr(buf):
        code = main(args)
    err = buf.getvalue()
    _, allowed = PLAN_NUMBERS[option]
    assert code == EXIT_BAD_INPUT and "Traceback" not in err
    # named as typed (it said "num_results = 0" for --top 0), with the value and the range
    named = "--price h100-sxm = " if option == "--price" else "--tp item 1 = " if option == "--tp" else f"{option} = "
    assert named in err and f"allowed: {allowed}" in err, err


def test_a_plan_rate_below_what_a_config_allows_is_named_as_the_rate(capsys):
    # (PlanSpec allowed any rate > 0: --rate 1e-7 was refused later as "Invalid capacity probe at 1e-07 req/s:
    # workload.arrival.rate_per_s = 1e-07", a field the user never typed; the bounds are now the config field's)
    code = main(["plan", "chat-h100-llama8b", "--rate", "1e-7", "--no-cache", "--workers", "1"])
    err = capsys.readouterr().err
    assert code == EXIT_BAD_INPUT and "--rate = 1e-07" in err and "capacity probe" not in err, err


def test_a_plan_rate_whose_replica_share_a_config_refuses_is_named_as_the_rate(capsys):
    # 1e-6, workload.arrival.rate_per_s's own lowest, ran 2 replicas at 5e-7 each and was refused as "Invalid capacity
    # probe at 5e-07 req/s": the plan's lowest rate is that field's lowest times the most replicas
    code = main(["plan", "chat-h100-llama8b", "--rate", "1e-5", "--no-cache", "--workers", "1"])
    err = capsys.readouterr().err
    assert code == EXIT_BAD_INPUT and "--rate = 1e-05" in err and ">= 6.4e-05" in err and "probe" not in err, err


@settings(max_examples=20, deadline=None)
@given(option=st.sampled_from(["--gpus", "--tp", "--engines", "--token-budgets", "--max-batches"]),
       value=st.sampled_from(["", " ", ",", " , "]))  # fmt: skip
def test_an_empty_plan_list_is_refused_not_read_as_the_default(option, value):
    """`--gpus ''` planned over every priced GPU (an empty text read as "not given"): a list given empty is named."""
    buf = io.StringIO()
    with contextlib.redirect_stderr(buf):
        code = main(["plan", "chat-h100-llama8b", "--rate", "10", "--no-cache", "--workers", "1", f"{option}={value}"])
    err = buf.getvalue()
    assert code == EXIT_BAD_INPUT and option in err and "Traceback" not in err, err


def test_a_plan_of_a_trace_says_why_its_rows_have_no_headroom(capsys, tmp_path):
    # the rows of a traced plan read capacity "-" and headroom "-" (the page: "–") with no word of why: a trace's
    # arrival times are replayed, so no other rate is bisected
    from sim_core.planner import NO_HEADROOM_FOR_TRACES
    from tests.conftest import trace_config

    path = tmp_path / "traced.json"
    path.write_text(trace_config([256] * 200, [16] * 200, arrivals=[i * 0.05 for i in range(200)]).model_dump_json())
    code = main(["plan", str(path), "--rate", "20", "--gpus", "h100-sxm", "--tp", "1", "--engines", "vllm-v1",
                 "--max-replicas", "2", "--workers", "1", "--no-cache"])  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0
    assert f"NOTE (every row): {NO_HEADROOM_FOR_TRACES}" in out, out


def test_a_sweep_point_without_a_steady_window_prints_n_a_not_nan(capsys):
    # one request per point has no steady window: its figures printed "nan" beside the note that says so
    assert main(["sweep", "chat-h100-llama8b", "--knob", "rate", "--start", "4", "--stop", "8", "--num", "2",
                 "--set", "workload.num_requests=1", "--fixed-length", "--workers", "1", "--no-cache"]) == 0  # fmt: skip
    rows = [line for line in capsys.readouterr().out.splitlines() if line.strip().startswith(("4 ", "8 "))]
    assert len(rows) == 2 and all("nan" not in r and r.count("n/a") == 3 and r.endswith("no steady-state window") for r in rows), rows


def test_a_capacity_below_every_probed_rate_reads_below_that_rate_not_zero(capsys):
    # a 10 ms TTFT objective no rate meets printed "capacity 0.00-0.00 req/s", read as a measured zero
    assert main(["capacity", "chat-h100-llama8b", "--seeds", "1", "--no-cache", "--workers", "1",
                 "--set", "slo.ttft_s=0.01"]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert "capacity below 0.000977 req/s over 1 seed(s)" in out and "0.00-0.00" not in out, out
    assert "seed 0: below 0.000977 req/s  NOTE: even the lowest probed rate misses the objective" in out


def test_a_traces_seeds_that_agree_are_said_to_replay_the_same_requests(capsys):
    # `capacity` on a trace over 2 seeds printed "5.57-5.57 req/s" with no word of why the interval had no width
    assert main(["capacity", "trace-azure-2023-h100-llama8b", "--seeds", "2", "--no-cache", "--workers", "1"]) == 0
    out = capsys.readouterr().out
    assert "NOTE: a trace replays its recorded arrivals and lengths" in out, out
    seeds = [line.split(": ")[1] for line in out.splitlines() if line.startswith("  seed ")]
    assert len(seeds) == 2 and seeds[0] == seeds[1]


def test_too_many_workers_is_refused_with_the_option_value_and_range(capsys, monkeypatch):
    # `sweep --num 30 --workers 1000` started a process per point (32 on a 2-CPU machine): no upper bound
    from sim_core.backend import WORKERS_PER_CPU

    monkeypatch.setattr("os.cpu_count", lambda: 2)
    for cmd in (["sweep", "chat-h100-llama8b", "--num", "30"], ["capacity", "chat-h100-llama8b"],
                ["plan", "chat-h100-llama8b", "--rate", "1"]):  # fmt: skip
        assert main([*cmd, "--workers", "1000", "--no-cache"]) == EXIT_BAD_INPUT
        err = capsys.readouterr().err
        assert f"--workers = 1000: must be 1 to {2 * WORKERS_PER_CPU}" in err and "Traceback" not in err


def test_a_sweeps_points_times_seeds_is_capped(capsys):
    # each option had its own cap: `--num 1000 --seeds 100` queued 100,000 runs
    from sim_core.sweep import MAX_SWEEP_RUNS

    assert main(["sweep", "chat-h100-llama8b", "--num", "1000", "--seeds", "100", "--workers", "1", "--no-cache"]) == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert "--num = 1000 x --seeds = 100 = 100,000 runs" in err and f"at most {MAX_SWEEP_RUNS:,} runs" in err


def test_a_sweep_whose_every_point_failed_exits_nonzero(capsys):
    # every row "error: Out of memory..." and exit code 0
    argv = ["sweep", "chat-h100-llama8b", "--knob", "memory_gib", "--num", "2", "--workers", "1", "--no-cache"]
    assert main([*argv, "--start", "1", "--stop", "2"]) == 1
    assert "every point of the sweep failed (2 of 2" in capsys.readouterr().err
    assert main([*argv, "--start", "1", "--stop", "80", "--set", "workload.num_requests=20"]) == 0  # one point ran


@pytest.mark.parametrize("scale", ["1e30", "1e-30", "0.001", "101"])
def test_a_capacity_scale_outside_its_range_is_refused_not_clipped(capsys, scale):
    # --scale 1e30 silently ran 200,000-request probes, 1e-30 500-request ones
    from sim_core.sweep import MAX_RUN_SCALE, MIN_RUN_SCALE

    assert main(["capacity", "chat-h100-llama8b", "--scale", scale, "--workers", "1", "--no-cache"]) == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert f"--scale = {float(scale):g}: must be {MIN_RUN_SCALE:g} to {MAX_RUN_SCALE:g}" in err


def test_a_capacity_scale_whose_runs_are_clipped_says_so(capsys):
    # within the range a probe's length is still bounded: said, not silent
    assert main(["capacity", "chat-h100-llama8b", "--seeds", "1", "--scale", "0.01", *SMALL]) == 0
    assert "NOTE: --scale 0.01: runs are bounded to 500-200,000 requests" in capsys.readouterr().out


def test_a_plans_lists_and_search_space_are_capped(capsys):
    # `plan --token-budgets` of 32 values x `--max-batches` of 16: 18,432 saturation probes before any output
    from sim_core.capacity_cli import MAX_PLAN_LIST_VALUES
    from sim_core.planner import MAX_PLAN_FAMILIES

    values = lambda n: ",".join(str(256 * (i + 1)) for i in range(n))  # noqa: E731
    base = ["plan", "chat-h100-llama8b", "--rate", "1", "--workers", "1", "--no-cache"]
    assert main([*base, "--token-budgets", values(MAX_PLAN_LIST_VALUES + 1)]) == EXIT_BAD_INPUT
    assert f"--token-budgets: {MAX_PLAN_LIST_VALUES + 1} values: at most {MAX_PLAN_LIST_VALUES}" in capsys.readouterr().err
    gpus = "a100-40gb,a100-80gb,a100-80gb-pcie,b200,h100-sxm,h200,l4,l40s,mi300x"
    assert main([*base, "--gpus", gpus, "--tp", "1,2,4,8", "--token-budgets", values(16), "--max-batches", values(16),
                 "--pd"]) == EXIT_BAD_INPUT  # fmt: skip
    err = capsys.readouterr().err
    assert "9 --gpus x 4 --tp x 3 --engines x 16 --token-budgets x 16 --max-batches x 5" in err and "--pd" in err
    assert f"= 138,240 configuration families: at most {MAX_PLAN_FAMILIES:,} per plan" in err
