"""Log-probabilities of sampled tokens under the temperature-scaled policy, and the entropy of its next-token
distribution (a metric for exploration collapse). The rollout engine imports its kernel (`scaled_token_logprobs`)
from here: the engine's reported logprobs and the trainer's are one function."""
from __future__ import annotations

import torch
from torch import Tensor


def scaled_token_logprobs(logits: Tensor, tokens: Tensor, temperature: Tensor) -> Tensor:
    """Log-prob of `tokens` [B, T] under softmax(logits / T) [B, T, V], T = temperature[b] [B]; greedy rows
    (T = 0) use T = 1."""
    temp = torch.where(temperature == 0, torch.ones_like(temperature), temperature)  # [B]
    logp = torch.log_softmax(logits.float() / temp[:, None, None], dim=-1)  # [B, T, V]
    return logp.gather(-1, tokens[..., None]).squeeze(-1)  # [B, T]


def token_logprobs(logits: Tensor, tokens: Tensor, temperature: float = 1.0) -> Tensor:
    """log softmax(logits / temperature)[tokens] for logits [B, T, V], tokens [B, T] -> [B, T] float32, where
    ``logits[:, t]`` already predicts ``tokens[:, t]``. Temperature 0 (greedy, a degenerate distribution) takes
    its logprobs at temperature 1, as the rollout engine reports them."""
    if temperature < 0:
        raise ValueError(f"temperature={temperature} must be >= 0 (0 means greedy)")
    if logits.shape[:-1] != tokens.shape:
        raise ValueError(f"logits {tuple(logits.shape)} and tokens {tuple(tokens.shape)} must agree on [B, T]")
    temp = torch.full(tokens.shape[:1], float(temperature), device=logits.device)  # [B]
    return scaled_token_logprobs(logits, tokens.long(), temp)  # [B, T]


def entropy_from_logits(logits: Tensor, chunk_size: int | None = 1024) -> Tensor:
    """H = logsumexp(l) - sum_v softmax(l)_v * l_v for logits [..., V] -> [...] (in float32 or wider), rows
    ``chunk_size`` at a time (None: one chunk), so the float32 temporaries stay at [chunk_size, V]."""
    if chunk_size is not None and chunk_size < 1:
        raise ValueError(f"chunk_size={chunk_size} must be >= 1 or None")
    flat = logits.reshape(-1, logits.shape[-1])  # [N, V]
    step = chunk_size or max(flat.shape[0], 1)
    dtype = torch.promote_types(flat.dtype, torch.float32)
    parts = []
    for i in range(0, flat.shape[0], step):
        x = flat[i : i + step].to(dtype)  # [n, V]
        probs = torch.softmax(x, dim=-1)  # [n, V]
        # -inf logits (masked vocab) have prob 0; treat 0 * -inf as 0 rather than NaN
        parts.append(torch.logsumexp(x, dim=-1) - torch.where(probs > 0, probs * x, torch.zeros_like(x)).sum(-1))  # [n]
    out = torch.cat(parts) if parts else flat.new_zeros(0, dtype=dtype)
    return out.reshape(logits.shape[:-1])  # [...]
