"""An online drafter's weights (specrl's names) as the tensors vLLM's drafter model loads.

EAGLE-3: the learner sends the head's own state (fc.*, midlayer.*, norm.*, and lm_head.weight + d2t with a
draft vocabulary); they are checked against the head the engine was built with and written as `specrl
export-drafter` writes them, without the lm_head of a full-vocabulary head, which vLLM shares with the
target (it is refitted with the policy). A draft model's HF names are checked against its checkpoint.
"""
from __future__ import annotations

from pathlib import Path

import torch

from ...drafters.weights import check_fits
from .refit import RefitError, checkpoint_layout, fitted


def eagle3_tensors(export_dir: Path):
    """A function from the learner's head weights to the tensors vLLM's Eagle3 model loads."""
    from ...drafters.eagle3.export import public_tensors
    from ...drafters.eagle3.head import load_head
    head = load_head(export_dir)  # the layout the engine serves: its sizes, draft vocabulary and dtype
    full = head.config.draft_vocab_size == head.config.vocab_size

    def convert(weights) -> dict[str, torch.Tensor]:
        named = {k: v.detach().to("cpu") for k, v in weights}
        if full:  # specrl's full-vocabulary head has no lm_head/d2t; the exported one has identity ones
            named = {**{k: v for k, v in head.state_dict().items() if k in ("lm_head.weight", "d2t")}, **named}
        try:
            check_fits(head.state_dict(), named)
        except ValueError as e:
            raise RefitError(f"the EAGLE-3 drafter refit does not fit the engine's head: {e}") from None
        head.load_state_dict(named)
        tensors = public_tensors(head, None, torch.float32, "eagle3")
        return {k: v for k, v in tensors.items() if not (full and k == "lm_head.weight")}
    return convert


def model_tensors(model_dir: Path):
    """A function from a draft model's HF-named weights to the tensors to load (checked against its files)."""
    layout = checkpoint_layout(model_dir)
    return lambda weights: fitted(weights, layout, "draft model")
