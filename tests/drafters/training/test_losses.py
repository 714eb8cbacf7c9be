"""Drafter losses, checked against values worked out by hand."""
from __future__ import annotations

import math

import pytest
import torch

from specrl.drafters.training.losses import (accepted_mass, forward_kl, restrict_to, reward_weights,
                                        weighted_token_mean)


def test_forward_kl_by_hand():
    # p = softmax(log [0.5, 0.5]) = [0.5, 0.5]; q = [0.25, 0.75]
    # KL(p||q) = 0.5 log(0.5/0.25) + 0.5 log(0.5/0.75) = 0.5 (log 2 + log 2/3) = 0.5 log(4/3)
    p_logits = torch.log(torch.tensor([[[0.5, 0.5]]]))  # [1, 1, 2]
    q_logits = torch.log(torch.tensor([[[0.25, 0.75]]]))
    assert forward_kl(q_logits, p_logits).item() == pytest.approx(0.5 * math.log(4 / 3), abs=1e-6)
    assert forward_kl(p_logits, p_logits).item() == pytest.approx(0.0, abs=1e-7)


def test_forward_kl_temperature_scales_both():
    # logits [0, log 3] at T=1: p = [1/4, 3/4]; at T=2 the logits halve: [0, log sqrt 3] -> p = [1/(1+s), s/(1+s)]
    p_logits = torch.tensor([[[0.0, math.log(3)]]])
    q_logits = torch.zeros(1, 1, 2)  # uniform at any T
    s = math.sqrt(3)
    p = [1 / (1 + s), s / (1 + s)]
    expected = sum(pi * math.log(pi / 0.5) for pi in p)
    assert forward_kl(q_logits, p_logits, temperature=2.0).item() == pytest.approx(expected, abs=1e-6)


def test_accepted_mass_by_hand():
    # p = [0.5, 0.5], q = [0.25, 0.75]: sum min = 0.25 + 0.5 = 0.75 (the chance a draft from q is accepted)
    p_logits = torch.log(torch.tensor([[[0.5, 0.5]]]))
    q_logits = torch.log(torch.tensor([[[0.25, 0.75]]]))
    assert accepted_mass(q_logits, p_logits).item() == pytest.approx(0.75, abs=1e-6)
    assert accepted_mass(p_logits, p_logits).item() == pytest.approx(1.0, abs=1e-6)
    # a draft vocabulary of token 1 only: q = [1] over it, p gathered there = 0.5 -> accepted mass 0.5
    assert accepted_mass(torch.zeros(1, 1, 1), p_logits, policy_probs=torch.tensor([[[0.5]]])).item() == 0.5


def test_restrict_to_gathers_the_draft_vocabulary():
    logits = torch.tensor([[[1.0, 2.0, 3.0, 4.0]]])
    assert restrict_to(logits, torch.tensor([3, 1])).tolist() == [[[4.0, 2.0]]]
    assert restrict_to(logits, None) is logits


def test_reward_weights_by_hand():
    # one group r = [0, 1]: mean 0.5, std 0.5 -> 1 + z = [0, 2] -> clip to [0.5, 2]: [0.5, 2] -> / mean 1.25
    w = reward_weights(torch.tensor([0.0, 1.0]), group_size=2, floor=0.5, w_max=2.0, eps=0.0)
    assert w.tolist() == pytest.approx([0.4, 1.6], abs=1e-6)
    # r = [0, 0, 0, 1]: mean 0.25, std sqrt(3)/4 -> 1 + z = [1 - 1/sqrt3 x3, 1 + sqrt3] -> clip [0.25, 2]:
    # [0.4226 x3, 2] (floor not reached) -> mean (3 * 0.4226 + 2) / 4 = 0.8170 -> [0.5173 x3, 2.4480]
    w = reward_weights(torch.tensor([0.0, 0.0, 0.0, 1.0]), group_size=4, floor=0.25, w_max=2.0, eps=0.0)
    low = 1 - 1 / math.sqrt(3)
    mean = (3 * low + 2) / 4
    assert w.tolist() == pytest.approx([low / mean] * 3 + [2 / mean], abs=1e-5)
    # r = [1, 1, 1, 0]: the failed row's 1 + z = 1 - sqrt3 < 0 -> the floor 0.25, so it still teaches;
    # [1 + 1/sqrt3 x3 = 1.5774, 0.25] -> mean 1.2455 -> [1.2665 x3, 0.2007]
    w = reward_weights(torch.tensor([1.0, 1.0, 1.0, 0.0]), group_size=4, floor=0.25, w_max=2.0, eps=0.0)
    high = 1 + 1 / math.sqrt(3)
    mean = (3 * high + 0.25) / 4
    assert w.tolist() == pytest.approx([high / mean] * 3 + [0.25 / mean], abs=1e-5)
    assert w[3] > 0


def test_reward_weights_are_per_group_with_mean_one():
    # group 1 equal rewards -> 1s; group 2 [0, 1] as above; the groups never see each other's rewards
    w = reward_weights(torch.tensor([0.7, 0.7, 0.0, 1.0]), group_size=2, floor=0.5, w_max=2.0, eps=0.0)
    assert w.tolist() == pytest.approx([1.0, 1.0, 0.4, 1.6], abs=1e-6)
    w = reward_weights(torch.rand(24, generator=torch.Generator().manual_seed(0)), group_size=8)
    assert w.view(3, 8).mean(1).tolist() == pytest.approx([1.0] * 3, abs=1e-5)
    with pytest.raises(ValueError, match="groups of 4"):
        reward_weights(torch.ones(6), group_size=4)


def test_weighted_token_mean_by_hand():
    values = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    mask = torch.tensor([[1.0, 0.0], [1.0, 1.0]])
    # (1 + 3 + 4) / 3 tokens
    assert weighted_token_mean(values, mask).item() == pytest.approx(8 / 3)
    # row weights [2, 0]: (2 * 1) / 3 tokens (the denominator counts tokens, not weights)
    assert weighted_token_mean(values, mask, torch.tensor([2.0, 0.0])).item() == pytest.approx(2 / 3)
    # two micro-batches with the whole batch's denominator add up to the whole mean
    halves = sum(weighted_token_mean(values[i:i + 1], mask[i:i + 1], denom=3.0) for i in range(2))
    assert halves.item() == pytest.approx(8 / 3)
