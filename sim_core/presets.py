"""Presets are data: JSON files under presets/, resolved and validated by `SimConfig`.

A scenario file (presets/scenarios/*.json) names its parts: `"hardware": "h100-sxm"`, or
`{"preset": "h100-sxm", "num_gpus": 2}` to override fields; `"engine": "vllm-v1"` merges an engine
preset's scheduler and KV-cache settings. A full config (e.g. `config.json` written by the CLI) loads
through the same function. No preset has a code path of its own.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

from pydantic import BaseModel, ValidationError

from sim_core.config import MAX_SHOWN_PATH, NotAField, SimConfig, format_validation_error, set_dotted, shown_name
from sim_core.inputs import InputError, did_you_mean, loads_bounded, printable, read_file_bounded

PRESETS_DIR = Path(__file__).resolve().parent.parent / "presets"
FAMILIES = ("hardware", "models", "workloads", "engines", "calibration", "scenarios")
FAMILY_NOUNS = {"hardware": "hardware", "models": "model", "workloads": "workload", "engines": "engine",
                "calibration": "calibration", "scenarios": "scenario"}  # fmt: skip
DEFAULT_SCENARIO = "chat-h100-llama8b"
MAX_CONFIG_FILE_BYTES = 20 * 1024 * 1024


class PresetError(InputError):
    """A preset name, file or its contents is invalid; the message says which and why."""


@functools.cache
def list_presets(family: str = "scenarios") -> tuple[str, ...]:
    """Names (file stems) of the built-in presets of one family, sorted. Cached: the files are read-only."""
    if family not in FAMILIES:
        raise PresetError(f"unknown preset family {family!r}; one of {', '.join(FAMILIES)}")
    return tuple(sorted(p.stem for p in (PRESETS_DIR / family).glob("*.json")))


@functools.cache
def _read_family_file(family: str, name: str) -> str:
    if name not in list_presets(family):
        raise PresetError(f"unknown {FAMILY_NOUNS[family]} preset {shown_name(name)}"
                          f"{did_you_mean(name[:MAX_SHOWN_PATH], list_presets(family))}; "
                          f"available: {', '.join(list_presets(family))}")
    return (PRESETS_DIR / family / f"{name}.json").read_text()


def read_preset_data(family: str, name: str) -> dict[str, Any]:
    """The raw JSON of one preset as a fresh dict (callers may mutate it)."""
    return json.loads(_read_family_file(family, name))


@functools.cache
def _models_by_vocabulary() -> Mapping[int, tuple[str, ...]]:
    """Each vocabulary size a model preset has -> those presets (read once, read-only)."""
    by_size: dict[int, tuple[str, ...]] = {}
    for m in list_presets("models"):
        size = read_preset_data("models", m)["vocab_size"]
        by_size[size] = (*by_size.get(size, ()), m)
    return MappingProxyType(by_size)


def models_of_vocabulary(vocab_size: int) -> tuple[str, ...]:
    """The model presets with this vocabulary: the drafts a target of that vocabulary can speculate with
    (`SimConfig._check_draft_vocabulary`; the sidebar's Draft model box offers these). (Cached per size, a link's
    vocab_size of 256 to 1,000,000 kept one entry each for good: the presets' sizes are read once instead.)"""
    return _models_by_vocabulary().get(vocab_size, ())


def describe_preset(family: str, name: str) -> str:
    return str(read_preset_data(family, name).get("description", ""))


def _deep_merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, val in over.items():
        out[key] = _deep_merge(out[key], val) if isinstance(val, dict) and isinstance(out.get(key), dict) else val
    return out


def _resolve_part(family: str, value: Any) -> Any:
    if isinstance(value, str):
        value = {"preset": value}
    if isinstance(value, dict) and "preset" in value:
        rest = {k: v for k, v in value.items() if k != "preset"}
        base = read_preset_data(family, str(value["preset"]))
        base.pop("description", None)
        return _deep_merge(base, rest)
    return value


def resolve_scenario(data: dict[str, Any]) -> dict[str, Any]:
    """Expand preset references in a scenario dict into a plain SimConfig dict."""
    data = dict(data)
    for key, family in (("hardware", "hardware"), ("model", "models"), ("workload", "workloads"), ("calibration", "calibration")):
        if key in data:
            data[key] = _resolve_part(family, data[key])
    trace = data.pop("trace", None)
    if trace is not None:
        data["workload"] = _resolve_trace(trace, data.get("workload") or {})
    dis = (data.get("deployment") or {}).get("disaggregation") if isinstance(data.get("deployment"), dict) else None
    if isinstance(dis, dict):  # pool hardware may name a preset too: "decode": {"hardware": "a100-80gb"}
        for role in ("prefill", "decode"):
            pool = dis.get(role)
            if isinstance(pool, dict) and pool.get("hardware") is not None:
                data["deployment"] = dict(data["deployment"])
                dis = data["deployment"]["disaggregation"] = dict(dis)
                try:
                    hardware = _resolve_part("hardware", pool["hardware"])
                except PresetError as err:  # (which of the three hardware fields: the top-level one, or a pool's)
                    raise PresetError(f"deployment.disaggregation.{role}.hardware = {printable(repr(pool['hardware']))[:80]}: {err}") from None
                dis[role] = dict(pool) | {"hardware": hardware}
    engine = data.pop("engine", None)
    if engine is not None:
        eng = read_preset_data("engines", str(engine))
        for key in ("scheduler", "kv_cache"):
            own = data.get(key, {})
            # a non-object here is left for validation to report by field name
            data[key] = _deep_merge(eng.get(key, {}), own) if isinstance(own, dict) else own
        if "calibration" in eng and "calibration" not in data:  # the engine family's calibration profile
            data["calibration"] = _resolve_part("calibration", eng["calibration"])
    return data


def _resolve_trace(spec: Any, workload: dict[str, Any]) -> dict[str, Any]:
    """A scenario's `"trace": {"file": NAME, ...TraceOptions}` → the workload replaying that bundled trace."""
    from sim_core.traces import TraceError, TraceOptions, load_trace

    if not isinstance(spec, dict) or not isinstance(spec.get("file"), str):
        raise PresetError('scenario "trace" must be an object with "file" (a name in presets/traces) and trace options')
    name = spec["file"]
    if name not in {p.name for p in (PRESETS_DIR / "traces").iterdir()}:
        raise PresetError(f"unknown bundled trace {shown_name(name)} (files in presets/traces)")
    try:
        opts = TraceOptions.model_validate({k: v for k, v in spec.items() if k != "file"})
        loaded = load_trace(PRESETS_DIR / "traces" / name, opts)
    except ValidationError as err:
        raise PresetError(format_validation_error(err, f"trace options of {name!r}", TraceOptions)) from None  # (its ranges)
    except TraceError as err:
        raise PresetError(str(err)) from None
    out = dict(workload)
    out["trace"] = loaded.trace.model_dump()
    out["num_requests"] = len(loaded.trace.arrival_s)
    return out


def config_from_dict(data: Any, source: str = "config") -> SimConfig:
    """Validate a (possibly preset-referencing) dict as a SimConfig; errors name field, value and range."""
    if not isinstance(data, dict):
        raise PresetError(f"Invalid {source}: expected a JSON object, got {type(data).__name__}")
    try:
        return SimConfig.model_validate(resolve_scenario(data))
    except ValidationError as err:
        raise PresetError(format_validation_error(err, source)) from None


def config_with(cfg: SimConfig, update: Mapping[str, Any], source: str = "config") -> SimConfig:
    """`cfg` with settings changed, validated as a whole config: a bad value raises PresetError naming the field, the
    value and the range. The way to change a config: `cfg.model_copy(update=...)` validates nothing, so a seed of 0.5
    or a 0 s SLO would reach the run as given (`run_simulation` checks its config again and refuses it).

    `update`'s keys: a top-level field or a whole section (as its model or a dict), a dotted field
    (`"scheduler.max_num_seqs": 64`, `--set`'s form), or a part by its preset's name (`"engine": "sglang"`,
    `"hardware": "h200"`, `"model"`, `"workload"`; `with_settings`)."""
    try:
        return config_from_dict(with_settings(cfg.model_dump(mode="python"), update.items()), source)
    except NotAField as err:
        raise PresetError(f"Invalid {source}: {not_a_field_text(err)}") from None


# The parts a preset's name stands for, by the key that names one (`--set engine=sglang`, config_with's
# {"hardware": "h200"}), and the family of presets it is read from
PART_FAMILIES = {"engine": "engines", "hardware": "hardware", "model": "models", "workload": "workloads"}


def with_settings(data: dict[str, Any], settings: Iterable[tuple[str, Any]]) -> dict[str, Any]:
    """A config dict with `settings` ((key, value) pairs, `config_with`'s) applied, not yet validated. Parts named by a
    preset go first, in their order, then the fields in theirs (a later one wins): `--set scheduler.max_num_seqs=2
    --set engine=sglang` ran SGLang's own 1,024, the engine swap replacing the field set before it without a word.
    Raises NotAField (with `key`, the setting's) for a path that names no field, PresetError for an unknown preset."""
    settings = list(settings)
    named = lambda key, value: key in PART_FAMILIES and isinstance(value, str)  # noqa: E731
    for key, value in settings:
        if named(key, value):
            data = with_part_data(data, PART_FAMILIES[key], value)
    for key, value in settings:
        if named(key, value):
            continue
        value = value.model_dump(mode="python") if isinstance(value, BaseModel) else value
        try:
            set_dotted(data, key, value)
        except NotAField as err:
            err.key = err.key or key  # (set_dotted names an object's inner path)
            raise
    return data


def not_a_field_text(err: NotAField, how: str = "") -> str:
    """What a dotted setting that names no field (`with_settings`'s NotAField) is told: the part that is none, what
    was meant when a name is close, and what is there; `how` the way a setting is written where it was given
    ('--set ')."""
    cut = lambda text: (text if len(text) <= MAX_SHOWN_PATH  # noqa: E731
                        else f"{text[:MAX_SHOWN_PATH]}… ({len(text):,} characters)")
    # (a key of 100,000 characters was quoted whole, twice: 200 KB of message)
    key, part = cut(err.key or err.part), cut(err.part)
    if err.field:  # (a list or a value: "'classes' is not a section" did not say what to do instead)
        return (f"{how}{key!r}: {err.field!r} is one field, not a section: set it whole, e.g. "
                f"{how}'{err.field}=<JSON value>'")
    if err.is_section:
        return (f"{how}{key!r}: {part!r} is not a section of the config{did_you_mean(err.part[:MAX_SHOWN_PATH], err.fields)}"
                + (f"; sections here: {', '.join(err.fields)}" if err.fields else ""))
    return (f"{how}{key!r}: unknown field {part!r}{did_you_mean(err.part[:MAX_SHOWN_PATH], err.fields)}; fields here: "
            f"{', '.join(err.fields)}" + (f"; or {'/'.join(PART_FAMILIES)}=NAME, a preset" if "." not in key else ""))


def profile_values(name: str) -> dict[str, Any]:
    """A calibration profile's values ('default' = the config model's defaults)."""
    if name == "default":
        return SimConfig().calibration.model_dump(mode="python")
    return _resolve_part("calibration", name)  # (the preset's values without its description, as a scenario reads them)


def with_engine_data(data: dict[str, Any], name: str) -> dict[str, Any]:
    """A config dict with engine preset `name` in it: its scheduler whole, its KV-cache settings over the config's
    (the memory size, dtype and swap space stay), and its family's calibration profile. What choosing an engine does
    in the sidebar and `--set engine=NAME` on the command line."""
    preset = read_preset_data("engines", name)
    out = dict(data)
    out["scheduler"] = preset["scheduler"]
    out["kv_cache"] = dict(data.get("kv_cache") or {}) | preset.get("kv_cache", {})
    if "calibration" in preset:
        out["calibration"] = profile_values(preset["calibration"])
    return out


def with_part_data(data: dict[str, Any], family: str, name: str) -> dict[str, Any]:
    """A config dict with one part replaced by preset `name`: hardware (keeping the GPU count), model, workload or
    engine (`with_engine_data`): what choosing one does in the sidebar and `--set hardware=NAME` on the command line."""
    if family == "engines":
        return with_engine_data(data, name)
    preset = read_preset_data(family, name)
    preset.pop("description", None)
    key = {"hardware": "hardware", "models": "model", "workloads": "workload"}[family]
    keep = {"num_gpus": data["hardware"]["num_gpus"]} if key == "hardware" and isinstance(data.get("hardware"), dict) else {}
    return dict(data) | {key: preset | keep}


def apply_part(cfg: SimConfig, family: str, name: str) -> SimConfig:
    """Replace one part of the config by a preset: hardware (keeping the GPU count), model, workload or engine."""
    return config_from_dict(with_part_data(cfg.model_dump(mode="python"), family, name), f"{FAMILY_NOUNS[family]} preset {name!r}")


# The engines' own sizing of a batch, which their defaults scale with the context and the GPU (vLLM V0 batches
# max(max_model_len, 2,048) tokens without chunked prefill; vLLM V1's limits follow the GPU's memory): a scenario that
# sizes them so still runs that engine's scheduler (engine-vllm-v0 at a 16k context read "custom (from vLLM V0)")
SIZING_FIELDS = {"max_num_batched_tokens", "max_num_seqs"}


def engine_label(cfg: SimConfig) -> str:
    """The engine's name while the scheduler is the engine preset's of that name (its batch sizing aside), else
    'custom (from <name>)': `--set scheduler.prefill_mode=prefill_first` still printed "vLLM V1" in the CLI's header."""
    for name in list_presets("engines"):
        data = read_preset_data("engines", name)
        if data.get("scheduler", {}).get("name") == cfg.scheduler.name:
            try:
                preset = apply_part(cfg, "engines", name).scheduler
                same = preset.model_dump(exclude=SIZING_FIELDS) == cfg.scheduler.model_dump(exclude=SIZING_FIELDS)
            except PresetError:
                same = False
            return cfg.scheduler.name if same else f"custom (from {cfg.scheduler.name})"
    return cfg.scheduler.name


def config_from_json(text: str | bytes, source: str = "config") -> SimConfig:
    """Validate JSON text (a UTF-8 byte-order mark is fine; deep nesting is refused, not recursed into)."""
    if len(text) > MAX_CONFIG_FILE_BYTES:
        raise PresetError(f"Invalid {source}: {len(text):,} bytes, the limit is {MAX_CONFIG_FILE_BYTES:,}")
    try:
        data = loads_bounded(text, source)
    except InputError as err:
        raise PresetError(str(err)) from None
    return config_from_dict(data, source)


@functools.lru_cache(maxsize=64)
def _load_scenario(name: str) -> SimConfig:
    return config_from_dict(json.loads(_read_family_file("scenarios", name)), f"preset {name!r}")


def load_preset(name_or_path: str | Path) -> SimConfig:
    """A built-in scenario by name (see `list_presets()`), or a JSON file by path.

    Raises:
        PresetError: unknown name, unreadable file, or a config that does not validate.
    """
    text = str(name_or_path)
    if text in list_presets("scenarios"):
        return _load_scenario(text)
    if not text.strip():  # (Path('') is '.': `run ''` said "cannot read config file '.': it is a directory")
        raise PresetError(f"an empty preset name {shown_name(text)}: give a preset (`python -m sim_core presets` lists them) or a "
                          "config .json path")  # fmt: skip
    path = Path(text)
    if path.suffix == ".json" or path.exists():
        try:
            raw = read_file_bounded(path, MAX_CONFIG_FILE_BYTES)
        except InputError as err:
            raise PresetError(str(err)) from None
        return config_from_json(raw, f"config file {path.name!r}")
    raise PresetError(f"unknown preset {shown_name(text)}{did_you_mean(text[:MAX_SHOWN_PATH], list_presets('scenarios'))}; "
                      f"available: {', '.join(list_presets('scenarios'))} (or a .json path)")


def default_config() -> SimConfig:
    """The default scenario (`DEFAULT_SCENARIO`), the one the app opens on."""
    return load_preset(DEFAULT_SCENARIO)
