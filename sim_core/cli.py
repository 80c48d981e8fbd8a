"""Command line: `python -m sim_core run PRESET_OR_FILE [--set key=value ...] [--out DIR] [--json]`,
`python -m sim_core presets`, `python -m sim_core validate`, `python -m sim_core capacity PRESET`,
`python -m sim_core sweep PRESET --start A --stop B [--seeds K]`, `python -m sim_core plan PRESET --rate R
[--ray [ADDRESS]]`. Bad input: a message and exit code 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from sim_core.config import SimConfig, format_validation_error
from sim_core.costmodel import MemoryPlanError
from sim_core.engine import run_simulation
from sim_core.presets import FAMILIES, DEFAULT_SCENARIO, PresetError, config_from_dict, describe_preset, list_presets, load_preset
from sim_core.result import SimResult

EXIT_BAD_INPUT = 2


def apply_overrides(cfg: SimConfig, assignments: list[str]) -> SimConfig:
    """Apply `dotted.key=value` overrides (value parsed as JSON when it parses, else a string)."""
    data: dict[str, Any] = cfg.model_dump(mode="json")
    for item in assignments:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise PresetError(f"--set expects dotted.key=value, got {item!r}")
        try:
            value = json.loads(raw)
        except json.JSONDecodeError:
            value = raw
        node = data
        parts = key.strip().split(".")
        for part in parts[:-1]:
            if not isinstance(node.get(part), dict):
                raise PresetError(f"--set {key}: {part!r} is not a section of the config")
            node = node[part]
        if parts[-1] not in node:
            raise PresetError(f"--set {key}: unknown field {parts[-1]!r}; fields here: {', '.join(sorted(node))}")
        node[parts[-1]] = value
    return config_from_dict(data, "config (after --set)")


def format_summary(res: SimResult) -> str:
    s, cfg = res.summary, res.config
    ms = lambda x: f"{x * 1e3:,.1f} ms"  # noqa: E731
    lines = [
        f"{cfg.name}: {cfg.model.name} on {cfg.hardware.num_gpus}x {cfg.hardware.name}, {cfg.scheduler.name}, "
        f"workload {cfg.workload.name} (seed {cfg.seed})",
        f"  requests      {s.num_finished:,} finished / {s.num_requests:,} ({s.num_unfinished:,} unfinished), "
        f"{s.num_ticks:,} ticks, makespan {s.makespan_s:,.2f} s",
        f"  throughput    {s.output_tokens_per_s:,.0f} output tok/s, {s.total_tokens_per_s:,.0f} total tok/s, "
        f"{s.requests_per_s:,.2f} req/s; goodput {s.goodput_requests_per_s:,.2f} req/s "
        f"({s.slo_attainment:.0%} meet TTFT <= {cfg.slo.ttft_s:g} s and TPOT <= {cfg.slo.tpot_s:g} s)",
        f"  TTFT          p50 {ms(s.ttft_p50_s)}  p90 {ms(s.ttft_p90_s)}  p99 {ms(s.ttft_p99_s)}",
        f"  TPOT          p50 {ms(s.tpot_p50_s)}  p90 {ms(s.tpot_p90_s)}  p99 {ms(s.tpot_p99_s)}",
        f"  ITL           p50 {ms(s.itl_p50_s)}  p90 {ms(s.itl_p90_s)}  p99 {ms(s.itl_p99_s)}",
        f"  E2E           p50 {s.e2e_p50_s:,.2f} s  p90 {s.e2e_p90_s:,.2f} s  p99 {s.e2e_p99_s:,.2f} s",
        f"  GPU           busy {s.gpu_busy_fraction:.0%}, prefill share {s.prefill_time_fraction:.0%}, "
        f"mean batch {s.mean_batch_size:.1f}, MFU {s.mfu_mean:.0%}, MBU {s.mbu_mean:.0%}",
        f"  KV cache      {s.kv_num_blocks:,} blocks ({s.kv_capacity_tokens:,} tokens), peak {s.kv_peak_usage:.0%}, "
        f"{s.num_preemptions:,} pre-emptions ({s.num_swap_outs:,} swaps, {s.num_recomputed_tokens:,} tokens recomputed)",
        *_steady_lines(res),
        "  (modelled by a calibrated roofline, not measured on a GPU)",
    ]
    if s.stopped_reason:
        lines.insert(1, f"  WARNING: {s.stopped_reason}")
    return "\n".join(lines)


def _steady_lines(res: SimResult) -> list[str]:
    """The steady-state window (sim_core.metrics): warm-up and drain excluded."""
    st, cfg = res.summary.steady, res.config
    if st is None:
        return []
    lines = [
        f"  steady state  requests {st.window_first_request:,}-{st.window_last_request:,} by arrival (first and last 10 % "
        f"excluded; t = {st.window_start_s:,.1f}-{st.window_end_s:,.1f} s): offered {st.arrival_rate_per_s:,.2f} req/s, "
        f"served {st.requests_per_s:,.2f} req/s, {st.output_tokens_per_s:,.0f} output tok/s, goodput "
        f"{st.goodput_requests_per_s:,.2f} req/s ({st.slo_attainment:.0%} meet both), TTFT p99 {st.ttft_p99_s * 1e3:,.1f} ms, "
        f"TPOT p99 {st.tpot_p99_s * 1e3:,.1f} ms"
    ]
    if st.note:
        lines.append(f"  NOTE: {st.note}")
    return lines


def write_outputs(res: SimResult, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(res.config.model_dump_json(indent=2) + "\n")
    (out / "summary.json").write_text(res.summary.model_dump_json(indent=2) + "\n")
    frames = res.to_frames()
    frames["requests"].to_csv(out / "requests.csv", index=False)
    frames["ticks"].to_csv(out / "ticks.csv", index=False)


def _cmd_run(args: argparse.Namespace) -> int:
    cfg = load_preset(args.preset)
    if args.set:
        cfg = apply_overrides(cfg, args.set)
    res = run_simulation(cfg)
    if args.out:
        write_outputs(res, Path(args.out))
    print(res.summary.model_dump_json() if args.json else format_summary(res))
    return 0


def _cmd_presets(args: argparse.Namespace) -> int:
    families = FAMILIES if args.all else ("scenarios",)
    for fam in families:
        print(f"{fam}:" + (f"  (default: {DEFAULT_SCENARIO})" if fam == "scenarios" else ""))
        for name in list_presets(fam):
            desc = describe_preset(fam, name)
            print(f"  {name:38s} {desc[:100]}")
    return 0


def _backend_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--ray", nargs="?", const=True, default=None, metavar="ADDRESS",
                   help="run on Ray: a ray:// address, 'auto', or nothing ($RAY_ADDRESS, else a local Ray)")
    p.add_argument("--workers", type=int, default=None, help="local processes (default: one per CPU)")
    p.add_argument("--no-cache", action="store_true", help="do not read or write the per-point cache")
    p.add_argument("--cache-dir", default=None, help="per-point cache directory (default $SIM_CORE_CACHE_DIR or ~/.cache/...)")
    p.add_argument("--percentile", type=int, choices=(50, 90, 99), default=99, help="SLO percentile (default P99)")
    p.add_argument("--attainment", type=float, default=None,
                   help="use the DistServe rule instead: this share of requests meets both SLOs (e.g. 0.9)")


def _backend_from(args: argparse.Namespace):
    from sim_core.backend import PointCache, default_cache_dir, get_backend
    from sim_core.sweep import CapacityObjective

    cache = None if args.no_cache else PointCache(Path(args.cache_dir) if args.cache_dir else default_cache_dir())
    obj = CapacityObjective(percentile=args.percentile) if args.attainment is None else \
        CapacityObjective(rule="attainment", attainment=args.attainment)  # fmt: skip
    return get_backend(args.ray, args.workers), cache, obj


def _cmd_capacity(args: argparse.Namespace) -> int:
    from sim_core.backend import ProgressBar
    from sim_core.sweep import capacity_interval

    cfg = load_preset(args.preset)
    if args.set:
        cfg = apply_overrides(cfg, args.set)
    backend, cache, obj = _backend_from(args)
    try:
        lo, hi, caps = capacity_interval(cfg, obj, args.seeds, scale=args.scale, backend=backend, cache=cache,
                                         on_progress=ProgressBar("capacity"))  # fmt: skip
    finally:
        backend.close()
    print(f"{cfg.name}: capacity {lo:,.2f}-{hi:,.2f} req/s over {args.seeds} seed(s) "
          f"({obj.describe(cfg)}; runs of {caps[0].probes[-1][1].num_requests:,}+ requests, bisection to 1 %)")  # fmt: skip
    for k, c in enumerate(caps):
        print(f"  seed {cfg.seed + k}: {c.rate_per_s:,.2f} req/s" + (f"  NOTE: {c.note}" if c.note else ""))
    return 0


def _cmd_sweep(args: argparse.Namespace) -> int:
    from sim_core.backend import ProgressBar
    from sim_core.sweep import SWEEP_KNOBS, band, capacity_from_sweep, point_metric, run_sweep, sweep_values

    cfg = load_preset(args.preset)
    if args.set:
        cfg = apply_overrides(cfg, args.set)
    if args.knob not in SWEEP_KNOBS:
        raise PresetError(f"unknown knob {args.knob!r}; one of {', '.join(SWEEP_KNOBS)}")
    backend, cache, obj = _backend_from(args)
    values = sweep_values(args.knob, args.start, args.stop, args.num)
    try:
        pts = run_sweep(cfg, args.knob, values, ProgressBar("sweep"), num_seeds=args.seeds, backend=backend, cache=cache,
                        steady_length=not args.fixed_length)  # fmt: skip
    finally:
        backend.close()
    rng = lambda lo, mid, hi: f"{mid:,.1f}" if lo == hi else f"{mid:,.1f} [{lo:,.1f}-{hi:,.1f}]"  # noqa: E731
    print(f"{cfg.name}: {SWEEP_KNOBS[args.knob][1]}, steady-state window, median [min-max] over {args.seeds} seed(s)")
    print(f"  {args.knob:>10s}  {'output tok/s':>24s}  {'goodput req/s':>20s}  {'TTFT p99 ms':>24s}  note")
    for p in pts:
        if p.error:
            print(f"  {p.value:>10g}  error: {p.error}")
            continue
        tok, good, ttft = (band(point_metric(p, f"steady.{f}")) for f in ("output_tokens_per_s", "goodput_requests_per_s", "ttft_p99_s"))
        note = p.summary.steady.note if p.summary.steady else "no steady-state window"
        print(f"  {p.value:>10g}  {rng(*tok):>24s}  {rng(*good):>20s}  {rng(*(x * 1e3 for x in ttft)):>24s}  {(note or '')[:60]}")
    if args.knob == "rate":
        caps = [capacity_from_sweep(pts, cfg, objective=obj, seed_index=k) for k in range(args.seeds)]
        found = [c for c in caps if c is not None]
        text = "below the first rate" if not found else f"{min(found):g}-{max(found):g} req/s" if len(found) > 1 else f"{found[0]:g} req/s"
        print(f"  capacity ({obj.describe(cfg)}): {text} (a swept rate; `capacity` bisects)")
    return 0


def _cmd_plan(args: argparse.Namespace) -> int:
    from sim_core.backend import ProgressBar
    from sim_core.planner import PlanSpec, plan

    cfg = load_preset(args.preset)
    if args.set:
        cfg = apply_overrides(cfg, args.set)
    backend, cache, obj = _backend_from(args)
    prices = {}
    for item in args.price or []:
        gpu, sep, usd = item.partition("=")
        try:
            prices[gpu] = float(usd)
        except ValueError:
            raise PresetError(f"--price expects gpu=usd_per_gpu_hour, got {item!r}") from None
    split = lambda v, f: tuple(f(x) for x in v.split(",")) if v else None  # noqa: E731
    fields = {"target_rate_per_s": args.rate, "objective": obj, "max_replicas": args.max_replicas,
              "num_results": args.top, "prices_usd_per_gpu_hour": prices, "gpus": split(args.gpus, str),
              "tp_degrees": split(args.tp, int), "engines": split(args.engines, str),
              "token_budgets": split(args.token_budgets, int), "max_batches": split(args.max_batches, int)}  # fmt: skip
    try:
        spec = PlanSpec.model_validate({k: v for k, v in fields.items() if v is not None})
    except ValidationError as err:
        raise PresetError(format_validation_error(err, "plan")) from None
    import time

    t0 = time.monotonic()
    try:
        result = plan(cfg, spec, backend=backend, cache=cache, on_progress=ProgressBar("plan"))
    finally:
        backend.close()
    elapsed = time.monotonic() - t0
    p = spec.objective.percentile
    print(f"Plan for {spec.target_rate_per_s:g} req/s of {cfg.workload.name} traffic on {cfg.model.name}: "
          f"{spec.objective.describe(cfg)}")
    print(f"  {result.num_candidates:,} candidates, {len(result.evaluated):,} simulated, {elapsed:,.1f} s on {backend.name}; "
          "pruned: " + ", ".join(f"{n:,} {why}" for why, n in result.pruned.items()))
    print(f"  {result.band.text()}")
    print("  replicas behind a random router, simulated as one replica at rate / replicas; no P:D disaggregation yet")
    if not result.rows:
        print("  no configuration in the search space meets the SLOs at this rate: widen it (--max-replicas, --gpus, --tp)")
        return 1
    print(f"  {'configuration':44s} {'GPUs':>4s} {'$/h':>8s} {'$/M out':>8s} {'good/$':>8s} "
          f"{'TTFT p' + str(p):>10s} {'TPOT p' + str(p):>10s} {'capacity':>9s} {'headroom':>8s}")
    for row in result.table():
        cap = f"{row['capacity_per_s']:,.1f}" if row["capacity_per_s"] is not None else "-"
        head = f"{row['headroom']:+.0%}" if row["headroom"] is not None else "-"
        print(f"  {row['config'][:44]:44s} {row['gpus']:4d} {row['usd_per_hour']:8.2f} "
              f"{row['usd_per_million_output_tokens']:8.3f} {row['good_requests_per_usd']:8,.0f} "
              f"{row[f'ttft_p{p}_s'] * 1e3:8.0f}ms {row[f'tpot_p{p}_s'] * 1e3:8.1f}ms {cap:>9s} {head:>8s}")
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "plan.json").write_text(json.dumps(result.table(), indent=2) + "\n")
        for i, row in enumerate(result.rows):
            (out / f"config-{i + 1}.json").write_text(row.replica_config.model_dump_json(indent=2) + "\n")
        print(f"  wrote {out / 'plan.json'} and one replica's config per row (config-N.json: `run` it, or open it in the app)")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sim_core", description="Simulate an LLM inference server.")
    sub = parser.add_subparsers(dest="cmd", required=True)
    run = sub.add_parser("run", help="run one scenario and print its summary")
    run.add_argument("preset", help="a preset name (see `presets`) or a config .json path")
    run.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a field, e.g. scheduler.max_num_seqs=64")
    run.add_argument("--out", metavar="DIR", help="write config.json, summary.json, requests.csv, ticks.csv here")
    run.add_argument("--json", action="store_true", help="print the summary as one JSON object")
    pre = sub.add_parser("presets", help="list the built-in scenarios")
    pre.add_argument("--all", action="store_true", help="also list hardware, models, workloads and engines")
    val = sub.add_parser("validate", help="replay published measurements and report the cost model's error")
    val.add_argument("--fit", action="store_true", help="refit the calibration defaults on the fitting rows")
    sub.add_parser("trends", help="simulate published comparisons (Sarathi-Serve vs vLLM, paging vs Orca)")
    bench = sub.add_parser("bench", help="benchmark the engine on fixed scenarios")
    bench.add_argument("--repeats", type=int, default=3)
    bench.add_argument("--quick", action="store_true", help="smaller large scenarios")
    cap = sub.add_parser("capacity", help="steady-state capacity (req/s) of a scenario, as an interval over seeds")
    cap.add_argument("preset", help="a preset name or a config .json path")
    cap.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a field")
    cap.add_argument("--seeds", type=int, default=3, help="seeds to repeat over (the interval's width)")
    cap.add_argument("--scale", type=float, default=1.0, help="run length multiplier (1 = the steady-state length)")
    _backend_args(cap)
    sw = sub.add_parser("sweep", help="sweep one knob (steady-state metrics; bands over seeds)")
    sw.add_argument("preset", help="a preset name or a config .json path")
    sw.add_argument("--knob", default="rate", help="rate, max_num_seqs, chunk, memory_gb, bandwidth, tflops, num_gpus, kv_compression")
    sw.add_argument("--start", type=float, required=True)
    sw.add_argument("--stop", type=float, required=True)
    sw.add_argument("--num", type=int, default=8, help="points")
    sw.add_argument("--seeds", type=int, default=1, help="repeat every point over this many seeds")
    sw.add_argument("--fixed-length", action="store_true",
                    help="rate knob: keep the config's num_requests (default: a steady-state run length per rate)")
    sw.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a field")
    _backend_args(sw)
    pl = sub.add_parser("plan", help="cheapest deployments (GPU x TP x replicas x engine) meeting SLOs at a rate")
    pl.add_argument("preset", help="the traffic, model and SLOs: a preset name or a config .json path")
    pl.add_argument("--rate", type=float, required=True, help="target requests/s for the whole deployment")
    pl.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a field (e.g. slo.ttft_s=1)")
    pl.add_argument("--gpus", help="hardware presets, comma-separated (default: every GPU with a price)")
    pl.add_argument("--tp", help="tensor-parallel degrees, e.g. 1,2,4,8")
    pl.add_argument("--engines", help="engine presets, comma-separated")
    pl.add_argument("--token-budgets", help="max_num_batched_tokens values, comma-separated")
    pl.add_argument("--max-batches", help="max_num_seqs values, comma-separated")
    pl.add_argument("--max-replicas", type=int, default=None, help="most replicas of one configuration")
    pl.add_argument("--price", action="append", metavar="GPU=USD", help="price per GPU-hour, e.g. l40s=1.2")
    pl.add_argument("--top", type=int, default=None, help="configurations to list")
    pl.add_argument("--out", metavar="DIR", help="write plan.json and each row's replica config")
    _backend_args(pl)
    args = parser.parse_args(argv)
    try:
        if args.cmd == "capacity":
            return _cmd_capacity(args)
        if args.cmd == "plan":
            return _cmd_plan(args)
        if args.cmd == "sweep":
            return _cmd_sweep(args)
        if args.cmd == "run":
            return _cmd_run(args)
        if args.cmd == "presets":
            return _cmd_presets(args)
        if args.cmd == "bench":
            from sim_core.bench import main as bench_main

            return bench_main(["--repeats", str(args.repeats)] + (["--quick"] if args.quick else []))
        if args.cmd == "trends":
            from sim_core.trends import main as trends_main

            return trends_main()
        from sim_core.validate import main as validate_main

        return validate_main(fit=args.fit)
    except (PresetError, MemoryPlanError) as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
