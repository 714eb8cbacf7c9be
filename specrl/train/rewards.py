"""Verifiable rewards by name: (completion text, reference answer, prompt) -> float.

    "arith"        the embedded task's checker (the whole worked solution, rebuilt from the prompt)
    "boxed"        exact match of the last \\boxed{...} in the completion against the answer
    "math_verify"  symbolic equivalence with the `math-verify` package (imported only when asked for)
"""
from __future__ import annotations

from typing import Protocol

from ..errors import MissingDependency
from ..rl.registry import Registry


class RewardFn(Protocol):
    def __call__(self, completion: str, answer: str, prompt: str = "") -> float: ...


REWARDS: Registry[RewardFn] = Registry("reward")
register_reward = REWARDS.register


def get_reward(name: str) -> RewardFn:
    """The reward function called `name`; an unknown name raises a ValueError listing the valid ones."""
    return REWARDS.get(name)


@register_reward("arith")
def arith(completion: str, answer: str, prompt: str = "") -> float:
    from ..tasks.reward import arith_reward
    return arith_reward(completion, answer, prompt)


def last_boxed(text: str) -> str | None:
    r"""Content of the last \boxed{...}, braces balanced (so \boxed{\frac{1}{2}} gives \frac{1}{2})."""
    start = text.rfind("\\boxed{")
    if start < 0:
        return None
    i = start + len("\\boxed{")
    depth = 1
    for j in range(i, len(text)):
        depth += {"{": 1, "}": -1}.get(text[j], 0)
        if depth == 0:
            return text[i:j]
    return None  # unbalanced: the completion was cut off inside the box


def _normalise(s: str) -> str:
    return "".join(s.split()).removeprefix("$").removesuffix("$")


@register_reward("boxed")
def boxed(completion: str, answer: str, prompt: str = "") -> float:
    got = last_boxed(completion)
    if got is None:
        return 0.0
    want = last_boxed(answer)
    return float(_normalise(got) == _normalise(want if want is not None else answer))


@register_reward("math_verify")
def math_verify_reward(completion: str, answer: str, prompt: str = "") -> float:
    try:
        from math_verify import parse, verify
    except ImportError:
        raise MissingDependency("reward 'math_verify' needs the math-verify package: `pip install math-verify`, "
                          "or use reward.name=boxed for exact match on \\boxed{...}") from None
    gold = parse(answer if "\\boxed" in answer or "$" in answer else f"${answer}$")
    return float(verify(gold, parse(completion)))
