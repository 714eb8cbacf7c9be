import math

import pytest
import torch

from specrl.rl import ADVANTAGES, compute_advantages, group_stats, register_advantage


def test_grpo_two_groups_of_two():
    # groups [1, 0] and [1, 0]: mean 0.5, unbiased std sqrt((0.25 + 0.25) / 1) = 1/sqrt(2)
    # advantages +-0.5 * sqrt(2) = +-0.7071
    adv = compute_advantages("grpo", torch.tensor([1.0, 0.0, 1.0, 0.0]), group_size=2, eps=0.0)
    s = 0.5 * math.sqrt(2)
    torch.testing.assert_close(adv, torch.tensor([s, -s, s, -s]))


def test_grpo_dr_grpo_rloo_one_group_of_four():
    rewards = torch.tensor([1.0, 1.0, 1.0, 0.0])
    # mean 0.75; squared deviations 3 * 0.0625 + 0.5625 = 0.75; var 0.75 / 3 = 0.25; std 0.5
    # grpo: [0.25, 0.25, 0.25, -0.75] / 0.5
    grpo = compute_advantages("grpo", rewards, group_size=4, eps=0.0)
    torch.testing.assert_close(grpo, torch.tensor([0.5, 0.5, 0.5, -1.5]))
    # dr_grpo keeps the centred reward without std division
    dr = compute_advantages("dr_grpo", rewards, group_size=4)
    torch.testing.assert_close(dr, torch.tensor([0.25, 0.25, 0.25, -0.75]))
    # rloo: r_i - mean(others): 1 - 2/3 = 1/3 for the first three, 0 - 1 = -1 for the last
    rloo = compute_advantages("rloo", rewards, group_size=4)
    torch.testing.assert_close(rloo, torch.tensor([1 / 3, 1 / 3, 1 / 3, -1.0]))


def test_arbitrary_group_ids_and_unequal_sizes():
    # group 7 = [1, 3] (mean 2, std sqrt(2)); group 3 = [2, 4] (mean 3, std sqrt(2)); group 0 = [5] alone
    rewards = torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0])
    ids = torch.tensor([7, 3, 7, 3, 0])
    adv = compute_advantages("grpo", rewards, group_ids=ids, eps=0.0)
    s = 1 / math.sqrt(2)
    # the singleton group has std 0 and centred reward 0: advantage 0, not NaN
    torch.testing.assert_close(adv, torch.tensor([-s, -s, s, s, 0.0]))
    torch.testing.assert_close(group_stats(rewards, ids).count, torch.tensor([2.0, 2.0, 2.0, 2.0, 1.0]))


def test_uniform_group_gives_zero_not_nan():
    # all-correct group: no learning signal; std 0 so eps keeps 0 / eps = 0
    adv = compute_advantages("grpo", torch.tensor([1.0, 1.0, 1.0]), group_size=3)
    torch.testing.assert_close(adv, torch.zeros(3))


def test_integer_rewards_are_cast_to_float():
    adv = compute_advantages("dr_grpo", torch.tensor([2, 0]), group_size=2)
    torch.testing.assert_close(adv, torch.tensor([1.0, -1.0]))


def test_group_size_makes_consecutive_groups():
    # groups [0, 0, 0] and [1, 1, 1] by position: means 1/3 and 2/3; dr_grpo is r - mean
    adv = compute_advantages("dr_grpo", torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 0.0]), group_size=3)
    torch.testing.assert_close(adv, torch.tensor([2 / 3, -1 / 3, -1 / 3, 1 / 3, 1 / 3, -2 / 3]))
    with pytest.raises(ValueError, match="group_size=4 does not divide the 6 rewards"):
        compute_advantages("grpo", torch.zeros(6), group_size=4)


def test_unknown_name_lists_valid_ones():
    with pytest.raises(ValueError, match="unknown advantage estimator 'gae'; valid names: dr_grpo, grpo, rloo"):
        compute_advantages("gae", torch.zeros(2), group_size=2)


def test_argument_errors():
    with pytest.raises(ValueError, match="exactly one of group_ids or group_size"):
        compute_advantages("grpo", torch.zeros(2))
    with pytest.raises(ValueError, match="exactly one"):
        compute_advantages("grpo", torch.zeros(2), group_ids=torch.zeros(2), group_size=2)
    with pytest.raises(ValueError, match="1-D"):
        compute_advantages("grpo", torch.zeros(2, 2), group_size=2)
    with pytest.raises(ValueError, match="must match"):
        compute_advantages("grpo", torch.zeros(2), group_ids=torch.zeros(3))


def test_register_new_estimator_and_duplicate():
    name = "test_max_baseline"
    if name not in ADVANTAGES:

        @register_advantage(name)
        def _max_baseline(rewards, group_ids, eps):
            return rewards - rewards.max()

    adv = compute_advantages(name, torch.tensor([1.0, 3.0]), group_size=2)
    torch.testing.assert_close(adv, torch.tensor([-2.0, 0.0]))
    with pytest.raises(ValueError, match="already registered"):
        register_advantage("grpo")(lambda r, g, e: r)
