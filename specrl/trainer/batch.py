"""`TrainBatch`: a step's rollouts as the policy trainer reads them, the one type both sides of the pipeline's
seam share (specrl.pipeline.seam re-exports it), and its micro-batches: runs of rows sorted by length, packed
(`pack`: back to back in one sequence [1, N], each row attending only to itself, its RoPE positions restarting
at 0) or right-padded, which a long tail of response lengths makes mostly padding (docs/results/packing.md).
Only the forward and the lm-head see the packed layout; the rest reads `Packed.unpack`'s [b, T].
"""
from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor


class TrainBatch(NamedTuple):
    input_ids: Tensor  # [N, T] prompt + response[:-1], right-padded
    targets: Tensor  # [N, T] the token that follows each input position
    mask: Tensor  # [N, T] float, 1 where the target is a response token
    gen_logp: Tensor  # [N, T] the engine's logprob of each response target, 0 elsewhere
    advantages: Tensor  # [N]
    lengths: Tensor  # [N] valid input positions per row

    @property
    def num_rows(self) -> int:
        return self.input_ids.shape[0]

    def rows(self, idx: Tensor, device: torch.device | str = "cpu") -> "TrainBatch":
        """A sub-batch, cut to its own longest row, on `device`."""
        T = int(self.lengths[idx].max())
        return TrainBatch(*(t[idx, :T].to(device) for t in self[:4]), self.advantages[idx].to(device),
                          self.lengths[idx])


def collate(prompts: list[list[int]], responses: list[list[int]], logprobs: list[list[float]],
            advantages: Tensor, pad_id: int) -> TrainBatch:
    """Row i predicts responses[i] from prompts[i]: targets at positions [P-1, P+R-1)."""
    lengths = [len(p) + len(r) - 1 for p, r in zip(prompts, responses)]
    N, T = len(prompts), max(lengths)
    input_ids = torch.full((N, T), pad_id, dtype=torch.long)  # [N, T]
    targets = torch.full((N, T), pad_id, dtype=torch.long)  # [N, T]
    mask = torch.zeros(N, T)  # [N, T]
    gen_logp = torch.zeros(N, T)  # [N, T]
    for i, (p, r, lp) in enumerate(zip(prompts, responses, logprobs)):
        seq = p + r
        input_ids[i, :lengths[i]] = torch.tensor(seq[:-1])
        targets[i, :lengths[i]] = torch.tensor(seq[1:])
        mask[i, len(p) - 1:lengths[i]] = 1.0
        gen_logp[i, len(p) - 1:lengths[i]] = torch.tensor(lp, dtype=torch.float32)
    return TrainBatch(input_ids, targets, mask, gen_logp, advantages.float(), torch.tensor(lengths))


class Packed(NamedTuple):
    input_ids: Tensor  # [1, N] the rows' inputs back to back
    targets: Tensor  # [1, N]
    valid: Tensor  # [b, T] bool, True at a row's real positions (the padded layout's non-padding)
    segments: tuple[int, ...]  # [b] each row's length, summing to N

    def unpack(self, x: Tensor) -> Tensor:
        """[1, N, ...] packed -> [b, T, ...] padded, zeros at padding; differentiable."""
        out = x.new_zeros(*self.valid.shape, *x.shape[2:])  # [b, T, ...]
        out[self.valid] = x[0]
        return out


def pack(mb: TrainBatch) -> Packed:
    """The rows of a (padded, cut to its longest row) micro-batch `mb`, packed."""
    b, T = mb.input_ids.shape
    lengths = mb.lengths.to(mb.input_ids.device)  # [b]
    valid = torch.arange(T, device=lengths.device)[None, :] < lengths[:, None]  # [b, T]
    return Packed(mb.input_ids[valid][None], mb.targets[valid][None], valid, tuple(mb.lengths.tolist()))


def micro_batch_groups(idx: Tensor, lengths: Tensor, max_rows: int, max_tokens: int, packed: bool) -> list[Tensor]:
    """Consecutive runs of `idx` (sorted by length, ascending) with at most `max_rows` rows and, unless
    `max_tokens` is 0, at most that many tokens each: packed, their real tokens; padded, rows x the last row."""
    lens, out, start = lengths[idx].tolist(), [], 0
    total = lens[0] if lens else 0  # real tokens of lens[start:end + 1], kept running
    for end in range(1, len(lens)):
        total += lens[end]
        tokens = total if packed else (end - start + 1) * lens[end]
        if end - start >= max_rows or (max_tokens and tokens > max_tokens):
            out.append(idx[start:end])
            start, total = end, lens[end]
    return out + [idx[start:]] if len(idx) else []
