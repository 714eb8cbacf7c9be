"""`specrl bench real-rl`: GRPO on a real model with every SD arm of the real-model table, one arm at a time.

The arms share one config (e.g. configs/smollm2_steps.yaml) and differ only in their SD settings:

    off         SD off (`rollout.spec.method=null`): the reference every speedup is measured against
    frozen      EAGLE-3 trained offline on the step-0 policy's own outputs, never updated
    online      the same head, updated online from the policy's captures every step
    online_rw   online with ReSpec's reward weighting, per group, with its floor
    online_replay  online with a gentler update: a replay window of the last 4 steps' captures at a third of the
                learning rate (1e-4), the levers for a head that trails its frozen copy; not in the default arms
    auto        the adaptive engine (`rollout.spec.method=auto`) with the head among its drafters
    off_nocorr  SD off without the bf16 correction (`algorithm.is_correction=stale`: a fresh rollout's tokens get
                no importance ratio even where the engine's precision is not the trainer's); not in the default
                arms: it measures what the correction does to learning, against `off`

An arm is `NAME:SEED`. The head is trained first (`specrl train-drafter --method eagle3` on the config's
training prompts, at its rollout temperature and budget) unless `--drafter DIR` names one. Arms run one after
another with all the machine's threads, so no arm's timing shares the cores with another's. Each launch of an arm
appends the CPU it runs on to OUT/NAME_seedS.machines.jsonl; an arm that ran on another CPU than SD off (a run
resumed on another machine) gets no speedup, only its CPUs, since a ratio across machines measures the machines.
Everything resumes:
a finished arm (all `schedule.max_steps` rows in its metrics.jsonl) is read back, a started one continues with
`specrl train resume=DIR`, and a trained head is kept. Stop it at any time and run the same command again.

Then it prints one JSON line per arm (held-out reward at each evaluation, response length p50/p99, R, rollout
speedup alpha against SD off, alpha_tail (the same per token of each step's longest response, which holds
where the arms' policies came to write different lengths), step speedup and its bound 1/(R/alpha + 1 - R),
acceptance per step, the drift probe's online and frozen acceptance and KL to pi_0 per step where the arm runs
the probe) and draws OUT/compare.png (`specrl compare` of every arm) and OUT/probe.png (online against frozen on
the same positions, KL on a second axis).

    specrl bench real-rl --config configs/smollm2_steps.yaml --out runs/real_rl model=models/smollm2
    specrl bench real-rl ... --arms off:0 online:0          # a subset; the table fills in as arms finish
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from specrl.errors import UserError, pyplot
from specrl.pipeline.run_dir import read_jsonl
from .common import compare_runs, parse_with_overrides
from .default_run import WARMUP_STEPS, speed

ARMS = {
    "off": ["rollout.spec.method=null"],
    "frozen": ["rollout.spec.method=eagle3", "rollout.drafter.online=false"],
    "online": ["rollout.spec.method=eagle3", "rollout.drafter.online=true"],
    "online_rw": ["rollout.spec.method=eagle3", "rollout.drafter.online=true",
                  "rollout.drafter.reward_weighting=true"],
    "online_replay": ["rollout.spec.method=eagle3", "rollout.drafter.online=true", "rollout.drafter.window=4",
                      "rollout.drafter.optim.lr=1e-4"],
    "auto": ["rollout.spec.method=auto"],
    "off_nocorr": ["rollout.spec.method=null", "algorithm.is_correction=stale"],
}
DEFAULT_ARMS = ["off:0", "off:1", "frozen:0", "online:0", "online:1", "online_rw:0", "auto:0"]
LAST = 5  # the probe's comparison window: the last steps of a run
SD_OFF = ("off", "off_nocorr")  # the arms without a drafter; only `off` is the speedups' reference
# the head's fit: 256 prompts, a draft vocabulary of the 8,192 most frequent tokens and 4 TTT steps fit within
# --drafter-budget on 2 CPU cores; the whole vocabulary does not (docs/results/real_models.md)
HEAD_FIT = ["--prompts", "256", "--draft-vocab-size", "8192", "--ttt-steps", "4", "--batch-tokens", "2048",
            "--steps", "1000"]


def parse_arm(text: str) -> tuple[str, int]:
    name, _, seed = text.partition(":")
    if name not in ARMS or not seed.lstrip("-").isdigit():
        raise UserError(f"--arms: got {text!r}; write NAME:SEED with NAME one of {sorted(ARMS)}, e.g. online:0")
    return name, int(seed)


def load_config(path: Path, overrides: list[str]):
    """The arms' shared TrainConfig, read as `specrl train --config PATH OVERRIDES` reads it."""
    from specrl.config import load_config as load
    from specrl.config.files import argv_overrides
    from specrl.config.run import SHORTCUTS, TrainConfig
    return load(TrainConfig, path, argv_overrides(overrides, SHORTCUTS))


