"""What the adaptive engine chooses among (`Arm`s) and what its acceptance counts are keyed by: a
(drafter, kind) tuple."""
from __future__ import annotations

from dataclasses import dataclass

from .constants import ARM_KS

# the rows a drafter's acceptance counts cover: all it drafted for (ALL); a model-free drafter's full-length
# proposals (FULL); a model drafter filling in a hybrid's rows, harder than a row at random (FILL)
ALL, FULL, FILL = "all", "full", "fill"
OLD_KEYS = {"*": FULL, "~": FILL}  # checkpoints keyed by strings, "suffix*" and "eagle3~" (converted on load)


@dataclass(frozen=True)
class Arm:
    drafter: str | None  # who drafts (None: nobody; in a hybrid, the model drafter that fills in)
    k: int = 0
    lead: str | None = None  # hybrid: the model-free drafter whose full-length proposals go first

    @property
    def label(self) -> str:
        if self.drafter is None:
            return "off"
        return f"{self.lead}+{self.drafter}@{self.k}" if self.lead else f"{self.drafter}@{self.k}"

    @property
    def reads(self) -> tuple[tuple[str, str], ...]:
        """The acceptance counts that this arm's rows are counted in."""
        if self.drafter is None:
            return ()
        return ((self.drafter, ALL),) if self.lead is None else ((self.lead, ALL), (self.drafter, FILL))


OFF = Arm(None)


def arm_grid(names: list[str], point: set[str], k_max: int) -> list[Arm]:
    """No draft; each drafter alone at each draft length; each (model-free lead, model drafter) hybrid."""
    model = [n for n in names if n not in point]
    ks = sorted({k_max, *(k for k in ARM_KS if k <= k_max)})
    return [OFF] + [Arm(n, k) for n in names for k in ks] + \
        [Arm(m, k, s) for m in model for s in names if s in point for k in ks]


def count_keys(names: list[str], point: set[str]) -> list[tuple[str, str]]:
    """Every (drafter, kind) counted: ALL for each, FULL for model-free ones, FILL for model ones beside a lead."""
    model = [n for n in names if n not in point]
    return [(n, ALL) for n in names] + [(n, FULL) for n in names if n in point] + \
        ([(m, FILL) for m in model] if point else [])


def tally(rows: dict, keys, asked: int, proposed: int, accepted: int) -> None:
    """One row's (asked, proposed, accepted) into `rows[key]` (three lists) for each key."""
    for key in keys:
        for lst, v in zip(rows.setdefault(key, [[], [], []]), (asked, proposed, accepted)):
            lst.append(v)
