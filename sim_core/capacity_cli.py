"""The capacity subcommands of `python -m sim_core`: `capacity`, `sweep` and `plan` (issue 14).

Each runs on a local process pool by default, on Ray with `--ray [ADDRESS]` or $RAY_ADDRESS, shows
a progress bar on stderr and caches finished points on disk (see sim_core/backend.py).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from pathlib import Path
from typing import get_args

from pydantic import ValidationError

from sim_core.config import STATE_ROUTERS, Router, allowed_range, format_validation_error
from sim_core.inputs import parse_int_text, printable
from sim_core.presets import PresetError, load_preset
from sim_core.words import usd_text

CAPACITY_COMMANDS = ("capacity", "sweep", "plan")
# A search that ran and found nothing to report (`plan` with no row meeting the SLOs, `sweep` with every point failed):
# not bad input (cli.EXIT_BAD_INPUT, 2), checked before any run
EXIT_NO_RESULT = 1


def _load(args: argparse.Namespace):
    from sim_core.cli import apply_overrides

    cfg = load_preset(args.preset)
    return apply_overrides(cfg, args.set) if args.set else cfg


def _backend_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--ray", nargs="?", const=True, default=None, metavar="ADDRESS",
                   help="run on Ray: a ray:// address, 'auto', or nothing ($RAY_ADDRESS, else a local Ray)")
    from sim_core.backend import WORKERS_PER_CPU, max_local_workers

    p.add_argument("--workers", type=int, default=None, help=f"local processes, 1 to {WORKERS_PER_CPU} per CPU "
                   f"({max_local_workers()} here; default: one per CPU)")
    p.add_argument("--no-cache", action="store_true", help="do not read or write the per-point cache")
    p.add_argument("--cache-dir", default=None, help="per-point cache directory (default $SIM_CORE_CACHE_DIR, else ~/.cache/llm-sched-explorer/points)")
    from sim_core.sweep import CapacityObjective  # (its percentiles and default: this option restated both)

    field = CapacityObjective.model_fields["percentile"]
    p.add_argument("--percentile", type=int, choices=get_args(field.annotation), default=None,
                   help=f"SLO percentile of TTFT and TPOT (default P{field.default})")  # fmt: skip
    p.add_argument("--attainment", type=float, default=None,
                   help="use the DistServe rule instead: this share of requests meets both SLOs (e.g. 0.9)")


def _check_numbers(args: argparse.Namespace) -> None:
    """Counts and ranges of the options before any run: --seeds 0 ended in min() of no capacities, --start nan
    in int(nan), --scale nan in a worker's traceback (each a traceback instead of a message)."""
    from sim_core.backend import WORKERS_PER_CPU, max_local_workers
    from sim_core.sweep import check_num_points, check_repeats, check_sweep_runs

    if getattr(args, "workers", None) is not None and args.workers < 1:  # (0 or -3 ran on every CPU or in this process)
        raise PresetError(f"--workers = {args.workers}: must be >= 1")
    if getattr(args, "workers", None) is not None and args.workers > max_local_workers():  # (1000 started a process per point)
        raise PresetError(f"--workers = {args.workers}: must be 1 to {max_local_workers():,} ({WORKERS_PER_CPU} per CPU, "
                          f"{os.cpu_count() or 1} CPU(s) here)")  # fmt: skip
    if getattr(args, "num", None) is not None:
        check_num_points(args.num, "--num")
        check_sweep_runs(args.num, args.seeds, names=("--num", "--seeds"))
    check_repeats(getattr(args, "seeds", None), getattr(args, "scale", None), names=("--seeds", "--scale"))
    for name in ("start", "stop"):
        value = getattr(args, name, None)
        if value is not None and not math.isfinite(value):
            raise PresetError(f"--{name} = {value}: must be a finite number")


