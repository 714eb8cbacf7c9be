"""Multi-token-prediction modules (DeepSeek-V3), stored with the policy under `mtp.*` keys.

Module d (1-based) at position i combines the previous depth's hidden state h^{d-1}_i with the embedding
of token t_{i+d}: h^d_i = Block(W [RMSNorm(h^{d-1}_i); RMSNorm(Emb(t_{i+d}))]), and predicts t_{i+d+1}
through its own RMSNorm and the policy's (shared) lm_head. h^0 is the policy's final hidden state; we use
the normed one (`ModelOutput.last_hidden`), which the module's `hnorm` renormalises anyway.

HF config key: `num_nextn_predict_layers`. Keys: `mtp.layers.{d}.{hnorm,enorm,eh_proj,block,norm}.*`.
"""
from __future__ import annotations

import torch
from torch import nn

from .config import ModelConfig
from .attention import AttentionMetadata
from .layers import KV, DecoderLayer, RMSNorm, rope_cos_sin


class MTPModule(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        d = cfg.hidden_size
        self.hnorm = RMSNorm(d, cfg.rms_norm_eps)
        self.enorm = RMSNorm(d, cfg.rms_norm_eps)
        self.eh_proj = nn.Linear(2 * d, d, bias=False)
        self.block = DecoderLayer(cfg)
        self.norm = RMSNorm(d, cfg.rms_norm_eps)  # DeepSeek-V3's per-module `shared_head.norm`

    def forward(self, h: torch.Tensor, emb: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                kv: KV | None = None, meta: AttentionMetadata | None = None) -> torch.Tensor:
        """h, emb: [B, T, D] -> h^d [B, T, D] (before the module's output norm)."""
        x = self.eh_proj(torch.cat([self.hnorm(h), self.enorm(emb)], dim=-1))  # [B, T, D]
        return self.block(x, cos, sin, kv, meta)


class MTPStack(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        if cfg.num_mtp_modules < 1:
            raise ValueError(f"MTPStack needs num_mtp_modules >= 1, got {cfg.num_mtp_modules}: set it in the config")
        self.head_dim, self.rope_theta = cfg.head_dim, cfg.rope_theta
        self.layers = nn.ModuleList(MTPModule(cfg) for _ in range(cfg.num_mtp_modules))

    @property
    def depth(self) -> int:
        return len(self.layers)

    def module_for(self, d: int) -> MTPModule:
        """Module for draft depth d (1-based); depths past the stack reuse the last module."""
        return self.layers[min(d, self.depth) - 1]

    def step(self, d: int, h: torch.Tensor, emb: torch.Tensor, positions: torch.Tensor,
             kv: KV | None = None, meta: AttentionMetadata | None = None) -> torch.Tensor:
        """One depth: h^{d-1}, Emb(t_{i+d}) [B, T, D] at positions [B, T] -> h^d [B, T, D]; with `kv`, attention
        reads that cache under `meta` (whose positions are these)."""
        cos, sin = rope_cos_sin(positions, self.head_dim, self.rope_theta, h.dtype)
        return self.module_for(d)(h, emb, cos, sin, kv, meta)

    def logits(self, d: int, h: torch.Tensor, lm_head: nn.Module) -> torch.Tensor:
        return lm_head(self.module_for(d).norm(h))  # [B, T, V]

    def unroll(self, h0: torch.Tensor, input_ids: torch.Tensor, embed, lm_head: nn.Module,
               depths: int) -> list[torch.Tensor]:
        """Teacher-forced training pass over whole rows (no cache). h0: [B, T, D]; input_ids: [B, T].
        Returns logits [B, T-d, V] for d = 1..depths; entry i predicts t_{i+d+1}."""
        B, T = input_ids.shape
        h, out = h0, []
        for d in range(1, min(depths, T - 1) + 1):
            n = T - d  # positions i whose t_{i+d} exists
            h = h[:, :n]
            positions = torch.arange(n, device=h.device).expand(B, n)  # [B, n]
            h = self.step(d, h, embed(input_ids[:, d:d + n]), positions)  # [B, n, D]
            out.append(self.logits(d, h, lm_head))
        return out
