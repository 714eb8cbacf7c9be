"""Verifiable reward of the embedded task: 1.0 for a correct worked solution, else 0.0.

Given the prompt, the checker verifies the whole scratchpad, not only the final `A:` line: in function
chasing the map often has short cycles, so a chain with the wrong number of hops (or a wrong lookup that
lands back on the cycle) can end on the right digit by luck. Crediting that would reward the very habit
(miscounting hops) that training should remove. Without the prompt, only the final answer is checked.
"""
from __future__ import annotations

import re

from .arith import reference_solutions

# The final answer line: "A:" then digits, alone on its line, at the end of the completion.
_ANSWER = re.compile(r"(?:^|\n)A:(\d+)\s*$")
_LINE = re.compile(r"^(\d+[a-t][+-]\d+=\d+|(\d{3}:)?\d=\d)$")


def extract_answer(completion: str) -> str | None:
    """The digits after the last-line `A:` marker, or None when the completion is malformed.

    Special tokens (e.g. a trailing "<eos>" when decoded without skipping them) are stripped first.
    >>> extract_answer("6-7=9\\n9+5=4\\n4-8=6\\nA:6")
    '6'
    """
    m = _ANSWER.search(_clean(completion))
    return str(int(m.group(1))) if m else None


def _clean(completion: str) -> str:
    return completion.replace("<eos>", "").replace("<pad>", "").strip()


def is_well_formed(completion: str) -> bool:
    """Every line but the last is a scratchpad step and the last is `A:<digits>`."""
    lines = _clean(completion).split("\n")
    return extract_answer(completion) is not None and all(_LINE.match(x) for x in lines[:-1])


def arith_reward(completion: str, answer: str, prompt: str = "", format_bonus: float = 0.0) -> float:
    """1.0 when the final answer equals `answer` and, if `prompt` is given, the scratchpad is exactly one of
    the prompt's worked solutions (`arith.reference_solutions`: plain or counted); otherwise `format_bonus`
    for a well-formed scratchpad (off by default), else 0.0."""
    got = extract_answer(completion)
    if got is not None and got == str(int(answer)):
        references = reference_solutions(prompt) if prompt else ()
        if not references or _clean(completion) in references:
            return 1.0
    return format_bonus if format_bonus and is_well_formed(completion) else 0.0
