"""`RowRates`: how the running rows accept each drafter's drafts against what the acceptance counts expect.

The counts pool every row over the last ~100 steps, but the rows still running in the long tail are the long
responses, which can accept a drafter's drafts well below the batch's average (docs/results/bench_adaptive.md,
"Runs 12 and 13"), so pooled counts overprice that drafter exactly where a step serves few rows. A plan scales a
drafter's expected acceptance by accepted over expected drafts, decayed per row, summed over the rows it will
serve and shrunk towards 1. Counts only, no clock, so deterministic mode stays a pure function of the seeds."""
from __future__ import annotations

from ..constants import ROW_DECAY, ROW_PRIOR_DRAFTS


class RowRates:
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
