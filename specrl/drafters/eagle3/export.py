"""EAGLE-3 heads in the public layouts that vLLM and SGLang load, and reduced draft vocabularies.

    counts = token_counts(token_id_lists, vocab_size)             # [V] frequency in the training data
    ids = draft_vocab(counts, 8192)                              # [Vd] the most frequent, ascending
    small = with_draft_vocab(head, policy.lm_head.weight, ids)   # own lm_head over them + d2t
    export_eagle3(small or head, out_dir, policy.config, policy.lm_head.weight)   # layout="speculators" too

"eagle3" is SpecForge's `LlamaForCausalLMEagle3` layout, "speculators" the one newer vLLM prefers. Both omit
embed_tokens (the loaders share the target's); a full-vocabulary head exports with the target's lm_head and
no d2t/t2d. Each key beside the loader function that reads it: docs/drafter_export.md.
"""
from __future__ import annotations

import logging
from pathlib import Path

import torch

from ...model.config import ARCHS
from .drafter import check_compatible
from .head import Eagle3Config, Eagle3Head, vllm_layer_ids, write_head_dir

LAYOUTS = ("eagle3", "speculators")
log = logging.getLogger("specrl")


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
        raise ValueError(f"this head already drafts over {head.config.draft_vocab_size} tokens: reduce the "
                         "full-vocabulary head it came from (train-drafter without --draft-vocab-size)")
    cfg = Eagle3Config(**{**head.config.__dict__, "draft_vocab_size": len(ids)})
    small = Eagle3Head(cfg).to(dtype=next(head.parameters()).dtype)
    small.load_state_dict(head.state_dict(), strict=False)
    small.lm_head.weight.copy_(lm_head_weight[ids])
    small.d2t.copy_(ids - torch.arange(len(ids)))
    return small.eval()


def check_fits(head: Eagle3Head, target_cfg, source: str = "in memory") -> None:
    """The head's vocabulary, width and layers fit the target, and its d2t maps each draft id to a distinct
    target id; errors name the bad value and the fix."""
    hc = head.config
    if head.lm_head is not None and hc.vocab_size != target_cfg.vocab_size:
        raise ValueError(f"EAGLE-3 head {source!r} drafts over {hc.draft_vocab_size} tokens of a {hc.vocab_size}-token "
                         f"vocabulary, but the policy has {target_cfg.vocab_size} tokens: its d2t maps into another "
                         "tokenizer's ids; export it with the policy it was trained on (--model DIR) or train a "
                         "head for this one (`specrl train-drafter --method eagle3 --model DIR`)")
    check_compatible(head, target_cfg, source)
    if head.lm_head is None:
        return
    ids = head.target_ids  # [Vd]
    bad = ids[(ids < 0) | (ids >= target_cfg.vocab_size)]
    if len(bad):
        raise ValueError(f"the head's draft vocabulary maps draft ids to target ids {bad[:5].tolist()}, outside the "
                         f"policy's vocabulary 0..{target_cfg.vocab_size - 1} (d2t is corrupt or from another "
                         "tokenizer): rebuild it with --draft-vocab-size N --data FILE from this policy's samples")
    if len(ids.unique()) != len(ids):
        raise ValueError(f"the head's d2t maps {len(ids)} draft ids to only {len(ids.unique())} distinct target ids: "
                         "each target token must appear once; rebuild it with --draft-vocab-size N --data FILE")


def check_servable(layers, num_layers: int, allow_last_layer: bool = False) -> None:
    """SGLang (`LlamaModel.forward` captures `hidden_states + residual` before layer i, i < L) and vLLM
    before its `EagleModelMixin` capture code (the same loop) cannot deliver the last layer's output.
    Raises unless `allow_last_layer`, which logs a warning instead."""
    last = num_layers - 1
    if last not in layers:
        return
    message = (f"the head fuses target layers {list(layers)} and layer {last} is the policy's last (vLLM id "
               f"{last + 1}): SGLang, and vLLM before its EagleModelMixin capture code, capture only the inputs "
               f"of layers 0..{last}, so they cannot serve it")
    if not allow_last_layer:
        raise ValueError(f"{message}. Retrain on layers <= {num_layers - 2} (`specrl train-drafter --method eagle3 "
                         f"--eagle3-layers ...`), or pass --allow-last-layer for a vLLM that captures id {last + 1}")
    log.warning("%s; exporting anyway (--allow-last-layer)", message)


def layer_shape(cfg: Eagle3Config, dtype: torch.dtype, target_cfg) -> dict:
    """The decoder layer's Llama keys, shared by both layouts."""
    hf = {"model_type": "llama", "num_hidden_layers": 1, "hidden_act": "silu", "hidden_size": cfg.hidden_size,
          "intermediate_size": cfg.intermediate_size, "num_attention_heads": cfg.num_heads,
          "num_key_value_heads": cfg.num_kv_heads, "head_dim": cfg.head_dim, "rms_norm_eps": cfg.rms_norm_eps,
          "rope_theta": cfg.rope_theta, "rope_scaling": None, "vocab_size": cfg.vocab_size,
          "max_position_embeddings": target_cfg.max_position_embeddings, "tie_word_embeddings": False,
          "attention_bias": False, "mlp_bias": False, "torch_dtype": str(dtype).removeprefix("torch.")}
    hf.update({k: getattr(target_cfg, k) for k in ("bos_token_id", "eos_token_id", "pad_token_id")
               if getattr(target_cfg, k, None) not in (None, [])})
    return hf


