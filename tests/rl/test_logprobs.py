import math

import pytest
import torch

from specrl.rl import token_logprobs


def test_by_hand_temperature_one():
    # logits [0, ln 3] -> p = [0.25, 0.75]; token 1: ln 0.75 = -0.2877, token 0: ln 0.25 = -1.3863
    logits = torch.tensor([[[0.0, math.log(3)], [0.0, math.log(3)]]])  # [1, 2, 2]
    out = token_logprobs(logits, torch.tensor([[1, 0]]))
    torch.testing.assert_close(out, torch.tensor([[math.log(0.75), math.log(0.25)]]))


def test_temperature_scales_logits():
    # logits [0, 2 ln 3] / 2 = [0, ln 3]: the same p = [0.25, 0.75]
    logits = torch.tensor([[[0.0, 2 * math.log(3)]]])
    out = token_logprobs(logits, torch.tensor([[1]]), temperature=2.0)
    torch.testing.assert_close(out, torch.tensor([[math.log(0.75)]]))


def test_temperature_zero_uses_temperature_one():
    logits = torch.randn(2, 3, 5)
    tokens = torch.randint(0, 5, (2, 3))
    torch.testing.assert_close(token_logprobs(logits, tokens, 0.0), token_logprobs(logits, tokens, 1.0))


def test_matches_log_softmax_gather():
    logits = torch.randn(2, 3, 11).bfloat16()
    tokens = torch.randint(0, 11, (2, 3))
    ref = torch.log_softmax(logits.float() / 0.7, -1).gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
    out = token_logprobs(logits, tokens, 0.7)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, ref)


def test_errors():
    with pytest.raises(ValueError, match="temperature=-1"):
        token_logprobs(torch.zeros(1, 1, 2), torch.zeros(1, 1, dtype=torch.long), -1.0)
    with pytest.raises(ValueError, match="must agree"):
        token_logprobs(torch.zeros(1, 2, 2), torch.zeros(1, 1, dtype=torch.long))
