"""Prompt-lookup / n-gram drafter: find the most recent earlier occurrence of the context's last n tokens
(longest n first) and propose what followed it. Model-free; q is one-hot."""
from __future__ import annotations

from ...engine.drafting import Proposal, TargetForward, pad_proposals
from ...engine.methods import SpecConfig
from ...engine.sequence import Sequence


def ngram_lookup(tokens: list[int], n_min: int, n_max: int, k: int) -> list[int]:
    """The k tokens after the latest earlier match of the longest suffix of length in [n_min, n_max]."""
    L = len(tokens)
    for n in range(min(n_max, L - 1), n_min - 1, -1):
        suffix = tokens[L - n:]
        for start in range(L - n - 1, -1, -1):  # latest match first, excluding the suffix itself
            if tokens[start:start + n] == suffix:
                return tokens[start + n:start + n + k]
    return []


class NgramDrafter:
    hidden_layers: tuple[int, ...] = ()

    def __init__(self, spec: SpecConfig, device):
        self.spec, self.device = spec, device

    def observe(self, fwd: TargetForward) -> None:
        pass

    def propose(self, seqs: list[Sequence], k: list[int]) -> Proposal:
        opts = self.spec.options["ngram"]
        drafts = [ngram_lookup(s.tokens, opts.min, opts.max, ki) if ki > 0 else []
                  for s, ki in zip(seqs, k)]
        return pad_proposals(drafts, self.device)

    def release(self, seq: Sequence) -> None:
        pass
