"""The optimizer settings every trainer shares (the policy, the online and offline drafters, pretraining):
AdamW without decay on norms and biases, one learning-rate schedule (linear warmup, then cosine decay) and
gradient clipping."""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import partial

import torch
from torch import nn

from .config import require, require_min


@dataclass
class OptimSettings:
    """AdamW and its schedule. The defaults train at a constant learning rate (no warmup, no decay)."""
    lr: float = 3e-4
    weight_decay: float = 0.0
    betas: tuple[float, float] = (0.9, 0.95)
    warmup_steps: int = 0
    min_lr_ratio: float = 1.0  # the cosine ends at lr * min_lr_ratio
    grad_clip: float = 1.0  # the global gradient norm is clipped to this; 0: measured only

    def validate(self) -> None:
        require(self.lr > 0, "lr", self.lr, "> 0", "e.g. 1e-5 for an RL policy, 1e-3 for a small drafter")
        require(len(self.betas) == 2 and all(0 <= b < 1 for b in self.betas), "betas", self.betas,
                "two numbers in [0, 1)", "the usual choice is [0.9, 0.999]")
        require_min(self, 0, "weight_decay", "warmup_steps")
        require(0 <= self.min_lr_ratio <= 1, "min_lr_ratio", self.min_lr_ratio, "in [0, 1]")
        require(self.grad_clip >= 0, "grad_clip", self.grad_clip, ">= 0", "0 measures the norm without clipping")

    def lr_at(self, step: int, total: int) -> float:
        return self.lr * warmup_cosine(step, self.warmup_steps, total, self.min_lr_ratio)


def clock_step(step: int, total: int, elapsed_s: float, budget_s: float) -> int:
    """The schedule step of a run capped by both a step count and a time budget: whichever is further along,
    so a run cut short by the clock still ends annealed."""
    return int(max(step / max(total, 1), elapsed_s / budget_s) * total)


def decay_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """AdamW parameter groups: matrices decay; biases and norm gains (1-D tensors) do not, since pulling
    those towards 0 changes what the layer computes rather than regularising it."""
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        skip = p.dim() < 2 or name.endswith("bias") or "norm" in name.lower()
        (no_decay if skip else decay).append(p)
    groups = [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    return [g for g in groups if g["params"]]


def build_optimizer(model: nn.Module, settings: OptimSettings) -> torch.optim.AdamW:
    settings.validate()
    groups = decay_groups(model, settings.weight_decay)
    if not groups:
        raise ValueError("model has no trainable parameters; unfreeze some before building the optimizer")
    # the fused kernel updates in place; the default (foreach) one allocates parameter-sized temporaries at the peak
    fused = all(p.device.type in ("cpu", "cuda") for g in groups for p in g["params"])
    return torch.optim.AdamW(groups, lr=settings.lr, betas=tuple(settings.betas), eps=1e-8, fused=fused)


def warmup_cosine(step: int, warmup: int, total: int, min_ratio: float = 0.0) -> float:
    """LR multiplier: linear warmup to 1 over ``warmup`` steps, then cosine decay to ``min_ratio`` at ``total``,
    and ``min_ratio`` after it. Step 0 already gets 1 / warmup (a zero learning rate would waste a step)."""
    if warmup > 0 and step < warmup:
        return (step + 1) / warmup
    progress = min(max(step - warmup, 0) / max(total - warmup, 1), 1.0)
    return min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))


def warmup_cosine_scheduler(optimizer: torch.optim.Optimizer, settings: OptimSettings, total: int
                            ) -> torch.optim.lr_scheduler.LambdaLR:
    """A LambdaLR applying ``warmup_cosine``; call ``.step()`` once per optimizer step."""
    if total < 1:
        raise ValueError(f"total={total}: a schedule needs at least one optimizer step")
    schedule = partial(warmup_cosine, warmup=settings.warmup_steps, total=total, min_ratio=settings.min_lr_ratio)
    return torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)


def clip_grad(model: nn.Module, max_norm: float | None) -> float:
    """Clip the global gradient L2 norm to ``max_norm`` (None or <= 0: only measure) and return the norm
    before clipping. A NaN/inf norm is returned, not raised: the trainer decides what to do with it."""
    params = [p for p in model.parameters() if p.grad is not None]
    if not params:
        return 0.0
    limit = max_norm if max_norm is not None and max_norm > 0 else math.inf
    return float(torch.nn.utils.clip_grad_norm_(params, limit, error_if_nonfinite=False))


def descend(opt: torch.optim.Optimizer, model: nn.Module, loss: torch.Tensor, max_norm: float | None) -> None:
    """One plain update: fresh gradients of ``loss``, clipped (``clip_grad``), applied."""
    opt.zero_grad(set_to_none=True)
    loss.backward()
    clip_grad(model, max_norm)
    opt.step()
