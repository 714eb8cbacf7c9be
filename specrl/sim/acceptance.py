"""Acceptance model of speculative decoding: per-position acceptance, and how many verify steps a
sequence needs to emit a given number of tokens."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

EXACT_SAMPLE_BUDGET = 300_000  # tokens; above this, step counts come from the renewal CLT


@dataclass(frozen=True)
class AcceptanceModel:
    """alphas[p] = P(draft p+1 accepted | drafts 1..p accepted), p = 0..k-1."""

    alphas: tuple[float, ...]

    def __post_init__(self):
        if not self.alphas or any(not 0.0 <= a <= 1.0 for a in self.alphas):
            raise ValueError(f"acceptance per position must be k>=1 values in [0, 1], got "
                             f"{self.alphas}; pass e.g. --acceptance 0.9,0.8,0.7")

    @property
    def k(self) -> int:
        return len(self.alphas)

    @property
    def pmf(self) -> np.ndarray:
        """P(emitted = 1 + a) for a accepted drafts, a = 0..k (the +1 is the bonus/correction)."""
        survive = np.concatenate([[1.0], np.cumprod(self.alphas)])  # [k+1] P(a >= p)
        return survive - np.concatenate([survive[1:], [0.0]])  # [k+1]

    @property
    def mean_emitted(self) -> float:
        """Acceptance length tau: tokens emitted per verify step."""
        return float(np.dot(self.pmf, np.arange(1, self.k + 2)))

    @property
    def var_emitted(self) -> float:
        e = np.arange(1, self.k + 2)
        return float(np.dot(self.pmf, e * e) - self.mean_emitted ** 2)

    def steps_needed(self, tokens: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Verify steps each sequence needs to emit `tokens` [N]; the last step may be cut short
        (a lossless engine stops at exactly the same length as without SD)."""
        tokens = np.asarray(tokens, dtype=np.int64)  # [N]
        if tokens.sum() <= EXACT_SAMPLE_BUDGET:
            return _exact_steps(tokens, np.cumsum(self.pmf), rng)
        return _clt_steps(tokens, self.mean_emitted, self.var_emitted, self.k, rng)


def geometric(alpha: float, k: int) -> AcceptanceModel:
    return AcceptanceModel(tuple([float(alpha)] * k))


def from_acceptance_length(tau: float, k: int) -> AcceptanceModel:
    """Geometric model whose mean tokens per verify step is tau (1 <= tau <= k+1)."""
    if not 1.0 <= tau <= k + 1:
        raise ValueError(f"acceptance length {tau} impossible with k={k}; expected 1 <= tau <= k+1")
    lo, hi = 0.0, 1.0
    for _ in range(60):  # bisection: tau is increasing in alpha
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if geometric(mid, k).mean_emitted < tau else (lo, mid)
    return geometric((lo + hi) / 2, k)


def _exact_steps(tokens: np.ndarray, cdf: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    steps = np.zeros_like(tokens)  # [N]
    left = tokens.copy()
    idx = np.flatnonzero(left > 0)
    while idx.size:
        chunk = int(min(512, max(8, left[idx].max())))
        u = rng.random((idx.size, chunk))  # [n, chunk]
        emitted = np.minimum(np.searchsorted(cdf, u, side="right"), cdf.size - 1) + 1  # [n, chunk]
        cs = np.cumsum(emitted, axis=1)  # [n, chunk]
        hit = cs >= left[idx, None]  # [n, chunk]
        done = hit[:, -1]
        steps[idx[done]] += hit[done].argmax(axis=1) + 1
        steps[idx[~done]] += chunk
        left[idx[~done]] -= cs[~done, -1]
        idx = idx[~done]
    return steps


def _clt_steps(tokens, mu, var, k, rng) -> np.ndarray:
    """Renewal CLT: steps to reach L tokens ~ Normal(L/mu, L var / mu^3)."""
    z = rng.standard_normal(tokens.shape)  # [N]
    n = np.ceil(tokens / mu + z * np.sqrt(tokens * var / mu ** 3))
    lo = np.ceil(tokens / (k + 1))
    return np.clip(n, lo, tokens).astype(np.int64)


def fit_geometric(accepted: np.ndarray, seqs: np.ndarray, k: int) -> AcceptanceModel:
    """Geometric alpha whose mean accepted drafts per sequence per step matches a trace."""
    mean_acc = float(np.sum(accepted) / max(np.sum(seqs), 1))  # E[a] = tau - 1
    return from_acceptance_length(min(1.0 + mean_acc, k + 1.0), k)
