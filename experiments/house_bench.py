"""`specrl bench spec` on two source trees side by side: one driver alternates fresh processes of each, so a
load change on a shared machine hits both trees alike (a refactor's before/after speed check).

    python experiments/house_bench.py BASE_TREE AFTER_TREE ROUNDS OUT.jsonl -- BENCH_SPEC_ARGS...

Round r runs base then after for even r and after then base for odd r (ABBA), each as
`python -m specrl bench spec BENCH_SPEC_ARGS` with the tree on PYTHONPATH and OMP_NUM_THREADS=1. Every JSON line
the bench prints is appended to OUT.jsonl tagged with its tree and round. Then one summary line per (method,
batch size): each tree's median tokens_per_s, cpu_tokens_per_s and speedup (SD over SD off in the same
process), and after / base of each median.
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

KEYS = ("tokens_per_s", "cpu_tokens_per_s", "speedup")


def run(tree: str, args: list[str]) -> list[dict]:
    env = {**os.environ, "PYTHONPATH": tree, "OMP_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, "-m", "specrl", "bench", "spec", *args], cwd=tree, env=env,
                         capture_output=True, text=True, check=True).stdout
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def summary(rows: list[dict]) -> list[dict]:
    out = []
    for method, bs in sorted({(r["method"], r["batch_size"]) for r in rows if "tokens_per_s" in r}, key=str):
        line = {"method": method, "batch_size": bs}
        for key in KEYS:
            med = {t: statistics.median(r[key] for r in rows if r["tree"] == t and r["method"] == method
                                        and r["batch_size"] == bs and key in r) for t in ("base", "after")}
            line.update({f"base_{key}": round(med["base"], 4), f"after_{key}": round(med["after"], 4),
                         f"ratio_{key}": round(med["after"] / med["base"], 4)})
        line["runs"] = sum(r["tree"] == "base" and r["method"] == method and r["batch_size"] == bs for r in rows)
        out.append(line)
    return out


def main() -> int:
    base, after, rounds, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), Path(sys.argv[4])
    args = sys.argv[sys.argv.index("--") + 1:]
    rows = []
    for r in range(rounds):
        for tree, path in ((("base", base), ("after", after)) if r % 2 == 0 else (("after", after), ("base", base))):
            for row in run(path, args):
                rows.append({"tree": tree, "round": r, **row})
                with out.open("a") as f:
                    f.write(json.dumps(rows[-1]) + "\n")
    for line in summary(rows):
        print(json.dumps(line))
    return 0


if __name__ == "__main__":
    sys.exit(main())
