
import numpy as np
import pytest

from specrl.tasks.arith import ArithSpec, Problem, make_problems, prompt_hash


def check_solution(problem: Problem) -> bool:
    """Recompute the answer from the prompt alone (independent parser) and compare."""
    body = problem.prompt.removeprefix("Q:").removesuffix("=?\n").split(" ")
    f = {int(pair[0]): int(pair[2]) for pair in body[:10]}
    x = int(body[10][1:])
    for _ in range(int(body[11][1:])):
        x = f[x]
    return str(x) == problem.answer


def test_generator_is_deterministic():
    a = make_problems(50, seed=3, split="train")
    b = make_problems(50, seed=3, split="train")
    c = make_problems(50, seed=4, split="train")
    assert a == b
    assert a != c


def test_train_and_test_never_share_a_prompt():
    train = {p.prompt for s in range(3) for p in make_problems(2000, seed=s, split="train")}
    test = {p.prompt for p in make_problems(2000, seed=0, split="test")}
    assert not train & test
    # the split rule itself: test prompts hash odd, train prompts even
    assert all(prompt_hash(p) & 1 for p in test)
    assert not any(prompt_hash(p) & 1 for p in train)


def test_format_of_a_problem():
    p = make_problems(1, seed=0, split="train")[0]
    assert isinstance(p, Problem)
    assert p.prompt.startswith("Q:") and p.prompt.endswith("=?\n")
    assert 0 <= int(p.answer) < 10


@pytest.mark.parametrize("task, median, cap", [("chain", 22, 125), ("arith", 3, 20)])
def test_response_lengths_have_a_long_tail(task, median, cap):
    from specrl.tasks.arith import task_spec
    problems = make_problems(5000, seed=0, split="train", spec=task_spec(task))
    lens = np.array([len(p.response) + 1 for p in problems])  # plain style: 4 tokens a hop, then "A:x" and EOS
    p50, p99 = np.percentile(lens, [50, 99])
    assert p99 / p50 > 4
    ops = [p.num_ops for p in problems]
    assert min(ops) >= 1 and max(ops) == cap and np.median(ops) == median


def test_unknown_task_lists_the_valid_ones():
    from specrl.tasks.arith import task_spec
    with pytest.raises(ValueError, match=r"'chian'; valid: \['chain', 'arith'\]"):
        task_spec("chian")
    assert task_spec("chain", max_hops=50).max_hops == 50 and task_spec("chain").max_hops == 125


def test_num_ops_respects_bounds():
    spec = ArithSpec(hops_median=5, hops_sigma=2.0, min_hops=2, max_hops=7)
    ops = {p.num_ops for p in make_problems(300, seed=0, spec=spec)}
    assert ops <= set(range(2, 8)) and {2, 7} <= ops


def test_bad_inputs_name_the_value():
    with pytest.raises(ValueError, match="split='dev'"):
        make_problems(1, split="dev")
    with pytest.raises(ValueError, match=r"min_hops=5 is invalid: expected in \[1, max_hops=2\]"):
        ArithSpec(min_hops=5, max_hops=2)
    with pytest.raises(ValueError, match="max_hops=1000 is invalid: expected < 1000"):
        ArithSpec(max_hops=1000)


@pytest.mark.parametrize("split", ["train", "test"])
def test_chase_solution_is_correct(split):
    for p in make_problems(500, seed=2, split=split):
        assert check_solution(p)
        table = dict(pair.split("=") for pair in p.prompt[2:].split(" ")[:10])
        lines = p.response.split("\n")
        assert len(lines) == p.num_ops + 1 and lines[-1] == f"A:{p.answer}"
        x = p.prompt.split(" s")[1].split(" ")[0]  # the start digit
        for line in lines[:-1]:  # each line is x=f(x), and the next starts from f(x)
            assert line == f"{x}={table[x]}"
            x = table[x]
        assert x == p.answer


def test_chase_by_hand():
    # f(6)=1, f(1)=7, f(7)=9: three hops from 6 end at 9
    p = Problem("Q:0=3 1=7 2=2 3=5 4=0 5=8 6=1 7=9 8=6 9=4 s6 n3=?\n", "6=1\n1=7\n7=9\nA:9", "9", 3)
    assert check_solution(p)
    assert not check_solution(p._replace(answer="7"))
