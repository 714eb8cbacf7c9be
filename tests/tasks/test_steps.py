"""The `steps` task: problems that are pure functions of (seed, i, difficulty), a ledger reward that credits each
line apart from the answer and parses leniently, and `specrl make-data steps` rows that the loader reads with the
columns the reward checks lines against."""
from __future__ import annotations

import json

import pytest

from specrl.cli.main import main as cli_main
from specrl.tasks.ledger import LINE_WEIGHT, parse_answer, parse_equations, score_ledger, steps_reward
from specrl.tasks.steps import LEVELS, StepsProblem, apply, make_steps_problems
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
    assert {p.difficulty for p in make_steps_problems(40, "mix")} == set(LEVELS)


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


def test_extra_equation_lines_count_against_the_share():
    padded = LEDGER.replace("Answer: 14", "Step 6: 14 + 0 = 14\nStep 7: 14 + 0 = 14\nAnswer: 14")
    s = score_ledger(padded, PROBLEM.start, PROBLEM.ops, PROBLEM.answer)
    assert (s.credited, s.lines) == (5, 7) and s.reward == pytest.approx(LINE_WEIGHT * 5 / 7 + 1 - LINE_WEIGHT)


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
