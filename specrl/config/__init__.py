"""Typed config trees: dataclasses built from YAML plus ``key.sub=value`` overrides (``files``), type-checked
and coerced (``build``), each dataclass's own ``validate()`` run, and written back as YAML atomically."""
from .build import ConfigError, from_dict, require, require_min, to_dict
from .files import dump_yaml, load_config, validate_config

__all__ = ["ConfigError", "dump_yaml", "from_dict", "load_config", "require", "require_min", "to_dict",
           "validate_config"]
