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


def precision_mismatch(cfg: TrainConfig) -> bool:
    """The engine computes the sampled tokens' logprobs in another precision than the trainer: its dtype is not the
    trainer's master dtype, or the trainer runs under bf16 autocast (whose fp32 norms and accumulations no engine
    reproduces). Then pi_gen != pi_old for a sync rollout too, and its tokens are slightly off-policy."""
    name = cfg.rollout.dtype or cfg.dtype
    if name == "auto":  # not resolved (resolve_precision): the engine's precision is not known to match
        return True
    return resolve_dtype(name) != master_dtype(cfg.dtype) or bool(cfg.optim.autocast)


def importance_ratio_applies(cfg: TrainConfig, stale: bool) -> bool:
    """Whether a rollout's tokens get the truncated importance ratio min(pi_old / pi_gen, is_cap)
    (`algorithm.is_correction`): a stale one always (older weights sampled it); a fresh one under "always", or
    under "mismatch" when the engine's precision is not the trainer's (truncated importance sampling for the
    rollout/trainer mismatch, Yao et al. 2025). With matching precisions the ratio would be 1 anyway."""
    mode = cfg.algorithm.is_correction
    return stale or mode == "always" or (mode == "mismatch" and precision_mismatch(cfg))
