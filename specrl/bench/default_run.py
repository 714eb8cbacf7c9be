"""The default `specrl train`, SD on against SD off: the same seeds, each pair started side by side.

For each seed, two runs start together as separate processes, one torch thread each (the 2-core machine
gives each its own core): the default config (SD on) and the same config with `rollout.spec.method=null`.
Both write `rollout.trace=true` workloads, so every sample's response length is on disk. Then it prints JSON
lines and writes figures:

  - per pair and overall: rollout and step seconds, R (rollout share of the SD-off step), alpha (rollout
    speedup), NeMo-RL's step bound 1 / (R / alpha + 1 - R) next to the measured step speedup, held-out
    accuracy at the start and end, logprob_diff SD on and off, the SD run's acceptance length at the start
    and end;
  - OUT/compare.png: `specrl compare` of the runs (reward, held-out accuracy, step, rollout, train seconds,
    acceptance length against the RL step);
  - OUT/lengths.png: the histogram of response lengths at the first and the last step (SD-off runs), with
    median, p99 and max.

    specrl bench default-run --out runs/default_run --seeds 0 1 [key=value ...]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import numpy as np

from specrl.errors import UserError, pyplot
from specrl.pipeline.run_dir import read_jsonl
from .common import compare_runs, parse_with_overrides

WARMUP_STEPS = 1  # the first step pays one-off costs (allocation, first touch); left out of the mean timings


def launch(run_dir: Path, seed: int, sd: bool, overrides: list[str]) -> subprocess.Popen:
    args = [sys.executable, "-m", "specrl", "train", "--out", str(run_dir), f"seed={seed}", "num_threads=1",
            "rollout.trace=true", "progress=false", *overrides]
    if not sd:
        args.append("rollout.spec.method=null")
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    with open(run_dir.parent / f"{run_dir.name}.log", "w") as log:  # the child keeps its own descriptor
        return subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT,
                                env={**os.environ, "PYTHONUNBUFFERED": "1"})


def load(run_dir: Path) -> dict:
    rows, evals = read_jsonl(run_dir / "metrics.jsonl"), read_jsonl(run_dir / "eval.jsonl")
    timed = rows[WARMUP_STEPS:] or rows
    return {"rows": rows, "evals": evals, "rollout_s": statistics.fmean(r["rollout_s"] for r in timed),
            "step_s": statistics.fmean(r["step_s"] for r in timed),
            "logprob_diff": statistics.fmean(r["logprob_diff"] for r in rows),
            "workload": read_jsonl(run_dir / "rollout_workload.jsonl")}


def speed(on: dict, off: dict) -> dict:
    alpha, r_gen = off["rollout_s"] / on["rollout_s"], off["rollout_s"] / off["step_s"]
    return {"rollout_s_on": on["rollout_s"], "rollout_s_off": off["rollout_s"], "step_s_on": on["step_s"],
            "step_s_off": off["step_s"], "R": r_gen, "alpha": alpha, "step_bound": 1 / (r_gen / alpha + 1 - r_gen),
            "step_speedup": off["step_s"] / on["step_s"]}


def summary(seed: int, on: dict, off: dict) -> dict:
    acc = {name: [e["accuracy"] for e in run["evals"]] for name, run in (("on", on), ("off", off))}
    accept = [r["acceptance_length"] for r in on["rows"]]
    return {"seed": seed, **speed(on, off), "accuracy_on": acc["on"], "accuracy_off": acc["off"],
            "logprob_diff_on": on["logprob_diff"], "logprob_diff_off": off["logprob_diff"],
            "acceptance_first": accept[0], "acceptance_last": accept[-1],
            "steps": len(on["rows"]), "eval_steps": [e["step"] for e in on["evals"]]}


def length_histogram(runs: list[dict], out: Path) -> dict:
    plt = pyplot("specrl bench default-run")
    stats, fig = {}, plt.figure(figsize=(8, 4))
    for which, index in (("first step", 0), ("last step", -1)):
        lens = np.array([n for run in runs for n in run["workload"][index]["response_lengths"]])
        p50, p99 = np.percentile(lens, [50, 99])
        stats[which] = {"median": float(p50), "p99": float(p99), "max": int(lens.max()), "samples": len(lens)}
        plt.hist(lens, bins=40, alpha=0.55, label=f"{which}: median {p50:.0f}, p99 {p99:.0f}, max {lens.max()}")
    plt.xlabel("response length (tokens)")
    plt.ylabel("samples")
    plt.title("response lengths of the default run's rollouts (SD off runs)")
    plt.legend()
    plt.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return stats


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="specrl bench default-run", description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("runs/default_run"),
                    help="folder of the runs, their logs and the figures (default: runs/default_run)")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1], help="one SD on / SD off pair per seed")
    ap.add_argument("--reuse", action="store_true", help="summarise runs already in --out instead of training")
    ap.add_argument("overrides", nargs="*", help="`specrl train` overrides for both arms, e.g. max_steps=10")
    args = parse_with_overrides(ap, argv)
    pyplot("specrl bench default-run")  # before any run: a missing matplotlib ends here, not after the training
    dirs = {(s, sd): args.out / f"{'sd_on' if sd else 'sd_off'}_seed{s}" for s in args.seeds for sd in (True, False)}
    if not args.reuse:
        for s in args.seeds:  # a pair at a time: the two arms share the machine alike
            procs = [launch(dirs[s, sd], s, sd, args.overrides) for sd in (True, False)]
            if any(p.wait() != 0 for p in procs):
                raise UserError(f"a run of seed {s} failed: see the .log files in {args.out}")
    runs = {key: load(path) for key, path in dirs.items()}
    pairs = [summary(s, runs[s, True], runs[s, False]) for s in args.seeds]
    for row in pairs:
        print(json.dumps(row))
    on = {k: statistics.fmean(runs[s, True][k] for s in args.seeds) for k in ("rollout_s", "step_s")}
    off = {k: statistics.fmean(runs[s, False][k] for s in args.seeds) for k in ("rollout_s", "step_s")}
    hist = length_histogram([runs[s, False] for s in args.seeds], args.out / "lengths.png")
    print(json.dumps({"overall": speed(on, off), "lengths": hist}))
    names = [f"{'SD on' if sd else 'SD off'} seed {s}={dirs[s, sd]}" for s in args.seeds for sd in (True, False)]
    compare_runs(names, args.out / "compare.png")
    return 0
