"""Drafters for the exactness tests: deliberately bad ones, and factories for every registered method."""
from __future__ import annotations

import torch

from specrl.engine.drafting import Proposal


class UniformDrafter:
    """Proposes uniform random tokens. With `with_probs` it reports q = uniform (the residual path of
    verification); without, the tokens are point drafts (q = one-hot)."""
    hidden_layers: tuple[int, ...] = ()

    def __init__(self, vocab: int, with_probs: bool, seed: int = 0):
        self.vocab, self.with_probs = vocab, with_probs
        self.gen = torch.Generator().manual_seed(seed)

    def observe(self, fwd) -> None:
        pass

    def propose(self, seqs, k) -> Proposal:
        K = max(k, default=0)
        tokens = torch.randint(0, self.vocab, (len(seqs), K), generator=self.gen)
        probs = torch.full((len(seqs), K, self.vocab), 1.0 / self.vocab) if self.with_probs else None
        return Proposal(tokens, torch.tensor(k), probs)

    def release(self, seq) -> None:
        pass


class OracleDrafter:
    """Proposes the target's own greedy continuation: every draft is accepted at temperature 0."""
    hidden_layers: tuple[int, ...] = ()

    def __init__(self, model):
        self.model = model
        self.memo: dict[tuple, int] = {}  # prefix -> greedy next token

    def greedy_next(self, toks: list[int]) -> int:
        key = tuple(toks)
        if key not in self.memo:
            ids = torch.tensor([toks], device=next(self.model.parameters()).device)
            self.memo[key] = int(self.model(ids).logits[0, -1].argmax())
        return self.memo[key]

    def observe(self, fwd) -> None:
        pass

    @torch.no_grad()
    def propose(self, seqs, k) -> Proposal:
        drafts = []
        for s, ki in zip(seqs, k):
            toks = list(s.tokens)
            for _ in range(ki):
                toks.append(self.greedy_next(toks))
            drafts.append(toks[len(s.tokens):])
        K = max(k, default=0)
        out = torch.zeros(len(seqs), K, dtype=torch.long)
        for b, d in enumerate(drafts):
            out[b, :len(d)] = torch.tensor(d, dtype=torch.long)
        return Proposal(out, torch.tensor([len(d) for d in drafts]), None)

    def release(self, seq) -> None:
        pass
