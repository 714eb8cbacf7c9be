"""The `steps` task: problems that are pure functions of (seed, i, difficulty), a ledger reward that credits each
line apart from the answer and parses leniently, and `specrl make-data steps` rows that the loader reads with the
columns the reward checks lines against."""
from __future__ import annotations

import json

import pytest

from specrl.cli.main import main as cli_main
from specrl.tasks.ledger import LINE_WEIGHT, OVERSHOOT, parse_answer, parse_equations, score_ledger, steps_reward
from specrl.tasks.steps import (EXAMPLE_PROBLEM, LEVELS, MIXED, SYSTEM, StepsProblem, apply, make_steps_problem,
                                make_steps_problems)
from specrl.trainer.data import read_rows
from specrl.trainer.rewards import resolve_reward

# Start with 14. Add 7. Multiply by 3. Subtract 9. Divide by 6. Add 5.
#   14 + 7 = 21, 21 * 3 = 63, 63 - 9 = 54, 54 / 6 = 9, 9 + 5 = 14
PROBLEM = StepsProblem(14, (("+", 7), ("*", 3), ("-", 9), ("/", 6), ("+", 5)), "medium")
LEDGER = "Step 1: 14 + 7 = 21\nStep 2: 21 * 3 = 63\nStep 3: 63 - 9 = 54\nStep 4: 54 / 6 = 9\nStep 5: 9 + 5 = 14\nAnswer: 14"


def _score(text: str) -> float:
    return score_ledger(text, PROBLEM.start, PROBLEM.ops, PROBLEM.answer).reward


def test_problems_are_pure_functions_of_seed_index_and_difficulty():
    assert make_steps_problems(30, "medium", seed=3)[:10] == make_steps_problems(10, "medium", seed=3)
    assert make_steps_problems(10, "medium", seed=3) != make_steps_problems(10, "medium", seed=4)
    for difficulty, level in LEVELS.items():
        for p in make_steps_problems(200, difficulty, seed=0):
            assert level.ops[0] <= len(p.ops) <= level.ops[1]
            assert all(isinstance(v, int) and 0 <= v < level.cap for v in p.values)  # exact, never negative
            assert p.answer == p.values[-1] and str(p.answer) == p.row()["answer"]
    assert {p.difficulty for p in make_steps_problems(40, "mix")} == set(MIXED)  # long is its own set


def test_the_hand_worked_problem():
    assert PROBLEM.values == [21, 63, 54, 9, 14]
    assert PROBLEM.question == "Start with 14. Add 7. Multiply by 3. Subtract 9. Divide by 6. Add 5."
    assert PROBLEM.response == LEDGER
    assert "Step k: x op y = z" in PROBLEM.prompt and "Answer: N" in PROBLEM.prompt
    assert PROBLEM.prompt.endswith(PROBLEM.question)  # the problem last, after the example
    assert apply(7, "/", 2) is None and apply(6, "x", 7) == 42


def test_a_correct_ledger_scores_full():
    assert _score(LEDGER) == 1.0
    problems = make_steps_problems(50, "mix")
    assert steps_reward([p.response for p in problems], [p.row() for p in problems]) == [1.0] * 50


def test_a_wrong_line_loses_its_own_credit_and_the_next_line_chains_on_what_it_wrote():
    # line 2 slips (21 * 3 = 64); line 3 carries 64 on correctly (64 - 9 = 55) and keeps its credit; lines 4-5
    # then cannot match: 55 / 6 is not exact, so 4 is wrong and 5 chains on 4's result (9 + 5 = 14) and is right
    slip = LEDGER.replace("21 * 3 = 63", "21 * 3 = 64").replace("63 - 9 = 54", "64 - 9 = 55")
    s = score_ledger(slip, PROBLEM.start, PROBLEM.ops, PROBLEM.answer)
    assert (s.credited, s.lines, s.answer_right) == (3, 5, True)
    assert s.reward == pytest.approx(LINE_WEIGHT * 3 / 5 + (1 - LINE_WEIGHT))
    # the right lines but the wrong answer: the lines' share only
    assert _score(LEDGER.replace("Answer: 14", "Answer: 15")) == pytest.approx(LINE_WEIGHT)
    # the right answer alone, no lines: the answer's share only
    assert _score("The answer is 14.") == pytest.approx(1 - LINE_WEIGHT)
    # another operand than the problem's, right and chained: half a line (HALF_CREDIT); the next line then no
    # longer chains (21 is not 22) and earns nothing; lines 3-5 chain on 63 and keep theirs: 0.5 + 0 + 3
    assert score_ledger(LEDGER.replace("14 + 7 = 21", "14 + 8 = 22"), 14, PROBLEM.ops, 14).credited == 3.5
    # a right line that does not chain (the prompt's example copied) earns nothing
    assert score_ledger("Step 1: 5 + 3 = 8\nStep 2: 8 * 2 = 16\nAnswer: 16", 14, PROBLEM.ops, 14).credited == 0


