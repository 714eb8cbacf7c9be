"""The cached attention's GQA fold (specrl.model.attention.masked_attention): in bf16 on a CPU it folds each KV head's
query heads into the query length, and must compute the attention torch's own `enable_gqa` computes: as close to
an fp32 reference (bit-identical at most shapes, not all: the kernels block the work differently)."""
import pytest
import torch
import torch.nn.functional as F

from specrl.model.attention import masked_attention

SHAPES = [  # B, H, Hkv, T, L: decode at 64 rows (two contexts), a verify, a prefill, MHA, MQA
    (64, 9, 3, 1, 200), (64, 9, 3, 1, 256), (3, 9, 3, 5, 77), (2, 8, 2, 40, 40), (1, 4, 4, 3, 10),
    (5, 8, 1, 1, 300)]


def _inputs(B, H, Hkv, T, L, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    k_cache = torch.randn(B, Hkv, L + 50, 64, generator=g).to(dtype)  # a longer cache, read as a view
    v_cache = torch.randn(B, Hkv, L + 50, 64, generator=g).to(dtype)
    q = torch.randn(B, H, T, 64, generator=g).to(dtype)
    positions = torch.randint(0, L - T + 1, (B, 1), generator=g) + torch.arange(T)  # [B, T] each row's own length
    positions[0, -1] = L - 1
    mask = (torch.arange(L)[None, None] <= positions[:, :, None])[:, None]  # [B, 1, T, L]
    return q, k_cache[:, :, :L], v_cache[:, :, :L], mask


@pytest.mark.parametrize("shape", SHAPES)
def test_fold_is_as_close_to_fp32_as_enable_gqa(shape):
    q, k, v, mask = _inputs(*shape, torch.bfloat16)
    ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), attn_mask=mask, enable_gqa=True)
    gqa = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
    got = masked_attention(q, k, v, mask)
    assert got.shape == gqa.shape and got.dtype == torch.bfloat16
    err_gqa, err_fold = ((x.float() - ref).abs().max().item() for x in (gqa, got))
    assert err_fold <= 1.25 * err_gqa + 1e-6, (err_fold, err_gqa)
    # and the two differ by bf16 rounding of the output at most (one unit in the last place of |x| < 4)
    assert (got.float() - gqa.float()).abs().max().item() <= 2 ** -6


@pytest.mark.parametrize("shape", SHAPES)
def test_fp32_keeps_enable_gqa(shape):
    q, k, v, mask = _inputs(*shape, torch.float32)
    assert torch.equal(masked_attention(q, k, v, mask),
                       F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True))


def test_fold_keeps_each_query_its_own_mask():
    """A query must not see what another query of its row may: with every key masked but one per query, the output
    is that key's value, whichever query head reads it."""
    B, H, Hkv, T, L = 2, 6, 2, 3, 8
    q, k, v, _ = _inputs(B, H, Hkv, T, L, torch.bfloat16)
    seen = torch.tensor([[1, 4, 6], [0, 2, 7]])  # [B, T] the one key each query sees
    mask = (torch.arange(L)[None, None] == seen[:, :, None])[:, None]  # [B, 1, T, L]
    out = masked_attention(q, k, v, mask)  # [B, H, T, D]
    for b in range(B):
        for h in range(H):
            for t in range(T):
                assert torch.equal(out[b, h, t], v[b, h // (H // Hkv), seen[b, t]])
