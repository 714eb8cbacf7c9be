"""Exact sequence distributions of a small model, and a chi-square goodness-of-fit check (no scipy)."""
from __future__ import annotations

import math
from collections import Counter

import torch

from specrl.engine.sampler import target_probs


@torch.no_grad()
def exact_distribution(model, prompt: list[int], steps: int, temperature: float, top_k: int, top_p: float) -> dict:
    """P(first `steps` generated tokens) by enumerating every prefix (V^steps cells)."""
    V = model.config.vocab_size
    dist = {(): 1.0}
    for _ in range(steps):
        prefixes = list(dist)
        ids = torch.tensor([prompt + list(p) for p in prefixes])  # [N, T]
        logits = model(ids).logits[:, -1:]  # [N, 1, V]
        n = len(prefixes)
        probs = target_probs(logits, torch.full((n,), temperature), torch.full((n,), top_k, dtype=torch.long),
                             torch.full((n,), top_p))[:, 0].double()  # [N, V]
        probs = probs / probs.sum(-1, keepdim=True)
        dist = {p + (v,): dist[p] * float(probs[i, v]) for i, p in enumerate(prefixes) for v in range(V)
                if probs[i, v] > 0}
    return dist


def chi_square_critical(df: int, z: float) -> float:
    """Wilson-Hilferty approximation of the chi-square quantile at standard-normal quantile z."""
    return df * (1 - 2 / (9 * df) + z * math.sqrt(2 / (9 * df))) ** 3


def chi_square(samples: list[tuple], dist: dict, min_expected: float = 5.0) -> tuple[float, int]:
    """Pearson statistic and degrees of freedom; cells with expected count < min_expected are pooled."""
    n = len(samples)
    counts = Counter(samples)
    assert set(counts) <= set(dist), f"sampled sequences with probability 0: {set(counts) - set(dist)}"
    stat, cells, pool_obs, pool_exp = 0.0, 0, 0, 0.0
    for seq, p in dist.items():
        expected = n * p
        if expected < min_expected:
            pool_obs += counts.get(seq, 0)
            pool_exp += expected
            continue
        stat += (counts.get(seq, 0) - expected) ** 2 / expected
        cells += 1
    if pool_exp > 0:
        stat += (pool_obs - pool_exp) ** 2 / pool_exp
        cells += 1
    return stat, cells - 1


def assert_matches(samples: list[tuple], dist: dict, z: float = 3.72) -> None:
    """z = 3.72 is a one-sided 1e-4 level: a correct sampler fails about once in 10,000 runs."""
    stat, df = chi_square(samples, dist)
    crit = chi_square_critical(df, z)
    assert stat < crit, f"chi-square {stat:.1f} >= critical {crit:.1f} (df={df}): distribution differs"
