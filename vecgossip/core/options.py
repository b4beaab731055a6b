"""Options declared once (issue 36): every part of vecgossip declares the options it reads as an
:class:`Options` model beside its code (``TopologyConfig`` in ``network/topology.py``,
``SGDConfig`` in ``core/optim.py``, ...), each field with its type, its constraints and a one-line
description; the config is validated against them at one boundary (:mod:`vecgossip.config.load`)
into typed objects, and nothing downstream reads the raw config.

They are pydantic v2 models in strict mode (no ``"5"`` for an int, no ``1`` for a bool, no unknown
key, frozen): OmegaConf's structured configs type a field but cannot carry its range (``ge``,
``le``, finite) or a choice that a registry extends at run time, which pydantic's annotated fields
do (the docs' design page says why). :func:`one_line` turns a validation error into the single line
the command line prints: the option as the user typed it, what it takes, what was given."""
from __future__ import annotations

import dataclasses
import difflib
import math
import typing
from typing import Any, Callable, Iterable, Literal

import annotated_types as at
from pydantic import AfterValidator, BaseModel, ConfigDict, ValidationError
from pydantic_core import PydanticCustomError

from vecgossip.core.errors import ConfigError


class Options(BaseModel):
    """Base of every part's options: strict types, no unknown key, immutable."""

    model_config = ConfigDict(strict=True, extra="forbid", frozen=True, validate_default=True)

    def replace(self, **changes: Any):
        """A copy with ``changes`` (validated like the original)."""
        return type(self).model_validate({**self.model_dump(), **changes})


def one_of(allowed: Callable[[], Iterable[str]]) -> AfterValidator:
    """A string field whose values are the names ``allowed()`` returns when the config is
    validated (a registry a user's plug-in may extend: models, data sets, topologies)."""
    def check(v):
        names = list(check.allowed())
        if v not in names:
            raise PydanticCustomError("unknown_choice", "unknown", {"allowed": ", ".join(map(str, names))})
        return v
    check.allowed = allowed            # what the configuration reference lists
    return AfterValidator(check)


# -- one line per validation error --------------------------------------------------------------
def validate_field(model: type[BaseModel], name: str, value: Any) -> Any:
    """``value`` checked as ``model``'s field ``name`` alone (type and constraints); ConfigError
    (one line) if it is not one."""
    from pydantic import TypeAdapter
    f = model.model_fields[name]
    adapter = TypeAdapter(typing.Annotated[(f.annotation, *f.metadata)] if f.metadata else f.annotation,
                          config=ConfigDict(strict=True))
    try:
        return adapter.validate_python(value)
    except ValidationError as err:
        e = err.errors()[0]
        if e["type"] in ("unknown_choice", "literal_error", "value_error"):
            raise ConfigError(f"{name}={value!r}: {e['msg']}") from None
        raise ConfigError(f"{name} must be {describe(f.annotation, f.metadata)}, got {value!r}") from None


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """`` (did you mean X?)`` for the closest of ``choices`` to ``word``, or ``""``."""
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" (did you mean {close[0]}?)" if close else ""


def one_line(err: ValidationError, model: type[BaseModel], prefix: str = "") -> str:
    """The first error of ``err`` (validating ``model``) as one line naming the option by its full
    key (``prefix``: where the model sits in the config, e.g. ``"optim."``)."""
    e = err.errors()[0]
    loc = [p for p in e["loc"] if isinstance(p, str) and p.isidentifier()]   # union members' tags left out
    tagged = len(loc) < len(e["loc"])
    if e["type"] == "extra_forbidden":
        return unknown_key(prefix + ".".join(map(str, loc)), model, loc)
    key = prefix + ".".join(loc)
    shown = key
    got = e.get("input")
    if e["type"] in ("unknown_choice", "literal_error") and not tagged:
        allowed = e.get("ctx", {}).get("allowed") or _literal_values(field_of(model, loc))
        return f"{shown}={got!r} is unknown; allowed: {allowed}"
    if e["type"] == "value_error":               # a model's own cross-field rule: its message as written
        return str(e["ctx"]["error"])
    if e["type"] == "missing":
        return f"{shown} is required"
    f = field_of(model, loc)
    if f is None:
        return f"{shown}: {e['msg']}"
    return f"{shown} must be {describe(f.annotation, f.metadata)}, got {got!r}"


