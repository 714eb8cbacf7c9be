"""A real-model RL run with SD on and off: reward and held-out accuracy per step of two `specrl train` run
directories, in one plot and one JSONL (docs/results/real_rl_smollm2.{png,jsonl}).

The runs behind the committed figures (SmolLM2-135M-Instruct, one-digit sums and differences, 20 steps of
8 prompts x 8 samples, bf16 engine + bf16 autocast, both arms started together):

    python -m specrl fetch-model smollm2 --out ckpt/smollm2
    python -m specrl make-data math --difficulty tiny --chat --n 2000 --out data/tiny_train.jsonl
    python -m specrl make-data math --difficulty tiny --chat --n 64 --seed 1 --out data/tiny_test.jsonl
    for arm in "sdoff none" "sdon auto"; do set -- $arm
      python -m specrl train model=ckpt/smollm2 data.source=data/tiny_train.jsonl \\
        data.eval_source=data/tiny_test.jsonl data.eval_size=64 data.eval_max_tokens=48 reward.name=flexible \\
        rollout.prompts_per_step=8 rollout.n=8 rollout.max_tokens=64 rollout.dtype=bfloat16 \\
        rollout.spec.method=$2 optim.autocast=true optim.micro_batch_size=8 optim.micro_batch_tokens=1024 \\
        optim.activation_checkpointing=true optim.lr=2e-5 optim.warmup_steps=2 schedule.max_steps=20 \\
        schedule.eval_every=10 num_threads=1 out_dir=runs/rl_$1 &
    done; wait
    python benchmarks/real_rl.py --runs "SD off=runs/rl_sdoff" "SD on (auto)=runs/rl_sdon"
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout without install

from specrl.pipeline.run_dir import read_jsonl  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", nargs="+", required=True, help="LABEL=RUN_DIR")
    ap.add_argument("--out", default=str(ROOT / "docs/results/real_rl_smollm2"))
    args = ap.parse_args()
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_r, ax_e) = plt.subplots(1, 2, figsize=(10, 3.8))
    rows_out = []
    for spec in args.runs:
        label, run = spec.split("=", 1)
        metrics, evals = read_jsonl(Path(run) / "metrics.jsonl"), read_jsonl(Path(run) / "eval.jsonl")
        ax_r.plot([m["step"] for m in metrics], [m["reward_mean"] for m in metrics], "-", label=label)
        ax_e.plot([e["step"] for e in evals], [e["accuracy"] for e in evals], "o-", label=label)
        summary = {"run": label, "steps": len(metrics),
                   "reward": [round(m["reward_mean"], 4) for m in metrics],
                   "eval_accuracy": {e["step"]: round(e["accuracy"], 4) for e in evals},
                   "median_rollout_s": round(statistics.median(m["rollout_s"] for m in metrics), 2),
                   "median_train_s": round(statistics.median(m["train_s"] for m in metrics), 2),
                   "median_step_s": round(statistics.median(m["step_s"] for m in metrics), 2),
                   "acceptance_length": round(statistics.mean(m["acceptance_length"] for m in metrics), 3),
                   "logprob_diff_mean": round(statistics.mean(m["logprob_diff"] for m in metrics), 4)}
        rows_out.append(summary)
        print(json.dumps(summary))
    ax_r.set(xlabel="RL step", ylabel="mean reward (flexible)", title="train reward")
    ax_e.set(xlabel="RL step", ylabel="greedy accuracy", title="held-out accuracy (64 problems)")
    for ax in (ax_r, ax_e):
        ax.grid(alpha=0.3)
        ax.legend()
    fig.suptitle("SmolLM2-135M-Instruct, GRPO on one-digit sums, SD on vs off")
    fig.tight_layout()
    fig.savefig(args.out + ".png", dpi=110)
    Path(args.out + ".jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows_out))
    print(f"wrote {args.out}.png and {args.out}.jsonl")


if __name__ == "__main__":
    main()
