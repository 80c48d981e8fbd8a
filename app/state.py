"""Session state keys and the URL codec. The only module that touches `st.query_params`.

A link carries the whole config: `?preset=<name>` for an unmodified preset (short), otherwise
`?cfg=<urlsafe-base64(zlib(canonical JSON))>`. The full config is encoded, not a diff against
defaults, so a later change of defaults cannot change what an old link means.
"""

from __future__ import annotations

import base64
import binascii
import copy
import hashlib
import json
import weakref
import zlib
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import urlencode

from pydantic import ValidationError

from app.components.text import choices_hint
from sim_core import PresetError, SimConfig, config_from_dict, list_presets, load_preset
from sim_core.config import MAX_SHOWN_PATH, NotAField, format_validation_error, set_dotted, shown_value
from sim_core.inputs import BracketTextError, InputError, NestingError, close_names, loads_bounded, value_from_text
from sim_core.presets import DEFAULT_SCENARIO, resolve_scenario
from sim_core.unused import unused_settings

CFG_KEY = "sim.cfg"  # the current valid SimConfig
PRESET_KEY = "sim.preset"  # name of the preset the config equals, or None once modified
BASE_KEY = "sim.base"  # the preset the config was last loaded from (readable links diff against it)
WARNING_KEY = "sim.link_warning"
LINK_KEYS_KEY = "sim.link_keys"  # the dotted settings the session's link set (`show_link_notices`)
PRESENTER_KEY = "ui.presenter"  # larger fonts, one chart at a time
MAX_LINK_CHARS = 16_000  # longer links break in some browsers and chat tools
MAX_DECODED_BYTES = 4 * 1024 * 1024  # guard against zip bombs in a tampered link
CFG_CUT_ADVICE = "copy the whole link again, or use Share for a fresh one"


DERIVED_KEY = "sim.derived"  # values derived from a few config objects (see `derived`)
MAX_DERIVED_CONFIGS = 4  # the session's config, its run's copy, a step-through re-run's: each a few small values


def canonical_json(cfg: SimConfig) -> str:
    return json.dumps(cfg.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))


def _in_script_run() -> bool:
    from streamlit.runtime.scriptrunner_utils.script_run_context import get_script_run_ctx

    return get_script_run_ctx(suppress_warning=True) is not None


def derived(cfg: SimConfig, name: Any, compute: Any) -> Any:
    """`compute(cfg)`, computed once per config object per session and kept while that object lives.

    Why: a rerun that leaves the config alone (a slider of the timeline, a tab) re-derived its key, link and
    description from the whole config; an uploaded 100,000-request trace made that seconds of the server's
    interpreter on every rerun, for every other session too. A config is immutable, so a value derived from one object
    holds for its life. Entries are keyed by identity and hold the config by weak reference (an entry never keeps a
    config alive, and one whose config has gone is never read, whatever object later reuses its id); at most
    MAX_DERIVED_CONFIGS configs, and callers keep only small values here (a digest, a link that fits in a link, a line
    of text), so the session's share is a few kilobytes. Outside a script run (a thread of a page, a test calling a
    function directly) it computes."""
    if not _in_script_run():
        return compute(cfg)
    import streamlit as st

    memo: dict[int, tuple[weakref.ref, dict]] = st.session_state.setdefault(DERIVED_KEY, {})
    entry = memo.pop(id(cfg), None)
    if entry is None or entry[0]() is not cfg:
        entry = (weakref.ref(cfg), {})
    memo[id(cfg)] = entry  # (most recently used last)
    for dead in [k for k, (ref, _) in memo.items() if ref() is None]:
        del memo[dead]
    while len(memo) > MAX_DERIVED_CONFIGS:
        del memo[next(iter(memo))]
    values = entry[1]
    if name not in values:
        values[name] = compute(cfg)
    return values[name]


def remember(cfg: SimConfig, name: Any, value: Any) -> None:
    """Record a value of `cfg` known without computing it (a run's config has the key of the config it was run for)."""
    derived(cfg, name, lambda _: value)


