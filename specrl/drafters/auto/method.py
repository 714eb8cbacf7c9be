"""`auto`: the adaptive engine (engine/adaptive/) chooses per sequence and step among `spec.drafters`, or
drafts nothing when drafting does not pay. It drafts nothing itself: no weights, no training of its own."""
from __future__ import annotations

from pathlib import Path

from ...engine.methods import SpecConfig


class Auto:
    name = "auto"
    trainable, adaptive, defers = False, True, False

    def engine_drafting(self, spec: SpecConfig, target, num_slots: int, max_len: int):
        from ...engine.adaptive.factory import build
        return build(spec, target, num_slots, max_len)

    def build(self, spec: SpecConfig, target, num_slots: int, max_len: int):
        raise ValueError("'auto' is not one drafter: the engine builds its drafters and strategy through "
                         "engine_drafting")

    def vllm_config(self, spec: SpecConfig, ctx) -> dict:
        from .vllm import vllm_config
        return vllm_config(spec, ctx)

    def vllm_available(self) -> bool:
        return True

    def vllm_refit(self, model_dir: Path) -> None:
        return None  # the served config names the drafter it runs: vLLM refits that one

    def sim_draft_frac(self, head_frac: float) -> float:
        raise ValueError("the simulator models 'auto' by --adaptive-max-batch over one drafting method: pass "
                         "--sd-method as that method")
