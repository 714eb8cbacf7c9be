"""KL estimators to a frozen reference policy, and the truncated importance ratio of async RL.

All inputs are per-token log-probs [B, T] of the sampled tokens; samples come from the policy, so each
estimator's expectation is KL(pi || pi_ref) (Schulman, "Approximating KL divergence")."""
from __future__ import annotations

from typing import Protocol

import torch
from torch import Tensor

from specrl.rl.registry import Registry

# exp(20) ~ 5e8 is finite in fp32; a larger log-ratio means the policies disagree completely anyway
_MAX_LOG_RATIO = 20.0


class KLFn(Protocol):
    def __call__(self, logp: Tensor, ref_logp: Tensor) -> Tensor: ...


KL_ESTIMATORS: Registry[KLFn] = Registry("KL estimator")
register_kl = KL_ESTIMATORS.register


@register_kl("k1")
def kl_k1(logp: Tensor, ref_logp: Tensor) -> Tensor:
    """log(pi / pi_ref): unbiased, high variance, can be negative."""
    return logp - ref_logp  # [B, T]


@register_kl("k2")
def kl_k2(logp: Tensor, ref_logp: Tensor) -> Tensor:
    """0.5 * log(pi / pi_ref)^2: biased, low variance, never negative."""
    return 0.5 * (logp - ref_logp) ** 2  # [B, T]


@register_kl("k3")
def kl_k3(logp: Tensor, ref_logp: Tensor) -> Tensor:
    """exp(ref - logp) - (ref - logp) - 1: unbiased, low variance, never negative (GRPO's choice)."""
    log_ratio = (ref_logp - logp).clamp(-_MAX_LOG_RATIO, _MAX_LOG_RATIO)  # [B, T]
    return torch.exp(log_ratio) - log_ratio - 1.0  # [B, T]


def kl_penalty(name: str, logp: Tensor, ref_logp: Tensor) -> Tensor:
    """Per-token KL estimate [B, T] with estimator ``name`` ("k1", "k2" or "k3")."""
    fn = KL_ESTIMATORS.get(name)
    if logp.shape != ref_logp.shape:
        raise ValueError(f"logp shape {tuple(logp.shape)} must match ref_logp shape {tuple(ref_logp.shape)}")
    return fn(logp, ref_logp)


def truncated_importance_ratio(logp_old: Tensor, logp_gen: Tensor, cap: float = 2.0) -> Tensor:
    """min(pi_old / pi_gen, cap) per token [B, T], without gradient: a token sampled by older weights pi_gen
    (async RL) has its loss scaled by it to correct the off-policy sample (NeMo-RL); the cap bounds variance."""
    if cap <= 0:
        raise ValueError(f"cap={cap} must be positive; a typical value is 2.0")
    log_ratio = (logp_old - logp_gen).detach().clamp(max=_MAX_LOG_RATIO)  # [B, T]
    return torch.exp(log_ratio).clamp(max=cap)  # [B, T]
