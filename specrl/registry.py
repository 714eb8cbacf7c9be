"""Imports by name, the one place specrl imports a module from a string: the registries' "module:attribute"
targets (drafters/registry.py's methods, pipeline/seam.py's backends and drivers) and the optional packages a
command looks for without importing them. A leaf module, so that every registry, whatever its floor, shares it;
tests/test_layering.py reads each such string as an import edge.
"""
from __future__ import annotations

import functools
import importlib
import importlib.util
from pathlib import Path
from typing import Any, Callable


def load(target: str | Callable) -> Any:
    """The object a "module:attribute.attribute" path names, its module imported now (a callable passes
    through, e.g. a test's own factory)."""
    if callable(target):
        return target
    module, sep, attrs = target.partition(":")
    if not sep or not attrs:
        raise ValueError(f"{target!r} is not a 'module:attribute' path; write e.g. 'specrl.pipeline.local:"
                         "LocalRollout'")
    return functools.reduce(getattr, attrs.split("."), importlib.import_module(module))


def installed(module: str) -> bool:
    """Whether `module` can be imported here, without importing it (an optional dependency)."""
    return importlib.util.find_spec(module) is not None


def package_dirs(module: str) -> list[Path]:
    """The folders of installed package `module` ([] when it is not installed, or is a plain module)."""
    spec = importlib.util.find_spec(module)
    return [Path(d) for d in (spec.submodule_search_locations or [])] if spec is not None else []