def unknown_key(key: str, model: type[BaseModel], loc: list) -> str:
    """``unknown option optim.lrr; optim takes: lr, momentum, ... (did you mean lr?)``."""
    parent_loc, word = loc[:-1], str(loc[-1])
    parent = key.rsplit(".", 1)[0] if "." in key else ""
    owner = model_at(model, parent_loc)
    names = list(owner.model_fields) if owner is not None else []
    takes = f"; {parent or 'the top level'} takes: {', '.join(names)}" if names else ""
    return f"unknown option {key}{takes}{did_you_mean(word, names)}"


def model_at(model: type[BaseModel], loc: list) -> type[BaseModel] | None:
    for part in loc:
        f = model.model_fields.get(part) if model is not None else None
        model = _model_type(f.annotation) if f is not None else None
    return model


def field_of(model: type[BaseModel], loc: list):
    owner = model_at(model, loc[:-1])
    return None if owner is None or not loc else owner.model_fields.get(loc[-1])


def _model_type(annotation) -> type[BaseModel] | None:
    for t in (annotation, *typing.get_args(annotation)):
        if isinstance(t, type) and issubclass(t, BaseModel):
            return t
    return None


def _literal_values(f) -> str:
    if f is None:
        return ""
    optional = type(None) in typing.get_args(f.annotation)
    for t in (f.annotation, *typing.get_args(f.annotation)):
        if typing.get_origin(t) is Literal:
            return ", ".join((["null"] if optional else []) + ["null" if v is None else str(v) for v in typing.get_args(t)])
    return ""


def _flat(metadata) -> list:
    """Constraint objects, a ``Field(...)`` inside ``Annotated`` opened into its own."""
    out = []
    for m in metadata:
        out += _flat(m.metadata) if hasattr(m, "metadata") and isinstance(getattr(m, "metadata"), list) else [m]
    return out


def describe(annotation, metadata: list) -> str:
    """What a field takes, in words: ``an integer >= 1``, ``a number in [0, 1]``, ``null or ...``."""
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) in (typing.Union, getattr(__import__("types"), "UnionType", None)):
        rest = [a for a in args if a is not type(None)]
        head = "null or " if len(rest) < len(args) else ""
        return head + " or ".join(describe(a, metadata if len(rest) == 1 else []) for a in rest)
    if typing.get_origin(annotation) is typing.Annotated:
        return describe(args[0], _flat([*args[1:], *metadata]))
    if typing.get_origin(annotation) is Literal:
        return " or ".join(map(str, args))
    if typing.get_origin(annotation) in (list, tuple):
        return "a list"
    metadata = _flat(metadata)
    word = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}.get(annotation, "valid")
    if annotation is float and any(getattr(m, "allow_inf_nan", None) is False for m in metadata):
        word = "a finite number"
    return word + _bounds(metadata)


def _bounds(metadata: list) -> str:
    lo = next(((m.ge, "[") for m in metadata if isinstance(m, at.Ge)), None) or \
        next(((m.gt, "(") for m in metadata if isinstance(m, at.Gt)), None)
    hi = next(((m.le, "]") for m in metadata if isinstance(m, at.Le)), None) or \
        next(((m.lt, ")") for m in metadata if isinstance(m, at.Lt)), None)
    if lo and hi:
        return f" in {lo[1]}{lo[0]}, {hi[0]}{hi[1]}"
    if lo:
        return f" {'>=' if lo[1] == '[' else '>'} {lo[0]}"
    if hi:
        return f" {'<=' if hi[1] == ']' else '<'} {hi[0]}"
    return ""


