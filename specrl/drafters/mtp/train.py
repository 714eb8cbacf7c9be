"""Offline training of MTP modules with the policy frozen (`specrl train-drafter --method mtp`).

Depth d at position i reads h^{d-1}_i and t_{i+d} and is trained with soft cross-entropy to the policy's
distribution of t_{i+d+1} (the policy's logits at i+d), teacher-forced on the policy's own generations.
Depths past D reuse the last module, exactly as the drafter chains them; depth d weighs decay^(d-1). The
modules start from `scratch`; by default only they are written (the policy's checkpoint stays as it is).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from ...model import CausalLM, load_model, save_model
from ...model.mtp import MTPStack
from ...errors import require
from ..scratch import active_layers
from ..training.data import DrafterTrainArgs, Pair, TokenBatch, fit, soft_cross_entropy, token_batches
from .drafter import save_mtp_only


@dataclass
class MTPOptions:
    num_modules: int = 2  # D
    mtp_depths: int = 4  # depths trained (>= D); depths past D reuse the last module, as the drafter does
    unroll_decay: float = 0.8  # weight of depth d is unroll_decay^(d-1)
    mtp_only: bool = True  # write only the modules (config.json + mtp.safetensors); False: the policy too

    def __post_init__(self):
        self.validate()

    def validate(self) -> None:
        require(1 <= self.num_modules <= self.mtp_depths, "num_modules", self.num_modules,
                f"in [1, mtp_depths={self.mtp_depths}]")
        require(0 < self.unroll_decay <= 1, "unroll_decay", self.unroll_decay, "in (0, 1]")


@torch.no_grad()
def init_stack(policy: CausalLM, num_modules: int, seed: int = 0) -> MTPStack:
    """`num_modules` modules, each the policy's last active decoder layer with its residual outputs zeroed and
    a small random eh_proj, deterministic in `seed` (passing h^{d-1} through would start from the policy's own
    prediction, one token off)."""
    cfg = replace(policy.config, num_mtp_modules=num_modules)
    stack = MTPStack(cfg)
    gen = torch.Generator().manual_seed(seed)
    last = policy.model.layers[active_layers(policy)[-1]]
    for m in stack.layers:
        m.block.load_state_dict(last.state_dict())
        m.eh_proj.weight.copy_(torch.randn(m.eh_proj.weight.shape, generator=gen) * 0.02)
        # residual branches start closed, so the block starts as the identity on its fused input
        m.block.self_attn.o_proj.weight.zero_()
        m.block.mlp.down_proj.weight.zero_()
    return stack


def mtp_loss(policy: CausalLM, stack: MTPStack, batch: TokenBatch, opts: MTPOptions) -> torch.Tensor:
    """Weighted mean over depths of the soft CE to the policy, on response positions."""
    with torch.no_grad():
        out = policy(batch.ids, batch.positions)
    p, h0 = torch.softmax(out.logits.float(), dim=-1), out.last_hidden  # [B, T, V], [B, T, D]
    total, weight = 0.0, 0.0
    for d, logits in enumerate(stack.unroll(h0, batch.ids, policy.embed, policy.lm_head, opts.mtp_depths), start=1):
        n = logits.shape[1]  # entry i in [0, T-d) predicts t_{i+d+1}, whose policy distribution is p[:, i+d]
        w = opts.unroll_decay ** (d - 1)
        total = total + w * soft_cross_entropy(logits, p[:, d:d + n], batch.loss_mask[:, d:d + n])
        weight += w
    return total / weight


def save_with_policy(policy: CausalLM, stack: MTPStack, policy_path: str | Path, out_dir: str | Path) -> None:
    """The policy checkpoint plus `mtp.*` weights, in the policy's stored dtype (the policy is unchanged)."""
    cfg = replace(policy.config, num_mtp_modules=stack.depth)
    full = CausalLM(cfg)
    full.load_state_dict({**policy.state_dict(), **{f"mtp.{k}": v for k, v in stack.state_dict().items()}})
    dtype = json.loads((Path(policy_path) / "config.json").read_text()).get("torch_dtype") or "float32"
    save_model(full, out_dir, tokenizer_dir=policy_path, dtype=dtype)


def train(policy_path: str | Path, out_dir: str | Path, data: list[Pair], args: DrafterTrainArgs,
          opts: MTPOptions | None = None) -> dict:
    """Trains MTP modules for the frozen policy on `data` (from `collect_sequences`). Writes the modules
    alone to `out_dir` (use them with SpecConfig(method="mtp", draft_model=out_dir)), or with
    `opts.mtp_only=False` the policy checkpoint with its `mtp.*` weights (load it as the policy)."""
    opts = opts or MTPOptions()
    torch.manual_seed(args.seed)
    policy = load_model(policy_path).requires_grad_(False)
    stack = init_stack(policy, opts.num_modules, args.seed)
    metrics = fit(stack, lambda batch: mtp_loss(policy, stack, batch, opts),
                  token_batches(data, args.batch_tokens, args.seed), args,
                  identity={"method": "mtp", "vocab_size": policy.config.vocab_size, "num_modules": stack.depth})
    if opts.mtp_only:
        save_mtp_only(stack, policy.config, out_dir, dtype=args.save_dtype)
    else:
        save_with_policy(policy, stack, policy_path, out_dir)
    return {"method": "mtp", "out_dir": str(out_dir), "num_modules": stack.depth, "mtp_depths": opts.mtp_depths,
            "num_params": sum(p.numel() for p in stack.parameters()), "sequences": len(data), **metrics}

