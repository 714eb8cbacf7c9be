"""Procedural word problems: deterministic by seed, every answer re-derived from the text by an independent
reader, distractors only in hard problems, and `specrl make-data math` rows that the training loader reads."""
from __future__ import annotations

import json
import random
import re

import pytest

from specrl.cli.main import main as cli_main
from specrl.tasks.math_word import make_word_problem, make_word_problems
from specrl.trainer.data import read_rows
from specrl.trainer.rewards import get_reward


def solve(question: str) -> int:
    """Re-derives the answer from the sentences alone: the owner is the first sentence's subject; sentences
    about anyone else, ages and distances are skipped."""
    sentences = re.findall(r"[^.?]+[.?]", question)
    name, x = re.match(r"(\w+) has (\d+) ", sentences[0]).groups()
    x = int(x)
    for s in sentences[1:-1]:
        s = s.strip()
        if m := re.fullmatch(rf"{name} finds (\d+) more \w+\.", s):
            x += int(m[1])
        elif m := re.fullmatch(rf"\w+ gives {name} (\d+) \w+\.", s):
            x += int(m[1])
        elif m := re.fullmatch(rf"{name} (?:gives|loses) (\d+) \w+( to \w+)?\.", s):
            x -= int(m[1])
        elif m := re.fullmatch(rf"{name} buys (\d+) boxes with (\d+) \w+ in each\.", s):
            x += int(m[1]) * int(m[2])
        elif m := re.fullmatch(rf"{name} ends up with (\d+) times as many \w+ as before\.", s):
            x *= int(m[1])
        elif m := re.fullmatch(rf"{name} splits the \w+ equally into (\d+) bags and keeps one bag\.", s):
            assert x % int(m[1]) == 0
            x //= int(m[1])
        else:  # a distractor
            assert re.search(r"years old|minutes away|but keeps them|^(?!" + name + r")\w+ has \d+", s), s
    return x


@pytest.mark.parametrize("difficulty", ["easy", "hard", "mix"])
def test_answers_follow_from_the_text(difficulty):
    for p in make_word_problems(300, difficulty, seed=3):
        assert p.answer >= 0 and solve(p.question) == p.answer, p.question


def test_easy_is_one_step_without_distractors_and_hard_is_two_to_four_with_them():
    easy = make_word_problems(200, "easy", seed=0)
    hard = make_word_problems(200, "hard", seed=0)
    assert {p.steps for p in easy} == {1} and all(p.question.count(".") == 2 for p in easy)
    assert {p.steps for p in hard} == {2, 3, 4}
    assert all(p.question.count(".") >= p.steps + 2 for p in hard)  # opening + steps + >= 1 distractor
    assert {p.difficulty for p in make_word_problems(50, "mix", seed=0)} == {"easy", "hard"}


def test_deterministic_by_seed_and_prefix_stable():
    a = make_word_problems(50, "mix", seed=7)
    assert a == make_word_problems(50, "mix", seed=7)
    assert a[:10] == make_word_problems(10, "mix", seed=7)
    assert a != make_word_problems(50, "mix", seed=8)


def test_bad_difficulty_lists_valid():
    with pytest.raises(ValueError, match=r"difficulty 'medium': expected one of \['tiny', 'easy', 'hard', 'mix'\]"):
        make_word_problems(1, "medium")
    with pytest.raises(ValueError, match=r"difficulty 'mix': expected 'tiny', 'easy' or 'hard'"):
        make_word_problem(random.Random(0), "mix")  # one problem has one difficulty; unchecked, "mix" came out easy


def test_make_data_cli_rows_load_and_score(tmp_path):
    out = tmp_path / "math.jsonl"
    assert cli_main(["make-data", "math", "--n", "20", "--difficulty", "mix", "--out", str(out)]) == 0
    rows = read_rows(out)
    assert len(rows) == 20 and all("\\boxed{}" in r.prompt for r in rows)
    boxed = get_reward("boxed")
    assert all(boxed(f"so \\boxed{{{r.answer}}}", r.answer) == 1.0 for r in rows)
    assert cli_main(["make-data", "math", "--n", "2", "--chat", "--out", str(tmp_path / "chat.jsonl")]) == 0
    row = json.loads((tmp_path / "chat.jsonl").read_text().splitlines()[0])
    assert row["messages"][0]["role"] == "user" and "prompt" not in row and row["answer"].isdigit()


def test_make_data_unknown_kind_exits_2(capsys):
    assert cli_main(["make-data", "algebra", "--out", "x"]) == 2
    assert "valid: ['math', 'steps']" in capsys.readouterr().err


def test_tiny_problems_are_one_digit_sums_and_differences():
    probs = make_word_problems(200, "tiny", seed=3)
    assert {p.difficulty for p in probs} == {"tiny"}
    ops = set()
    for p in probs:
        a, op, b = re.fullmatch(r"What is (\d) ([+-]) (\d)\?", p.question).groups()
        ops.add(op)
        assert p.answer == (int(a) + int(b) if op == "+" else int(a) - int(b)) >= 0
        assert p.prompt.endswith("Put the final answer in \\boxed{}.")
    assert ops == {"+", "-"}
    assert [p.question for p in make_word_problems(5, "tiny", seed=3)] == [p.question for p in probs[:5]]
