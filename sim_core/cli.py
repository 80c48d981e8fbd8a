"""Command line: `python -m sim_core run PRESET_OR_FILE [--set key=value ...] [--out DIR] [--json]`,
`python -m sim_core presets`, `python -m sim_core validate`, `python -m sim_core capacity PRESET`,
`python -m sim_core sweep PRESET [--start A --stop B] [--seeds K]`, `python -m sim_core plan PRESET --rate R
[--ray [ADDRESS]]`. Bad input: a message and exit code 2.
"""

from __future__ import annotations

import argparse
import math
import re
import signal
import sys
import threading
from pathlib import Path
from typing import Any, get_args

from sim_core.capacity_cli import CAPACITY_COMMANDS, SET_HELP, add_capacity_commands, run_capacity_command
from sim_core.config import MAX_SEED, NotAField, SimConfig, allowed_range, format_validation_error
from sim_core.costmodel import MemoryPlanError
from sim_core.engine import run_simulation
from sim_core.inputs import BracketTextError, InputError, printable, value_from_text
from sim_core.metrics import no_value_reason, steady_exclusion_text
from sim_core.notes import run_notes
from sim_core.presets import (DEFAULT_SCENARIO, FAMILIES, PresetError, config_from_dict, describe_preset, list_presets, load_preset,
                              engine_label, not_a_field_text, read_preset_data, with_settings)
from sim_core.result import SimResult
from sim_core.traces import FORMAT_HELP, TraceFormat, TraceOptions
from sim_core.unused import unused_settings
from sim_core.words import counted, latency_text, percent

EXIT_BAD_INPUT = 2
EXIT_INTERRUPTED = 130  # 128 + SIGINT, what a shell reports for Ctrl-C
EXIT_OUT_OF_MEMORY = 1  # the input was valid; this machine could not hold the run
EXIT_STOPPED = 3  # run --strict: the run stopped at a limit before its last request finished
# What a run's memory grows with, as `--set` names them: said when it outgrows the machine (numpy's ArrayMemoryError
# was a traceback)
MEMORY_FIELDS = ("limits.max_ticks", "workload.num_requests", "limits.num_recorded_batches")