def test_extra_equation_lines_shrink_the_share_by_the_root_of_their_excess():
    padded = LEDGER.replace("Answer: 14", "Step 6: 14 + 0 = 14\nStep 7: 14 + 0 = 14\nAnswer: 14")
    s = score_ledger(padded, PROBLEM.start, PROBLEM.ops, PROBLEM.answer)
    assert OVERSHOOT == 0.5
    assert (s.credited, s.lines) == (5, 7) and s.reward == pytest.approx(LINE_WEIGHT * (5 / 7) ** 0.5 + 1 - LINE_WEIGHT)
    assert s.reward < _score(LEDGER)  # padding never pays
    # a ledger that stops two operations short loses those lines in full; one that runs on loses less
    short = "\n".join(LEDGER.splitlines()[:3])
    assert _score(short) == pytest.approx(LINE_WEIGHT * 3 / 5)
    run_on = short + "\nStep 4: 54 + 1 = 50\nStep 5: 50 + 1 = 40\nStep 6: 40 + 1 = 30\nStep 7: 30 + 1 = 20"  # all slips
    assert _score(run_on) == pytest.approx(LINE_WEIGHT * 3 / 5 * (5 / 7) ** 0.5)


def test_lenient_parsing_of_what_a_chat_model_writes():
    # no spaces, x for times, markdown bold, "Step 3." and "3)" prefixes, prose between lines, a boxed answer
    loose = ("Sure! Let's go.\n**Step 1:** 14+7=21\nStep 2 - 21 x 3 = 63\nStep 3. 63 − 9 = 54\n"
             "4) `54 ÷ 6 = 9`\nThen step five: 9 + 5 = 14\nSo the final answer is $\\boxed{14}$.")
    assert parse_equations(loose) == [(14, "+", 7, 21), (21, "*", 3, 63), (63, "-", 9, 54), (54, "/", 6, 9),
                                      (9, "+", 5, 14)]
    assert _score(loose) == 1.0
    assert parse_equations("Step 1: 1,200 * 2 = 2,400") == [(1200, "*", 2, 2400)]
    assert parse_equations("Step 1: 5 * 3 = 15") == [(5, "*", 3, 15)]  # '*' between numbers is times
    assert parse_answer("Answer: 12\nAnswer: **13**") == 13 and parse_answer("\\boxed{7}") == 7
    assert parse_answer("no number here") is None and _score("") == 0.0


