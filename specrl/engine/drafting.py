"""The interface between the engine and a drafter. The engine owns the target; a drafter owns its own
state (caches, suffix trees) keyed by the sequence's cache slot."""
from __future__ import annotations

from typing import NamedTuple, Protocol

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
        """Up to k[b] draft tokens that continue seqs[b].tokens, on any device (the engine moves them to
        the target's)."""

    def release(self, seq: Sequence) -> None:
        """The sequence finished; its slot will be reused."""


class StatefulDrafter(Drafter, Protocol):
    """A drafter whose cross-step state outlives generate() calls (suffix pools of earlier rollouts, drafter
    weights trained online). The state is a tree of tensors, numbers, strings, lists and dicts: checkpoints
    store it as safetensors + JSON (specrl.state_files), never as a pickle."""

    def state_dict(self) -> dict: ...

    def load_state_dict(self, state: dict) -> None: ...


def has_state(drafter) -> bool:
    return drafter is not None and callable(getattr(drafter, "state_dict", None))


def unwrap(drafter):
    """The model drafter behind a `DrafterPool` (its `inner`, e.g. the EAGLE-3 drafter "auto" holds beside
    the model-free ones); any other drafter is itself."""
    return getattr(drafter, "inner", None) or drafter


class DrafterPool:
    """The drafters one engine holds, by name. Every one observes every target forward (prefill and verify),
    drafting that step or not, so switching a sequence from one drafter to another needs no re-prefill; the
    engine's strategy picks which of them drafts for which sequence. Its state (for checkpoints) is each
    stateful drafter's plus the strategy's learned state (`strategy`, attached by the engine)."""

    def __init__(self, drafters: dict[str, Drafter], model_based: tuple[str, ...] = ()):
        if not drafters:
            raise ValueError("a DrafterPool needs at least one drafter")
        self.drafters = dict(drafters)
        self.model_based = tuple(n for n in model_based if n in self.drafters)
        layers = sorted({i for d in self.drafters.values() for i in d.hidden_layers})
        self.hidden_layers = tuple(layers)
        kept = [i for i in layers if i >= 0]  # the target returns the non-negative layers, in order
        self._pick = {n: [kept.index(i) for i in sorted(j for j in d.hidden_layers if j >= 0)]
                      for n, d in self.drafters.items()}
        self.strategy = None
        self.deferred: dict = {}  # drafter name -> DeferredObservations: those that observe on demand (defer())

    @property
    def inner(self):
        """The model drafter (hot swaps and online training act on it); None when all are model-free."""
        return self.drafters[self.model_based[0]] if self.model_based else None

    def defer(self, names) -> None:
        """Drafters `names` observe on demand: their forwards wait (engine/deferred.py) until `catch_up`,
        which the engine calls before asking one of them to draft. Only a drafter that says its observe is
        position-local (`deferrable`) defers; MTP's modules read the next inputs, so it observes every step."""
        from .deferred import DeferredObservations
        self.deferred = {n: DeferredObservations() for n in names
                         if n in self.drafters and getattr(self.drafters[n], "deferrable", False)}

    def observe(self, fwd: TargetForward) -> None:
        for name, d in self.drafters.items():
            mine = fwd._replace(hidden=tuple(fwd.hidden[i] for i in self._pick[name]))
            wait = self.deferred.get(name)
            if wait is None:
                d.observe(mine)
                continue
            wait.add(mine)
            if wait.full:
                self.catch_up(name)

    def catch_up(self, name: str) -> int:
        """Drafter `name` observes what it deferred, so its state is as if it had observed every forward.
        Returns the inputs it caught up on."""
        wait, inputs = self.deferred.get(name), 0
        if wait is not None:
            for fwd in wait.forwards():
                self.drafters[name].observe(fwd)
                inputs += int(fwd.valid.sum())
        return inputs

    def release(self, seq: Sequence) -> None:
        for d in self.drafters.values():
            d.release(seq)
        for wait in self.deferred.values():
            wait.release(seq)

    def state_dict(self) -> dict:
        return {"drafters": {n: d.state_dict() for n, d in self.drafters.items() if has_state(d)},
                "strategy": self.strategy.state_dict() if has_state(self.strategy) else None}

    def load_state_dict(self, state: dict) -> None:
        for n, sub in state["drafters"].items():
            if n in self.drafters and has_state(self.drafters[n]):
                self.drafters[n].load_state_dict(sub)
        if state.get("strategy") is not None and has_state(self.strategy):
            self.strategy.load_state_dict(state["strategy"])


def on_device(prop: Proposal, device) -> Proposal:
    """`prop` on `device` (no copy for tensors already there): a plugged-in drafter may draft on the CPU."""
    return Proposal(prop.tokens.to(device), prop.lengths.to(device),
                    None if prop.probs is None else prop.probs.to(device))


def blank_proposal(k: list[int], device) -> Proposal:
    """Point drafts to fill in: zero tokens [B, max k] and lengths k. Model drafters write `tokens` in place."""
    K = max(k, default=0)
    return Proposal(torch.zeros(len(k), K, dtype=torch.long, device=device),
                    torch.tensor(k, dtype=torch.long, device=device), None)


def pad_proposals(drafts: list[list[int]], device) -> Proposal:
    K = max((len(d) for d in drafts), default=0)
    tokens = torch.tensor([d + [0] * (K - len(d)) for d in drafts], dtype=torch.long).view(len(drafts), K)
    lengths = torch.tensor([len(d) for d in drafts], dtype=torch.long)
    return Proposal(tokens.to(device), lengths.to(device), None)
