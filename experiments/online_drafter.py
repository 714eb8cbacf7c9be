"""Online drafter training against a frozen drafter, and a cold start from scratch (issue: drafters that
keep up with the policy). Every run is `specrl train` in this process, same seed, same workload:

  drift:  rollout.spec.method=eagle3 with the shipped (offline-trained) head, for --steps RL steps: frozen,
          rollout.drafter.online=true, and online with rollout.drafter.reward_weighting=true (ReSpec);
          --drift overrides apply to all three (and to the SD-off run, skipped with --skip off)
  cold:   online from rollout.spec.draft_model=scratch (with the --cold drafter overrides) against the frozen
          shipped head of the drift arms: both read over their first --cold-steps steps. The scratch run has
          the drift runs' max_steps (--steps), so the policy's lr schedule is theirs; run it as its own
          process and stop it after --cold-steps steps (run in here it goes on to --steps).

Runs whose directory already holds enough steps are read, not rerun, so arms can be run as separate
processes one after another (`specrl train ... out_dir=OUT/NAME` with the same overrides) and summarised here.

Prints JSON lines (per run: acceptance length at step 1, the best and the last 5-step means, rollout/step
time, drafter training time and its share of the step; reward and held-out accuracy; the per-step
acceptance and reward; comparisons:
online end vs its best and vs frozen end, and the cold start's share of the offline head per step) and
writes OUT/online_drafter_{drift,cold}.png.

    python experiments/online_drafter.py --out runs/chain --steps 60 --cold-steps 30 --skip off \
        --cold "rollout.drafter.optim.lr=1e-3 rollout.drafter.sample_fraction=1.0 \
                rollout.drafter.updates_per_step=4" \
        schedule.eval_every=0 num_threads=1 rollout.prompts_per_step=4
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

EDGE = 5  # steps averaged at the start and at the end of a run (and the window of the best mean)


def run(out: Path, name: str, need: int, max_steps: int, overrides: list[str]) -> list[dict]:
    """The first `need` steps of OUT/NAME, trained here (to max_steps) unless the directory holds them."""
    run_dir = out / name
    if not ((run_dir / "metrics.jsonl").is_file() and len(read_jsonl(run_dir / "metrics.jsonl")) >= need):
        shutil.rmtree(run_dir, ignore_errors=True)
        train(build_config(None, overrides + [f"max_steps={max_steps}", f"out_dir={run_dir}", "progress=false",
                                              "plots=false"]))
    return read_jsonl(run_dir / "metrics.jsonl")[:need]


def rolling(values: list[float], width: int = EDGE) -> list[float]:
    """Trailing means over up to `width` values (the first ones over fewer)."""
    return [statistics.fmean(values[max(0, i - width + 1):i + 1]) for i in range(len(values))]


def evals(run_dir: Path) -> dict[int, float]:
    path = run_dir / "eval.jsonl"
    return {r["step"]: r["accuracy"] for r in read_jsonl(path)} if path.is_file() else {}


def summary(name: str, rows: list[dict], held_out: dict[int, float]) -> dict:
    mean = lambda key, rs: statistics.fmean(r.get(key, 0.0) for r in rs)  # noqa: E731
    acc = rolling([r["acceptance_length"] for r in rows])
    best = max(range(EDGE - 1, len(acc)), key=acc.__getitem__) if len(acc) >= EDGE else len(acc) - 1
    step_s, drafter_s = mean("step_s", rows[1:]), mean("drafter_train_s", rows[1:])
    return {"run": name, "steps": len(rows), "acceptance_step1": rows[0]["acceptance_length"],
            "acceptance_start": mean("acceptance_length", rows[:EDGE]), "acceptance_best": acc[best],
            "best_at_step": rows[best]["step"], "acceptance_end": acc[-1],
            "rollout_s": mean("rollout_s", rows[1:]), "train_s": mean("train_s", rows[1:]), "step_s": step_s,
            "drafter_train_s": drafter_s, "drafter_share_of_step": drafter_s / step_s,
            "reward_start": mean("reward_mean", rows[:EDGE]), "reward_end": mean("reward_mean", rows[-EDGE:]),
            "entropy_end": mean("entropy", rows[-EDGE:]), "len_p50_end": mean("response_len_p50", rows[-EDGE:]),
            "held_out_accuracy": held_out, "logprob_diff": mean("logprob_diff", rows),
            "alarms": sum(bool(r.get("drafter_alarm")) for r in rows),
            "acceptance_per_step": [round(r["acceptance_length"], 3) for r in rows],
            "reward_per_step": [round(r["reward_mean"], 4) for r in rows]}


def plot(path: Path, runs: dict[str, list[dict]], title: str, ref: float | None = None) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(11, 4))
    for name, rows in runs.items():
        steps = [r["step"] for r in rows]
        if name != "sd_off":
            line, = ax.plot(steps, [r["acceptance_length"] for r in rows], alpha=0.35)
            ax.plot(steps, rolling([r["acceptance_length"] for r in rows]), color=line.get_color(), label=name)
        bx.plot(steps, rolling([r["reward_mean"] for r in rows]), label=name)
    if ref is not None:
        ax.axhline(ref, color="grey", ls="--", lw=1, label="80% of the offline head")
    ax.set(xlabel="RL step", ylabel="acceptance length (tokens per verify)", title=title)
    bx.set(xlabel="RL step", ylabel=f"train reward ({EDGE}-step mean)", title="reward (lossless: same distribution)")
    ax.legend(fontsize=8)
    bx.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="runs/online_drafter")
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--cold-steps", type=int, default=30)
    ap.add_argument("--skip", default="", help="comma list of parts to skip: drift,cold,off,rw")
    ap.add_argument("--drift", default="", help="space-separated overrides of the drift runs")
    ap.add_argument("--cold", default="", help="space-separated overrides of the scratch (cold start) run")
    ap.add_argument("overrides", nargs="*")
    args = ap.parse_args()
    out, skip = Path(args.out), set(filter(None, args.skip.split(",")))
    online = ["rollout.drafter.online=true"]
    drift = ["rollout.spec.method=eagle3", *args.overrides, *args.drift.split()]
    arms = {"frozen": ("drift_frozen", drift), "online": ("drift_online", drift + online)}
    if "rw" not in skip:
        arms["online_rw"] = ("drift_online_rw", drift + online + ["rollout.drafter.reward_weighting=true"])
    if "off" not in skip:
        arms["sd_off"] = ("drift_sd_off", drift + ["rollout.spec.method=null"])
    if "drift" not in skip:
        runs = {name: run(out, d, args.steps, args.steps, o) for name, (d, o) in arms.items()}
        sums = {name: summary(name, rows, evals(out / arms[name][0])) for name, rows in runs.items()}
        for s in sums.values():
            print(json.dumps(s))
        fro = sums["frozen"]
        for name in ("online", "online_rw"):
            if name in sums:
                onl = sums[name]
                print(json.dumps({"compare": f"drift {name}",
                                  "keeps_of_best": onl["acceptance_end"] / onl["acceptance_best"],
                                  "over_frozen_end": onl["acceptance_end"] / fro["acceptance_end"] - 1,
                                  "frozen_end_over_best": fro["acceptance_end"] / fro["acceptance_best"],
                                  "step_over_frozen": onl["step_s"] / fro["step_s"]}))
        plot(out / "online_drafter_drift.png", runs, "frozen vs online EAGLE-3 head")
    if "cold" not in skip:
        off = run(out, "drift_frozen", args.cold_steps, args.steps, drift)
        sc = run(out, "cold_scratch", args.cold_steps, args.steps,
                 drift + online + ["rollout.spec.draft_model=scratch", *args.cold.split()])
        cold = {"offline_frozen": off, "scratch_online": sc}
        for name, rows in cold.items():
            print(json.dumps(summary(name, rows, {})))
        share = [s / o for s, o in zip(rolling([r["acceptance_length"] for r in sc], 3),
                                       rolling([r["acceptance_length"] for r in off], 3))]
        reach = [i + 1 for i, x in enumerate(share) if x >= 0.8]
        print(json.dumps({"compare": "cold", "share_of_offline_3step": [round(x, 3) for x in share],
                          "first_step_at_80pct_of_offline": reach[0] if reach else None,
                          "scratch_end_over_offline_end": summary("s", sc, {})["acceptance_end"] /
                          summary("o", off, {})["acceptance_end"]}))
        ref = 0.8 * statistics.fmean(r["acceptance_length"] for r in off)
        plot(out / "online_drafter_cold.png", cold, "cold start: scratch + online vs offline head", ref)


if __name__ == "__main__":
    main()