def eagle3_config(cfg: Eagle3Config, dtype: torch.dtype, target_cfg) -> dict:
    return {"architectures": ["LlamaForCausalLMEagle3"], **layer_shape(cfg, dtype, target_cfg),
            "draft_vocab_size": cfg.draft_vocab_size or cfg.vocab_size, "target_hidden_size": cfg.hidden_size,
            "norm_before_residual": False,
            # each reader's own numbering: vLLM's gpu_model_runner reads the top-level ids as layer inputs,
            # SGLang's model_runner and SpecForge the nested ones as layer outputs (SGLang adds 1 itself)
            "eagle_aux_hidden_state_layer_ids": vllm_layer_ids(cfg.target_hidden_layers),
            "eagle_config": {"eagle_aux_hidden_state_layer_ids": list(cfg.target_hidden_layers),
                             "use_aux_hidden_state": True},
            "target_hidden_layers": list(cfg.target_hidden_layers)}  # specrl's own key (outputs)


def speculators_config(cfg: Eagle3Config, dtype: torch.dtype, target_cfg, verifier: str,
                       speculative_tokens: int) -> dict:
    return {"architectures": ["Eagle3Speculator"], "speculators_model_type": "eagle3",
            "transformer_layer_config": layer_shape(cfg, dtype, target_cfg),
            "draft_vocab_size": cfg.draft_vocab_size or cfg.vocab_size, "target_hidden_size": cfg.hidden_size,
            "norm_before_residual": False,  # vLLM's update_eagle3 defaults it to true; specrl's head is false
            "norm_before_fc": False,
            "eagle_aux_hidden_state_layer_ids": vllm_layer_ids(cfg.target_hidden_layers),
            "speculators_config": {
                "algorithm": "eagle3", "default_proposal_method": "greedy",
                "proposal_methods": [{"proposal_type": "greedy", "speculative_tokens": speculative_tokens}],
                "verifier": {"name_or_path": verifier, "architectures": [ARCHS[target_cfg.arch].hf_class]}},
            "torch_dtype": str(dtype).removeprefix("torch.")}


def public_tensors(head: Eagle3Head, lm_head_weight: torch.Tensor | None, dtype: torch.dtype,
                   layout: str) -> dict[str, torch.Tensor]:
    """The tensors to write. `d2t`/`t2d` only for a reduced draft vocabulary: vLLM creates its
    `draft_id_to_target_id` buffer only when draft_vocab_size < vocab_size and refuses a d2t it has no buffer
    for; SGLang, SpecForge and speculators read a missing d2t as the identity map."""
    state = {k: v for k, v in head.state_dict().items() if k != "d2t"}
    full = head.lm_head is None or head.config.draft_vocab_size == head.config.vocab_size
    if head.lm_head is not None and full:  # a draft "vocabulary" of every id: its rows in target order, no d2t
        state["lm_head.weight"] = head.lm_head.weight.detach()[head.draft_id_of]  # [V, D]
    if head.lm_head is None:
        if lm_head_weight is None:
            raise ValueError("a full-vocabulary EAGLE-3 head drafts with the policy's lm_head, which the public "
                             "layout stores in the drafter: pass the policy (--model DIR)")
        state["lm_head.weight"] = lm_head_weight
    if layout == "speculators":  # its own module name; vLLM's loader reads both
        state = {k.replace("midlayer.", "layers.0.", 1): v for k, v in state.items()}
    tensors = {k: v.detach().to("cpu", dtype).contiguous() for k, v in state.items()}
    if full:
        return tensors
    return {**tensors, "d2t": head.d2t.cpu().contiguous(), "t2d": head.draft_id_of.cpu() >= 0}  # t2d: [V] bool


def export_eagle3(head: Eagle3Head, out: str | Path, target_cfg, lm_head_weight: torch.Tensor | None = None, *,
                  dtype: torch.dtype | None = None, layout: str = "eagle3", verifier: str | None = None,
                  allow_last_layer: bool = False, speculative_tokens: int = 3, source: str = "in memory") -> Path:
    """Writes `head` for the policy whose ModelConfig is `target_cfg` in `layout`. A full-vocabulary head
    needs the target's lm_head weight [V, D]; the speculators layout names its verifier (the policy's path)."""
    if layout not in LAYOUTS:
        raise ValueError(f"layout {layout!r}: expected one of {list(LAYOUTS)}")
    if layout == "speculators" and not verifier:
        raise ValueError("the speculators layout names its verifier: pass the policy's path or hub name (verifier=)")
    check_fits(head, target_cfg, source)
    check_servable(head.config.target_hidden_layers, target_cfg.num_layers, allow_last_layer)
    dtype = dtype or next(head.parameters()).dtype
    tensors = public_tensors(head, lm_head_weight, dtype, layout)
    hf = (eagle3_config(head.config, dtype, target_cfg) if layout == "eagle3"
          else speculators_config(head.config, dtype, target_cfg, verifier, speculative_tokens))
    return write_head_dir(out, hf, tensors)
