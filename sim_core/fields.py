"""The config's settings as a reference: every field `--set` and a link can name, with its type, default, allowed range
and description, read from the one config model (`python -m sim_core fields [PREFIX]`). The README and `--set`'s help
named a few fields by example; the rest were in config.py alone."""

from __future__ import annotations

import json
import typing
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from sim_core.config import SimConfig, allowed_range, section_model
from sim_core.inputs import did_you_mean


@dataclass(frozen=True)
class FieldRow:
    path: str  # dotted, as --set takes it
    type_text: str
    default_text: str  # the config model's default (a preset may set another)
    allowed: str  # allowed_range's words, '' when none are declared
    description: str


def _type_text(annotation: Any) -> str:
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Literal:  # (its choices are the allowed values; schema_version's is a number)
        return "text" if all(isinstance(a, str) for a in args) else "integer" if all(type(a) is int for a in args) else "value"
    if origin in (tuple, list):
        return "list"
    if origin is dict:
        return "mapping"
    if args and type(None) in args:  # Optional[X]
        inner = [a for a in args if a is not type(None)]
        return " or ".join(_type_text(a) for a in inner) + " or null"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "object"
    return {bool: "true/false", int: "integer", float: "number", str: "text"}.get(annotation, str(annotation))


def _default_of(info: Any) -> Any:
    """A field's own default (its factory's value), or _REQUIRED."""
    if info.default_factory is not None:
        return info.default_factory()
    return _REQUIRED if info.is_required() else info.default


_REQUIRED = object()


def _shown(value: Any) -> str:
    if value is _REQUIRED:
        return "required"
    if isinstance(value, BaseModel):
        value = value.model_dump(mode="json")
    elif isinstance(value, tuple | list):
        value = [v.model_dump(mode="json") if isinstance(v, BaseModel) else v for v in value]
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 60 else text[:57] + "..."


def config_fields(model: type[BaseModel] = SimConfig, prefix: tuple[str, ...] = (), default: Any = None) -> list[FieldRow]:
    """Every settable field under `model` (default: the whole config), sections walked into, in declaration order,
    each with the default the config model gives it (`default`: the section's own default, when it has one). An
    optional section (None by default, e.g. `deployment`) lists the fields it holds once set."""
    if default is None and model is SimConfig:
        default = SimConfig()
    rows = []
    for name, info in model.model_fields.items():
        loc = (*prefix, name)
        value = getattr(default, name) if isinstance(default, BaseModel) else _default_of(info)
        section = section_model(info.annotation)
        if section is not None:
            rows += config_fields(section, loc, value if isinstance(value, BaseModel) else None)
            continue
        rows.append(FieldRow(".".join(loc), _type_text(info.annotation), _shown(value), allowed_range(loc),
                             " ".join((info.description or "").split())))  # fmt: skip
    return rows


def fields_text(prefix: str = "") -> str:
    """The reference as text: one block per field whose dotted path starts with `prefix` (a section, or a field).
    Raises ValueError naming the sections when `prefix` names none."""
    every = config_fields()
    rows = [r for r in every if not prefix or r.path == prefix or r.path.startswith(prefix.rstrip(".") + ".")]
    if not rows:
        top = tuple(dict.fromkeys(r.path.split(".")[0] for r in every))
        raise ValueError(f"fields {prefix!r}: no setting starts with it{did_you_mean(prefix.split('.')[0], top)}; "
                         f"sections: {', '.join(top)}")
    out = []
    for r in rows:
        allowed = f"; allowed: {r.allowed}" if r.allowed else ""
        out.append(f"{r.path}  ({r.type_text}, default {r.default_text}{allowed})")
        if r.description:
            out.append(f"    {r.description}")
    return "\n".join(out)
