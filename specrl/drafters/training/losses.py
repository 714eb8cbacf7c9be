"""Losses of online drafter training: pure, batched tensor functions. The drafter's q is trained towards the
policy's p, both temperature-scaled, since rollouts sample at a temperature and verification compares the
scaled distributions.
"""
from __future__ import annotations

import torch
from torch import Tensor


def restrict_to(policy_logits: Tensor, target_ids: Tensor | None) -> Tensor:
    """policy_logits [..., V] -> [..., Vd] at the draft vocabulary's target ids (all of V when None)."""
    return policy_logits if target_ids is None else policy_logits.index_select(-1, target_ids)


def forward_kl(draft_logits: Tensor, policy_logits: Tensor, temperature: float = 1.0) -> Tensor:
    """KL(p || q) per position: the soft cross-entropy minus the constant H(p), so the same gradient.
    draft_logits, policy_logits: [B, T, V] -> [B, T]."""
    logp = torch.log_softmax(policy_logits.float() / temperature, dim=-1)  # [B, T, V]
    logq = torch.log_softmax(draft_logits.float() / temperature, dim=-1)  # [B, T, V]
    return (logp.exp() * (logp - logq)).sum(-1)


def accepted_mass(draft_logits: Tensor, policy_logits: Tensor, temperature: float = 1.0,
                  policy_probs: Tensor | None = None) -> Tensor:
    """sum_x min(p(x), q(x)) per position, the probability that the verifier accepts a draft sampled from q:
    [B, T, V] -> [B, T]. `policy_probs` [B, T, V] overrides p (a reduced draft vocabulary passes the
    full-vocabulary p gathered at its ids, unnormalised)."""
    p = torch.softmax(policy_logits.float() / temperature, dim=-1) if policy_probs is None else policy_probs
    q = torch.softmax(draft_logits.float() / temperature, dim=-1)  # [B, T, V]
    return torch.minimum(p, q).sum(-1)


def reward_weights(rewards: Tensor, group_size: int, floor: float = 0.25, w_max: float = 2.0,
                   eps: float = 1e-6) -> Tensor:
    """ReSpec's w(r), per GRPO group: w = clip(1 + (r - mean_g) / (std_g + eps), floor, w_max), then divided by
    its group's mean, so every group teaches the drafter as much as any other and better trajectories weigh more
    within it. The floor keeps failed rows in the loss: with binary rewards and a group mostly right, 1 + z of a
    wrong row is below 0, and the long failed chains are the tokens SD is for. A group of equal rewards gets 1s
    (no signal: plain distillation). rewards: [N], N a multiple of group_size, groups consecutive -> [N]."""
    if rewards.numel() % group_size:
        raise ValueError(f"{rewards.numel()} rewards do not split into groups of {group_size}: expected "
                         "consecutive GRPO groups of rollout.n samples")
    r = rewards.float().view(-1, group_size)  # [G, n]
    std = r.std(dim=1, unbiased=False, keepdim=True)  # [G, 1]
    flat = std <= eps  # [G, 1] equal rewards (up to rounding of the mean)
    z = torch.where(flat, 0.0, (r - r.mean(dim=1, keepdim=True)) / torch.where(flat, 1.0, std + eps))  # [G, n]
    w = (1.0 + z).clamp(floor, w_max)  # [G, n]
    return (w / w.mean(dim=1, keepdim=True)).view(-1)  # [N], mean 1 per group


def weighted_token_mean(values: Tensor, mask: Tensor, row_weights: Tensor | None = None,
                        denom: Tensor | float | None = None) -> Tensor:
    """sum_{b,t} w_b * values * mask / denom. values, mask: [B, T]; row_weights: [B]; denom defaults to
    mask.sum() (pass the whole batch's token count when accumulating over micro-batches)."""
    m = mask.float()
    if row_weights is not None:
        m = m * row_weights[:, None].float()  # [B, T]
    d = mask.float().sum().clamp(min=1) if denom is None else denom
    return (values * m).sum() / d
