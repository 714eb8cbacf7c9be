"""`ngram`: prompt lookup (drafter.py). Model-free: no weights, so no cold start, training or export."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ...config.build import require
from ...engine.methods import SpecConfig
from ..base import ModelFree


@dataclass
class NgramOptions:
    """`rollout.spec.ngram`: the suffix lengths prompt lookup matches."""
    min: int = 2  # shortest suffix a match must have
    max: int = 8  # longest suffix it tries
    OLD_KEYS: ClassVar[dict[str, str]] = {"ngram_min": "min", "ngram_max": "max"}  # read for one release

    def validate(self) -> None:
        require(1 <= self.min <= self.max, "ngram.min", self.min, f"in [1, ngram.max={self.max}]")


class Ngram(ModelFree):
    name = "ngram"
    options = NgramOptions

    def build(self, spec: SpecConfig, target, num_slots: int, max_len: int):
        from .drafter import NgramDrafter
        return NgramDrafter(spec, next(target.parameters()).device)

    def vllm_config(self, spec: SpecConfig, ctx) -> dict:
        from ..vllm import k_config
        return {**k_config(spec), "prompt_lookup_min": spec.options[self.name].min,
                "prompt_lookup_max": spec.options[self.name].max}
