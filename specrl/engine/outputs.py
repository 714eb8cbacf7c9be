"""vLLM-shaped results of `LLM.generate`."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass
class CompletionOutput:
    index: int
    token_ids: list[int]
    logprobs: list[float]  # log-prob of each token under the policy's temperature-scaled distribution
    finish_reason: str  # "stop" | "length"
    text: str | None = None  # decoded output (params.skip_special_tokens), cut before a stop string
    top_logprobs: list[dict[int, float]] | None = None  # with params.logprobs=N: top-N + the sampled token
    stop_reason: int | str | None = None  # the stop string or stop_token_id that ended it (None for EOS)


@dataclass
class RequestOutput:
    request_id: int
    prompt: str | None
    prompt_token_ids: list[int]
    outputs: list[CompletionOutput]
