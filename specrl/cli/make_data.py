"""`specrl make-data math|steps --n 2000 --difficulty LEVEL --out FILE`: a JSONL prompt set for real models.

Each row has `prompt` (or, with --chat, `messages`: one user turn; steps: its worked example as a prior exchange
first) and `answer`, plus metadata columns.
    math:  word problems answered in \\boxed{}; `difficulty`, `steps`. Train with `reward.name=boxed` (or
           flexible, math_verify).
    steps: 5-9 chained operations (`long`: 10-14 on one-digit operands) written as one `Step k: x op y = z` line
           each, then `Answer: N`; `start` and `ops` are the columns its reward checks each line against. Train
           with `reward.name=steps`.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

# kind -> (what it is, its generator "module:function" (n, difficulty, seed) -> problems with .row(chat),
# its difficulties' "module:NAME", the default difficulty)
GENERATORS = {
    "math": ("procedural word problems with a \\boxed{} integer answer (specrl.tasks.math_word)",
             "specrl.tasks.math_word:make_word_problems", "specrl.tasks.math_word:DIFFICULTIES", "easy"),
    "steps": ("chained arithmetic answered as a checked `Step k: x op y = z` ledger (specrl.tasks.steps)",
              "specrl.tasks.steps:make_steps_problems", "specrl.tasks.steps:DIFFICULTIES", "medium"),
}


def main(argv: list[str] | None = None) -> int:
    from ..registry import load

    ap = argparse.ArgumentParser(prog="specrl make-data", description=__doc__.splitlines()[0])
    ap.add_argument("kind", help="; ".join(f"{k}: {v[0]}" for k, v in GENERATORS.items()))
    ap.add_argument("--n", type=int, default=2000, help="rows to write")
    ap.add_argument("--difficulty", default=None,
                    help="math: tiny|easy|hard|mix (default easy); steps: easy|medium|hard|long|mix (default medium; "
                         "mix draws from the first three)")
    ap.add_argument("--seed", type=int, default=0, help="use different seeds for train and test files")
    ap.add_argument("--chat", action="store_true", help="write `messages` (one user turn) instead of `prompt`")
    ap.add_argument("--out", required=True, help="output .jsonl path ('-' for stdout)")
    ns = ap.parse_args(argv)
    if ns.kind not in GENERATORS:  # errors end as one line through specrl.cli.main
        raise ValueError(f"unknown data kind {ns.kind!r}; valid: {sorted(GENERATORS)}")
    _, make, levels, default = GENERATORS[ns.kind]
    difficulty = ns.difficulty or default
    if difficulty not in load(levels):
        raise ValueError(f"--difficulty {difficulty!r} is not one of {ns.kind}'s: {list(load(levels))}")
    problems = load(make)(ns.n, difficulty, ns.seed)
    text = "".join(json.dumps(p.row(ns.chat)) + "\n" for p in problems)
    if ns.out == "-":
        sys.stdout.write(text)
    else:
        from ..io import atomic_write_text
        atomic_write_text(Path(ns.out), text)
        print(json.dumps({"out": ns.out, "kind": ns.kind, "rows": len(problems), "difficulty": difficulty,
                          "seed": ns.seed}), file=sys.stderr)
    return 0
