"""Cold start of a model drafter: `SpecConfig(draft_model="scratch")` builds one from the policy itself, by
its method's recipe (`scratch` in the method's train module).

Recipes copy only active layers, those that write into the residual stream: a grown policy
(specrl/tasks/grow.py) has layers that start as residual identities. All are deterministic in `seed`, so an
online drafter trainer and the engine built from the same policy and seed agree before the first swap.
"""
from __future__ import annotations

import importlib

import torch

from ..engine.methods import TRAINABLE_METHODS, SpecConfig, get_method, model_method
from ..model import CausalLM


@torch.no_grad()
def active_layers(policy: CausalLM, floor: float = 0.1) -> list[int]:
    """The decoder layers whose residual writes (attention and MLP output projections) have at least `floor`
    of the largest one's norm: every layer of a trained model, the real ones of a grown one."""
    norms = [float(layer.self_attn.o_proj.weight.norm() + layer.mlp.down_proj.weight.norm())
             for layer in policy.model.layers]
    return [i for i, n in enumerate(norms) if n >= floor * max(norms)]


def recipe(method: str):
    """The train module of model method `method` (its table row's `trainer`): `scratch`, `engine_drafter`,
    `draft_ids`, `capture_layers`, `save_module`, `online_logits`, `cli_train`, `MODULE`."""
    if method not in TRAINABLE_METHODS:
        raise ValueError(f"method={method!r} has no weights (nothing to start from scratch or train): expected one "
                         f"of {list(TRAINABLE_METHODS)}")
    return importlib.import_module(get_method(method).trainer)


def build(spec: SpecConfig, target: CausalLM, num_slots: int, max_len: int):
    """Registry hook for draft_model='scratch': the module, fp32 on the CPU, moved to the target's device and
    dtype ("auto" builds its inner drafter through the registry)."""
    trainer = recipe(model_method(spec))
    p = next(target.parameters())
    module = trainer.scratch(target, 0).to(device=p.device, dtype=p.dtype).eval().requires_grad_(False)
    return trainer.engine_drafter(module, target, num_slots, max_len)
