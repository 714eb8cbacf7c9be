"""Group-relative advantage estimators (GRPO family), chosen by name: the rewards of N responses and the group
(prompt) each belongs to -> one advantage per response. Groups are integer ids, so they may differ in size."""
from __future__ import annotations

from typing import NamedTuple, Protocol

import torch
from torch import Tensor

from specrl.rl.registry import Registry


class AdvantageFn(Protocol):
    def __call__(self, rewards: Tensor, group_ids: Tensor, eps: float) -> Tensor: ...


ADVANTAGES: Registry[AdvantageFn] = Registry("advantage estimator")
register_advantage = ADVANTAGES.register


class GroupStats(NamedTuple):
    mean: Tensor  # [N] mean reward of each response's group
    std: Tensor  # [N] unbiased std of the group (0 for a group of one)
    count: Tensor  # [N] group size


def group_stats(rewards: Tensor, group_ids: Tensor) -> GroupStats:
    """Per-response statistics of its group, computed for all groups at once with scatter-adds."""
    groups, inverse = torch.unique(group_ids, return_inverse=True)  # [G], [N] dense ids 0..G-1
    x = rewards.double()  # sums of squares in float64: rewards of one group are often near-equal
    zeros = x.new_zeros(len(groups))
    count = zeros.index_add(0, inverse, torch.ones_like(x))  # [G]
    mean = zeros.index_add(0, inverse, x) / count  # [G]
    sq_dev = zeros.index_add(0, inverse, (x - mean[inverse]) ** 2)  # [G]
    var = sq_dev / (count - 1).clamp(min=1)  # [G] Bessel-corrected, like torch.std
    to = rewards.dtype
    return GroupStats(mean[inverse].to(to), var.sqrt()[inverse].to(to), count[inverse].to(to))


@register_advantage("grpo")
def grpo_advantages(rewards: Tensor, group_ids: Tensor, eps: float) -> Tensor:
    """(r - group mean) / (group std + eps) (Shao et al. 2024); 0 for groups with equal rewards."""
    stats = group_stats(rewards, group_ids)
    scaled = (rewards - stats.mean) / (stats.std + eps)  # [N]
    return torch.where(stats.std > 0, scaled, torch.zeros_like(scaled))  # [N] no 0/0 even at eps=0


@register_advantage("dr_grpo")
def dr_grpo_advantages(rewards: Tensor, group_ids: Tensor, eps: float) -> Tensor:
    """r - group mean: Dr. GRPO drops the std division, which over-weights near-uniform groups."""
    return rewards - group_stats(rewards, group_ids).mean  # [N]


@register_advantage("rloo")
def rloo_advantages(rewards: Tensor, group_ids: Tensor, eps: float) -> Tensor:
    """r minus the mean of the *other* responses of its group = n/(n-1) * (r - mean); 0 for n = 1."""
    stats = group_stats(rewards, group_ids)
    scale = stats.count / (stats.count - 1).clamp(min=1)  # [N]
    return scale * (rewards - stats.mean)  # [N]


def compute_advantages(name: str, rewards: Tensor, group_ids: Tensor | None = None, group_size: int | None = None,
                       eps: float = 1e-6) -> Tensor:
    """Advantages [N] for rewards [N] with estimator ``name``; give ``group_ids`` [N] or ``group_size``."""
    fn = ADVANTAGES.get(name)
    if rewards.dim() != 1:
        raise ValueError(f"rewards must be 1-D [N], got shape {tuple(rewards.shape)}; flatten them first")
    if (group_ids is None) == (group_size is None):
        raise ValueError("pass exactly one of group_ids or group_size to compute_advantages")
    if group_ids is None:  # consecutive groups of group_size (n samples per prompt)
        n = rewards.numel()
        if group_size < 1 or n % group_size != 0:
            raise ValueError(f"group_size={group_size} does not divide the {n} rewards; pass the number of samples "
                             "per prompt, or pass group_ids instead")
        group_ids = torch.arange(n, device=rewards.device) // group_size  # [N]
    if group_ids.shape != rewards.shape:
        raise ValueError(f"group_ids shape {tuple(group_ids.shape)} must match rewards shape {tuple(rewards.shape)}")
    return fn(rewards.float() if not rewards.is_floating_point() else rewards, group_ids, eps)
