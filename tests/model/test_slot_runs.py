"""Reading the KV cache by stretches of consecutive slots gives the same attention as gathering the rows."""
import torch

from specrl.model.layers import SlotRuns, cached_attention, slot_index


def test_slot_index_picks_slice_runs_or_gather():
    assert slot_index([3, 4, 5], "cpu") == slice(3, 6)
    runs = slot_index([0, 1, 4, 5, 6, 9], "cpu")
    assert isinstance(runs, SlotRuns) and runs.runs == ((0, 0, 2), (4, 2, 3), (9, 5, 1))
    assert runs.index.tolist() == [0, 1, 4, 5, 6, 9]
    scattered = slot_index(list(range(0, 40, 2)), "cpu", max_runs=16)  # 20 stretches of one: gather
    assert isinstance(scattered, torch.Tensor) and scattered.tolist() == list(range(0, 40, 2))


def test_runs_and_gather_attend_alike():
    gen = torch.Generator().manual_seed(0)
    S, Hkv, H, L, D, B, T = 12, 2, 4, 32, 8, 5, 3
    cache = [torch.randn(S, Hkv, L, D, generator=gen) for _ in range(2)]
    slots = [1, 2, 6, 7, 10]
    positions = torch.tensor([[5, 6, 7], [9, 10, 11], [2, 3, 4], [20, 21, 22], [0, 1, 2]])  # [B, T]
    q = torch.randn(B, H, T, D, generator=gen)
    k, v = torch.randn(B, Hkv, T, D, generator=gen), torch.randn(B, Hkv, T, D, generator=gen)
    by_runs = cached_attention(q, k, v, tuple(c.clone() for c in cache), slot_index(slots, "cpu"), positions)
    gather = cached_attention(q, k, v, tuple(c.clone() for c in cache), torch.tensor(slots), positions)
    assert isinstance(slot_index(slots, "cpu"), SlotRuns)
    torch.testing.assert_close(by_runs, gather)  # equal up to float rounding of the smaller SDPA batches