def package_version() -> str:
    """The installed package's version (pyproject.toml's, which `pip install -e .` records)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("llm-sched-explorer")
    except PackageNotFoundError:  # (run from a clone that was never installed)
        return "(not installed: pip install -e .)"


def apply_overrides(cfg: SimConfig, assignments: list[str]) -> SimConfig:
    """Apply `dotted.key=value` overrides (value parsed as JSON when it parses, else a string)."""
    return config_from_dict(override_data(cfg, assignments), "config (after --set)")


def override_data(cfg: SimConfig, assignments: list[str]) -> dict[str, Any]:
    """`cfg` as a dict with the overrides applied, not yet validated (`apply_overrides`): a part named by a preset
    (`engine=sglang`, `hardware=h200`) first, then the fields in the order given (`presets.with_settings`)."""
    settings: list[tuple[str, Any]] = []
    given: dict[str, str] = {}  # key -> its raw value
    for item in assignments:
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise PresetError(f"--set expects dotted.key=value, got {item!r}")
        if key in given:  # (the last one won without a word; a JSON object naming a key twice is refused too)
            raise PresetError(f"--set {key!r} given twice ({printable(given[key])[:40]!r}, then {printable(raw)[:40]!r}): "
                              "give it once")
        given[key] = raw
        try:
            value = value_from_text(raw, f"--set {key}")  # (a link's values are read by the same rule)
        except BracketTextError as err:
            raise PresetError(f"{err}, e.g. --set '{key}=\"...\"'") from None
        except InputError as err:
            raise PresetError(str(err)) from None
        if key == "engine" and not isinstance(value, str):  # (an engine preset is several sections at once)
            raise PresetError(f"--set engine expects an engine preset's name, got {printable(raw)!r}; engines: "
                              f"{', '.join(list_presets('engines'))}")
        settings.append((key, value))
    try:
        return with_settings(cfg.model_dump(mode="json"), settings)
    except NotAField as err:
        raise PresetError(not_a_field_text(err, "--set ")) from None


def format_summary(res: SimResult) -> str:
    s, cfg = res.summary, res.config
    peak_of = ""  # a deployment's peak is its fullest instance's share of that instance's own pool: said so
    if (full := getattr(res, "kv_peak_instance", None)) is not None:
        peak_of = f" ({full.name}, of its {full.result.memory.kv_capacity_tokens:,} tokens)"
    lines = [
        f"{cfg.name}: {cfg.model.name} on {cfg.hardware.num_gpus}x {cfg.hardware.name}, {engine_label(cfg)}, "
        f"workload {cfg.workload.name} (seed {cfg.seed})",
        f"  requests      {s.num_finished:,} finished / {s.num_requests:,} ({s.num_unfinished:,} unfinished), "
        f"{_ticks_text(res)}, makespan {s.makespan_s:,.2f} s",
        f"  throughput    {s.output_tokens_per_s:,.0f} output tok/s, {s.total_tokens_per_s:,.0f} total tok/s, "
        f"{s.requests_per_s:,.2f} req/s; goodput {s.goodput_requests_per_s:,.2f} req/s "
        f"({percent(s.slo_attainment)} meet TTFT <= {cfg.slo.ttft_s:g} s and TPOT <= {cfg.slo.tpot_s:g} s)",
        *(_latency_line(s, name, latency_text if name != "E2E" else (lambda x: f"{x:,.2f} s")) for name in ("TTFT", "TPOT", "ITL", "E2E")),
        f"  GPU           busy {s.gpu_busy_fraction:.0%} ({s.prefill_time_fraction:.0%} of it in ticks that prefill), "
        f"mean batch {s.mean_batch_size:.1f}, MFU {percent(s.mfu_mean)}, MBU {percent(s.mbu_mean)}",
        f"  KV cache      {s.kv_num_blocks:,} blocks ({s.kv_capacity_tokens:,} tokens), peak {s.kv_peak_usage:.0%}{peak_of}, "
        f"{s.num_preemptions:,} pre-emptions ({s.num_swap_outs:,} swaps, {s.num_recomputed_tokens:,} tokens recomputed)",
        *_steady_lines(res),
        "  (modelled by a calibrated roofline, not measured on a GPU)",
    ]
    if s.prefix_hit_rate_tokens is not None:
        lines.insert(-1, f"  prefix cache  {s.prefix_hit_rate_tokens:.1%} of prompt tokens hit at first admission ({s.prefix_hit_rate_blocks:.1%} "
                         f"of full blocks), {s.prefill_tokens_saved:,} prefill tokens saved, {s.prefix_blocks_evicted:,} blocks evicted")
    if s.spec_tokens_per_step is not None:
        lines.insert(-1, f"  speculative   {s.spec_tokens_per_step:.2f} tokens per decode step, {s.spec_draft_time_s:,.2f} s drafting")
    if cfg.deployment is not None:  # several engines (sim_core/cluster): say which, and one line per instance
        from sim_core.cluster import ClusterResult
        from sim_core.cluster.report import describe_deployment, format_instances

        lines[0] = (f"{cfg.name}: {cfg.model.name} on {describe_deployment(cfg)}, {cfg.scheduler.name}, "
                    f"workload {cfg.workload.name} (seed {cfg.seed})")  # fmt: skip
        if isinstance(res, ClusterResult):
            lines.insert(-1, format_instances(res))
    lines[-1:-1] = [f"  NOTE: {note}" for note in run_notes(res)]
    if s.stopped_reason:
        lines.insert(1, f"  WARNING: {s.stopped_reason}")
    return "\n".join(lines)


def _ticks_text(res: SimResult) -> str:
    """The run's busy ticks (Summary.num_ticks) and, for one engine, its idle ones: limits.max_ticks counts both, so a
    run stopped there said "stopped after 1 tick" above "0 ticks" (its one tick was idle, waiting for the first arrival).
    A deployment's limit counts each instance's own rows: its merged timeline's idle rows are not that count."""
    busy = counted(res.summary.num_ticks, "busy tick")
    idle = 0 if getattr(res, "instances", None) else res.timeline.num_ticks - res.summary.num_ticks
    return f"{busy} + {idle:,} idle" if idle > 0 else busy


