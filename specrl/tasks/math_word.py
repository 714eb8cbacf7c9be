"""Procedural math word problems for real (chat) models, answered in \\boxed{}.

    tiny: a bare sum or difference of two one-digit numbers ("What is 3 + 4?"), for ~100M-parameter models:
          enough reward variance within a GRPO group to learn from (docs/real_models.md)
    easy: one operation (+, -, x, /) on small numbers, no distractors
    hard: 2-4 operations chained on one running count, plus 1-2 sentences with irrelevant numbers
    mix:  each problem easy or hard with probability 1/2

Problem i is a pure function of (seed, i, difficulty), so `--n 100` gives the first 100 of `--n 2000`, and
every answer is a non-negative integer (subtractions never go below zero, divisions are exact).
"""
from __future__ import annotations

import random
from dataclasses import dataclass

DIFFICULTIES = ("tiny", "easy", "hard", "mix")
NAMES = ("Maya", "Liam", "Ana", "Noah", "Zoe", "Omar", "Ivy", "Theo", "Lena", "Ravi", "Sofia", "Ben")
ITEMS = ("apples", "marbles", "stickers", "books", "pencils", "shells", "coins", "cookies", "stamps", "cards")
INSTRUCTION = "Solve the problem step by step, then put the final answer in \\boxed{}."
TINY_INSTRUCTION = "Put the final answer in \\boxed{}."


@dataclass(frozen=True)
class WordProblem:
    question: str
    answer: int
    difficulty: str  # "tiny" | "easy" | "hard"
    steps: int  # operations needed

    @property
    def prompt(self) -> str:
        return f"{self.question} {TINY_INSTRUCTION}" if self.difficulty == "tiny" else f"{self.question}\n{INSTRUCTION}"

    def row(self, chat: bool = False) -> dict:
        """A JSONL row: `prompt` (or chat `messages`), `answer`, and metadata."""
        head = {"messages": [{"role": "user", "content": self.prompt}]} if chat else {"prompt": self.prompt}
        return {**head, "answer": str(self.answer), "difficulty": self.difficulty, "steps": self.steps}


def _step(rng: random.Random, x: int, name: str, item: str, hard: bool) -> tuple[str, int]:
    """One operation on the running count x: (sentence, new count)."""
    top = 30 if hard else 12
    divisors = [d for d in range(2, 7) if x % d == 0 and x // d > 0]
    # take away only from a positive count, multiply only while the numbers stay readable, divide only exactly
    allowed = {"add": True, "sub": x > 0, "mul": x <= 200, "div": bool(divisors)}
    op = rng.choice([o for o, ok in allowed.items() if ok])
    friend = rng.choice([n for n in NAMES if n != name])
    if op == "add":
        n = rng.randint(1, top)
        return rng.choice([f"{name} finds {n} more {item}.", f"{friend} gives {name} {n} {item}."]), x + n
    if op == "sub":
        n = rng.randint(1, x)
        return rng.choice([f"{name} gives {n} {item} to {friend}.", f"{name} loses {n} {item}."]), x - n
    if op == "mul":
        if hard and rng.random() < 0.5:
            boxes, each = rng.randint(2, 5), rng.randint(2, 9)
            return f"{name} buys {boxes} boxes with {each} {item} in each.", x + boxes * each
        m = rng.randint(2, 5 if hard else 9)
        return f"{name} ends up with {m} times as many {item} as before.", x * m
    d = rng.choice(divisors)
    return f"{name} splits the {item} equally into {d} bags and keeps one bag.", x // d


def _distractor(rng: random.Random, name: str, item: str) -> str:
    friend = rng.choice([n for n in NAMES if n != name])
    other = rng.choice([i for i in ITEMS if i != item])
    return rng.choice([f"{friend} has {rng.randint(2, 40)} {other}.", f"{name} is {rng.randint(6, 14)} years old.",
                       f"The shop is {rng.randint(3, 25)} minutes away.",
                       f"{friend} has {rng.randint(2, 40)} {item}, but keeps them."])


def make_word_problem(rng: random.Random, difficulty: str) -> WordProblem:
    if difficulty == "tiny":
        a, b = rng.randint(1, 9), rng.randint(1, 9)
        if rng.random() < 0.5:
            return WordProblem(f"What is {a} + {b}?", a + b, "tiny", 1)
        a, b = max(a, b), min(a, b)  # answers stay non-negative
        return WordProblem(f"What is {a} - {b}?", a - b, "tiny", 1)
    if difficulty not in ("easy", "hard"):
        raise ValueError(f"difficulty {difficulty!r}: expected 'tiny', 'easy' or 'hard' (or 'mix' for "
                         "make_word_problems)")
    hard = difficulty == "hard"
    name, item = rng.choice(NAMES), rng.choice(ITEMS)
    x = rng.randint(5, 40) if hard else rng.randint(2, 20)
    sentences = [f"{name} has {x} {item}."]
    steps = rng.randint(2, 4) if hard else 1
    for _ in range(steps):
        text, x = _step(rng, x, name, item, hard)
        sentences.append(text)
    if hard:
        for _ in range(rng.randint(1, 2)):  # never before the opening sentence, which names the count
            sentences.insert(rng.randint(1, len(sentences)), _distractor(rng, name, item))
    sentences.append(f"How many {item} does {name} have now?")
    return WordProblem(" ".join(sentences), x, difficulty, steps)


def make_word_problems(n: int, difficulty: str = "easy", seed: int = 0) -> list[WordProblem]:
    """`n` problems; problem i depends only on (seed, i, difficulty)."""
    return seeded_problems(make_word_problem, "math-word", n, difficulty, seed, DIFFICULTIES, ("easy", "hard"))


def seeded_problems(make, name: str, n: int, difficulty: str, seed: int, difficulties, mixed) -> list:
    """`n` problems `make(rng, level)`, problem i drawn from its own rng on (name, seed, i): "mix" picks each
    problem's level from `mixed`; an unknown difficulty or a negative n is a ValueError naming the choices."""
    if difficulty not in difficulties:
        raise ValueError(f"difficulty {difficulty!r}: expected one of {list(difficulties)}")
    if n < 0:
        raise ValueError(f"n={n}: expected >= 0")
    rngs = (random.Random(f"{name}/{seed}/{i}") for i in range(n))  # str seeds ignore PYTHONHASHSEED
    return [make(rng, difficulty if difficulty != "mix" else rng.choice(tuple(mixed))) for rng in rngs]
