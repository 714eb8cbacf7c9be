"""Function-preserving growth of a trained decoder into a wider and deeper one (Net2Net-style).

A small model learns the task's phase changes in few steps; growing it gives the engine benchmarks' shape
with the same function (the recipe and its figures: docs/results.md). Build the config with `grown_config`.

- hidden size: the small residual stream fills the first `h` of `H` dimensions, the rest start at zero;
  RMSNorm weights are scaled by sqrt(h / H), since the norm averages over all `H` dimensions.
- heads and MLP width: the small model's are the first ones; new ones have zero output weights.
- depth: the small layers go to evenly spaced depths in the lower half (`grown_depths`), the others are
  residual identities, so the final hidden state is readable below the last layer (SGLang and vLLM capture
  EAGLE-3 inputs only before layers 0..L-1).

`noise_std` adds Gaussian noise to the new zero weights, which would otherwise get no gradient; the
function then moves by about that much.
"""
from __future__ import annotations

import math
from dataclasses import replace

import torch

from specrl.model import CausalLM, ModelConfig


def check_growable(small: ModelConfig, big: ModelConfig) -> None:
    """Raise a ValueError naming the first field that makes `big` unable to hold `small`."""
    for name in ("vocab_size", "head_dim", "arch", "rope_theta", "tie_word_embeddings"):
        if getattr(small, name) != getattr(big, name):
            raise ValueError(f"cannot grow: {name} differs ({getattr(small, name)!r} vs {getattr(big, name)!r}); "
                             "growth keeps it fixed")
    for name in ("hidden_size", "intermediate_size", "num_layers", "num_heads", "num_kv_heads"):
        if getattr(big, name) < getattr(small, name):
            raise ValueError(f"cannot grow: {name}={getattr(big, name)} is smaller than the source's "
                             f"{getattr(small, name)}")
    if small.num_heads // small.num_kv_heads != big.num_heads // big.num_kv_heads:
        raise ValueError("cannot grow: the query heads per KV head must stay the same "
                         f"({small.num_heads // small.num_kv_heads} vs {big.num_heads // big.num_kv_heads})")


def grown_config(small: ModelConfig, hidden_size: int, intermediate_size: int, num_layers: int, num_heads: int,
                 num_kv_heads: int) -> ModelConfig:
    """`small`'s config with the larger shape. RMSNorm's eps shrinks by h / H, so that with the norm
    weights scaled by sqrt(h / H) a norm over the zero-padded stream gives exactly the small model's."""
    eps = small.rms_norm_eps * small.hidden_size / hidden_size
    return replace(small, hidden_size=hidden_size, intermediate_size=intermediate_size, num_layers=num_layers,
                   num_heads=num_heads, num_kv_heads=num_kv_heads, rms_norm_eps=eps, num_mtp_modules=0)


def grown_depths(l_small: int, l_big: int) -> list[int]:
    """Where the small model's layers go: evenly spaced over depths 0..L//2 (2 into 6: 0 and 3)."""
    return [round(i * (l_big // 2) / max(l_small - 1, 1)) for i in range(l_small)] if l_small > 1 else [0]


@torch.no_grad()
def grow(small: CausalLM, cfg: ModelConfig, noise_std: float = 0.0, seed: int = 0) -> CausalLM:
    """A `cfg`-shaped CausalLM computing the same function as `small` (up to `noise_std`)."""
    check_growable(small.config, cfg)
    big = CausalLM(cfg).float()
    norm_scale = math.sqrt(small.config.hidden_size / cfg.hidden_size)
    gen = torch.Generator().manual_seed(seed)
    for name, p in big.named_parameters():  # matrices: noise; biases: zero; norms: see the module docstring
        if p.dim() >= 2:
            p.copy_(torch.randn(p.shape, generator=gen) * noise_std)
        elif name.endswith("norm.weight"):  # q/k norms act per head over head_dim, which growth keeps: unscaled
            p.fill_(1.0 if name.endswith(("q_norm.weight", "k_norm.weight")) else norm_scale)
        else:
            p.zero_()
    src = {k: v.float() for k, v in small.state_dict().items()}
    dst = big.state_dict()  # shares storage with the parameters: writes below land in `big`

    def put(name: str, value: torch.Tensor) -> None:
        dst[name][tuple(slice(0, n) for n in value.shape)] = value

    put("model.embed_tokens.weight", src["model.embed_tokens.weight"])
    if not cfg.tie_word_embeddings:
        put("lm_head.weight", src["lm_head.weight"])
    put("model.norm.weight", src["model.norm.weight"] * norm_scale)
    depths = grown_depths(small.config.num_layers, cfg.num_layers)
    for j in range(cfg.num_layers):
        prefix = f"model.layers.{j}."
        if j in depths:
            sp = f"model.layers.{depths.index(j)}."
            for key, value in src.items():
                if key.startswith(sp):
                    rest = key[len(sp):]
                    put(prefix + rest, value * norm_scale if rest.endswith("layernorm.weight") else value)
        # new heads and MLP units write nothing into the stream yet, nor does a new layer (a residual identity)
        heads, units = (small.config.num_heads, small.config.intermediate_size) if j in depths else (0, 0)
        dst[prefix + "self_attn.o_proj.weight"][:, heads * cfg.head_dim:].zero_()
        dst[prefix + "mlp.down_proj.weight"][:, units:].zero_()
    return big
