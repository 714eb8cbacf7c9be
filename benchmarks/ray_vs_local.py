"""In-process vs Ray runs of `specrl train`: learning curves, step-time ratios and where the time goes.

    python benchmarks/ray_vs_local.py --runs local=DIR ray2x1=DIR fsdp1x2=DIR --async-run DIR \
        --walls walls.txt --out docs/results/ray_vs_local.png

Prints one JSON line per run (mean step seconds and its parts, the ratio to the first run, startup =
wall - steps - evaluations - checkpoints) and one for the async run's policy lags and dropped groups.
`--walls` holds "NAME rc=0 wall=SECONDS" lines (the wall clock of each `specrl train` process).
"""
from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path

import numpy as np

from specrl.pipeline.run_dir import read_jsonl

PARTS = ("rollout_s", "train_s", "sync_s", "weight_transfer_s", "wait_rollout_s")


def summary(name: str, path: Path, wall: float | None) -> dict:
    rows, evals = read_jsonl(path / "metrics.jsonl"), read_jsonl(path / "eval.jsonl")
    steady = rows[1:] or rows  # the first step pays the actors' first compiles and page-ins
    out = {"run": name, "steps": len(rows), "step_s_mean": float(np.mean([r["step_s"] for r in steady])),
           **{f"{k}_mean": float(np.mean([r.get(k, 0.0) for r in steady])) for k in PARTS},
           "first_step_s": rows[0]["step_s"], "eval_s": sum(e["eval_s"] for e in evals),
           "reward_mean": [round(r["reward_mean"], 3) for r in rows],
           "eval_accuracy": {e["step"]: e["accuracy"] for e in evals}}
    if wall is not None:
        out["wall_s"] = wall
        out["startup_and_checkpoints_s"] = wall - sum(r["step_s"] for r in rows) - out["eval_s"]
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", nargs="+", required=True, help="NAME=RUN_DIR, the first is the reference")
    ap.add_argument("--async-run", default=None)
    ap.add_argument("--walls", default=None)
    ap.add_argument("--out", default="docs/results/ray_vs_local.png")
    a = ap.parse_args()
    walls = {}
    if a.walls:
        for line in Path(a.walls).read_text().splitlines():
            name, *kv = line.split()
            walls[name] = float(dict(x.split("=") for x in kv)["wall"])
    runs = [(n, Path(p)) for n, p in (r.split("=", 1) for r in a.runs)]
    sums = [summary(n, p, walls.get(n)) for n, p in runs]
    for s in sums:
        s["step_ratio_vs_" + sums[0]["run"]] = s["step_s_mean"] / sums[0]["step_s_mean"]
        print(json.dumps(s))
    lags = None
    if a.async_run:
        rows = read_jsonl(Path(a.async_run) / "metrics.jsonl")
        lags = Counter(r["policy_lag"] for r in rows)
        s = summary(Path(a.async_run).name, Path(a.async_run), walls.get(Path(a.async_run).name))
        s.update(policy_lag_hist=dict(sorted(lags.items())), dropped_groups=rows[-1].get("dropped_groups", 0),
                 step_ratio_vs_first=s["step_s_mean"] / sums[0]["step_s_mean"])
        print(json.dumps(s))
    plot(runs, lags, Path(a.out))


def plot(runs, lags, out: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 3 if lags else 2, figsize=(15 if lags else 10, 4))
    for name, path in runs:
        rows, evals = read_jsonl(path / "metrics.jsonl"), read_jsonl(path / "eval.jsonl")
        line, = axes[0].plot([r["step"] for r in rows], [r["reward_mean"] for r in rows], "o-", label=f"{name} reward")
        axes[0].plot([e["step"] for e in evals], [e["accuracy"] for e in evals], "s--", color=line.get_color(),
                     label=f"{name} held-out acc")
        axes[1].plot([r["step"] for r in rows], [r["step_s"] for r in rows], "o-", label=name)
    axes[0].set(xlabel="RL step", ylabel="reward / accuracy", title="learning: in-process vs Ray")
    axes[1].set(xlabel="RL step", ylabel="step seconds", title="step time")
    for ax in axes[:2]:
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    if lags:
        axes[2].bar([str(k) for k in sorted(lags)], [lags[k] for k in sorted(lags)])
        axes[2].set(xlabel="policy lag (versions)", ylabel="steps", title="async Ray run: policy lag")
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100)
    print(json.dumps({"plot": str(out)}))


if __name__ == "__main__":
    main()
