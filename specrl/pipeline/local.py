"""The in-process rollout backend: an `LLM` with its own copy of the policy, behind the seam.

The engine holds a separate model so that an optimizer step can never change weights under a running
generation; each new policy version is copied in place into it (MTP modules trained with the policy travel
with it, since they are part of its state dict).
"""
from __future__ import annotations

from pathlib import Path

import torch

from ..engine import LLM, RequestOutput, SamplingParams
from ..engine.drafting import has_state
from ..train.config import TrainConfig
from .seam import NamedTensors, register_backend


class LocalBackend:
    def __init__(self, llm: LLM):
        self.llm = llm
        self.weights_version = 0
        self.drafter_version = 0
        self._cancelled = False

    def generate(self, prompts: list[list[int]], params: list[SamplingParams]) -> list[RequestOutput]:
        self.llm.should_stop = lambda: self._cancelled
        try:
            return self.llm.generate(prompts, params)
        finally:
            self.llm.should_stop = None

    @torch.no_grad()
    def update_weights(self, weights: NamedTensors, version: int) -> None:
        self.llm.update_weights(dict(weights))
        self.weights_version = version

    def update_drafter(self, weights: NamedTensors, version: int) -> None:
        drafter = self.llm.drafter
        if drafter is None or not callable(getattr(drafter, "load_weights", None)):
            name = self.llm.spec.method
            raise ValueError(f"the engine's drafter ({name!r}) has no weights to update: drafter weights need "
                             "a model drafter (rollout.spec.method=eagle3|draft_model|mtp)")
        drafter.load_weights(dict(weights))
        self.drafter_version = version

    def stats(self) -> dict:
        return dict(self.llm.stats)

    def reset_stats(self) -> None:
        self.llm.reset_stats()

    def set_trace_tags(self, tags: dict) -> None:
        self.llm.tracer.tags = dict(tags)

    def cancel(self) -> None:
        self._cancelled = True

    def drafter_state(self) -> dict | None:
        return self.llm.drafter.state_dict() if has_state(self.llm.drafter) else None

    def load_drafter_state(self, state: dict) -> None:
        if not has_state(self.llm.drafter):
            raise ValueError(f"the checkpoint holds drafter state but the engine's drafter "
                             f"({self.llm.spec.method!r}) keeps none: resume with the run's own rollout.spec")
        self.llm.drafter.load_state_dict(state)

    def close(self) -> None:
        self.llm.tracer.close()


@register_backend("local")
def local_backend(model_dir: str | Path, cfg: TrainConfig, trace_path: Path | None = None) -> LocalBackend:
    """An engine over the checkpoint in `model_dir` (the run's starting weights), as `cfg.rollout` asks."""
    ro = cfg.rollout
    llm = LLM(str(model_dir), device=cfg.device, dtype=cfg.dtype, spec=ro.spec, max_num_seqs=ro.max_num_seqs,
              seed=cfg.seed, trace_path=str(trace_path) if trace_path else None)
    return LocalBackend(llm)
