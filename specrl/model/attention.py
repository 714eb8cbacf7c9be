"""The one seam between attention and the KV cache: a `KVCache` (per-layer position-indexed keys and values) and
an `AttentionMetadata` record per forward (cache slot, positions and context length of each row).

Slot `s`, position `p` lives at `k[s, :, p]`. A query at position p attends to positions 0..p of its row's slot,
so each row reads its own length only, and entries a rejected draft left behind are never read: the next forward
overwrites them first. `attend` is the only place the cached path reads the cache: it calls the compiled kernel
(`specrl.model.kernels.decode_attention`) for decode and verify forwards where it takes the inputs (CPU, fp32 or
bf16, a built kernel), else `grouped_sdpa`, the reference. SPECRL_ATTENTION=sdpa|kernel forces a path
(`specrl.model.kernels.forced_path`).
"""
from __future__ import annotations

import math
from functools import cached_property
from typing import NamedTuple

import torch
import torch.nn.functional as F

from . import kernels

# the kernel serves decode and verify (k + 1 <= 17 queries a row); a prompt's prefill, hundreds of queries a row,
# is one SDPA call per group, as compute-bound as attention gets
KERNEL_MAX_QUERIES = 32


class LayerKV(NamedTuple):
    """One layer's cache: k, v [S, Hkv, L, D] each. A plain (k, v) tuple is accepted wherever this is."""
    k: torch.Tensor
    v: torch.Tensor


class KVCache(list):
    """Every layer's `LayerKV`, in layer order: the target's cache and each model drafter's."""

    @property
    def shape(self) -> tuple[int, ...]:
        """[S, Hkv, L, D] of every layer's k and v."""
        return tuple(self[0].k.shape)

    def copy_slot(self, src: int, dsts: list[int], length: int) -> None:
        """Positions 0..length-1 of slot `src` into each slot of `dsts` (samples sharing a prompt's prefill)."""
        if not dsts:
            return
        dst = torch.tensor(dsts, device=self[0].k.device)
        for k, v in self:
            k[dst, :, :length] = k[src, :, :length]
            v[dst, :, :length] = v[src, :, :length]


class AttentionMetadata:
    """What one forward's cached attention needs, shared by all its layers: `slots` [B] (row b's cache slot) and
    `positions` [B, T] (the positions its T queries write and attend up to). Right-padded rows keep T queries
    each: a pad writes past its row, where the next forward overwrites it unread. The host copies that the SDPA
    path's grouping needs are made once, on first use (the kernel path never syncs), and so is the choice of path
    (`takes_kernel`)."""

    def __init__(self, slots: torch.Tensor, positions: torch.Tensor):
        if slots.dim() != 1 or positions.dim() != 2 or len(slots) != len(positions):
            raise ValueError(f"slots {tuple(slots.shape)}, positions {tuple(positions.shape)}: expected slots [B] "
                             "and positions [B, T] with the same B")
        self.slots, self.positions = slots, positions
        self.context_lens = positions.amax(1) + 1  # [B] positions each row reads: 0..its last query's
        self.query_lens = torch.full_like(slots, positions.shape[1])  # [B]
        self._kernel: bool | None = None  # kernels.takes, asked by the first layer

    def takes_kernel(self, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor) -> bool:
        """`kernels.takes` for this forward's first layer, kept for the others: the layers sharing a record share
        their dtype, device, head size and grad mode, and SPECRL_ATTENTION is read once a forward, not per layer."""
        if self._kernel is None:
            self._kernel = kernels.takes(q, k_cache, v_cache)
        return self._kernel

    @classmethod
    def build(cls, slots, positions: torch.Tensor) -> "AttentionMetadata":
        """From `slots` as a list of ints or a [B] tensor and `positions` [B, T]."""
        if not isinstance(slots, torch.Tensor):
            slots = torch.tensor(slots, dtype=torch.long)
        return cls(slots.to(device=positions.device, dtype=torch.long), positions.long())

    @cached_property
    def host_lens(self) -> list[int]:
        return self.context_lens.tolist()

    @cached_property
    def groups(self) -> tuple[tuple[int, int, int, int], ...]:
        """(first row, rows, first slot, length) per SDPA call of the reference path (`slot_groups`)."""
        return slot_groups(self.slots.tolist(), self.host_lens)

    @cached_property
    def masks(self) -> tuple[torch.Tensor | None, ...]:
        """Per group, [n, 1, T, length]: which positions each query sees; None where every query sees them all
        (one query a row, all rows of the group equally long)."""
        out, T = [], self.positions.shape[1]
        for row, n, _, length in self.groups or ((0, len(self.host_lens), None, max(self.host_lens)),):
            if T == 1 and min(self.host_lens[row:row + n]) == length:
                out.append(None)
            else:
                pos = self.positions[row:row + n]  # [n, T]
                out.append((torch.arange(length, device=pos.device)[None, None] <= pos[:, :, None])[:, None])
        return tuple(out)


