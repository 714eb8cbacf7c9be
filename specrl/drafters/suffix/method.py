"""`suffix`: SuffixDecoding over the prompt and the rollouts of the same problem (drafter.py, tree.py).
Model-free: no weights, so no cold start, training or export."""
from __future__ import annotations

import importlib.util
from pathlib import Path

from ...engine.methods import SpecConfig


class Suffix:
    name = "suffix"
    trainable, adaptive, defers = False, False, False

    def engine_drafting(self, spec: SpecConfig, target, num_slots: int, max_len: int):
        from ...engine.pool import static_drafting
        return static_drafting(self, spec, target, num_slots, max_len)

    def build(self, spec: SpecConfig, target, num_slots: int, max_len: int):
        from .drafter import SuffixDrafter
        return SuffixDrafter(spec, next(target.parameters()).device)

    def vllm_config(self, spec: SpecConfig, ctx) -> dict:
        from ..vllm import UnsupportedMethod, k_config
        if not self.vllm_available():
            raise UnsupportedMethod("vLLM's suffix decoding needs arctic-inference, which is not installed here "
                                    "(pip install arctic-inference; it ships no build for every platform)")
        return {**k_config(spec), "suffix_decoding_max_spec_factor": spec.suffix_scale}

    def vllm_available(self) -> bool:
        return importlib.util.find_spec("arctic_inference") is not None

    def vllm_refit(self, model_dir: Path) -> None:
        return None

    def sim_draft_frac(self, head_frac: float) -> float:
        return 0.0  # CPU work, which the simulator's fitted overheads hold
