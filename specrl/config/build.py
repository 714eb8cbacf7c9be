"""Dataclass trees from plain dicts (type-checked, coerced: ``lr: 1e-4`` in YAML becomes a float) and back.

Errors are ConfigErrors that name the dotted key, the bad value, what was expected and the fix.
"""
from __future__ import annotations

import dataclasses
import difflib
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any, TypeVar, Union

import yaml

from ..errors import ConfigError, require, require_min  # noqa: F401 (specrl.config's names)

T = TypeVar("T")

NONE_STRINGS = ("null", "none", "~", "")


def parse_yaml_scalar(raw: str) -> Any:
    """YAML-parse one override or list value; text that is not YAML stays a string."""
    try:
        return yaml.safe_load(raw) if raw.strip() else raw
    except yaml.YAMLError:
        return raw


def from_dict(cls: type[T], data: Mapping[str, Any], path: str = "") -> T:
    """Build dataclass ``cls`` from ``data``; a nested field whose default is an instance keeps that
    instance's values for the keys ``data`` does not set.

    Renamed keys are declared only in two class-level tables of ``cls``: ``MOVED`` (old key -> the dotted key
    that replaced it, from the root, or from ``cls`` when it starts with ".") and ``REMOVED`` (old key -> why
    it went and what to do instead). An old key in ``data`` is a ConfigError that says so.

    A class whose sub-sections are known only at run time (`SpecConfig`: each drafter method's options, by
    method name) names them in ``sections()`` (name -> dataclass) and the dict field that holds them in
    ``SECTIONS_FIELD``; its ``renamed()`` (old key -> new dotted keys below ``cls``) lists keys that still
    work for one release, each moved to its new place with a one-line note (config/renamed.py).
    """
    if not dataclasses.is_dataclass(cls):
        raise TypeError(f"from_dict expects a dataclass type, got {cls!r}")
    if not isinstance(data, Mapping):
        raise ConfigError(f"{path or '<root>'}: expected a mapping for {cls.__name__}, got {data!r}")
    sections = cls.sections() if hasattr(cls, "sections") else {}
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init and f.name != getattr(cls, "SECTIONS_FIELD", None)}
    data = _move_old_keys(cls, data, path)  # the whole tree's, before defaults fill the new keys
    for key in data:
        if key not in sections:
            _check_key(cls, str(key), data[key], list(fields) + list(sections), path)
    hints = typing.get_type_hints(cls)
    kwargs: dict[str, Any] = {}
    for name, value in data.items():
        if name in sections:
            kwargs.setdefault(cls.SECTIONS_FIELD, {})[name] = _coerce(sections[name], value, _join(path, name))
            continue
        f = fields[name]
        default = f.default if f.default_factory is dataclasses.MISSING else f.default_factory()
        if isinstance(value, Mapping) and dataclasses.is_dataclass(default):
            value = _deep_merge(to_dict(default), value)
        kwargs[name] = _coerce(hints[name], value, _join(path, name))
    for name, f in fields.items():
        if name not in kwargs and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise ConfigError(f"missing required config key '{_join(path, name)}' for {cls.__name__}")
    return cls(**kwargs)


def _move_old_keys(cls: type, data: Mapping[str, Any], path: str) -> dict[str, Any]:
    """``data`` with the renamed keys of every class in the tree of ``cls`` moved to their new places."""
    out = _move_renamed(data, cls.renamed(), path) if hasattr(cls, "renamed") else dict(data)
    hints = typing.get_type_hints(cls)
    for name, value in out.items():
        options = [a for a in typing.get_args(hints.get(name)) if a is not type(None)] or [hints.get(name)]
        if isinstance(value, Mapping) and len(options) == 1 and dataclasses.is_dataclass(options[0]):
            out[name] = _move_old_keys(options[0], value, _join(path, name))
    return out


def _move_renamed(data: Mapping[str, Any], renamed: Mapping[str, tuple[str, ...]], path: str) -> dict[str, Any]:
    """``data`` with each old key of ``renamed`` set at its new dotted places (unless set there already), and
    one note per old key on stderr."""
    from .renamed import note
    out = dict(data)
    for old in [k for k in data if k in renamed]:
        value, new = out.pop(old), renamed[old]
        note("specrl", _join(path, old), [_join(path, n) for n in new])
        for dotted in new:
            *parents, leaf = dotted.split(".")
            node = out
            for part in parents:
                node[part] = dict(node.get(part) or {})
                node = node[part]
            node.setdefault(leaf, value)
    return out


def _check_key(cls: type, key: str, value: Any, valid: list[str], path: str) -> None:
    """A ConfigError for a key ``cls`` does not take: a moved one names its new place, a removed one why."""
    full = _join(path, key)
    if key in getattr(cls, "REMOVED", {}):
        raise ConfigError(f"config key '{full}' was removed: {cls.REMOVED[key]}")
    if key in getattr(cls, "MOVED", {}):
        new = cls.MOVED[key]  # ".sub.key": relative to cls's own place in the tree
        new = _join(path, new[1:]) if new.startswith(".") else new
        raise ConfigError(f"config key '{full}' was replaced by '{new}': set {new}={value!r} instead and delete "
                          f"'{full}' (from a resumed run's config.yaml too)")
    if key not in valid:
        close = difflib.get_close_matches(key, valid, n=1, cutoff=0.5)
        hint = f" (did you mean '{_join(path, close[0])}'?)" if close else ""
        where = f"under '{path}'" if path else "at the top level"
        raise ConfigError(f"unknown config key '{full}'{hint}; valid keys {where}: {', '.join(sorted(valid))}")


