"""The audit on the learner's side: one `StepAudit` per step, the trainer's `logits_hook`, and the weights that
sampled the rows.

Rows are scored under the weights that sampled them: the trainer's own (its update's forward shows them to the
hook), or in the async pipeline the version before (`LearnerAudit` keeps a copy for that). Rows of any other
version, or of several, are not audited: a rule on versions alone, never on tokens or rewards.

Rows of the version before cost a forward of their own, which the update does not share. `ForwardBudget` keeps
it to a share (`rollout.audit_share`, 3%) of the update's work, a forward and a backward over the previous step's
update rows, by cutting those rows short (`cut_rows`). The cut is set from the previous step and the rows' order
alone, so whether a token is audited never depends on that token or on any later one (the e-process stays
valid), and it counts tokens, not seconds, so a run is reproducible. The e-process sees fewer tokens a step, so
it needs more steps to ring.
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
        self.score_seconds = 0.0  # of `seconds`, the bets from the logits (the rest: forwards for the audit alone)
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
        t0 = time.perf_counter()
        with self.timed():
            scored = self.mask[rows, positions] > 0  # [n] response tokens: the prompt's are not the sampler's
            if bool(scored.any()):
                at = scored.nonzero()[:, 0]
                rows, positions = rows[at], positions[at]
                self.scores[rows, positions] = self.scorer(logits[at.to(logits.device)], targets[at.to(targets.device)],
                                                           rows, positions)
        self.score_seconds += time.perf_counter() - t0

    def metrics(self) -> dict:
        """The step's evidence as metrics-row keys (`StepEvidence.metrics`), `sampler_rows` (rows whose tokens it
        saw), `sampler_s` (its seconds) and `sampler_score_s` (of them, the bets; the rest ran forwards)."""
        with self.timed():
            audited = (self.mask * self.rows[:, None]) > 0  # [N, T]
            out = step_evidence(self.scores[audited]).metrics()
        return {**out, "sampler_rows": int(audited.any(-1).sum()), "sampler_s": self.seconds,
                "sampler_score_s": self.score_seconds}


AUDIT_SHARE = 0.03  # the audit's own forward (async: the version before) against the update's work
FIRST_TOKENS = 512  # forward positions of the audit's own forward before any update was seen
UPDATE_FORWARDS = 3  # an update's forward and backward, in forwards


class ForwardBudget:
    """Forward positions the audit's own forward may run in a step: `share` of the previous step's update, whose
    forward and backward over its rows cost about `UPDATE_FORWARDS` forwards of their positions."""

    def __init__(self, share: float = AUDIT_SHARE):
        self.share = share
        self.update_tokens: int | None = None  # the previous step's update positions

    def tokens(self) -> int:
        if self.update_tokens is None:
            return FIRST_TOKENS
        return int(self.share * UPDATE_FORWARDS * self.update_tokens)

    def record(self, batch) -> None:
        """This step's update positions (rows with an advantage: the update skips the others), for the next."""
        self.update_tokens = int(batch.lengths[batch.advantages != 0].sum())


def cut_rows(batch, rows: Tensor, tokens: int):
    """(`batch` with the audited `rows` [N] bool cut to at most `tokens` forward positions in all, the rows left
    [N] bool): in row order, each row takes what the rows before it left (a row's prompt is paid once, so a few
    whole rows audit more tokens than many short cuts), and a row whose share ends before its first response
    token is dropped. Decided by the rows' order and the lengths of earlier rows alone (independent samples),
    never by a row's own tokens."""
    lengths, mask, keep = batch.lengths.clone(), batch.mask.clone(), rows.clone()  # [N], [N, T], [N]
    left = tokens
    for r in rows.nonzero()[:, 0].tolist():
        n = min(int(lengths[r]), left)  # forward positions of row r
        first = int(batch.mask[r].argmax())  # the position of its first response target
        if n <= first:
            keep[r] = False
            continue
        lengths[r] = n
        mask[r, n:] = 0.0
        left -= n
    return batch._replace(lengths=lengths, mask=mask), keep


class LearnerAudit:
    """The scorer of a run and, for the async pipeline, the weights of the version before the learner's."""

    def __init__(self, scorer: TokenScorer, previous: torch.nn.Module | None = None, share: float = AUDIT_SHARE):
        self.scorer, self.previous = scorer, previous
        self.budget = ForwardBudget(share)
        self._snapshot: dict[str, Tensor] | None = None

    @classmethod
    def build(cls, rollout, seed: int, keep_previous: bool, load_previous=None) -> "LearnerAudit | None":
        """From the rollout config (None with rollout.audit=off); `load_previous()` gives a second copy of the
        policy when `keep_previous` (async with a policy lag)."""
        if rollout.audit == "off":
            return None
        scorer = TokenScorer(rollout.temperature, rollout.top_p, rollout.top_k, seed)
        return cls(scorer, load_previous() if keep_previous else None, rollout.audit_share)

    def begin(self, trainer, policy: torch.nn.Module, version: int, batch, audit: AuditRows | None
              ) -> StepAudit | None:
        """The step's audit, or None; called before every step (it keeps this version's weights for the next).
        Rows of this version: install it as `trainer.logits_hook` (`on_policy`). Rows of the version before
        are scored here, now, under `previous`."""
        now = time.perf_counter()
        kept, self._snapshot = self._snapshot, None
        if self.previous is not None:  # this version, for the next step's rows
            self._snapshot = {k: v.detach().clone() for k, v in policy.state_dict().items()}
        snapshot_s = time.perf_counter() - now
        budget = self.budget.tokens()  # set by the steps before this one
        self.budget.record(batch)
        if audit is None or audit.version is None:
            return None
        if audit.version == version:  # scored in the update's forward; with a lag, to the same budget
            cut, rows = cut_rows(batch, audit.rows, budget) if self.previous is not None else (batch, audit.rows)
            step = StepAudit(self.scorer, rows, cut.mask)
            step.seconds += snapshot_s
            return step
        if kept is None or audit.version != version - 1:
            return None
        return self._score_previous(trainer, kept, batch, audit.rows, budget, snapshot_s)

    def _score_previous(self, trainer, kept: dict[str, Tensor], batch, rows: Tensor, budget: int,
                        snapshot_s: float) -> StepAudit:
        """Rows of the version before, cut to `budget` forward positions, scored now under its weights `kept`."""
        cut, rows = cut_rows(batch, rows, budget)
        step = StepAudit(self.scorer, rows, cut.mask, on_policy=False)
        with step.timed():
            self.previous.load_state_dict(kept)
            if bool(rows.any()):
                trainer.show(self.previous, cut, torch.arange(cut.num_rows)[rows], step)
        step.seconds += snapshot_s
        return step
