"""Held-out accuracy of a policy on the arithmetic task by batched greedy decoding.

A small self-contained decoder over the model's position-indexed KV cache, so that the recipe does
not depend on the rollout engine: right-padded prefill, then one token per active row per step.
Pad entries a prefill leaves in the cache sit at positions a row has not reached yet and are
overwritten before any query can read them.
"""

from __future__ import annotations

import torch
from tokenizers import Tokenizer

from .arith import Problem
from .reward import arith_reward
from .tokenizer import SpecialIds


def new_kv_cache(model, slots: int, length: int, dtype: torch.dtype) -> list[tuple[torch.Tensor, torch.Tensor]]:
    cfg = model.config
    shape = (slots, cfg.num_kv_heads, length, cfg.head_dim)  # [S, Hkv, L, D]
    return [(torch.zeros(shape, dtype=dtype), torch.zeros(shape, dtype=dtype)) for _ in range(cfg.num_layers)]


@torch.inference_mode()
def greedy_decode(model, prompts: list[list[int]], max_new_tokens: int, eos_id: int, pad_id: int) -> list[list[int]]:
    """Greedy continuations (without the EOS) of token-id prompts, all decoded as one batch."""
    B = len(prompts)
    lens = torch.tensor([len(p) for p in prompts])  # [B]
    T = int(lens.max())
    ids = torch.full((B, T), pad_id, dtype=torch.long)  # [B, T]
    for i, p in enumerate(prompts):
        ids[i, : len(p)] = torch.tensor(p)
    dtype = next(model.parameters()).dtype
    cache = new_kv_cache(model, B, T + max_new_tokens, dtype)
    slots = torch.arange(B)  # [B]
    out = model(ids, torch.arange(T).expand(B, T), kv_cache=cache, slots=slots, logits_index=(lens - 1)[:, None])
    next_tok = out.logits[:, -1].argmax(-1)  # [B]
    generated: list[list[int]] = [[] for _ in range(B)]
    pos = lens.clone()  # [B] position of the token about to be fed
    for _ in range(max_new_tokens):
        for s, t in zip(slots.tolist(), next_tok.tolist()):
            generated[s].append(t)
        alive = next_tok != eos_id  # [A]
        slots, next_tok = slots[alive], next_tok[alive]
        if len(slots) == 0:
            break
        out = model(next_tok[:, None], pos[slots][:, None], kv_cache=cache, slots=slots)
        pos[slots] += 1
        next_tok = out.logits[:, -1].argmax(-1)  # [A]
    return [g[:-1] if g and g[-1] == eos_id else g for g in generated]


def accuracy(
    model, tok: Tokenizer, ids: SpecialIds, problems: list[Problem], max_new_tokens: int = 400, batch_size: int = 256
) -> tuple[float, list[str]]:
    """Fraction of problems whose greedy completion earns reward 1, and the completions."""
    completions: list[str] = []
    for start in range(0, len(problems), batch_size):
        chunk = problems[start : start + batch_size]
        prompts = [tok.encode(p.prompt).ids for p in chunk]
        outs = greedy_decode(model, prompts, max_new_tokens, ids.eos, ids.pad)
        completions += [tok.decode(o, skip_special_tokens=True) for o in outs]
    rewards = [arith_reward(c, p.answer, p.prompt) for c, p in zip(completions, problems)]
    return sum(rewards) / max(len(rewards), 1), completions