def _latency_line(s, name: str, fmt) -> str:
    """One latency's p50/p90/p99 line; "n/a" and why when the run has none (one-token outputs have no TPOT or ITL: the
    line read "p50 nan ms  p90 nan ms  p99 nan ms")."""
    values = [getattr(s, f"{name.lower()}_p{p}_s") for p in (50, 90, 99)]
    if all(math.isnan(v) for v in values):
        return f"  {name:<13s} n/a ({no_value_reason(name, s.num_finished)})"
    return f"  {name:<13s} " + "  ".join(f"p{p} {fmt(v)}" for p, v in zip((50, 90, 99), values, strict=True))


def prepare_out_dir(out: Path, option: str = "--out") -> None:
    """Create the output directory before the run, so a bad --out (or `option`) fails fast with a message."""
    if out.exists() and not out.is_dir():
        raise PresetError(f"{option} {printable(str(out))!r} is an existing file; give a directory (it is created if missing)")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise PresetError(f"cannot create the {option} directory {printable(str(out))!r}: {err.strerror}") from None


def _steady_lines(res: SimResult) -> list[str]:
    """The steady-state window (sim_core.metrics): warm-up and drain excluded."""
    st = res.summary.steady
    if st is None:
        return []
    # (a run of fewer than 10 arrivals excludes none: "first and last 10 % excluded" was said of a window of all 4)
    excluded = f"{steady_exclusion_text()} excluded" if st.window_first_request > 0 else "too few arrivals to exclude any"
    lines = [
        f"  steady state  requests {st.window_first_request:,}-{st.window_last_request:,} by arrival ({excluded}; "
        f"t = {st.window_start_s:,.1f}-{st.window_end_s:,.1f} s): offered {st.arrival_rate_per_s:,.2f} req/s, "
        # (goodput is the offered rate's share that meets both SLOs, counted by arrival; completions are counted by
        # the time they end, so while the load rises the window's completed rate trails the offered one)
        f"goodput {st.goodput_requests_per_s:,.2f} req/s ({percent(st.slo_attainment)} of them meet both), completed "
        f"{st.requests_per_s:,.2f} req/s, {st.output_tokens_per_s:,.0f} output tok/s, TTFT p99 {_p99_text(st, 'TTFT')}, "
        f"TPOT p99 {_p99_text(st, 'TPOT')}"
    ]
    if st.note:
        lines.append(f"  NOTE: {st.note}")
    return lines


def _p99_text(st, name: str) -> str:
    """A steady window's p99 (latency_text), or "n/a" and why (it read "nan ms")."""
    v = getattr(st, f"{name.lower()}_p99_s")
    return f"n/a ({no_value_reason(name, st.num_finished)})" if math.isnan(v) else latency_text(v)


def remove_stale_outputs(out: Path, written: set[str], patterns: tuple[str, ...]) -> list[str]:
    """After a command wrote `written` into `out`, remove the files of its own kind (names matching `patterns`, regular
    expressions) that an earlier run left there and this one did not write: a deployment's instances.csv next to a
    single engine's files, a longer plan's config-5.json next to a shorter one's. Only after the new files are written
    (a run that fails leaves the old ones whole), and only names this command writes. Returns the names removed."""
    removed = []
    for path in sorted(out.iterdir()):
        if path.name not in written and path.is_file() and any(re.fullmatch(p, path.name) for p in patterns):
            path.unlink(missing_ok=True)
            removed.append(path.name)
    return removed


RUN_OUTPUTS = ("config.json", "summary.json", "requests.csv", "ticks.csv", "instances.csv")


