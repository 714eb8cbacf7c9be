"""Entropy of the policy's next-token distribution: a metric for exploration collapse."""
from __future__ import annotations

import torch
from torch import Tensor


def entropy_from_logits(logits: Tensor, chunk_size: int | None = 1024) -> Tensor:
    """H = logsumexp(l) - sum_v softmax(l)_v * l_v for logits [..., V] -> [...] (in float32 or wider), rows
    ``chunk_size`` at a time (None: one chunk), so the float32 temporaries stay at [chunk_size, V]."""
    if chunk_size is not None and chunk_size < 1:
        raise ValueError(f"chunk_size={chunk_size} must be >= 1 or None")
    flat = logits.reshape(-1, logits.shape[-1])  # [N, V]
    step = chunk_size or max(flat.shape[0], 1)
    parts = [_entropy_rows(flat[i : i + step]) for i in range(0, flat.shape[0], step)]
    out = torch.cat(parts) if parts else flat.new_zeros(0, dtype=torch.promote_types(flat.dtype, torch.float32))
    return out.reshape(logits.shape[:-1])  # [...]


def _entropy_rows(logits: Tensor) -> Tensor:
    x = logits.to(torch.promote_types(logits.dtype, torch.float32))  # [n, V]
    lse = torch.logsumexp(x, dim=-1)  # [n]
    probs = torch.softmax(x, dim=-1)  # [n, V]
    # -inf logits (masked vocab) have prob 0; treat 0 * -inf as 0 rather than NaN
    expected_logit = torch.where(probs > 0, probs * x, torch.zeros_like(x)).sum(-1)  # [n]
    return lse - expected_logit  # [n]