MAX_GROUPS = 16  # SDPA calls a layer at most: past it, one gather of every row is cheaper than the calls
SMALL_GROUP = 8192  # row-positions (rows x longest) under which a group is padded rather than split: calls cost more


def slot_groups(slots: list[int], lengths: list[int]) -> tuple[tuple[int, int, int, int], ...]:
    """(first row, rows, first slot, length) per SDPA call: rows of consecutive slots, read as one view, whose
    lengths are close enough that reading each to the group's longest wastes under a quarter of the reads (or the
    group is small). Where that makes more than MAX_GROUPS calls, one group per stretch of consecutive slots; past
    MAX_GROUPS stretches, an empty tuple: one gathered call over every row (`grouped_sdpa`)."""
    split = _groups(slots, lengths, by_length=True)
    if len(split) <= MAX_GROUPS:
        return split
    runs = _groups(slots, lengths, by_length=False)
    return runs if len(runs) <= MAX_GROUPS else ()


def _groups(slots: list[int], lengths: list[int], by_length: bool) -> tuple[tuple[int, int, int, int], ...]:
    groups: list[list[int]] = []  # [first row, rows, first slot, longest, total length]
    for row, (slot, n) in enumerate(zip(slots, lengths)):
        if groups and slot == groups[-1][2] + groups[-1][1]:
            g = groups[-1]
            longest = max(g[3], n)
            padded = longest * (g[1] + 1)
            if not by_length or padded <= SMALL_GROUP or 4 * (g[4] + n) >= 3 * padded:
                g[1], g[3], g[4] = g[1] + 1, longest, g[4] + n
                continue
        groups.append([row, 1, slot, n, n])
    return tuple((first, rows, slot, longest) for first, rows, slot, longest, _ in groups)


def write_kv(layer: LayerKV, k: torch.Tensor, v: torch.Tensor, meta: AttentionMetadata) -> None:
    """k, v [B, Hkv, T, D] into the cache at (slots[b], positions[b, t])."""
    k_cache, v_cache = layer
    rows = meta.slots[:, None].expand_as(meta.positions)  # [B, T]
    k_cache[rows, :, meta.positions] = k.transpose(1, 2)  # [B, T, Hkv, D]
    v_cache[rows, :, meta.positions] = v.transpose(1, 2)


def attend(q: torch.Tensor, layer: LayerKV, meta: AttentionMetadata, scale: float) -> torch.Tensor:
    """q [B, H, T, D] over the cache rows of `meta` (keys already written) -> [B, H, T, D]."""
    k_cache, v_cache = layer
    if q.shape[2] <= KERNEL_MAX_QUERIES and meta.takes_kernel(q, k_cache, v_cache):
        return kernels.run(q, k_cache, v_cache, meta.slots, meta.positions, scale)
    return grouped_sdpa(q, k_cache, v_cache, meta, scale)


