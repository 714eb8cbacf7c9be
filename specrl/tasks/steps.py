"""Multi-step arithmetic for real (chat) models, answered as a checked ledger: one `Step k: x op y = z` line per
operation, then `Answer: N`.

    problem  = "Start with 14. Add 7. Multiply by 3. Subtract 9. ..."      (5-9 operations; `long`: 10-14)
    response = "Step 1: 14 + 7 = 21\\nStep 2: 21 * 3 = 63\\nStep 3: 63 - 9 = 54\\n...\\nAnswer: 54"

Each operation is one line to get right (the operand and operator the problem names, the previous line's result,
correct arithmetic), so a reward can credit each line apart from the answer (`steps_reward`): a small model that
writes the format but slips in its arithmetic still earns a graded reward, and GRPO groups keep their variance.
The worked answer is 100-250 tokens with single-digit tokenizers (SmolLM2, Llama), more when the model talks;
about 15 tokens a line, so `long` (10-14 operations on one-digit operands, values below 100) is 150-220.

Chat rows (`row(chat=True)`, `make-data steps --chat`) show the format as a worked exchange before the problem
(SYSTEM, then EXAMPLE_PROBLEM asked and answered, then the problem): SmolLM2-135M-Instruct given the example
inside one user turn mostly rambles and writes a ledger in about 1 of 5 samples; given it as a prior turn it
writes the ledger nearly always (configs/smollm2_steps.yaml says what it then scores).

Problem i is a pure function of (seed, i, difficulty), so `--n 100` gives the first 100 of `--n 2000`; every
running value stays a non-negative integer below `Level.cap` (subtractions stay >= 0, divisions are exact).
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from typing import NamedTuple

from .math_word import seeded_problems

OPS = ("+", "-", "*", "/")
WORDS = {"+": "Add {y}.", "-": "Subtract {y}.", "*": "Multiply by {y}.", "/": "Divide by {y}."}
INSTRUCTION = ("Work it out one operation at a time. Write one line per operation, in the form "
               "`Step k: x op y = z`, where x is the result of the previous step, then write the final result "
               "on its own line as `Answer: N`.")
SYSTEM = "You are a careful calculator. You answer with one line per operation and nothing else."
EXAMPLE = ("For example, for \"Start with 5. Add 3. Multiply by 2.\" you would write:\n"
           "Step 1: 5 + 3 = 8\nStep 2: 8 * 2 = 16\nAnswer: 16")


class Level(NamedTuple):
    """A difficulty: operation counts, operand sizes and the running value's ceiling."""
    ops: tuple[int, int]  # operations per problem, inclusive
    start: tuple[int, int]  # the starting value, inclusive
    add: int  # largest operand of + and -
    mul: int  # largest factor of * (and divisor of /)
    cap: int  # running values stay below this (a * that would pass it is not drawn)


LEVELS = {"easy": Level((5, 6), (2, 20), 20, 3, 200),
          "medium": Level((5, 9), (2, 40), 50, 5, 1000),
          "hard": Level((7, 9), (10, 99), 99, 9, 5000),
          # SmolLM2-135M's start level: a long ledger (~150-220 tokens) of one-digit steps it can half get right
          "long": Level((10, 14), (2, 20), 9, 3, 100)}
MIXED = ("easy", "medium", "hard")  # what "mix" draws from (long is its own set)
DIFFICULTIES = (*LEVELS, "mix")


def apply(x: int, op: str, y: int) -> int | None:
    """x op y for the four operations; None for a division that is not exact (or by zero)."""
    if op == "+":
        return x + y
    if op == "-":
        return x - y
    if op in ("*", "x", "×"):
        return x * y
    if op in ("/", "÷"):
        return x // y if y and x % y == 0 else None
    raise ValueError(f"unknown operation {op!r}; expected one of {list(OPS)}")


