"""Speculative-decoding settings (the `spec=` argument of `LLM`)."""
from __future__ import annotations

from dataclasses import dataclass

METHODS = ("draft_model", "eagle3", "mtp", "ngram", "suffix", "auto")
MAX_K = 16


@dataclass
class SpecConfig:
    method: str | None = None  # None turns SD off
    num_speculative_tokens: int = 4  # k
    draft_model: str | None = None  # checkpoint dir for draft_model / eagle3 (None: the embedded default)
    ngram_min: int = 2  # shortest suffix an n-gram/suffix match must have
    ngram_max: int = 8  # longest suffix the n-gram drafter tries
    suffix_scale: float = 1.0  # suffix drafter: draft up to scale * match_length tokens (capped at k)
    auto_max_batch: int = 32  # "auto": SD off above this many running sequences (TLT)
    auto_methods: tuple[str, ...] = ("suffix",)  # "auto": the drafter it runs when SD is on

    def __post_init__(self):
        if self.method is not None and self.method not in METHODS:
            raise ValueError(f"unknown speculative method {self.method!r}; valid: {list(METHODS)} "
                             "or None to turn SD off")
        if not 1 <= self.num_speculative_tokens <= MAX_K:
            raise ValueError(f"num_speculative_tokens={self.num_speculative_tokens} must be in [1, {MAX_K}]")
        if self.ngram_min < 1 or self.ngram_max < self.ngram_min:
            raise ValueError(f"need 1 <= ngram_min ({self.ngram_min}) <= ngram_max ({self.ngram_max})")

    @property
    def enabled(self) -> bool:
        return self.method is not None
