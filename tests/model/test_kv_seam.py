"""The KV seam (specrl.model.attention): writes land at (slot, position), each query reads positions 0..its own of
its row's slot, whichever path `attend` takes, at ragged lengths, scattered slots, GQA ratios 1, 3 and 4 and
prefill-sized query blocks."""
import pytest
import torch

from specrl.errors import ConfigError
from specrl.model import attention, kernels
from specrl.model.attention import (AttentionMetadata, KVCache, LayerKV, attend, cached_attention, default_scale,
                                    sdpa_attention, slot_groups)

CASES = [  # H, Hkv, D, T, slots, last position of each row
    (9, 3, 64, 1, [0, 1, 2, 3], [5, 200, 190, 7]),  # decode, ragged
    (8, 2, 128, 5, [4, 1, 6], [40, 9, 120]),  # verify, scattered slots
    (4, 4, 64, 1, [2], [0]),  # one position, MHA
    (6, 2, 64, 30, [0, 1], [29, 60]),  # prefill chunks: a fresh row and a continued one
]


def _setup(H, Hkv, D, T, slots, last, S=8, L=256, seed=0):
    g = torch.Generator().manual_seed(seed)
    k_cache, v_cache = (torch.randn(S, Hkv, L, D, generator=g) for _ in range(2))
    positions = torch.tensor(last)[:, None] - T + 1 + torch.arange(T)  # [B, T]
    q = torch.randn(len(slots), H, T, D, generator=g)
    return q, LayerKV(k_cache, v_cache), torch.tensor(slots), positions.clamp_min(0)


def _reference(q, layer, slots, positions):
    """fp64 softmax attention, one query at a time: query (b, t) over positions 0..positions[b, t]."""
    B, H, T, D = q.shape
    G = H // layer.k.shape[1]
    out = torch.empty(B, H, T, D, dtype=torch.float64)
    for b in range(B):
        for t in range(T):
            n = int(positions[b, t]) + 1
            k = layer.k[slots[b], :, :n].double().repeat_interleave(G, 0)  # [H, n, D]
            v = layer.v[slots[b], :, :n].double().repeat_interleave(G, 0)
            w = torch.softmax((k @ q[b, :, t].double()[:, :, None])[..., 0] / D ** 0.5, -1)  # [H, n]
            out[b, :, t] = (w[:, None] @ v)[:, 0]
    return out


@pytest.mark.parametrize("case", CASES)
def test_attend_matches_a_per_query_reference(case):
    q, layer, slots, positions = _setup(*case)
    got = attend(q, layer, AttentionMetadata.build(slots, positions), default_scale(q.shape[-1]))
    assert got.shape == q.shape
    torch.testing.assert_close(got.double(), _reference(q, layer, slots, positions), atol=2e-6, rtol=1e-5)


@pytest.mark.parametrize("case", CASES)
def test_reference_takes_the_kernels_signature(case):
    q, layer, slots, positions = _setup(*case)
    got = sdpa_attention(q, layer.k, layer.v, slots, positions, default_scale(q.shape[-1]))
    torch.testing.assert_close(got.double(), _reference(q, layer, slots, positions), atol=2e-6, rtol=1e-5)


def test_a_row_never_reads_past_its_own_length():
    """NaN past each row's last position (rows in slots that are not consecutive, so no two share a read)."""
    q, layer, slots, positions = _setup(9, 3, 64, 2, [6, 0, 3], [10, 100, 3])
    want = _reference(q, layer, slots, positions)
    for b, s in enumerate(slots.tolist()):
        layer.k[s, :, int(positions[b].max()) + 1:] = float("nan")
        layer.v[s, :, int(positions[b].max()) + 1:] = float("nan")
    got = attend(q, layer, AttentionMetadata.build(slots, positions), default_scale(64))
    torch.testing.assert_close(got.double(), want, atol=2e-6, rtol=1e-5)


def test_cached_attention_writes_then_reads_its_own_keys():
    q, layer, slots, positions = _setup(4, 2, 64, 3, [1, 5], [2, 50])
    g = torch.Generator().manual_seed(1)
    k, v = (torch.randn(2, 2, 3, 64, generator=g) for _ in range(2))  # [B, Hkv, T, D]
    out = cached_attention(q, k, v, layer, AttentionMetadata.build(slots, positions))
    for b, s in enumerate(slots.tolist()):
        assert torch.equal(layer.k[s, :, positions[b]], k[b]) and torch.equal(layer.v[s, :, positions[b]], v[b])
    torch.testing.assert_close(out.double(), _reference(q, layer, slots, positions), atol=2e-6, rtol=1e-5)