@dataclass(frozen=True)
class StepsProblem:
    start: int
    ops: tuple[tuple[str, int], ...]  # (operator, operand) per step, in order
    difficulty: str

    @property
    def values(self) -> list[int]:
        """The running value after each step ([start] excluded)."""
        out, x = [], self.start
        for op, y in self.ops:
            x = apply(x, op, y)
            out.append(x)
        return out

    @property
    def answer(self) -> int:
        return self.values[-1]

    @property
    def question(self) -> str:
        return " ".join([f"Start with {self.start}.", *(WORDS[op].format(y=y) for op, y in self.ops)])

    @property
    def prompt(self) -> str:
        # the problem last: with the example last, a small model copies the example's answer
        return f"{INSTRUCTION}\n\n{EXAMPLE}\n\nNow solve this one: {self.question}"

    @property
    def messages(self) -> list[dict]:
        """The chat prompt: SYSTEM, EXAMPLE_PROBLEM asked and answered as a prior exchange, then this problem."""
        return [{"role": "system", "content": SYSTEM},
                {"role": "user", "content": f"{INSTRUCTION}\n\n{EXAMPLE_PROBLEM.question}"},
                {"role": "assistant", "content": EXAMPLE_PROBLEM.response},
                {"role": "user", "content": f"{INSTRUCTION}\n\n{self.question}"}]

    @property
    def response(self) -> str:
        """The reference ledger (what a full-reward completion looks like)."""
        lines, x = [], self.start
        for k, ((op, y), z) in enumerate(zip(self.ops, self.values), start=1):
            lines.append(f"Step {k}: {x} {op} {y} = {z}")
            x = z
        return "\n".join([*lines, f"Answer: {self.answer}"])

    def row(self, chat: bool = False) -> dict:
        """A JSONL row: `prompt` (or chat `messages`, the worked example as a prior exchange), `answer`, and the
        columns `steps_reward` checks lines against (`start`, `ops` as [[op, y], ...])."""
        head = {"messages": self.messages} if chat else {"prompt": self.prompt}
        return {**head, "answer": str(self.answer), "start": self.start, "ops": [list(o) for o in self.ops],
                "difficulty": self.difficulty, "steps": len(self.ops)}


# the chat rows' worked example (8, 16, 12, 18, 6): five lines, all four operations
EXAMPLE_PROBLEM = StepsProblem(5, (("+", 3), ("*", 2), ("-", 4), ("+", 6), ("/", 3)), "easy")


def _draw_op(rng: random.Random, x: int, level: Level) -> tuple[str, int]:
    """One operation on the running value x that keeps it a non-negative integer below level.cap."""
    divisors = [d for d in range(2, level.mul + 1) if x % d == 0 and x // d > 1]
    allowed = {"+": x + 1 < level.cap, "-": x > 1, "*": 2 * x < level.cap, "/": bool(divisors)}
    op = rng.choice([o for o, ok in allowed.items() if ok])
    if op == "+":
        return op, rng.randint(1, min(level.add, level.cap - 1 - x))
    if op == "-":
        return op, rng.randint(1, min(level.add, x - 1))
    if op == "*":
        return op, rng.randint(2, max(2, min(level.mul, (level.cap - 1) // x)))
    return op, rng.choice(divisors)


def make_steps_problem(rng: random.Random, difficulty: str) -> StepsProblem:
    if difficulty not in LEVELS:
        raise ValueError(f"difficulty {difficulty!r}: expected one of {list(LEVELS)} (or 'mix' for "
                         "make_steps_problems)")
    level = LEVELS[difficulty]
    x = start = rng.randint(*level.start)
    ops = []
    for _ in range(rng.randint(*level.ops)):
        op, y = _draw_op(rng, x, level)
        ops.append((op, y))
        x = apply(x, op, y)
    return StepsProblem(start, tuple(ops), difficulty)


def make_steps_problems(n: int, difficulty: str = "medium", seed: int = 0) -> list[StepsProblem]:
    """`n` problems; problem i depends only on (seed, i, difficulty)."""
    return seeded_problems(make_steps_problem, "steps", n, difficulty, seed, DIFFICULTIES, MIXED)
