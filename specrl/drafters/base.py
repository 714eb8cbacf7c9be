"""What the method classes (drafters/<m>/method.py) share, so that each reads as what is its own.

    Drafting      a method that drafts by itself: its one drafter, `num_speculative_tokens` drafts every step
    ModelFree     one without weights (ngram, suffix): nothing to cold-start, train, export or refit
    WithWeights   one with a checkpoint (draft_model, eagle3, mtp): the embedded default, or a cold start from
                  the policy (`draft_model="scratch"`), or the checkpoint `draft_model` names (its own `load`)

Small bases with no state: a method still lists every member of `DrafterMethod` (engine/methods.py) by
inheriting or defining it, and `ModelMethod` (registry.py) says what a method with weights adds.
"""
from __future__ import annotations

from pathlib import Path

from ..engine.methods import SCRATCH, SHIPPED_DRAFTERS_DIR, SpecConfig


class Drafting:
    adaptive = False
    options = None  # a method with options of its own sets its dataclass
    name: str

    def engine_drafting(self, spec: SpecConfig, target, num_slots: int, max_len: int):
        from ..engine.pool import static_drafting
        return static_drafting(self, spec, target, num_slots, max_len)

    def vllm_available(self) -> bool:
        return True


class ModelFree(Drafting):
    trainable, defers = False, False

    def vllm_refit(self, model_dir: Path) -> None:
        return None  # no weights to refit

    def sim_draft_frac(self, head_frac: float) -> float:
        return 0.0  # CPU work, which the simulator's fitted overheads hold


class WithWeights(Drafting):
    trainable = True

    @property
    def shipped_dir(self) -> Path:
        """The embedded default checkpoint (`specrl train-drafter`'s default output)."""
        return SHIPPED_DRAFTERS_DIR / self.name

    def build(self, spec: SpecConfig, target, num_slots: int, max_len: int):
        from .scratch import cold_start
        if spec.draft_model == SCRATCH:
            return cold_start(self, target, num_slots, max_len)
        return self.load(spec.draft_model, target, num_slots, max_len)

    def load(self, draft_model: str | None, target, num_slots: int, max_len: int):
        """The engine's Drafter over checkpoint `draft_model` (None: `shipped_dir`)."""
        raise NotImplementedError(f"{type(self).__name__} has weights but no load: define it in its method.py")
