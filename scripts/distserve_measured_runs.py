"""Offline (needs a checkout of LLMServe/DistServe; not run by the project): copy DistServe's own measured serving
runs of OPT-13B on A100-80GB into this repository.

    PYTHONPATH=$PWD python scripts/distserve_measured_runs.py /path/to/DistServe   (at commit 20a1633)

DistServe's simulator was checked against real runs; the runs are in its repository at commit 20a1633
(2024-05), `simdistserve/benchmarks/alignment/data-ground-truth/`: `opt-13b-sharegpt/<run>.exp` holds one
Python literal per run, a list of requests with `prompt_len`, `output_len`, `issue_time`, `ttft_ms`, `tpot_ms`
(measured by the artifact's benchmark client), and `opt-13b-sharegpt-workload/<run>.exp` the workload the run
replayed (`start_time` = issue time after the first request). Runs are named `<system>-<requests>-<rate>`:
`vllm` is the 2023 vLLM on one A100 (TP1; `align_with_real.py` simulates it with tp 1), `distserve-c21d11` is
DistServe with a TP2 prefill instance and a TP1 decode instance (3 A100s; `tp_prefill, ..., tp_decode = 2, 1,
1, 1` there). Every workload is a prefix of one list of 1,600 ShareGPT requests (the artifact's shuffled
dataset), its arrivals one seeded draw of Poisson gaps scaled to the run's rate (the same draw for every run).

Writes:
* presets/calibration/data/distserve_measured_runs.csv: one row per measured request of the `vllm` and
  `distserve-c21d11` runs (8 + 13 runs, 8,900 requests), arrival relative to the run's first request.
* presets/traces/distserve-sharegpt-opt13b.csv: the 1,600-request list in this project's trace CSV, with the
  arrivals of the artifact's 1,600-request workload (`distserve-c21d12-1600-16`, Poisson at 16 req/s).
"""

from __future__ import annotations

import argparse
import ast
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ALIGN = "simdistserve/benchmarks/alignment/data-ground-truth"
SYSTEMS = ("vllm", "distserve-c21d11")
LIST_RUN = "distserve-c21d12-1600-16"


def main(checkout: Path) -> None:
    measured = checkout / ALIGN / "opt-13b-sharegpt"
    workloads = checkout / ALIGN / "opt-13b-sharegpt-workload"
    # checked before anything is written: a wrong path would otherwise overwrite the shipped CSV with its header alone
    if not measured.is_dir() or not (workloads / f"{LIST_RUN}.exp").is_file():
        raise SystemExit(f"{checkout} is not a DistServe checkout at 20a1633: {measured} or "
                         f"{workloads / (LIST_RUN + '.exp')} is missing")  # fmt: skip
    rows = ["run,system,num_requests,rate_per_s,arrival_s,prompt_tokens,output_tokens,ttft_ms,tpot_ms"]
    runs = []
    for path in measured.glob("*.exp"):
        *name, n, rate = path.stem.split("-")  # <system>-<requests>-<rate>
        if "-".join(name) in SYSTEMS:
            runs.append(("-".join(name), float(rate), int(n), path))
    for system, rate, n, path in sorted(runs):
        reqs = sorted(ast.literal_eval(path.read_text().splitlines()[0]), key=lambda r: r["issue_time"])
        work = json.loads((workloads / path.name).read_text())
        # the measured requests are the workload's, in its order (checked: lengths and issue times)
        assert len(reqs) == len(work) == n, path
        t0 = reqs[0]["issue_time"]
        for r, w in zip(reqs, work):
            assert (r["prompt_len"], r["output_len"]) == (w["prompt_len"], w["output_len"]), path
            assert abs((r["issue_time"] - t0) - w["start_time"]) < 1e-6, path
            rows.append(f"{path.stem},{system},{n},{rate:g},{w['start_time']:.6f},{r['prompt_len']},{r['output_len']},"
                        f"{r['ttft_ms']:.3f},{r['tpot_ms']:.3f}")  # fmt: skip
    out = ROOT / "presets" / "calibration" / "data" / "distserve_measured_runs.csv"
    out.write_text("\n".join(rows) + "\n")
    print(f"{out}: {len(rows) - 1} requests in {len(runs)} runs")
    work = json.loads((workloads / f"{LIST_RUN}.exp").read_text())
    lines = ["arrival_s,prompt_tokens,output_tokens"] + [f"{w['start_time']:.6f},{w['prompt_len']},{w['output_len']}" for w in work]
    trace = ROOT / "presets" / "traces" / "distserve-sharegpt-opt13b.csv"
    trace.write_text("\n".join(lines) + "\n")
    print(f"{trace}: {len(work)} requests")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("checkout", type=Path, help="a checkout of LLMServe/DistServe at commit 20a1633")
    main(parser.parse_args().checkout)
