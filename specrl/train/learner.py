"""The in-process learner: the policy and its `PolicyTrainer`, behind the pipeline's `Learner` protocol.

Its checkpoint part is `model/` (the policy as a Hugging Face directory, usable as is) and `trainer.*`
(optimizer, LR schedule, KL reference and the torch RNG, as safetensors + JSON: nothing is unpickled).
"""
from __future__ import annotations

from pathlib import Path
from typing import Iterator

import torch

from ..model import CausalLM, load_model, resolve_dtype, save_model
from ..state_files import has_state, load_state, save_state
from .config import TrainConfig
from .trainer import PolicyTrainer, TrainBatch

TRAINER_STATE = "trainer"
LEGACY_TRAINER_FILE = "trainer.pt"  # written before state files; read with torch's tensors-only loader


class LocalLearner:
    def __init__(self, policy: CausalLM, trainer: PolicyTrainer, version: int = 0,
                 tokenizer_dir: str | Path | None = None):
        self.policy, self.trainer, self.version = policy, trainer, version
        self.tokenizer_dir = tokenizer_dir

    @classmethod
    def build(cls, model_dir: str | Path, cfg: TrainConfig, version: int = 0,
              tokenizer_dir: str | Path | None = None) -> "LocalLearner":
        policy = load_model(model_dir, device=cfg.device, dtype=resolve_dtype(cfg.dtype))
        trainer = PolicyTrainer(policy, cfg.algorithm, cfg.optim, cfg.schedule.max_steps, cfg.rollout.temperature,
                                cfg.rollout.max_tokens)
        return cls(policy, trainer, version, tokenizer_dir or model_dir)

    @property
    def pad_id(self) -> int:
        pad = self.policy.config.pad_token_id
        return 0 if pad is None else pad

    def step(self, batch: TrainBatch, is_cap: float | None = None) -> dict[str, float]:
        metrics = self.trainer.step(batch, is_cap=is_cap)
        self.version += 1
        return metrics

    def named_weights(self) -> Iterator[tuple[str, torch.Tensor]]:
        for name, tensor in self.policy.state_dict().items():
            yield name, tensor.detach()

    def save(self, directory: Path) -> None:
        save_model(self.policy, directory / "model", tokenizer_dir=self.tokenizer_dir)
        save_state(directory, TRAINER_STATE, {**self.trainer.state_dict(), "torch_rng": torch.get_rng_state()})

    def load(self, directory: Path) -> None:
        """The optimizer state and torch RNG of `directory`; the weights were loaded by `build` from its model/."""
        if has_state(directory, TRAINER_STATE):
            state = load_state(directory, TRAINER_STATE, device=self.trainer.device)
        else:
            state = torch.load(directory / LEGACY_TRAINER_FILE, map_location=self.trainer.device, weights_only=True)
        torch.set_rng_state(state.pop("torch_rng").cpu())
        self.trainer.load_state_dict(state)