def test_make_data_steps_rows_load_with_the_columns_the_reward_reads(tmp_path):
    out = tmp_path / "steps.jsonl"
    assert cli_main(["make-data", "steps", "--n", "12", "--difficulty", "mix", "--out", str(out)]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert {"prompt", "answer", "start", "ops", "steps", "difficulty"} <= set(rows[0])
    reward = resolve_reward("steps")
    examples = read_rows(out, columns=reward.columns, needed_by=reward.source)
    assert examples[0].row["ops"] == rows[0]["ops"] and examples[0].row["start"] == rows[0]["start"]
    problems = make_steps_problems(12, "mix")
    assert reward([p.response for p in problems], [e.row for e in examples]) == [1.0] * 12
    assert cli_main(["make-data", "steps", "--n", "2", "--chat", "--out", str(tmp_path / "chat.jsonl")]) == 0
    assert "messages" in json.loads((tmp_path / "chat.jsonl").read_text().splitlines()[0])


def test_make_data_steps_rejects_another_kinds_difficulty(capsys):
    assert cli_main(["make-data", "steps", "--difficulty", "tiny", "--out", "-"]) == 2
    assert "easy" in capsys.readouterr().err
    assert cli_main(["make-data", "steps", "--difficulty", "extreme", "--out", "-"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "'extreme'" in err and "long" in err and "medium" in err
    with pytest.raises(ValueError, match="'extreme'.*long"):
        make_steps_problems(3, "extreme")
    with pytest.raises(ValueError, match="'extreme'"):
        make_steps_problem(__import__("random").Random(0), "extreme")


# the first `long` problem of seed 1 (the held-out file's): pinned, so a change to the draw shows here
LONG_1 = ("Start with 19. Subtract 3. Add 1. Add 2. Add 1. Multiply by 2. Subtract 3. Multiply by 2. Subtract 6. "
          "Subtract 7. Add 1. Divide by 2. Add 3. Subtract 6. Multiply by 2.")


def test_long_problems_are_seeded_and_one_digit():
    problems = make_steps_problems(200, "long", seed=1)
    assert problems[0].question == LONG_1 and problems[:20] == make_steps_problems(20, "long", seed=1)
    assert problems != make_steps_problems(200, "long", seed=2)
    assert make_steps_problems(10, "medium", seed=1) == make_steps_problems(10, "medium", seed=1)
    for p in problems:
        assert 10 <= len(p.ops) <= 14 and all(1 <= y <= 9 for _, y in p.ops)
        assert all(0 <= v < 100 for v in p.values) and p.difficulty == "long"
        assert steps_reward([p.response], [p.row(chat=True)]) == [1.0]


def test_chat_rows_show_the_format_as_a_worked_exchange_before_the_problem():
    p = make_steps_problems(1, "long", seed=1)[0]
    m = p.row(chat=True)["messages"]
    assert [t["role"] for t in m] == ["system", "user", "assistant", "user"] and m[0]["content"] == SYSTEM
    assert m[1]["content"].endswith(EXAMPLE_PROBLEM.question) and m[2]["content"] == EXAMPLE_PROBLEM.response
    assert m[3]["content"].endswith(p.question) and "Step k: x op y = z" in m[3]["content"]
    assert EXAMPLE_PROBLEM.values == [8, 16, 12, 18, 6] and {op for op, _ in EXAMPLE_PROBLEM.ops} == set("+-*/")
    # the example's lines copied into the answer chain from 5, not the problem's start: no credit
    assert score_ledger(EXAMPLE_PROBLEM.response, p.start, p.ops, p.answer).credited == 0
    assert "messages" not in p.row() and p.row()["prompt"] == p.prompt


def test_partial_credit_on_a_hand_written_long_ledger():
    # Start with 9. Subtract 8. Multiply by 2. Subtract 1. Add 2. Subtract 1. Add 8. Multiply by 2. Add 4.
    # Divide by 3. Multiply by 3.   values 1, 2, 1, 3, 2, 10, 20, 24, 8, 24
    p = StepsProblem(9, (("-", 8), ("*", 2), ("-", 1), ("+", 2), ("-", 1), ("+", 8), ("*", 2), ("+", 4), ("/", 3),
                         ("*", 3)), "long")
    assert p.values == [1, 2, 1, 3, 2, 10, 20, 24, 8, 24]
    # lines 1-2 right; line 3 slips (2 - 1 = 2); 4 and 5 chain on the slip and are right; then it stops
    text = "Step 1: 9 - 8 = 1\nStep 2: 1 * 2 = 2\nStep 3: 2 - 1 = 2\nStep 4: 2 + 2 = 4\nStep 5: 4 - 1 = 3\nAnswer: 3"
    s = score_ledger(text, p.start, p.ops, p.answer)
    assert (s.credited, s.lines, s.operations, s.answer_right) == (4, 5, 10, False)
    assert s.reward == pytest.approx(0.7 * 4 / 10) == pytest.approx(0.28)
    # the same lines without `Step k:` (bare, or numbered "3)") score the same
    bare = "\n".join(line.split(": ", 1)[1] if line.startswith("Step") else line for line in text.splitlines())
    assert score_ledger(bare, p.start, p.ops, p.answer).reward == pytest.approx(0.28)
    numbered = text.replace("Step 3: ", "3) ").replace("Step 4: ", "- ")
    assert score_ledger(numbered, p.start, p.ops, p.answer).reward == pytest.approx(0.28)
    # the full ledger: 1.0; the full ledger with a wrong answer: the lines' share only
    assert score_ledger(p.response, p.start, p.ops, p.answer).reward == 1.0
    assert score_ledger(p.response.replace("Answer: 24", "Answer: 25"), p.start, p.ops, p.answer).reward == \
        pytest.approx(LINE_WEIGHT)


def test_a_decimal_is_never_read_as_a_whole_number():
    # SmolLM2 writes "73 / 2 = 37.25" for an inexact division: no equation, not 73 / 2 = 37
    assert parse_equations("Step 5: 73 / 2 = 37.25") == [] and parse_equations("1.5 + 2 = 3.5") == []
    assert parse_equations("Step 1. 5 + 3 = 8.") == [(5, "+", 3, 8)]  # a full stop after it is no decimal
    assert parse_answer("Answer: 3.75") is None and parse_answer("Answer: 12.") == 12