def _backend_from(args: argparse.Namespace):
    from sim_core.backend import PointCache, default_cache_dir, get_backend
    from sim_core.cli import prepare_out_dir
    from sim_core.sweep import CapacityObjective

    _check_numbers(args)
    if args.cache_dir is not None and args.no_cache:  # (the directory was silently not used)
        raise PresetError(f"--cache-dir {printable(args.cache_dir)!r} and --no-cache: give one")
    if args.cache_dir is not None:
        # (the cache ignores what it cannot read or write: a file or an unwritable path as --cache-dir ran every point
        # again without a word, and an interrupted search could not resume)
        prepare_out_dir(Path(args.cache_dir), "--cache-dir")
    cache = None if args.no_cache else PointCache(Path(args.cache_dir) if args.cache_dir else default_cache_dir())
    if args.attainment is not None and args.percentile is not None:  # (the percentile was silently dropped)
        raise PresetError(f"--percentile {args.percentile} and --attainment {args.attainment:g} are two rules for "
                          "meeting the SLOs: give one")  # fmt: skip
    rule = {"rule": "attainment", "attainment": args.attainment} if args.attainment is not None else \
        {} if args.percentile is None else {"percentile": args.percentile}  # fmt: skip
    try:  # (--attainment 2 or nan: a message naming the option, not pydantic's traceback)
        obj = CapacityObjective(**rule)
    except ValidationError as err:
        raise PresetError(format_validation_error(err, "--attainment", CapacityObjective)) from None
    return get_backend(args.ray, args.workers), cache, obj


def _cmd_capacity(args: argparse.Namespace) -> int:
    from sim_core import sweep
    from sim_core.backend import ProgressBar

    cfg = _load(args)
    backend, cache, obj = _backend_from(args)
    rel_tol = sweep.CAPACITY_REL_TOL  # (the summary line said "bisection to 1 %", typed out)
    try:
        lo, hi, caps = sweep.capacity_interval(cfg, obj, args.seeds, scale=args.scale, backend=backend, cache=cache,
                                               on_progress=ProgressBar("capacity"), rel_tol=rel_tol)  # fmt: skip
    finally:
        backend.close()
    # (a seed that met the objective at the search's highest rate has no failing rate: its capacity is a lower
    # bound, which was printed as if measured, e.g. "capacity 5,000.00-5,000.00 req/s")
    at_least = lambda c: ">= " if c.fail_rate_per_s is None and c.rate_per_s > 0 else ""  # noqa: E731
    # (and one that missed it at every rate it probed has none: "capacity 0.00-0.00 req/s" read as a measured zero)
    below = lambda c: c.rate_per_s == 0 and c.fail_rate_per_s is not None  # noqa: E731
    span = (f">= {lo:,.2f}" if all(at_least(c) for c in caps) else
            f"below {max(c.fail_rate_per_s for c in caps):,.3g}" if all(below(c) for c in caps) else
            f"{lo:,.2f}" if f"{lo:,.2f}" == f"{hi:,.2f}" else f"{lo:,.2f}-{hi:,.2f}")  # (one seed: "19.98-19.98")
    # every probe's length (steady_run_length grows with the rate): "runs of N+" named the last probe of seed 0, and
    # the search's probes below it ran fewer (the default scenario: "9,702+" of probes of 3,680-14,720 requests)
    sizes = sorted({s.num_requests for c in caps for _, s in c.probes})
    runs = f"{sizes[0]:,}" if len(sizes) == 1 else f"{sizes[0]:,}-{sizes[-1]:,}"
    clipped = args.scale != 1 and cfg.workload.trace is None and (
        sizes[0] <= sweep.MIN_CAPACITY_REQUESTS or sizes[-1] >= sweep.MAX_CAPACITY_REQUESTS)  # fmt: skip
    # (the scheduler named: `--set engine=sglang` printed "chat-h100-llama8b: capacity ..." as for the preset's own)
    print(f"{cfg.name} ({cfg.scheduler.name}): capacity {span} req/s over "
          f"{args.seeds} seed(s) ({obj.describe(cfg)}; runs of {runs} requests, bisection to {100 * rel_tol:g} %)")  # fmt: skip
    if clipped:  # (a run's length is bounded whatever --scale says: 1e30 ran the same probes as 100, unsaid)
        print(f"  NOTE: --scale {args.scale:g}: runs are bounded to {sweep.MIN_CAPACITY_REQUESTS:,}-"
              f"{sweep.MAX_CAPACITY_REQUESTS:,} requests, so some probes did not run {args.scale:g}x their steady-state length")
    if args.seeds > 1 and cfg.workload.trace is not None and len({c.rate_per_s for c in caps}) == 1:
        # (5.57-5.57 over 2 seeds, with no word of why)
        print("  NOTE: a trace replays its recorded arrivals and lengths, time-scaled to each rate: the seeds ran the "
              "same requests and agree")
    for k, c in enumerate(caps):
        ceiling = "  (met the objective at the search's highest rate: a lower bound)" if at_least(c) else ""
        shown = f"below {c.fail_rate_per_s:,.3g}" if below(c) else f"{at_least(c)}{c.rate_per_s:,.2f}"
        print(f"  seed {cfg.seed + k}: {shown} req/s{ceiling}" + (f"  NOTE: {c.note}" if c.note else ""))
    return 0


