"""Verifiable rewards: batched functions `fn(completions: list[str], rows: list[dict]) -> list[float]`, by name
(`reward.name`) or as a plug-in (`reward.fn=package.module:function`). Each row dict is the example's data row:
`prompt`, `answer` and the file's other columns; a reward declares the columns it reads beyond `prompt` and
`answer` as `fn.required_columns`, and a run checks every row has them before it starts.

Shipped by name (`REWARDS`; the per-completion ones are registered with `register_reward`, which batches them):
    "chain"        the embedded tasks' checker (the whole worked solution, rebuilt from the prompt); also "arith"
    "boxed"        the last \\boxed{...} in the completion against the answer: numerically when both read as
                   numbers (19 = 19.0, 1,900 = 1900, \\frac{1}{2} = 1/2 = 0.5), else the exact text up to
                   whitespace, $...$ and \\text{...} wrappers
    "flexible"     the last non-empty \\boxed{...}, else the last number in the completion, compared as "boxed"
                   does (lm-evaluation-harness's "flexible-extract" for GSM8K): for small models that answer
                   right but in the wrong format, so that RL has a signal before the format is learned
    "math_verify"  symbolic equivalence with the `math-verify` package (imported only when asked for)
    "steps"        `specrl make-data steps`' ledger: each `Step k: x op y = z` line checked against the row's
                   `start` and `ops` columns, plus the answer (specrl.tasks.ledger)
"""
from __future__ import annotations

import math
import re
import threading
from dataclasses import dataclass
from typing import Callable, Protocol

from ..errors import ConfigError, MissingDependency, UserError
from ..rl.registry import Registry


class RewardFn(Protocol):
    """One completion's reward (what `register_reward` registers)."""

    def __call__(self, completion: str, answer: str, prompt: str = "") -> float: ...


class BatchRewardFn(Protocol):
    """A batch's rewards, one float per completion in order; rows[i] is completion i's data row."""

    def __call__(self, completions: list[str], rows: list[dict]) -> list[float]: ...


class RewardError(UserError, ValueError):
    """A reward function returned something other than one finite float per completion."""


BASE_COLUMNS = ("prompt", "answer")  # every example's row has these


@dataclass(frozen=True)
class Reward:
    """What a run scores with, whether named or a plug-in: a batched function, the row columns it reads and how
    the config named it (for errors)."""
    fn: BatchRewardFn
    columns: tuple[str, ...]
    source: str  # e.g. "reward.name=boxed", "reward.fn=mypkg.rewards:score"

    def __call__(self, completions: list[str], rows: list[dict]) -> list[float]:
        out = self.fn(completions, rows)
        try:
            out = [float(r) for r in out]
        except (TypeError, ValueError) as e:
            raise RewardError(f"{self.source} returned {type(out).__name__} ({e}); return a list of floats, one "
                              "per completion") from None
        if len(out) != len(completions):
            raise RewardError(f"{self.source} returned {len(out)} rewards for {len(completions)} completions; "
                              "return one float per completion, in the order given")
        bad = [r for r in out if not math.isfinite(r)]
        if bad:
            raise RewardError(f"{self.source} returned a non-finite reward ({bad[0]}); return finite floats")
        return out


def per_sample(fn: RewardFn) -> BatchRewardFn:
    """A per-completion reward as a batched one: fn(completion, row["answer"], row["prompt"]) for each."""
    def batched(completions: list[str], rows: list[dict]) -> list[float]:
        return [fn(c, row["answer"], row["prompt"]) for c, row in zip(completions, rows)]
    return batched


REWARDS: Registry[Reward] = Registry("reward")


def register_reward(name: str) -> Callable[[RewardFn], RewardFn]:
    """Registers a per-completion reward `fn(completion, answer, prompt="") -> float` under `name`."""
    def decorator(fn: RewardFn) -> RewardFn:
        REWARDS.register(name)(Reward(per_sample(fn), BASE_COLUMNS, f"reward.name={name}"))
        return fn
    return decorator


def register_batch_reward(name: str) -> Callable[[BatchRewardFn], BatchRewardFn]:
    """Registers a batched reward under `name`, with the columns it declares (`fn.required_columns`)."""
    def decorator(fn: BatchRewardFn) -> BatchRewardFn:
        REWARDS.register(name)(Reward(fn, _columns(fn, f"reward.name={name}"), f"reward.name={name}"))
        return fn
    return decorator


def get_reward(name: str) -> RewardFn:
    """One completion's reward under a registered `name` (scripts, tests): the batched reward on a one-row batch
    of prompt and answer. An unknown name raises a ValueError listing the valid ones."""
    reward = REWARDS.get(name)
    return lambda completion, answer, prompt="": reward([completion], [{"prompt": prompt, "answer": answer}])[0]


def resolve_reward(name: str, fn: str | None = None) -> Reward:
    """The run's reward: plug-in `fn` ("package.module:function") when given, else the one registered as `name`.
    A bad name, module or function is a ConfigError naming the fix."""
    if fn is None:
        if name not in REWARDS:
            raise ConfigError(f"reward.name={name!r} is invalid: expected one of {REWARDS.names}, or a plug-in "
                              "reward.fn=package.module:function")
        return REWARDS.get(name)
    return Reward(_import(fn), _columns(_import(fn), f"reward.fn={fn}"), f"reward.fn={fn}")


def _import(target: str) -> BatchRewardFn:
    import sys

    from ..registry import load
    module, sep, attr = target.partition(":")
    fix = "give reward.fn=package.module:function, a batched fn(completions, rows) -> list[float] on PYTHONPATH"
    if not sep or not module or not attr:
        raise ConfigError(f"reward.fn={target!r} is not a 'module:function' path; {fix}")
    try:
        obj = load(target)
    except ImportError as e:
        raise ConfigError(f"reward.fn={target!r}: module {module!r} cannot be imported ({e}); {fix}") from None
    except AttributeError:
        obj = None
    if not callable(obj):
        what = "is not callable" if obj is not None else "has no attribute of that name"
        found = vars(sys.modules[module]) if module in sys.modules else {}
        public = sorted(k for k, v in found.items() if callable(v) and not k.startswith("_"))[:12]
        raise ConfigError(f"reward.fn={target!r}: {attr!r} in module {module!r} {what} (its functions: {public}); "
                          f"{fix}")
    return obj


def _columns(fn, source: str) -> tuple[str, ...]:
    cols = getattr(fn, "required_columns", BASE_COLUMNS)
    if isinstance(cols, str) or not all(isinstance(c, str) for c in cols):
        raise ConfigError(f"{source}: required_columns={cols!r} must be a tuple of column names, e.g. "
                          "('answer', 'ops')")
    return tuple(dict.fromkeys((*BASE_COLUMNS, *cols)))


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


def steps(completions: list[str], rows: list[dict]) -> list[float]:
    from ..tasks.ledger import steps_reward
    return steps_reward(completions, rows)


steps.required_columns = ("answer", "start", "ops")
register_batch_reward("steps")(steps)
