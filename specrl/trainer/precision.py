"""A training run's precision from `dtype: auto`: one choice for the engine, the trainer and the drafters.

The engine runs the chosen dtype (rollout.dtype). The trainer keeps fp32 master weights and optimizer state and,
when the choice is bf16, runs its forward and backward under bf16 autocast (optim.autocast left null); its
logprobs and losses stay fp32. The drafters load in the engine's dtype. A forced dtype skips the probe.
"""
from __future__ import annotations

import torch

from ..model import resolve_dtype
from ..model.config import ModelConfig
from ..model.precision import Precision, choose_dtype, engine_rows
from ..config.run import TrainConfig


def resolve_precision(cfg: TrainConfig, model: ModelConfig) -> Precision | None:
    """Replaces every "auto" (and a null optim.autocast) in `cfg` by what it resolves to, so that config.yaml
    records the run's precision; returns the engine's choice, or None when nothing was left to resolve."""
    if "auto" not in (cfg.dtype, cfg.rollout.dtype):
        if cfg.optim.autocast is None:
            cfg.optim.autocast = False
        return None
    spec = cfg.rollout.spec
    rows = engine_rows(cfg.rollout.max_num_seqs, spec.num_speculative_tokens if spec.enabled else 0)
    choice = choose_dtype(cfg.rollout.dtype or cfg.dtype, cfg.device, model, rows)
    if cfg.rollout.dtype in (None, "auto"):
        cfg.rollout.dtype = choice.name
    if cfg.dtype == "auto":
        cfg.dtype = "float32"  # master weights and optimizer state
        if cfg.optim.autocast is None:
            cfg.optim.autocast = choice.name == "bfloat16"
    elif cfg.optim.autocast is None:
        cfg.optim.autocast = False
    return choice


def master_dtype(dtype: str) -> torch.dtype:
    """The trainer's weights' dtype for the config's top-level `dtype`: under "auto" (a caller that builds a
    learner without `resolve_precision`) the master weights are fp32, as resolve_precision makes them."""
    return torch.float32 if dtype == "auto" else resolve_dtype(dtype)
