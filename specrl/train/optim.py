"""Optimizer, learning-rate schedule and gradient clipping for the policy and drafter trainers."""

from __future__ import annotations

import math
from functools import partial

import torch
from torch import nn


def decay_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """AdamW parameter groups: matrices decay; biases and norm gains (1-D tensors) do not.

    Decaying a norm gain or a bias pulls it towards 0, which changes what the layer computes rather
    than regularising it.
    """
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        skip = p.dim() < 2 or name.endswith("bias") or "norm" in name.lower()
        (no_decay if skip else decay).append(p)
    groups = [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    return [g for g in groups if g["params"]]


def build_optimizer(
    model: nn.Module,
    lr: float,
    weight_decay: float = 0.0,
    betas: tuple[float, float] = (0.9, 0.999),
    eps: float = 1e-8,
) -> torch.optim.AdamW:
    """AdamW over the trainable parameters of ``model``, without decay on norms and biases."""
    if lr <= 0:
        raise ValueError(f"lr={lr} must be positive; typical RL values are 1e-6 to 1e-4")
    if not 0 <= betas[0] < 1 or not 0 <= betas[1] < 1:
        raise ValueError(f"betas={betas} must lie in [0, 1); the usual choice is (0.9, 0.999)")
    groups = decay_groups(model, weight_decay)
    if not groups:
        raise ValueError("model has no trainable parameters; unfreeze some before building the optimizer")
    # the fused kernel updates each tensor in place; the default (foreach) one allocates parameter-sized
    # temporaries (a 135M-parameter fp32 policy: ~0.5 GB at the step's peak)
    params = [p for g in groups for p in g["params"]]
    fused = all(p.device.type in ("cpu", "cuda") for p in params)
    return torch.optim.AdamW(groups, lr=lr, betas=tuple(betas), eps=eps, fused=fused)


def warmup_cosine(step: int, warmup: int, total: int, min_ratio: float = 0.0) -> float:
    """LR multiplier: linear warmup to 1 over ``warmup`` steps, then cosine decay to ``min_ratio`` at ``total``.

    Step 0 already gets 1 / warmup (a zero learning rate would waste a step). After ``total`` the
    multiplier stays at ``min_ratio``.
    """
    if warmup > 0 and step < warmup:
        return (step + 1) / warmup
    span = max(total - warmup, 1)
    progress = min(max(step - warmup, 0) / span, 1.0)
    return min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))


def warmup_cosine_scheduler(
    optimizer: torch.optim.Optimizer, warmup: int, total: int, min_ratio: float = 0.0
) -> torch.optim.lr_scheduler.LambdaLR:
    """A LambdaLR applying ``warmup_cosine``; call ``.step()`` once per optimizer step."""
    if warmup < 0 or total < 1 or not 0.0 <= min_ratio <= 1.0:
        raise ValueError(
            f"warmup={warmup}, total={total}, min_ratio={min_ratio}: expected warmup >= 0, total >= 1 "
            "and 0 <= min_ratio <= 1"
        )
    schedule = partial(warmup_cosine, warmup=warmup, total=total, min_ratio=min_ratio)
    return torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)


def clip_grad(model: nn.Module, max_norm: float | None) -> float:
    """Clip the global gradient L2 norm to ``max_norm`` and return the norm before clipping.

    ``max_norm`` None or <= 0 only measures. A NaN/inf norm is returned, not raised, so the trainer
    can skip the update or stop the run with its last good checkpoint.
    """
    params = [p for p in model.parameters() if p.grad is not None]
    if not params:
        return 0.0
    limit = max_norm if max_norm is not None and max_norm > 0 else math.inf
    norm = torch.nn.utils.clip_grad_norm_(params, limit, error_if_nonfinite=False)
    return float(norm)
