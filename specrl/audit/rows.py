"""Which rows a step audits: chosen from the run's seed and the step alone, before the rewards are known (the
zero-advantage skip picks rows by reward, so a choice by reward would depend on the tokens)."""
from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor


class AuditRows(NamedTuple):
    """What the pipeline asks a learner to audit: rows chosen before the rewards, and the one policy version
    that sampled all of them (None: several did, with updates in flight; such a step is not audited)."""
    rows: Tensor  # [N] bool
    version: int | None


def choose_groups(num_groups: int, count: int | None, seed: int) -> list[int]:
    """`count` of the step's `num_groups` groups (all for None), drawn from `seed` alone."""
    if count is None or count >= num_groups:
        return list(range(num_groups))
    g = torch.Generator().manual_seed(seed)
    return sorted(torch.randperm(num_groups, generator=g)[:count].tolist())


def group_rows(groups: list[int], group_size: int, num_rows: int) -> Tensor:
    """[N] bool: the rows of `groups` (rows are group-major, `group_size` each)."""
    return torch.isin(torch.arange(num_rows) // group_size, torch.tensor(groups, dtype=torch.long))
