"""Builds (target, SpecConfig) for each registered method on a tiny random target, drafters random too."""
from __future__ import annotations

import importlib

from specrl.spec import SpecConfig


def _ngram(model, tmp_path):
    return model, SpecConfig(method="ngram", num_speculative_tokens=4, ngram_min=1)


def _suffix(model, tmp_path):
    return model, SpecConfig(method="suffix", num_speculative_tokens=4, ngram_min=1)


FACTORIES = {"ngram": _ngram, "suffix": _suffix}
_MODULES = {"ngram": "specrl.spec.ngram", "suffix": "specrl.spec.suffix", "draft_model": "specrl.spec.draft_model",
            "eagle3": "specrl.spec.eagle3", "mtp": "specrl.spec.mtp"}


def available(methods):
    ok = []
    for m in methods:
        try:
            importlib.import_module(_MODULES[m])
        except ImportError:
            continue
        if m in FACTORIES:
            ok.append(m)
    return ok


def make(method, model, tmp_path):
    return FACTORIES[method](model, tmp_path)
