"""The RL loss terms by name: policy losses (the clipped PPO/GRPO loss with DAPO clip-higher), KL estimators to
a frozen reference policy with the truncated importance ratio of async RL, and loss aggregation modes.

Per-token terms are [B, T] with a 0/1 mask [B, T] over response tokens; samples come from the policy, so each
KL estimator's expectation is KL(pi || pi_ref) (Schulman, "Approximating KL divergence"). The reduction to a
scalar is a named choice (``aggregate``): token-level and sequence-level averaging weight long and short
responses differently.
"""
from __future__ import annotations

from typing import NamedTuple, Protocol

import torch
from torch import Tensor

from specrl.rl.registry import Registry


def masked_sum(x: Tensor, mask: Tensor, dim: int | None = None) -> Tensor:
    return (x * mask).sum() if dim is None else (x * mask).sum(dim)


def masked_mean(x: Tensor, mask: Tensor, dim: int | None = None) -> Tensor:
    """Mean of ``x`` where ``mask`` is set; an empty mask gives 0 rather than NaN."""
    count = mask.sum() if dim is None else mask.sum(dim)
    return masked_sum(x, mask, dim) / count.clamp(min=1)


class PolicyLoss(NamedTuple):
    loss: Tensor  # [B, T] per-token loss (unmasked; reduce with ``aggregate``)
    ratio: Tensor  # [B, T] pi_theta / pi_old
    clipped: Tensor  # [B, T] bool: the clipped objective was the one taken (no gradient there)


class PolicyLossFn(Protocol):
    def __call__(self, logp: Tensor, logp_old: Tensor, advantages: Tensor, clip_low: float, clip_high: float,
                 weights: Tensor | None) -> PolicyLoss: ...


POLICY_LOSSES: Registry[PolicyLossFn] = Registry("policy loss")
register_policy_loss = POLICY_LOSSES.register


@register_policy_loss("clipped")
def clipped_policy_loss(logp: Tensor, logp_old: Tensor, advantages: Tensor, clip_low: float = 0.2,
                        clip_high: float = 0.2, weights: Tensor | None = None) -> PolicyLoss:
    """-min(r A, clip(r, 1 - clip_low, 1 + clip_high) A) per token, r = exp(logp - logp_old), for ``advantages``
    [B] (one per response) or [B, T]. ``clip_high > clip_low`` is DAPO's clip-higher, which lets low-probability
    tokens grow and keeps entropy from collapsing. ``weights`` [B, T] (e.g. a truncated importance ratio for
    off-policy tokens) scale the loss and receive no gradient."""
    if advantages.dim() == logp.dim() - 1:
        advantages = advantages.unsqueeze(-1)  # [B, 1]
    ratio = torch.exp(logp - logp_old)  # [B, T]
    unclipped = -ratio * advantages  # [B, T]
    clipped_ratio = ratio.clamp(1.0 - clip_low, 1.0 + clip_high)  # [B, T]
    clipped_obj = -clipped_ratio * advantages  # [B, T]
    loss = torch.maximum(unclipped, clipped_obj)  # [B, T]
    if weights is not None:
        loss = loss * weights.detach()  # [B, T]
    return PolicyLoss(loss, ratio, clipped_obj > unclipped)


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


class Reduction(NamedTuple):
    total: Tensor  # scalar: sum over units (tokens or sequences) of each unit's loss
    count: Tensor  # scalar: number of units; the mean is total / count


class AggregateFn(Protocol):
    def __call__(self, loss: Tensor, mask: Tensor, norm_len: int) -> Reduction: ...


AGGREGATIONS: Registry[AggregateFn] = Registry("loss aggregation")
register_aggregation = AGGREGATIONS.register


@register_aggregation("token_mean")
def _token_mean(loss: Tensor, mask: Tensor, norm_len: int) -> Reduction:
    """Mean over every response token of the batch (DAPO token-level: long responses weigh more)."""
    return Reduction(masked_sum(loss, mask), mask.sum())


@register_aggregation("seq_mean_token_mean")
def _seq_mean_token_mean(loss: Tensor, mask: Tensor, norm_len: int) -> Reduction:
    """Mean over each sequence's tokens, then over sequences (original GRPO)."""
    per_seq = masked_mean(loss, mask, dim=-1)  # [B]
    return Reduction(per_seq.sum(), (mask.sum(-1) > 0).sum())


@register_aggregation("seq_mean_token_sum_norm")
def _seq_mean_token_sum_norm(loss: Tensor, mask: Tensor, norm_len: int) -> Reduction:
    """Each sequence's token sum / a constant length, then mean over sequences (Dr. GRPO: no length bias)."""
    per_seq = masked_sum(loss, mask, dim=-1) / norm_len  # [B]
    return Reduction(per_seq.sum(), (mask.sum(-1) > 0).sum())


def aggregate_denom(mask: Tensor, mode: str) -> Tensor:
    """The count ``aggregate`` divides by: tokens for "token_mean", non-empty sequences otherwise. Computed over
    a whole mini-batch and passed as ``denom``, it makes accumulated micro-batch losses the whole batch's loss."""
    return AGGREGATIONS.get(mode)(torch.zeros_like(mask, dtype=torch.float32), mask, 1).count


def aggregate(loss: Tensor, mask: Tensor, mode: str = "token_mean", norm_len: int | None = None,
              denom: Tensor | float | None = None) -> Tensor:
    """Reduce per-token ``loss`` [B, T] under ``mask`` [B, T] to a scalar with aggregation ``mode``.
    ``norm_len`` is the constant of "seq_mean_token_sum_norm" (default T; use the max response length).
    ``denom`` replaces the local count (see ``aggregate_denom``). An empty batch gives 0, not NaN."""
    fn = AGGREGATIONS.get(mode)
    if loss.shape != mask.shape:
        raise ValueError(f"loss shape {tuple(loss.shape)} must match mask shape {tuple(mask.shape)}")
    mask = mask.to(loss.dtype)  # [B, T]
    total, count = fn(loss, mask, norm_len if norm_len is not None else loss.shape[-1])
    denom = count if denom is None else torch.as_tensor(denom, device=loss.device)
    return total / denom.to(loss.dtype).clamp(min=1)
