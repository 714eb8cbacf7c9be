"""The embedded tasks: function chasing with a worked scratchpad and a verifiable answer.

The prompt lists a random map f on the digits, a start s and a hop count n; the answer is f applied n times
to s, one scratchpad line per hop. A worked solution comes in one of two styles, and the checker accepts
either:

    prompt   = "Q:0=3 1=7 2=2 3=5 4=0 5=8 6=1 7=9 8=6 9=4 s6 n3=?\n"
    plain    = "6=1\n1=7\n7=9\nA:9"              (then EOS)
    counted  = "003:6=1\n002:1=7\n001:7=9\nA:9"  (each line first says how many hops are left)

A plain solution must count its own lines to know when to stop, which a small model cannot do on long
chains; a counted one stops at the line that says 1, at the price of more tokens a line.

The number of hops is drawn from a clipped lognormal, which gives response lengths the long right tail of
real reasoning rollouts; the named tasks (`TASKS`) are two such distributions.
"""
from __future__ import annotations

import hashlib
import math
import random
import re
from dataclasses import dataclass, replace
from typing import NamedTuple

from ..errors import require

SPLITS = ("train", "test")
_SPLIT_SALT = {"train": 0x5EED_0001, "test": 0x5EED_7E57}  # each split's seed stream (make_problems)
# Counted lines carry the hops left in a fixed width: every line then has the same length, so a small model
# finds the previous line's counter at a fixed distance back (it learns to decrement far sooner that way).
COUNTER_DIGITS = 3


@dataclass(frozen=True)
class ArithSpec:
    """Difficulty knobs of the task. The defaults are what the shipped base policy was trained on."""

    hops_median: float = 3.0    # median number of hops
    hops_sigma: float = 0.9     # lognormal shape: larger means a heavier tail
    min_hops: int = 1
    max_hops: int = 20
    # share of generated solutions (`Problem.response`, the supervised data) in the counted style; a prompt's
    # hash picks its style, so the prompts themselves do not depend on it
    counted_share: float = 0.0

    def __post_init__(self) -> None:
        self.validate()  # built in Python, from DataConfig's and the pretrain stages' hop knobs

    def validate(self) -> None:
        require(1 <= self.min_hops <= self.max_hops, "min_hops", self.min_hops, f"in [1, max_hops={self.max_hops}]")
        require(self.max_hops < 10 ** COUNTER_DIGITS, "max_hops", self.max_hops, f"< {10 ** COUNTER_DIGITS}",
                f"a chase counter has {COUNTER_DIGITS} digits")
        require(0.0 <= self.counted_share <= 1.0, "counted_share", self.counted_share, "a share in [0, 1]")
        require(self.hops_median > 0, "hops_median", self.hops_median, "> 0")
        require(self.hops_sigma >= 0, "hops_sigma", self.hops_sigma, ">= 0")


# The named embedded tasks (`data.source`). "chain" (the default) is shaped like reasoning RL: long median responses
# and a long right tail, so a rollout's time goes to a few long responses. "arith" is a short task.
TASKS: dict[str, ArithSpec] = {
    "chain": ArithSpec(hops_median=22.0, hops_sigma=0.7, max_hops=125),
    "arith": ArithSpec(),
}
DEFAULT_TASK = "chain"


def task_spec(name: str, hops_median: float | None = None, hops_sigma: float | None = None,
              max_hops: int | None = None) -> ArithSpec:
    """The named task's spec, with any hop-count knob given replacing its own."""
    if name not in TASKS:
        raise ValueError(f"unknown embedded task {name!r}; valid: {list(TASKS)} (or a .jsonl / .parquet file of "
                         "prompt/answer rows)")
    knobs = {"hops_median": hops_median, "hops_sigma": hops_sigma, "max_hops": max_hops}
    return replace(TASKS[name], **{k: v for k, v in knobs.items() if v is not None})


