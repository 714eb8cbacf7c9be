"""`ngram`: prompt lookup (drafter.py). Model-free: no weights, so no cold start, training or export."""
from __future__ import annotations

from ...engine.methods import SpecConfig
from ..base import ModelFree


class Ngram(ModelFree):
    name = "ngram"

    def build(self, spec: SpecConfig, target, num_slots: int, max_len: int):
        from .drafter import NgramDrafter
        return NgramDrafter(spec, next(target.parameters()).device)

    def vllm_config(self, spec: SpecConfig, ctx) -> dict:
        from ..vllm import k_config
        return {**k_config(spec), "prompt_lookup_min": spec.ngram_min, "prompt_lookup_max": spec.ngram_max}
