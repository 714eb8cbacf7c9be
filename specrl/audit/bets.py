"""The bets of the sampler audit's test martingale: pure, batched tensor math over the sampler's distribution.

Each audited token x ~ p (the distribution the sampler was told to use: temperature, top-k and top-p applied)
is bet on with b(x) = 1 - lam + lam * q(x) / p(x), where q is an alternative built from p alone: p tempered
(q ~ p^a on p's support), p cut to its top-p nucleus, or p with its tail inflated. Whatever q and lam in
[0, 1), sum_x p(x) b(x) = 1 - lam + lam * sum_x q(x) = 1 exactly, so the running product of the bets is a
nonnegative martingale of mean 1 under an exact sampler (DESIGN.md, "The sampler audit"). A token p gives no
mass is certain evidence and is counted apart (`impossible`), never bet on.
"""
from __future__ import annotations

import math

from typing import NamedTuple

import torch

TAUS = (0.8, 0.9, 0.95, 1.05, 1.1, 1.25)  # tempered alternatives q ~ p^(1/tau): too sharp (< 1) and too flat (> 1)
NUCLEUS = 0.9  # the top-p cut alternative: p restricted to its smallest prefix of this much mass
TAIL = 0.1  # the tail-inflated alternative: (1 - TAIL) p + TAIL * uniform over p's support
ALTERNATIVES = len(TAUS) + 2
LAMBDAS = (0.05, 0.2, 0.5, 0.9)  # each alternative's bet sizes, mixed with equal weights (never 1: a q(x) = 0 costs
# a component at most log(1 - lam), so none is ruined by one token)
COMPONENTS = ALTERNATIVES * len(LAMBDAS)


class Ranked(NamedTuple):
    """Where each target stands in its distribution, the vocabulary ordered by probability, descending (ties:
    lower id first, a stable sort)."""
    before: torch.Tensor  # [n] float64 mass of the tokens ranked strictly before the target (the PIT's)
    nucleus_mass: torch.Tensor  # [n] float64 mass of the NUCLEUS cut: the tokens with less than NUCLEUS before them


def ranked(p: torch.Tensor, targets: torch.Tensor) -> Ranked:
    """p [n, V] float64, targets [n]. One sort gives both, so the nucleus a target is tested against is the one
    whose mass normalises the bet."""
    sorted_p, order = p.sort(dim=-1, descending=True, stable=True)  # [n, V]
    mass_before = sorted_p.cumsum(-1) - sorted_p  # [n, V]
    rank = (order == targets[:, None]).int().argmax(-1, keepdim=True)  # [n, 1]
    return Ranked(mass_before.gather(-1, rank)[:, 0], (sorted_p * (mass_before < NUCLEUS)).sum(-1))


def log_ratios(p: torch.Tensor, targets: torch.Tensor, rank: Ranked | None = None) -> torch.Tensor:
    """[n, ALTERNATIVES] log q_j(x) / p(x) of each target under each alternative (0 where p(x) = 0, which
    `impossible` counts instead). p [n, V] (float64 is used), targets [n]; `rank`: `ranked(p, targets)`, if known."""
    p = p.double()  # [n, V]
    p_x = p.gather(-1, targets[:, None])[:, 0]  # [n]
    support = p > 0  # [n, V]
    logp = torch.where(support, p.clamp_min(1e-300).log(), float("-inf"))  # [n, V]
    logp_x = p_x.clamp_min(1e-300).log()  # [n]
    cols = []
    for tau in TAUS:  # q = p^a / sum p^a: log r = (a - 1) log p(x) - log sum p^a
        a = 1.0 / tau
        cols.append((a - 1) * logp_x - torch.logsumexp(a * logp, -1))
    rank = ranked(p, targets) if rank is None else rank
    # the nucleus: r = 1 / its mass inside, 0 outside
    cols.append(torch.where(rank.before < NUCLEUS, -rank.nucleus_mass.log(), float("-inf")))
    size = support.sum(-1).double()  # [n] tokens in p's support
    cols.append(torch.log((1 - TAIL) + TAIL / (size * p_x.clamp_min(1e-300))))
    out = torch.stack(cols, -1)  # [n, J]
    return torch.where((p_x > 0)[:, None], out, 0.0)


def log_bets(log_r: torch.Tensor) -> torch.Tensor:
    """[n, COMPONENTS] log b = log(1 - lam + lam * r) of every (alternative, lam) pair, alternative-major;
    log_r [n, ALTERNATIVES] from `log_ratios`."""
    lam = torch.tensor(LAMBDAS, dtype=torch.float64, device=log_r.device)  # [L]
    r = log_r.double().exp()[:, :, None]  # [n, J, 1]; 0 outside the nucleus
    return torch.log1p(lam * (r - 1)).flatten(1)  # [n, J * L]


def log_mixture(log_wealth: torch.Tensor) -> torch.Tensor:
    """log of the equal-weight mixture of the components' wealth: [..., COMPONENTS] -> [...]."""
    return torch.logsumexp(log_wealth, -1) - math.log(log_wealth.shape[-1])
