"""The drafters one engine holds and who plans over them: the `DrafterPool` (seen by the engine as one drafter),
`Deferred` (a model drafter that observes late: only "auto" builds one, but `unwrap` sees through it), the
`Strategy` interface and `StaticStrategy` (one drafter at one k for every sequence; the adaptive one, "auto", is
in engine/adaptive/); and what the engine drafts with: `build_engine_drafting` (for `LLM`), `static_drafting` (what
each drafting method builds)."""
from __future__ import annotations

from typing import Callable

import torch

from .drafting import Drafter, Plan, Proposal, Stateful, TargetForward, caches_of
from .methods import DrafterMethod, SpecConfig, build_drafter, get_method
from .sequence import Sequence, Status, StepResult

# deferred observation (`Deferred`)
CHUNK = 128  # inputs per sequence per catch-up forward: bounds its attention memory
MAX_PENDING = 200_000  # pending inputs (all sequences) before a catch-up is forced: bounds the memory held


class DrafterPool:
    """Every drafter observes every target forward, drafting that step or not, so switching a sequence to
    another drafter needs no re-prefill. Its state (for checkpoints) is each stateful drafter's; the strategy
    that plans over it keeps its own (the engine's, `LLM.drafter_state` joins them)."""

    def __init__(self, drafters: dict[str, Drafter], model_based: tuple[str, ...] = ()):
        if not drafters:
            raise ValueError("a DrafterPool needs at least one drafter")
        self.drafters = dict(drafters)
        self.model_based = tuple(n for n in model_based if n in self.drafters)
        self.hidden_layers = tuple(sorted({i for d in self.drafters.values() for i in d.hidden_layers}))
        kept = [i for i in self.hidden_layers if i >= 0]  # the target returns the non-negative layers, in order
        self._pick = {n: [kept.index(i) for i in sorted(j for j in d.hidden_layers if j >= 0)]
                      for n, d in self.drafters.items()}

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
        return {"drafters": {n: d.state_dict() for n, d in self.drafters.items() if isinstance(d, Stateful)}}

    def load_state_dict(self, state: dict) -> None:
        for n, sub in state["drafters"].items():
            if n in self.drafters and isinstance(self.drafters[n], Stateful):
                self.drafters[n].load_state_dict(sub)


def unwrap(drafter):
    """The model drafter behind a `DrafterPool` or a `Deferred`; any other drafter is itself."""
    return drafter.inner if isinstance(drafter, (DrafterPool, Deferred)) else drafter


