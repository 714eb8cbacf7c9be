"""Online drafter training against a frozen drafter, and a cold start from scratch (issue: drafters that
keep up with the policy). Every run is `specrl train` in this process, same seed, side by side:

  drift:  rollout.spec.method=eagle3 with the shipped (offline-trained) head, frozen vs
          rollout.drafter.online=true, for --steps RL steps (plus an SD-off run for the lossless check),
          with the --drift overrides (the setting that moves the policy)
  cold:   at the default policy settings, online from rollout.spec.draft_model=scratch (with the --cold
          drafter overrides) against the frozen shipped head, for --cold-steps steps

Runs whose directory already holds enough steps are read, not rerun, so arms can be run as separate
processes side by side (`specrl train ... out_dir=OUT/NAME` with the same overrides) and summarised here.

Prints JSON lines (per run: acceptance length at the start and end, rollout/step time, drafter training
time; comparisons: online end vs frozen end, share of the step spent on drafter training; final reward
and held-out accuracy against SD off) and writes OUT/online_drafter_{drift,cold}.png.

    python experiments/online_drafter.py --out runs/online --steps 60 --cold-steps 30 \
        --drift "optim.lr=3e-3 optim.min_lr_ratio=1.0 algorithm.kl_coef=0.1" \
        --cold "rollout.drafter.optim.lr=2e-3" \
        [key=value ...]
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

EDGE = 5  # steps averaged at the start and at the end of a run


def run(out: Path, name: str, steps: int, overrides: list[str]) -> list[dict]:
    run_dir = out / name
    if not ((run_dir / "metrics.jsonl").is_file() and len(read_jsonl(run_dir / "metrics.jsonl")) >= steps):
        shutil.rmtree(run_dir, ignore_errors=True)
        train(build_config(None, overrides + [f"max_steps={steps}", f"out_dir={run_dir}", "progress=false",
                                              "plots=false"]))
    return read_jsonl(run_dir / "metrics.jsonl")


def summary(name: str, rows: list[dict]) -> dict:
    mean = lambda key, rs: statistics.fmean(r.get(key, 0.0) for r in rs)  # noqa: E731
    head, tail = rows[:EDGE], rows[-EDGE:]
    return {"run": name, "steps": len(rows), "acceptance_start": mean("acceptance_length", head),
            "acceptance_end": mean("acceptance_length", tail), "acceptance_step0": rows[0]["acceptance_length"],
            "rollout_s": mean("rollout_s", rows[1:]), "step_s": mean("step_s", rows[1:]),
            "drafter_train_s": mean("drafter_train_s", rows[1:]), "reward_end": mean("reward_mean", tail),
            "eval_accuracy_end": rows[-1].get("eval_accuracy"), "logprob_diff": mean("logprob_diff", rows),
            "alarms": sum(bool(r.get("drafter_alarm")) for r in rows)}


def plot(path: Path, runs: dict[str, list[dict]], title: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(11, 4))
    for name, rows in runs.items():
        steps = [r["step"] for r in rows]
        if name != "sd_off":
            ax.plot(steps, [r["acceptance_length"] for r in rows], label=name)
        bx.plot(steps, [r["reward_mean"] for r in rows], label=name)
    ax.set(xlabel="RL step", ylabel="acceptance length (tokens per verify)", title=title)
    bx.set(xlabel="RL step", ylabel="train reward", title="reward (lossless: same distribution)")
    ax.legend()
    bx.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="runs/online_drafter")
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--cold-steps", type=int, default=30)
    ap.add_argument("--skip", default="", help="comma list of parts to skip: drift,cold,off")
    ap.add_argument("--drift", default="", help="space-separated overrides of the drift runs")
    ap.add_argument("--cold", default="", help="space-separated overrides of the scratch (cold start) run")
    ap.add_argument("overrides", nargs="*")
    args = ap.parse_args()
    out, skip = Path(args.out), set(filter(None, args.skip.split(",")))
    base = ["rollout.spec.method=eagle3", *args.overrides]
    online = ["rollout.drafter.online=true"]
    drift = base + args.drift.split()
    if "drift" not in skip:
        runs = {"frozen": run(out, "drift_frozen", args.steps, drift),
                "online": run(out, "drift_online", args.steps, drift + online)}
        if "off" not in skip:
            runs["sd_off"] = run(out, "drift_sd_off", args.steps, drift + ["rollout.spec.method=null"])
        for name, rows in runs.items():
            print(json.dumps(summary(name, rows)))
        fro, onl = summary("frozen", runs["frozen"]), summary("online", runs["online"])
        print(json.dumps({"compare": "drift", "online_keeps": onl["acceptance_end"] / onl["acceptance_step0"],
                          "online_over_frozen_end": onl["acceptance_end"] / fro["acceptance_end"] - 1,
                          "frozen_decay": fro["acceptance_end"] / fro["acceptance_start"] - 1,
                          "drafter_share_of_step": onl["drafter_train_s"] / onl["step_s"],
                          "step_online_over_frozen": onl["step_s"] / fro["step_s"]}))
        plot(out / "online_drafter_drift.png", runs, "frozen vs online EAGLE-3 head")
    if "cold" not in skip:
        cold = {"offline_frozen": run(out, "cold_frozen", args.cold_steps, base),
                "scratch_online": run(out, "cold_scratch", args.cold_steps,
                                      base + online + ["rollout.spec.draft_model=scratch"] + args.cold.split())}
        cold = {k: v[:args.cold_steps] for k, v in cold.items()}
        for name, rows in cold.items():
            print(json.dumps(summary(name, rows)))
        off, sc = cold["offline_frozen"], cold["scratch_online"]
        reach = [i + 1 for i in range(len(sc)) if statistics.fmean(r["acceptance_length"] for r in sc[max(0, i - 2):i + 1])
                 >= 0.8 * statistics.fmean(r["acceptance_length"] for r in off[max(0, i - 2):i + 1])]
        print(json.dumps({"compare": "cold", "first_step_at_80pct_of_offline": reach[0] if reach else None,
                          "scratch_end_over_offline_end": summary("s", sc)["acceptance_end"] /
                          summary("o", off)["acceptance_end"]}))
        plot(out / "online_drafter_cold.png", cold, "cold start: scratch + online vs offline head")


if __name__ == "__main__":
    main()
