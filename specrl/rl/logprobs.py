"""Log-probabilities of sampled tokens under the temperature-scaled policy. The rollout engine imports its kernel
(`scaled_token_logprobs`) from here: the engine's reported logprobs and the trainer's are one function."""
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
