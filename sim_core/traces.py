"""Named public trace formats → the one `Trace` model (config.py).

Formats (column names as the publishers ship them):
  azure-2023  Azure LLM inference trace 2023 (Splitwise): CSV `TIMESTAMP,ContextTokens,GeneratedTokens`,
              TIMESTAMP a wall-clock datetime `YYYY-MM-DD HH:MM:SS.fffffff`.
  azure-2024  Azure LLM inference trace 2024 (DynamoLLM): the same three columns; TIMESTAMP may carry
              a UTC offset (`+00:00`).
  burstgpt    BurstGPT (HPMLL): CSV `Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type`,
              Timestamp in seconds from the trace start; failed requests have 0 response tokens.
  mooncake    Mooncake (kvcache-ai, FAST'25): JSON lines `{"timestamp": ms, "input_length", "output_length",
              "hash_ids": [...]}`, one hash id per 512-token block; equal ids = equal prefix content,
              which is what prefix caching needs.
  csv         This project's own `arrival_s,prompt_tokens,output_tokens[,priority]`.

Options (`TraceOptions`): a time window on the trace's own clock, time scaling, and seeded sampling to
N requests. Rows with zero prompt or output tokens (failed requests) are skipped and counted. Every
malformed row raises `TraceError` naming the format and the line number (the header is line 1).
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from types import MappingProxyType
from typing import Literal

import numpy as np
from pydantic import Field, ValidationError, model_validator

from sim_core.config import MAX_SEED, MAX_SIM_TIME_S, MAX_TRACE_ROWS, StrictModel, Trace, format_validation_error
from sim_core.inputs import InputError, check_regular_file, json_int, parse_float_text, parse_int_text

TraceFormat = Literal["auto", "csv", "azure-2023", "azure-2024", "burstgpt", "mooncake"]
TRACE_FORMATS: tuple[str, ...] = ("csv", "azure-2023", "azure-2024", "burstgpt", "mooncake")
TRACE_COLUMNS = ("arrival_s", "prompt_tokens", "output_tokens")
RELATIVE_CLOCK_FORMATS = frozenset({"csv"})  # the project's own CSV counts from the start: its window is on that clock
MAX_TRACE_CSV_BYTES = 8 * 1024 * 1024  # an upload (the app); files on disk are streamed
MOONCAKE_HASH_BLOCK_TOKENS = 512  # Mooncake FAST'25 traces: one hash id per 512-token block
MAX_TRACE_FILE_BYTES = 2 * 1024**3  # CLI/API: whole public traces are streamed row by row
MAX_WINDOW_ROWS = 5_000_000  # rows kept after the window, before sampling (bounds memory)

AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
BURSTGPT_COLUMNS = ("Timestamp", "Model", "Request tokens", "Response tokens", "Total tokens", "Log Type")
MOONCAKE_KEYS = ("timestamp", "input_length", "output_length")
# each format's (prompt, output) length columns, as its file names them (a skipped row's message names them)
LENGTH_FIELDS = MappingProxyType({"csv": TRACE_COLUMNS[1:3], "azure-2023": AZURE_COLUMNS[1:3], "azure-2024": AZURE_COLUMNS[1:3],
                                  "burstgpt": BURSTGPT_COLUMNS[2:4], "mooncake": MOONCAKE_KEYS[1:3]})  # fmt: skip
TIME_FIELD = {"csv": "arrival_s", "azure-2023": "TIMESTAMP", "azure-2024": "TIMESTAMP", "burstgpt": "Timestamp", "mooncake": "timestamp"}

AZURE_MAX_FRACTION_DIGITS = 18  # the traces write 7 (100 ns); more digits are not a time any clock took

FORMAT_HELP = {
    "azure-2023": "Azure LLM inference trace 2023: CSV TIMESTAMP,ContextTokens,GeneratedTokens",
    "azure-2024": "Azure LLM inference trace 2024: CSV TIMESTAMP,ContextTokens,GeneratedTokens (UTC offset)",
    "burstgpt": "BurstGPT: CSV Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type",
    "mooncake": "Mooncake: JSON lines timestamp (ms), input_length, output_length, hash_ids",
    "csv": "arrival_s,prompt_tokens,output_tokens[,priority]",
}


class TraceError(ValueError):
    """A trace that cannot be read; the message names the format and the line."""


class TraceOptions(StrictModel):
    """How to read a trace file: its format (or auto-detect), the time window to keep, a seeded sample of its
    requests, a time scale for its arrivals and BurstGPT's row filters (`load_trace(path, TraceOptions(...))`; the
    CLI's `--trace-*` options)."""

    format: TraceFormat = Field("auto", description="Trace format; auto detects it from the header or first line.")
    # (the project's own csv is relative to its start already: its window is on its own clock)
    start_s: float = Field(0.0, ge=0, le=1e9, description="Keep requests from this time on, s after the trace's first "
                           "row (a csv trace: s on its own clock).")  # fmt: skip
    end_s: float | None = Field(None, gt=0, le=1e9, description="Keep requests before this time, s after the first row "
                                "(a csv trace: on its own clock; empty: to the end).")  # fmt: skip
    time_scale: float = Field(
        1.0, gt=0, le=1e4, description="Multiply arrival gaps by this: 0.5 replays twice as fast (double the rate)."
    )
    max_requests: int | None = Field(
        None, ge=1, le=MAX_TRACE_ROWS, description="Sample this many requests (seeded, arrival order kept); empty: all."
    )
    seed: int = Field(0, ge=0, le=MAX_SEED, description="Seed of the sampling.")
    model: str | None = Field(None, max_length=40, description="BurstGPT only: keep rows of this Model (e.g. ChatGPT, GPT-4).")
    log_type: str | None = Field(
        None, max_length=40, description="BurstGPT only: keep rows of this Log Type (Conversation log, API log)."
    )

    @model_validator(mode="after")
    def _check(self) -> TraceOptions:
        if self.end_s is not None and self.end_s <= self.start_s:
            raise ValueError(f"end_s ({self.end_s:g}) must be greater than start_s ({self.start_s:g})")
        return self


