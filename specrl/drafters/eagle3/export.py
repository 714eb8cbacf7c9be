"""EAGLE-3 heads in the public layout that vLLM and SGLang load, and reduced draft vocabularies.

    counts = token_counts(token_id_lists, vocab_size)             # [V] frequency in the training data
    ids = draft_vocab(counts, 8192)                              # [Vd] the most frequent, ascending
    small = with_draft_vocab(head, policy.lm_head.weight, ids)   # own lm_head over them + d2t
    export_eagle3(small or head, out_dir, policy.lm_head.weight, policy.config)

Layout (docs/drafter_export.md; vLLM `model_executor/models/llama_eagle3.py`, SGLang `models/llama_eagle3.py`,
SpecForge configs such as `yuhuili/EAGLE3-LLaMA3.1-Instruct-8B`): `config.json` with architectures
["LlamaForCausalLMEagle3"], num_hidden_layers 1, draft_vocab_size, target_hidden_size and
eagle_config.eagle_aux_hidden_state_layer_ids; one `model.safetensors` with fc.weight, midlayer.*,
norm.weight, lm_head.weight [Vd, D], d2t [Vd] int64 (target id = draft id + d2t[draft id]) and t2d [V]
bool (True on the draft vocabulary). embed_tokens is omitted: the loaders then share the target's.
A head over the full vocabulary exports with lm_head = the target's, d2t = 0 and t2d all True.
"""
from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import save_file

from ...io import atomic_dir
from .head import Eagle3Config, Eagle3Head

ARCH = "LlamaForCausalLMEagle3"


def token_counts(sequences, vocab_size: int) -> torch.Tensor:
    """How often each token id occurs in `sequences` (lists of ids) -> [V] long."""
    flat = torch.tensor([t for seq in sequences for t in seq], dtype=torch.long)  # [N]
    if flat.numel() and (flat.min() < 0 or flat.max() >= vocab_size):
        raise ValueError(f"token ids in [{int(flat.min())}, {int(flat.max())}] do not fit vocab_size {vocab_size}: "
                         "count tokens of this policy's own samples")
    return torch.bincount(flat, minlength=vocab_size)


def draft_vocab(counts: torch.Tensor, size: int) -> torch.Tensor:
    """The `size` most frequent token ids (ties: the lower id), ascending -> [size] long."""
    if not 1 <= size <= counts.numel():
        raise ValueError(f"draft_vocab_size={size}: expected 1..{counts.numel()} (the target vocabulary)")
    order = torch.argsort(-counts, stable=True)  # most frequent first, lower id first on ties
    return order[:size].sort().values


@torch.no_grad()
def with_draft_vocab(head: Eagle3Head, lm_head_weight: torch.Tensor, ids: torch.Tensor) -> Eagle3Head:
    """A copy of a full-vocabulary head that drafts over `ids` [Vd] with the target's lm_head rows there."""
    if head.lm_head is not None:
        raise ValueError("this head already has a draft vocabulary: reduce the full-vocabulary head it came from")
    cfg = Eagle3Config(**{**head.config.__dict__, "draft_vocab_size": len(ids)})
    small = Eagle3Head(cfg).to(dtype=next(head.parameters()).dtype)
    small.load_state_dict(head.state_dict(), strict=False)
    small.lm_head.weight.copy_(lm_head_weight[ids])
    small.d2t.copy_(ids - torch.arange(len(ids)))
    return small.eval()


def public_config(cfg: Eagle3Config, dtype: torch.dtype, target_cfg=None) -> dict:
    hf = {"architectures": [ARCH], "model_type": "llama", "num_hidden_layers": 1, "hidden_act": "silu",
          "hidden_size": cfg.hidden_size, "target_hidden_size": cfg.hidden_size,
          "intermediate_size": cfg.intermediate_size, "num_attention_heads": cfg.num_heads,
          "num_key_value_heads": cfg.num_kv_heads, "head_dim": cfg.head_dim, "rms_norm_eps": cfg.rms_norm_eps,
          "rope_theta": cfg.rope_theta, "rope_scaling": None, "vocab_size": cfg.vocab_size,
          "draft_vocab_size": cfg.draft_vocab_size or cfg.vocab_size, "tie_word_embeddings": False,
          "torch_dtype": str(dtype).removeprefix("torch."),
          # vLLM/SpecForge count the inputs of target layers; specrl's own key counts their outputs
          "eagle_config": {"eagle_aux_hidden_state_layer_ids": [i + 1 for i in cfg.target_hidden_layers],
                           "use_aux_hidden_state": True},
          "target_hidden_layers": list(cfg.target_hidden_layers)}
    if target_cfg is not None:
        hf["max_position_embeddings"] = target_cfg.max_position_embeddings
        hf.update({k: getattr(target_cfg, k) for k in ("bos_token_id", "eos_token_id", "pad_token_id")
                   if getattr(target_cfg, k, None) is not None})
    return hf


def export_eagle3(head: Eagle3Head, out: str | Path, lm_head_weight: torch.Tensor | None = None, target_cfg=None,
                  dtype: torch.dtype | None = None) -> Path:
    """Writes `head` in the public layout. A full-vocabulary head needs the target's lm_head weight [V, D]."""
    cfg = head.config
    state = {k: v for k, v in head.state_dict().items() if k != "d2t"}
    if head.lm_head is None:
        if lm_head_weight is None:
            raise ValueError("a full-vocabulary EAGLE-3 head drafts with the policy's lm_head, which the public "
                             "layout stores in the drafter: pass the policy (--policy DIR)")
        state["lm_head.weight"] = lm_head_weight
        d2t = torch.zeros(cfg.vocab_size, dtype=torch.long)  # [V]
    else:
        d2t = head.d2t.cpu()  # [Vd]
    t2d = torch.zeros(cfg.vocab_size, dtype=torch.bool)  # [V]
    t2d[torch.arange(len(d2t)) + d2t] = True
    dtype = dtype or next(head.parameters()).dtype
    tensors = {k: v.detach().to("cpu", dtype).contiguous() for k, v in state.items()}
    tensors.update(d2t=d2t.contiguous(), t2d=t2d)
    with atomic_dir(out) as tmp:
        (tmp / "config.json").write_text(json.dumps(public_config(cfg, dtype, target_cfg), indent=2) + "\n")
        save_file(tensors, str(tmp / "model.safetensors"), metadata={"format": "pt"})
    return Path(out)