def _verdict(runs, cfg, obj) -> str:
    """A rate sweep row's word on the capacity objective: "met", or the first rule broken (`sweep.objective_miss`), over
    seeds the first seed's that misses it."""
    from sim_core.sweep import objective_miss

    misses = [(k, m) for k, r in enumerate(runs) if (m := objective_miss(r, cfg, obj)) is not None]
    return "met" if not misses else misses[0][1] if len(runs) == 1 else f"seed {misses[0][0]}: {misses[0][1]}"


def _cmd_sweep(args: argparse.Namespace) -> int:
    from sim_core.backend import ProgressBar
    from sim_core.sweep import SWEEP_KNOBS, band, capacity_from_sweep, check_end, check_range, default_range, knob_bounds, knob_name, knob_value, fell_behind, point_metric, rounded_points_note, run_sweep, saturation_per_s, shown_field, sweep_values

    cfg = _load(args)
    args.knob = knob_name(args.knob)
    knob_bounds(args.knob, cfg)  # (an unknown knob is named there)  # (a knob that cannot apply to cfg: said before the default range's saturation run)
    backend, cache, obj = _backend_from(args)
    start, stop = args.start, args.stop
    # (an end left out is the default range's, named so in a message: "--start = 500 must be below --stop = 30" named a
    # --stop nobody gave, and only after "sweeping rate from 500 to 30" was announced)
    names = ("--start" if start is not None else "the default start", "--stop" if stop is not None else "the default stop")
    said = None
    if start is None or stop is None:  # the Sweep page's default range (the rate: past the saturation rate, the knee)
        for name, given in zip(names, (start, stop)):
            if given is not None:  # (checked before the saturation run the default range needs)
                check_end(args.knob, given, cfg, name)
        saturation = saturation_per_s(cfg) if args.knob == "rate" else None
        start_d, stop_d = default_range(args.knob, knob_value(cfg, args.knob), saturation, args.num, cfg)
        start, stop = start_d if start is None else start, stop_d if stop is None else stop
        said = f": an offline run completes {saturation:,.1f} req/s" if saturation is not None else ""
    check_range(args.knob, start, stop, cfg, names=names)
    if said is not None:
        print(f"{cfg.name}: sweeping {args.knob} from {start:g} to {stop:g} (the default range{said})")
    values = sweep_values(args.knob, start, stop, args.num, cfg)
    if (note := rounded_points_note(args.knob, start, stop, args.num, values)) is not None:
        print(f"  NOTE: {note}")  # (the Sweep page says the same under its inputs)
    if args.fixed_length and args.knob != "rate":  # (taken without a word: it changes nothing there)
        print(f"  NOTE: --fixed-length is for rate sweeps; a sweep of {args.knob} always runs the config's "
              f"{cfg.workload.num_requests:,} requests per point")
    try:
        # (another knob's points keep the config's length, as they always have: the Sweep page offers the steady length)
        pts = run_sweep(cfg, args.knob, values, ProgressBar("sweep"), num_seeds=args.seeds, backend=backend, cache=cache,
                        steady_length=args.knob == "rate" and not args.fixed_length)  # fmt: skip
    finally:
        backend.close()
    def rng(lo: float, mid: float, hi: float, digits: int = 1) -> str:  # (a point without a steady window printed "nan":
        # its note says why; goodput in hundredths: 0.1 req/s lost the low rates' resolution)
        return ("n/a" if math.isnan(mid) else f"{mid:,.{digits}f}" if lo == hi else
                f"{mid:,.{digits}f} [{lo:,.{digits}f}-{hi:,.{digits}f}]")  # fmt: skip

    def value_text(v: float) -> str:  # (a rate point read 1.06667: four significant digits; whole values whole)
        return f"{v:g}" if float(v).is_integer() else f"{v:.4g}"

    print(f"{cfg.name}: {SWEEP_KNOBS[args.knob][1]}, steady-state window (a row that fell behind: its whole run), "
          f"median [min-max] over {args.seeds} seed(s)")
    print(f"  {args.knob:>10s}  {'output tok/s':>24s}  {'goodput req/s':>20s}  {'TTFT p99 ms':>24s}  capacity objective; note")
    for p in pts:
        if p.error:
            print(f"  {value_text(p.value):>10s}  error: {p.error}")
            continue
        behind = fell_behind(p, args.knob, cfg, obj)
        tok, good, ttft = (band(point_metric(p, shown_field(f, behind))) for f in ("output_tokens_per_s", "goodput_requests_per_s", "ttft_p99_s"))
        note = p.summary.steady.note if p.summary.steady else "no steady-state window"
        if behind:  # (which rows are whole runs: the header says what such a row is)
            note = f"fell behind its arrivals, whole-run figures; {note}" if note else "fell behind its arrivals, whole-run figures"
        # whether the row meets the capacity objective, and if not why (a row that fell behind read as meeting it:
        # its goodput and TTFT looked fine beside a capacity below it); over seeds, the first seed that misses it
        # (capacity is a rate's: another knob's runs keep the preset's length, too short for its keep-up rule, and no
        # capacity is read off them: "-")
        verdict = _verdict(p.seeds or (p.summary,), cfg, obj) if args.knob == "rate" else "-"
        # the whole note: cut at 60 characters it stopped at "the warm-up (first 10% of arrivals) lasted", before
        # what it found and how many requests to run instead (the last column, so the table stays aligned)
        print(f"  {value_text(p.value):>10s}  {rng(*tok):>24s}  {rng(*good, digits=2):>20s}  {rng(*(x * 1e3 for x in ttft)):>24s}  {verdict}"
              + (f"; {note}" if note else ""))
    if all(p.error for p in pts):  # (every row "error: ..." and exit code 0: a script read the sweep as done)
        print(f"error: every point of the sweep failed ({len(pts)} of {len(pts)}; see each row's error)", file=sys.stderr)
        return EXIT_NO_RESULT
    if args.knob == "rate":
        caps = [capacity_from_sweep(pts, cfg, objective=obj, seed_index=k) for k in range(args.seeds)]
        found = [c for c in caps if c is not None]
        top = max(p.value for p in pts)  # met at the highest swept rate: capacity is at least that (it said "= top")
        shown = lambda c: f">= {c:g}" if c == top else f"{c:g}"  # noqa: E731
        text = "below the first rate" if not found else f"{shown(min(found))} to {shown(max(found))} req/s" \
            if len(set(found)) > 1 else f"{shown(found[0])} req/s"  # fmt: skip
        print(f"  capacity ({obj.describe(cfg)}): {text} (a swept rate; `capacity` bisects)")
    return 0