# How the config's messages name a request of its trace (config.py): "...: trace row 2: ...", at the start of a line or
# after a field's colon; nowhere else (an upload named "trace row 3.csv" was renamed "csv line 3.csv", a review).
_TRACE_ROW = re.compile(r"(^|: )trace row (\d+):", re.MULTILINE)


def in_file_lines(text: str, fmt: str, lines: tuple[int, ...]) -> str:
    """A config message's "trace row N" (the Nth request replayed, as the config counts) as the line of the `fmt` file
    it came from (`lines`: each request's): rows skipped, windowed, sorted or sampled made "trace row 2" line 3, or
    line 9,000, of a spreadsheet (a review), where every message of the file's own names its line."""
    def line(m: re.Match) -> str:
        n = int(m.group(2))
        return f"{m.group(1)}{fmt} line {lines[n - 1]}:" if 0 < n <= len(lines) else m.group(0)

    return _TRACE_ROW.sub(line, text)


@dataclass(frozen=True, slots=True)
class LoadedTrace:
    trace: Trace
    format: str
    num_rows: int  # data rows in the file
    num_skipped: int  # rows with zero prompt or output tokens (failed requests) or filtered out
    num_in_window: int  # rows inside the window, before sampling
    lines: tuple[int, ...] = ()  # the file's line of each request replayed (from 1: a CSV's header is line 1)

    def in_file_lines(self, text: str) -> str:
        """A config message's "trace row N" as the file's line it came from (`in_file_lines`)."""
        return in_file_lines(text, self.format, self.lines)

    def describe(self) -> str:
        t = self.trace
        span = t.arrival_s[-1] - t.arrival_s[0]
        return (
            f"{len(t.arrival_s):,} requests ({self.format}) from {self.num_rows:,} rows "
            f"({self.num_skipped:,} skipped, {self.num_in_window:,} in the window), span {span:,.1f} s"
        )