def test_groups_join_consecutive_slots_of_similar_length_only(monkeypatch):
    slots, lengths = [0, 1, 2, 3, 7, 8, 9], [100, 90, 110, 1000, 50, 60, 55]
    assert slot_groups(slots, lengths) == ((0, 4, 0, 1000), (4, 3, 7, 60))  # small: padded, not split
    monkeypatch.setattr(attention, "SMALL_GROUP", 0)
    # slots 0-2 consecutive and alike; slot 3 far longer; 7 not consecutive; 8, 9 alike again
    assert slot_groups(slots, lengths) == ((0, 3, 0, 110), (3, 1, 3, 1000), (4, 3, 7, 60))
    alternating = [10, 10000] * 10  # 20 groups by length: one per stretch of slots instead
    assert slot_groups(list(range(20)), alternating) == ((0, 20, 0, 10000),)
    assert slot_groups(list(range(0, 40, 2)), alternating) == ()  # 20 stretches: one gathered call
    assert slot_groups([], []) == ()


def test_gathered_call_over_scattered_slots():
    q, layer, slots, positions = _setup(9, 3, 64, 2, list(range(0, 40, 2)), [5 + 9 * i for i in range(20)], S=40)
    meta = AttentionMetadata.build(slots, positions)
    assert meta.groups == ()
    got = attend(q, layer, meta, default_scale(64))
    torch.testing.assert_close(got.double(), _reference(q, layer, slots, positions), atol=2e-6, rtol=1e-5)


def test_metadata_lengths_and_bad_shapes():
    meta = AttentionMetadata.build([3, 1], torch.tensor([[4, 5, 6], [0, 1, 2]]))
    assert meta.context_lens.tolist() == [7, 3] and meta.query_lens.tolist() == [3, 3]
    assert meta.slots.dtype == torch.long
    with pytest.raises(ValueError, match="expected slots"):
        AttentionMetadata.build([0, 1, 2], torch.zeros(2, 1, dtype=torch.long))


def test_kv_cache_copy_slot():
    cache = KVCache(LayerKV(torch.randn(4, 2, 10, 8), torch.randn(4, 2, 10, 8)) for _ in range(2))
    cache.copy_slot(1, [0, 3], 6)
    for k, v in cache:
        for t in (k, v):
            assert torch.equal(t[0, :, :6], t[1, :, :6]) and torch.equal(t[3, :, :6], t[1, :, :6])
            assert not torch.equal(t[0, :, 6:], t[1, :, 6:])
    assert cache.shape == (4, 2, 10, 8)


def test_backend_env(monkeypatch):
    monkeypatch.setenv(kernels.ENV, "flash")
    with pytest.raises(ConfigError, match="expected one of sdpa, kernel"):
        kernels.forced_path()
    monkeypatch.setenv(kernels.ENV, "sdpa")
    q, layer, slots, positions = _setup(4, 2, 64, 1, [0, 2], [100, 120])
    assert not kernels.takes(q, *layer)  # the reference, even where the kernel builds


def test_attend_calls_the_kernel_for_decode_and_verify_only(monkeypatch):
    """The kernel gets the metadata's slots and positions; a prefill-sized query block stays on SDPA."""
    calls = []

    def fake(q, k_cache, v_cache, slots, positions, scale):
        calls.append((slots, positions, scale))
        return sdpa_attention(q, k_cache, v_cache, slots, positions, scale)

    monkeypatch.setattr(kernels, "run", fake)
    monkeypatch.setattr(kernels, "takes", lambda q, k, v: True)
    for T, called in ((5, True), (attention.KERNEL_MAX_QUERIES + 1, False)):
        calls.clear()
        q, layer, slots, positions = _setup(4, 2, 64, T, [0, 2], [100, 120])
        meta = AttentionMetadata.build(slots, positions)
        out = attend(q, layer, meta, 0.125)
        assert bool(calls) == called and (not called or calls[0][0] is meta.slots)
        torch.testing.assert_close(out.double(), _reference(q, layer, slots, positions), atol=2e-6, rtol=1e-5)


def test_the_path_is_chosen_once_a_forward(monkeypatch):
    """Every layer of one forward shares its metadata's choice (takes asked once, by the first layer); the next
    forward, with a new record, asks again, so SPECRL_ATTENTION set between forwards still takes effect."""
    asked = []

    def takes(q, k, v):
        asked.append(q.shape)
        return False

    monkeypatch.setattr(kernels, "takes", takes)
    q, layer, slots, positions = _setup(4, 2, 64, 1, [0, 2], [100, 120])
    for _ in range(2):  # two forwards of three layers
        meta = AttentionMetadata.build(slots, positions)
        for _ in range(3):
            torch.testing.assert_close(attend(q, layer, meta, 0.125).double(),
                                       _reference(q, layer, slots, positions), atol=2e-6, rtol=1e-5)
    assert len(asked) == 2
