import pytest

from specrl.tasks.reward import arith_reward, extract_answer, is_well_formed


def test_extract_answer():
    assert extract_answer("6a-7=9\n9b+5=4\n4c-8=6\nA:6") == "6"
    assert extract_answer("A:07") == "7"  # normalised like an int
    assert extract_answer("4-8=6\nA:6<eos>") == "6"
    assert extract_answer("4-8=6\nA:6\n") == "6"
    assert extract_answer("4-8=6") is None
    assert extract_answer("A:6\n4-8=6") is None  # the answer must be the last line
    assert extract_answer("") is None


@pytest.mark.parametrize(
    "completion, reward",
    [
        ("6a-7=9\n9b+5=4\n4c-8=6\nA:6", 1.0),      # right
        ("A:6", 1.0),                  # right without a scratchpad still counts
        ("6a-7=9\n9b+5=4\n4c-8=4\nA:4", 0.0),      # wrong
        ("6a-7=9\n9b+5=4\n4c-8=6\nA:", 0.0),       # malformed: no digits
        ("6a-7=9\n9b+5=4\n4c-8=6", 0.0),           # malformed: no answer line
        ("garbage A:6", 0.0),          # A: not at a line start
        ("4-8=6\nA:6A:6", 0.0),          # trailing junk
    ],
)
def test_reward(completion, reward):
    assert arith_reward(completion, "6") == reward


def test_format_bonus_is_off_by_default():
    wrong_but_tidy = "6a-7=9\n9b+5=3\n3c-8=5\nA:5"
    assert arith_reward(wrong_but_tidy, "6") == 0.0
    assert is_well_formed(wrong_but_tidy)
    assert arith_reward(wrong_but_tidy, "6", format_bonus=0.1) == 0.1
    assert arith_reward("6a-7=9\n9b+5=?\nA:5", "6", format_bonus=0.1) == 0.0
    assert arith_reward("6a-7=9\n9b+5=4\n4c-8=6\nA:6", "6", format_bonus=0.1) == 1.0
