"""What online drafter training learns from: the policy trainer's own forward over the sampled trajectories.

NeMo-RL's way: the policy trainer already runs the policy over every rollout to recompute logprobs, so it
can hand over the hidden states a drafter reads and the policy's next-token logits at no extra forward.
`PolicyTrainer.capture_layers = (...)` turns it on; after `step()`, `PolicyTrainer.captured` holds one
`DrafterBatch` per micro-batch (all detached). Layer -1 stands for the final normed hidden state (MTP's h^0).

TLT's alternative, capturing hidden states during rollout (the engine's verify forwards), is not built:
the trainer's forward is exact (teacher-forced over the whole trajectory) and costs no extra work.
"""
from __future__ import annotations

from typing import NamedTuple

from torch import Tensor

LAST = -1  # capture key of the final normed hidden state


class DrafterBatch(NamedTuple):
    input_ids: Tensor  # [b, T] prompt + response[:-1], right-padded (the trainer's micro-batch)
    mask: Tensor  # [b, T] float, 1 where the next token is a response token
    logits: Tensor  # [b, T, V] the policy's logits (temperature 1), detached
    hidden: dict[int, Tensor]  # layer index (-1: final normed) -> [b, T, D] outputs, detached
    rows: Tensor  # [b] rows of the step's batch, to look per-trajectory rewards up

    @property
    def num_tokens(self) -> float:
        return float(self.mask.sum())


def capture(out, input_ids: Tensor, mask: Tensor, rows: Tensor, layers: tuple[int, ...]) -> DrafterBatch:
    """Detaches the asked-for parts of a `ModelOutput` computed with hidden_layers=model_layers(layers)."""
    hidden = dict(zip(model_layers(layers), (h.detach() for h in out.hidden)))
    if LAST in layers:
        hidden[LAST] = out.last_hidden.detach()
    return DrafterBatch(input_ids, mask, out.logits.detach(), hidden, rows)


def model_layers(layers: tuple[int, ...]) -> tuple[int, ...]:
    """The decoder layers to ask the model for, in the order it returns them (ascending, no -1)."""
    return tuple(sorted({i for i in layers if i != LAST}))
