"""Log-probabilities of sampled tokens under the temperature-scaled policy."""

from __future__ import annotations

import torch
from torch import Tensor


def token_logprobs(logits: Tensor, tokens: Tensor, temperature: float = 1.0) -> Tensor:
    """log softmax(logits / temperature)[tokens] for logits [B, T, V], tokens [B, T] -> [B, T] float32.

    ``logits[:, t]`` must already be the prediction for ``tokens[:, t]`` (the caller shifts by one).
    Temperature 0 means greedy sampling, whose distribution is degenerate, so its logprobs are taken
    at temperature 1, matching what the rollout engine reports.
    """
    if temperature < 0:
        raise ValueError(f"temperature={temperature} must be >= 0 (0 means greedy)")
    if logits.shape[:-1] != tokens.shape:
        raise ValueError(f"logits {tuple(logits.shape)} and tokens {tuple(tokens.shape)} must agree on [B, T]")
    x = logits.to(torch.promote_types(logits.dtype, torch.float32))  # [B, T, V]
    if temperature not in (0.0, 1.0):
        x = x / temperature  # [B, T, V]
    picked = x.gather(-1, tokens.long().unsqueeze(-1)).squeeze(-1)  # [B, T]
    return picked - torch.logsumexp(x, dim=-1)  # [B, T]
