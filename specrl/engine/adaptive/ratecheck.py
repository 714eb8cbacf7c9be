"""How far the cost model's predicted step seconds are off for each arm, read off the clock."""
from __future__ import annotations

import math

from ..constants import CHECK_DECAY

FORM = "seconds"  # what a saved check compares; checks saved in another form are dropped on load


class RateCheck:
    """For one arm: the seconds its steps were predicted to take over those they took, each a decayed sum over
    the steps the arm ran, shrunk towards `prior` (log 1 = trust the model) while it has few steps. The
    prediction prices the work a step actually did (its target inputs, the drafts asked of each drafter, the
    catch-ups) from the fits, so what the fits do not see (merging drafts, bookkeeping that grows with the draft,
    a misfit at this arm's shape) shows up here. Acceptance is left to the counts: they correct themselves as
    the arm drafts, whereas a check that compared tokens would keep the error of the acceptance estimate an arm
    was first tried under until it ran again, and a penalised arm does not run again. A ratio of sums, not a
    mean of per-step log ratios: the mean log of a varying quantity sits below the log of its mean."""

    def __init__(self, predicted: float = 0.0, real: float = 0.0, n: float = 0.0):
        self.predicted, self.real, self.n = predicted, real, n

    def add(self, predicted_s: float, real_s: float) -> None:
        self.predicted = CHECK_DECAY * self.predicted + predicted_s
        self.real = CHECK_DECAY * self.real + real_s
        self.n = CHECK_DECAY * self.n + 1.0

    def log_factor(self, prior: float = 0.0) -> float:
        if self.real <= 0.0 or self.predicted <= 0.0:
            return prior
        return (self.n * math.log(self.predicted / self.real) + prior) / (self.n + 1.0)


class RateChecks:
    """A `RateCheck` per arm label, over all batch sizes and per octave of the batch size B."""

    def __init__(self):
        self.checks: dict[tuple, RateCheck] = {}  # (arm label,) and (arm label, octave of B) -> RateCheck

    def add(self, label: str, B: int, predicted_s: float, real_s: float) -> None:
        for key in ((label,), (label, B.bit_length())):
            self.checks.setdefault(key, RateCheck()).add(predicted_s, real_s)

    def factor(self, label: str, B: int) -> float:
        """Realised / predicted rate of arm `label` at B rows (predicted / realised seconds for the same work):
        its own at this octave of B, shrunk towards its figure at any B, shrunk towards 1."""
        overall = self.checks.get((label,))
        if overall is None:
            return 1.0
        prior = overall.log_factor()
        here = self.checks.get((label, B.bit_length()))
        return math.exp(here.log_factor(prior) if here is not None else prior)

    def shrink(self, steps: float) -> None:
        """Each check weighs at most `steps` steps, with the same mean (a saved profile's, as a prior)."""
        for c in self.checks.values():
            f = min(1.0, steps / max(c.n, 1e-9))
            c.predicted, c.real, c.n = f * c.predicted, f * c.real, f * c.n

    def state_dict(self) -> dict:
        return {"form": FORM, "rows": [[list(key), c.predicted, c.real, c.n] for key, c in self.checks.items()]}

    def load_state_dict(self, state: dict | list) -> None:
        """Checks saved in this form; those saved as lists (tokens realised against predicted, which carry the
        acceptance estimate of the plan that ran them) are dropped."""
        rows = state.get("rows", []) if isinstance(state, dict) and state.get("form") == FORM else []
        self.checks = {tuple(row[0]): RateCheck(*map(float, row[1:])) for row in rows}
