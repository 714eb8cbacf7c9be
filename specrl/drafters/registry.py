"""The one list of speculative methods: name -> the class that carries everything about it (how it builds in
the engine, cold start, training, export, vLLM mapping, simulator cost). A new method is one folder and one line
here. Each class is imported when first asked for, so the list reads without torch; specrl/__init__.py imports
this module, which hands its lookup to the engine (engine/methods.py `use_registry`).
"""
from __future__ import annotations

import importlib

from ..engine.methods import DrafterMethod, use_registry

REGISTRY: dict[str, str] = {
    "draft_model": "specrl.drafters.draft_model.method:DraftModel",
    "eagle3": "specrl.drafters.eagle3.method:Eagle3",
    "mtp": "specrl.drafters.mtp.method:MTP",
    "ngram": "specrl.drafters.ngram.method:Ngram",
    "suffix": "specrl.drafters.suffix.method:Suffix",
    "auto": "specrl.drafters.auto.method:Auto",
}
_loaded: dict[str, DrafterMethod] = {}


def register(name: str, method: str | DrafterMethod) -> None:
    """Adds (or replaces) method `name`: a "module:Class" path or a method object (e.g. a test's toy method)."""
    REGISTRY[name] = method if isinstance(method, str) else f"<object {type(method).__name__}>"
    _loaded.pop(name, None)
    if not isinstance(method, str):
        _loaded[name] = method


def unregister(name: str) -> None:
    REGISTRY.pop(name, None)
    _loaded.pop(name, None)


def get_method(name: str | None) -> DrafterMethod:
    """The method object of `name`; an unknown name raises a ValueError that lists the valid ones."""
    if name not in REGISTRY:
        raise ValueError(f"unknown speculative method {name!r}; valid: {list(REGISTRY)} (or method=None to "
                         "turn SD off)")
    if name not in _loaded:
        module, cls = REGISTRY[name].split(":")
        _loaded[name] = getattr(importlib.import_module(module), cls)()
    return _loaded[name]


def names() -> tuple[str, ...]:
    return tuple(REGISTRY)


use_registry(get_method, names)