@dataclass(slots=True)
class _Row:
    time_s: float  # on the trace's own clock (absolute or relative)
    prompt: int
    output: int
    priority: int | None = None
    hash_ids: list[int] | None = None
    line: int = 0  # in the file (the header is line 1), for a message about the row once it is kept


# ------------------------------------------------------------------ field parsers
def _shown(cell: object) -> str:
    """A cell as a message quotes it: repr, cut to 60 characters (a hostile cell can be megabytes)."""
    text = repr(cell)
    return text if len(text) <= 60 else text[:57] + "..."


def _int(fmt: str, line: int, name: str, cell: str) -> int:
    try:
        val = parse_int_text(cell.strip())
    except ValueError:
        raise TraceError(f"{fmt} line {line}: {name} = {_shown(cell)} is not an integer") from None
    if not 0 <= val <= 1_048_576:
        raise TraceError(f"{fmt} line {line}: {name} = {val} is outside [0, 1048576]")
    return val


def _float(fmt: str, line: int, name: str, cell: str) -> float:
    try:
        val = parse_float_text(cell.strip())
    except ValueError:
        raise TraceError(f"{fmt} line {line}: {name} = {_shown(cell)} is not a number") from None
    if not math.isfinite(val) or val < 0:
        raise TraceError(f"{fmt} line {line}: {name} = {_shown(cell)} must be finite and >= 0")
    return val


_EPOCH = datetime(2023, 1, 1)  # near the traces' dates: keeps 100 ns resolution in a float


def _datetime_s(fmt: str, line: int, cell: str) -> float:
    """Seconds since 2023-01-01 UTC of an Azure TIMESTAMP (fractions up to 100 ns, optional UTC offset)."""
    text = cell.strip().replace("T", " ")
    frac = ""
    main, dot, rest = text.partition(".")
    tz = ""
    if dot:
        digits = rest
        for sep in ("+", "-", "Z"):
            if sep in rest:
                i = rest.index(sep)
                digits, tz = rest[:i], rest[i:]
                break
        # ASCII digits only, and few of them: '²'.isdigit() and int('٣') held, int() of 5,000 digits raised ValueError
        if not (digits.isascii() and digits.isdigit()) or len(digits) > AZURE_MAX_FRACTION_DIGITS:
            raise TraceError(f"{fmt} line {line}: TIMESTAMP = {_shown(cell)} is not a date-time like 2023-11-16 18:15:46.680")
        frac = digits
    else:
        for sep in ("+", "Z"):
            if sep in main[10:]:
                i = main.index(sep, 10)
                main, tz = main[:i], main[i:]
                break
    try:
        base = datetime.fromisoformat(main + (tz.replace("Z", "+00:00") if tz else ""))
    except ValueError:
        raise TraceError(f"{fmt} line {line}: TIMESTAMP = {_shown(cell)} is not a date-time like 2023-11-16 18:15:46.680") from None
    if base.tzinfo is not None:
        base = base.replace(tzinfo=None) - base.utcoffset()
    seconds = (base - _EPOCH).total_seconds()
    return seconds + (int(frac) / 10 ** len(frac) if frac else 0.0)


# ------------------------------------------------------------------ readers (yield rows)
class _CsvReader:
    """`csv.reader` whose errors are TraceErrors naming the line: a cell over the csv module's field limit (131,072
    characters) raised `_csv.Error`, which is no ValueError: a traceback from `run --trace` and the app's upload."""

    def __init__(self, fmt: str, lines: Iterable[str]) -> None:
        self._fmt, self._reader = fmt, csv.reader(lines)

    @property
    def line_num(self) -> int:
        return self._reader.line_num

    def __iter__(self) -> _CsvReader:
        return self

    def __next__(self) -> list[str]:
        try:
            return next(self._reader)
        except csv.Error as err:
            where = f"{self._fmt} line {self.line_num}" if self._fmt else f"line {self.line_num}"
            raise TraceError(f"{where}: not readable as CSV ({err})") from None


