"""Generate the requests of a run: arrival times, prompt and output lengths, priorities.

Uses only the generator passed in. Each quantity draws from its own child stream, so changing the
arrival rate leaves the lengths of request i unchanged (fair A/B comparisons on the same workload).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pydantic import ValidationError

from sim_core.config import LengthDist, Trace, WorkloadConfig
from sim_core.inputs import parse_float_text, parse_int_text
from sim_core.types import FloatArray, IntArray


@dataclass(frozen=True, slots=True)
class Workload:
    """The requests of one run, sorted by arrival; index = request id."""

    arrival_s: FloatArray  # (R,) inf for closed-loop requests not yet released
    prompt_tokens: IntArray  # (R,)
    output_tokens: IntArray  # (R,) per sample
    priority: IntArray  # (R,) 0 = highest
    class_idx: IntArray  # (R,) index into WorkloadConfig.classes (-1 for traces)
    num_samples: int  # n parallel samples per request
    closed_loop_think_s: float | None  # not None: release request i+N when one finishes

    @property
    def num_requests(self) -> int:
        return int(self.arrival_s.shape[0])


def sample_lengths(dist: LengthDist, n: int, rng: np.random.Generator) -> IntArray:
    if dist.dist == "fixed":
        return np.full(n, dist.mean, dtype=np.int64)
    if dist.dist == "uniform":
        return rng.integers(dist.min, dist.max + 1, size=n, dtype=np.int64)
    # lognormal with the requested mean: E[X] = exp(mu + sigma^2 / 2)
    mu = np.log(dist.mean) - dist.sigma**2 / 2
    raw = rng.lognormal(mu, dist.sigma, size=n)
    return np.clip(np.rint(raw), dist.min, dist.max).astype(np.int64)


def sample_arrivals(cfg: WorkloadConfig, n: int, rng: np.random.Generator) -> FloatArray:
    arr = cfg.arrival
    if arr.process == "offline":
        return np.zeros(n)
    if arr.process == "closed_loop":
        out = np.full(n, np.inf)
        out[: arr.num_clients] = 0.0
        return out
    if arr.process == "constant":
        return np.arange(n) / arr.rate_per_s
    if arr.process == "poisson":
        gaps = rng.exponential(1.0 / arr.rate_per_s, size=n)
    else:  # gamma: shape k = 1/CV^2 keeps the mean gap 1/rate and sets the burstiness
        shape = 1.0 / arr.burstiness_cv**2
        gaps = rng.gamma(shape, 1.0 / (arr.rate_per_s * shape), size=n)
    return np.cumsum(gaps)


def generate_workload(cfg: WorkloadConfig, rng: np.random.Generator) -> Workload:
    n = cfg.num_requests
    think = cfg.arrival.think_time_s if cfg.arrival.process == "closed_loop" else None
    if cfg.trace is not None:
        tr = cfg.trace
        prio = np.asarray(tr.priority[:n] if tr.priority is not None else [0] * n, dtype=np.int64)
        return Workload(
            arrival_s=np.asarray(tr.arrival_s[:n], dtype=np.float64),
            prompt_tokens=np.asarray(tr.prompt_tokens[:n], dtype=np.int64),
            output_tokens=np.asarray(tr.output_tokens[:n], dtype=np.int64),
            priority=prio,
            class_idx=np.full(n, -1, dtype=np.int64),
            num_samples=cfg.num_samples,
            closed_loop_think_s=None,
        )
    rng_arrival, rng_prompt, rng_output, rng_class = rng.spawn(4)
    shares = np.array([c.share for c in cfg.classes])
    class_idx = rng_class.choice(len(shares), size=n, p=shares / shares.sum()).astype(np.int64)
    class_prio = np.array([c.priority for c in cfg.classes], dtype=np.int64)
    return Workload(
        arrival_s=sample_arrivals(cfg, n, rng_arrival),
        prompt_tokens=sample_lengths(cfg.prompt_tokens, n, rng_prompt),
        output_tokens=sample_lengths(cfg.output_tokens, n, rng_output),
        priority=class_prio[class_idx],
        class_idx=class_idx,
        num_samples=cfg.num_samples,
        closed_loop_think_s=think,
    )


TRACE_COLUMNS = ("arrival_s", "prompt_tokens", "output_tokens")
MAX_TRACE_CSV_BYTES = 8 * 1024 * 1024


def parse_trace_csv(text: str) -> dict[str, list]:
    """Parse `arrival_s,prompt_tokens,output_tokens[,priority]` CSV text into Trace fields.

    Numbers must be plain ASCII (no `1_000`, no `nan`); a byte-order mark (Excel's "CSV UTF-8") is
    ignored. Raises ValueError with the line number and column of the first bad value.
    """
    if len(text) > MAX_TRACE_CSV_BYTES:
        raise ValueError(f"trace CSV is {len(text):,} bytes; the limit is {MAX_TRACE_CSV_BYTES:,}")
    numbered = [(no, ln.strip()) for no, ln in enumerate(text.removeprefix("\ufeff").splitlines(), start=1) if ln.strip()]
    if not numbered:
        raise ValueError("trace CSV is empty")
    header_line = numbered[0][1]
    header = [h.strip() for h in header_line.split(",")]
    if tuple(header[:3]) != TRACE_COLUMNS or len(header) > 4 or (len(header) == 4 and header[3] != "priority"):
        raise ValueError(f"trace CSV header must be arrival_s,prompt_tokens,output_tokens[,priority]; got {header_line[:200]!r}")
    cols: dict[str, list] = {h: [] for h in header}
    for lineno, line in numbered[1:]:
        cells = [c.strip() for c in line.split(",")]
        if len(cells) != len(header):
            raise ValueError(f"trace CSV line {lineno}: expected {len(header)} values, got {len(cells)}")
        for name, cell in zip(header, cells):
            try:
                cols[name].append(parse_float_text(cell) if name == "arrival_s" else parse_int_text(cell))
            except ValueError:
                kind = "a number" if name == "arrival_s" else "a whole number"
                raise ValueError(f"trace CSV line {lineno}: {name} = {cell[:40]!r} is not {kind}") from None
    if len(cols["arrival_s"]) == 0:
        raise ValueError("trace CSV has a header but no rows")
    return {k: cols[k] for k in header} | ({} if "priority" in cols else {"priority": None})


def trace_from_csv(raw: bytes, name: str = "trace CSV") -> Trace:
    """An uploaded trace file, validated: one message naming the file and the line (header = line 1) or
    the data row (row 1 = the first request) of the first problem."""
    if len(raw) > MAX_TRACE_CSV_BYTES:
        raise ValueError(f"{name} is {len(raw):,} bytes; the limit is {MAX_TRACE_CSV_BYTES:,}")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise ValueError(f"{name}: not UTF-8 text (byte {err.start}); save it as CSV UTF-8") from None
    try:
        cols = parse_trace_csv(text)
    except ValueError as err:
        raise ValueError(f"{name}: {str(err).removeprefix('trace CSV ')}") from None
    try:
        return Trace.model_validate(cols)
    except ValidationError as err:
        first = err.errors()[0]
        loc = first["loc"]
        msg = first["msg"].removeprefix("Value error, ")
        if len(loc) >= 2 and isinstance(loc[1], int):  # a per-cell type error: column, row index
            msg = f"trace row {loc[1] + 1}: {loc[0]} = {first.get('input')!r}: {msg}"
        raise ValueError(f"{name}: {msg}") from None
