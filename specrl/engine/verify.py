"""Batched lossless verification (Leviathan et al. 2023; Chen et al. 2023), as one pure function.

Draft i is accepted with probability min(1, p(x_i) / q(x_i)). At the first rejection the token is drawn from
norm(max(p - q, 0)); if every draft is accepted a bonus token is drawn from p. Positions past a sequence's
own draft length act as q = 0, so the "residual" there is p itself: the bonus. A draft without
probabilities is q = one-hot. Greedy p is one-hot, which reduces all of this to "accept while the draft is
the argmax, then emit the argmax".
"""
from __future__ import annotations

from typing import NamedTuple

import torch

from .sampling import sample_from


class Verdict(NamedTuple):
    num_accepted: torch.Tensor  # [B] accepted drafts
    tokens: torch.Tensor  # [B, K+1] accepted drafts, then the correction/bonus token at index num_accepted


def draft_q(draft_tokens: torch.Tensor, draft_probs: torch.Tensor | None, draft_len: torch.Tensor,
            vocab: int) -> torch.Tensor:
    """q over the K draft positions [B, K, V]; zero past each sequence's draft length."""
    B, K = draft_tokens.shape
    if draft_probs is None:
        q = torch.zeros(B, K, vocab, device=draft_tokens.device).scatter_(-1, draft_tokens[..., None], 1.0)
    else:
        q = draft_probs.float()
    live = torch.arange(K, device=q.device)[None, :] < draft_len[:, None]  # [B, K]
    return q * live[..., None]


def verify(p: torch.Tensor, draft_tokens: torch.Tensor, q: torch.Tensor, u_accept: torch.Tensor,
           u_sample: torch.Tensor) -> Verdict:
    """p: [B, K+1, V] target distributions; draft_tokens: [B, K]; q: [B, K, V] (from `draft_q`);
    u_accept: [B, K] and u_sample: [B, K+1] uniforms in (0, 1)."""
    B, K = draft_tokens.shape
    p_x = p[:, :K].gather(-1, draft_tokens[..., None]).squeeze(-1)  # [B, K]
    q_x = q.gather(-1, draft_tokens[..., None]).squeeze(-1)  # [B, K]
    accept = (u_accept * q_x < p_x) & (q_x > 0)  # u < p/q without dividing; q_x = 0 marks padding
    num_accepted = accept.long().cumprod(-1).sum(-1)  # [B]
    q_pad = torch.cat([q, torch.zeros_like(p[:, :1])], dim=1)  # [B, K+1, V]
    at = num_accepted[:, None, None].expand(-1, 1, p.shape[-1])
    p_at, q_at = p.gather(1, at).squeeze(1), q_pad.gather(1, at).squeeze(1)  # [B, V]
    residual = (p_at - q_at).clamp_min(0)  # [B, V]
    empty = residual.sum(-1, keepdim=True) <= 0  # only through float round-off; p is then the answer
    residual = torch.where(empty, p_at, residual)
    u = u_sample.gather(1, num_accepted[:, None]).squeeze(1)  # [B]
    extra = sample_from(residual, u)  # [B]
    tokens = torch.cat([draft_tokens, draft_tokens.new_zeros(B, 1)], dim=1)  # [B, K+1]
    tokens = tokens.scatter(1, num_accepted[:, None], extra[:, None])
    return Verdict(num_accepted, tokens)
