"""Offline distillation of a small draft model (`specrl train-drafter --method draft_model`).

The student is a `num_layers`-layer model of the policy's family and vocabulary, initialised from the
policy (embedding, final norm, and evenly spaced decoder layers), then trained with soft cross-entropy to
the policy's full next-token distribution (temperature 1) on the policy's own generations.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import torch

from ...errors import require
from ...model import CausalLM, load_model, save_model
from ..scratch import active_layers
from ..training.data import DrafterTrainArgs, Pair, TokenBatch, fit, soft_cross_entropy, token_batches


@dataclass
class DraftModelOptions:
    num_layers: int | None = None  # decoder layers of the student; None: a third of the policy's, at least 1

    def __post_init__(self):
        self.validate()

    def validate(self) -> None:
        require(self.num_layers is None or self.num_layers >= 1, "num_layers", self.num_layers, ">= 1 or None")


def student_from_policy(policy: CausalLM, num_layers: int) -> CausalLM:
    """Same family and vocabulary, `num_layers` layers copied from evenly spaced active policy layers."""
    cfg = replace(policy.config, num_layers=num_layers, num_mtp_modules=0)
    student = CausalLM(cfg)
    state, active = policy.state_dict(), active_layers(policy)
    picks = [active[round(i * (len(active) - 1) / max(num_layers - 1, 1))] for i in range(num_layers)]
    own = {k: v for k, v in state.items() if not k.startswith(("model.layers.", "mtp."))}
    for i, j in enumerate(picks):
        prefix = f"model.layers.{j}."
        own.update({f"model.layers.{i}.{k[len(prefix):]}": v for k, v in state.items() if k.startswith(prefix)})
    student.load_state_dict({k: v.detach().clone() for k, v in own.items()})
    return student


def distil_loss(policy: CausalLM, student: CausalLM, batch: TokenBatch) -> torch.Tensor:
    with torch.no_grad():
        p = torch.softmax(policy(batch.ids, batch.positions).logits.float(), dim=-1)  # [B, T, V]
    return soft_cross_entropy(student(batch.ids, batch.positions).logits, p, batch.loss_mask)


def train(policy_path: str | Path, out_dir: str | Path, data: list[Pair], args: DrafterTrainArgs,
          opts: DraftModelOptions | None = None) -> dict:
    """Distils a draft model from the policy at `policy_path` on `data` (from `collect_sequences`) and
    saves it atomically to `out_dir` with the policy's tokenizer."""
    opts = opts or DraftModelOptions()
    torch.manual_seed(args.seed)
    policy = load_model(policy_path).requires_grad_(False)
    num_layers = opts.num_layers or max(1, policy.config.num_layers // 3)
    student = student_from_policy(policy, num_layers)
    metrics = fit(student, lambda batch: distil_loss(policy, student, batch),
                  token_batches(data, args.batch_tokens, args.seed), args,
                  identity={"method": "draft_model", "vocab_size": policy.config.vocab_size, "num_layers": num_layers})
    save_model(student, out_dir, tokenizer_dir=policy_path, dtype=args.save_dtype)
    return {"method": "draft_model", "out_dir": str(out_dir), "num_layers": num_layers,
            "num_params": student.config.num_params, "sequences": len(data), **metrics}

