"""The PIT diagnostic kept beside the e-process: a weighted randomized probability integral transform.

Each token's u = P(tokens ranked before x) + v * p(x), v ~ U(0, 1) the audit's own, is U(0, 1) under an exact
sampler whatever p; a step's Z = sum w z / sqrt(sum w^2), z = Phi^-1(u), w = 1 - max p. Z is only roughly
N(0, 1) on sharp policies (its weights are realised ones), so it is reported, never alarmed on: the e-process
(`eprocess.py`) is the test.
"""
from __future__ import annotations

import math
from typing import NamedTuple

import torch

U_EPS = 1e-9  # u is clipped to [U_EPS, 1 - U_EPS]: a token the distribution gives no mass gets |z| ~ 6


def randomized_pit(before: torch.Tensor, p_x: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """u [n] (float64) from the mass ranked before each token [n], its probability [n] and uniforms v [n]."""
    return (before.double() + v.double() * p_x.double()).clamp(U_EPS, 1 - U_EPS)


def normal_sf(z: float) -> float:
    """P(N(0, 1) > z)."""
    return 0.5 * math.erfc(z / math.sqrt(2))


class PitTest(NamedTuple):
    z: float  # the weighted statistic (0 with no weight)
    p_value: float  # two-sided, by the normal approximation
    weight: float  # sqrt(sum w^2): how much the tokens could tell (0: all positions deterministic)


def pit_test(u: torch.Tensor, w: torch.Tensor) -> PitTest:
    """The weighted PIT statistic of tokens with PIT values u [n] and weights w [n]."""
    z_t = torch.special.ndtri(u.double())  # [n]
    norm = float(w.double().pow(2).sum().sqrt())
    z = float((w.double() * z_t).sum()) / norm if norm > 0 else 0.0
    return PitTest(z, min(1.0, 2 * normal_sf(abs(z))), norm)
