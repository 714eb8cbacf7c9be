import pytest

from specrl.tasks.reward import arith_reward, extract_answer, is_well_formed


def test_extract_answer():
    assert extract_answer("17+5=22\nA:22") == "22"
    assert extract_answer("A:07") == "7"  # normalised like an int
    assert extract_answer("17+5=22\nA:22<eos>") == "22"
    assert extract_answer("17+5=22\nA:22\n") == "22"
    assert extract_answer("17+5=22") is None
    assert extract_answer("A:22\n17+5=22") is None  # the answer must be the last line
    assert extract_answer("") is None


@pytest.mark.parametrize(
    "completion, reward",
    [
        ("17+5=22\nA:22", 1.0),        # right
        ("17+5=23\nA:23", 0.0),        # wrong
        ("17+5=22\nA:", 0.0),          # malformed: no digits
        ("17+5=22", 0.0),              # malformed: no answer line
        ("garbage A:22", 0.0),         # A: not at a line start
        ("17+5=22\nA:22A:22", 0.0),    # trailing junk
    ],
)
def test_reward(completion, reward):
    assert arith_reward(completion, "22") == reward


def test_format_bonus_is_off_by_default():
    wrong_but_tidy = "17+5=23\nA:23"
    assert arith_reward(wrong_but_tidy, "22") == 0.0
    assert is_well_formed(wrong_but_tidy)
    assert arith_reward(wrong_but_tidy, "22", format_bonus=0.1) == 0.1
    assert arith_reward("17+5=??\nA:23", "22", format_bonus=0.1) == 0.0
    assert arith_reward("17+5=22\nA:22", "22", format_bonus=0.1) == 1.0