def finite(v: float) -> float:
    """A finite float (for fields whose bounds are open at infinity)."""
    if not math.isfinite(v):
        raise ValueError("not finite")
    return v


# -- an algorithm's Params (a plain dataclass a user writes) ------------------------------------
def strict(cls: type, value: dict, prefix: str = "") -> None:
    """Every bool option holds true/false, every int option an integer, every float option a
    number (null where the schema allows it), recursively through the groups."""
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if f.name not in value:
            continue
        v, key, typ = value[f.name], prefix + f.name, hints[f.name]
        args = typing.get_args(typ)
        if typing.get_origin(typ) is typing.Union and type(None) in args:
            if v is None:
                continue
            typ = next(a for a in args if a is not type(None))
        if dataclasses.is_dataclass(typ) and isinstance(v, dict):
            strict(typ, v, key + ".")
        elif typ is bool and not isinstance(v, bool):
            raise ConfigError(f"{key} must be true or false, got {v!r}")
        elif typ is int and (isinstance(v, bool) or not isinstance(v, int)):
            raise ConfigError(f"{key} must be an integer, got {v!r}")
        elif typ is float and (isinstance(v, bool) or not isinstance(v, (int, float))):
            raise ConfigError(f"{key} must be a number, got {v!r}")


def _in_words(annotation: str) -> str:
    """A field's annotation as a user reads it: ``float | None`` -> ``a number or null``."""
    words = {"float": "a number", "int": "an integer", "bool": "true or false", "str": "a string",
             "None": "null", "Optional": ""}
    parts = [p.strip() for p in annotation.replace("Optional[", "").replace("]", "").split("|")]
    named = [words.get(p, p) for p in parts if p]
    return " or ".join(dict.fromkeys(n for n in named if n)) or "of its declared type"


def dataclass_params(params_cls: type, given: dict, prefix: str, owner: str):
    """A plug-in's options ``given`` (a dict from the config at ``prefix``: ``algorithm``,
    ``adversary.params``) as its ``Params`` dataclass, checked as OmegaConf checks a structured
    config: an unknown key (with the closest one), a value of the wrong type, or the dataclass's
    own checks (``__post_init__``) refused in one line naming ``prefix.key`` and ``owner``."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    from vecgossip.core.errors import ConfigError
    if not dataclasses.is_dataclass(params_cls):
        raise ConfigError(f"{owner}: its Params must be a dataclass")
    fields = [f.name for f in dataclasses.fields(params_cls)]
    unknown = [k for k in given if k not in fields]
    if unknown:
        raise ConfigError(f"unknown option {prefix}.{unknown[0]}; {owner} takes: {', '.join(fields) or 'nothing'}"
                          + did_you_mean(unknown[0], fields))
    strict(params_cls, given, prefix + ".")
    types = {f.name: f.type if isinstance(f.type, str) else getattr(f.type, "__name__", str(f.type))
             for f in dataclasses.fields(params_cls)}
    try:
        return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(params_cls), given))
    except OmegaConfBaseException as err:   # a value of the wrong type (OmegaConf's, first: it is a ValueError too)
        key = getattr(err, "full_key", None) or getattr(err, "key", None)
        if key in given:
            raise ConfigError(f"{prefix}.{key} must be {_in_words(types.get(key, ''))}, got {given[key]!r} "
                              f"({owner})") from None
        msg = str(err).split("\n", 1)[0]
        raise ConfigError(f"{prefix}: {msg} ({owner} takes: {', '.join(fields)})") from None
    except ValueError as err:          # the Params' own checks (its __post_init__), named as options
        msg = str(err).split("\n", 1)[0]
        raise ConfigError(f"{prefix}.{msg}" if msg.split(" ", 1)[0] in fields else f"{prefix}: {msg}") from None
