"""Reading untrusted input: JSON text, numbers written as text, and files named on a command line.

Every function here either returns a value or raises `InputError` (a ValueError) with a message fit
for a visitor; none can recurse without bound, read without bound or block on a pipe.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import stat
from pathlib import Path
from typing import Any

# A SimConfig is 4 levels deep (config > workload > arrival > field; traces are lists at level 3);
# anything much deeper is not a config, and Python's JSON parser would hit the recursion limit.
MAX_JSON_DEPTH = 32

# ASCII digits only: Python's int() and float() also accept "1_000" and Arabic-Indic "١٢٣".
_INT_TEXT = re.compile(r"[+-]?[0-9]+\Z")
_FLOAT_TEXT = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?\Z")


class InputError(ValueError):
    """Input that is not what it claims to be; the message says what and where."""


class NestingError(InputError):
    """JSON nested deeper than MAX_JSON_DEPTH (parsed or not: the parser's own recursion is caught)."""


_SCALARS = frozenset((str, int, float, bool, type(None)))  # what JSON parses to besides objects and arrays


def json_depth(value: Any) -> int:
    """Nesting depth of parsed JSON: containers inside containers (a scalar is 0, `[]` is 1)."""
    deepest = 0
    stack = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if not isinstance(node, dict | list):
            continue
        deepest = max(deepest, depth)
        if depth > MAX_JSON_DEPTH:
            return depth
        values = node.values() if isinstance(node, dict) else node
        # (only containers go on the stack, and a list of scalars is seen as such by C code: an uploaded trace's
        # 4 million ids took seconds one by one)
        if not _SCALARS.issuperset(map(type, values)):
            stack.extend((v, depth + 1) for v in values if isinstance(v, dict | list))
    return deepest


class DuplicateKeyError(InputError):
    """A JSON object that names a member twice."""


class _DuplicateKey(Exception):
    def __init__(self, key: str) -> None:
        self.key = key


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An object's members; a name given twice raises (json.loads kept the last one silently)."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKey(key)
        out[key] = value
    return out


MAX_INT_DIGITS = 30  # digits of a JSON integer read as an int; no setting takes a longer one


def json_int(text: str) -> int | float:
    """A JSON integer, as `json.loads(parse_int=...)` reads it: one of more than MAX_INT_DIGITS digits becomes the float
    it rounds to (inf past ~1e308). Python refuses int() of more than 4,300 digits (a ValueError that crashed every
    page a 61-character link reached, and the CLI's --set), and no setting takes such a number: validation then refuses
    it naming the field and its range."""
    return int(text) if len(text) <= MAX_INT_DIGITS else float(text)


def loads_bounded(text: str | bytes, source: str = "config") -> Any:
    """`json.loads` that reports bad or deeply nested JSON, or an object naming a member twice (which of the two
    values was meant is unknowable: `{"num_requests": 5, "num_requests": 7}` ran 7), as an InputError naming
    `source`."""
    if isinstance(text, bytes | bytearray):
        try:
            text = bytes(text).decode("utf-8-sig")  # Excel and Notepad write a byte-order mark
        except UnicodeDecodeError as err:
            raise InputError(f"Invalid {source}: not UTF-8 text (byte {err.start})") from None
    try:
        data = json.loads(text.removeprefix("\ufeff"), object_pairs_hook=_unique_keys, parse_int=json_int)
    except _DuplicateKey as dup:
        raise DuplicateKeyError(f"Invalid {source}: the key {printable(dup.key)[:80]!r} appears twice in one object; "
                         "give each field once") from None  # fmt: skip
    except json.JSONDecodeError as err:
        # (json's "Unterminated string starting at" and "Invalid control character at" end in "at" already)
        what = err.msg.removesuffix(" at")
        raise InputError(f"Invalid {source}: not valid JSON ({what} at line {err.lineno}, column {err.colno})") from None
    except RecursionError:
        data = None
        depth = MAX_JSON_DEPTH + 1
    else:
        depth = json_depth(data)
    if depth > MAX_JSON_DEPTH:
        raise NestingError(f"Invalid {source}: JSON nested more than {MAX_JSON_DEPTH} levels deep; a config is at most a few levels")
    return data


class BracketTextError(InputError):
    """Text that starts with { or [ (meant as an object or a list) and is not valid JSON."""


def value_from_text(raw: str, source: str) -> Any:
    """A config value written as text, the one reading of `--set key=value` and of a link's `?key=value`: JSON when it
    parses (numbers, true, "quoted text", objects, lists), else the text itself. Refused (InputError, naming `source`):
    JSON nested too deeply, an object naming a member twice, and text that starts with { or [ but is not JSON, meant as
    an object or a list (read as text it was refused as "a valid dictionary", or taken as a GPU's name by a link while
    --set refused it: BracketTextError)."""
    try:
        return loads_bounded(raw, source)
    except (NestingError, DuplicateKeyError):
        raise
    except InputError as err:
        if raw.lstrip()[:1] in ("{", "["):
            raise BracketTextError(f"{err} in {printable(raw)[:200]!r}; text that starts with {{ or [ goes in JSON quotes") from None
        return raw


def parse_int_text(text: str) -> int:
    """An integer written in ASCII digits with an optional sign; ValueError otherwise."""
    text = text.strip()
    if not _INT_TEXT.match(text):
        raise ValueError(f"{printable(text)[:40]!r} is not a whole number")
    if len(text.lstrip("+-")) > MAX_INT_DIGITS:  # (int() of 5,000 digits raised Python's own ValueError, no value named)
        raise ValueError(f"{text[:20]!r}… ({len(text):,} digits) is too large")
    return int(text)


def parse_float_text(text: str) -> float:
    """A finite decimal number in ASCII (e.g. 1.5, -2e3); ValueError for nan, inf, 1_0 and others."""
    text = text.strip()
    if not _FLOAT_TEXT.match(text):
        raise ValueError(f"{text!r} is not a number")
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise ValueError(f"{text!r} is too large")
    return value


def check_regular_file(path: str | Path, limit_bytes: int, what: str = "config file") -> None:
    """Refuse anything but a regular file of at most `limit_bytes`, before it is opened: a device
    (/dev/zero) reads forever, a FIFO blocks waiting for a writer, a directory is no file."""
    name = str(path)
    try:
        info = os.stat(name)
    except OSError as err:
        raise InputError(f"cannot read {what} {name!r}: {err.strerror}") from None
    if stat.S_ISDIR(info.st_mode):
        raise InputError(f"cannot read {what} {name!r}: it is a directory")
    if not stat.S_ISREG(info.st_mode):
        raise InputError(f"cannot read {what} {name!r}: not a regular file (a device, pipe or socket)")
    if info.st_size > limit_bytes:
        raise InputError(f"{what} {name!r} is {info.st_size:,} bytes; the limit is {limit_bytes:,}")


def read_file_bounded(path: str | Path, limit_bytes: int, what: str = "config file") -> bytes:
    """Read a regular file of at most `limit_bytes` (`check_regular_file` first)."""
    name = str(path)
    check_regular_file(name, limit_bytes, what)
    try:
        with open(name, "rb") as fh:
            data = fh.read(limit_bytes + 1)  # bounded even if the file grows meanwhile
    except OSError as err:
        raise InputError(f"cannot read {what} {name!r}: {err.strerror}") from None
    if len(data) > limit_bytes:
        raise InputError(f"{what} {name!r} is over {limit_bytes:,} bytes, the limit")
    return data


def printable(text: str) -> str:
    """`text` with anything a terminal cannot encode escaped (lone surrogates from argv, say)."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def close_names(name: str, names: tuple[str, ...] | list[str]) -> list[str]:
    """The names (at most three) a misspelt or shortened `name` most likely meant, best first (see `did_you_mean`)."""
    typed = name.strip().lower()
    holding = [n for n in names if len(typed) >= 3 and typed in n.lower()]
    if len(holding) > 3:  # (held by many, `chat-h100` by 4 scenarios: the few it begins are what was cut short)
        holding = [n for n in holding if n.lower().startswith(typed)]
    if 0 < len(holding) <= 3:
        return holding
    # (one letter off a long name comes before a name inside what was typed: `preemption_headroom_stepz` is
    # `preemption_headroom_steps`, not `preemption`)
    near = difflib.get_close_matches(typed, list(names), n=1, cutoff=0.9)
    if near:
        return near
    # (a name inside what was typed: a scenario's `engine-sglang` given as an engine is `sglang`; the longest one held)
    held = sorted((n for n in names if len(n) >= 3 and n.lower() in typed), key=len, reverse=True)
    return held[:1] or difflib.get_close_matches(typed, list(names), n=1, cutoff=0.75)


def did_you_mean(name: str, names: tuple[str, ...] | list[str]) -> str:
    """' (did you mean 'x'?)' for the names a misspelt or shortened `name` most likely meant, or '' when none is close:
    a typo's message listed every choice (51 scenarios) and left the reader to find the one they meant. Names that
    contain what was typed come first (`h100` is `h100-sxm`, not the `h200` one letter away), then a spelling a letter
    or two off a long name, then the longest name what was typed contains (`engine-sglang` is `sglang`), then near
    spellings."""
    close = close_names(name, names)
    if not close:
        return ""
    quoted = [repr(n) for n in close]
    return f" (did you mean {', '.join(quoted[:-1]) + ' or ' + quoted[-1] if len(quoted) > 1 else quoted[0]}?)"