def write_outputs(res: SimResult, out: Path) -> None:
    prepare_out_dir(out)
    (out / "config.json").write_text(res.config.model_dump_json(indent=2) + "\n")
    (out / "summary.json").write_text(res.summary.model_dump_json(indent=2) + "\n")
    frames = res.to_frames()
    frames["requests"].to_csv(out / "requests.csv", index=False)
    frames["ticks"].to_csv(out / "ticks.csv", index=False)
    if getattr(res, "instances", None):  # a deployment: one summary row per instance
        import pandas as pd

        from sim_core.cluster.report import instance_rows

        pd.DataFrame(instance_rows(res)).to_csv(out / "instances.csv", index=False)
    written = set(RUN_OUTPUTS) if getattr(res, "instances", None) else set(RUN_OUTPUTS) - {"instances.csv"}
    remove_stale_outputs(out, written, tuple(re.escape(name) for name in RUN_OUTPUTS))


def _cmd_run(args: argparse.Namespace) -> int:
    cfg = load_preset(args.preset)
    if args.set and not args.trace:
        cfg = apply_overrides(cfg, args.set)
    # (a trace option without a file used to be ignored: a trace preset replayed unscaled, unsampled, unwindowed)
    given = [f"--{name.replace('_', '-')}" for name, default in TRACE_OPTION_DEFAULTS.items() if getattr(args, name) != default]
    if given and not args.trace:
        raise PresetError(f"{', '.join(given)}: only with --trace FILE (a trace preset's own trace is replayed as it is)")
    if args.out:
        prepare_out_dir(Path(args.out))
    if args.trace:
        cfg = _with_trace_file(cfg, args)
    for unused in unused_settings(cfg, (a.partition("=")[0].strip() for a in args.set or ())):
        print(f"NOTE: --set {unused}", file=sys.stderr)
    res = run_simulation(cfg)
    if args.out:
        try:
            write_outputs(res, Path(args.out))
        except OSError as err:
            raise PresetError(f"cannot write to --out {printable(args.out)!r}: {err.strerror}") from None
    print(res.summary.model_dump_json() if args.json else format_summary(res))
    # (a script read a run stopped at its time limit, with most requests unfinished, as a success unless it parsed
    # stopped_reason)
    return EXIT_STOPPED if args.strict and res.summary.stopped_reason else 0


# --trace-X -> TraceOptions field X: the parser's defaults are the model's (they were restated here)
TRACE_OPTION_FIELDS = {"trace_format": "format", "trace_time_scale": "time_scale", "trace_start_s": "start_s",
                       "trace_end_s": "end_s", "trace_max_requests": "max_requests"}  # fmt: skip


TRACE_OPTION_DEFAULTS = {name: TraceOptions.model_fields[field].default for name, field in TRACE_OPTION_FIELDS.items()}


def _with_trace_file(cfg: SimConfig, args: argparse.Namespace) -> SimConfig:
    """Replay a trace file (a named public format, see sim_core/traces.py) with the run's config (the preset) and the
    --set overrides, validated once: the preset's generated workload, which the trace replaces, no longer decides
    whether an override holds (--set model.max_model_len=4096 was refused by the preset's 8192-token prompts)."""
    from pydantic import ValidationError

    from sim_core.traces import TraceError, config_replaying, load_trace, trace_data

    data = override_data(cfg, args.set or [])
    seed = data["seed"] if type(data["seed"]) is int and 0 <= data["seed"] <= MAX_SEED else cfg.seed  # (a bad one is named below)
    try:
        opts = TraceOptions(format=args.trace_format, time_scale=args.trace_time_scale, start_s=args.trace_start_s,
                            end_s=args.trace_end_s, max_requests=args.trace_max_requests, seed=seed)  # fmt: skip
    except ValidationError as err:  # (named as typed, with TraceOptions' ranges: SimConfig has no such fields)
        as_typed = {field: "--" + name.replace("_", "-") for name, field in TRACE_OPTION_FIELDS.items()}
        text = format_validation_error(err, "trace options", TraceOptions, as_typed)
        for field, option in as_typed.items():  # (a rule across options names them in its words: "end_s (10) must ...")
            if "_" in field:
                text = re.sub(rf"(?<![\w-]){field}(?![\w-])", option, text)
        raise PresetError(text) from None
    try:
        loaded = load_trace(args.trace, opts)
    except TraceError as err:  # (named once: a message of the file itself starts with its name already)
        name, text = Path(args.trace).name, str(err)
        # (a message that names the file already, as "cannot read trace file '...'" does, is not prefixed again)
        raise PresetError(text if text.startswith(f"{name}: ") or repr(str(args.trace)) in text else f"{name}: {text}") from None
    print(f"trace: {loaded.describe()}", file=sys.stderr)
    # trace_data replays every row under its own name: a --set of either (the first N rows) still holds (it
    # was silently replaced: --set workload.num_requests=5 replayed all 240 rows of a sample)
    given = {a.partition("=")[0].strip() for a in args.set or ()}
    kept = {k: data["workload"][k] for k in ("num_requests", "name") if f"workload.{k}" in given}
    trace_data(data, loaded.trace, f"trace {Path(args.trace).name}")["workload"].update(kept)
    return config_replaying(data, loaded, "config (after --set and --trace)")


