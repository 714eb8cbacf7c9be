"""`auto`: the adaptive engine (engine/adaptive/) chooses per sequence and step among its `drafters`, or
drafts nothing when drafting does not pay. It drafts nothing itself: no weights, no training of its own."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from ...config.build import require
from ...engine.methods import ADAPTIVE_MODES, SpecConfig, drafting_methods


@dataclass
class AutoOptions:
    """`rollout.spec.auto`: what the adaptive engine chooses among, and how it prices a step."""
    # the drafters it chooses among per sequence and step; one that cannot be built here (no checkpoint) is
    # left out with a warning, none at all is an error
    drafters: tuple[str, ...] = ("suffix", "ngram", "eagle3")
    # "measured" fits its cost model to this engine's step timings; "deterministic" freezes it (from
    # `cost_profile`, else counted work), so a seeded run repeats token for token (README, the two modes)
    mode: str = "measured"
    cost_profile: str | None = None  # a cost model saved as JSON (`specrl bench adaptive --save-profile`)
    OLD_KEYS: ClassVar[dict[str, str]] = {"drafters": "drafters", "adaptive_mode": "mode",
                                          "cost_profile": "cost_profile"}  # read for one release

    def validate(self) -> None:
        self.drafters = tuple(self.drafters)
        require(self.mode in ADAPTIVE_MODES, "auto.mode", self.mode, f"one of {list(ADAPTIVE_MODES)}")
        drafting = drafting_methods()
        require(bool(self.drafters) and all(d in drafting for d in self.drafters), "auto.drafters",
                list(self.drafters), f"at least one of {list(drafting)} (the drafters 'auto' can choose among), each")


class Auto:
    name = "auto"
    trainable, adaptive, defers = False, True, False
    options = AutoOptions

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
        raise ValueError("'auto' drafts nothing itself: the simulator prices each drafter of its pool "
                         "(--auto-drafters, sim/auto.py)")
