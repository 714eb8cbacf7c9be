"""Do two runs of `specrl train` give the same metrics, timings aside? (a refactor's before/after check)

    python experiments/same_metrics.py RUN_A RUN_B

Compares metrics.jsonl and eval.jsonl row by row: every key that is not a time (`*_s`, `*_per_s`) must be
equal. Prints one JSON line per file and exits 1 on a difference.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path


def rows(run: Path, name: str) -> list[dict]:
    return [json.loads(line) for line in (run / name).read_text().splitlines() if line.strip()]


def is_timing(key: str) -> bool:
    return key.endswith("_s") or key.endswith("_per_s") or key in ("time", "wall_time")


def compare(a: Path, b: Path, name: str) -> dict:
    ra, rb = rows(a, name), rows(b, name)
    diffs = [(i, k, x.get(k), y.get(k)) for i, (x, y) in enumerate(zip(ra, rb))
             for k in sorted(set(x) | set(y)) if not is_timing(k) and x.get(k) != y.get(k)]
    keys = sorted({k for r in ra + rb for k in r if not is_timing(k)})
    return {"file": name, "rows": [len(ra), len(rb)], "keys_compared": len(keys),
            "equal": not diffs and len(ra) == len(rb), "differences": diffs[:10]}


def main() -> int:
    a, b = map(Path, sys.argv[1:3])
    results = [compare(a, b, name) for name in ("metrics.jsonl", "eval.jsonl")]
    for r in results:
        print(json.dumps(r))
    return 0 if all(r["equal"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
