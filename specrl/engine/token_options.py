"""What a step needs from the sequences' text options, as tensors: the min_tokens mask and top-N logprobs.

The masked logits are what every later use of p sees (sampling, greedy argmax, acceptance, residual and bonus
in verification), so speculative decoding samples from the same masked distribution as plain decoding.
Returned logprobs stay the policy's unmasked temperature-scaled ones (the RL contract).
"""
from __future__ import annotations

import torch

from .sampling import mask_banned, top_logprobs
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
    active = torch.arange(T)[None, :] < torch.tensor(under)[:, None]  # [B, T]
    return mask_banned(logits, banned.to(logits.device), active.to(logits.device))


def top_logprob_dicts(logits: torch.Tensor, tokens: torch.Tensor, logprobs: torch.Tensor, seqs: list[Sequence],
                      temperature: torch.Tensor) -> list[list[dict[int, float]]] | None:
    """Per sequence and position: {token id: logprob} of its top-N plus the sampled token (vLLM's shape);
    None when no sequence asked for logprobs. logits [B, T, V], tokens/logprobs [B, T]."""
    wanted = [s.params.logprobs for s in seqs]
    if all(n is None for n in wanted):
        return None
    values, ids = top_logprobs(logits, temperature, max(n or 0 for n in wanted))  # [B, T, N]
    values, ids, toks, lps = values.tolist(), ids.tolist(), tokens.tolist(), logprobs.tolist()
    out = []
    for b, n in enumerate(wanted):
        rows = []
        for t in range(len(toks[b])):
            row = dict(zip(ids[b][t][:n or 0], values[b][t][:n or 0]))
            row.setdefault(toks[b][t], lps[b][t])
            rows.append(row)
        out.append(rows)
    return out
