"""How far the predictions are off: each arm's rate read off the clock against the cost model's (`RateChecks`),
and each running row's accepted drafts against the acceptance counts' (`RowRates`)."""
from __future__ import annotations

import math

from .constants import CHECK_DECAY, ROW_DECAY, ROW_PRIOR_DRAFTS


class RateCheck:
    """For one arm: realised over predicted tokens, each a decayed sum over the steps the arm ran, shrunk towards
    `prior` (log 1: trust the model) while it has few steps. It sees what the predictions do not (a catch-up,
    merging drafts, bookkeeping that grows with the draft, rows that accept unlike those counted). A ratio of
    sums, not a mean of log ratios: at a few rows a step's emitted tokens vary widely, and the mean log of a
    varying count sits below the log of its mean, which would underprice model-free drafters."""

    def __init__(self, real: float = 0.0, predicted: float = 0.0, n: float = 0.0):
        self.real, self.predicted, self.n = real, predicted, n

    def add(self, real_tokens: float, predicted_tokens: float) -> None:
        self.real = CHECK_DECAY * self.real + real_tokens
        self.predicted = CHECK_DECAY * self.predicted + predicted_tokens
        self.n = CHECK_DECAY * self.n + 1.0

    def log_factor(self, prior: float = 0.0) -> float:
        if self.real <= 0.0 or self.predicted <= 0.0:
            return prior
        return (self.n * math.log(self.real / self.predicted) + prior) / (self.n + 1.0)


class RateChecks:
    """A `RateCheck` per arm label, over all batch sizes and per octave of the batch size B."""

    def __init__(self):
        self.checks: dict[tuple, RateCheck] = {}  # (arm label,) and (arm label, octave of B) -> RateCheck

    def add(self, label: str, B: int, real_tokens: float, predicted_tokens: float) -> None:
        for key in ((label,), (label, B.bit_length())):
            self.checks.setdefault(key, RateCheck()).add(real_tokens, predicted_tokens)

    def factor(self, label: str, B: int) -> float:
        """Realised / predicted rate of arm `label` at B rows: its octave's, shrunk towards any B's, towards 1."""
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
            c.real, c.predicted, c.n = f * c.real, f * c.predicted, f * c.n

    def state_dict(self) -> list:
        return [[list(key), c.real, c.predicted, c.n] for key, c in self.checks.items()]

    def load_state_dict(self, state: list) -> None:
        """Rows [key, real, predicted, n]; a 3-long row (a mean of log ratios) is dropped: it carries that bias."""
        self.checks = {tuple(row[0]): RateCheck(*map(float, row[1:])) for row in state if len(row) == 4}


class RowRates:
    """The counts pool every row over the last ~100 steps, but the rows still running in the long tail are the
    long responses, which can accept a drafter's drafts well below the batch's average (docs/results/
    bench_adaptive.md, "The tail"), so pooled counts overprice that drafter exactly where a step serves few
    rows. A plan scales a drafter's expected acceptance by accepted over expected drafts, decayed per row, summed
    over the rows it will serve and shrunk towards 1. Counts only, no clock, so deterministic mode stays a pure
    function of the seeds."""

    def __init__(self):
        self.sums: dict[tuple[int, str], list[float]] = {}  # (seq_id, drafter) -> [accepted, expected]

    def add(self, seq_id: int, drafter: str, accepted: float, expected: float) -> None:
        s = self.sums.setdefault((seq_id, drafter), [0.0, 0.0])
        s[0], s[1] = ROW_DECAY * s[0] + accepted, ROW_DECAY * s[1] + expected

    def factor(self, seq_ids: list[int], drafter: str) -> float:
        """Accepted over expected drafts of `drafter` on these rows, shrunk towards 1 by ROW_PRIOR_DRAFTS."""
        accepted = expected = ROW_PRIOR_DRAFTS
        for i in seq_ids:
            s = self.sums.get((i, drafter))
            if s is not None:
                accepted, expected = accepted + s[0], expected + s[1]
        return accepted / expected

    def keep(self, seq_ids: list[int]) -> None:
        """Forgets the rows that are no longer running."""
        live = set(seq_ids)
        self.sums = {key: s for key, s in self.sums.items() if key[0] in live}
