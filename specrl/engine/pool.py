"""`DrafterPool`: the drafters one engine holds, by name, seen by the engine as one observer."""
from __future__ import annotations

from .deferred import Deferred
from .drafting import Drafter, Stateful, TargetForward, caches_of
from .sequence import Sequence


class DrafterPool:
    """Every drafter observes every target forward, drafting that step or not, so switching a sequence to
    another drafter needs no re-prefill. Its state (for checkpoints) is each stateful drafter's plus that of
    the `strategy` the engine attaches."""

    def __init__(self, drafters: dict[str, Drafter], model_based: tuple[str, ...] = ()):
        if not drafters:
            raise ValueError("a DrafterPool needs at least one drafter")
        self.drafters = dict(drafters)
        self.model_based = tuple(n for n in model_based if n in self.drafters)
        self.hidden_layers = tuple(sorted({i for d in self.drafters.values() for i in d.hidden_layers}))
        kept = [i for i in self.hidden_layers if i >= 0]  # the target returns the non-negative layers, in order
        self._pick = {n: [kept.index(i) for i in sorted(j for j in d.hidden_layers if j >= 0)]
                      for n, d in self.drafters.items()}
        self.strategy = None

    @property
    def inner(self):
        """The model drafter itself (hot swaps and online training act on it); None when all are model-free."""
        return unwrap(self.drafters[self.model_based[0]]) if self.model_based else None

    def observe(self, fwd: TargetForward) -> None:
        for name, d in self.drafters.items():
            d.observe(fwd._replace(hidden=tuple(fwd.hidden[i] for i in self._pick[name])))

    def release(self, seq: Sequence) -> None:
        for d in self.drafters.values():
            d.release(seq)

    def caches(self) -> list:
        """Every drafter's KV caches (a plugged-in one's too, model-based by its table row or not)."""
        return [c for d in self.drafters.values() for c in caches_of(d)]

    def state_dict(self) -> dict:
        return {"drafters": {n: d.state_dict() for n, d in self.drafters.items() if isinstance(d, Stateful)},
                "strategy": self.strategy.state_dict() if isinstance(self.strategy, Stateful) else None}

    def load_state_dict(self, state: dict) -> None:
        for n, sub in state["drafters"].items():
            if n in self.drafters and isinstance(self.drafters[n], Stateful):
                self.drafters[n].load_state_dict(sub)
        if state.get("strategy") is not None and isinstance(self.strategy, Stateful):
            self.strategy.load_state_dict(state["strategy"])


def unwrap(drafter):
    """The model drafter behind a `DrafterPool` or a `Deferred`; any other drafter is itself."""
    return drafter.inner if isinstance(drafter, (DrafterPool, Deferred)) else drafter
