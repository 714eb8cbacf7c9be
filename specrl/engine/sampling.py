"""Sampling parameters and the pure tensor functions that turn logits into tokens, with counter-based
randomness (engine/rng.py): a sample depends only on its own seed and the logits, never on the batch."""
from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from ..rl.logprobs import scaled_token_logprobs as token_logprobs  # noqa: F401 (rl owns the logprob kernel)
from .rng import MASK64, SPLITMIX_GAMMA, SPLITMIX_MUL1, SPLITMIX_MUL2


@dataclass
class SamplingParams:
    n: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    max_tokens: int = 16
    stop_token_ids: list[int] | None = None
    ignore_eos: bool = False
    seed: int | None = None
    stop: list[str] | str | None = None  # stop strings, matched on the decoded text after every token
    include_stop_str_in_output: bool = False
    min_tokens: int = 0  # EOS and stop ids are masked out of the distribution until this many tokens
    logprobs: int | None = None  # top-N logprobs per generated token (in CompletionOutput.top_logprobs)
    skip_special_tokens: bool = True
    repetition_penalty: float = 1.0

    def __post_init__(self):
        # each message is formatted only when its check fails: a rollout builds one of these per request
        self._check(self.temperature >= 0, "temperature={self.temperature} must be >= 0 (0 means greedy)")
        self._check(0 < self.top_p <= 1,
                    "top_p={self.top_p} must be in (0, 1]; use 1.0 to disable nucleus sampling")
        self._check(self.top_k != 0 and self.top_k >= -1, "top_k={self.top_k} must be -1 (disabled) or >= 1")
        self._check(self.n >= 1, "n={self.n} must be >= 1 (samples per prompt)")
        self._check(self.max_tokens >= 1, "max_tokens={self.max_tokens} must be >= 1")
        if isinstance(self.stop, str):
            self.stop = [self.stop]
        self._check(self.stop is None or all(isinstance(s, str) and s for s in self.stop),
                    "stop={self.stop!r} must be a list of non-empty strings")
        self._check(0 <= self.min_tokens <= self.max_tokens,
                    "min_tokens={self.min_tokens} must be in [0, max_tokens={self.max_tokens}]")
        self._check(self.logprobs is None or self.logprobs >= 0,
                    "logprobs={self.logprobs} must be None or >= 0 (top-N logprobs per token)")
        self._check(self.repetition_penalty > 0, "repetition_penalty={self.repetition_penalty} must be > 0 (1.0 "
                    "disables it; > 1 discourages tokens already in the prompt or output)")

    def _check(self, ok: bool, message: str) -> None:
        if not ok:
            raise ValueError(message.format(self=self))


def per_prompt(params: SamplingParams, count: int, start: int = 0) -> list[SamplingParams]:
    """`count` copies of `params`, the i-th seeded `params.seed * 1_000_003 + start + i` (None stays None):
    requests that share a seed share their random draws, so equal prompts would be equal samples."""
    if params.seed is None:
        return [params] * count
    return [replace(params, seed=params.seed * 1_000_003 + start + i) for i in range(count)]


def _to_signed(x: int) -> int:
    x &= MASK64
    return x - (1 << 64) if x >= 1 << 63 else x


_C1, _C2, _C3 = (_to_signed(c) for c in (SPLITMIX_GAMMA, SPLITMIX_MUL1, SPLITMIX_MUL2))


def _shr(x: torch.Tensor, n: int) -> torch.Tensor:
    """Logical right shift on int64 (torch's >> is arithmetic)."""
    return (x >> n) & ((1 << (64 - n)) - 1)


def hash_uniform(seeds: torch.Tensor, positions: torch.Tensor, stream: int) -> torch.Tensor:
    """splitmix64 of (seed, position, stream) -> uniform in (0, 1), float64. seeds: [B], positions: [B, T]."""
    x = seeds[:, None] * _C1 + positions * _C2 + _to_signed((stream + 1) * SPLITMIX_MUL2)  # [B, T] wraps mod 2^64
    x = (x ^ _shr(x, 30)) * _C2
    x = (x ^ _shr(x, 27)) * _C3
    x = x ^ _shr(x, 31)
    return (_shr(x, 11).double() + 0.5) * (2.0 ** -53)


def batch_params(seqs: list, device) -> tuple[torch.Tensor, ...]:
    """Each sequence's sampling settings as tensors: temperature [B], top_k [B], top_p [B], seed [B]."""
    temperature = torch.tensor([s.params.temperature for s in seqs], dtype=torch.float32, device=device)
    top_k = torch.tensor([s.params.top_k for s in seqs], dtype=torch.long, device=device)
    top_p = torch.tensor([s.params.top_p for s in seqs], dtype=torch.float32, device=device)
    seeds = torch.tensor([s.seed for s in seqs], dtype=torch.long, device=device)
    return temperature, top_k, top_p, seeds


def target_probs(logits: torch.Tensor, temperature: torch.Tensor, top_k: torch.Tensor,
                 top_p: torch.Tensor) -> torch.Tensor:
    """The distribution a token is sampled from, one-hot on the argmax for greedy rows. logits [B, T, V], rest [B]."""
    logits = logits.float()
    greedy = temperature == 0
    temp = torch.where(greedy, torch.ones_like(temperature), temperature)
    scaled = logits / temp[:, None, None]  # [B, T, V]
    V = logits.shape[-1]
    k = torch.where(top_k < 0, torch.full_like(top_k, V), top_k.clamp(max=V))
    if bool((k < V).any()) or bool((top_p < 1).any()):
        scaled = _filter_top_k_top_p(scaled, k, top_p)
    probs = torch.softmax(scaled, dim=-1)  # [B, T, V]
    if bool(greedy.any()):
        one_hot = torch.zeros_like(probs).scatter_(-1, logits.argmax(-1, keepdim=True), 1.0)
        probs = torch.where(greedy[:, None, None], one_hot, probs)
    return probs


def _filter_top_k_top_p(scaled: torch.Tensor, k: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    sorted_logits, order = scaled.sort(dim=-1, descending=True)  # [B, T, V]
    rank = torch.arange(scaled.shape[-1], device=scaled.device)
    drop = (rank[None, None, :] >= k[:, None, None]).expand_as(scaled)  # outside top-k
    probs = torch.softmax(sorted_logits.masked_fill(drop, float("-inf")), dim=-1)
    mass_before = probs.cumsum(-1) - probs  # mass of strictly better tokens
    drop = drop | (mass_before >= top_p[:, None, None])  # nucleus: the smallest prefix reaching top_p
    sorted_logits = sorted_logits.masked_fill(drop, float("-inf"))
    return torch.full_like(scaled, float("-inf")).scatter(-1, order, sorted_logits)


def sample_from(probs: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Inverse-CDF sampling. probs: [..., V] (need not be normalised), u: [...] in (0, 1) -> [...] long."""
    cdf = probs.double().cumsum(-1)  # [..., V]
    target = (u * cdf[..., -1]).unsqueeze(-1)
    idx = (cdf < target).sum(-1)
    # rounding can push idx past the last token with mass; fall back to that token
    last_nonzero = (probs > 0).long().cumsum(-1).argmax(-1)
    return torch.minimum(idx, last_nonzero)
