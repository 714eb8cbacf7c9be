"""`specrl make-data math --n 2000 --difficulty tiny|easy|hard|mix --out FILE`: a JSONL prompt set for real models.

Each row has `prompt` (or, with --chat, `messages` = one user turn) and `answer`, plus `difficulty` and
`steps`; train on it with `specrl train data.source=FILE reward.name=boxed` (or flexible, math_verify).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

GENERATORS = {"math": "procedural word problems with a \\boxed{} integer answer (specrl.tasks.math_word)"}


def main(argv: list[str] | None = None) -> int:
    from ..tasks.math_word import DIFFICULTIES, make_word_problems

    ap = argparse.ArgumentParser(prog="specrl make-data", description=__doc__.splitlines()[0])
    ap.add_argument("kind", help=f"one of {sorted(GENERATORS)}")
    ap.add_argument("--n", type=int, default=2000, help="rows to write")
    ap.add_argument("--difficulty", default="easy", help=f"one of {list(DIFFICULTIES)}")
    ap.add_argument("--seed", type=int, default=0, help="use different seeds for train and test files")
    ap.add_argument("--chat", action="store_true", help="write `messages` (one user turn) instead of `prompt`")
    ap.add_argument("--out", required=True, help="output .jsonl path ('-' for stdout)")
    ns = ap.parse_args(argv)
    if ns.kind not in GENERATORS:  # errors end as one line through specrl.cli.main
        raise ValueError(f"unknown data kind {ns.kind!r}; valid: {sorted(GENERATORS)}")
    problems = make_word_problems(ns.n, ns.difficulty, ns.seed)
    text = "".join(json.dumps(p.row(ns.chat)) + "\n" for p in problems)
    if ns.out == "-":
        sys.stdout.write(text)
    else:
        from ..io import atomic_write_text
        atomic_write_text(Path(ns.out), text)
        print(json.dumps({"out": ns.out, "rows": len(problems), "difficulty": ns.difficulty, "seed": ns.seed}),
              file=sys.stderr)
    return 0