def train_drafter(cfg, out: Path, budget_s: int, threads: int | None) -> Path:
    """The frozen arm's head: EAGLE-3 fitted to the step-0 policy's own responses to the training prompts."""
    head = out / "drafter"
    if (head / "train_metrics.json").is_file():
        return head
    args = [sys.executable, "-m", "specrl", "train-drafter", "--method", "eagle3", "--model", str(cfg.model),
            "--out", str(head), "--data", str(cfg.data.source), "--samples", "1",
            "--temperature", str(cfg.rollout.temperature), "--max-tokens", str(cfg.rollout.max_tokens),
            "--time-budget", str(budget_s), f"cache={out / 'drafter_cache'}", *HEAD_FIT]
    if (out / "drafter_cache" / "train_state.pt").is_file():  # a fit that was stopped: continue it
        args.append("resume=true")
    if threads:
        args += ["--threads", str(threads)]
    run(args, out / "drafter.log", "specrl train-drafter")
    return head


def run(args: list[str], log_path: Path, what: str) -> None:
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "a") as log:
        code = subprocess.run(args, stdout=log, stderr=subprocess.STDOUT,
                              env={**os.environ, "PYTHONUNBUFFERED": "1"}).returncode
    if code != 0:
        raise UserError(f"{what} failed (exit {code}): see {log_path}; run the same command again to resume")


def steps_done(run_dir: Path) -> int:
    return len(read_jsonl(run_dir / "metrics.jsonl")) if (run_dir / "metrics.jsonl").is_file() else 0


def train_arm(config: Path, run_dir: Path, name: str, seed: int, head: Path | None, max_steps: int,
              overrides: list[str]) -> None:
    if steps_done(run_dir) >= max_steps:
        return
    if (run_dir / "config.yaml").is_file():  # started: continue from its last checkpoint, unchanged
        args = [sys.executable, "-m", "specrl", "train", f"resume={run_dir}"]
    else:
        args = [sys.executable, "-m", "specrl", "train", "--config", str(config), "--out", str(run_dir),
                f"seed={seed}", "rollout.trace=true", "progress=false", *overrides, *ARMS[name]]
        if head is not None and name not in SD_OFF:
            args.append(f"rollout.spec.draft_model={head}")
    record_machine(run_dir)
    run(args, run_dir.parent / f"{run_dir.name}.log", f"arm {name}:{seed}")


def machines_file(run_dir: Path) -> Path:
    return run_dir.parent / f"{run_dir.name}.machines.jsonl"