class Problem(NamedTuple):
    prompt: str      # "Q:0=3 1=7 2=2 3=5 4=0 5=8 6=1 7=9 8=6 9=4 s6 n3=?\n"
    response: str    # worked solution ending in "A:<answer>" (EOS is not part of the text)
    answer: str      # "9"
    num_ops: int


def chase_solution(f: list[int], start: int, hops: int, counted: bool) -> tuple[str, int]:
    """Worked solution of `hops` lookups from `start` through the map `f`, and the value reached."""
    lines, x = [], start
    for i in range(hops):
        lines.append(f"{hops - i:0{COUNTER_DIGITS}d}:{x}={f[x]}" if counted else f"{x}={f[x]}")
        x = f[x]
    return "\n".join(lines + [f"A:{x}"]), x


def prompt_hash(prompt: str) -> int:
    """Split assignment hash: a prompt belongs to the test split iff its hash is odd."""
    return int.from_bytes(hashlib.blake2b(prompt.encode(), digest_size=8).digest(), "little")


def make_problems(n: int, seed: int = 0, split: str = "train", spec: ArithSpec | None = None) -> list[Problem]:
    """`n` deterministic problems of `split` (of the default task, "chain", without `spec`). Train and test never
    share a prompt: a prompt goes to test iff `prompt_hash` is odd, and the two splits also use disjoint seed
    streams so that their difficulty mixes are independent draws."""
    if split not in SPLITS:
        raise ValueError(f"split={split!r}: expected one of {SPLITS}")
    if n < 0:
        raise ValueError(f"n={n}: expected a non-negative number of problems")
    spec = spec or TASKS[DEFAULT_TASK]
    rng = random.Random(_SPLIT_SALT[split] * 1_000_003 + seed)
    out: list[Problem] = []
    while len(out) < n:
        hops = round(math.exp(rng.gauss(math.log(spec.hops_median), spec.hops_sigma)))  # lognormal, then clipped
        hops = min(max(hops, spec.min_hops), spec.max_hops)
        f = [rng.randint(0, 9) for _ in range(10)]
        start = rng.randint(0, 9)
        table = " ".join(f"{i}={f[i]}" for i in range(10))
        prompt = f"Q:{table} s{start} n{hops}=?\n"
        h = prompt_hash(prompt)
        if (h & 1) == (split == "test"):  # bit 0 picks the split, the next bits the style
            response, x = chase_solution(f, start, hops, counted=(h >> 1) % 1000 < 1000 * spec.counted_share)
            out.append(Problem(prompt, response, str(x), hops))
    return out


_PROMPT = re.compile(r"Q:((?:\d=\d ){10})s(\d) n(\d+)=\?\n?")
_COUNTED_LINE = re.compile(rf"\d{{{COUNTER_DIGITS}}}:\d=\d")


def reference_solutions(prompt: str) -> tuple[str, ...]:
    """Both styles' worked solutions (scratchpad and `A:` line) of an embedded-task prompt, rebuilt from the
    prompt alone; () when `prompt` is not one of this task's prompts."""
    m = _PROMPT.fullmatch(prompt)
    if not m:
        return ()
    f = [int(pair[2]) for pair in m.group(1).split()]
    return tuple(chase_solution(f, int(m.group(2)), int(m.group(3)), counted)[0] for counted in (False, True))


def is_counted(response: str) -> bool:
    """Whether a response is written in the counted style (its first line starts `<hops left>:`)."""
    return bool(_COUNTED_LINE.match(response))


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
    the prompt's worked solutions (plain or counted); else 0.0. The map often has short cycles, so a chain with
    the wrong number of hops (or a wrong lookup that lands back on the cycle) can end on the right digit by luck:
    crediting that would reward the very habit (miscounting hops) that training should remove."""
    got = extract_answer(completion)
    if got is None or got != str(int(answer)):
        return 0.0
    references = reference_solutions(prompt) if prompt else ()
    return float(not references or _clean(completion) in references)
