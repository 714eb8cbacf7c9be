"""Reward registry: the embedded checker, \\boxed{} exact match, math_verify, unknown names."""
from __future__ import annotations

import importlib.util

import pytest

from specrl.train.rewards import REWARDS, get_reward, last_boxed


def test_arith_reward_checks_the_final_answer_line():
    arith = get_reward("arith")
    assert arith("17+5=22\nA:22", "22") == 1.0
    assert arith("17+5=22\nA:23", "22") == 0.0
    assert arith("17+5=22", "22") == 0.0  # no A: line


def test_last_boxed_balances_braces_and_takes_the_last_box():
    assert last_boxed(r"so \boxed{\frac{1}{2}}.") == r"\frac{1}{2}"
    assert last_boxed(r"\boxed{1} then \boxed{2}") == "2"
    assert last_boxed(r"\boxed{3") is None  # cut off inside the box
    assert last_boxed("no box") is None


def test_boxed_reward_is_exact_match_up_to_whitespace():
    boxed = get_reward("boxed")
    assert boxed(r"answer: \boxed{ 42 }", "42") == 1.0
    assert boxed(r"answer: \boxed{42}", r"\boxed{42}") == 1.0  # a boxed reference is unwrapped too
    assert boxed(r"\boxed{41}", "42") == 0.0
    assert boxed("42", "42") == 0.0  # no box, no reward


@pytest.mark.skipif(importlib.util.find_spec("math_verify") is not None, reason="math-verify is installed")
def test_math_verify_without_the_package_says_how_to_install_it():
    with pytest.raises(ImportError, match="pip install math-verify"):
        get_reward("math_verify")(r"\boxed{1/2}", "0.5")


@pytest.mark.skipif(importlib.util.find_spec("math_verify") is None, reason="math-verify is not installed")
def test_math_verify_accepts_equivalent_forms():
    assert get_reward("math_verify")(r"\boxed{\frac{1}{2}}", "0.5") == 1.0


def test_unknown_reward_lists_the_valid_ones():
    with pytest.raises(ValueError, match=r"unknown reward 'nope'; valid names: .*arith.*boxed.*math_verify"):
        get_reward("nope")
    assert {"arith", "boxed", "math_verify"} <= set(REWARDS.names)
