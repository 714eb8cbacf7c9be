"""Decoder building blocks shared by the policy, the draft model, EAGLE-3 and MTP heads.

Attention writes its keys/values into a position-indexed cache when one is given: slot `s`, position
`p` lives at `k_cache[s, :, p]`. Queries attend to every cached position <= their own, so entries a
rejected draft left behind are never read: the next forward overwrites them first.
"""
from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from .config import ModelConfig

KV = tuple[torch.Tensor, torch.Tensor]  # k_cache, v_cache: [S, Hkv, L, D] each


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


def attention_mask(positions: torch.Tensor) -> torch.Tensor:
    """Cached attention's mask [B, 1, T, L]: a query sees every position up to its own. Built once per
    forward (the `max` is a host sync) and shared by all layers."""
    key_pos = torch.arange(int(positions.max()) + 1, device=positions.device)
    return (key_pos[None, None, :] <= positions[:, :, None])[:, None]


def masked_attention(q, keys, values, mask: torch.Tensor) -> torch.Tensor:
    """q [B, H, T, D] over keys, values [B, Hkv, L, D] under mask [B, 1, T, L] -> [B, H, T, D]. On a CPU in half
    precision each KV head's G = H / Hkv query heads are folded into the query length, [B, Hkv, G*T, D]: torch's
    `enable_gqa` takes a path there that runs a decode step's attention 3-6x slower (bf16, 64 rows; `specrl bench
    kernels --parts attention`). The fold computes the same attention to bf16 rounding: bit-identical at most
    shapes, and as close to an fp32 reference as `enable_gqa` at all (tests/model/test_attention.py). fp32 and
    GPUs keep `enable_gqa`."""
    B, H, T, D = q.shape
    G = H // keys.shape[1]
    if G == 1 or q.device.type != "cpu" or q.dtype == torch.float32:
        return F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, enable_gqa=True)
    folded = mask.expand(B, G, T, mask.shape[-1]).reshape(B, 1, G * T, mask.shape[-1])  # row g*T + t: query t's
    out = F.scaled_dot_product_attention(q.reshape(B, keys.shape[1], G * T, D), keys, values, attn_mask=folded)
    return out.view(B, H, T, D)


class SlotRuns(NamedTuple):
    """The cache slots of a batch whose rows do not own consecutive slots: `index` [B] for the writes, `runs`
    (first slot, first row, rows) per stretch of consecutive slots for the reads, one attention call on a view
    each: gathering the rows would copy the batch's whole cache every layer, at long contexts dearer than the layer."""
    index: torch.Tensor
    runs: tuple[tuple[int, int, int], ...]


Slots = torch.Tensor | slice | SlotRuns


def cached_attention(q, k, v, kv: KV, slots: Slots, positions: torch.Tensor,
                     mask: torch.Tensor | None = None) -> torch.Tensor:
    """q: [B, H, T, D]; k, v: [B, Hkv, T, D]; slots: [B], a slice when the batch owns consecutive slots (the
    cache rows are then read as views), or `SlotRuns`; positions: [B, T]; mask: `attention_mask(positions)`
    when the caller has it -> [B, H, T, D]."""
    k_cache, v_cache = kv
    if mask is None:
        mask = attention_mask(positions)
    length = mask.shape[-1]
    if isinstance(slots, slice):
        k_cache, v_cache = k_cache[slots], v_cache[slots]  # views [B, Hkv, L, D]
        index = torch.arange(q.shape[0], device=q.device)  # [B]
    else:
        index = slots.index if isinstance(slots, SlotRuns) else slots
    rows = index[:, None].expand_as(positions)  # [B, T]
    k_cache[rows, :, positions] = k.transpose(1, 2)  # write [B, T, Hkv, D]
    v_cache[rows, :, positions] = v.transpose(1, 2)
    if isinstance(slots, SlotRuns):
        return torch.cat([masked_attention(q[r:r + n], k_cache[s:s + n, :, :length], v_cache[s:s + n, :, :length],
                                           mask[r:r + n]) for s, r, n in slots.runs])  # a view [n, Hkv, L, D] each
    if isinstance(slots, slice):
        keys, values = k_cache[:, :, :length], v_cache[:, :, :length]  # views [B, Hkv, L, D]
    else:
        keys, values = k_cache[index, :, :length], v_cache[index, :, :length]  # gathers [B, Hkv, L, D]
    return masked_attention(q, keys, values, mask)


def slot_index(slots: list[int], device, max_runs: int = 16) -> Slots:
    """How a batch owning cache `slots` (in row order) reads the cache: a slice when they are consecutive, else
    by stretches of consecutive slots (`SlotRuns`) when there are at most `max_runs`, else a gather."""
    runs, first = [], 0
    for row in range(1, len(slots) + 1):
        if row == len(slots) or slots[row] != slots[row - 1] + 1:
            runs.append((slots[first], first, row - first))
            first = row
    if len(runs) == 1:
        return slice(slots[0], slots[0] + len(slots))
    index = torch.tensor(slots, device=device)
    return SlotRuns(index, tuple(runs)) if len(runs) <= max_runs else index


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        hd, bias = cfg.head_dim, cfg.qkv_bias
        self.num_heads, self.num_kv_heads, self.head_dim = cfg.num_heads, cfg.num_kv_heads, hd
        self.rope_theta = cfg.rope_theta
        self.q_proj = nn.Linear(cfg.hidden_size, cfg.num_heads * hd, bias=bias)
        self.k_proj = nn.Linear(cfg.hidden_size, cfg.num_kv_heads * hd, bias=bias)
        self.v_proj = nn.Linear(cfg.hidden_size, cfg.num_kv_heads * hd, bias=bias)
        self.o_proj = nn.Linear(cfg.num_heads * hd, cfg.hidden_size, bias=False)
        self.q_norm = RMSNorm(hd, cfg.rms_norm_eps) if cfg.qk_norm else None
        self.k_norm = RMSNorm(hd, cfg.rms_norm_eps) if cfg.qk_norm else None

    def forward(self, x, cos, sin, positions, kv: KV | None = None, slots=None, mask=None,
                segments: tuple[int, ...] | None = None) -> torch.Tensor:
        """Without `kv`: causal attention over each row, or with `segments` over each packed row of x [1, T, D]."""
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
            out = cached_attention(q, k, v, kv, slots, positions, mask)
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

    def forward(self, x, cos, sin, positions, kv: KV | None = None, slots=None, mask=None,
                segments: tuple[int, ...] | None = None):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, positions, kv, slots, mask, segments)
        return x + self.mlp(self.post_attention_layernorm(x))
