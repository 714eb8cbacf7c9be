"""The sampler audit's statistic: were the sampled tokens drawn from the distribution the sampler was given?

Each sampled token x_t gets its randomized probability integral transform, the vocabulary ordered by
probability (descending, ties by id): u_t = P_t(tokens ranked before x_t) + v_t * p_t(x_t), v_t ~ U(0, 1).
Under an exact sampler u_t is U(0, 1) given the prefix, whatever p_t, so z_t = Phi^-1(u_t) is N(0, 1). A
step's statistic is Z = sum w_t z_t / sqrt(sum w_t^2), with the predictable weight w_t = 1 - max p_t:
near-deterministic positions, where a wrong sampler barely differs, carry almost no weight. Too-flat samplers push
u up, too-sharp ones down, so the test is two-sided (false alarms and power: docs/results/sampler_audit.md).
"""
from __future__ import annotations

import math
from collections import deque
from typing import NamedTuple

import torch

U_EPS = 1e-9  # u is clipped to [U_EPS, 1 - U_EPS]: a token the distribution gives no mass gets |z| ~ 6
ALARM_RATE = 1e-3  # false alarms per step the windowed evidence is set for (two-sided)
ALARM_Z = 3.2905267314918945  # Phi^-1(1 - ALARM_RATE / 2)


def randomized_pit(probs: torch.Tensor, targets: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """u [n] (float64) of tokens `targets` [n] under `probs` [n, V] with the vocabulary ranked by probability,
    descending (ties: lower id first); `v` [n] are the audit's own uniforms."""
    p = probs.double()  # [n, V]
    p_x = p.gather(-1, targets[:, None])  # [n, 1]
    ids = torch.arange(p.shape[-1], device=p.device)
    before = (p > p_x) | ((p == p_x) & (ids[None, :] < targets[:, None]))  # [n, V] ranked strictly before x
    u = (p * before).sum(-1) + v.double() * p_x[:, 0]  # [n]
    return u.clamp(U_EPS, 1 - U_EPS)


def token_scores(probs: torch.Tensor, targets: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """[n, 3]: each token's (u, w, impossible): w = 1 - max p, the chance the position's token is not its mode;
    impossible is 1 where the token had no mass under `probs`."""
    p_x = probs.gather(-1, targets[:, None])[:, 0]  # [n]
    return torch.stack([randomized_pit(probs, targets, v), 1 - probs.double().amax(-1), (p_x <= 0).double()], dim=-1)


def normal_sf(z: float) -> float:
    """P(N(0, 1) > z)."""
    return 0.5 * math.erfc(z / math.sqrt(2))


class StepTest(NamedTuple):
    z: float  # the weighted statistic, N(0, 1) under an exact sampler (0 with no weight)
    p_value: float  # two-sided
    tokens: int  # tokens audited
    weight: float  # sqrt(sum w^2): how much the step could tell (0: all positions deterministic)
    impossible: int  # tokens the distribution gave no mass: certain evidence of a wrong sampler


def step_test(scores: torch.Tensor) -> StepTest:
    """The step's test from `token_scores` rows [n, 3] of every audited token."""
    u, w, impossible = scores[:, 0].double(), scores[:, 1].double(), scores[:, 2]
    z_t = torch.special.ndtri(u)  # [n] exactly N(0, 1) under the null
    norm = float(w.pow(2).sum().sqrt())
    z = float((w * z_t).sum()) / norm if norm > 0 else 0.0
    return StepTest(z, min(1.0, 2 * normal_sf(abs(z))), len(u), norm, int(impossible.sum()))


class SamplerAlarm:
    """Stouffer's combination of the last `window` steps' Z (each N(0, 1) under the null): the alarm fires when
    |sum Z / sqrt(n)| > ALARM_Z, a false-alarm rate of ALARM_RATE per step. An impossible token counts through
    its clipped u (|z| ~ 6), not at once: a token at the edge of a top-p/top-k support can fall outside it by
    the float noise between the engine's logits and the trainer's. Steps of weight 0 are not counted."""

    def __init__(self, window: int = 5):
        self.recent: deque[float] = deque(maxlen=window)

    def evidence(self) -> float:
        return sum(self.recent) / math.sqrt(len(self.recent)) if self.recent else 0.0

    def update(self, z: float, weight: float) -> bool:
        """Adds a step's Z (with its `weight`, StepTest.weight); True when the alarm fires."""
        if weight > 0:
            self.recent.append(z)
        return abs(self.evidence()) > ALARM_Z

    def reset(self) -> None:
        self.recent.clear()


def choose_groups(num_groups: int, count: int | None, seed: int) -> list[int]:
    """`count` of the step's `num_groups` groups (all for None), drawn from `seed` alone: the audited rows
    never depend on the tokens or rewards (the zero-advantage skip picks rows by reward)."""
    if count is None or count >= num_groups:
        return list(range(num_groups))
    g = torch.Generator().manual_seed(seed)
    return sorted(torch.randperm(num_groups, generator=g)[:count].tolist())
