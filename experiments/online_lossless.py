"""Still lossless with an online drafter (issue 12): the embedded `specrl train` task with SD off and with
online EAGLE-3 SD (the default schedule, the shipped head trained every step), a few seeds each.

Why seeds and not a token-for-token match: sampling is counter-based (engine/rng.py), but verification spends
its own uniforms (accept, residual), so at temperature 1 SD on and SD off draw different, equally distributed
trajectories from the same seed. Step 1 runs the same policy on the same prompts in both arms; from then on
the policies differ by their samples. So the claim is distributional: the SD-on/off gap at the same seed
should be the size of the seed-to-seed gap within one arm, and `logprob_diff` (engine logprob minus the
trainer's recompute) should stay at the SD-off level.

Runs go one after the other (one torch thread each) and are reused when their metrics are complete. Prints
one JSON line per run and a comparison line; writes OUT/online_lossless.{jsonl,png}.

    python experiments/online_lossless.py --out runs/lossless --seeds 0 1 --steps 20 [key=value ...]
"""
from __future__ import annotations

import argparse
import json
import shutil
import statistics
from pathlib import Path

from specrl.cli.train import build_config
from specrl.pipeline.run import train
from specrl.pipeline.run_dir import read_jsonl

ARMS = {"sd_off": ["rollout.spec.method=null"],
        "online_eagle3": ["rollout.spec.method=eagle3", "rollout.drafter.online=true"]}
SHORT = ["rollout.prompts_per_step=8", "rollout.n=8", "data.eval_size=100", "schedule.eval_every=5",
         "num_threads=1", "tensorboard=false", "plots=false", "progress=false"]


def run(out: Path, name: str, steps: int, overrides: list[str]) -> tuple[list[dict], list[dict]]:
    run_dir = out / name
    if not ((run_dir / "metrics.jsonl").is_file() and len(read_jsonl(run_dir / "metrics.jsonl")) >= steps):
        shutil.rmtree(run_dir, ignore_errors=True)
        train(build_config(None, overrides + [f"schedule.max_steps={steps}", f"out_dir={run_dir}"]))
    return read_jsonl(run_dir / "metrics.jsonl"), read_jsonl(run_dir / "eval.jsonl")


def per_step(rows: list[dict], key: str) -> list[float]:
    return [r[key] for r in rows if key in r]


def mean_abs_gap(a: list[float], b: list[float]) -> float:
    return statistics.fmean(abs(x - y) for x, y in zip(a, b))


def compare(runs: dict, seeds: list[int]) -> dict:
    """Same-seed SD-on/off gaps against within-arm seed-to-seed gaps (mean |difference| over steps)."""
    arm = lambda a, s: runs[(a, s)]  # noqa: E731
    same_seed = [mean_abs_gap(per_step(arm("sd_off", s)[0], "reward_mean"),
                              per_step(arm("online_eagle3", s)[0], "reward_mean")) for s in seeds]
    pairs = [(s, t) for i, s in enumerate(seeds) for t in seeds[i + 1:]]
    across = [mean_abs_gap(per_step(arm(a, s)[0], "reward_mean"), per_step(arm(a, t)[0], "reward_mean"))
              for a in ARMS for s, t in pairs]
    acc_same = [mean_abs_gap(per_step(arm("sd_off", s)[1], "accuracy"),
                             per_step(arm("online_eagle3", s)[1], "accuracy")) for s in seeds]
    acc_across = [mean_abs_gap(per_step(arm(a, s)[1], "accuracy"), per_step(arm(a, t)[1], "accuracy"))
                  for a in ARMS for s, t in pairs]
    lp = {a: statistics.fmean(x for s in seeds for x in per_step(arm(a, s)[0], "logprob_diff")) for a in ARMS}
    lp_max = {a: max(x for s in seeds for x in per_step(arm(a, s)[0], "logprob_diff_max")) for a in ARMS}
    return {"compare": "lossless", "reward_gap_same_seed_sd_on_vs_off": statistics.fmean(same_seed),
            "reward_gap_across_seeds_same_arm": statistics.fmean(across) if across else None,
            "eval_acc_gap_same_seed_sd_on_vs_off": statistics.fmean(acc_same),
            "eval_acc_gap_across_seeds_same_arm": statistics.fmean(acc_across) if acc_across else None,
            "logprob_diff_mean": lp, "logprob_diff_max": lp_max}


def summary(arm: str, seed: int, rows: list[dict], evals: list[dict]) -> dict:
    return {"run": arm, "seed": seed, "steps": len(rows), "reward": per_step(rows, "reward_mean"),
            "eval_step": per_step(evals, "step"), "eval_accuracy": per_step(evals, "accuracy"),
            "logprob_diff": per_step(rows, "logprob_diff"), "acceptance_length": per_step(rows, "acceptance_length"),
            "drafter_version_end": rows[-1].get("drafter_version", 0),
            "step_s": statistics.fmean(per_step(rows, "step_s")[1:])}


def plot(path: Path, runs: dict) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    style = {"sd_off": "-", "online_eagle3": "--"}
    for (arm, seed), (rows, evals) in sorted(runs.items()):
        label, ls, color = f"{arm} seed {seed}", style[arm], f"C{seed}"
        axes[0].plot(per_step(rows, "step"), per_step(rows, "reward_mean"), ls, color=color, label=label)
        axes[1].plot(per_step(evals, "step"), per_step(evals, "accuracy"), ls, marker="o", color=color,
                     label=label)
        axes[2].semilogy(per_step(rows, "step"), per_step(rows, "logprob_diff"), ls, color=color, label=label)
    axes[0].set(xlabel="RL step", ylabel="train reward (mean of 8x8 samples)", title="reward")
    axes[1].set(xlabel="RL step", ylabel="held-out greedy accuracy (100 problems)", title="accuracy")
    axes[2].set(xlabel="RL step", ylabel="mean |engine - trainer logprob|", title="logprob_diff")
    for ax in axes:
        ax.legend(fontsize=7)
    fig.suptitle("online EAGLE-3 SD (dashed) against SD off (solid): same colour = same seed")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="runs/online_lossless")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("overrides", nargs="*")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    runs = {(arm, seed): run(out, f"{arm}_s{seed}", args.steps, SHORT + extra + [f"seed={seed}", *args.overrides])
            for seed in args.seeds for arm, extra in ARMS.items()}
    lines = [summary(arm, seed, *r) for (arm, seed), r in runs.items()] + [compare(runs, args.seeds)]
    with open(out / "online_lossless.jsonl", "w") as f:
        for line in lines:
            print(json.dumps(line))
            f.write(json.dumps(line) + "\n")
    plot(out / "online_lossless.png", runs)


if __name__ == "__main__":
    main()