def _csv_rows(fmt: str, lines: Iterable[str], columns: tuple[str, ...]) -> Iterator[tuple[int, dict[str, str]]]:
    reader = _CsvReader(fmt, lines)
    try:
        header = next(reader)
    except StopIteration:
        raise TraceError(f"{fmt}: the file is empty") from None
    header = [h.strip() for h in header]
    missing = [c for c in columns if c not in header]
    if missing:
        raise TraceError(
            f"{fmt} line 1: header must contain {', '.join(columns)}; missing {', '.join(missing)} (got {','.join(header)[:200]!r})"
        )
    pos = {c: header.index(c) for c in columns}
    for line, cells in _data_rows(fmt, reader, len(header)):
        yield line, {c: cells[i] for c, i in pos.items()}


def _data_rows(fmt: str, reader, width: int) -> Iterator[tuple[int, list[str]]]:
    """(line number, cells) of each non-blank row after the header; a row of another width is an error."""
    for cells in reader:
        if not cells or all(not c.strip() for c in cells):
            continue
        if len(cells) != width:
            raise TraceError(f"{fmt} line {reader.line_num}: expected {width} values, got {len(cells)}")
        yield reader.line_num, cells


def _read_azure(fmt: str, lines: Iterable[str]) -> Iterator[tuple[int, _Row]]:
    for line, c in _csv_rows(fmt, lines, AZURE_COLUMNS):
        yield line, _Row(_datetime_s(fmt, line, c["TIMESTAMP"]), _int(fmt, line, "ContextTokens", c["ContextTokens"]),
                         _int(fmt, line, "GeneratedTokens", c["GeneratedTokens"]))  # fmt: skip


def _read_burstgpt(lines: Iterable[str], opts: TraceOptions) -> Iterator[tuple[int, _Row]]:
    fmt = "burstgpt"
    for line, c in _csv_rows(fmt, lines, BURSTGPT_COLUMNS):
        row = _Row(_float(fmt, line, "Timestamp", c["Timestamp"]), _int(fmt, line, "Request tokens", c["Request tokens"]),
                   _int(fmt, line, "Response tokens", c["Response tokens"]))  # fmt: skip
        if (opts.model and c["Model"].strip() != opts.model) or (opts.log_type and c["Log Type"].strip() != opts.log_type):
            row.prompt = 0  # filtered out: counted with the skipped rows
        yield line, row


def _read_csv(lines: Iterable[str]) -> Iterator[tuple[int, _Row]]:
    fmt = "csv"
    reader = _CsvReader(fmt, lines)
    try:
        header = [h.strip() for h in next(reader)]
    except StopIteration:
        raise TraceError(f"{fmt}: the file is empty") from None
    if tuple(header[:3]) != TRACE_COLUMNS or len(header) > 4 or (len(header) == 4 and header[3] != "priority"):
        raise TraceError(f"{fmt} line 1: header must be arrival_s,prompt_tokens,output_tokens[,priority]; got {','.join(header)[:200]!r}")
    for line, cells in _data_rows(fmt, reader, len(header)):
        prio = None
        if len(header) == 4:
            prio = _int(fmt, line, "priority", cells[3])
            if prio > 9:
                raise TraceError(f"{fmt} line {line}: priority = {prio} is outside [0, 9]")
        yield line, _Row(_float(fmt, line, "arrival_s", cells[0]), _int(fmt, line, "prompt_tokens", cells[1]),
                         _int(fmt, line, "output_tokens", cells[2]), prio)  # fmt: skip


