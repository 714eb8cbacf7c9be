"""Pre-packed bf16 linears: the same outputs as `F.linear` bit for bit, at every row count, after a refit in
place (repacked from the weight's version counter), and plain `F.linear` while gradients are on."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from specrl.model import packed as packed_mod
from specrl.model.packed import PackedLinear, can_pack, cpu_packs_bf16, pack_linears, unpack_linears
from tests.helpers import tiny_model

needs_packing = pytest.mark.skipif(not can_pack(torch.zeros(1, dtype=torch.bfloat16)),
                                   reason="this torch or CPU has no oneDNN packed bf16 linear (it needs AVX-512 or AVX-NE-CONVERT)")


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
        assert unpack_linears(model) == n and not any(isinstance(m, PackedLinear) for m in model.modules())
        assert list(model.state_dict()) == keys
        assert (model.lm_head.weight is model.model.embed_tokens.weight) == model.config.tie_word_embeddings
        assert torch.equal(model(ids).logits, expect)


def test_fp32_is_not_packed():
    model = tiny_model(seed=0)
    assert pack_linears(model) == 0 and not any(isinstance(m, PackedLinear) for m in model.modules())


@needs_packing
def test_the_engine_packs_a_bf16_checkpoint_and_samples_the_same_tokens(tmp_path):
    """LLM(path, dtype=bfloat16) packs its linears; the sampled tokens and logprobs equal those of the same
    engine with plain linears, SD off and with SD, and a refit reaches the packed weights."""
    from specrl import LLM, SamplingParams, SpecConfig
    from tests.helpers import save_tiny
    path = save_tiny(tmp_path / "m")
    params = [SamplingParams(n=4, temperature=1.0, max_tokens=12, seed=s, logprobs=0) for s in range(3)]
    prompts = [[3, 4, 5], [6, 7], [8, 9, 10, 11]]
    for spec in (None, SpecConfig(method="ngram", num_speculative_tokens=3)):
        packed = LLM(str(path), dtype="bfloat16", spec=spec, kv_cache_memory="8MiB")
        assert any(isinstance(m, PackedLinear) for m in packed.model.modules())
        plain_model = tiny_model(seed=0).to(torch.bfloat16)
        plain = LLM(plain_model, spec=spec, kv_cache_memory="8MiB")  # a CausalLM keeps its plain linears
        assert not any(isinstance(m, PackedLinear) for m in plain.model.modules())
        a, b = packed.generate(prompts, params), plain.generate(prompts, params)
        assert [[c.token_ids for c in r.outputs] for r in a] == [[c.token_ids for c in r.outputs] for r in b]
        assert [[c.logprobs for c in r.outputs] for r in a] == [[c.logprobs for c in r.outputs] for r in b]
    new = {k: v + 0.01 for k, v in tiny_model(seed=0).to(torch.bfloat16).state_dict().items()}
    packed.update_weights(new)
    plain.update_weights(new)
    a, b = packed.generate(prompts, params), plain.generate(prompts, params)
    assert [[c.token_ids for c in r.outputs] for r in a] == [[c.token_ids for c in r.outputs] for r in b]


def test_the_cpu_check_agrees_with_the_kernel():
    """`cpu_packs_bf16` says yes exactly where oneDNN's reorder runs: on an AVX2-only CPU it raises, and the engine
    must not pack there (it did, and `dtype: auto`'s probe crashed on an AMD EPYC Zen 3)."""
    w = torch.randn(16, 24).to(torch.bfloat16)
    try:
        torch.ops.mkldnn._reorder_linear_weight(w, packed_mod.PACK_ROWS)
        runs = True
    except (RuntimeError, AttributeError):
        runs = False
    assert cpu_packs_bf16() == runs == can_pack(w)


def test_without_the_kernel_nothing_is_packed_and_linears_run_plain(monkeypatch):
    monkeypatch.setattr(packed_mod, "cpu_packs_bf16", lambda: False)
    model = tiny_model().to(torch.bfloat16)
    assert pack_linears(model) == 0
    assert not any(isinstance(m, PackedLinear) for m in model.modules())
    lin = nn.Linear(8, 4, bias=False).to(torch.bfloat16)
    x = torch.randn(3, 8).to(torch.bfloat16)
    with torch.no_grad():
        assert torch.equal(PackedLinear(lin)(x), F.linear(x, lin.weight))  # the fallback, not the reorder
