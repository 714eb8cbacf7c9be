import math

import pytest
import torch

from specrl.rl import entropy_from_logits


def test_uniform_and_two_way():
    # uniform over 4: ln 4 = 1.3863
    # p = [0.75, 0.25] from logits [ln 3, 0]: -(0.75 ln 0.75 + 0.25 ln 0.25) = 0.2158 + 0.3466 = 0.5623
    logits = torch.tensor([[0.0, 0.0, 0.0, 0.0], [math.log(3), 0.0, -math.inf, -math.inf]])
    expected = torch.tensor([math.log(4), -(0.75 * math.log(0.75) + 0.25 * math.log(0.25))])
    torch.testing.assert_close(entropy_from_logits(logits), expected)


def test_deterministic_with_masked_vocab_is_zero_not_nan():
    # one finite logit: p = one-hot, H = 0; the -inf entries must not produce 0 * -inf = NaN
    out = entropy_from_logits(torch.tensor([5.0, -math.inf, -math.inf]))
    torch.testing.assert_close(out, torch.tensor(0.0))


def test_chunking_matches_reference_and_keeps_shape():
    logits = torch.randn(3, 5, 7)
    ref = torch.distributions.Categorical(logits=logits).entropy()  # [3, 5]
    torch.testing.assert_close(entropy_from_logits(logits, chunk_size=2), ref)
    torch.testing.assert_close(entropy_from_logits(logits, chunk_size=None), ref)


def test_low_precision_input_returns_float32_and_gradients_flow():
    logits = torch.randn(2, 4, requires_grad=True)
    assert entropy_from_logits(logits.bfloat16()).dtype == torch.float32
    entropy_from_logits(logits).sum().backward()
    assert logits.grad is not None and torch.isfinite(logits.grad).all()


def test_no_rows_and_bad_chunk_size():
    # no positions: an empty [0] float32 result, whatever the chunking
    assert entropy_from_logits(torch.zeros(0, 5)).shape == (0,)
    assert entropy_from_logits(torch.zeros(0, 5), chunk_size=None).dtype == torch.float32
    with pytest.raises(ValueError, match="chunk_size=0"):
        entropy_from_logits(torch.zeros(2, 5), chunk_size=0)
