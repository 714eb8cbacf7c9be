"""The audit on the learner's side: one `StepAudit` per step, the trainer's `logits_hook`, and the weights that
sampled the rows.

Rows are scored under the weights that sampled them: the trainer's own (its update's forward shows them to the
hook), or in the async pipeline the version before (`LearnerAudit` keeps a copy for that). Rows of any other
version, or of several, are not audited: a rule on versions alone, never on tokens or rewards.
"""
from __future__ import annotations

import time
from contextlib import contextmanager
import torch
from torch import Tensor

from .eprocess import step_evidence
from .rows import AuditRows
from .scorer import COLUMNS, TokenScorer


class StepAudit:
    """`PolicyTrainer.logits_hook` for one step: keeps the token scores of `rows` and the seconds they cost."""

    def __init__(self, scorer: TokenScorer, rows: Tensor, mask: Tensor, on_policy: bool = True):
        self.scorer, self.rows, self.mask = scorer, rows, mask  # rows [N] bool, mask [N, T] response tokens
        self.on_policy = on_policy  # False: already scored under the previous weights, not a hook for the update
        self.scores = torch.zeros(*mask.shape, COLUMNS, dtype=torch.float64)  # [N, T, COLUMNS]
        self.seconds = 0.0
        self._depth = 0

    @contextmanager
    def timed(self):
        """Counts the seconds inside (a forward run for the audit alone, its scoring), nested ones once."""
        self._depth += 1
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self._depth -= 1
            if self._depth == 0:
                self.seconds += time.perf_counter() - t0

    def __call__(self, logits: Tensor, targets: Tensor, rows: Tensor, positions: Tensor) -> None:
        with self.timed():
            self.scores[rows, positions] = self.scorer(logits, targets, rows, positions)

    def metrics(self) -> dict:
        """The step's evidence as metrics-row keys (`StepEvidence.metrics`) and `sampler_s`."""
        with self.timed():
            audited = (self.mask * self.rows[:, None]) > 0  # [N, T]
            out = step_evidence(self.scores[audited]).metrics()
        return {**out, "sampler_s": self.seconds}


class LearnerAudit:
    """The scorer of a run and, for the async pipeline, the weights of the version before the learner's."""

    def __init__(self, scorer: TokenScorer, previous: torch.nn.Module | None = None):
        self.scorer, self.previous = scorer, previous
        self._snapshot: dict[str, Tensor] | None = None

    @classmethod
    def build(cls, rollout, seed: int, keep_previous: bool, load_previous=None) -> "LearnerAudit | None":
        """From the rollout config (None with rollout.audit=off); `load_previous()` gives a second copy of the
        policy when `keep_previous` (async with a policy lag)."""
        if rollout.audit == "off":
            return None
        scorer = TokenScorer(rollout.temperature, rollout.top_p, rollout.top_k, seed)
        return cls(scorer, load_previous() if keep_previous else None)

    def begin(self, trainer, policy: torch.nn.Module, version: int, batch, audit: AuditRows | None
              ) -> StepAudit | None:
        """The step's audit, or None; called before every step (it keeps this version's weights for the next).
        Rows of this version: install it as `trainer.logits_hook` (`on_policy`). Rows of the version before
        are scored here, now, under `previous`."""
        kept, self._snapshot = self._snapshot, None
        if self.previous is not None:  # this version, for the next step's rows
            self._snapshot = {k: v.detach().clone() for k, v in policy.state_dict().items()}
        if audit is None or audit.version is None:
            return None
        if audit.version == version:
            return StepAudit(self.scorer, audit.rows, batch.mask)
        if kept is None or audit.version != version - 1:
            return None
        self.previous.load_state_dict(kept)
        step = StepAudit(self.scorer, audit.rows, batch.mask, on_policy=False)
        with step.timed():
            trainer.score(self.previous, batch, torch.arange(batch.num_rows)[audit.rows], step)
        return step
