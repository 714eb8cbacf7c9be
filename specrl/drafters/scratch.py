"""Cold start of a model drafter: `SpecConfig(draft_model="scratch")` builds one from the policy itself, by
its method's recipe (the `scratch` member of its class, drafters/<method>/method.py).

Recipes copy only active layers, those that write into the residual stream: a grown policy
(specrl/tasks/grow.py) has layers that start as residual identities. All are deterministic in `seed`, so an
online drafter trainer and the engine built from the same policy and seed agree before the first swap.
"""
from __future__ import annotations

import torch

from ..model import CausalLM


@torch.no_grad()
def active_layers(policy: CausalLM, floor: float = 0.1) -> list[int]:
    """The decoder layers whose residual writes (attention and MLP output projections) have at least `floor`
    of the largest one's norm: every layer of a trained model, the real ones of a grown one."""
    norms = [float(layer.self_attn.o_proj.weight.norm() + layer.mlp.down_proj.weight.norm())
             for layer in policy.model.layers]
    return [i for i, n in enumerate(norms) if n >= floor * max(norms)]


def cold_start(method, target: CausalLM, num_slots: int, max_len: int):
    """The engine drafter of model method `method` for draft_model='scratch': its module made from the policy
    (fp32 on the CPU), moved to the target's device and dtype."""
    p = next(target.parameters())
    module = method.scratch(target, 0).to(device=p.device, dtype=p.dtype).eval().requires_grad_(False)
    return method.engine_drafter(module, target, num_slots, max_len)
