"""Chained arithmetic with a worked scratchpad: the embedded default task.

A problem is a chain of single-digit additions and subtractions evaluated left to right, mod 10:

    prompt   = "Q:6a-7b+5c-8=?\n"
    response = "6a-7=9\n9b+5=4\n4c-8=6\nA:6"     (then EOS)

Each scratchpad line copies the running value, applies the next operation of the prompt (found by its
label a, b, c, ...) and writes the new running value, so the response grows linearly with the number of operations. The number of
operations is drawn from a clipped lognormal, which gives response lengths the long right tail of
real reasoning rollouts: most problems are short, a few are many times longer than the median.
"""

from __future__ import annotations

import hashlib
import math
import random
from dataclasses import dataclass
from typing import NamedTuple

SPLITS = ("train", "test")
# Each split has its own seed stream, and a prompt's hash decides its split: the two never share a prompt.
_SPLIT_SALT = {"train": 0x5EED_0001, "test": 0x5EED_7E57}


@dataclass(frozen=True)
class ArithSpec:
    """Difficulty knobs of the task. The defaults are what the shipped base policy was trained on."""

    modulus: int = 10           # running value lives in [0, modulus)
    max_operand: int = 9        # operands after the first are drawn from [0, max_operand]
    ops_median: float = 3.0     # median number of operations
    ops_sigma: float = 0.9      # lognormal shape: larger means a heavier tail
    min_ops: int = 1
    max_ops: int = 20           # the longest response is then ~150 tokens

    def __post_init__(self) -> None:
        if self.modulus < 2:
            raise ValueError(f"ArithSpec.modulus={self.modulus}: expected >= 2; use e.g. 10")
        if not 0 < self.max_operand:
            raise ValueError(f"ArithSpec.max_operand={self.max_operand}: expected > 0; use e.g. 9")
        if not 1 <= self.min_ops <= self.max_ops:
            raise ValueError(
                f"ArithSpec ops range [{self.min_ops}, {self.max_ops}]: expected 1 <= min_ops <= max_ops"
            )
        if self.ops_median <= 0 or self.ops_sigma < 0:
            raise ValueError(
                f"ArithSpec ops_median={self.ops_median}, ops_sigma={self.ops_sigma}: "
                "expected median > 0 and sigma >= 0"
            )


class Problem(NamedTuple):
    prompt: str      # "Q:6-7+5-8=?\n"
    response: str    # worked solution ending in "A:<answer>" (EOS is not part of the text)
    answer: str      # "6"
    num_ops: int


def sample_num_ops(rng: random.Random, spec: ArithSpec) -> int:
    """Clipped lognormal: median `ops_median`, tail set by `ops_sigma`."""
    n = round(math.exp(rng.gauss(math.log(spec.ops_median), spec.ops_sigma)))
    return min(max(n, spec.min_ops), spec.max_ops)


LABELS = "abcdefghijklmnopqrst"  # one label per operation; the prompt and the scratchpad both carry it


def solve(first: int, ops: list[tuple[str, int]], modulus: int) -> tuple[list[str], int]:
    """Scratchpad lines and final value of `first (op b)...` evaluated left to right mod `modulus`.
    Line i is `<value><label i><op><b>=<new>`: the label lets the model find operation i in the prompt by
    matching the label (an induction-style copy) instead of counting positions."""
    value, lines = first % modulus, []
    for label, (op, b) in zip(LABELS, ops):
        new = (value + b) % modulus if op == "+" else (value - b) % modulus
        lines.append(f"{value}{label}{op}{b}={new}")
        value = new
    return lines, value


def make_problem(rng: random.Random, spec: ArithSpec) -> Problem:
    n = sample_num_ops(rng, spec)
    first = rng.randint(0, min(spec.max_operand, spec.modulus - 1))
    ops = [(rng.choice("+-"), rng.randint(0, spec.max_operand)) for _ in range(n)]
    lines, value = solve(first, ops, spec.modulus)
    expr = str(first) + "".join(f"{label}{op}{b}" for label, (op, b) in zip(LABELS, ops))
    answer = str(value)
    return Problem(f"Q:{expr}=?\n", "\n".join(lines + [f"A:{answer}"]), answer, n)


def prompt_hash(prompt: str) -> int:
    """Split assignment hash: a prompt belongs to the test split iff its hash is odd."""
    return int.from_bytes(hashlib.blake2b(prompt.encode(), digest_size=8).digest(), "little")


def make_problems(
    n: int, seed: int = 0, split: str = "train", spec: ArithSpec | None = None
) -> list[Problem]:
    """`n` deterministic problems of `split`. The same (n, seed, split, spec) always gives the same list.

    Train and test never share a prompt: a prompt goes to test iff `prompt_hash` is odd, and the two
    splits also use disjoint seed streams so that their difficulty mixes are independent draws.
    """
    if split not in SPLITS:
        raise ValueError(f"split={split!r}: expected one of {SPLITS}")
    if n < 0:
        raise ValueError(f"n={n}: expected a non-negative number of problems")
    spec = spec or ArithSpec()
    rng = random.Random(_SPLIT_SALT[split] * 1_000_003 + seed)
    want_odd = split == "test"
    out: list[Problem] = []
    while len(out) < n:
        p = make_problem(rng, spec)
        if (prompt_hash(p.prompt) & 1) == want_odd:
            out.append(p)
    return out


def check_solution(problem: Problem, spec: ArithSpec | None = None) -> bool:
    """Recompute the answer from the prompt alone (independent parser) and compare."""
    spec = spec or ArithSpec()
    expr = problem.prompt.removeprefix("Q:").removesuffix("=?\n")
    tokens, num = [], ""
    for ch in expr:
        if ch in LABELS:
            continue
        if ch in "+-":
            tokens.append(int(num))
            tokens.append(ch)
            num = ""
        else:
            num += ch
    tokens.append(int(num))
    value = tokens[0]
    for op, b in zip(tokens[1::2], tokens[2::2]):
        value = value + b if op == "+" else value - b
    return str(value % spec.modulus) == problem.answer