def _cmd_presets(args: argparse.Namespace) -> int:
    families = FAMILIES if args.all else ("scenarios",)
    for fam in families:
        print(f"{fam}:" + (f"  (default: {DEFAULT_SCENARIO})" if fam == "scenarios" else ""))
        names = list_presets(fam)
        width = max(map(len, names), default=0)  # (a fixed 38 misaligned the longer cluster-… scenario names)
        for name in names:
            # (hardware and model presets have no description: their lines were blank) their name and source
            data = read_preset_data(fam, name)
            desc = describe_preset(fam, name) or " - ".join(str(data[k]) for k in ("name", "source") if data.get(k))
            # (cut mid-word with nothing to say so; `describe_preset` or the preset file has the whole text)
            print(f"  {name:{width}s} {desc if len(desc) <= 100 else desc[:99].rsplit(' ', 1)[0] + ' …'}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sim_core", description="Simulate an LLM inference server.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {package_version()}")
    sub = parser.add_subparsers(dest="cmd", required=True)
    run = sub.add_parser("run", help="run one scenario and print its summary")
    run.add_argument("preset", help="a preset name (see `presets`) or a config .json path")
    run.add_argument("--set", action="append", metavar="KEY=VALUE", help=SET_HELP)
    run.add_argument("--out", metavar="DIR", help="write config.json, summary.json, requests.csv (one row per request, "
                     "times in s), ticks.csv (one row per tick; flops and bytes are per GPU, as mfu and mbu read them) "
                     "here (and instances.csv for a deployment)")
    run.add_argument("--json", action="store_true", help="print the summary as one JSON object")
    run.add_argument("--strict", action="store_true", help=f"exit {EXIT_STOPPED} (after printing the summary) when the run "
                     "stopped at a limit (limits.max_sim_time_s, limits.max_ticks) before its last request finished")
    # (each option's range read from the model that checks it, TraceOptions: the help named none of them)
    trace_range = lambda name: allowed_range((name,), TraceOptions)  # noqa: E731
    run.add_argument("--trace", metavar="FILE", help="replay this trace file instead of the generated workload")
    run.add_argument("--trace-format", default=TRACE_OPTION_DEFAULTS["trace_format"], choices=get_args(TraceFormat),
                     help="format of --trace (default auto: from the header); csv: "
                     f"{FORMAT_HELP['csv']} (times in s)")
    run.add_argument("--trace-time-scale", type=float, default=TRACE_OPTION_DEFAULTS["trace_time_scale"],
                     help=f"multiply arrival gaps (0.5 = twice the rate; default 1), {trace_range('time_scale')}")
    run.add_argument("--trace-start-s", type=float, default=TRACE_OPTION_DEFAULTS["trace_start_s"],
                     help=f"window start, s after the trace's first row, {trace_range('start_s')} (default 0: its first row)")
    run.add_argument("--trace-end-s", type=float, default=TRACE_OPTION_DEFAULTS["trace_end_s"],
                     help=f"window end, s after the trace's first row, {trace_range('end_s')} (default: its last row)")
    run.add_argument("--trace-max-requests", type=int, default=TRACE_OPTION_DEFAULTS["trace_max_requests"],
                     help=f"sample this many requests (seeded by --set seed=), {trace_range('max_requests')} (default: "
                     "every row in the window)")
    fld = sub.add_parser("fields", help="every setting --set and a link take: type, default, allowed range, description")
    fld.add_argument("prefix", nargs="?", default="", help="only those under this section or path, e.g. scheduler or "
                     "scheduler.speculative")
    pre = sub.add_parser("presets", help="list the built-in scenarios")
    pre.add_argument("--all", action="store_true", help="also list hardware, models, workloads, engines and calibration profiles")
    val = sub.add_parser("validate", help="replay published measurements and report the cost model's error")
    val.add_argument("--fit", action="store_true", help="refit the calibration constants on the fitting rows and print them instead of the report "
                     "(nothing is written; about 20 minutes)")
    sub.add_parser("trends", help="simulate published comparisons (Sarathi-Serve vs vLLM, vLLM vs Orca and FasterTransformer; "
                   "disaggregated prefill/decode: DistServe, Splitwise, Dynamo)")  # fmt: skip
    from sim_core.bench import add_arguments as add_bench_arguments  # (this parser restated bench's options)

    add_bench_arguments(sub.add_parser("bench", help="benchmark the engine on fixed scenarios"))
    add_capacity_commands(sub)
    # (an unknown option is the subcommand's to report, with its usage: parse_args printed the top level's, which
    # lists no option of `run --jsn`'s, a review)
    args, extra = parser.parse_known_args(argv)
    if extra:
        sub.choices[args.cmd].error(f"unrecognized arguments: {' '.join(extra)}")
    # SIGTERM (`timeout`, a job scheduler, `kill`) ends a command as Ctrl-C does: through the `finally` blocks that close
    # its worker pool. Its default action ended this process alone, and the workers waited for work for good.
    on_main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _interrupt) if on_main_thread else None
    try:
        return _run_command(args)
    finally:
        if on_main_thread:
            signal.signal(signal.SIGTERM, previous)


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


