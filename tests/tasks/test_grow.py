"""Growing a trained decoder keeps its function: the shipped policy is a grown model (see grow.py)."""
import pytest
import torch

from specrl.tasks.grow import grow, grown_config
from tests.helpers import tiny_model


@pytest.mark.parametrize("arch", ["qwen3", "qwen2", "llama"])
def test_grown_model_computes_the_same_logits(arch):
    small = tiny_model(seed=3, arch=arch, hidden=32, layers=2, heads=4, kv_heads=2)
    cfg = grown_config(small.config, hidden_size=96, intermediate_size=160, num_layers=5, num_heads=12,
                       num_kv_heads=6)
    big = grow(small, cfg)
    assert big.config.num_layers == 5 and big.config.num_params > 3 * small.config.num_params
    ids = torch.randint(0, 32, (3, 20))
    with torch.no_grad():
        torch.testing.assert_close(big(ids).logits, small(ids).logits, atol=1e-4, rtol=1e-4)


def test_noise_moves_the_function_a_little_and_lets_new_weights_learn():
    small = tiny_model(seed=3, hidden=32, layers=2)
    cfg = grown_config(small.config, hidden_size=64, intermediate_size=128, num_layers=3, num_heads=8,
                       num_kv_heads=4)
    ids = torch.randint(0, 32, (2, 12))
    for noise, expect_grad in ((0.0, False), (1e-3, True)):
        big = grow(small, cfg, noise_std=noise)
        logits = big(ids).logits
        gap = (logits - small(ids).logits).abs().max().item()
        assert gap < (1e-4 if noise == 0 else 0.1)
        logits.logsumexp(-1).sum().backward()
        new_cols = big.model.layers[0].self_attn.q_proj.weight.grad[:, 32:]  # reads the new dimensions
        assert bool(new_cols.abs().sum() > 0) == expect_grad
        identity_out = big.model.layers[2].self_attn.o_proj.weight  # small layers at depths 0, 1: 2 is an identity
        assert identity_out.abs().sum() == 0 and bool(identity_out.grad.abs().sum() > 0) == expect_grad


def test_small_layers_fill_the_lower_half_so_the_last_layers_are_identities():
    from specrl.tasks.grow import grown_depths
    assert grown_depths(2, 6) == [0, 3]  # EAGLE-3 may read layers <= L-2 = 4 and still see both small layers
    assert grown_depths(2, 3) == [0, 1] and grown_depths(3, 6) == [0, 2, 3] and grown_depths(1, 6) == [0]


def test_shrinking_or_changing_the_head_shape_is_refused():
    small = tiny_model(seed=0, hidden=32, layers=2, heads=4, kv_heads=2)
    with pytest.raises(ValueError, match="num_layers=1"):
        grow(small, grown_config(small.config, 64, 128, 1, 8, 4))
    with pytest.raises(ValueError, match="query heads per KV head"):
        grow(small, grown_config(small.config, 64, 128, 3, 8, 8))
