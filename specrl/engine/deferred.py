"""Deferred observation: a model drafter that is not drafting catches up on the target's forwards only when
it is next asked to draft, in a few batched forwards instead of one per engine step. `Deferred` wraps such a
drafter and is itself a `Drafter`: its `observe` buffers, its `propose` catches up first.

Why: keeping its cache current costs a model drafter a fraction of a target forward every step, and the
adaptive engine often leaves it idle. The state stays exact: a sequence's accepted inputs are contiguous
positions, so its pending ones form one longer causal forward that writes the same cache rows (a row shorter
than the chunk repeats its last input, rewriting the same entry with the same values).
"""
from __future__ import annotations

import time

import torch

from .constants import CHUNK, MAX_PENDING
from .drafting import Drafter, Proposal, TargetForward, caches_of
from .sequence import Sequence, Status


class Deferred:
    """Which drafters may defer is their method table row's `defers`: one whose observe is position-local."""

    def __init__(self, inner: Drafter):
        self.inner, self.hidden_layers = inner, inner.hidden_layers
        # per deferred forward: its rows, their valid inputs, and the accepted inputs compacted to [N, ...]
        self.steps: list[tuple[list[Sequence], list[int], tuple[torch.Tensor, ...]]] = []
        self.pending = 0  # inputs held
        self.live: set[int] = set()  # seq_ids with pending inputs that have not finished
        self.caught_up = (0, 0.0)  # inputs and seconds of catch-ups before drafting since the last `take`

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
        t = time.perf_counter()
        inputs = self.catch_up()
        if inputs:  # the cost model prices a catch-up apart from drafting (engine/adaptive/strategy.py)
            self.caught_up = (self.caught_up[0] + inputs, self.caught_up[1] + time.perf_counter() - t)
        return self.inner.propose(seqs, k)

    def take(self) -> tuple[int, float]:
        """Inputs caught up on before drafting, and the seconds that took, since the last call."""
        out, self.caught_up = self.caught_up, (0, 0.0)
        return out

    def release(self, seq: Sequence) -> None:
        """`seq` finished: once no pending sequence is left, nothing held would be read again."""
        self.inner.release(seq)
        self.live.discard(seq.seq_id)
        if not self.live:
            self.steps, self.pending = [], 0

    def caches(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        return caches_of(self.inner)
