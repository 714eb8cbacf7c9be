"""Verifiable rewards by name: (completion text, reference answer, prompt) -> float.

    "chain"        the embedded tasks' checker (the whole worked solution, rebuilt from the prompt); also "arith"
    "boxed"        the last \\boxed{...} in the completion against the answer: numerically when both read as
                   numbers (19 = 19.0, 1,900 = 1900, \\frac{1}{2} = 1/2 = 0.5), else the exact text up to
                   whitespace, $...$ and \\text{...} wrappers
    "flexible"     the last non-empty \\boxed{...}, else the last number in the completion, compared as "boxed"
                   does (lm-evaluation-harness's "flexible-extract" for GSM8K): for small models that answer
                   right but in the wrong format, so that RL has a signal before the format is learned
    "math_verify"  symbolic equivalence with the `math-verify` package (imported only when asked for)
"""
from __future__ import annotations

import re
import threading
from typing import Protocol

from ..errors import MissingDependency
from ..rl.registry import Registry


class RewardFn(Protocol):
    def __call__(self, completion: str, answer: str, prompt: str = "") -> float: ...


REWARDS: Registry[RewardFn] = Registry("reward")
register_reward = REWARDS.register
get_reward = REWARDS.get  # an unknown name raises a ValueError listing the valid ones


@register_reward("chain")
@register_reward("arith")
def arith(completion: str, answer: str, prompt: str = "") -> float:
    from ..tasks.arith import arith_reward
    return arith_reward(completion, answer, prompt)


def last_boxed(text: str) -> str | None:
    r"""Content of the last \boxed{...}, braces balanced (so \boxed{\frac{1}{2}} gives \frac{1}{2})."""
    start = text.rfind("\\boxed{")
    if start < 0:
        return None
    i, depth = start + len("\\boxed{"), 1
    for j in range(i, len(text)):
        depth += {"{": 1, "}": -1}.get(text[j], 0)
        if depth == 0:
            return text[i:j]
    return None  # unbalanced: the completion was cut off inside the box


def _normalise(s: str) -> str:
    s = "".join(s.split()).removesuffix(".").strip("$")
    s = re.sub(r"\\(?:text|mathrm|textbf)\{([^{}]*)\}", r"\1", s)  # \text{19} -> 19
    return s.replace("\\!", "").replace("\\,", "").replace("\\%", "%")


_NUMBER = re.compile(r"[-+]?(\d+(\.\d*)?|\.\d+)")
_FRACTION = re.compile(r"([-+]?)\\d?frac\{([^{}]+)\}\{([^{}]+)\}|([^/]+)/([^/]+)")


def as_number(s: str) -> float | None:
    """A normalised answer as a number: '1,900' -> 1900, '-3.50' -> -3.5, '\\frac{1}{2}' or '1/2' -> 0.5; None
    when it is not one (an expression, a word, a fraction with a zero or non-numeric part)."""
    s = s.removesuffix("%")
    if re.fullmatch(r"[-+]?\d{1,3}(,\d{3})+(\.\d*)?", s):
        s = s.replace(",", "")
    if _NUMBER.fullmatch(s):
        return float(s)
    m = _FRACTION.fullmatch(s)
    if m is None:
        return None
    sign, num, den = (m[1], m[2], m[3]) if m[2] is not None else ("", m[4], m[5])
    num, den = as_number(num), as_number(den)
    return None if num is None or not den else (-1 if sign == "-" else 1) * num / den


@register_reward("boxed")
def boxed(completion: str, answer: str, prompt: str = "") -> float:
    got = last_boxed(completion)
    return 0.0 if got is None else _same_answer(got, answer)


_LAST_NUMBER = re.compile(r"[-+]?\d[\d,]*(?:\.\d+)?")


@register_reward("flexible")
def flexible(completion: str, answer: str, prompt: str = "") -> float:
    got = last_boxed(completion)
    if got is None or not _normalise(got):
        numbers = _LAST_NUMBER.findall(completion)
        if not numbers:
            return 0.0
        got = numbers[-1].rstrip(",")
    return _same_answer(got, answer)


def _same_answer(got: str, answer: str) -> float:
    want = last_boxed(answer)
    got, want = _normalise(got), _normalise(want if want is not None else answer)
    x, y = as_number(got), as_number(want)
    if x is not None and y is not None:
        return float(abs(x - y) <= 1e-6 * max(1.0, abs(y)))
    return float(got == want)


@register_reward("math_verify")
def math_verify_reward(completion: str, answer: str, prompt: str = "") -> float:
    try:
        from math_verify import parse, verify
    except ImportError:
        raise MissingDependency("reward 'math_verify' needs the math-verify package: `pip install math-verify`, "
                          "or use reward.name=boxed for exact match on \\boxed{...}") from None
    # math-verify's timeouts use signal.alarm, which only the main thread may set (rewards may run in a worker)
    timeout = 5 if threading.current_thread() is threading.main_thread() else None
    gold = parse(answer if "\\boxed" in answer or "$" in answer else f"${answer}$", parsing_timeout=timeout)
    return float(verify(gold, parse(completion, parsing_timeout=timeout), timeout_seconds=timeout))