def record_machine(run_dir: Path) -> None:
    """One row per launch of an arm: the CPU, the step it starts from, the time."""
    from specrl.model.precision import cpu_name
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    with open(machines_file(run_dir), "a") as f:
        f.write(json.dumps({"cpu": cpu_name(), "from_step": steps_done(run_dir),
                            "utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}) + "\n")


def cpus_of(run_dir: Path) -> list[str]:
    """The CPUs an arm ran on (empty where it was not launched by this bench)."""
    path = machines_file(run_dir)
    return sorted({r["cpu"] for r in read_jsonl(path)}) if path.is_file() else []


def _mean(rows: list[dict], key: str) -> float | None:
    vals = [r[key] for r in rows if r.get(key) is not None]
    return statistics.fmean(vals) if vals else None


def _per_tail_token(rows: list[dict]) -> float | None:
    """Rollout seconds per token of each step's longest response (its p99): a rollout lasts as long as its
    longest row, so this compares arms whose policies came to write different lengths (`alpha_tail`)."""
    tail = sum(r.get("response_len_p99") or 0 for r in rows)
    return sum(r["rollout_s"] for r in rows) / tail if tail else None


def arm_row(name: str, seed: int, run_dir: Path, off: dict | None) -> dict:
    rows, evals = read_jsonl(run_dir / "metrics.jsonl"), read_jsonl(run_dir / "eval.jsonl")
    timed = rows[WARMUP_STEPS:] or rows
    row = {"arm": name, "seed": seed, "steps": len(rows), "run": str(run_dir),
           "eval_reward": {e["step"]: e["reward_mean"] for e in evals},
           "response_len_p50": _mean(rows, "response_len_p50"), "response_len_p99": _mean(rows, "response_len_p99"),
           "rollout_s": _mean(timed, "rollout_s"), "step_s": _mean(timed, "step_s"),
           "acceptance_length": [r.get("acceptance_length") for r in rows],
           "probe_accept_online": [r.get("probe_accept_online") for r in rows],
           "probe_accept_frozen": [r.get("probe_accept_frozen") for r in rows],
           "probe_kl_pi0": [r.get("probe_kl_pi0") for r in rows],
           "logprob_diff": _mean(rows, "logprob_diff"), "cpus": cpus_of(run_dir),
           "rollout_s_per_tail_token": _per_tail_token(timed)}
    if name in SD_OFF:  # its own R
        row["R"] = row["rollout_s"] / row["step_s"]
    elif off is not None and off.get("cpus") and row["cpus"] and row["cpus"] != off["cpus"]:
        row["speed_skipped"] = f"ran on {row['cpus']}, SD off on {off['cpus']}: no ratio across machines"
    elif off is not None:
        got = speed(row, off)
        row.update({k: got[k] for k in ("R", "alpha", "step_speedup", "step_bound")})
        if off.get("rollout_s_per_tail_token") and row["rollout_s_per_tail_token"]:
            row["alpha_tail"] = off["rollout_s_per_tail_token"] / row["rollout_s_per_tail_token"]
    tail = [(o, f) for o, f in zip(row["probe_accept_online"], row["probe_accept_frozen"])
            if o is not None and f is not None][-LAST:]
    if tail:
        row["probe_online_over_frozen_last5"] = statistics.fmean(o for o, _ in tail) / \
            max(statistics.fmean(f for _, f in tail), 1e-12)
    return row


def probe_plot(rows: list[dict], out: Path) -> bool:
    """Online against frozen acceptance on the same probe positions, per step, KL(pi_t || pi_0) on a second axis."""
    probed = [r for r in rows if any(v is not None for v in r["probe_accept_frozen"])]
    if not probed:
        return False
    plt = pyplot("specrl bench real-rl")
    fig, ax = plt.subplots(figsize=(8, 4.5))
    kl_ax = ax.twinx()
    for r in probed:
        steps = range(1, len(r["probe_accept_online"]) + 1)
        label = f"{r['arm']} seed {r['seed']}"
        ax.plot(steps, [v if v is not None else float("nan") for v in r["probe_accept_online"]], "-o", ms=3,
                label=f"{label}: online")
        ax.plot(steps, [v if v is not None else float("nan") for v in r["probe_accept_frozen"]], "--", alpha=0.8,
                label=f"{label}: frozen copy")
        kl_ax.plot(steps, [v if v is not None else float("nan") for v in r["probe_kl_pi0"]], ":", color="grey")
    ax.set_xlabel("RL step")
    ax.set_ylabel("probe: expected accepted tokens at k")
    kl_ax.set_ylabel("KL(pi_t || pi_0) per token (dotted)")
    ax.legend(fontsize=7, loc="lower left")
    ax.set_title("the drafter on the policy's own rollouts: online against its frozen step-0 copy")
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return True


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="specrl bench real-rl", description=__doc__.splitlines()[0])
    ap.add_argument("--config", type=Path, required=True, help="the `specrl train` config every arm shares")
    ap.add_argument("--out", type=Path, default=Path("runs/real_rl"), help="folder of the arms, head and figures")
    ap.add_argument("--arms", nargs="+", default=DEFAULT_ARMS, help=f"NAME:SEED, NAME of {sorted(ARMS)} "
                    f"(default: {' '.join(DEFAULT_ARMS)})")
    ap.add_argument("--drafter", type=Path, default=None, help="an EAGLE-3 head to use instead of training one")
    ap.add_argument("--drafter-budget", type=int, default=1080, help="seconds of the head's offline fit")
    ap.add_argument("--threads", type=int, default=None, help="torch CPU threads of the head's fit")
    ap.add_argument("--reuse", action="store_true", help="summarise the arms already in --out, train nothing")
    ap.add_argument("overrides", nargs="*", help="`specrl train` overrides for every arm, e.g. model=models/smollm2")
    args = parse_with_overrides(ap, argv)
    if not args.config.is_file():
        raise UserError(f"--config {str(args.config)!r} does not exist; pass a `specrl train` YAML, e.g. "
                        "configs/smollm2_steps.yaml")
    arms = [parse_arm(a) for a in args.arms]
    if args.drafter is not None and not args.drafter.is_dir():
        raise UserError(f"--drafter {str(args.drafter)!r} is not a directory; pass a `specrl train-drafter` output")
    pyplot("specrl bench real-rl")  # before any run: a missing matplotlib ends here, not after the training
    cfg = load_config(args.config, args.overrides)
    max_steps = cfg.schedule.max_steps
    dirs = {(name, seed): args.out / f"{name}_seed{seed}" for name, seed in arms}
    if not args.reuse:
        needs_head = any(name not in SD_OFF for name, _ in arms)
        head = args.drafter or (train_drafter(cfg, args.out, args.drafter_budget, args.threads) if needs_head else None)
        for (name, seed), run_dir in dirs.items():
            train_arm(args.config, run_dir, name, seed, head, max_steps, args.overrides)
    present = {key: d for key, d in dirs.items() if steps_done(d) > 0}
    offs = [arm_row("off", s, d, None) for (n, s), d in present.items() if n == "off"]
    off = {k: statistics.fmean(r[k] for r in offs) for k in ("rollout_s", "step_s", "rollout_s_per_tail_token")
           if all(r[k] is not None for r in offs)} if offs else None
    if off is not None:
        off["cpus"] = sorted({c for r in offs for c in r["cpus"]})
    rows = [arm_row(n, s, d, off) for (n, s), d in present.items()]
    for row in rows:
        print(json.dumps(row))
    if probe_plot(rows, args.out / "probe.png"):
        print(f"specrl bench real-rl: the probe's plot is {args.out / 'probe.png'}", file=sys.stderr)
    if rows:
        compare_runs([f"{r['arm']} seed {r['seed']}={r['run']}" for r in rows], args.out / "compare.png")
    return 0
