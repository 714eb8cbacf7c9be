"""Log-probabilities of sampled tokens under the temperature-scaled policy."""

from __future__ import annotations

import torch
from torch import Tensor

from ..engine.sampling import token_logprobs as engine_token_logprobs


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
    temp = torch.full(tokens.shape[:1], float(temperature), device=logits.device)  # [B]
    return engine_token_logprobs(logits, tokens.long(), temp)  # [B, T]
