"""`ngram`: prompt lookup (drafter.py). Model-free: no weights, so no cold start, training or export."""
from __future__ import annotations

from pathlib import Path

from ...engine.methods import SpecConfig


class Ngram:
    name = "ngram"
    trainable, adaptive, defers = False, False, False

    def engine_drafting(self, spec: SpecConfig, target, num_slots: int, max_len: int):
        from ...engine.pool import static_drafting
        return static_drafting(self, spec, target, num_slots, max_len)

    def build(self, spec: SpecConfig, target, num_slots: int, max_len: int):
        from .drafter import NgramDrafter
        return NgramDrafter(spec, next(target.parameters()).device)

    def vllm_config(self, spec: SpecConfig, ctx) -> dict:
        from ..vllm import k_config
        return {**k_config(spec), "prompt_lookup_min": spec.ngram_min, "prompt_lookup_max": spec.ngram_max}

    def vllm_available(self) -> bool:
        return True

    def vllm_refit(self, model_dir: Path) -> None:
        return None

    def sim_draft_frac(self, head_frac: float) -> float:
        return 0.0  # CPU work, which the simulator's fitted overheads hold
