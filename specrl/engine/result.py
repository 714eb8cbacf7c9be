"""`StepResult`: what one engine step did, filled by engine/steps.py and read by the counters, the tracer and
the strategy, so none of them re-derives it."""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from .sequence import Sequence


@dataclass
class StepResult:
    phase: str  # "prefill", "decode" (SD off) or "spec" (one verify forward)
    seqs: list[Sequence]  # the sequences the forward ran, in row order
    tokens_in: int  # inputs of the target forward (all rows, drafts and padding included)
    emitted_tokens: int  # tokens appended to the sequences
    k: int = 0  # the longest draft asked for
    draft_tokens: int = 0
    accepted_tokens: int = 0
    draft_s: float = 0.0
    verify_s: float = 0.0  # the target forward, sampling and verification
    other_s: float = 0.0  # the rest of the step (scheduling, bookkeeping), filled by the engine
    context_len_mean: float = 0.0  # filled by the engine when a trace is written
    # per row of a spec step: the drafter whose drafts row b carried (None: none), the k asked of it, the
    # drafts proposed and accepted; and each drafter's propose time
    drafters: list[str | None] = field(default_factory=list)
    drafters_asked: list[str | None] = field(default_factory=list)  # asked for drafts (k > 0), proposing or not
    asked: list[int] = field(default_factory=list)
    lengths: list[int] = field(default_factory=list)
    accepted: list[int] = field(default_factory=list)
    draft_s_by: dict[str, float] = field(default_factory=dict)  # a deferred drafter's catch-up included
    plan: str = "off"  # the label of the strategy's plan (engine/strategy.py Plan.label)

    @property
    def active(self) -> int:
        return len(self.seqs)

    @property
    def total_s(self) -> float:
        return self.draft_s + self.verify_s + self.other_s

    def trace_row(self) -> dict:
        row = {"phase": self.phase, "active": self.active, "tokens_in": self.tokens_in, "k": self.k,
               "draft_tokens": self.draft_tokens, "accepted_tokens": self.accepted_tokens,
               "emitted_tokens": self.emitted_tokens, "draft_s": self.draft_s, "verify_s": self.verify_s,
               "other_s": self.other_s, "context_len_mean": self.context_len_mean}
        if len({d for d in self.drafters if d is not None}) > 1 or self.draft_s_by:
            row["mix"] = dict(Counter(d or "none" for d in self.drafters))  # rows per drafter ("none": no draft)
        return row