def cached_attention(q, k, v, layer: LayerKV, meta: AttentionMetadata, scale: float | None = None) -> torch.Tensor:
    """Writes k, v [B, Hkv, T, D], then `attend`s q [B, H, T, D] -> [B, H, T, D]."""
    write_kv(layer, k, v, meta)
    return attend(q, layer, meta, default_scale(q.shape[-1]) if scale is None else scale)


def default_scale(head_dim: int) -> float:
    """1 / sqrt(head_dim), computed as SDPA computes its default."""
    return 1.0 / math.sqrt(head_dim)


def decode_attention(q, k_cache, v_cache, slots, positions, scale: float) -> torch.Tensor:
    """`attend` in the kernel's signature: q [B, H, T, D]; k_cache, v_cache [S, Hkv, L, D]; slots [B]; positions
    [B, T] -> [B, H, T, D]. The kernel where it takes the inputs, else `sdpa_attention`."""
    if kernels.takes(q, k_cache, v_cache):
        return kernels.run(q, k_cache, v_cache, slots, positions, scale)
    return sdpa_attention(q, k_cache, v_cache, slots, positions, scale)


def sdpa_attention(q, k_cache, v_cache, slots, positions, scale: float) -> torch.Tensor:
    """The reference, in the kernel's signature: q [B, H, T, D]; k_cache, v_cache [S, Hkv, L, D]; slots [B];
    positions [B, T]: query (b, t) attends to positions 0..positions[b, t] of slot slots[b] -> [B, H, T, D]."""
    return grouped_sdpa(q, k_cache, v_cache, AttentionMetadata.build(slots, positions), scale)


def grouped_sdpa(q, k_cache, v_cache, meta: AttentionMetadata, scale: float) -> torch.Tensor:
    """One SDPA call per `meta.groups` entry, over views of its slots up to the group's longest row; a mask only
    where some query of the group must not see that far."""
    if not meta.groups:  # rows in too many stretches of slots: one gather [B, Hkv, L, D] of them all
        length = max(meta.host_lens)
        keys, values = k_cache[meta.slots, :, :length], v_cache[meta.slots, :, :length]
        return masked_attention(q, keys, values, meta.masks[0], scale)
    outs = []
    for (row, n, slot, length), mask in zip(meta.groups, meta.masks):
        keys, values = k_cache[slot:slot + n, :, :length], v_cache[slot:slot + n, :, :length]  # views [n, Hkv, L, D]
        outs.append(masked_attention(q[row:row + n], keys, values, mask, scale))
    return outs[0] if len(outs) == 1 else torch.cat(outs)


def masked_attention(q, keys, values, mask: torch.Tensor | None, scale: float | None = None) -> torch.Tensor:
    """q [B, H, T, D] over keys, values [B, Hkv, L, D] under mask [B, 1, T, L] (None: all) -> [B, H, T, D]. On a CPU
    in half precision each KV head's G = H / Hkv query heads are folded into the query length, [B, Hkv, G*T, D]:
    torch's `enable_gqa` takes a path there that runs a decode step's attention 3-6x slower (bf16, 64 rows;
    `specrl bench kernels --parts attention`). The fold computes the same attention to bf16 rounding: bit-identical
    at most shapes, and as close to an fp32 reference as `enable_gqa` at all (tests/model/test_attention.py). fp32
    and GPUs keep `enable_gqa`."""
    B, H, T, D = q.shape
    G = H // keys.shape[1]
    if G == 1 or q.device.type != "cpu" or q.dtype == torch.float32:
        return F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, enable_gqa=True, scale=scale)
    if mask is not None:  # row g*T + t: query t's
        mask = mask.expand(B, G, T, mask.shape[-1]).reshape(B, 1, G * T, mask.shape[-1])
    out = F.scaled_dot_product_attention(q.reshape(B, keys.shape[1], G * T, D), keys, values, attn_mask=mask,
                                         scale=scale)
    return out.view(B, H, T, D)
