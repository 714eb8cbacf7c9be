"""The `steps` task's reward: a completion's ledger lines checked one by one against the problem, and its answer.

    reward = LINE_WEIGHT * line share + (1 - LINE_WEIGHT) * (answer right)
    line share = (credited lines / operations) * (operations / max(operations, equation lines)) ** OVERSHOOT

The k-th equation line `x op y = z` is credited in full when its operator and operand are the problem's k-th, x
is the previous line's z (the start value for the first), and z = x op y: a slip costs the line it is on, and a
line that carries the slip on correctly still earns its credit. A line that chains and is right but does another
operation than the problem's earns HALF_CREDIT (the format and the arithmetic, before the reading is learned),
when every line before it chained back to the start value (a copied example line does not). Equation lines beyond
the problem's operations earn nothing and shrink the share by the square root of their excess (OVERSHOOT), so
padding never pays. The root, not the full ratio: a small model's samples that run on past the last
operation then score about what those that stop early score, so the reward pushes the length neither way at
the start and the length follows what the policy gets right (docs/results/real_models.md).
Parsing is lenient about what a small chat model writes:
spacing, markdown, `x`/`×`/`·` for times, `÷` for divide, unicode minus signs, thousands commas, any
`Step k` prefix (or none), and a final `Answer: N`, `answer is N` or `\\boxed{N}`; a decimal (`37.25`) is never
read as the whole number in it.
"""
from __future__ import annotations

import re
from typing import NamedTuple, Sequence

from .steps import apply

LINE_WEIGHT = 0.7  # a right answer alone is worth 0.3: the lines are where a small model's signal is
HALF_CREDIT = 0.5  # a chained, correct line of another operation than the problem's
OVERSHOOT = 0.5  # the exponent of the cost of equation lines beyond the problem's operations

# a whole number, never a piece of a decimal: "73 / 2 = 37.25" is no equation (not 73 / 2 = 37), "Answer: 3.75"
# no answer (not 3)
_NUM = r"(?<!\d)(?<!\d\.)(\d{1,3}(?:,\d{3})+|\d+)(?!\d|\.\d|,\d)"
_OP = r"([-+*/xX×·÷−–])"
EQUATION = re.compile(rf"{_NUM}\s*{_OP}\s*{_NUM}\s*=\s*{_NUM}")
ANSWER = re.compile(rf"answer\s*(?:is)?\s*[:=]?\s*\$?\s*(?:\\boxed\{{)?\s*{_NUM}", re.IGNORECASE)
BOXED = re.compile(rf"\\boxed\{{\s*{_NUM}\s*\}}")
_CANONICAL = {"x": "*", "X": "*", "×": "*", "·": "*", "÷": "/", "−": "-", "–": "-"}


class Equation(NamedTuple):
    x: int
    op: str  # one of "+", "-", "*", "/"
    y: int
    z: int


def _int(s: str) -> int:
    return int(s.replace(",", ""))


def _clean(line: str) -> str:
    """Markdown bold/code and inline-maths marks dropped; '*' is also times, so only where it wraps words
    ("**Step 1:**"), never between numbers."""
    return re.sub(r"\*\*|(?<![\d\s])\*|\*(?![\d\s])", "", line).replace("`", "").replace("$", "")


def parse_equations(text: str) -> list[Equation]:
    """The first `x op y = z` of each line, in order (a line without one is prose and is skipped)."""
    out = []
    for line in text.splitlines():
        m = EQUATION.search(_clean(line))
        if m:
            out.append(Equation(_int(m[1]), _CANONICAL.get(m[2], m[2]), _int(m[3]), _int(m[4])))
    return out


def parse_answer(text: str) -> int | None:
    """The last `Answer: N` (or `answer is N`), else the last `\\boxed{N}`; None when there is neither."""
    text = _clean(text)
    found = ANSWER.findall(text) or BOXED.findall(text)
    return _int(found[-1]) if found else None


class LedgerScore(NamedTuple):
    credited: float  # lines credited (1 each, HALF_CREDIT for a right line of another operation)
    lines: int  # equation lines written
    operations: int  # the problem's operations
    answer_right: bool

    @property
    def reward(self) -> float:
        ops = max(self.operations, 1)
        line_share = self.credited / ops * (ops / max(ops, self.lines)) ** OVERSHOOT
        return LINE_WEIGHT * line_share + (1 - LINE_WEIGHT) * float(self.answer_right)


def score_ledger(text: str, start: int, ops: Sequence[Sequence], answer: int) -> LedgerScore:
    """The completion `text` against the problem (start value, [(op, y), ...], final value)."""
    eqs = parse_equations(text)
    credited, prev, anchored = 0, start, True  # anchored: every line so far chained back to the start value
    for eq, (op, y) in zip(eqs, ops):
        anchored = anchored and eq.x == prev
        if eq.x == prev and apply(eq.x, eq.op, eq.y) == eq.z:
            # half credit only on a chain from the start, so that a copied example line earns nothing
            credited += 1 if (eq.op, eq.y) == (op, int(y)) else HALF_CREDIT * anchored
        prev = eq.z  # the next line chains on what this one wrote, right or wrong
    return LedgerScore(credited, len(eqs), len(ops), parse_answer(text) == int(answer))


def steps_reward(completions: list[str], rows: list[dict]) -> list[float]:
    """The batched reward of `specrl make-data steps` rows (columns answer, start, ops)."""
    return [score_ledger(text, int(row["start"]), row["ops"], int(row["answer"])).reward
            for text, row in zip(completions, rows)]


steps_reward.required_columns = ("answer", "start", "ops")