# PlanSpec's fields as `plan` takes them: an error names the option typed, not the field ("num_results = 0" for --top 0)
PLAN_OPTIONS = {"target_rate_per_s": "--rate", "num_results": "--top", "max_replicas": "--max-replicas",
                "prices_usd_per_gpu_hour": "--price", "gpus": "--gpus", "tp_degrees": "--tp", "engines": "--engines",
                "token_budgets": "--token-budgets", "max_batches": "--max-batches", "router": "--router",
                "state_refresh_s": "--state-refresh-s", "disaggregated": "--pd", "evaluation": "--evaluation"}


def _cmd_plan(args: argparse.Namespace) -> int:
    from sim_core.backend import ProgressBar
    from sim_core.cli import prepare_out_dir, remove_stale_outputs
    from sim_core.planner import (
        PlanSpec, calibration_note, check_plan_space, default_router, default_state_refresh_s, plan, router_note,
    )  # fmt: skip

    cfg = _load(args)
    backend, cache, obj = _backend_from(args)
    prices = {}
    for item in args.price or []:
        gpu, sep, usd = item.partition("=")
        if gpu in prices:  # (the last one was kept silently)
            raise PresetError(f"--price {printable(gpu)!r} given twice ({printable(item)!r} after {prices[gpu]:g}): "
                              "give each GPU one price")  # fmt: skip
        try:
            prices[gpu] = float(usd)
        except ValueError:
            raise PresetError(f"--price expects gpu=usd_per_gpu_hour, got {item!r}") from None
    fields = {"target_rate_per_s": args.rate, "objective": obj, "max_replicas": args.max_replicas,
              "num_results": args.top, "prices_usd_per_gpu_hour": prices, "gpus": _split(args.gpus, "--gpus"),
              "tp_degrees": _split_ints(args.tp, "--tp"), "engines": _split(args.engines, "--engines"),
              "token_budgets": _split_ints(args.token_budgets, "--token-budgets"),
              "max_batches": _split_ints(args.max_batches, "--max-batches"),
              "router": args.router if args.router is not None else default_router(cfg),
              "state_refresh_s": args.state_refresh_s if args.state_refresh_s is not None else default_state_refresh_s(cfg),
              "disaggregated": args.pd or None,
              "evaluation": args.evaluation}  # fmt: skip
    try:
        spec = PlanSpec.model_validate({k: v for k, v in fields.items() if v is not None})
    except ValidationError as err:
        raise PresetError(format_validation_error(err, "plan", PlanSpec, names=PLAN_OPTIONS)) from None
    check_plan_space(spec, PLAN_OPTIONS)  # (before the saturation probes: one per family)
    if args.out:  # before the search (an existing file as --out was a traceback after the whole plan had run)
        prepare_out_dir(Path(args.out))
    import time

    t0 = time.monotonic()
    try:
        bars: dict[int, ProgressBar] = {}  # one line per phase: the candidates, confirmations, headroom

        def show(p) -> None:
            bars.setdefault(p.step, ProgressBar(f"plan {p.step}/{p.num_steps} {p.what}"))(p.done, p.total)

        result = plan(cfg, spec, backend=backend, cache=cache, on_progress=show)
    finally:
        backend.close()
    elapsed = time.monotonic() - t0
    p = spec.objective.percentile
    print(f"Plan for {spec.target_rate_per_s:g} req/s of {cfg.workload.name} traffic on {cfg.model.name}: "
          f"{spec.objective.describe(cfg)}")
    print(f"  {result.num_candidates:,} candidates, {result.runs_text()}, {elapsed:,.1f} s on {backend.name}; "
          f"pruned: {result.pruned_text()}")
    print(f"  {result.band.text()}")
    print(f"  {spec.describe_evaluation(cfg)}")
    if (note := router_note(cfg, spec)) is not None:
        print(f"  router: {note}")
    if (note := calibration_note(cfg, spec)) is not None:
        print(f"  calibration: {note}")
    if not result.rows:
        print(f"  {result.no_answer_text('widen it (--max-replicas, --gpus, --tp)')}")
        return EXIT_NO_RESULT
    table = result.table()
    w = max(44, *(len(row["config"]) for row in table))  # (whole: "tensorrt-llm-max-utilization" was cut at 44)
    print(f"  {'configuration':{w}s} {'GPUs':>4s} {'$/h':>8s} {'$/M out':>8s} {'good/$':>8s} "
          f"{'TTFT p' + str(p):>10s} {'TPOT p' + str(p):>10s} {'capacity':>9s} {'headroom':>8s}")
    for row in table:
        cap = f"{row['capacity_per_s']:,.1f}" if row["capacity_per_s"] is not None else "-"
        head = f"{row['headroom']:+.0%}" if row["headroom"] is not None else "-"
        print(f"  {row['config']:{w}s} {row['gpus']:4d} {row['usd_per_hour']:8.2f} "
              f"{usd_text(row['usd_per_million_output_tokens'], ''):>8s} {row['good_requests_per_usd']:8,.0f} "
              f"{row[f'ttft_p{p}_s'] * 1e3:7.0f} ms {row[f'tpot_p{p}_s'] * 1e3:7.1f} ms {cap:>9s} {head:>8s}")
    # (what the columns are: "good/$" and "$/M out" were named nowhere, a review)
    print(f"  $/h: the deployment's GPUs per hour; $/M out: per million output tokens at the target rate; good/$: requests "
          f"meeting the SLOs per dollar; {spec.capacity_text()}; headroom: capacity / target - 1")
    for rows, note in result.row_notes():  # (a "-" in the table, or a capacity the probe could not vouch for)
        print(f"  NOTE ({rows}): {note}")
    if args.out:
        out = Path(args.out)
        try:
            (out / "plan.json").write_text(json.dumps(result.table(), indent=2) + "\n")
            for i, row in enumerate(result.rows):
                (out / f"config-{i + 1}.json").write_text(row.config.model_dump_json(indent=2) + "\n")
            # (an earlier, longer plan's config-N.json beyond this one's rows went on reading as part of this plan)
            remove_stale_outputs(out, {"plan.json"} | {f"config-{i + 1}.json" for i in range(len(result.rows))},
                                 (r"plan\.json", r"config-\d+\.json"))  # fmt: skip
        except OSError as err:
            raise PresetError(f"cannot write to --out {printable(args.out)!r}: {err.strerror}") from None
        print(f"  wrote {out / 'plan.json'} and each row's simulated config (config-N.json: `run` it, or open it in the app)")
    return 0


