"""Decoder building blocks shared by the policy, the draft model, EAGLE-3 and MTP heads.

With a cache, attention writes its keys/values and reads the cache through specrl.model.attention (the one
KV seam); without one, whole rows attend causally with SDPA.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .attention import AttentionMetadata, LayerKV, cached_attention, default_scale
from .attention import masked_attention  # noqa: F401  (specrl bench kernels times it)
from .config import ModelConfig

KV = LayerKV  # k_cache, v_cache: [S, Hkv, L, D] each


def skip_cudnn_attention(device) -> None:
    """On a GPU, turns PyTorch's cuDNN attention off for the process (flash, memory-efficient and math stay):
    it builds a graph per new (batch, length) shape, and engine steps seldom repeat a shape (docs/memory.md)."""
    if torch.device(device).type == "cuda":
        torch.backends.cuda.enable_cudnn_sdp(False)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype == torch.float32:  # one fused kernel on the decode hot path
            return F.rms_norm(x, (x.shape[-1],), self.weight, self.eps)
        # HF order for half precision: normalise in fp32, cast, then scale, in few kernels (decode is launch-bound)
        return self.weight * F.rms_norm(x.float(), (x.shape[-1],), None, self.eps).to(x.dtype)


def rope_cos_sin(positions: torch.Tensor, head_dim: int, theta: float, dtype) -> tuple[torch.Tensor, torch.Tensor]:
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, device=positions.device, dtype=torch.float32) / head_dim))
    freqs = positions.float()[..., None] * inv_freq  # [B, T, D/2]
    emb = torch.cat((freqs, freqs), dim=-1)  # [B, T, D]
    return emb.cos().to(dtype)[:, None], emb.sin().to(dtype)[:, None]  # [B, 1, T, D]


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


def packed_positions(segments: tuple[int, ...], device) -> torch.Tensor:
    """Positions [1, N] of rows of lengths `segments` packed into one sequence: each row's restart at 0."""
    starts = torch.tensor((0,) + segments[:-1], device=device).cumsum(0)  # [b] each row's first index
    lengths = torch.tensor(segments, device=device)  # [b]
    flat = torch.arange(sum(segments), device=device)  # [N]
    return (flat - starts.repeat_interleave(lengths))[None]  # [1, N]


def segment_attention(q, k, v, segments: tuple[int, ...]) -> torch.Tensor:
    """Causal attention within each of the rows packed along T (lengths `segments`, summing to T), never across
    them: q [1, H, T, D], k, v [1, Hkv, T, D] -> [1, H, T, D]. One attention call a row; a block-diagonal mask would
    compute (sum T_i)^2 scores, padding would compute b * max(T_i)^2 (docs/results/packing.md)."""
    parts = zip(q.split(segments, 2), k.split(segments, 2), v.split(segments, 2))
    return torch.cat([F.scaled_dot_product_attention(qi, ki, vi, is_causal=True, enable_gqa=True)
                      for qi, ki, vi in parts], 2)


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        hd, bias = cfg.head_dim, cfg.qkv_bias
        self.num_heads, self.num_kv_heads, self.head_dim = cfg.num_heads, cfg.num_kv_heads, hd
        self.rope_theta, self.scale = cfg.rope_theta, default_scale(hd)
        self.q_proj = nn.Linear(cfg.hidden_size, cfg.num_heads * hd, bias=bias)
        self.k_proj = nn.Linear(cfg.hidden_size, cfg.num_kv_heads * hd, bias=bias)
        self.v_proj = nn.Linear(cfg.hidden_size, cfg.num_kv_heads * hd, bias=bias)
        self.o_proj = nn.Linear(cfg.num_heads * hd, cfg.hidden_size, bias=False)
        self.q_norm = RMSNorm(hd, cfg.rms_norm_eps) if cfg.qk_norm else None
        self.k_norm = RMSNorm(hd, cfg.rms_norm_eps) if cfg.qk_norm else None

    def forward(self, x, cos, sin, kv: KV | None = None, meta: AttentionMetadata | None = None,
                segments: tuple[int, ...] | None = None) -> torch.Tensor:
        """With `kv` and `meta`: writes this forward's keys/values and attends over the cache. Without: causal
        attention over each row, or with `segments` over each packed row of x [1, T, D]."""
        B, T, _ = x.shape
        q = self.q_proj(x).view(B, T, self.num_heads, self.head_dim)  # [B, T, H, D]
        k = self.k_proj(x).view(B, T, self.num_kv_heads, self.head_dim)  # [B, T, Hkv, D]
        v = self.v_proj(x).view(B, T, self.num_kv_heads, self.head_dim)
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        q = apply_rope(q.transpose(1, 2), cos, sin)  # [B, H, T, D]
        k = apply_rope(k.transpose(1, 2), cos, sin)  # [B, Hkv, T, D]
        v = v.transpose(1, 2)
        if kv is not None:
            out = cached_attention(q, k, v, kv, meta, self.scale)
        elif segments is None:
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        else:
            out = segment_attention(q, k, v, segments)
        return self.o_proj(out.transpose(1, 2).reshape(B, T, -1))


class MLP(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.gate_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.up_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.self_attn = Attention(cfg)
        self.mlp = MLP(cfg)
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)

    def forward(self, x, cos, sin, kv: KV | None = None, meta: AttentionMetadata | None = None,
                segments: tuple[int, ...] | None = None):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, kv, meta, segments)
        return x + self.mlp(self.post_attention_layernorm(x))
