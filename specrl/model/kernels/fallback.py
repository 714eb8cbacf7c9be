"""The torch path of `decode_attention`: SDPA over each row's own length, for devices, dtypes and head sizes the
kernel does not cover, for autograd, and where the kernel cannot be built.

Rows are sorted by length and grouped so that no row in a group is padded by more than a quarter of its length or
PAD positions, whichever is more (a call costs about as much as reading that many positions more per row); each
group is one masked SDPA call over its longest row, so the positions a shorter row is padded with must hold finite
values (masked, never weighted), as under the dense mask before. A group of one reads its cache row as a view; a
larger group gathers its rows (a copy of what it reads)."""
from __future__ import annotations

import torch
import torch.nn.functional as F

SLACK = 1.25  # a group's longest row over its shortest
PAD = 128  # positions of padding a row may carry anyway


def sdpa(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, scale: float) -> torch.Tensor:
    """q [B, H, T, D] over keys, values [B, Hkv, L, D] under mask [B, 1, T, L] -> [B, H, T, D]. On a CPU in half
    precision the G = H / Hkv query heads of a KV head are folded into the query length: torch's `enable_gqa`
    takes a much slower path there, and the fold computes the same attention."""
    B, H, T, D = q.shape
    G = H // keys.shape[1]
    if G == 1 or q.device.type != "cpu" or q.dtype == torch.float32:
        return F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, scale=scale, enable_gqa=True)
    L = mask.shape[-1]
    folded = mask.expand(B, G, T, L).reshape(B, 1, G * T, L)  # row g*T + t: query t's mask
    out = F.scaled_dot_product_attention(q.reshape(B, keys.shape[1], G * T, D), keys, values, attn_mask=folded,
                                         scale=scale)
    return out.view(B, H, T, D)


def groups(lengths: list[int]) -> list[list[int]]:
    """Row indices grouped by length, longest first, each row within SLACK or PAD of its group's longest."""
    order = sorted(range(len(lengths)), key=lambda b: -lengths[b])
    out: list[list[int]] = []
    for b in order:
        if out and (lengths[b] * SLACK >= lengths[out[-1][0]] or lengths[out[-1][0]] - lengths[b] <= PAD):
            out[-1].append(b)
        else:
            out.append([b])
    return out


def decode_attention_sdpa(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, slots: torch.Tensor,
                          positions: torch.Tensor, scale: float) -> torch.Tensor:
    """The contract of `specrl.model.kernels.decode_attention`, in torch."""
    lengths = (positions.amax(1) + 1).tolist()  # [B] each row's own length (a host sync)
    slot_of = slots.tolist()
    if len(set(lengths)) == 1 and q.shape[0] > 1:
        parts = [list(range(q.shape[0]))]
    else:
        parts = groups(lengths)
    out = torch.empty_like(q, memory_format=torch.contiguous_format)  # [B, H, T, D]
    for rows in parts:
        L = lengths[rows[0]]
        if len(rows) == 1:
            b = rows[0]
            s = slot_of[b]
            keys, values = k_cache[s, :, :L][None], v_cache[s, :, :L][None]  # views [1, Hkv, L, D]
            index = slice(b, b + 1)
        else:
            index = torch.tensor(rows, device=q.device)  # [n]
            s = slots.to(q.device)[index]  # [n]
            keys, values = k_cache[s, :, :L], v_cache[s, :, :L]  # gathers [n, Hkv, L, D]
        pos = positions[index]  # [n, T]
        mask = (torch.arange(L, device=q.device)[None, None] <= pos[:, :, None])[:, None]  # [n, 1, T, L]
        out[index] = sdpa(q[index], keys, values, mask, scale)
    return out
