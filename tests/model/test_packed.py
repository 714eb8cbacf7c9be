"""Pre-packed bf16 linears: the same outputs as `F.linear` bit for bit, at every row count, after a refit in
place (repacked from the weight's version counter), and plain `F.linear` while gradients are on."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from specrl.model.packed import PackedLinear, can_pack, pack_linears
from tests.helpers import tiny_model

needs_packing = pytest.mark.skipif(not can_pack(torch.zeros(1, dtype=torch.bfloat16)),
                                   reason="this torch has no oneDNN packed linear")


@needs_packing
@pytest.mark.parametrize("rows", [1, 5, 64, 320])
@pytest.mark.parametrize("bias", [False, True])
def test_packed_equals_plain_at_every_row_count(rows, bias):
    lin = nn.Linear(96, 200, bias=bias).to(torch.bfloat16)
    x = torch.randn(rows, 96, generator=torch.Generator().manual_seed(rows)).to(torch.bfloat16)
    with torch.no_grad():
        expect = F.linear(x, lin.weight, lin.bias)
        packed = PackedLinear(lin)
        assert torch.equal(packed(x), expect)
        assert torch.equal(packed(x.view(1, rows, 96)), expect.view(1, rows, 200))  # [b, t, k] as the model calls


@needs_packing
def test_a_refit_in_place_repacks():
    lin = nn.Linear(32, 48, bias=False).to(torch.bfloat16)
    packed, x = PackedLinear(lin), torch.randn(4, 32).to(torch.bfloat16)
    with torch.no_grad():
        before = packed(x)
        lin.weight.detach().copy_(torch.randn(48, 32))  # what the engine's load_weights does
        after = packed(x)
    assert not torch.equal(before, after) and torch.equal(after, F.linear(x, lin.weight))


@needs_packing
def test_with_gradients_it_is_plain_linear():
    lin = nn.Linear(16, 8).to(torch.bfloat16)
    packed = PackedLinear(lin)
    out = packed(torch.randn(3, 16).to(torch.bfloat16))
    out.float().sum().backward()
    assert lin.weight.grad is not None and packed._packed is None  # nothing was packed


@needs_packing
def test_pack_linears_keeps_names_ties_and_logits():
    model = tiny_model(seed=0).to(torch.bfloat16).eval()
    ids = torch.tensor([[3, 4, 5, 6, 7]])
    with torch.no_grad():
        expect = model(ids).logits
        keys = list(model.state_dict())
        n = pack_linears(model)
        assert n == sum(1 for m in model.modules() if isinstance(m, PackedLinear)) > 0
        assert list(model.state_dict()) == keys
        assert torch.equal(model(ids).logits, expect)


def test_fp32_is_not_packed():
    model = tiny_model(seed=0)
    assert pack_linears(model) == 0 and not any(isinstance(m, PackedLinear) for m in model.modules())
