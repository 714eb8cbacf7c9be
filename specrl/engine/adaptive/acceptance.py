"""How many drafts a drafter gets accepted, per draft position: the adaptive engine's acceptance estimates.

Drafts are prefix-consistent (asking for k tokens gives the first k of what the drafter proposes for k_max),
so one step at a long draft tells the accepted count of every shorter one. A row asked for k tokens expects
sum_{j<k} prod_{i<=j} alpha_i accepted drafts, alpha_i the conditional acceptance at position i. Counts only,
no clock, so measured and deterministic mode agree. An optimistic bonus (UCB) on every alpha makes a
little-seen drafter look better than its mean, so the schedule tries it where trying could pay.
"""
from __future__ import annotations

import math

from .constants import ACCEPT_DECAY, BONUS, MAX_ALPHA, PRIOR_ALPHA, PRIOR_ROWS

KEYS = ("reached", "accepted", "asked", "proposed")  # the counts, per draft position


class AcceptanceStats:
    """Decayed per-position counts of one drafter's drafts (or of one kind of them, e.g. full-length matches)."""

    def __init__(self, k_max: int):
        self.reached = [0.0] * k_max  # [k_max] rows that drafted position j with positions < j accepted
        self.accepted = [0.0] * k_max  # [k_max] ... whose draft at position j was accepted too
        self.asked = [0.0] * k_max  # [k_max] rows asked for >= j + 1 tokens
        self.proposed = [0.0] * k_max  # [k_max] ... that got >= j + 1 (a suffix drafter proposes only on a match)

    def add(self, asked: list[int], lengths: list[int], accepted: list[int]) -> None:
        """One step's rows of this drafter: tokens asked of it, proposed (<= asked) and accepted (<= proposed)."""
        if not asked:
            return
        for counts in (self.reached, self.accepted, self.asked, self.proposed):
            counts[:] = [ACCEPT_DECAY * v for v in counts]
        n = len(self.reached)
        for k, length, a in zip(asked, lengths, accepted):
            for j in range(min(k, a + 1, n)):  # positions 0..a reached (a < k), 0..k-1 when all accepted
                self.reached[j] += 1.0
                if j < a:
                    self.accepted[j] += 1.0
            for j in range(min(k, n)):
                self.asked[j] += 1.0
                if j < length:
                    self.proposed[j] += 1.0

    def full_share(self, k: int) -> float:
        """Share of rows asked for k tokens that got all k (a long suffix match); 0.5 before any was asked."""
        j = min(k, len(self.asked)) - 1
        return (self.proposed[j] + PRIOR_ROWS * 0.5) / (self.asked[j] + PRIOR_ROWS)

    @property
    def rows(self) -> float:
        """Rows observed (decayed): how much the estimate rests on."""
        return self.reached[0]

    def alphas(self, k: int, optimistic: bool = True):
        """Conditional acceptance of draft positions 0..k-1, each position's prior the estimate of the one before:
        a suffix match that held so far tends to hold on, unlike an untried drafter."""
        prior = PRIOR_ALPHA
        for j in range(min(k, len(self.reached))):
            prior = (self.accepted[j] + PRIOR_ROWS * prior) / (self.reached[j] + PRIOR_ROWS)
            bonus = BONUS / math.sqrt(self.reached[j] + 1.0) if optimistic else 0.0
            yield min(prior + bonus, MAX_ALPHA)

    def expected(self, k: int, optimistic: bool = True) -> float:
        """Expected accepted drafts of a row asked for k tokens."""
        total, run = 0.0, 1.0
        for a in self.alphas(k, optimistic):
            run *= a
            total += run
        return total

    @staticmethod
    def most(k: int) -> float:
        """The largest expectation `expected(k)` can give: every position at MAX_ALPHA, so it stays below k."""
        return MAX_ALPHA * (1.0 - MAX_ALPHA ** k) / (1.0 - MAX_ALPHA)

    def shrink(self, rows: float) -> None:
        """Scales every count so that the rows observed weigh at most `rows`, with the same estimates."""
        f = min(1.0, rows / max(self.reached[0], self.asked[0], 1e-9))
        for key in KEYS:
            getattr(self, key)[:] = [f * v for v in getattr(self, key)]

    def state_dict(self) -> dict:
        return {key: list(getattr(self, key)) for key in KEYS}

    def load_state_dict(self, s: dict) -> None:
        n = len(self.reached)
        for key in KEYS:
            setattr(self, key, ([float(v) for v in s[key]] + [0.0] * n)[:n])
