"""What online drafter training learns from: the policy trainer's own forward over the sampled trajectories.

The trainer already runs the policy over every rollout to recompute logprobs, so it hands over the hidden
states a drafter reads and the policy's next-token logits at no extra forward (NeMo-RL's way; capturing
during rollout, TLT's, would see only the verify forwards). See online.py for how the parts connect.

Layer -1 stands for the final normed hidden state (MTP's h^0). Only the rows `pick_rows(b)` keeps are copied
out, so a micro-batch's [b, T, V] logits are held only while its backward runs. `pick_probe(b, kept)` names
other rows, never trained on, that the drift probe (probe.py) scores drafters on.
"""
from __future__ import annotations

from typing import Callable, NamedTuple

from torch import Tensor

from ...trainer.trainer import ForwardInfo

LAST = -1  # capture key of the final normed hidden state


class DrafterBatch(NamedTuple):
    input_ids: Tensor  # [b, T] prompt + response[:-1], right-padded (the trainer's micro-batch)
    mask: Tensor  # [b, T] float, 1 where the next token is a response token
    logits: Tensor | None  # [b, T, V] the policy's logits (temperature 1), detached (None inside `capture`)
    hidden: dict[int, Tensor]  # layer index (-1: final normed) -> [b, T, D] outputs, detached
    rows: Tensor  # [b] rows of the step's batch, to look per-trajectory rewards up

    @property
    def num_tokens(self) -> float:
        return float(self.mask.sum())

    def select(self, keep: Tensor) -> "DrafterBatch":
        """Rows `keep` [k] (in that order), cut to their longest sequence; copies, so the source can be freed."""
        mask = self.mask[keep.to(self.mask.device)]  # [k, T]
        cols = mask.any(0).nonzero()  # past the last loss index every column is padding (causal attention)
        T = int(cols.max()) + 1 if len(cols) else 1
        keep = keep.to(self.input_ids.device)
        logits = None if self.logits is None else self.logits[:, :T][keep]
        return DrafterBatch(self.input_ids[:, :T][keep], mask[:, :T].contiguous(), logits,
                            {i: h[:, :T][keep] for i, h in self.hidden.items()}, self.rows[keep.to(self.rows.device)])


class Capture:
    """The policy trainer's forward hook of online drafter training: keeps one `DrafterBatch` per micro-batch
    that keeps a row in `batches`, the `layers` of `pick_rows(b)`'s rows (all of them without `pick_rows`), and
    in `probe` the rows `pick_probe(b, kept)` names (none without it)."""

    def __init__(self, layers: tuple[int, ...], pick_rows: Callable[[int], Tensor | None] | None = None,
                 pick_probe: Callable[[int, Tensor | None], Tensor | None] | None = None):
        self.layers, self.pick_rows, self.pick_probe = layers, pick_rows, pick_probe
        self.hidden_layers = tuple(sorted({i for i in layers if i != LAST}))  # to ask for, in the model's order
        self.batches: list[DrafterBatch] = []
        self.probe: list[DrafterBatch] = []

    def __call__(self, info: ForwardInfo) -> None:
        """Detaches the asked-for parts of the forward, of the kept rows only (copied out). The policy's logits
        come from `info.logits` on their final hidden states alone (the trainer never holds a whole
        micro-batch's logits)."""
        keep = self.pick_rows(len(info.rows)) if self.pick_rows is not None else None
        hidden = dict(zip(self.hidden_layers, (h.detach() for h in info.output.hidden)))
        hidden[LAST] = info.output.last_hidden.detach()  # cut and selected with the rest; dropped below unless asked
        batch = DrafterBatch(info.input_ids, info.mask, None, hidden, info.rows)
        probe = self.pick_probe(len(info.rows), keep) if self.pick_probe is not None else None
        if probe is not None and len(probe):
            self.probe.append(self._copied(batch.select(probe), info))
        if keep is None or len(keep):  # a micro-batch whose rows all went unkept adds nothing to train on
            self.batches.append(self._copied(batch if keep is None else batch.select(keep), info))

    def _copied(self, batch: DrafterBatch, info: ForwardInfo) -> DrafterBatch:
        """`batch` with the policy's logits of its rows, and the final hidden state only where asked for."""
        batch = batch._replace(logits=info.logits(batch.hidden[LAST]))
        if LAST not in self.layers:
            batch = batch._replace(hidden={i: h for i, h in batch.hidden.items() if i != LAST})
        return batch
