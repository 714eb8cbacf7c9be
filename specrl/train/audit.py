"""The sampler audit's glue: the distribution the sampler was asked to use, rebuilt from the trainer's logits
with the engine's own sampling functions, scored token by token (`specrl.rl.audit` holds the statistic). The
audit's uniforms are a hash of (seed, row, position), so a token's score does not depend on how the trainer
cut the batch into micro-batches or lm-head chunks.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

import torch
from torch import Tensor

from ..engine.sampling import hash_uniform, target_probs
from ..model import CausalLM
from ..rl.audit import token_scores
from .batch import collate

if TYPE_CHECKING:
    from .config import TrainConfig

AUDIT_STREAM = 0xA0D1  # the hash stream of the audit's uniforms, apart from the sampler's streams
SCORES = 3  # token_scores columns: u, w, impossible


class TokenScorer:
    """(logits [n, V], targets [n], rows [n], positions [n]) -> token_scores [n, 3] under the rollout's sampling."""

    def __init__(self, temperature: float, top_p: float = 1.0, top_k: int = -1, seed: int = 0):
        self.temperature = torch.tensor([temperature], dtype=torch.float32)
        self.top_p = torch.tensor([top_p], dtype=torch.float32)
        self.top_k = torch.tensor([top_k], dtype=torch.long)
        self.seed = seed % 2 ** 40  # seed * 1_000_003 + row stays within int64

    def probs(self, logits: Tensor) -> Tensor:
        dev = logits.device
        return target_probs(logits[None], self.temperature.to(dev), self.top_k.to(dev), self.top_p.to(dev))[0]

    def __call__(self, logits: Tensor, targets: Tensor, rows: Tensor, positions: Tensor) -> Tensor:
        probs = self.probs(logits.detach())  # [n, V]
        seeds = (self.seed * 1_000_003 + rows).to(logits.device)  # [n]
        v = hash_uniform(seeds, positions.to(logits.device)[:, None], AUDIT_STREAM)[:, 0]  # [n]
        return token_scores(probs, targets, v)  # [n, 3]


def audit_scorer(cfg: "TrainConfig") -> TokenScorer | None:
    """The run's scorer: the rollout's sampling settings and seed; None with rollout.audit=off."""
    ro = cfg.rollout
    return None if ro.audit == "off" else TokenScorer(ro.temperature, ro.top_p, ro.top_k, cfg.seed)


class AuditRequest(NamedTuple):
    """One step's audit: which rows, scored how, under which weights."""
    scorer: TokenScorer
    rows: Tensor  # [N] bool, chosen before the rewards were known
    model: CausalLM | None = None  # the weights that sampled the rows; None: the trainer's own (on-policy)


def group_rows(groups: list[int], group_size: int, num_rows: int) -> Tensor:
    """[N] bool: the rows of `groups` (rows are group-major, `group_size` each)."""
    return torch.isin(torch.arange(num_rows) // group_size, torch.tensor(groups, dtype=torch.long))


class AuditRows(NamedTuple):
    """What the pipeline asks a learner to audit: rows chosen before the rewards, and the one policy version
    that sampled all of them (None: several did, with updates in flight; such a step is not audited)."""
    rows: Tensor  # [N] bool
    version: int | None


@torch.no_grad()
def score_completions(model: CausalLM, scorer: TokenScorer, prompts: list[list[int]], completions: list[list[int]],
                      rows_per_batch: int = 16) -> Tensor:
    """token_scores [n, 3] of every completion token, row by row in order: what the trainer's audit computes,
    for completions from any engine (`specrl audit`, the experiments). Row i is audit row i."""
    out = []
    for start in range(0, len(prompts), rows_per_batch):
        ps, cs = prompts[start:start + rows_per_batch], completions[start:start + rows_per_batch]
        batch = collate(ps, cs, [[0.0] * len(c) for c in cs], torch.zeros(len(ps)), 0)
        logits = model(batch.input_ids.to(next(model.parameters()).device)).logits.float().cpu()  # [b, T, V]
        for i, (p, c) in enumerate(zip(ps, cs)):
            pos = torch.arange(len(p) - 1, len(p) - 1 + len(c))  # [r] positions predicting the completion
            rows = torch.full_like(pos, start + i)
            out.append(scorer(logits[i, pos], batch.targets[i, pos], rows, pos))
    return torch.cat(out) if out else torch.zeros(0, SCORES, dtype=torch.float64)
