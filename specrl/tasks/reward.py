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


def extract_answer(completion: str) -> str | None:
    """The digits of the last line's `A:<digits>` (special tokens such as a trailing "<eos>" stripped first),
    or None when the completion is malformed."""
    m = _ANSWER.search(_clean(completion))
    return str(int(m.group(1))) if m else None


def _clean(completion: str) -> str:
    return completion.replace("<eos>", "").replace("<pad>", "").strip()


def arith_reward(completion: str, answer: str, prompt: str = "") -> float:
    """1.0 when the final answer equals `answer` and, if `prompt` is given, the scratchpad is exactly one of
    the prompt's worked solutions (`arith.reference_solutions`: plain or counted); else 0.0."""
    got = extract_answer(completion)
    if got is None or got != str(int(answer)):
        return 0.0
    references = reference_solutions(prompt) if prompt else ()
    return float(not references or _clean(completion) in references)
