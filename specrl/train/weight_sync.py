"""Weight sync between the trainer's policy and the rollout engine's own copy of it.

The engine holds a separate model so that an optimizer step can never change weights under a running
generation; after each step the trainer's weights are copied in place into the engine (MTP modules
trained with the policy travel with it, since they are part of its state dict).
"""
from __future__ import annotations

import copy
import time

import torch

from ..engine import LLM
from ..model import CausalLM


def engine_copy(policy: CausalLM, dtype: torch.dtype | None = None) -> CausalLM:
    """A detached copy of the policy for the engine (same weights, no shared storage), in `dtype` (default:
    the policy's). A bf16 copy of an fp32 policy takes half its memory: it is allocated in bf16 and filled
    tensor by tensor, never held in fp32."""
    p = next(policy.parameters())
    dtype = dtype or p.dtype
    if dtype == p.dtype:
        model = copy.deepcopy(policy)
    else:
        with torch.device("meta"):
            model = CausalLM(policy.config).to(dtype)
        model = model.to_empty(device=p.device)
        if policy.config.tie_word_embeddings:
            model.lm_head.weight = model.model.embed_tokens.weight
        model.load_state_dict(policy.state_dict())  # copy_ casts each tensor
    model = model.eval().requires_grad_(False)
    model.source_path = getattr(policy, "source_path", None)
    return model


@torch.no_grad()
def sync_weights(policy: CausalLM, llm: LLM) -> float:
    """Copies the policy's weights into the engine; returns the seconds it took."""
    t0 = time.perf_counter()
    llm.update_weights({k: v.detach() for k, v in policy.state_dict().items()})
    return time.perf_counter() - t0


@torch.no_grad()
def weights_equal(a: CausalLM, b: CausalLM) -> bool:
    """Bitwise equality of two models' state dicts (a cheap audit after a sync)."""
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)
