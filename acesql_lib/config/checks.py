"""How a config section checks itself: its values against its fields' types (pydantic, strict), the rules
that tie two settings together, and a section built from a profile's mapping with unknown keys refused.

A value of the wrong type or out of bounds, or an unknown key, raises a `ConfigError` that names the key, the
value, what is allowed, and the file.
"""
from __future__ import annotations

import dataclasses
import functools
import typing
from typing import Any


class ConfigError(ValueError):
    """A profile or override that cannot be used; the message names the key and the source."""


def check(ok: bool, name: str, msg: str) -> None:
    """A rule that ties settings together: a `ConfigError` naming `name` with `msg` unless `ok`."""
    if not ok:
        raise ConfigError(f"{name}: {msg}")


def _is_section(tp: Any) -> bool:
    """A field type that holds config sections (a dataclass class, or a list of them): they validate themselves."""
    return (isinstance(tp, type) and dataclasses.is_dataclass(tp)) or any(_is_section(a) for a in typing.get_args(tp))


_BOUNDS = {"gt": ">", "ge": ">=", "lt": "<", "le": "<="}


def field_bounds(hint: Any) -> dict[str, Any]:
    """The bounds a field's type declares ({"gt": 0, "le": 1}), from its annotated_types metadata."""
    found = {}
    for meta in getattr(hint, "__metadata__", ()):
        for m in getattr(meta, "metadata", [meta]):  # a pydantic Field(...) holds its bounds in .metadata
            found.update({k: getattr(m, k) for k in _BOUNDS if hasattr(m, k)})
    return found


def _bounds(hint: Any) -> str:
    """The bounds a field's type declares in words ("> 0 and <= 1")."""
    return " and ".join(f"{_BOUNDS[k]} {v}" for k, v in field_bounds(hint).items())


@functools.cache
def _field_adapters(cls: type) -> dict[str, tuple[Any, str]]:
    """For each field of `cls` that holds a value (not a section): a pydantic validator of its type (its
    Literal choices, its Field bounds) and its bounds in words."""
    from pydantic import TypeAdapter

    hints, plain = typing.get_type_hints(cls, include_extras=True), typing.get_type_hints(cls)
    return {f.name: (TypeAdapter(hints[f.name]), _bounds(hints[f.name]))
            for f in dataclasses.fields(cls) if not _is_section(plain[f.name])}


def validate_fields(obj: Any, section: str) -> None:
    """Every value of a config section against its field's type (pydantic, strict: nothing is coerced, an int
    is read as a float); the validated value replaces the given one (1 -> 1.0). The error names the key, the
    value and what is allowed."""
    from pydantic import ValidationError

    for name, (adapter, bounds) in _field_adapters(type(obj)).items():
        value = getattr(obj, name)
        try:
            setattr(obj, name, adapter.validate_python(value, strict=True))
        except ValidationError as e:
            err = e.errors()[0]
            where = "".join(f"[{p!r}]" for p in err["loc"] if p != "[key]")  # a list index or a mapping key
            if err["type"] == "literal_error":
                problem = f"is not allowed (allowed: {err['ctx']['expected']})"
            elif err["type"] in ("greater_than", "greater_than_equal", "less_than", "less_than_equal"):
                ctx = err.get("ctx", {})  # a bound inside a list or mapping: the one it broke
                problem = f"is out of bounds (must be {bounds or ' and '.join(f'{_BOUNDS[k]} {ctx[k]}' for k in ctx)})"
            else:
                problem = err["msg"].replace("Input should be", "is not")
            raise ConfigError(f"{section}.{name}{where}: {err['input']!r} {problem}") from None


def build_section(cls: type, values: dict[str, Any], prefix: str, source: str) -> Any:
    """A config section from a mapping: unknown keys are refused here, sections inside it are built from their
    mappings, and the section validates its own values (`validate_fields`, its `__post_init__`)."""
    if not isinstance(values, dict):
        raise ConfigError(f"{source}: {prefix}: expected a mapping, got {type(values).__name__}")
    hints = typing.get_type_hints(cls)
    known = {f.name for f in dataclasses.fields(cls)}
    kwargs = {}
    for key, value in values.items():
        name = f"{prefix}.{key}" if prefix else key
        if key not in known:
            raise ConfigError(f"{source}: unknown key {name!r} (known: {', '.join(sorted(known))})")
        kwargs[key] = build_section(hints[key], value, name, source) if dataclasses.is_dataclass(hints[key]) else value
    try:
        return cls(**kwargs)
    except ConfigError as e:
        raise ConfigError(f"{source}: {e}") from None
