"""Strategies decide, for each running sequence, which drafter drafts how many tokens (0: none). `StaticStrategy`
is one drafter at one k for every sequence; the adaptive one ("auto") is in engine/adaptive/."""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable

from .drafting import Proposal
from .pool import DrafterPool
from .result import StepResult
from .sequence import Sequence


@dataclass
class Plan:
    drafters: list[str | None]  # per running sequence: the drafter that drafts for it (None: no draft)
    k: list[int]  # per running sequence: how many tokens to ask for
    ready: dict[str, Proposal] = field(default_factory=dict)  # proposals already made while scheduling (all rows)
    draft_s: float = 0.0  # seconds the schedule spent drafting (those proposals)
    label: str = "off"  # what the strategy chose, for the engine's record of choices (e.g. "suffix+eagle3@4")

    def capped(self, seqs: list[Sequence]) -> "Plan":
        """k cut to what each sequence may still emit (0 without a drafter)."""
        return replace(self, k=[budget_cap(k, s) if w is not None else 0
                                for w, k, s in zip(self.drafters, self.k, seqs)])


def budget_cap(k: int, seq: Sequence) -> int:
    """Never more drafts than the sequence may still emit minus the bonus token."""
    return max(0, min(k, seq.budget - 1))


class Strategy:
    def schedule(self, seqs: list[Sequence], pool: DrafterPool) -> Plan | None:
        raise NotImplementedError

    def update(self, result: StepResult) -> None:
        """Called with every step's result (prefill ones too), after the counters."""

    def calibrate(self, time_forward: Callable[[int, int], float], max_batch: int) -> None:
        """Called once, before any sequence holds a slot: `time_forward(B, T)` times a target forward."""


class StaticStrategy(Strategy):
    """Drafter `name` drafts `k` tokens for every sequence, every step."""

    def __init__(self, name: str, k: int):
        self.name, self.k = name, k

    def schedule(self, seqs: list[Sequence], pool: DrafterPool) -> Plan:
        return Plan([self.name] * len(seqs), [self.k] * len(seqs), label=f"{self.name}@{self.k}")
