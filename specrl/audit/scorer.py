"""Token scores: the distribution the sampler was told to use, rebuilt from the policy's logits with the
engine's own sampling functions, and each sampled token's PIT and bets under it. The PIT's uniforms are a hash
of (seed, row, position), so a token's score does not depend on how the trainer cut the batch into
micro-batches or lm-head chunks.

Without a top-k or top-p cut (the RL default) the scores come from the logits directly (`bets.from_logits`:
float32 passes, float64 sums, no sort of the vocabulary), SUB_ELEMENTS logits at a time so that what one
token costs stays in cache; a cut needs the engine's sort (`target_probs`) and the float64 path.
"""
from __future__ import annotations

import torch
from torch import Tensor

from ..engine.sampler import hash_uniform, target_probs
from .bets import ALTERNATIVES, Workspace, from_logits, log_ratios, ranked
from .eprocess import SCORES
from .pit import randomized_pit

AUDIT_STREAM = 0xA0D1  # the hash stream of the audit's uniforms, apart from the sampler's streams
COLUMNS = SCORES + ALTERNATIVES  # u, w, impossible, then log q_j(x) / p(x) per alternative
HEAD_TOKENS = 128  # positions `score_completions` makes logits for at once
SUB_ELEMENTS = 2 ** 19  # logits scored at once (2 MiB in float32: 10 tokens of a 49,152-token vocabulary), so
# that a token's passes stay in cache while a small vocabulary is still scored in one call


def token_scores(probs: Tensor, targets: Tensor, v: Tensor) -> Tensor:
    """[n, COLUMNS] float64 of tokens `targets` [n] under `probs` [n, V], with the PIT's uniforms `v` [n]."""
    p = probs.double()  # [n, V]
    p = p / p.sum(-1, keepdim=True)  # the engine samples from the float32 probabilities normalised in float64
    p_x = p.gather(-1, targets[:, None])[:, 0]  # [n]
    rank = ranked(p, targets)
    head = torch.stack([randomized_pit(rank.before, p_x, v), 1 - p.amax(-1), (p_x <= 0).double()], -1)  # [n, 3]
    return torch.cat([head, log_ratios(p, targets)], -1)


def logit_scores(z: Tensor, targets: Tensor, v: Tensor, ws: Workspace | None = None) -> Tensor:
    """`token_scores` of p = softmax(z), z [n, V] the temperature-scaled logits (no top-k or top-p cut)."""
    s = from_logits(z, targets, ws)
    head = torch.stack([randomized_pit(s.before, s.p_x, v), 1 - s.max_p, (s.p_x <= 0).double()], -1)  # [n, 3]
    return torch.cat([head, s.log_r], -1)  # [n, COLUMNS]


class TokenScorer:
    """(logits [n, V], targets [n], rows [n], positions [n]) -> token_scores [n, COLUMNS] under the rollout's
    sampling settings."""

    def __init__(self, temperature: float, top_p: float = 1.0, top_k: int = -1, seed: int = 0):
        self.temperature = torch.tensor([temperature], dtype=torch.float32)
        self.top_p = torch.tensor([top_p], dtype=torch.float32)
        self.top_k = torch.tensor([top_k], dtype=torch.long)
        self.seed = seed % 2 ** 40  # seed * 1_000_003 + row stays within int64
        self.workspace = Workspace()  # the logit path's buffers, reused from call to call

    def probs(self, logits: Tensor) -> Tensor:
        dev = logits.device
        return target_probs(logits[None], self.temperature.to(dev), self.top_k.to(dev), self.top_p.to(dev))[0]

    @property
    def cuts(self) -> bool:
        """Whether top-k or top-p cut the distribution (then scoring needs the engine's sort)."""
        return bool(self.top_p[0] < 1) or bool(self.top_k[0] >= 0)

    def __call__(self, logits: Tensor, targets: Tensor, rows: Tensor, positions: Tensor) -> Tensor:
        dev = logits.device
        seeds = (self.seed * 1_000_003 + rows).to(dev)  # [n]
        v = hash_uniform(seeds, positions.to(dev)[:, None], AUDIT_STREAM)[:, 0]  # [n]
        logits, targets = logits.detach(), targets.to(dev)
        if self.cuts:
            return token_scores(self.probs(logits), targets, v).cpu()  # [n, COLUMNS]
        t, sub = float(self.temperature[0]), max(1, SUB_ELEMENTS // logits.shape[-1])
        out = []
        for i in range(0, len(targets), sub):
            z = logits[i:i + sub].float()
            out.append(logit_scores(z if t == 1 else z / t, targets[i:i + sub], v[i:i + sub], self.workspace))
        return torch.cat(out).cpu()  # [n, COLUMNS]


@torch.no_grad()
def score_completions(model, scorer: TokenScorer, prompts: list[list[int]], completions: list[list[int]],
                      rows_per_batch: int = 4) -> Tensor:
    """token_scores [n, COLUMNS] of every completion token, row by row in order, for completions from any
    engine (`specrl audit`, the benchmark). Row i is audit row i, as in the trainer. The logits are made
    HEAD_TOKENS positions at a time from the final hidden states, so [tokens, V] never exists at once."""
    device = next(model.parameters()).device
    out = []
    for start in range(0, len(prompts), rows_per_batch):
        ps, cs = prompts[start:start + rows_per_batch], completions[start:start + rows_per_batch]
        seqs = [p + c[:-1] for p, c in zip(ps, cs)]
        width = max(len(s) for s in seqs)
        ids = torch.tensor([s + [0] * (width - len(s)) for s in seqs], device=device)  # [b, T] right-padded
        last = model(ids, compute_logits=False).last_hidden  # [b, T, D]
        for i, (p, c) in enumerate(zip(ps, cs)):
            pos = torch.arange(len(p) - 1, len(p) - 1 + len(c))  # [r] positions predicting the completion
            rows, targets = torch.full_like(pos, start + i), torch.tensor(c, dtype=torch.long)
            for k in range(0, len(c), HEAD_TOKENS):
                at = pos[k:k + HEAD_TOKENS]
                logits = model.lm_head(last[i, at.to(device)]).float()  # [h, V]
                out.append(scorer(logits, targets[k:k + HEAD_TOKENS], rows[k:k + HEAD_TOKENS], at))
    return torch.cat(out) if out else torch.zeros(0, COLUMNS, dtype=torch.float64)
