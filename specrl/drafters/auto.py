"""The adaptive strategy ("auto"): per engine step, decide whether to speculate and how far.

Why: SD trades extra verify work for fewer sequential forwards. That pays while the target forward is
bound by reading weights (small batches), and stops paying once the batch alone fills the hardware:
ReSpec measures 1.46x at batch 2 but 0.76x (a slowdown) at batch 32, and TLT chooses the number of tokens to
verify by batch size and turns SD off above 32 active sequences. RL rollouts pass through both regimes in
every step: a full batch at the start, then a long tail of few long responses.

Policy (two pure functions below, applied every step):
1. batch: with n running sequences, SD is off (every proposal has length 0, which the engine runs as a
   plain decode step) when n > spec.auto_max_batch. Below it, k shrinks as the batch grows so that the
   verify forward stays near 2 * auto_max_batch tokens: k = clamp(2 * max_batch // n - 1, 1, k_max), with
   k_max = spec.num_speculative_tokens. With max_batch 32 and k_max 8: n <= 7 -> 8, n = 8 -> 7,
   n = 16 -> 3, n = 32 -> 1, n = 33 -> 0.
2. acceptance: a decayed average of the measured per-token acceptance rate a (accepted / drafted, from
   `observe`: a row with valid = v accepted v - 1 drafts) caps k at the expected accepted run plus one,
   ceil(a / (1 - a)) + 1, so a drafter that is rarely right drafts one token and keeps being measured.

It wraps the drafter named by spec.auto_methods[0] (composition): every target forward still reaches the
inner drafter's `observe`, so its state (suffix pools, draft KV caches) stays current while SD is off.
"""
from __future__ import annotations

import dataclasses
import math

from ..engine.drafting import Drafter, Proposal, TargetForward
from ..engine.methods import DRAFTING_METHODS, SpecConfig, build_drafter
from ..engine.sequence import Sequence
from .suffix.drafter import pad_drafts

RATE_DECAY = 0.8  # weight of the past in the acceptance average: about the last 5 speculative steps


def batch_k(num_running: int, k_max: int, max_batch: int) -> int:
    """Draft length for this batch size: 0 (SD off) above max_batch, else shrinking with the batch."""
    if num_running > max_batch:
        return 0
    return max(1, min(k_max, (2 * max_batch) // max(num_running, 1) - 1))


def acceptance_k(rate: float | None, k: int) -> int:
    """Caps k at the expected run of accepted drafts (per-token rate `rate`) plus one; None: no data yet."""
    if rate is None or k <= 0:
        return k
    if rate >= 1.0:
        return k
    return max(1, min(k, math.ceil(rate / (1.0 - rate)) + 1))


class AutoDrafter:
    def __init__(self, spec: SpecConfig, inner: Drafter, device="cpu"):
        self.spec, self.inner, self.device = spec, inner, device
        self.hidden_layers = tuple(inner.hidden_layers)
        self.drafted, self.accepted = 0.0, 0.0  # decayed sums over speculative steps
        self.last_k = 0  # the draft length chosen at the last step (0: SD off)
        self._pending: tuple[list[int], list[int]] | None = None  # (seq ids, draft lengths) awaiting verify

    @property
    def acceptance_rate(self) -> float | None:
        return self.accepted / self.drafted if self.drafted > 0 else None

    def propose(self, seqs: list[Sequence], k: list[int]) -> Proposal:
        k_step = batch_k(len(seqs), self.spec.num_speculative_tokens, self.spec.auto_max_batch)
        k_step = acceptance_k(self.acceptance_rate, k_step)
        self.last_k = k_step
        if k_step == 0:
            self._pending = None
            return pad_drafts([[] for _ in seqs], self.device)
        prop = self.inner.propose(seqs, [min(ki, k_step) for ki in k])
        self._pending = ([s.seq_id for s in seqs], prop.lengths.tolist())
        return prop

    def observe(self, fwd: TargetForward) -> None:
        self.inner.observe(fwd)
        if self._pending is None or self._pending[0] != [s.seq_id for s in fwd.seqs]:
            return  # a prefill forward, or a step without drafts
        lengths = self._pending[1]
        self._pending = None
        drafted = sum(lengths)
        if drafted == 0:
            return
        # a stop token can cut a row short of its accepted drafts: that only under-counts acceptance
        accepted = sum(min(max(v - 1, 0), n) for v, n in zip(fwd.valid.tolist(), lengths))
        self.drafted = RATE_DECAY * self.drafted + drafted
        self.accepted = RATE_DECAY * self.accepted + accepted

    def release(self, seq: Sequence) -> None:
        self.inner.release(seq)

    def state_dict(self) -> dict:
        """Its acceptance average (it picks k) and the inner drafter's state, when that has any."""
        inner = self.inner.state_dict() if hasattr(self.inner, "state_dict") else None
        return {"drafted": self.drafted, "accepted": self.accepted, "last_k": self.last_k, "inner": inner}

    def load_state_dict(self, state: dict) -> None:
        self.drafted, self.accepted, self.last_k = float(state["drafted"]), float(state["accepted"]), int(state["last_k"])
        if state["inner"] is not None:
            self.inner.load_state_dict(state["inner"])


def build(spec: SpecConfig, target, num_slots: int, max_len: int) -> AutoDrafter:
    name = spec.auto_methods[0] if spec.auto_methods else None
    valid = list(DRAFTING_METHODS)
    if name not in valid:
        raise ValueError(f"auto_methods[0]={name!r} is not a drafter auto can run; valid: {valid} "
                         "(e.g. SpecConfig(method='auto', auto_methods=('suffix',)))")
    inner = build_drafter(dataclasses.replace(spec, method=name), target, num_slots, max_len)
    return AutoDrafter(spec, inner, next(target.parameters()).device)
