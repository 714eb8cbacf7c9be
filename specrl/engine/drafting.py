"""The interface between the engine and a drafter, and the `Plan` a strategy hands the engine each step. The
engine owns the target; a drafter owns its own state (caches, suffix trees) keyed by the sequence's cache slot.
A plan is bookkeeping only: it names who drafts how many tokens for which rows, and the engine's run makes every
proposal (engine/steps.py)."""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable, Iterator, NamedTuple, Protocol, runtime_checkable

import torch

from .sequence import Sequence


class Proposal(NamedTuple):
    tokens: torch.Tensor  # [B, K] long, padded past each length
    lengths: torch.Tensor  # [B] long, <= the k asked for
    probs: torch.Tensor | None  # [B, K, V] draft distributions q, or None for point drafts (q = one-hot)


class TargetForward(NamedTuple):
    """What the target computed in one forward, after acceptance. Row b's first `valid[b]` inputs are now
    part of the sequence and `next_tokens[b, t]` is the token that follows input t."""
    seqs: list[Sequence]
    positions: torch.Tensor  # [B, T]
    next_tokens: torch.Tensor  # [B, T]
    valid: torch.Tensor  # [B]
    hidden: tuple[torch.Tensor, ...]  # the target layers the drafter asked for, each [B, T, D]
    last_hidden: torch.Tensor  # final normed hidden state [B, T, D]


class Drafter(Protocol):
    hidden_layers: tuple[int, ...]  # target layers whose outputs `observe` needs; () when none

    def observe(self, fwd: TargetForward) -> None:
        """Called after every target forward (prefill and verify) with the accepted part."""

    def propose(self, seqs: list[Sequence], k: list[int]) -> Proposal:
        """Up to k[b] draft tokens that continue seqs[b].tokens, on any device (the engine moves them)."""

    def release(self, seq: Sequence) -> None:
        """The sequence finished; its slot will be reused."""


@runtime_checkable
class Stateful(Protocol):
    """A part whose state outlives generate() calls (suffix pools, drafter weights trained online, the adaptive
    strategy's counts): a tree of tensors, numbers, strings, lists and dicts (specrl.state_files, no pickle)."""

    def state_dict(self) -> dict: ...

    def load_state_dict(self, state: dict) -> None: ...


@runtime_checkable
class HoldsCaches(Protocol):
    """A drafter with KV caches of its own, whose pages the engine gives back between generate() calls."""

    def caches(self) -> list[tuple[torch.Tensor, torch.Tensor]]: ...


@runtime_checkable
class CatchesUp(Protocol):
    """A drafter that observes late (engine/pool.py `Deferred`): before it drafts, the engine has it catch up on
    what it has not yet observed, and times that apart, since the adaptive engine prices a catch-up apart."""

    def catch_up(self) -> int:
        """Observes what waits; returns how many inputs that was."""


def caches_of(drafter) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """`drafter`'s KV caches if it declares `HoldsCaches`, else none."""
    return drafter.caches() if isinstance(drafter, HoldsCaches) else []


def on_device(prop: Proposal, device) -> Proposal:
    """`prop` on `device` (no copy for tensors already there): a plugged-in drafter may draft on the CPU."""
    return Proposal(prop.tokens.to(device), prop.lengths.to(device),
                    None if prop.probs is None else prop.probs.to(device))


def greedy_proposal(seqs: list[Sequence], k: list[int], device,
                    drafts: Callable[[torch.Tensor, int], Iterator[torch.Tensor]]) -> Proposal:
    """Point drafts of lengths k from a model drafter's greedy decoding: `drafts(slots [B], K)` yields draft
    tokens 1..K [B] in order, K = max k (not called when K is 0)."""
    K = max(k, default=0)
    tokens = torch.zeros(len(k), K, dtype=torch.long, device=device)  # [B, K]
    if K:
        slots = torch.tensor([s.slot for s in seqs], device=device)  # [B]
        for j, tok in enumerate(drafts(slots, K)):
            tokens[:, j] = tok
    return Proposal(tokens, torch.tensor(k, dtype=torch.long, device=device), None)


def pad_proposals(drafts: list[list[int]], device) -> Proposal:
    """Point drafts padded to the longest, moved in one copy each (a copy per row costs more than padding)."""
    K = max((len(d) for d in drafts), default=0)
    tokens = torch.tensor([d + [0] * (K - len(d)) for d in drafts], dtype=torch.long).view(len(drafts), K)  # [B, K]
    lengths = torch.tensor([len(d) for d in drafts], dtype=torch.long)  # [B]
    return Proposal(tokens.to(device), lengths.to(device), None)


class Shadow(NamedTuple):
    """Drafts made for a few rows only to be scored against what the rows then emit, never verified (the adaptive
    engine learns a model-free drafter's acceptance this way without spending steps on it)."""
    drafter: str
    rows: list[int]  # rows of the step, by index into its running sequences
    k: int


@dataclass
class Plan:
    """A strategy's decision for one step: for each running sequence, which drafter drafts how many tokens.
    With a `lead`, the plan is a hybrid: the lead proposes for every row first, a row keeps the lead's draft
    when it is full-length, and `drafters[b]` drafts for the others (who drafts a row depends on the lead's
    proposal, so the engine's run decides it by this rule)."""
    drafters: list[str | None]  # per running sequence: the drafter that drafts for it (None: no draft)
    k: list[int]  # per running sequence: how many tokens to ask for
    lead: str | None = None  # a hybrid's model-free drafter whose full-length proposals go first
    shadows: list[Shadow] = field(default_factory=list)  # drafts to score only, made by the run as well
    label: str = "off"  # what the strategy chose, for the engine's record of choices (e.g. "suffix+eagle3@4")

    @classmethod
    def off(cls, n: int, shadows: list[Shadow] | None = None) -> "Plan":
        """No draft for any of `n` rows (the drafters still observe the forward)."""
        return cls([None] * n, [0] * n, shadows=list(shadows or []))

    def capped(self, seqs: list[Sequence]) -> "Plan":
        """k cut to what each sequence may still emit (0 without a drafter)."""
        return replace(self, k=[budget_cap(k, s) if w is not None else 0
                                for w, k, s in zip(self.drafters, self.k, seqs)])


def budget_cap(k: int, seq: Sequence) -> int:
    """Never more drafts than the sequence may still emit minus the bonus token."""
    return max(0, min(k, seq.budget - 1))