def _split(text: str | None, option: str) -> tuple[str, ...] | None:
    """A comma-separated option's items (None: not given); an empty list or item is named (`''`, `1,,2`)."""
    if text is None:
        return None  # (`--gpus ''` was read as not given: a plan over every priced GPU)
    items = tuple(x.strip() for x in text.split(","))
    if not any(items):
        raise PresetError(f"{option} {printable(text)!r}: an empty list; give at least one value (comma-separated), or leave "
                          "the option out for its default")  # fmt: skip
    if not all(items):
        raise PresetError(f"{option} {printable(text)!r}: an empty item; give comma-separated values like 1,2,4")
    return items


# The most values of a list of numbers in `plan` (--tp, --token-budgets, --max-batches): each multiplies the search
# space (MAX_PLAN_FAMILIES), and 32 token budgets x 16 max batches made 18,432 families. 16 is four times the Plan page's
# (the preset's own and 3 more).
MAX_PLAN_LIST_VALUES = 16


def _split_ints(text: str | None, option: str) -> tuple[int, ...] | None:
    """Whole numbers of a comma-separated option (`--tp a` or `1.5` was int()'s ValueError, a traceback)."""
    items = _split(text, option)
    if items is None:
        return None
    if len(items) > MAX_PLAN_LIST_VALUES:
        raise PresetError(f"{option}: {len(items)} values: at most {MAX_PLAN_LIST_VALUES} (each multiplies the search "
                          "space); give fewer")  # fmt: skip
    try:
        return tuple(parse_int_text(x) for x in items)
    except ValueError as err:
        raise PresetError(f"{option} {printable(text)!r}: {err}; give comma-separated whole numbers like 1,2,4") from None