def _coerce(tp: Any, value: Any, key: str) -> Any:
    """Check ``value`` against type annotation ``tp``, converting strings where unambiguous."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is Any or tp is object:
        return value
    if origin is Union or origin is types.UnionType:
        return _coerce_union(args, value, key)
    if origin in (list, tuple) or tp in (list, tuple):
        return _coerce_sequence(tp, value, key)
    if dataclasses.is_dataclass(tp):
        if isinstance(value, tp):
            return value
        if isinstance(value, Mapping):
            return from_dict(tp, value, key)
        raise _type_error(key, value, f"a mapping of {tp.__name__} fields")
    if tp in _SCALARS:
        parse, expected = _SCALARS[tp]
        try:
            return parse(value)
        except ValueError:
            raise _type_error(key, value, expected) from None
    if isinstance(tp, type) and isinstance(value, tp):
        return value
    raise _type_error(key, value, getattr(tp, "__name__", repr(tp)))


def _coerce_union(args: tuple, value: Any, key: str) -> Any:
    allows_none = type(None) in args
    if value is None or (allows_none and isinstance(value, str) and value.strip().lower() in NONE_STRINGS):
        if allows_none:
            return None
        raise _type_error(key, value, "a value (null is not allowed here)")
    options = [a for a in args if a is not type(None)]
    if len(options) == 1:  # Optional[X]: let X's own error (e.g. an unknown nested key) through
        return _coerce(options[0], value, key)
    # the option matching the value's own type goes first, so ``int | str`` keeps "7" a str
    options.sort(key=lambda o: type(value) is not o)
    for option in options:
        try:
            return _coerce(option, value, key)
        except ConfigError:
            pass
    names = " or ".join(_type_name(o) for o in options) + (" or null" if allows_none else "")
    raise _type_error(key, value, names)


def _coerce_sequence(tp: Any, value: Any, key: str) -> Any:
    origin, args = typing.get_origin(tp) or tp, typing.get_args(tp)
    if isinstance(value, str):
        value = parse_yaml_scalar(value)
    if not isinstance(value, (list, tuple)):
        raise _type_error(key, value, f"a list ({_type_name(tp)})")
    if origin is tuple and args and not (len(args) == 2 and args[1] is Ellipsis):
        if len(value) != len(args):
            raise _type_error(key, value, f"a list of exactly {len(args)} items ({_type_name(tp)})")
        return tuple(_coerce(a, v, f"{key}[{i}]") for i, (a, v) in enumerate(zip(args, value)))
    item_tp = args[0] if args else Any
    items = [_coerce(item_tp, v, f"{key}[{i}]") for i, v in enumerate(value)]
    return tuple(items) if origin is tuple else items


def _number(v: Any) -> Any:
    """Numeric strings ("3", "1e-4", "inf") parsed; other values unchanged."""
    if not isinstance(v, str):
        return v
    try:
        return int(v)
    except ValueError:
        return float(v)


def _to_bool(v: Any) -> bool:
    """The one bool parser of every command: true/yes/on/1 and false/no/off/0 (YAML reads `1` as an int)."""
    low = v.strip().lower() if isinstance(v, str) else str(v) if type(v) is int else v
    if v is True or low in ("true", "yes", "on", "1"):
        return True
    if v is False or low in ("false", "no", "off", "0"):
        return False
    raise ValueError(v)


def _to_int(v: Any) -> int:
    v = _number(v)
    if type(v) is float and v.is_integer():
        return int(v)
    if type(v) is not int:
        raise ValueError(v)
    return v


def _to_float(v: Any) -> float:
    v = _number(v)
    if type(v) not in (int, float):
        raise ValueError(v)
    return float(v)


def _to_str(v: Any) -> str:
    if type(v) not in (str, int, float):  # numbers come from YAML, e.g. run_name: 2024
        raise ValueError(v)
    return str(v)


# type -> (parser raising ValueError, what the error message says was expected)
_SCALARS: dict[type, tuple[Callable[[Any], Any], str]] = {
    bool: (_to_bool, "a boolean (true/false)"),
    int: (_to_int, "an integer"),
    float: (_to_float, "a number such as 0.5 or 1e-4"),
    str: (_to_str, "a string"),
}


def to_dict(obj: Any) -> Any:
    """Plain YAML-safe data (dicts, lists, scalars) from a dataclass tree."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        sections = getattr(obj, "SECTIONS_FIELD", None)  # its sections are written as its own keys
        out = {f.name: to_dict(getattr(obj, f.name)) for f in dataclasses.fields(obj) if f.name != sections}
        return {**out, **to_dict(getattr(obj, sections))} if sections else out
    if isinstance(obj, Mapping):
        return {k: to_dict(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_dict(v) for v in obj]
    return obj


def _type_error(key: str, value: Any, expected: str) -> ConfigError:
    return ConfigError(f"{key or '<root>'}={value!r} is invalid: expected {expected}")


def _type_name(tp: Any) -> str:
    return tp.__name__ if isinstance(tp, type) and not typing.get_args(tp) else str(tp).replace("typing.", "")


def _deep_merge(base: dict[str, Any], update: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in update.items():
        out[k] = _deep_merge(out[k], v) if isinstance(v, Mapping) and isinstance(out.get(k), dict) else v
    return out


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else str(name)
