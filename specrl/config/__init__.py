"""Typed config machinery: dataclass trees built from YAML plus ``key.sub=value`` overrides.

Every part of specrl describes its settings as a dataclass. ``build`` turns plain dicts into those trees
(type-checked and coerced, so ``lr: 1e-4`` in YAML becomes a float) and back; ``files`` reads YAML,
applies command-line overrides, runs each dataclass's own ``validate()``, and writes configs atomically.
"""
from .build import ConfigError, from_dict, require, require_min, to_dict
from .files import dump_yaml, load_config, load_yaml, parse_override, validate_config

__all__ = ["ConfigError", "dump_yaml", "from_dict", "load_config", "load_yaml", "parse_override", "require",
           "require_min", "to_dict", "validate_config"]
