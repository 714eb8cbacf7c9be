import math

import pytest
import torch

from specrl.rl import aggregate, aggregate_denom, clipped_policy_loss, masked_mean, masked_sum

E = math.e


def test_ratio_above_clip_with_positive_advantage():
    # ratio e; clipped to 1.2 (1 + eps); objective max(-e, -1.2) = -1.2 since advantage is 1
    out = clipped_policy_loss(torch.tensor([[1.0]]), torch.tensor([[0.0]]), torch.tensor([1.0]), 0.2, 0.2)
    torch.testing.assert_close(out.ratio, torch.tensor([[E]]))
    torch.testing.assert_close(out.loss, torch.tensor([[-1.2]]))
    assert out.clipped.tolist() == [[True]]


def test_ratio_above_clip_with_negative_advantage_is_not_clipped():
    # advantage -1: max(e, 1.2) = e; the pessimistic (unclipped) term is kept
    out = clipped_policy_loss(torch.tensor([[1.0]]), torch.tensor([[0.0]]), torch.tensor([-1.0]))
    torch.testing.assert_close(out.loss, torch.tensor([[E]]))
    assert out.clipped.tolist() == [[False]]


def test_ratio_below_clip():
    # ratio 1/e = 0.3679, lower bound 0.8
    # advantage 1: max(-0.3679, -0.8) = -0.3679 (unclipped); advantage -1: max(0.3679, 0.8) = 0.8 (clipped)
    logp, old = torch.tensor([[-1.0, -1.0]]), torch.tensor([[0.0, 0.0]])
    out = clipped_policy_loss(logp, old, torch.tensor([[1.0, -1.0]]))
    torch.testing.assert_close(out.loss, torch.tensor([[-1 / E, 0.8]]))
    assert out.clipped.tolist() == [[False, True]]


def test_clip_higher_is_asymmetric():
    # DAPO clip-higher: clip_low 0.2, clip_high 0.28
    # ratio e, advantage 1 -> -1.28; ratio 1/e, advantage -1 -> 0.8 (low side still 0.2)
    logp, old = torch.tensor([[1.0, -1.0]]), torch.zeros(1, 2)
    out = clipped_policy_loss(logp, old, torch.tensor([[1.0, -1.0]]), clip_low=0.2, clip_high=0.28)
    torch.testing.assert_close(out.loss, torch.tensor([[-1.28, 0.8]]))


def test_gradient_is_zero_where_clipped():
    # token 0: ratio 1, advantage 2: loss -2 * exp(logp - old); d/dlogp = -2
    # token 1: ratio e (clipped at 1.2), advantage 2: loss constant -2.4; gradient 0
    logp = torch.tensor([[0.0, 1.0]], requires_grad=True)
    out = clipped_policy_loss(logp, torch.zeros(1, 2), torch.tensor([2.0]))
    out.loss.sum().backward()
    torch.testing.assert_close(logp.grad, torch.tensor([[-2.0, 0.0]]))


def test_weights_scale_loss_without_gradient():
    # ratio 1, advantage 1 -> loss -1; times weight 0.5 -> -0.5
    w = torch.tensor([[0.5]], requires_grad=True)
    out = clipped_policy_loss(torch.zeros(1, 1), torch.zeros(1, 1), torch.tensor([1.0]), weights=w)
    torch.testing.assert_close(out.loss, torch.tensor([[-0.5]]))
    assert not out.loss.requires_grad


def test_masked_helpers():
    x = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [0.0, 0.0, 0.0]])
    torch.testing.assert_close(masked_sum(x, mask), torch.tensor(3.0))
    torch.testing.assert_close(masked_mean(x, mask), torch.tensor(1.5))
    # row 1 is empty: its mean is 0, not NaN
    torch.testing.assert_close(masked_mean(x, mask, dim=-1), torch.tensor([1.5, 0.0]))
    torch.testing.assert_close(masked_sum(x, mask, dim=0), torch.tensor([1.0, 2.0, 0.0]))


LOSS = torch.tensor([[1.0, 2.0, 3.0], [4.0, 9.0, 9.0]])
MASK = torch.tensor([[1, 1, 1], [1, 0, 0]])


@pytest.mark.parametrize(
    "mode, norm_len, expected",
    [
        ("token_mean", None, 2.5),  # (1 + 2 + 3 + 4) / 4 tokens
        ("seq_mean_token_mean", None, 3.0),  # (mean(1, 2, 3) = 2, mean(4) = 4) -> 3
        ("seq_mean_token_sum_norm", None, 10 / 6),  # (6 / 3 + 4 / 3) / 2, norm_len defaults to T = 3
        ("seq_mean_token_sum_norm", 4, 1.25),  # (6 / 4 + 4 / 4) / 2
    ],
)
def test_aggregate_modes(mode, norm_len, expected):
    out = aggregate(LOSS, MASK, mode, norm_len=norm_len)
    torch.testing.assert_close(out, torch.tensor(expected))


@pytest.mark.parametrize("mode", ["token_mean", "seq_mean_token_mean", "seq_mean_token_sum_norm"])
def test_aggregate_micro_batches_sum_to_full_batch(mode):
    # gradient accumulation: each row as its own micro-batch, divided by the whole batch's count
    full = aggregate(LOSS, MASK, mode)
    denom = aggregate_denom(MASK, mode)
    parts = [aggregate(LOSS[i : i + 1], MASK[i : i + 1], mode, norm_len=3, denom=denom) for i in range(2)]
    torch.testing.assert_close(sum(parts), full)


def test_aggregate_denom_and_empty_rows():
    assert aggregate_denom(MASK, "token_mean").item() == 4
    assert aggregate_denom(MASK, "seq_mean_token_mean").item() == 2
    # an all-padding row does not count as a sequence: mean over the one real row = 1
    loss, mask = torch.tensor([[1.0, 1.0], [5.0, 5.0]]), torch.tensor([[1, 1], [0, 0]])
    torch.testing.assert_close(aggregate(loss, mask, "seq_mean_token_mean"), torch.tensor(1.0))
    # an empty batch gives 0, not NaN
    torch.testing.assert_close(aggregate(loss, torch.zeros(2, 2), "token_mean"), torch.tensor(0.0))


def test_aggregate_errors():
    with pytest.raises(ValueError, match="unknown loss aggregation 'mean'; valid names: seq_mean_token_mean, "):
        aggregate(LOSS, MASK, "mean")
    with pytest.raises(ValueError, match="must match mask shape"):
        aggregate(LOSS, MASK[:, :2], "token_mean")
