"""Offline distillation of a small draft model (`specrl train-drafter --method draft_model`).

The student is a `num_layers`-layer model of the policy's family and vocabulary, initialised from the
policy (embedding, final norm, and evenly spaced decoder layers), then trained with soft cross-entropy to
the policy's full next-token distribution (temperature 1) on the policy's own generations. `fit` is the
optimisation loop the MTP recipe shares.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch
from torch import nn

from ..model import CausalLM, ModelConfig, load_model, save_model
from .drafter_data import DrafterTrainArgs, Pair, TokenBatch, pad_batch, soft_cross_entropy, teacher_forward, \
    token_batches
from .optim import build_optimizer, clip_grad, warmup_cosine


@dataclass
class DraftModelOptions:
    num_layers: int = 2  # decoder layers of the student

    def __post_init__(self):
        if self.num_layers < 1:
            raise ValueError(f"DraftModelOptions.num_layers={self.num_layers}: expected >= 1")


def fit(module: nn.Module, loss_fn: Callable[[TokenBatch], torch.Tensor], data: list[Pair],
        args: DrafterTrainArgs) -> dict:
    """AdamW on `module` over length-bucketed batches, warmup + cosine over steps or the time budget."""
    module.train()
    opt = build_optimizer(module, args.lr, args.weight_decay, betas=(0.9, 0.95))
    batches = token_batches(data, args.batch_tokens, args.seed)
    start, step, first, ema = time.monotonic(), 0, None, math.nan
    while step < args.steps and time.monotonic() - start < args.time_budget_s:
        progress = max(step / args.steps, (time.monotonic() - start) / args.time_budget_s)
        for g in opt.param_groups:
            g["lr"] = args.lr * warmup_cosine(int(progress * args.steps), args.warmup_steps, args.steps,
                                              args.min_lr_ratio)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.bf16_autocast):
            loss = loss_fn(pad_batch(next(batches)))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        clip_grad(module, args.grad_clip)
        opt.step()
        step += 1
        first = loss.item() if first is None else first
        ema = loss.item() if math.isnan(ema) else 0.9 * ema + 0.1 * loss.item()
    module.eval()
    return {"steps_done": step, "train_s": round(time.monotonic() - start, 1), "first_loss": first,
            "final_loss": ema}


def student_from_policy(policy: CausalLM, num_layers: int) -> CausalLM:
    """Same family and vocabulary, `num_layers` layers copied from evenly spaced policy layers."""
    cfg = ModelConfig(**{**policy.config.to_dict(), "num_layers": num_layers, "num_mtp_modules": 0})
    student = CausalLM(cfg)
    L, state = policy.config.num_layers, policy.state_dict()
    picks = [round(i * (L - 1) / max(num_layers - 1, 1)) for i in range(num_layers)]
    own = {k: v for k, v in state.items() if not k.startswith(("model.layers.", "mtp."))}
    for i, j in enumerate(picks):
        prefix = f"model.layers.{j}."
        own.update({f"model.layers.{i}.{k[len(prefix):]}": v for k, v in state.items() if k.startswith(prefix)})
    student.load_state_dict(own)
    return student


def distil_loss(policy: CausalLM, student: CausalLM, batch: TokenBatch) -> torch.Tensor:
    p = torch.softmax(teacher_forward(policy, batch).logits.float(), dim=-1)  # [B, T, V]
    return soft_cross_entropy(student(batch.ids, batch.positions).logits, p, batch.loss_mask)


def train(policy_path: str | Path, out_dir: str | Path, data: list[Pair], args: DrafterTrainArgs,
          opts: DraftModelOptions | None = None) -> dict:
    """Distils a draft model from the policy at `policy_path` on `data` (from `collect_sequences`) and
    saves it atomically to `out_dir` with the policy's tokenizer."""
    opts = opts or DraftModelOptions()
    torch.manual_seed(args.seed)
    policy = load_model(policy_path).requires_grad_(False)
    student = student_from_policy(policy, opts.num_layers)
    metrics = fit(student, lambda batch: distil_loss(policy, student, batch), data, args)
    save_model(student, out_dir, tokenizer_dir=policy_path, dtype=args.save_dtype)
    return {"method": "draft_model", "out_dir": str(out_dir), "num_layers": opts.num_layers,
            "num_params": student.config.num_params, "sequences": len(data), **metrics}
