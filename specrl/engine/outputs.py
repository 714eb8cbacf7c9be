"""vLLM-shaped results of `LLM.generate`."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass
class CompletionOutput:
    index: int
    token_ids: list[int]
    logprobs: list[float]  # log-prob of each token under the policy's temperature-scaled distribution
    finish_reason: str  # "stop" | "length"
    text: str | None = None


@dataclass
class RequestOutput:
    request_id: int
    prompt: str | None
    prompt_token_ids: list[int]
    outputs: list[CompletionOutput]
