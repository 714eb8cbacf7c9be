"""In-process vs Ray runs of `specrl train`: learning curves, step-time ratios and where the time goes.

    python benchmarks/ray_vs_local.py --runs local=DIR ray2x1=DIR fsdp1x2=DIR --async-run NAME=DIR \
        --walls walls.txt --out docs/results/ray_vs_local.png --lag-out docs/results/ray_async_lag.png \
        --jsonl docs/results/ray_vs_local.jsonl

Prints one JSON line per run (mean step seconds and its parts, the ratio to the first run, startup =
wall - steps - evaluations - checkpoints, rewards and held-out accuracies) and, for the async run, its
policy lags (per step: the oldest version in the batch), token lags (versions behind, per token: with
in-flight updates a sequence may continue on newer weights) and dropped groups. `--walls` holds
"NAME rc=0 wall=SECONDS" lines (the wall clock of each `specrl train` process). The runs are made with
`benchmarks/ray_vs_local.sh`.
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
           # on a shared machine a few contended steps pull the mean: the median is the steadier number
           "step_s_median": float(np.median([r["step_s"] for r in steady])),
           **{f"{k}_mean": float(np.mean([r.get(k, 0.0) for r in steady])) for k in PARTS},
           "first_step_s": rows[0]["step_s"], "steps_s_total": sum(r["step_s"] for r in rows),
           "eval_s": sum(e["eval_s"] for e in evals),
           "reward_mean": [round(r["reward_mean"], 3) for r in rows],
           "eval_accuracy": {e["step"]: e["accuracy"] for e in evals}}
    if wall is not None:
        out["wall_s"] = wall
        out["startup_and_checkpoints_s"] = wall - out["steps_s_total"] - out["eval_s"]
    return out


def async_summary(rows: list[dict]) -> dict:
    lags = Counter(r["policy_lag"] for r in rows)
    tokens: Counter = Counter()
    for r in rows:
        tokens.update({int(k): v for k, v in r.get("token_lags", {}).items()})
    return {"policy_lag_hist": dict(sorted(lags.items())), "token_lag_hist": dict(sorted(tokens.items())),
            "token_lag_mean": sum(k * v for k, v in tokens.items()) / max(sum(tokens.values()), 1),
            "steps_with_mixed_versions": sum(r.get("policy_lag", 0) != r.get("policy_lag_newest", r["policy_lag"])
                                             for r in rows),
            "stale_groups_dropped": sum(r.get("stale_groups", 0) for r in rows),
            "redrawn_groups": rows[-1].get("dropped_groups", 0)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", nargs="+", required=True, help="NAME=RUN_DIR, the first is the reference")
    ap.add_argument("--async-run", default=None, help="NAME=RUN_DIR of an async run")
    ap.add_argument("--walls", default=None)
    ap.add_argument("--out", default="docs/results/ray_vs_local.png")
    ap.add_argument("--lag-out", default="docs/results/ray_async_lag.png")
    ap.add_argument("--jsonl", default=None, help="also write the JSON lines here")
    a = ap.parse_args()
    walls = {}
    if a.walls:
        for line in Path(a.walls).read_text().splitlines():
            name, *kv = line.split()
            walls[name] = float(dict(x.split("=") for x in kv)["wall"])
    runs = [(n, Path(p)) for n, p in (r.split("=", 1) for r in a.runs)]
    async_run = tuple(a.async_run.split("=", 1)) if a.async_run else None
    if async_run:
        runs.append((async_run[0], Path(async_run[1])))
    sums = [summary(n, p, walls.get(n)) for n, p in runs]
    ref = sums[0]
    for s in sums:
        s["step_ratio_vs_" + ref["run"]] = s["step_s_mean"] / ref["step_s_mean"]
        s["median_step_ratio_vs_" + ref["run"]] = s["step_s_median"] / ref["step_s_median"]
        if "wall_s" in s and "wall_s" in ref:
            s["wall_ratio_vs_" + ref["run"]] = s["wall_s"] / ref["wall_s"]
    lag = None
    if async_run:
        lag = async_summary(read_jsonl(Path(async_run[1]) / "metrics.jsonl"))
        sums[-1].update(lag)
    lines = [json.dumps(s) for s in sums]
    for line in lines:
        print(line)
    if a.jsonl:
        Path(a.jsonl).write_text("".join(line + "\n" for line in lines))
    plot(runs, sums, Path(a.out))
    if lag:
        plot_lag(async_run[0], lag, Path(a.lag_out))


def plot(runs, sums, out: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 3, figsize=(17, 4.5))
    for name, path in runs:
        rows, evals = read_jsonl(path / "metrics.jsonl"), read_jsonl(path / "eval.jsonl")
        line, = axes[0].plot([r["step"] for r in rows], [r["reward_mean"] for r in rows], "o-", ms=3, alpha=0.6,
                             label=f"{name} reward")
        axes[0].plot([e["step"] for e in evals], [e["accuracy"] for e in evals], "s--", lw=2, color=line.get_color(),
                     label=f"{name} held-out acc")
    axes[0].set(xlabel="RL step", ylabel="train reward (dots) / held-out greedy accuracy (squares)",
                title="learning: in-process vs Ray")
    # where a step goes, in seconds per steady step, and the run's fixed cost (startup + checkpoints)
    names = [s["run"] for s in sums]
    x = np.arange(len(sums))
    bottom = np.zeros(len(sums))
    for key, label in (("rollout_s_mean", "rollout"), ("train_s_mean", "train"), ("sync_s_mean", "weight sync"),
                       ("wait_rollout_s_mean", "queue wait (async)")):
        vals = np.array([s[key] for s in sums])
        axes[1].bar(x, vals, bottom=bottom, label=label)
        bottom += vals
    for i, s in enumerate(sums):
        axes[1].text(i, s["step_s_mean"], f"{s['step_s_mean']:.1f}s\n{s['step_ratio_vs_' + names[0]]:.2f}x",
                     ha="center", va="bottom", fontsize=8)
    axes[1].set(xticks=x, xticklabels=names, ylabel="seconds per step (steps 2+)",
                title="step time and its parts (async stages overlap)")
    axes[2].bar(x, [s.get("startup_and_checkpoints_s", 0.0) for s in sums], label="startup + checkpoints")
    axes[2].bar(x, [s["weight_transfer_s_mean"] * s["steps"] for s in sums], alpha=0.7,
                label="weight transfer, all steps")
    axes[2].set(xticks=x, xticklabels=names, ylabel="seconds per run", title="fixed costs per run")
    for ax in axes:
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100)
    print(json.dumps({"plot": str(out)}))


def plot_lag(name: str, lag: dict, out: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    steps, toks = lag["policy_lag_hist"], lag["token_lag_hist"]
    axes[0].bar([str(k) for k in steps], list(steps.values()))
    axes[0].set(xlabel="policy lag of the batch's oldest token (versions)", ylabel="steps",
                title=f"{name}: lag per step; dropped groups {lag['stale_groups_dropped']}")
    if toks:
        total = sum(toks.values())
        axes[1].bar([str(k) for k in toks], [v / total for v in toks.values()])
    axes[1].set(xlabel="versions behind the policy they train", ylabel="share of tokens",
                title=f"per token (in-flight updates), mean {lag['token_lag_mean']:.2f}")
    for ax in axes:
        ax.grid(alpha=0.3)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100)
    print(json.dumps({"plot": str(out)}))


if __name__ == "__main__":
    main()
