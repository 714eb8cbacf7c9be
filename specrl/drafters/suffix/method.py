"""`suffix`: SuffixDecoding over the prompt and the rollouts of the same problem (drafter.py, tree.py).
Model-free: no weights, so no cold start, training or export."""
from __future__ import annotations

from ...engine.methods import SpecConfig
from ...registry import installed
from ..base import ModelFree


class Suffix(ModelFree):
    name = "suffix"

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
        return installed("arctic_inference")
