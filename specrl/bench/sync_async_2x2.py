"""The default run as a 2x2: sync and async pipelines, each with SD on (the default `auto`) and off.

Every run is the default `specrl train` (10 steps, evals at 0, 5 and 10) alone on the machine, one after
another: per seed the cells run in the order of --cells, and in the reverse order for the next seed, so a
slow drift of the machine's speed hits every cell alike. Sync runs use torch's default threads (every
core); async runs split them, one stage per core (`pipeline.rollout_threads`, `pipeline.train_threads`).
Extra cells such as `sync:suffix` add static strategies (the `auto` against best-static comparison); a
cell may add overrides of its own after a further colon (`sync:auto:optim.packing=false`, the padded update).

Prints one JSON line per run and per cell (the mean over seeds), then the simulator's predictions: for each
seed it is calibrated (wall and process-CPU clocks) on the other seed's sync runs and predicts this seed's runs from their
workloads alone. Writes OUT/summary.jsonl and OUT/2x2.png (step seconds per cell, held-out accuracy).

    specrl bench sync-async-2x2 --out runs/2x2 --seeds 0 1 [--cells sync:off,async:auto,...] [key=value ...]
    specrl bench sync-async-2x2 --out runs/2x2 --seeds 0 1 --reuse      # summary and figures only
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

from specrl.errors import UserError, pyplot
from specrl.pipeline.run_dir import read_jsonl
from .common import parse_with_overrides
from .default_run import speed  # R, alpha and NeMo-RL's step bound

CELLS = ("sync:off", "async:auto", "sync:auto", "async:off")
WARMUP_STEPS = 1  # sync: first allocations; async: the step that fills the pipeline


def run_dir(out: Path, cell: str, seed: int) -> Path:
    return out / f"{cell.replace(':', '_').replace('=', '-')}_seed{seed}"


def launch(path: Path, cell: str, seed: int, overrides: list[str]) -> None:
    mode, method, *extra = cell.split(":")
    args = [sys.executable, "-m", "specrl", "train", "--out", str(path), f"seed={seed}", "rollout.trace=true",
            "progress=false", f"pipeline.mode={mode}", f"rollout.spec.method={'null' if method == 'off' else method}",
            *overrides, *extra]
    path.parent.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    with open(path.parent / f"{path.name}.log", "w") as log:
        code = subprocess.call(args, stdout=log, stderr=subprocess.STDOUT)
    if code != 0:
        raise UserError(f"{cell} seed {seed} failed (exit {code}): see {path.parent / (path.name + '.log')}")
    (path / "wall_s.json").write_text(json.dumps({"wall_s": time.perf_counter() - start}))


def mean(rows: list[dict], key: str) -> float:
    return statistics.fmean(r[key] for r in rows if r.get(key) is not None)


def load(path: Path, cell: str, seed: int) -> dict:
    rows, evals = read_jsonl(path / "metrics.jsonl"), read_jsonl(path / "eval.jsonl")
    timed = rows[WARMUP_STEPS:]
    if not timed:
        raise UserError(f"{path} has {len(rows)} step(s) and the first is left out as warm-up: run at least "
                        f"{WARMUP_STEPS + 1} steps (max_steps={WARMUP_STEPS + 1})")
    lags = [r["policy_lag"] for r in rows if "policy_lag" in r]
    work = read_jsonl(path / "rollout_workload.jsonl")[-1]  # async: the threads each stage used
    return {"cell": cell, "seed": seed, "steps": len(rows),
            "step_s": mean(timed, "step_s"), "rollout_s": mean(timed, "rollout_s"), "train_s": mean(timed, "train_s"),
            "steps_total_s": sum(r["step_s"] for r in rows),
            "wall_s": json.loads((path / "wall_s.json").read_text())["wall_s"],
            "accuracy": [e["accuracy"] for e in evals], "eval_steps": [e["step"] for e in evals],
            "logprob_diff_max": max(r["logprob_diff"] for r in rows),
            "sampler_p": [round(r["sampler_p"], 3) for r in rows if r.get("sampler_p") is not None],
            "acceptance_length": mean(rows, "acceptance_length") if cell.split(":")[1] != "off" else None,
            "policy_lag_mean": statistics.fmean(lags) if lags else 0.0,
            "stage_threads": [work.get("rollout_threads"), work.get("train_threads")]}


def cell_summary(runs: list[dict], base: dict | None) -> dict:
    out = {"cell": runs[0]["cell"], "seeds": [r["seed"] for r in runs]}
    for key in ("step_s", "rollout_s", "train_s", "steps_total_s", "wall_s"):
        out[key] = statistics.fmean(r[key] for r in runs)
    out["accuracy"] = [round(statistics.fmean(a), 3) for a in zip(*(r["accuracy"] for r in runs))]
    out["logprob_diff_max"] = max(r["logprob_diff_max"] for r in runs)
    out["sampler_p_min"] = min((p for r in runs for p in r["sampler_p"]), default=None)
    out["policy_lag_mean"] = statistics.fmean(r["policy_lag_mean"] for r in runs)
    if base is not None:
        out["step_speedup"] = base["step_s"] / out["step_s"]  # against sync with SD off
        out["end_to_end_speedup"] = base["steps_total_s"] / out["steps_total_s"]
        if out["cell"].startswith("sync:"):  # NeMo-RL's bound for the step from the rollout's speedup alone
            got = speed(out, base)
            out.update(R=got["R"], alpha=got["alpha"], step_bound=got["step_bound"])
    return out


def simulate(out: Path, seeds: list[int], cells: list[str]) -> list[dict]:
    """Per seed and clock: fit on the other seeds' plain sync runs, predict this seed's runs. The simulator's
    unit of hardware is what a fit run used; on the cpu clock a sync run's two threads count as two cores'
    seconds, which is how the simulator places an async run (a core per stage)."""
    rows, base = [], [sys.executable, "-m", "specrl", "simulate"]
    plain_sync = [c for c in cells if c.startswith("sync:") and c.count(":") == 1]
    for seed in seeds:
        fit = [str(run_dir(out, c, s)) for s in seeds if s != seed for c in plain_sync]
        held = [str(run_dir(out, c, seed)) for c in cells]
        for clock in ("wall", "cpu"):
            cal = out / f"calibration_{clock}_without_seed{seed}.json"
            subprocess.run([*base, "calibrate", "--train-runs", *fit, "--clock", clock, "--out", str(cal)],
                           check=True, stdout=subprocess.DEVNULL)
            got = subprocess.run([*base, "validate", "--calibration", str(cal), "--clock", clock,
                                  "--fit-train-runs", *fit, "--train-runs", *held],
                                 check=True, capture_output=True, text=True)
            rows += [{**json.loads(line), "seed": seed} for line in got.stdout.splitlines() if line.startswith("{")]
    return rows


def plot(runs: list[dict], cells: list[str], path: Path) -> None:
    plt = pyplot("specrl bench sync-async-2x2")
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    for i, cell in enumerate(cells):
        mine = [r for r in runs if r["cell"] == cell]
        for part, color, bottom in (("rollout_s", "tab:blue", None), ("train_s", "tab:orange", "rollout_s")):
            vals = [r[part] for r in mine]
            base = statistics.fmean(r[bottom] for r in mine) if bottom else 0
            ax1.bar(i, statistics.fmean(vals), bottom=base, color=color, alpha=0.6,
                    label=part.replace("_s", " (sync: part of the step)") if i == 0 else None)
        ax1.scatter([i] * len(mine), [r["step_s"] for r in mine], color="k", zorder=3,
                    label="step seconds per seed" if i == 0 else None)
        acc = [statistics.fmean(a) for a in zip(*(r["accuracy"] for r in mine))]
        ax2.plot(mine[0]["eval_steps"], acc, marker="o", label=cell)
    ax1.set_xticks(range(len(cells)), cells)
    ax1.set_ylabel("seconds per RL step (mean of steps 2-10)")
    ax1.legend(fontsize=8)
    ax2.set_xlabel("RL step")
    ax2.set_ylabel("held-out accuracy (mean over seeds)")
    ax2.legend(fontsize=8)
    fig.suptitle("default run: sync/async x SD on/off")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="specrl bench sync-async-2x2", description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("runs/2x2"),
                    help="folder of the runs, summary.jsonl and 2x2.png (default: runs/2x2)")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1], help="every cell runs once per seed")
    ap.add_argument("--cells", default=",".join(CELLS), help="comma-separated mode:method, method off for SD off")
    ap.add_argument("--reuse", action="store_true", help="summarise runs already in --out instead of training")
    ap.add_argument("--no-sim", action="store_true", help="skip the simulator's predictions")
    ap.add_argument("overrides", nargs="*", help="`specrl train` overrides for every run, e.g. max_steps=4")
    args = parse_with_overrides(ap, argv)
    pyplot("specrl bench sync-async-2x2")  # before any run: a missing matplotlib ends here, not after the training
    out, args.cells = args.out.resolve(), args.cells.split(",")
    for i, seed in enumerate(args.seeds):
        for cell in (args.cells if i % 2 == 0 else args.cells[::-1]):
            path = run_dir(out, cell, seed)
            if not args.reuse and not (path / "wall_s.json").is_file():
                launch(path, cell, seed, args.overrides)
                print(json.dumps({"kind": "done", "cell": cell, "seed": seed}), flush=True)
    runs = [load(run_dir(out, c, s), c, s) for s in args.seeds for c in args.cells]
    summary = [{"kind": "run", **r} for r in runs]
    base = cell_summary([r for r in runs if r["cell"] == "sync:off"], None) if "sync:off" in args.cells else None
    summary += [{"kind": "cell", **cell_summary([r for r in runs if r["cell"] == c], base)} for c in args.cells]
    if not args.no_sim:
        summary += [{**r, "kind": "simulated"} for r in simulate(out, args.seeds, args.cells)]
    with open(out / "summary.jsonl", "w") as f:
        for row in summary:
            print(json.dumps(row, default=float), flush=True)
            f.write(json.dumps(row, default=float) + "\n")
    plot(runs, args.cells, out / "2x2.png")
    return 0
