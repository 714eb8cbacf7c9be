"""GRPO with speculative rollouts vs without: same learning, faster steps.

Trains `--seeds` seeds with SD on (`--method`, default: the config's) and the same seeds with SD off, for the
same number of steps, and prints JSON lines:
  - per run: final train reward, final held-out accuracy, mean rollout / step time, acceptance length;
  - the comparison: final reward and accuracy SD on vs off against the seed-to-seed noise (lossless SD
    changes which samples are drawn, not their distribution, so the curves agree within noise);
  - speed: rollout speedup a, measured step speedup, and the NeMo-RL bound 1 / (R_gen / a + 1 - R_gen)
    with R_gen the generation share of the SD-off step.
Writes one plot with both reward curves (mean over seeds, band = min..max) to OUT/sd_vs_nosd.png.

    python experiments/train_sd_vs_nosd.py --seeds 3 --steps 20 --out runs/sd_vs_nosd [key=value ...]
"""
from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from specrl.pipeline.run_dir import read_jsonl
from specrl.pipeline.run import train
from specrl.cli.train import build_config

WARMUP_STEPS = 1  # the first step pays one-off costs (allocations, first-touch), left out of the timings


def run_one(out: Path, seed: int, method: str | None, steps: int, overrides: list[str]) -> dict:
    run_dir = out / f"{method or 'nosd'}_seed{seed}"
    if not (run_dir / "metrics.jsonl").is_file() or len(read_jsonl(run_dir / "metrics.jsonl")) < steps:
        cfg = build_config(None, overrides + [f"seed={seed}", f"max_steps={steps}", f"out_dir={run_dir}",
                                              f"rollout.spec.method={method or 'null'}", "progress=false"])
        if (run_dir / "metrics.jsonl").is_file():
            import shutil
            shutil.rmtree(run_dir)
        train(cfg)
    rows, evals = read_jsonl(run_dir / "metrics.jsonl"), read_jsonl(run_dir / "eval.jsonl")
    timed = rows[WARMUP_STEPS:] or rows
    last = rows[-max(1, len(rows) // 4):]  # final reward: mean over the last quarter of the steps
    return {"method": method or "off", "seed": seed, "rows": rows, "evals": evals,
            "final_reward": statistics.fmean(r["reward_mean"] for r in last),
            "final_accuracy": evals[-1]["accuracy"], "initial_accuracy": evals[0]["accuracy"],
            "rollout_s": statistics.fmean(r["rollout_s"] for r in timed),
            "step_s": statistics.fmean(r["step_s"] for r in timed),
            "acceptance_length": statistics.fmean(r["acceptance_length"] for r in timed)}


def agree(on: list[float], off: list[float]) -> dict:
    """Difference of means against its standard error from the seed-to-seed spread (|z| < 2: agree)."""
    sd_on = statistics.stdev(on) if len(on) > 1 else 0.0
    sd_off = statistics.stdev(off) if len(off) > 1 else 0.0
    se = ((sd_on ** 2) / len(on) + (sd_off ** 2) / len(off)) ** 0.5
    diff = statistics.fmean(on) - statistics.fmean(off)
    return {"on_mean": statistics.fmean(on), "off_mean": statistics.fmean(off), "on_std": sd_on, "off_std": sd_off,
            "diff": diff, "stderr": se, "within_noise": abs(diff) <= 2 * se + 1e-12}


def speed(on: list[dict], off: list[dict]) -> dict:
    roll_on, roll_off = (statistics.fmean(r["rollout_s"] for r in rs) for rs in (on, off))
    step_on, step_off = (statistics.fmean(r["step_s"] for r in rs) for rs in (on, off))
    a = roll_off / roll_on
    r_gen = roll_off / step_off
    return {"rollout_s_on": roll_on, "rollout_s_off": roll_off, "step_s_on": step_on, "step_s_off": step_off,
            "rollout_speedup": a, "step_speedup": step_off / step_on, "R_gen": r_gen,
            "step_speedup_bound": 1.0 / (r_gen / a + 1.0 - r_gen),
            "acceptance_length": statistics.fmean(r["acceptance_length"] for r in on)}


def plot(on: list[dict], off: list[dict], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7, 4))
    for runs, label, color in ((on, f"SD on ({on[0]['method']})", "tab:blue"), (off, "SD off", "tab:orange")):
        steps = [r["step"] for r in runs[0]["rows"]]
        per_step = list(zip(*[[r["reward_mean"] for r in run["rows"]] for run in runs]))
        ax.plot(steps, [statistics.fmean(v) for v in per_step], color=color, label=f"{label}: train reward")
        ax.fill_between(steps, [min(v) for v in per_step], [max(v) for v in per_step], color=color, alpha=0.2)
        ev_steps = [e["step"] for e in runs[0]["evals"]]
        ev = list(zip(*[[e["accuracy"] for e in run["evals"]] for run in runs]))
        ax.plot(ev_steps, [statistics.fmean(v) for v in ev], "o--", color=color, label=f"{label}: held-out acc")
    ax.set_xlabel("RL step")
    ax.set_ylabel("reward / accuracy")
    ax.set_title(f"GRPO, {len(on)} seeds each: SD on vs off (band: min..max over seeds)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--method", default=None, help="SD method for the 'on' runs (default: the config's)")
    ap.add_argument("--out", default="runs/sd_vs_nosd")
    ap.add_argument("overrides", nargs="*", help="TrainConfig overrides for every run, e.g. rollout.n=8")
    args = ap.parse_args()
    out = Path(args.out)
    method = args.method or build_config(None, args.overrides).rollout.spec.method
    on, off = [], []
    for s in range(args.seeds):  # interleaved, so that a change in machine load hits both arms alike
        on.append(run_one(out, s, method, args.steps, args.overrides))
        off.append(run_one(out, s, None, args.steps, args.overrides))
    for r in on + off:
        print(json.dumps({k: v for k, v in r.items() if k not in ("rows", "evals")}))
    print(json.dumps({"compare": "final_reward", **agree([r["final_reward"] for r in on],
                                                         [r["final_reward"] for r in off])}))
    print(json.dumps({"compare": "final_accuracy", **agree([r["final_accuracy"] for r in on],
                                                           [r["final_accuracy"] for r in off])}))
    print(json.dumps({"compare": "speed", **speed(on, off)}))
    plot(on, off, out / "sd_vs_nosd.png")
    print(json.dumps({"plot": str(out / "sd_vs_nosd.png")}))


if __name__ == "__main__":
    main()
