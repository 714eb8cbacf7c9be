"""Supervised batches of the embedded task, `<bos> prompt response <eos>`, as a pure function of the seed.

Problems are drawn in pools, sorted by length and cut into batches of at most `batch_tokens` padded tokens, so
that short and long problems rarely share a batch and little compute goes to padding.
"""
from __future__ import annotations

import itertools
import random
from typing import Iterator, NamedTuple

import torch
from tokenizers import Tokenizer

from .arith import ArithSpec, Problem, make_problems
from .tokenizer import SpecialIds


Row = tuple[list[int], int]  # a problem's token ids and its prompt length


class Batch(NamedTuple):
    input_ids: torch.Tensor   # [B, T] right-padded with <pad>, positions 0..T-1 per row
    targets: torch.Tensor     # [B, T] next token, -100 where no loss is taken


def encode_problem(tok: Tokenizer, ids: SpecialIds, p: Problem) -> Row:
    """Token ids of `<bos> prompt response <eos>` and the length of `<bos> prompt`."""
    prompt = tok.encode(p.prompt).ids  # the post-processor prepends <bos>
    response = tok.encode(p.response, add_special_tokens=False).ids
    return prompt + response + [ids.eos], len(prompt)


def collate(seqs: list[Row], pad_id: int) -> Batch:
    """Right-pad to the longest row; targets are the next tokens of the response (and EOS)."""
    T = max(len(s) for s, _ in seqs)
    input_ids = torch.full((len(seqs), T), pad_id, dtype=torch.long)  # [B, T]
    targets = torch.full((len(seqs), T), -100, dtype=torch.long)  # [B, T]
    for i, (s, prompt_len) in enumerate(seqs):
        input_ids[i, : len(s)] = torch.tensor(s)
        targets[i, prompt_len - 1 : len(s) - 1] = torch.tensor(s[prompt_len:])  # position t predicts token t+1
    return Batch(input_ids, targets)


def pool_batches(seqs: list[Row], batch_tokens: int, rng: random.Random) -> list[list[Row]]:
    """Sort by length, greedily fill batches up to `batch_tokens` padded tokens, shuffle batches."""
    batches: list[list[Row]] = [[]]
    for s in sorted(seqs, key=lambda s: len(s[0])):
        # rows are sorted ascending, so the current row sets the padded width of its batch
        if batches[-1] and (len(batches[-1]) + 1) * len(s[0]) > batch_tokens:
            batches.append([])
        batches[-1].append(s)
    rng.shuffle(batches)
    return batches


def train_batches(tok: Tokenizer, ids: SpecialIds, seed: int, batch_tokens: int, spec: ArithSpec | None = None,
                  pool_size: int = 4096) -> Iterator[Batch]:
    """Endless deterministic stream of training batches."""
    rng = random.Random(seed)
    for pool in itertools.count():
        problems = make_problems(pool_size, seed=seed * 100_003 + pool, split="train", spec=spec)
        for rows in pool_batches([encode_problem(tok, ids, p) for p in problems], batch_tokens, rng):
            yield collate(rows, ids.pad)
