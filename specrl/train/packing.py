"""Padding-free micro-batches: a micro-batch's rows back to back in one sequence [1, N], each row attending only
to itself with its RoPE positions restarting at 0 (`CausalLM.forward`'s `segments`): with a long tail of
response lengths, a right-padded micro-batch is mostly padding (docs/results/packing.md). Only the forward and
the lm-head see the packed layout; the loss, the audit and the forward hook read `Packed.unpack`'s [b, T].
"""
from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from ..config import ConfigError
from ..model import ModelOutput
from .batch import TrainBatch


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

    def unpack_output(self, out: ModelOutput) -> ModelOutput:
        """A packed forward's hidden states in the padded layout (what the forward hook reads)."""
        return ModelOutput(None, tuple(map(self.unpack, out.hidden)), self.unpack(out.last_hidden))


def pack(mb: TrainBatch) -> Packed:
    """The rows of a (padded, cut to its longest row) micro-batch `mb`, packed."""
    b, T = mb.input_ids.shape
    lengths = mb.lengths.to(mb.input_ids.device)  # [b]
    valid = torch.arange(T, device=lengths.device)[None, :] < lengths[:, None]  # [b, T]
    return Packed(mb.input_ids[valid][None], mb.targets[valid][None], valid, tuple(mb.lengths.tolist()))


def check_longest_row(lengths: Tensor, max_tokens: int, sized_from_memory: bool) -> None:
    """A row longer than a micro-batch's token cap fits in no micro-batch: a ConfigError names the knob to
    raise (`optim.micro_batch_tokens`, or `optim.activation_memory` where the cap was sized from it)."""
    longest = int(lengths.max()) if len(lengths) else 0
    if max_tokens and longest > max_tokens:
        fix = (f"set optim.micro_batch_tokens to at least {longest}, or raise optim.activation_memory (the cap "
               "was sized from it)") if sized_from_memory else f"raise it to at least {longest}"
        raise ConfigError(f"optim.micro_batch_tokens: a micro-batch holds at most {max_tokens} tokens, but a row "
                          f"of the batch has {longest} (prompt + response); {fix}")


def micro_batch_groups(idx: Tensor, lengths: Tensor, max_rows: int, max_tokens: int, packed: bool) -> list[Tensor]:
    """Consecutive runs of `idx` (sorted by length, ascending) with at most `max_rows` rows and, unless
    `max_tokens` is 0, at most that many tokens each: packed, their real tokens; padded, rows x the last row."""
    lens, out, start = lengths[idx].tolist(), [], 0
    for end in range(1, len(lens)):
        run = lens[start:end + 1]
        tokens = sum(run) if packed else len(run) * run[-1]
        if end - start >= max_rows or (max_tokens and tokens > max_tokens):
            out.append(idx[start:end])
            start = end
    return out + [idx[start:]] if len(idx) else []
