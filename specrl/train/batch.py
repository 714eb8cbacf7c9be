"""`TrainBatch`: a step's rollouts as the policy trainer reads them, the one type both sides of the pipeline's
seam share (specrl.pipeline.seam re-exports it); `collate` builds one from prompts, responses and logprobs."""
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