# Every command's --set, said once: what a value may be, and that a part named by a preset goes first
SET_HELP = ("override a setting, repeatable: section.field=VALUE, VALUE as JSON (64, 0.5, true, [..], {..}) or else "
            "text, e.g. scheduler.max_num_seqs=64; a section as an object sets the fields it names and keeps the rest, "
            "e.g. scheduler='{\"max_num_seqs\": 64}'; engine=NAME, hardware=NAME, model=NAME or workload=NAME swaps that "
            "part for a preset, before the fields whatever the order; every field: python -m sim_core fields")


def add_capacity_commands(sub) -> None:
    cap = sub.add_parser("capacity", help="steady-state capacity (req/s) of a scenario, as an interval over seeds")
    cap.add_argument("preset", help="a preset name or a config .json path")
    cap.add_argument("--set", action="append", metavar="KEY=VALUE", help=SET_HELP)
    from sim_core.sweep import MAX_RUN_SCALE, MAX_SWEEP_POINTS, MAX_SWEEP_RUNS, MAX_SWEEP_SEEDS, MIN_RUN_SCALE, RATE_SWEEP_PAST_SATURATION, SWEEP_KNOBS

    cap.add_argument("--seeds", type=int, default=3, help=f"seeds to repeat over (the interval's width), 1 to {MAX_SWEEP_SEEDS} (default 3)")
    cap.add_argument("--scale", type=float, default=1.0, help=f"run length multiplier (1 = the steady-state length), {MIN_RUN_SCALE:g} to {MAX_RUN_SCALE:g} (default 1)")
    _backend_args(cap)
    sw = sub.add_parser("sweep", help="sweep one knob (steady-state metrics; bands over seeds)")
    sw.add_argument("preset", help="a preset name or a config .json path")
    # (the help listed 8 of its 10 knobs, replicas and prefill_instances were missing, and typed out the rate's 1.1x)

    sw.add_argument("--knob", default="rate", help="the swept knob (default rate), one of: "
                    + "; ".join(f"{knob} = {label}" for knob, (_, label, _) in SWEEP_KNOBS.items()))  # fmt: skip
    sw.add_argument("--start", type=float, help="first value, in the knob's unit (see --knob); default: as the Sweep page "
                    "(the rate: a quarter of the lower of the current and the saturation rate; other knobs: half the current value)")
    sw.add_argument("--stop", type=float, help="last value; default: as the Sweep page (the rate: past "
                    f"{RATE_SWEEP_PAST_SATURATION:g}x the saturation "
                    "rate and twice the current rate, in round steps; other knobs: twice the current value)")
    sw.add_argument("--num", type=int, default=8, help=f"points, 1 to {MAX_SWEEP_POINTS:,} (default 8)")
    sw.add_argument("--seeds", type=int, default=1, help=f"repeat every point over this many seeds, 1 to {MAX_SWEEP_SEEDS} "
                    f"(default 1; --num x --seeds at most {MAX_SWEEP_RUNS:,} runs)")
    sw.add_argument("--fixed-length", action="store_true",
                    help="rate knob: keep the config's num_requests (default: a steady-state run length per rate)")
    sw.add_argument("--set", action="append", metavar="KEY=VALUE", help=SET_HELP)
    _backend_args(sw)
    from sim_core.planner import MAX_PLAN_FAMILIES, PlanSpec  # its defaults, shown here (the help restated two of them)

    default = lambda name: PlanSpec.model_fields[name].default  # noqa: E731
    listed = lambda name: ",".join(map(str, default(name)))  # noqa: E731
    ranged = lambda *loc: allowed_range(loc, PlanSpec)  # noqa: E731  (the bounds PlanSpec checks)
    pl = sub.add_parser("plan", help="cheapest deployments (GPU x TP x replicas x engine) meeting SLOs at a rate")
    pl.add_argument("preset", help="the traffic, model and SLOs: a preset name or a config .json path")
    pl.add_argument("--rate", type=float, required=True, help=f"target requests/s for the whole deployment, {ranged('target_rate_per_s')}")
    pl.add_argument("--set", action="append", metavar="KEY=VALUE", help=SET_HELP)
    pl.add_argument("--gpus", help="hardware presets, comma-separated (default: every GPU with a price)")
    pl.add_argument("--tp", help=f"tensor-parallel degrees, comma-separated (default {listed('tp_degrees')})")
    pl.add_argument("--engines", help=f"engine presets, comma-separated (default {listed('engines')})")
    pl.add_argument("--token-budgets", help="max_num_batched_tokens values (tokens), comma-separated, at most "
                    f"{MAX_PLAN_LIST_VALUES} (default: each engine's)")
    pl.add_argument("--max-batches", help="max_num_seqs values (sequences), comma-separated, at most "
                    f"{MAX_PLAN_LIST_VALUES} (default: each engine's; the search space is at most {MAX_PLAN_FAMILIES:,} "
                    "GPU x TP x engine x token budget x max batch families)")
    pl.add_argument("--max-replicas", type=int, default=None,
                    help=f"most replicas of one configuration, {ranged('max_replicas')} (default {default('max_replicas')})")
    pl.add_argument("--price", action="append", metavar="GPU=USD", help=f"price per GPU-hour in USD, {ranged('prices_usd_per_gpu_hour', 'x')}, e.g. l40s=1.2")
    pl.add_argument("--top", type=int, default=None, help=f"configurations to list, {ranged('num_results')} (default {default('num_results')})")
    pl.add_argument("--out", metavar="DIR", help="write plan.json and each row's simulated config")
    pl.add_argument("--pd", action="store_true", help="also search disaggregated xPyD splits (per-pool TP from --tp)")
    pl.add_argument("--router", default=None, help="router in front of the replicas (default: the config's deployment.router, "
                    f"{default('router')} for one engine): "
                    + ", ".join(get_args(Router)))  # (checked by PlanSpec: a bad name is reported with the allowed ones)
    pl.add_argument("--state-refresh-s", type=float, default=None, metavar="SECONDS",
                    help="seconds between the router's refreshes of engine state, for " + ", ".join(STATE_ROUTERS) + " "
                    "(default: the config's deployment.state_refresh_s, "
                    f"{default('state_refresh_s'):g} for one engine; 0 = exact)")  # (checked by PlanSpec, as --router)
    pl.add_argument("--evaluation", choices=get_args(PlanSpec.model_fields["evaluation"].annotation), default=None,
                    help=f"default {default('evaluation')}. prefilter: search one replica at rate / replicas, confirm the "
                    "finalists as deployments; deployment: simulate every candidate as a deployment (exact, slower); "
                    "one_replica: no confirmation")  # fmt: skip
    _backend_args(pl)


def run_capacity_command(args: argparse.Namespace) -> int:
    return {"capacity": _cmd_capacity, "sweep": _cmd_sweep, "plan": _cmd_plan}[args.cmd](args)