def config_key(cfg: SimConfig) -> str:
    """The config's identity for caches shared between sessions: a digest of its canonical JSON, once per config object
    (see `derived`). A digest, not the JSON: an uploaded trace's JSON is 15 MB."""
    return derived(cfg, "key", lambda c: hashlib.sha256(canonical_json(c).encode()).hexdigest())


def encode_config(cfg: SimConfig, max_chars: int | None = None) -> str | None:
    """The config as a link parameter; None when `max_chars` is given and it would be longer (found without compressing
    all of a large config: level 9 of an uploaded trace's 15 MB took seconds only to be too long for a link)."""
    data = canonical_json(cfg).encode()
    if max_chars is not None and _compressed_exceeds(data, max_chars * 3 // 4):
        return None
    text = base64.urlsafe_b64encode(zlib.compress(data, 9)).decode().rstrip("=")
    return None if max_chars is not None and len(text) > max_chars else text


COMPRESS_CHUNK_BYTES = 256 * 1024


def _compressed_exceeds(data: bytes, max_bytes: int) -> bool:
    """Whether zlib level 9 makes more than `max_bytes` of `data`, stopping as soon as its output says so."""
    z = zlib.compressobj(9)
    out = 0
    for start in range(0, len(data), COMPRESS_CHUNK_BYTES):
        out += len(z.compress(data[start : start + COMPRESS_CHUNK_BYTES]))
        if out > max_bytes:
            return True
    return out + len(z.flush()) > max_bytes


def decode_config(text: str, source: str = "link") -> SimConfig:
    """Inverse of `encode_config`. Raises PresetError naming what is wrong with the link."""
    return config_from_inflated(inflate_config(text, source), source)


def inflate_config(text: str, source: str = "link") -> bytes:
    """A link's cfg parameter decompressed (at most MAX_DECODED_BYTES: milliseconds), not yet parsed: its JSON's size
    says what parsing it costs. Raises PresetError naming what is wrong with the link."""
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        raise PresetError(f"The {source} is damaged: the cfg parameter is not valid base64 ({CFG_CUT_ADVICE}).") from None
    try:
        inflater = zlib.decompressobj()
        data = inflater.decompress(raw, MAX_DECODED_BYTES)
        if inflater.unconsumed_tail:
            raise PresetError(f"The {source} is too large (over {MAX_DECODED_BYTES:,} bytes decoded).")
    except zlib.error:
        raise PresetError(f"The {source} is damaged: the cfg parameter is not a compressed config.") from None
    if not data:  # (base64 skips characters it does not use: "!!!" decodes to nothing)
        raise PresetError(f"The {source} is damaged: the cfg parameter is not a compressed config.")
    if not inflater.eof:
        # a link cut by a chat tool or a line break decompresses to the start of the config: its JSON error
        # ("Unterminated string starting at line 1, column 2") said nothing of why
        raise PresetError(f"The {source} is cut short: its cfg parameter ({len(text):,} characters) ends before the "
                          f"config does ({CFG_CUT_ADVICE}).")  # fmt: skip
    return data


def config_from_inflated(data: bytes, source: str = "link") -> SimConfig:
    """The config of `inflate_config`'s JSON, validated. Raises PresetError naming what is wrong with it."""
    try:
        obj = loads_bounded(data, f"{source} config")
    except InputError as err:
        raise PresetError(f"The {source} is damaged: {err}.") from None
    return config_from_dict(obj, source)


MAX_READABLE_OVERRIDES = 4  # a preset plus this many `section.field=value` params stays readable
# Every field of SimConfig a link may set (derived, so a new section such as `deployment` is linkable at once).
CONFIG_SECTIONS = tuple(f for f in SimConfig.model_fields if f not in ("schema_version", "name", "description"))


def _leaves(data: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(data, dict):
        out: dict[str, Any] = {}
        for k, v in data.items():
            out |= _leaves(v, f"{prefix}{k}.")
        return out
    return {prefix[:-1]: data}


def _param_value(text: str, path: str = "") -> Any:
    """A link value (of the field `path`, named in the error), read as `--set` reads one (`inputs.value_from_text`):
    JSON when it parses (numbers, true, quoted text), else the text itself, but for broken JSON meant as an object or
    a list, JSON nested too deeply, or an object naming a member twice."""
    try:
        return value_from_text(text, "link value")
    except NestingError:
        raise PresetError(f"The link's {path[:MAX_SHOWN_PATH]!r} is JSON nested too deeply to be a config value." if path else
                          "A link value is JSON nested too deeply to be a config value.") from None  # fmt: skip
    except InputError as err:  # (the field, then what is wrong: "Invalid link value: ..." would name neither)
        what = str(err).removeprefix("Invalid link value: ")
        raise PresetError(f"{path or 'a link value'}: {what} (%22...%22 in a link)" if isinstance(err, BracketTextError)
                          else f"{path or 'a link value'}: {what}") from None  # fmt: skip


def _readable_overrides(cfg: SimConfig, base: str) -> dict[str, str] | None:
    """`{dotted.path: value}` turning preset `base` into `cfg`, or None when that would not be short
    and exact (too many changes, lists, or a value that would not parse back to itself)."""
    want, have = _leaves(cfg.model_dump(mode="json")), _leaves(load_preset(base).model_dump(mode="json"))
    if want.keys() != have.keys():
        return None
    diff = {k: v for k, v in want.items() if have[k] != v}
    if len(diff) > MAX_READABLE_OVERRIDES or any(k.split(".")[0] not in CONFIG_SECTIONS for k in diff):
        return None
    out = {}
    for k, v in diff.items():
        text = v if isinstance(v, str) else json.dumps(v)
        try:
            if isinstance(v, list | dict) or _param_value(text) != v:
                return None
        except PresetError:  # (text a link would not read back, e.g. a name starting with "[": the exact encoding)
            return None
        out[k] = text
    return out


def preset_matching(cfg: SimConfig) -> str | None:
    """The built-in scenario this config is identical to, if any."""
    return next((p for p in list_presets() if load_preset(p) == cfg), None)


def config_to_query(cfg: SimConfig, preset: str | None, base: str | None = None, max_chars: int | None = None) -> dict[str, str] | None:
    """Short link for a preset, readable `?preset=…&scheduler.max_num_seqs=64` for a few changes to
    `base`, else the exact encoding of the whole config. None when `max_chars` is given and the link's query would be
    longer (a long config is then compressed only until that is known)."""
    if preset and preset in list_presets() and load_preset(preset) == cfg:
        query = {"preset": preset}
    elif base and base in list_presets() and (over := _readable_overrides(cfg, base)) is not None:
        query = {"preset": base, **over}
    else:
        text = encode_config(cfg, None if max_chars is None else max_chars - len("cfg="))
        if text is None:
            return None
        query = {"cfg": text}
    return None if max_chars is not None and len(urlencode(query)) > max_chars else query



def compare_params(a: dict[str, str] | None, b: dict[str, str] | None) -> dict[str, str]:
    """Compare's address parameters from its two sides' links as Simulate's (`a_…`, `b_…`; a side without one: none)."""
    return {f"{side}_{k}": v for side, query in (("a", a), ("b", b)) for k, v in (query or {}).items()}


def compare_query(a: SimConfig, b: SimConfig) -> dict[str, str] | None:
    """Compare's address parameters with `a` and `b` as its two sides, each a whole `cfg=`, or None when they would pass
    MAX_LINK_CHARS (a trace's requests): half of it for each side."""
    queries = [config_to_query(cfg, None, max_chars=MAX_LINK_CHARS // 2) for cfg in (a, b)]
    return None if None in queries else compare_params(*queries)


def link_query(cfg: SimConfig, preset: str | None, base: str | None = None) -> dict[str, str] | None:
    """`config_to_query` within MAX_LINK_CHARS (None: too long for a link), once per config object (`derived`): every
    page keeps its address bar in sync on every rerun, and an uploaded trace took seconds to compress each time."""
    return derived(cfg, ("link", preset, base), lambda c: config_to_query(c, preset, base, MAX_LINK_CHARS))

def config_from_query(params: dict[str, str], say_unused: bool = True,
                      decode: Callable[[str], SimConfig] = decode_config) -> tuple[SimConfig, str | None, str | None]:  # fmt: skip
    """(config, preset name or None, warning or None). A bad link falls back to the default scenario.

    The preset name is returned only when the link is an unmodified preset. `say_unused`: the warning names the link's
    settings the config does not read (a session says them against its config of the moment: `show_link_notices`).
    `decode`: how a whole config (`cfg=`) is read; a page passes `runner.decode_link_config`, which counts its trace."""
    try:
        if "cfg" in params:
            cfg = decode(params["cfg"])
            # (a preset or a field beside the whole config was dropped without a word: ?cfg=...&seed=7 ran seed 0)
            beside = [k for k in params if k != "cfg" and is_config_param(k)]
            unused = (f"The link's cfg holds the whole config, so its {', '.join(repr(k[:40]) for k in beside[:8])}"
                      f"{' …' if len(beside) > 8 else ''} parameter(s) were not used.") if beside else None  # fmt: skip
            return cfg, preset_matching(cfg), unused
        overrides = {k: v for k, v in params.items() if k.split(".")[0] in CONFIG_SECTIONS}
        if "preset" in params or overrides:
            # knobs without a preset change the default scenario, the one the page opens on (they did nothing, silently)
            name = params.get("preset", DEFAULT_SCENARIO)
            if name not in list_presets():
                unknown = (f"The link names an unknown preset {name[:60]!r}"
                           f"{choices_hint(name, list_presets(), 'the Scenario preset list')}")
                if not overrides:
                    raise PresetError(f"{unknown}.")
                # its values on the default scenario, each checked and named (?preset=default&scheduler.max_num_seqs=0
                # said only "unknown preset" and dropped the bad value without a word)
                cfg, preset, said = _preset_with_overrides(DEFAULT_SCENARIO, overrides, say_unused)
                return cfg, preset, f"{unknown}: the link's values are applied to the default scenario {DEFAULT_SCENARIO!r}." + (f" {said}" if said else "")
            if not overrides:
                return load_preset(name), name, None
            return _preset_with_overrides(name, overrides, say_unused)
    except PresetError as err:
        text = str(err).rstrip(".")
        return load_preset(DEFAULT_SCENARIO), DEFAULT_SCENARIO, f"{text}. Showing the default scenario instead."
    return load_preset(DEFAULT_SCENARIO), DEFAULT_SCENARIO, None


def _preset_with_overrides(name: str, overrides: dict[str, str],
                           say_unused: bool = True) -> tuple[SimConfig, str | None, str | None]:  # fmt: skip
    """Preset `name` with the link's `section.field=value` overrides, less those it cannot use, each named in the
    warning: one bad value (?preset=chat-4xh100-llama70b&scheduler.max_num_seqs=-1&seed=7) threw away the preset
    and every other value for the default scenario. A value the config refuses is found by the error's field; a rule
    between fields that no field of the link is named in (the config's own checks) keeps the values that hold when
    applied in the link's order. Each round drops at least one value: at most about 2n validations for n values."""
    base = load_preset(name).model_dump(mode="json")
    problems: list[str] = []
    kept: dict[str, Any] = {}
    paths = list(overrides)
    for i, (path, text) in enumerate(overrides.items()):
        # a field inside a section a later parameter sets whole is replaced by it (?scheduler.max_num_seqs=4&scheduler={...}
        # ran the section's value, the field's lost without a word)
        whole = next((q for q in paths[i + 1 :] if path.startswith(q + ".")), None)
        if whole is not None:
            problems.append(f"{path[:MAX_SHOWN_PATH]} = {text[:40]}: the link's later {whole[:MAX_SHOWN_PATH]!r} sets that section whole and replaces "
                            "it; give one")  # fmt: skip
            continue
        try:
            value = _param_value(text, path)
            _set_path(copy.deepcopy(base), path, value)
        except PresetError as err:
            problems.append(str(err).rstrip("."))
            continue
        kept[path] = value
    while True:
        try:
            cfg = _validated(base, kept)
            break
        except (PresetError, ValidationError) as err:
            locs = [tuple(map(str, e["loc"])) for e in err.errors()] if isinstance(err, ValidationError) else []
            named = lambda p: any(loc[: len(p)] == p or p[: len(loc)] == loc for loc in locs if loc)  # noqa: E731
            blamed = {path for path in kept if named(tuple(path.split(".")))}
            if blamed:
                problems.append(_problem(err))
            else:  # no field of the link is named (a rule of the whole config, or an unknown preset in a value)
                refused = _refused_in_order(base, kept)
                problems.extend(refused.values())
                blamed = set(refused)
        for path in blamed:
            del kept[path]
    unused_text = link_unused_text(cfg, kept) if say_unused else None
    if not problems:
        return cfg, None, unused_text
    rest = "the preset with the link's other values" if kept else "the preset without the link's values"
    more = f" (and {len(problems) - MAX_LINK_PROBLEMS:,} more)" if len(problems) > MAX_LINK_PROBLEMS else ""
    said = f"{'; '.join(problems[:MAX_LINK_PROBLEMS])}{more}. Showing {rest} instead."
    return cfg, (name if cfg == load_preset(name) else None), said + (f" {unused_text}" if unused_text else "")


MAX_LINK_PROBLEMS = 5  # listed in the warning: a tampered link of 3,000 bad fields made a 200 KB warning


def _validated(base: dict[str, Any], values: dict[str, Any]) -> SimConfig:
    data = copy.deepcopy(base)
    for path, value in values.items():
        _set_path(data, path, value)
    return SimConfig.model_validate(resolve_scenario(data))


def _refused_in_order(base: dict[str, Any], values: dict[str, Any]) -> dict[str, str]:
    """The values that make the config invalid when added one at a time in the link's order, with the problem each."""
    held: dict[str, Any] = {}
    refused = {}
    for path, value in values.items():
        try:
            _validated(base, held | {path: value})
            held[path] = value
        except (PresetError, ValidationError) as err:
            problem = _problem(err)
            # (the rule names another field, the preset's: "Invalid link: scheduler.max_num_batched_tokens = 2048: must
            # be >= scheduler.max_num_seqs (4096) ..." for ?scheduler.max_num_seqs=4096 blamed a field the link never set)
            said = problem.removeprefix("Invalid link: ")
            refused[path] = problem if said.startswith(path) else (
                f"Invalid link: {path} = {shown_value(value)} does not hold with the preset's other values: {said}")  # fmt: skip
    # (each held one at a time yet not all together: cannot happen, but never loop without dropping one)
    return refused or {path: "the link's values do not hold together" for path in values}


def _problem(err: PresetError | ValidationError) -> str:
    text = format_validation_error(err, "link") if isinstance(err, ValidationError) else str(err)
    return text.replace(":\n  ", ": ", 1).replace("\n  ", "; ").rstrip(".")


def _set_path(data: dict[str, Any], path: str, value: Any) -> None:
    """`data` with `section.field` set to `value`, as `--set` sets it (`set_dotted`); PresetError when the path is
    not a field of the config."""
    try:
        set_dotted(data, path, value)
    except NotAField as err:
        whole = f" ({err.field!r} is one field: set it whole)" if err.field else ""
        near = None if err.field else _closest_field(path, data)
        hint = f" (did you mean {near[:60]!r}?)" if near else ""
        raise PresetError(f"The link sets {path[:MAX_SHOWN_PATH]!r}, which is not a field of the config{whole}{hint}.") from None


def _closest_field(path: str, data: dict[str, Any]) -> str | None:
    """The field of `data`'s section a mistyped `path` most likely meant (?workload.rate_per_s=4 meant
    workload.arrival.rate_per_s), by the CLI's rule (`close_names`) on the names after the section's (the shared
    prefix made every scheduler field look close); None when none is close."""
    section, _, rest = path.partition(".")
    fields = {p: f"{section}.{p}" for p in _leaves(data[section])} if isinstance(data.get(section), dict) else {}
    close = close_names(rest, list(fields))
    return fields[close[0]] if close else None


def link_unused_text(cfg: SimConfig, keys: Iterable[str]) -> str | None:
    """The link's settings `cfg` does not read (`sim_core.unused`), one sentence each, or None."""
    return " ".join(f"The link's {text}." for text in unused_settings(cfg, keys)) or None


def is_config_param(key: str) -> bool:
    """Parameters every page accepts: they set the session's config (see `config_from_query`)."""
    return key in ("preset", "cfg") or key.split(".")[0] in CONFIG_SECTIONS


APP_KEYS = ("present",)  # read by every page (streamlit_app.py: presenter mode)


def ignored_params(params: dict[str, str], page_keys: tuple[str, ...] = (), page_prefixes: tuple[str, ...] = ()) -> list[str]:
    """Names of link parameters neither the session config nor this page uses."""
    return [k for k in params if not is_config_param(k) and k not in APP_KEYS and k not in page_keys
            and not k.startswith(page_prefixes or ("\0",))]


def show_link_notices(page_keys: tuple[str, ...] = (), page_prefixes: tuple[str, ...] = (), problems: tuple[str, ...] = ()) -> None:
    """Every page says what of its link it could not use: the session's config link (kept for the
    session), parameters no page reads, and the page's own `problems`. Shown as text, never markdown."""
    import streamlit as st

    from app.components.text import plain

    params = read_query_params()
    notes = [st.session_state.get(WARNING_KEY)] + list(problems)
    # (recomputed against the config now: "read only when scheduler.prefill_mode is 'time_slice' (here 'decode_first')"
    # stayed up after the student switched to time_slice)
    link_keys = st.session_state.get(LINK_KEYS_KEY)
    if link_keys and CFG_KEY in st.session_state:  # (once per config object: a pool's answer validates its config)
        notes.insert(1, derived(st.session_state[CFG_KEY], ("link_unused", link_keys), lambda c: link_unused_text(c, link_keys)))
    if params.get("present", "1") not in ("0", "1"):  # (?present=yes left presenter mode off without a word)
        notes.append(f"The link's present = {params['present'][:40]!r} is not used (allowed: 1, presenter mode).")
    unknown = ignored_params(params, page_keys, page_prefixes)
    if unknown:
        shown = ", ".join(repr(k[:40]) for k in unknown[:8]) + (" …" if len(unknown) > 8 else "")
        notes.append(f"This page ignored link parameter(s) it does not use: {shown}.")
    for note in notes:
        if note:
            st.warning(plain(note), icon=":material/link_off:")


def read_query_params() -> dict[str, str]:
    """The link's parameters that it names once. One named twice or more is used by no page (`repeated_note` says so):
    ?scheduler.max_num_seqs=2&scheduler.max_num_seqs=4 ran 4 without a word, while a file or `--set` naming a key twice
    is refused."""
    return {k: v[0] for k, v in _link_values().items() if len(v) == 1}


def _link_values() -> dict[str, list[str]]:
    """Every link parameter with all the values the link gives it."""
    import streamlit as st

    return {k: st.query_params.get_all(k) for k in st.query_params}


def repeated_note() -> str | None:
    """What the link names more than once, and that none of those values was used (None: nothing repeated)."""
    repeated = {k: v for k, v in _link_values().items() if len(v) > 1}
    if not repeated:
        return None
    shown = "; ".join(f"{k[:60]!r} {len(v)} times ({', '.join(repr(x[:40]) for x in v[:4])}{' …' if len(v) > 4 else ''})"
                      for k, v in list(repeated.items())[:8])  # fmt: skip
    return f"The link names {shown}{' …' if len(repeated) > 8 else ''}: none of those values was used; give each once."


def _names_config(key: str) -> bool:
    """A link parameter that carries (part of) a config: the session's, or one of Compare's two sides."""
    return is_config_param(key) or (key[:2] in ("a_", "b_") and is_config_param(key[2:]))


def presenter_params() -> dict[str, str]:
    """The address's part while presenter mode is on, on every page: a reload or a copied address of Compare or Sweep
    (which rewrite it) or of Plan, About or Glossary (whose address Streamlit clears on the way in) opened outside it,
    a review. Pages that write their address write it (`write_query_params`); streamlit_app writes it for the others."""
    import streamlit as st

    return {"present": "1"} if st.session_state.get(PRESENTER_KEY) else {}


def write_query_params(params: dict[str, str]) -> None:
    """Keep the address bar in sync. A config too long for a link (an uploaded trace) is left out, so the address
    holds no config rather than the last one that fitted (a visitor copying it shared another run as this one)."""
    import streamlit as st

    if len(urlencode(params)) > MAX_LINK_CHARS:
        params = {k: v for k, v in params.items() if not _names_config(k)}
    params = {**params, **presenter_params()}
    if {k: st.query_params.get_all(k) for k in params} != {k: [v] for k, v in params.items()} or set(st.query_params) != set(params):
        st.query_params.from_dict(params)  # (get_all: a key the link named twice is written once)


def page_asked(url: str | None) -> str:
    """The page an address names, its last path part ("" for Simulate, the default page), as streamlit_app reads it."""
    from urllib.parse import urlparse

    return urlparse(url or "").path.rstrip("/").rsplit("/", 1)[-1]


def _lesson_side_named_alone(params: dict[str, str]) -> tuple[SimConfig, str] | None:
    """(the config, its scenario preset) of the lesson side a link names with no config of its own, or None. A short
    link an instructor types (`?lesson=3&lesson_step=1`) opened the default scenario under lesson 3's banner, which
    then listed what the default differs in as "Changed since the lesson opened this run"."""
    import streamlit as st

    # (Simulate's address only: the Learn page reads ?lesson= too, to show a lesson, not to set the session's config)
    if "lesson" not in params or any(is_config_param(k) for k in params) or page_asked(st.context.url):
        return None
    from app.components.workshop import banner_from_params  # (workshop reads this module: imported when used)
    from sim_core.lessons import load_lessons

    lessons = load_lessons()
    active, _ = banner_from_params(params, lessons)  # (what it cannot use, the banner's reader names on the page)
    if active is None:
        return None
    lesson_id, step, run = active
    lesson = next(x for x in lessons if x.id == lesson_id)
    return lesson.side_config(step, run), lesson.side_preset(step, run)


def ensure_session(params: dict[str, str] | None = None) -> None:
    """First run of a session: take the config from the link (or the default)."""
    import streamlit as st

    if CFG_KEY in st.session_state:
        return
    params = read_query_params() if params is None else params
    from app.components.runner import decode_link_config  # (runner reads this module: imported when used)

    cfg, preset, warning = config_from_query(params, say_unused=False, decode=decode_link_config)  # (`show_link_notices` says them)
    name = params.get("preset", DEFAULT_SCENARIO)
    if (side := _lesson_side_named_alone(params)) is not None:
        cfg, name = side
        preset = preset_matching(cfg)
    st.session_state[CFG_KEY] = cfg
    st.session_state[PRESET_KEY] = preset
    # the preset the config was built from, also when the link's bad values were dropped (a readable link diffs against it)
    # (an unknown preset's link is built on the default scenario: config_from_query)
    st.session_state[BASE_KEY] = preset or (name if name in list_presets() else DEFAULT_SCENARIO)
    repeated = repeated_note()
    # The link's settings a run does not read are said by `show_link_notices` against the config of the moment: the
    # session keeps the keys (a value the link had refused is named in the warning already: "scheduler.x = -1: ...")
    st.session_state[LINK_KEYS_KEY] = tuple(k for k in params if "." in k and is_config_param(k)
                                            and not (warning and f"{k} = " in warning))  # fmt: skip
    st.session_state[WARNING_KEY] = " ".join(filter(None, (warning, repeated))) or None
