"""`suffix`: SuffixDecoding over the prompt and the rollouts of the same problem (drafter.py, tree.py).
Model-free: no weights, so no cold start, training or export."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ...config.build import require
from ...engine.methods import SpecConfig
from ...registry import installed
from ..base import ModelFree


@dataclass
class SuffixOptions:
    """`rollout.spec.suffix`: how long a matched suffix must be, how deep the tries index, how far a match
    drafts."""
    min: int = 2  # shortest suffix a match must have
    max: int = 8  # longest suffix the tries index (their depth)
    scale: float = 1.0  # draft up to scale * match length tokens (capped at k)
    # read for one release; ngram_min/ngram_max set both n-gram methods, as they did
    OLD_KEYS: ClassVar[dict[str, str]] = {"ngram_min": "min", "ngram_max": "max", "suffix_scale": "scale"}

    def validate(self) -> None:
        require(1 <= self.min <= self.max, "suffix.min", self.min, f"in [1, suffix.max={self.max}]")
        require(self.scale > 0, "suffix.scale", self.scale, "> 0")


class Suffix(ModelFree):
    name = "suffix"
    options = SuffixOptions

    def build(self, spec: SpecConfig, target, num_slots: int, max_len: int):
        from .drafter import SuffixDrafter
        return SuffixDrafter(spec, next(target.parameters()).device)

    def vllm_config(self, spec: SpecConfig, ctx) -> dict:
        from ..vllm import UnsupportedMethod, k_config
        if not self.vllm_available():
            raise UnsupportedMethod("vLLM's suffix decoding needs arctic-inference, which is not installed here "
                                    "(pip install arctic-inference; it ships no build for every platform)")
        return {**k_config(spec), "suffix_decoding_max_spec_factor": spec.options[self.name].scale}

    def vllm_available(self) -> bool:
        return installed("arctic_inference")
