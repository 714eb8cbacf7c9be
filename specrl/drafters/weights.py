"""Hot swap of a model drafter's weights inside a running engine (online drafter training).

The names are the `state_dict()` names of the drafter's module (`ModelDrafter.module`; for `DrafterPool`,
its model drafter's). The swap is all or nothing: every name and shape is checked before the first copy.
Tensors are copied in place, so whatever holds the module keeps seeing it.

Caches: the draft model re-prefills its own KV cache after `refit`. EAGLE-3 and MTP caches derive from the
target's hidden states and cannot be recomputed; stale entries only cost acceptance until overwritten,
never exactness.
"""
from __future__ import annotations

from typing import Iterable

import torch
from torch import nn

from ..engine.pool import unwrap
from ..engine.methods import drafting_methods, trainable_methods


class ModelDrafter:
    """What a drafter with weights offers beside `Drafter`: the module it drafts with (`module`), its method's
    name, the weights' version and `refit`, called after its weights changed in place."""
    method: str
    module: nn.Module
    version = 0  # the version last loaded by `load_drafter_weights` (0: the weights the engine started with)

    def release(self, seq) -> None:
        """Nothing by default: the slot's cache rows are overwritten by its next prefill."""

    def refit(self) -> None:
        """Nothing by default (see the module docstring)."""


def drafter_module(drafter) -> nn.Module:
    """The nn.Module a model drafter drafts with; a clear error for a model-free (or no) drafter."""
    return model_drafter(drafter).module


def model_drafter(drafter) -> ModelDrafter:
    drafter = unwrap(drafter)  # "auto" holds its model drafter in a pool, maybe deferred
    if not isinstance(drafter, ModelDrafter):
        model_free = [m for m in drafting_methods() if m not in trainable_methods()]
        raise TypeError(f"drafter {type(drafter).__name__} has no weights to swap: only "
                        f"{', '.join(trainable_methods())} drafters do (not {', '.join(model_free)} or SD off); start the engine with one of them")
    return drafter


def check_fits(own: dict[str, torch.Tensor], named: dict[str, torch.Tensor]) -> None:
    """Raises ValueError naming the missing, unexpected and mis-shaped tensors."""
    missing = sorted(own.keys() - named.keys())
    unexpected = sorted(named.keys() - own.keys())
    shapes = [f"{k}: got {tuple(named[k].shape)}, the engine has {tuple(own[k].shape)}"
              for k in sorted(own.keys() & named.keys()) if named[k].shape != own[k].shape]
    first: dict[int, str] = {}  # tied tensors (a draft model's embedding and lm_head) must get one value
    for k in sorted(own.keys() & named.keys()):
        twin = first.setdefault(own[k].data_ptr(), k)
        if twin != k and named[k].shape == named[twin].shape and not torch.equal(named[k], named[twin]):
            shapes.append(f"{k}: tied to {twin} in the engine's drafter, but the values differ")
    if missing or unexpected or shapes:
        raise ValueError(f"drafter weights do not fit the engine's drafter (its weights are unchanged): missing "
                         f"{missing[:5]}, unexpected {unexpected[:5]}, shape mismatches {shapes[:5]}. Train the "
                         "drafter that the engine runs (same method and config: OnlineDrafterTrainer.from_drafter)")


@torch.no_grad()
def load_drafter_weights(drafter, named: Iterable[tuple[str, torch.Tensor]], version: int,
                         checked: bool = False) -> None:
    """Copies (name, tensor) pairs in place into the engine's drafter and records `version`; `checked`: the
    caller already ran check_fits on them (a hot swap checks when the weights arrive, not between steps)."""
    target = model_drafter(drafter)
    own, named = target.module.state_dict(), dict(named)
    if not checked:
        check_fits(own, named)
    for k, v in named.items():
        own[k].copy_(v)
    target.refit()
    target.version = int(version)


def drafter_version(drafter) -> int:
    """The version last loaded by `load_drafter_weights` (0: the weights the engine started with, or none)."""
    drafter = unwrap(drafter)
    return drafter.version if isinstance(drafter, ModelDrafter) else 0