# Options naming a path or an address: an empty one is refused, not read as "not given" (`--out ''` wrote nothing,
# `--trace ''` replayed the preset's workload, `--cache-dir ''` used the default cache, `--ray ''` ran on local processes)
PATH_OPTIONS = ("out", "trace", "cache_dir", "ray")


def check_empty_options(args: argparse.Namespace) -> None:
    """PresetError naming an option given as empty text (or only spaces)."""
    for name in PATH_OPTIONS:
        value = getattr(args, name, None)
        if isinstance(value, str) and not value.strip():
            option = "--" + name.replace("_", "-")
            what = "a ray:// address or 'auto' (or --ray alone)" if name == "ray" else "a path"
            raise PresetError(f"{option} {value!r}: empty; give {what}, or leave the option out")


def _run_command(args: argparse.Namespace) -> int:
    try:
        check_empty_options(args)
        if args.cmd in CAPACITY_COMMANDS:
            return run_capacity_command(args)
        if args.cmd == "run":
            return _cmd_run(args)
        if args.cmd == "presets":
            return _cmd_presets(args)
        if args.cmd == "fields":
            from sim_core.fields import fields_text

            try:
                print(fields_text(args.prefix))
            except ValueError as err:
                raise PresetError(str(err)) from None
            return 0
        if args.cmd == "bench":
            from sim_core.bench import run as run_bench

            return run_bench(args)
        if args.cmd == "trends":
            from sim_core.trends import main as trends_main

            return trends_main()
        from sim_core.validate import main as validate_main

        return validate_main(fit=args.fit)
    except (PresetError, MemoryPlanError) as err:
        print(f"error: {printable(str(err))}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except MemoryError:  # (numpy's ArrayMemoryError too; the frames that held the arrays are gone by now)
        print(f"error: out of memory: the {args.cmd} needs more memory than this machine gives it; lower "
              f"{', '.join(MEMORY_FIELDS[:-1])} or {MEMORY_FIELDS[-1]} (--set), or run on a machine with more memory",
              file=sys.stderr)  # fmt: skip
        return EXIT_OUT_OF_MEMORY
    except BrokenPipeError:
        return 0
    except KeyboardInterrupt:  # Ctrl-C: one line and the shell's code for SIGINT, not a traceback from mid-tick
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
