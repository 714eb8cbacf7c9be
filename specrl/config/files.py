"""Config files and overrides: YAML in, ``key.sub=value`` overrides applied, the tree validated, YAML out."""
from __future__ import annotations

import dataclasses
import os
import types
import typing
from collections.abc import Mapping
from typing import Any, TypeVar, Union

import yaml

from ..io import atomic_write_text
from .build import NONE_STRINGS, ConfigError, _join, from_dict, parse_yaml_scalar, to_dict

T = TypeVar("T")


def load_config(cls: type[T], yaml_path: str | os.PathLike | None = None, overrides: list[str] | None = None) -> T:
    """Build ``cls`` from an optional YAML file, then ``key.sub=value`` overrides; validate the tree."""
    data = load_yaml(yaml_path) if yaml_path is not None else {}
    cfg = from_dict(cls, apply_overrides(cls, data, overrides or []))
    validate_config(cfg)
    return cfg


def apply_overrides(cls: type, data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """``data`` (plain YAML data for ``cls``) with each ``key.sub=value`` override set in it."""
    for item in overrides:
        _set_dotted(data, *parse_override(cls, item))
    return data


def argv_overrides(argv: list[str], shortcuts: Mapping[str, str] | None = None) -> list[str]:
    """A command line's words as ``key=value`` overrides, the one syntax of `specrl train`, `pretrain` and
    `train-drafter`. ``--key=value`` and ``--key value`` read as ``key=value``, a lone ``--key`` (last, or
    before another ``--key`` or a ``key=value``) as ``key=true``, dashes in a key as underscores; a key in
    ``shortcuts`` is replaced by its full dotted key."""
    out, words = [], list(argv)
    while words:
        word = words.pop(0)
        key, sep, value = word.partition("=")
        if key.startswith("--") and not sep:
            takes_next = words and not words[0].startswith("--") and "=" not in words[0]  # not a key=value
            sep, value = "=", (words.pop(0) if takes_next else "true")
        key = key.strip().removeprefix("--")
        key = key.replace("-", "_") if word.startswith("--") else key
        out.append(f"{(shortcuts or {}).get(key, key)}{sep}{value}")
    return out


def load_yaml(path: str | os.PathLike) -> dict[str, Any]:
    """Read a YAML mapping; an empty file is an empty mapping."""
    try:
        with open(path, encoding="utf-8") as f:
            data = yaml.safe_load(f)
    except FileNotFoundError:
        raise ConfigError(f"config file {str(path)!r} does not exist; pass an existing YAML file") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"config file {str(path)!r} is not valid YAML: {e}") from None
    if data is not None and not isinstance(data, Mapping):
        raise ConfigError(f"config file {str(path)!r} must hold a mapping of keys, got {type(data).__name__}")
    return dict(data or {})


def parse_override(cls: type, item: str) -> tuple[str, Any]:
    """``"a.b=value"`` -> (key, value): the value YAML-parsed (``[1, 2]`` is a list) unless the field is a
    string, which keeps the raw text (``name=yes`` stays ``"yes"``)."""
    if "=" not in item:
        raise ConfigError(f"override {item!r} is not of the form key=value; write e.g. max_steps=10")
    key, raw = item.split("=", 1)
    key = key.strip().removeprefix("--")
    if not key or any(not part for part in key.split(".")):
        raise ConfigError(f"override {item!r} has an empty key; write e.g. train.lr=1e-5")
    if _is_str_field(cls, key) and raw.strip().lower() not in NONE_STRINGS:
        return key, raw
    return key, parse_yaml_scalar(raw)


def _is_str_field(cls: type, dotted: str) -> bool:
    """True when ``dotted`` names a field annotated ``str`` or ``str | None`` in the tree of ``cls``."""
    tp: Any = cls
    for part in dotted.split("."):
        hints = typing.get_type_hints(tp) if dataclasses.is_dataclass(tp) else {}
        if part not in hints:
            return False
        tp = hints[part]
        options = [a for a in typing.get_args(tp) if a is not type(None)]
        if typing.get_origin(tp) in (Union, types.UnionType) and len(options) == 1:
            tp = options[0]  # X | None: X
    return tp is str


def _set_dotted(data: dict[str, Any], key: str, value: Any) -> None:
    parts = key.split(".")
    node = data
    for i, part in enumerate(parts[:-1]):
        child = node.get(part)
        if child is None:
            child = node[part] = {}
        elif not isinstance(child, dict):
            prefix = ".".join(parts[: i + 1])
            raise ConfigError(f"override '{key}' sets a sub-key of '{prefix}', which is {child!r}, not a mapping")
        node = child
    node[parts[-1]] = value


def validate_config(cfg: Any, path: str = "") -> None:
    """Call ``validate()`` on every dataclass in the tree, children first; errors get the dotted path."""
    for f in dataclasses.fields(cfg):
        value = getattr(cfg, f.name)
        items = value if isinstance(value, (list, tuple)) else [value]
        for i, item in enumerate(items):
            if dataclasses.is_dataclass(item) and not isinstance(item, type):
                sub = _join(path, f.name) + (f"[{i}]" if isinstance(value, (list, tuple)) else "")
                validate_config(item, sub)
    check = getattr(cfg, "validate", None)
    if callable(check):
        try:
            check()
        except ConfigError as e:
            if not path:
                raise
            raise ConfigError(f"in '{path}': {e}") from None


def dump_yaml(obj: Any, path: str | os.PathLike) -> None:
    """Write ``obj`` (dataclass or mapping) as YAML atomically: temporary file, fsync, then rename."""
    atomic_write_text(path, yaml.safe_dump(to_dict(obj), sort_keys=False, default_flow_style=False))
