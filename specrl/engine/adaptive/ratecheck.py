"""How far the cost model's predicted rate is off for each arm, read off the clock."""
from __future__ import annotations

import math

from ..constants import CHECK_DECAY


class RateCheck:
    """For one arm: a decayed mean of log(realised / predicted tokens per second) over the steps the arm ran,
    shrunk towards `prior` (log 1 = trust the model) while it has few steps. The predictions price the forward
    and the drafting from their fits and acceptance from the counts; what neither sees (a drafter's catch-up,
    merging drafts, per-token bookkeeping that grows with the draft, acceptance that differs between the rows
    an arm drafts for and those it was counted on) shows up here, from the step's own clock."""

    def __init__(self, total: float = 0.0, n: float = 0.0):
        self.sum, self.n = total, n

    def add(self, log_ratio: float) -> None:
        self.sum = CHECK_DECAY * self.sum + log_ratio
        self.n = CHECK_DECAY * self.n + 1.0

    def log_factor(self, prior: float = 0.0) -> float:
        return (self.sum + prior) / (self.n + 1.0)


class RateChecks:
    """A `RateCheck` per arm label, over all batch sizes and per octave of the batch size B."""

    def __init__(self):
        self.checks: dict[tuple, RateCheck] = {}  # (arm label,) and (arm label, octave of B) -> RateCheck

    def add(self, label: str, B: int, log_ratio: float) -> None:
        for key in ((label,), (label, B.bit_length())):
            self.checks.setdefault(key, RateCheck()).add(log_ratio)

    def factor(self, label: str, B: int) -> float:
        """Realised / predicted rate of arm `label` at B rows: its own at this octave of B, shrunk towards its
        figure at any B, shrunk towards 1."""
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
            c.sum, c.n = f * c.sum, f * c.n

    def state_dict(self) -> list:
        return [[list(key), c.sum, c.n] for key, c in self.checks.items()]

    def load_state_dict(self, state: list) -> None:
        self.checks = {tuple(key): RateCheck(float(total), float(n)) for key, total, n in state}
