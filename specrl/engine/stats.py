"""Counters the engine keeps across generate() calls, and the per-step trace."""
from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import dataclass, field

from .methods import MAX_SPEC_TOKENS
from .sequence import StepResult


@dataclass
class EngineStats:
    generated_tokens: int = 0
    prefill_tokens: int = 0
    target_forwards: int = 0
    seq_forwards: int = 0  # sum over decode/verify forwards of the sequences in them
    decode_tokens: int = 0  # tokens emitted by decode/verify forwards
    draft_tokens: int = 0
    accepted_tokens: int = 0
    drafted_at: list[int] = field(default_factory=lambda: [0] * MAX_SPEC_TOKENS)
    accepted_at: list[int] = field(default_factory=lambda: [0] * MAX_SPEC_TOKENS)
    prefill_s: float = 0.0
    draft_s: float = 0.0
    verify_s: float = 0.0
    other_s: float = 0.0

    def add(self, r: "StepResult") -> None:
        """Counts one engine step."""
        self.target_forwards += 1
        self.generated_tokens += r.emitted_tokens
        if r.phase == "prefill":
            self.prefill_tokens += r.tokens_in
            self.prefill_s += r.verify_s
            return
        self.decode_tokens += r.emitted_tokens
        self.seq_forwards += r.active
        self.draft_tokens += r.draft_tokens
        self.accepted_tokens += r.accepted_tokens
        for length, acc in zip(r.lengths, r.accepted):
            for i in range(length):
                self.drafted_at[i] += 1
                self.accepted_at[i] += i < acc
        self.draft_s += r.draft_s
        self.verify_s += r.verify_s
        self.other_s += r.other_s

    def as_dict(self) -> dict:
        d = {k: v for k, v in self.__dict__.items() if not isinstance(v, list)}
        d["acceptance_length"] = self.decode_tokens / max(self.seq_forwards, 1)
        d["acceptance_rate"] = self.accepted_tokens / max(self.draft_tokens, 1)
        n = max((i + 1 for i, c in enumerate(self.drafted_at) if c), default=0)
        d["acceptance_rate_per_pos"] = [a / max(c, 1) for a, c in zip(self.accepted_at[:n], self.drafted_at[:n])]
        d["total_s"] = self.prefill_s + self.draft_s + self.verify_s + self.other_s
        return d


class Choices:
    """Which drafter the strategy chose for how many rows, over the steps (`specrl bench adaptive` reports it)."""

    def __init__(self):
        self.rows: Counter[str] = Counter()  # rows per drafter ("none": no draft), and "k_sum": the drafts asked
        self.history: list[dict] | None = None  # set to [] to log every step's choice

    def add(self, r: StepResult) -> None:
        if r.phase == "prefill":
            return
        mix = dict(Counter(d or "none" for d in r.drafters_asked or [None] * r.active))
        self.rows.update(mix)
        self.rows["k_sum"] += sum(r.asked)
        if self.history is not None:
            drafted = [k for k in r.asked if k > 0]
            self.history.append({"running": r.active, "mix": mix, "mean_k": sum(drafted) / max(len(drafted), 1),
                                 "arm": r.plan})

    def reset(self) -> None:
        """Counts afresh (logging stays on or off); what the strategy has learnt is not touched."""
        self.rows = Counter()
        self.history = None if self.history is None else []


class Tracer:
    """Appends one JSON row per engine step (the simulator fits on these)."""

    def __init__(self, path: str | None, method: str | None, model_params: int):
        self.file = open(path, "a") if path else None
        self.method, self.model_params = method, model_params
        self.tags: dict = {}  # merged into every row, e.g. {"rl_step": 3} from the training pipeline
        self.step = 0
        self.t0 = time.perf_counter()

    def record(self, **row) -> None:
        if self.file is None:
            return
        row = {"step": self.step, "t": time.perf_counter() - self.t0, "method": self.method,
               "model_params": self.model_params, **self.tags, **row}
        self.file.write(json.dumps(row) + "\n")
        self.step += 1

    def close(self) -> None:
        if self.file:
            self.file.flush()
