"""Drafters by name. Each module is imported only when its method is asked for."""
from __future__ import annotations

import importlib

from .config import METHODS, SpecConfig

_BUILDERS = {
    "draft_model": "specrl.spec.draft_model",
    "eagle3": "specrl.spec.eagle3",
    "mtp": "specrl.spec.mtp",
    "ngram": "specrl.spec.ngram",
    "suffix": "specrl.spec.suffix",
    "auto": "specrl.spec.auto",
}
assert set(_BUILDERS) == set(METHODS)


def build_drafter(spec: SpecConfig, target, num_slots: int, max_len: int):
    """Returns a Drafter (see specrl.engine.drafting) for `spec.method`.
    Each module exposes `build(spec, target, num_slots, max_len)`."""
    if spec.method not in _BUILDERS:
        raise ValueError(f"unknown speculative method {spec.method!r}; valid: {sorted(_BUILDERS)}")
    if spec.draft_model == "scratch":  # cold start from the policy (spec/scratch.py)
        from .scratch import build as build_scratch, model_method
        model_method(spec)  # a model-free method (or auto over one) has nothing to start: a clear error
        if spec.method != "auto":  # auto builds its inner drafter through here
            return build_scratch(spec, target, num_slots, max_len)
    module = importlib.import_module(_BUILDERS[spec.method])
    return module.build(spec, target, num_slots, max_len)