class Deferred:
    """A model drafter that is not drafting catches up on the target's forwards only when
    it is next asked to draft, in a few batched forwards instead of one per engine step. `Deferred` wraps such a
    drafter and is itself a `Drafter`: its `observe` buffers, its `propose` catches up first (the engine calls
    `catch_up` itself just before, to time it: the cost model prices a catch-up apart from drafting).

    Why: keeping its cache current costs a model drafter a fraction of a target forward every step, and the
    adaptive engine often leaves it idle. The state stays exact: a sequence's accepted inputs are contiguous
    positions, so its pending ones form one longer causal forward that writes the same cache rows (a row shorter
    than the chunk repeats its last input, rewriting the same entry with the same values).

    Which drafters may defer is their method's `defers`: one whose observe is position-local."""

    def __init__(self, inner: Drafter):
        self.inner, self.hidden_layers = inner, inner.hidden_layers
        # per deferred forward: its rows, their valid inputs, and the accepted inputs compacted to [N, ...]
        self.steps: list[tuple[list[Sequence], list[int], tuple[torch.Tensor, ...]]] = []
        self.pending = 0  # inputs held
        self.live: set[int] = set()  # seq_ids with pending inputs that have not finished

    def observe(self, fwd: TargetForward) -> None:
        valid = fwd.valid.tolist()
        if any(valid):
            T = fwd.positions.shape[1]
            keep = torch.arange(T, device=fwd.valid.device)[None, :] < fwd.valid[:, None]  # [B, T]
            last = fwd.last_hidden
            if last.shape[1] != T:  # a prefill's final hidden of the last input only: no drafter that defers reads
                # it (one that does asks for the full one with hidden layer -1), so zeros stand in
                last = last.new_zeros(last.shape[0], T, last.shape[2])  # [B, T, D]
            flat = (fwd.positions.expand_as(keep)[keep], fwd.next_tokens[keep],  # [N], [N]
                    *(h[keep] for h in fwd.hidden), last[keep])  # [N, D] each
            self.steps.append((list(fwd.seqs), valid, flat))
            self.pending += sum(valid)
            self.live.update(s.seq_id for s in fwd.seqs)
        if self.pending >= MAX_PENDING:
            self.catch_up()

    def forwards(self) -> list[TargetForward]:
        """The running sequences' pending inputs as TargetForwards of <= CHUNK inputs a row; empties the buffer."""
        order: dict[int, Sequence] = {}
        index: dict[int, list[int]] = {}  # seq_id -> rows of the concatenated steps, in position order
        offset = 0
        for seqs, valid, _ in self.steps:
            for s, v in zip(seqs, valid):
                if s.status is not Status.FINISHED:
                    order.setdefault(s.seq_id, s)
                    index.setdefault(s.seq_id, []).extend(range(offset, offset + v))
                offset += v
        flat = [torch.cat(parts) for parts in zip(*(f for _, _, f in self.steps))]
        n_hidden = len(flat) - 3
        self.steps, self.pending, self.live = [], 0, set()
        out = []
        longest = max((len(v) for v in index.values()), default=0)
        for start in range(0, longest, CHUNK):
            ids = [i for i in index if len(index[i]) > start]
            rows = [index[i][start:start + CHUNK] for i in ids]
            T = max(len(r) for r in rows)
            pick = torch.tensor([r + [r[-1]] * (T - len(r)) for r in rows], device=flat[0].device)  # [B, T]
            valid = torch.tensor([len(r) for r in rows], device=flat[0].device)  # [B]
            out.append(TargetForward([order[i] for i in ids], flat[0][pick], flat[1][pick], valid,
                                     tuple(flat[2 + j][pick] for j in range(n_hidden)), flat[-1][pick]))
        return out

    def catch_up(self) -> int:
        """`inner` observes what waits, so its state is as if it had observed every forward; returns the inputs."""
        inputs = 0
        for fwd in self.forwards():
            self.inner.observe(fwd)
            inputs += int(fwd.valid.sum())
        return inputs

    def propose(self, seqs: list[Sequence], k: list[int]) -> Proposal:
        self.catch_up()
        return self.inner.propose(seqs, k)

    def release(self, seq: Sequence) -> None:
        """`seq` finished: once no pending sequence is left, nothing held would be read again."""
        self.inner.release(seq)
        self.live.discard(seq.seq_id)
        if not self.live:
            self.steps, self.pending = [], 0

    def caches(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        return caches_of(self.inner)


class Strategy:
    """Decides, for each running sequence, which drafter drafts how many tokens (0: none): bookkeeping only, the
    engine's run makes the proposals. It learns from each step's `StepResult` alone."""

    def schedule(self, seqs: list[Sequence]) -> Plan | None:
        """The plan for the next step over `seqs` (None: no draft)."""
        raise NotImplementedError

    def update(self, result: StepResult) -> None:
        """Called with every step's result (prefill ones too), after the counters."""

    def calibrate(self, time_forward: Callable[[int, int, int], float], max_batch: int, model=None,
                  max_len: int = 0) -> None:
        """Called once, before any sequence holds a slot: `time_forward(B, T, C)` times a forward of `model` of B
        rows x T tokens after C cached ones (C + T <= max_len)."""


class StaticStrategy(Strategy):
    """Drafter `name` drafts `k` tokens for every sequence, every step."""

    def __init__(self, name: str, k: int):
        self.name, self.k = name, k

    def schedule(self, seqs: list[Sequence]) -> Plan:
        return Plan([self.name] * len(seqs), [self.k] * len(seqs), label=f"{self.name}@{self.k}")


def static_drafting(method: DrafterMethod, spec: SpecConfig, target, num_slots: int, max_len: int):
    """A drafting method's engine drafting: its one drafter, `spec.num_speculative_tokens` drafts every step."""
    pool = DrafterPool({method.name: build_drafter(spec, target, num_slots, max_len)},
                       (method.name,) if method.trainable else ())
    return pool, StaticStrategy(method.name, spec.num_speculative_tokens)


def build_engine_drafting(spec: SpecConfig, drafter, target, num_slots: int, max_len: int):
    """The engine's (DrafterPool, Strategy) for `spec`, or for a plugged-in `drafter` (it drafts
    spec.num_speculative_tokens tokens every step; a DrafterPool is used as it is); (None, None) with SD off."""
    if isinstance(drafter, DrafterPool):
        return drafter, StaticStrategy(next(iter(drafter.drafters)), spec.num_speculative_tokens)
    if drafter is not None:
        return DrafterPool({"custom": drafter}), StaticStrategy("custom", spec.num_speculative_tokens)
    if not spec.enabled:
        return None, None
    return get_method(spec.method).engine_drafting(spec, target, num_slots, max_len)
