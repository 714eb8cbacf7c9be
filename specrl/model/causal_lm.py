"""Llama / Qwen2 / Qwen3 decoder with HF-compatible parameter names."""
from __future__ import annotations

from typing import NamedTuple

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from .config import ModelConfig
from .attention import AttentionMetadata
from .layers import KV, DecoderLayer, RMSNorm, packed_positions, rope_cos_sin
from .mtp import MTPStack


class ModelOutput(NamedTuple):
    logits: torch.Tensor | None  # [B, T, V]
    hidden: tuple[torch.Tensor, ...]  # outputs of the requested layers, each [B, T, D]
    last_hidden: torch.Tensor  # final normed hidden state [B, T, D]


class CausalLM(nn.Module):
    source_path: str | None = None  # the checkpoint directory it was loaded from (load_model sets it)

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.config = cfg
        self.model = nn.ModuleDict({"embed_tokens": nn.Embedding(cfg.vocab_size, cfg.hidden_size),  # HF's names
                                    "layers": nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.num_layers)),
                                    "norm": RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)})
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        if cfg.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight
        # training only: recompute each decoder layer in the backward pass instead of keeping its activations
        self.checkpoint_layers = False
        self.mtp = MTPStack(cfg) if cfg.num_mtp_modules else None  # optional DeepSeek-V3 style heads

    def embed(self, ids: torch.Tensor) -> torch.Tensor:
        return self.model.embed_tokens(ids)

    def lm_head_logits(self, h: torch.Tensor) -> torch.Tensor:
        return self.lm_head(h)

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor | None = None,
                kv_cache: list[KV] | None = None, slots: torch.Tensor | None = None,
                hidden_layers: tuple[int, ...] = (), logits_index: torch.Tensor | None = None,
                compute_logits: bool = True, segments: tuple[int, ...] | None = None,
                meta: AttentionMetadata | None = None) -> ModelOutput:
        """input_ids, positions: [B, T]. With `kv_cache` (a KVCache, or one (k, v) pair per layer) and `slots` [B]
        (or the forward's `meta`, which the engine's runner builds once a step), keys/values are written at
        (slot, position) and attention reads the cache (specrl.model.attention). `logits_index` [B, N]
        selects the time steps whose logits are computed (saves the lm_head on prompt tokens). `segments`
        (training, no cache): input_ids [1, T] holds rows of these lengths back to back, each attending only
        to itself, its positions restarting at 0 (padding-free training, specrl.trainer.batch)."""
        B, T = input_ids.shape
        if segments is not None and positions is None:
            positions = packed_positions(segments, input_ids.device)  # [1, T]
        elif positions is None:
            positions = torch.arange(T, device=input_ids.device).expand(B, T)
        x = self.model.embed_tokens(input_ids)  # [B, T, D]
        cos, sin = rope_cos_sin(positions, self.config.head_dim, self.config.rope_theta, x.dtype)
        if kv_cache is not None and meta is None:
            meta = AttentionMetadata.build(slots, positions)  # shared by all layers
        hidden = []
        recompute = self.checkpoint_layers and kv_cache is None and self.training and torch.is_grad_enabled()
        for i, layer in enumerate(self.model.layers):
            if recompute:
                x = checkpoint(layer, x, cos, sin, None, None, segments, use_reentrant=False)
            else:
                x = layer(x, cos, sin, None if kv_cache is None else kv_cache[i], meta, segments)
            if i in hidden_layers:
                hidden.append(x)
        if logits_index is not None:
            x = x.gather(1, logits_index[..., None].expand(-1, -1, x.shape[-1]))  # [B, N, D]
        x = self.model.norm(x)
        logits = self.lm_head(x) if compute_logits else None
        return ModelOutput(logits, tuple(hidden), x)