def _read_mooncake(lines: Iterable[str]) -> Iterator[tuple[int, _Row]]:
    fmt = "mooncake"
    for line, text in enumerate(lines, start=1):
        if not text.strip():
            continue
        try:
            # (inputs.json_int, the configs' rule: int() of 5,000 digits raised ValueError, a traceback; a long one is
            # the float it rounds to, which the checks below refuse, and math.isfinite of a 400-digit int overflowed)
            obj = json.loads(text, parse_int=json_int)
        except json.JSONDecodeError as err:
            raise TraceError(f"{fmt} line {line}: not a JSON object ({err.msg})") from None
        except RecursionError:  # a hostile line of nested arrays: a message, not a crash
            raise TraceError(f"{fmt} line {line}: JSON nested too deeply; a row is one flat object") from None
        if not isinstance(obj, dict):
            raise TraceError(f"{fmt} line {line}: expected a JSON object, got {type(obj).__name__}")
        missing = [k for k in MOONCAKE_KEYS if k not in obj]
        if missing:
            raise TraceError(f"{fmt} line {line}: missing {', '.join(missing)}")
        vals = {}
        for k in MOONCAKE_KEYS:
            v = obj[k]
            if isinstance(v, float) and math.isinf(v):
                raise TraceError(f"{fmt} line {line}: {k} is too large; it must be below 1e300")
            if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or v < 0 or (k != "timestamp" and v != int(v)):
                raise TraceError(f"{fmt} line {line}: {k} = {_shown(v)} must be a non-negative " + ("number" if k == "timestamp" else "integer"))
            vals[k] = v
        if vals["input_length"] > 1_048_576 or vals["output_length"] > 1_048_576:
            raise TraceError(f"{fmt} line {line}: lengths must be <= 1048576")
        hashes = obj.get("hash_ids")
        if hashes is not None:
            if not isinstance(hashes, list) or any(isinstance(h, bool) or not isinstance(h, int) or h < 0 for h in hashes):
                raise TraceError(f"{fmt} line {line}: hash_ids must be a list of non-negative integers")
            max_ids = -(-int(vals["input_length"]) // MOONCAKE_HASH_BLOCK_TOKENS)
            if len(hashes) > max_ids:
                raise TraceError(
                    f"{fmt} line {line}: {len(hashes)} hash_ids for {int(vals['input_length'])} input tokens "
                    f"(at most {max_ids} blocks of {MOONCAKE_HASH_BLOCK_TOKENS})"
                )
        yield line, _Row(vals["timestamp"] / 1000.0, int(vals["input_length"]), int(vals["output_length"]), None, hashes)


# ------------------------------------------------------------------ detection and assembly
def detect_format(first_line: str) -> str:
    """The format whose header (or first JSON line) matches `first_line`."""
    text = first_line.lstrip("\ufeff").strip()
    if text.startswith("{"):
        return "mooncake"
    header = [h.strip() for h in next(_CsvReader("", [text]), [])]
    if all(c in header for c in BURSTGPT_COLUMNS):
        return "burstgpt"
    if all(c in header for c in AZURE_COLUMNS):
        return "azure-2023"  # 2023 and 2024 share the schema; the parser accepts both timestamp forms
    if tuple(header[:3]) == TRACE_COLUMNS:
        return "csv"
    # A header that has some of a format's columns is named against that format: "arrival_s,prompt_tokens" was told
    # only that it matched none, and then every format's columns (~400 characters), a review
    (shared, fmt, columns), (runner_up, *_) = sorted(((sum(c in header for c in cols), fmt, cols)
                                                      for fmt, cols in _HEADER_COLUMNS.items()), reverse=True)[:2]  # fmt: skip
    if shared > runner_up:  # (a tie names no format: "Timestamp,prompt_tokens" is as much BurstGPT as csv)
        missing = [c for c in columns if c not in header]
        lacks = f"lacks {', '.join(missing)}" if missing else f"must start with {', '.join(columns)}, in that order"
        raise TraceError(f"line 1: the header {text[:200]!r} {lacks} ({'csv: ' if fmt == 'csv' else ''}{FORMAT_HELP[fmt]})")
    raise TraceError(
        f"line 1: unrecognised trace header {text[:200]!r}; expected one of: " + "; ".join(FORMAT_HELP.values())
    )


_HEADER_COLUMNS = MappingProxyType({"csv": TRACE_COLUMNS, "burstgpt": BURSTGPT_COLUMNS, "azure-2023": AZURE_COLUMNS})  # (detect_format's)


def _rows(fmt: str, lines: Iterable[str], opts: TraceOptions) -> Iterator[tuple[int, _Row]]:
    if fmt in ("azure-2023", "azure-2024"):
        return _read_azure(fmt, lines)
    if fmt == "burstgpt":
        return _read_burstgpt(lines, opts)
    if fmt == "mooncake":
        return _read_mooncake(lines)
    return _read_csv(lines)


def read_trace(lines: Iterable[str], options: TraceOptions | None = None) -> LoadedTrace:
    """Parse an iterable of text lines (a file object, or `text.splitlines(True)`) into a Trace.

    Raises:
        TraceError: an unreadable header or row (the message names the line), or nothing left to replay.
    """
    opts = options or TraceOptions()
    it = iter(lines)
    first = next(it, None)
    if first is None or not first.strip():
        raise TraceError("the trace is empty")
    first = first.lstrip("\ufeff")  # UTF-8 BOM (Excel exports)
    if opts.format == "auto":
        fmt = detect_format(first)
    else:
        fmt = opts.format
        try:
            detected = detect_format(first)
        except TraceError:
            detected = fmt  # the format's own reader names what is wrong with the header
        if detected != fmt and not {detected, fmt} <= {"azure-2023", "azure-2024"}:
            raise TraceError(f"{fmt} line 1: the file looks like {detected} ({FORMAT_HELP[detected]})")
    if fmt != "burstgpt" and (opts.model or opts.log_type):  # (ignored before: the whole trace replayed unfiltered)
        raise TraceError(f"{fmt}: the model and log_type filters select BurstGPT rows; a {fmt} trace has no such columns")
    lines_all = _chain_first(first, it)
    num_rows = num_skipped = 0
    t0: float | None = None
    kept: list[_Row] = []
    prev_t = -math.inf
    unsorted = False
    windowed = opts.start_s > 0 or opts.end_s is not None
    first_skipped: tuple[int, _Row] | None = None  # (line, row) of the first failed request skipped, for the message
    for line, row in _rows(fmt, lines_all, opts):
        num_rows += 1
        row.line = line
        if t0 is None:
            t0 = 0.0 if fmt in RELATIVE_CLOCK_FORMATS else row.time_s
        if row.time_s < prev_t:
            unsorted = True
        prev_t = row.time_s
        if row.prompt == 0 or row.output == 0:
            num_skipped += 1
            first_skipped = first_skipped or (line, row)
            continue
        rel = row.time_s - t0
        # A row earlier than the first one (an unsorted file): without a window it is replayed like any other (the
        # replay starts at the earliest row); it was dropped uncounted. A window counts from the first row, so a
        # streamed file cannot place it: refused, naming the line.
        if rel < 0 and windowed:
            raise TraceError(f"{fmt} line {line}: {TIME_FIELD[fmt]} is earlier than the first row's; start_s/end_s "
                             "count from the first row and need the rows sorted by time (sort the file or drop the window)")  # fmt: skip
        if windowed and (rel < opts.start_s or (opts.end_s is not None and rel >= opts.end_s)):
            continue
        kept.append(row)
        if opts.max_requests is None and len(kept) > MAX_TRACE_ROWS:  # refused below whatever follows: say so now
            # (an 8 MB upload of 1.4 million rows took 10 s and 270 MB of the server to be refused after its last row)
            raise TraceError(f"{fmt} line {line}: more than {MAX_TRACE_ROWS:,} requests in the window; set max_requests "
                             "or narrow the window")  # fmt: skip
        if len(kept) > MAX_WINDOW_ROWS:
            raise TraceError(f"{fmt} line {line}: more than {MAX_WINDOW_ROWS:,} rows in the window; narrow it (start_s, end_s)")
    if num_rows == 0:
        raise TraceError(f"{fmt}: the trace has a header but no rows")
    if not kept:  # (it said "after skipping 1 failed rows", naming neither the column nor the value that failed them)
        end = "none" if opts.end_s is None else f"{opts.end_s:g} s"
        origin = "on the file's clock" if fmt in RELATIVE_CLOCK_FORMATS else "from the first row"
        window = f"outside the window (start_s = {opts.start_s:g} s, end_s = {end}, {origin})" if windowed else ""
        said = f"all {num_rows:,} rows are {window}"
        if first_skipped is not None:
            (line, row), (p, o) = first_skipped, LENGTH_FIELDS[fmt]
            said = (f"{num_skipped:,} of {num_rows:,} rows skipped as failed requests (0 {p} or {o}: the first at line {line}, "
                    f"{p} = {row.prompt}, {o} = {row.output}; allowed: >= 1)" + (f", the others {window}" if window and num_skipped < num_rows else ""))  # fmt: skip
        raise TraceError(f"{fmt}: no request left: {said}")
    in_window = len(kept)
    if unsorted:  # replay in arrival order; ties keep file order
        kept.sort(key=lambda r: r.time_s)
    if opts.max_requests is not None and opts.max_requests < len(kept):
        pick = np.sort(np.random.default_rng(opts.seed).choice(len(kept), size=opts.max_requests, replace=False))
        kept = [kept[i] for i in pick.tolist()]
    if len(kept) > MAX_TRACE_ROWS:
        raise TraceError(
            f"{fmt}: {len(kept):,} requests in the window, more than {MAX_TRACE_ROWS:,}; set max_requests or narrow the window"
        )
    base = 0.0 if fmt in RELATIVE_CLOCK_FORMATS and opts.start_s == 0 and opts.max_requests is None else kept[0].time_s
    arrival = [(r.time_s - base) * opts.time_scale for r in kept]
    _check_replay_span(fmt, kept, arrival, base, opts)
    fields: dict = {
        "arrival_s": arrival,
        "prompt_tokens": [r.prompt for r in kept],
        "output_tokens": [r.output for r in kept],
        "priority": [r.priority for r in kept] if kept[0].priority is not None else None,
    }
    if fmt == "mooncake" and any(r.hash_ids for r in kept):
        fields["block_hash_ids"] = [r.hash_ids or [] for r in kept]
        fields["hash_block_tokens"] = MOONCAKE_HASH_BLOCK_TOKENS
    try:
        trace = Trace.model_validate(fields)
    except ValidationError as err:
        raise TraceError(in_file_lines(format_validation_error(err, f"{fmt} trace"), fmt, tuple(r.line for r in kept))) from None
    return LoadedTrace(trace, fmt, num_rows, num_skipped, in_window, tuple(r.line for r in kept))


def _check_replay_span(fmt: str, kept: list[_Row], arrival: list[float], base: float, opts: TraceOptions) -> None:
    """TraceError naming the line, the column and the replay time of the first kept row that arrives past
    MAX_SIM_TIME_S (limits.max_sim_time_s's largest value): no run reaches it, so a 1e300 s row ran to the time limit
    and only then said the next request arrives at 1e+300 s. `arrival` is kept's replay times (rebased, scaled)."""
    i = next((i for i, a in enumerate(arrival) if not a <= MAX_SIM_TIME_S), None)  # (sorted: the first one past it)
    if i is None:
        return
    row, col, bound = kept[i], TIME_FIELD[fmt], f"[0, {MAX_SIM_TIME_S:,.0f}] s"
    why = f"no run simulates past limits.max_sim_time_s's largest value, {MAX_SIM_TIME_S:,.0f} s"
    if fmt in RELATIVE_CLOCK_FORMATS and base == 0 and opts.time_scale == 1:  # the cell is the replay time itself
        # (a first row past it is most likely a clock time, e.g. Unix seconds, where the column counts from the start)
        hint = f"; {col} counts seconds from the start of the replay, not a clock time" if i == 0 else ""
        raise TraceError(f"{fmt} line {row.line}: {col} = {row.time_s:g} s is outside {bound}: {why}{hint}")
    scaled = f" x time_scale {opts.time_scale:g}" if opts.time_scale != 1 else ""
    raise TraceError(f"{fmt} line {row.line}: {col} puts this request at {arrival[i]:g} s into the replay ({row.time_s - base:g} "
                     f"s after the first request replayed{scaled}), outside {bound}: {why}; narrow the window (end_s)"
                     + (" or lower time_scale" if scaled else ""))  # fmt: skip


def _chain_first(first: str, rest: Iterator[str]) -> Iterator[str]:
    yield first
    yield from rest


def parse_trace(text: str | bytes, options: TraceOptions | None = None, max_bytes: int = MAX_TRACE_CSV_BYTES) -> LoadedTrace:
    """Parse trace text (an upload). Bytes are decoded as UTF-8 (a BOM is accepted)."""
    if len(text) > max_bytes:
        raise TraceError(f"the trace is {len(text):,} bytes; the limit is {max_bytes:,}")
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8-sig")
        except UnicodeDecodeError as err:
            raise TraceError(f"the trace is not UTF-8 text (byte {err.start})") from None
    return read_trace(io.StringIO(text, newline=None), options)


def load_trace(path: str | Path, options: TraceOptions | None = None) -> LoadedTrace:
    """Read a trace file (streamed: whole public traces work, with a window or max_requests)."""
    p = Path(path)
    try:  # (a device such as /dev/zero was read forever, a FIFO blocked the CLI waiting for a writer)
        check_regular_file(p, MAX_TRACE_FILE_BYTES, "trace file")
    except InputError as err:
        raise TraceError(str(err)) from None
    try:
        with p.open(encoding="utf-8-sig", newline="") as fh:
            return read_trace(fh, options)
    except OSError as err:
        raise TraceError(f"cannot read trace file {str(path)!r}: {err.strerror}") from None
    except UnicodeDecodeError as err:
        raise TraceError(f"{p.name}: not UTF-8 text (byte {err.start})") from None


def with_trace(cfg, trace: Trace | LoadedTrace, name: str | None = None):
    """`cfg` replaying `trace` (every request of it; `load_trace`'s result or its `.trace`). Raises PresetError when
    the result does not validate (a loaded trace's requests named by their lines in the file), TypeError for anything
    but a trace."""
    from sim_core.presets import config_from_dict

    if isinstance(trace, LoadedTrace):  # (with_trace(cfg, load_trace(path)) is the call one writes first)
        data = trace_data(cfg.model_dump(mode="python"), trace.trace, name)
        return config_replaying(data, trace, f"config with trace {name or ''}".strip())
    if not isinstance(trace, Trace):
        raise TypeError(f"with_trace expects a Trace or load_trace's result, got {type(trace).__name__}")
    return config_from_dict(trace_data(cfg.model_dump(mode="python"), trace, name), f"config with trace {name or ''}".strip())


def config_replaying(data: dict, loaded: LoadedTrace, source: str):
    """`config_from_dict(data, source)` for a config dict replaying `loaded` (`trace_data`), a request it refuses named
    by its line in the file (`in_file_lines`), as the file's own messages name it: the CLI's --trace, an upload's check
    and `with_trace` read a loaded file this way."""
    from sim_core.presets import PresetError, config_from_dict

    try:
        return config_from_dict(data, source)
    except PresetError as err:
        raise PresetError(loaded.in_file_lines(str(err))) from None


def trace_data(data: dict, trace: Trace, name: str | None = None) -> dict:
    """A config dict (not yet validated) set to replay `trace`, every request of it; returns `data`."""
    data["workload"]["trace"] = trace.model_dump()
    data["workload"]["num_requests"] = len(trace.arrival_s)
    if name:
        data["workload"]["name"] = name
    return data
