import pytest

from specrl.tasks.arith import arith_reward, extract_answer


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


CHASE = "Q:0=0 1=3 2=4 3=3 4=7 5=3 6=4 7=2 8=4 9=8 s1 n2=?\n"  # 1 -> 3 -> 3: 3 is a fixed point


def test_reference_solutions_rebuild_both_styles_from_the_prompt():
    from specrl.tasks.arith import ArithSpec, is_counted, make_problems, reference_solutions

    # hops left, zero-padded to 3 digits, before each lookup
    assert reference_solutions(CHASE) == ("1=3\n3=3\nA:3", "002:1=3\n001:3=3\nA:3")
    for p in make_problems(60, seed=3, spec=ArithSpec(counted_share=0.5)):
        assert p.response in reference_solutions(p.prompt)
        assert arith_reward(p.response, p.answer, p.prompt) == 1.0
    counted = [is_counted(p.response) for p in make_problems(60, 3, spec=ArithSpec(counted_share=0.5))]
    assert 10 < sum(counted) < 50  # the share picks the style prompt by prompt
    assert reference_solutions("What is 2+2?") == ()


def test_a_counted_solution_with_a_wrong_counter_earns_nothing():
    assert arith_reward("002:1=3\n001:3=3\nA:3", "3", CHASE) == 1.0
    assert arith_reward("002:1=3\n002:3=3\nA:3", "3", CHASE) == 0.0  # right lookups, counter not decremented
    assert arith_reward("2:1=3\n1:3=3\nA:3", "3", CHASE) == 0.0  # unpadded counters are not the format


@pytest.mark.parametrize(
    "completion, reward",
    [
        ("1=3\n3=3\nA:3", 1.0),                 # the worked solution
        ("1=3\n3=3\nA:3<eos>", 1.0),
        ("1=3\n3=3\n3=3\n3=3\nA:3", 0.0),       # right digit by luck: 4 hops instead of 2
        ("1=3\nA:3", 0.0),                      # right digit by luck: 1 hop
        ("1=8\n8=3\nA:3", 0.0),                 # wrong lookups that land on the answer
        ("A:3", 0.0),                           # no scratchpad
        ("1=3\n3=4\nA:4", 0.0),                 # wrong answer
    ],
)
def test_with_the_prompt_the_whole_worked_solution_is_checked(completion, reward):
    assert arith_reward(completion, "3", CHASE) == reward
    assert arith_reward(completion, "3") == float(completion.replace("<eos>", "").endswith("A:3"))


def test_the_named_reward_passes_the_prompt_through():
    from specrl.trainer.rewards import get_reward

    assert get_reward("arith")("1=3\n3=3\n3=3\nA:3", "3", CHASE) == 0.0
    assert get_reward("arith")("1=3\n3=3\nA:3", "3", CHASE) == 1.0
