"""What a step needs from the sequences' text options, as tensors: the min_tokens mask, the repetition penalty
and top-N logprobs.

The masked / penalised logits are what every later use of p sees (sampling, greedy argmax, acceptance, residual
and bonus in verification), so speculative decoding samples from the same distribution as plain decoding.
Returned logprobs stay the policy's own temperature-scaled ones, before masks and penalties (the RL contract).
"""
from __future__ import annotations

import torch

from .sequence import Sequence


def apply_min_tokens(logits: torch.Tensor, seqs: list[Sequence]) -> torch.Tensor:
    """logits [B, T, V] for each sequence's next T tokens -> stop/EOS ids at -inf while under min_tokens."""
    B, T, V = logits.shape
    under = [max(0, s.params.min_tokens - len(s.output)) for s in seqs]  # positions still under min_tokens
    if not any(under) or not any(s.stop_ids for s in seqs):
        return logits
    banned = torch.zeros(B, V, dtype=torch.bool)  # [B, V]
    for b, s in enumerate(seqs):
        ids = [i for i in s.stop_ids if 0 <= i < V]
        if under[b] and ids:
            banned[b, ids] = True
    active = (torch.arange(T)[None, :] < torch.tensor(under)[:, None]).to(logits.device)  # [B, T]
    return logits.masked_fill(banned.to(logits.device)[:, None, :] & active[..., None], float("-inf"))


def apply_repetition_penalty(logits: torch.Tensor, seqs: list[Sequence],
                             drafts: torch.Tensor | None = None) -> torch.Tensor:
    """logits [B, T, V] for each sequence's next T tokens; position t's context is the prompt, the output and
    drafts[:, :t] [B, T-1]. A draft is only ever judged by p at positions whose earlier drafts were all accepted,
    where this context is the real one, so verification stays exact."""
    if all(s.params.repetition_penalty == 1.0 for s in seqs):
        return logits
    B, T, V = logits.shape
    seen = torch.zeros(B, V, dtype=torch.bool, device=logits.device)  # [B, V] prompt + output
    for b, s in enumerate(seqs):
        seen[b, torch.tensor(s.tokens, device=logits.device).clamp(0, V - 1)] = True
    seen = seen[:, None, :].expand(B, T, V)  # [B, T, V]
    if drafts is not None and T > 1:
        one_hot = torch.zeros(B, T - 1, V, device=logits.device).scatter_(-1, drafts[:, :T - 1, None], 1.0)
        before = torch.cat([torch.zeros_like(one_hot[:, :1]), one_hot.cumsum(1)], dim=1) > 0  # [B, T, V]
        seen = seen | before
    # CTRL / vLLM: a seen token's logit is divided by the penalty when positive, multiplied when negative
    pen = torch.tensor([s.params.repetition_penalty for s in seqs], device=logits.device).to(logits.dtype)  # [B]
    pen = pen[:, None, None]
    return torch.where(seen, torch.where(logits > 0, logits / pen, logits * pen), logits)


def top_logprob_dicts(logits: torch.Tensor, tokens: torch.Tensor, logprobs: torch.Tensor, seqs: list[Sequence],
                      temperature: torch.Tensor) -> list[list[dict[int, float]]] | None:
    """Per sequence and position: {token id: logprob} of its top-N plus the sampled token (vLLM's shape);
    None when no sequence asked for logprobs. logits [B, T, V], tokens/logprobs [B, T]."""
    wanted = [s.params.logprobs for s in seqs]
    if all(n is None for n in wanted):
        return None
    temp = torch.where(temperature == 0, torch.ones_like(temperature), temperature)  # greedy rows: T = 1
    logp = torch.log_softmax(logits.float() / temp[:, None, None], dim=-1)  # [B, T, V]
    values, ids = logp.topk(min(max(n or 0 for n in wanted), logp.shape[-1]), dim=-1)  # [B, T, N]
    values, ids, toks, lps = values.tolist(), ids.tolist(), tokens.tolist(), logprobs.tolist()
    out = [[dict(zip(ids[b][t][:n or 0], values[b][t][:n or 0])) for t in range(len(toks[b]))]
           for b, n in enumerate(wanted)]
    for b, rows in enumerate(out):
        for t, row in enumerate(rows):
            row.setdefault(toks[b][t], lps[b][t])  # the sampled token, when outside the top-N
    return out
