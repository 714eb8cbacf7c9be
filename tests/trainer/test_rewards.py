"""Reward registry: the embedded checker, \\boxed{} exact match, math_verify, unknown names."""
from __future__ import annotations

import importlib.util
import sys

import pytest

from specrl.trainer.rewards import REWARDS, as_number, get_reward, last_boxed


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


def test_boxed_reward_compares_numbers_numerically():
    boxed = get_reward("boxed")
    assert boxed(r"\boxed{19.0}", "19") == 1.0
    assert boxed(r"\boxed{1,900}", "1900") == 1.0  # a thousands separator, not a list
    assert boxed(r"\boxed{1,9}", "19") == 0.0  # not a thousands separator: compared as text
    assert boxed(r"\boxed{\frac{1}{2}}", "0.5") == 1.0
    assert boxed(r"\boxed{-3/4}", "-0.75") == 1.0
    assert boxed(r"\boxed{\text{19}}", "19") == 1.0
    assert boxed(r"\boxed{$19$.}", "19") == 1.0
    assert boxed(r"\boxed{19.5}", "19") == 0.0
    assert boxed(r"\boxed{1/0}", "1/0") == 1.0  # not a number: the same text still matches
    assert boxed(r"\boxed{x+1}", "1+x") == 0.0  # expressions are text; math_verify compares them symbolically


def test_as_number_by_hand():
    assert [as_number(s) for s in ("42", "-3.50", ".5", "12,345", "50%", r"\dfrac{3}{4}")] == [42, -3.5, 0.5,
                                                                                              12345, 50, 0.75]
    assert [as_number(s) for s in ("x", "1/0", "1,2", "")] == [None, None, None, None]


def test_boxed_reward_is_exact_match_up_to_whitespace():
    boxed = get_reward("boxed")
    assert boxed(r"answer: \boxed{ 42 }", "42") == 1.0
    assert boxed(r"answer: \boxed{42}", r"\boxed{42}") == 1.0  # a boxed reference is unwrapped too
    assert boxed(r"\boxed{41}", "42") == 0.0
    assert boxed("42", "42") == 0.0  # no box, no reward


@pytest.mark.skipif(importlib.util.find_spec("math_verify") is not None, reason="math-verify is installed")
def test_math_verify_without_the_package_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "math_verify", None)  # not installed, whether or not this machine has it
    with pytest.raises(ImportError, match="pip install math-verify"):
        get_reward("math_verify")(r"\boxed{1/2}", "0.5")


@pytest.mark.skipif(importlib.util.find_spec("math_verify") is None, reason="math-verify is not installed")
def test_math_verify_accepts_equivalent_forms():
    assert get_reward("math_verify")(r"\boxed{\frac{1}{2}}", "0.5") == 1.0
    assert get_reward("math_verify")(r"\boxed{x+1}", "1+x") == 1.0
    assert get_reward("math_verify")(r"\boxed{18}", "19") == 0.0


@pytest.mark.skipif(importlib.util.find_spec("math_verify") is None, reason="math-verify is not installed")
def test_math_verify_works_off_the_main_thread():
    # its default timeouts use signal.alarm, which raises ValueError outside the main thread
    import threading
    got = []
    t = threading.Thread(target=lambda: got.append(get_reward("math_verify")(r"\boxed{19}", "19")))
    t.start()
    t.join()
    assert got == [1.0]


def test_unknown_reward_lists_the_valid_ones():
    with pytest.raises(ValueError, match=r"unknown reward 'nope'; valid names: .*arith.*boxed.*math_verify"):
        get_reward("nope")
    assert {"arith", "boxed", "math_verify"} <= set(REWARDS.names)


def test_flexible_reward_takes_a_filled_box_else_the_last_number():
    flexible = get_reward("flexible")
    assert flexible(r"3 + 4 = \boxed{7}", "7") == 1.0
    assert flexible(r"so \boxed{} 7", "7") == 1.0  # an empty box: the last number counts
    assert flexible("3 + 4 = 7.", "7") == 1.0 and flexible("it is 1,200 apples", "1200") == 1.0
    assert flexible(r"\boxed{8}, or maybe 7", "7") == 0.0  # a filled box wins over later numbers
    assert flexible("3 + 4 = 8", "7") == 0.0 and flexible("seven", "7") == 0.0
    assert get_reward("boxed")("3 + 4 = 7.", "7") == 0.0  # the strict reward wants the box
