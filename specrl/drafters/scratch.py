"""Cold start of a model drafter: `SpecConfig(draft_model="scratch")` builds one from the policy itself.

    eagle3       a fresh head (init_head: normal(0, 0.02) matrices, unit norms), the default fused layers
    draft_model  a 2-layer model of the policy's family: its embedding, final norm, lm_head, and the first and
                 last of its active decoder layers (as `specrl train-drafter --method draft_model` starts)
    mtp          2 MTP modules, each the policy's last active decoder layer with its residual outputs zeroed and
                 a small random eh_proj (as `specrl train-drafter --method mtp` starts)

A layer is active when it writes into the residual stream: a grown policy (specrl/tasks/grow.py) has
layers that start as residual identities, and copying one of those would start a drafter from nothing.

All three are deterministic in `seed`, so an online drafter trainer and the engine that starts from the same
policy and seed hold the same weights before the first swap. Model-free methods (ngram, suffix, and auto over
one of them) have nothing to start: asking them for "scratch" is an error that says which methods can.
"""
from __future__ import annotations

import torch
from torch import nn

from ..engine.methods import SCRATCH, SpecConfig, TRAINABLE_METHODS as SCRATCH_METHODS, model_method
from ..model import CausalLM, ModelConfig
from ..model.mtp import MTPStack

DRAFT_LAYERS = 2
MTP_MODULES = 2


@torch.no_grad()
def active_layers(policy: CausalLM, floor: float = 0.1) -> list[int]:
    """The decoder layers whose residual writes (attention and MLP output projections) have at least `floor`
    of the largest one's norm: every layer of a trained model, the real ones of a grown one."""
    norms = [float(layer.self_attn.o_proj.weight.norm() + layer.mlp.down_proj.weight.norm())
             for layer in policy.model.layers]
    return [i for i, n in enumerate(norms) if n >= floor * max(norms)]


def student_from_policy(policy: CausalLM, num_layers: int) -> CausalLM:
    """Same family and vocabulary, `num_layers` layers copied from evenly spaced active policy layers."""
    cfg = ModelConfig(**{**policy.config.to_dict(), "num_layers": num_layers, "num_mtp_modules": 0})
    student = CausalLM(cfg)
    state, active = policy.state_dict(), active_layers(policy)
    picks = [active[round(i * (len(active) - 1) / max(num_layers - 1, 1))] for i in range(num_layers)]
    own = {k: v for k, v in state.items() if not k.startswith(("model.layers.", "mtp."))}
    for i, j in enumerate(picks):
        prefix = f"model.layers.{j}."
        own.update({f"model.layers.{i}.{k[len(prefix):]}": v for k, v in state.items() if k.startswith(prefix)})
    student.load_state_dict({k: v.detach().clone() for k, v in own.items()})
    return student


@torch.no_grad()
def init_stack(policy: CausalLM, num_modules: int, seed: int = 0) -> MTPStack:
    cfg = ModelConfig(**{**policy.config.to_dict(), "num_mtp_modules": num_modules})
    stack = MTPStack(cfg)
    gen = torch.Generator().manual_seed(seed)
    last = policy.model.layers[active_layers(policy)[-1]]
    for m in stack.layers:
        m.block.load_state_dict(last.state_dict())
        m.eh_proj.weight.copy_(torch.randn(m.eh_proj.weight.shape, generator=gen) * 0.02)
        # residual branches start closed, so the block starts as the identity on its fused input
        m.block.self_attn.o_proj.weight.zero_()
        m.block.mlp.down_proj.weight.zero_()
    return stack


def scratch_module(method: str, policy: CausalLM, seed: int = 0) -> nn.Module:
    """The drafter module `method` starts from, built from the policy (fp32, on the CPU)."""
    if method == "eagle3":
        from .eagle3.head import Eagle3Config, init_head
        return init_head(Eagle3Config.for_target(policy.config), seed=seed)
    if method == "draft_model":
        return student_from_policy(policy, min(DRAFT_LAYERS, policy.config.num_layers))
    if method == "mtp":
        return init_stack(policy, MTP_MODULES, seed)
    raise ValueError(f"method={method!r} cannot start from scratch: expected one of {list(SCRATCH_METHODS)}")


def drafter_for_module(method: str, module: nn.Module, target: CausalLM, num_slots: int, max_len: int):
    """The engine drafter of `method` that drafts with `module` (moved to the target's device and dtype)."""
    p = next(target.parameters())
    module = module.to(device=p.device, dtype=p.dtype).eval().requires_grad_(False)
    if method == "eagle3":
        from .eagle3.drafter import Eagle3Drafter, check_compatible
        check_compatible(module, target, SCRATCH)
        return Eagle3Drafter(module, target, num_slots, max_len)
    if method == "draft_model":
        from .draft_model.drafter import DraftModelDrafter
        return DraftModelDrafter(module, num_slots, max_len)
    from .mtp.drafter import MTPDrafter
    return MTPDrafter(target, module, num_slots, max_len)


def build(spec: SpecConfig, target: CausalLM, num_slots: int, max_len: int):
    """Registry hook for draft_model='scratch' ("auto" builds its inner drafter through the registry)."""
    method = model_method(spec)
    return drafter_for_module(method, scratch_module(method, target), target, num_slots, max_len)
