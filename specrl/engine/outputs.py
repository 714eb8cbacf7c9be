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
    # (first token index, weights version) per run of tokens one version sampled; more than one run when
    # the weights were updated in flight (LLM.update_weights between engine steps)
    weight_versions: list[tuple[int, int]] | None = None

    @property
    def oldest_version(self) -> int | None:
        return min(v for _, v in self.weight_versions) if self.weight_versions else None

    @property
    def newest_version(self) -> int | None:
        return max(v for _, v in self.weight_versions) if self.weight_versions else None

    def token_versions(self) -> list[int]:
        """The weights version that sampled each token."""
        runs = self.weight_versions or []
        ends = [start for start, _ in runs[1:]] + [len(self.token_ids)]
        return [v for (start, v), end in zip(runs, ends) for _ in range(start, end)]


@dataclass
class RequestOutput:
    request_id: int
    prompt: str | None
    prompt_token_ids: list[int]
    outputs: list[CompletionOutput]
