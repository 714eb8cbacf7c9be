"""From `specrl bench adaptive`'s RL row to what `specrl train` measures: one factor changed per rung.

Each rung is one `specrl bench adaptive --batch-sizes rl` process (SD off, the static drafters at the rung's
k, then `auto`) that differs from the rung before it in one setting, walking from the bench's published
settings (docs/results/bench_adaptive.md run 5: one thread, 192-token budget, 128-token warm-up, k up to 8)
to the default run's (two threads, k up to 4, the 1,100-token budget, a cold engine, the policy after
training). The last line reads the train runs: generated tokens per rollout second, SD on over off, steps
after the first, per seed, and the per-step spread of that ratio (the sampling noise in the lengths).

    python experiments/bench_train_account.py --out runs/account [--train-runs runs/2x2] [--rungs 0,1,2]
    python experiments/bench_train_account.py --after typed.jsonl typed_rl_step10.jsonl   # after the fix

After the fix the benches run with the main job's settings by default; `--after` reads `bench adaptive`
outputs as typed (the RL row at the initial policy, and with `--model` at a trained one), pools each
strategy's tokens and seconds over the policies (train's rollouts move from one to the other), and sets the
result beside train's.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from specrl.pipeline.run_dir import read_jsonl  # noqa: E402

COMMON = ["--batch-sizes", "rl", "--methods", "suffix,ngram,eagle3", "--png", ""]
# (name, the factor this rung changes, its flags); each rung's flags are complete, not a diff
RUNGS = [
    ("bench", "the bench's published settings", ["--threads", "1", "--rl-max-tokens", "192", "--warmup-tokens", "128", "--ks", "8"]),
    ("threads", "2 threads, as train", ["--threads", "2", "--rl-max-tokens", "192", "--warmup-tokens", "128", "--ks", "8"]),
    ("k", "k up to 4, as train", ["--threads", "2", "--rl-max-tokens", "192", "--warmup-tokens", "128", "--ks", "4"]),
    ("budget", "the 1,100-token budget, as train", ["--threads", "2", "--warmup-tokens", "128", "--ks", "4"]),
    ("cold", "no warm-up to speak of (train's first step)", ["--threads", "2", "--warmup-tokens", "1", "--ks", "4"]),
    ("policy", "the policy after 10 steps of training", ["--threads", "2", "--warmup-tokens", "1", "--ks", "4", "--model", "POLICY"]),
]


def rung(out: Path, i: int, policy: str) -> dict:
    name, factor, flags = RUNGS[i]
    flags = [policy if f == "POLICY" else f for f in flags]
    cmd = [sys.executable, "-m", "specrl", "bench", "adaptive", *COMMON, *flags]
    log = out / f"rung{i}_{name}.jsonl"
    with open(log, "w") as f:
        code = subprocess.call(cmd, stdout=f, stderr=subprocess.DEVNULL, cwd=ROOT)
    rows = [r for r in read_jsonl(log) if "tokens_per_s" in r]
    if code != 0 or not rows:
        raise SystemExit(f"rung {i} ({name}) failed (exit {code}): {' '.join(cmd)}")
    auto = next(r for r in rows if r["strategy"] == "auto")
    static = {f"{r['strategy']}@{r['k']}": round(r["speedup"], 3) for r in rows if r["strategy"] not in ("off", "auto")}
    return {"kind": "rung", "rung": i, "name": name, "factor": factor, "flags": " ".join(flags),
            "off_tokens_per_s": round(rows[0]["tokens_per_s"], 1), "auto_speedup": round(auto["speedup"], 3),
            "static_speedups": static, "auto_vs_best_static": round(auto["vs_best_static"], 3)}


def train_ratio(runs: Path) -> dict:
    """Generated tokens per rollout second in the default run, `auto` over SD off, steps after the first."""
    out = {}
    for seed in (0, 1):
        off, on = (read_jsonl(runs / f"sync_{m}_seed{seed}" / "metrics.jsonl")[1:] for m in ("off", "auto"))
        pooled = lambda rows: sum(r["generated_tokens"] for r in rows) / sum(r["rollout_s"] for r in rows)  # noqa: E731
        per_step = [a["gen_tokens_per_s"] / b["gen_tokens_per_s"] for a, b in zip(on, off)]
        out[seed] = {"speedup": round(pooled(on) / pooled(off), 3), "per_step_mean": round(statistics.fmean(per_step), 3),
                     "per_step_sd": round(statistics.stdev(per_step), 3)}
    return {"kind": "train", **{f"seed{s}": v for s, v in out.items()}}


def pooled(files: list[Path]) -> dict:
    """Each strategy's RL-row tokens over seconds, summed over the bench outputs (one per policy)."""
    sums: dict[str, list[float]] = {}
    per_file = []
    for path in files:
        rows = [r for r in read_jsonl(path) if r.get("batch_size") == "rl" and "tokens" in r]
        if not rows:
            raise SystemExit(f"{path}: no RL row with tokens and seconds (a `bench adaptive` output from before "
                             "the fix?)")
        per_file.append({"file": path.name, **{name(r): round(r["speedup"], 3) for r in rows}})
        for r in rows:
            t = sums.setdefault(name(r), [0.0, 0.0])
            t[0] += r["tokens"]
            t[1] += r["seconds"]
    tps = {k: t[0] / t[1] for k, t in sums.items()}
    off = tps.pop("off")
    speedups = {k: round(v / off, 3) for k, v in tps.items()}
    auto = next(v for k, v in speedups.items() if k.startswith("auto"))
    best = max((v for k, v in speedups.items() if not k.startswith("auto")), default=None)
    return {"kind": "after", "per_policy": per_file, "pooled_speedups": speedups, "auto_speedup": auto,
            "auto_vs_best_static": round(auto / best, 3) if best else None}


def name(row: dict) -> str:
    return "off" if row["strategy"] == "off" else f"{row['strategy']}@{row['k']}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("runs/account"))
    ap.add_argument("--train-runs", type=Path, default=Path("runs/2x2"), help="the 2x2's run dirs (sync_off/auto_seed0/1)")
    ap.add_argument("--policy", default=None, help="an HF dir of the trained policy (default: the 2x2's sync SD-off seed 0, step 10)")
    ap.add_argument("--rungs", default=",".join(str(i) for i in range(len(RUNGS))))
    ap.add_argument("--after", type=Path, nargs="+", default=None,
                    help="bench adaptive outputs after the fix (one per policy): pool them, set them beside train")
    args = ap.parse_args()
    if args.after:
        rows = [pooled(args.after), train_ratio(args.train_runs)]
        for r in rows:
            print(json.dumps(r), flush=True)
        return
    args.out.mkdir(parents=True, exist_ok=True)
    policy = args.policy or str(args.train_runs / "sync_off_seed0" / "checkpoints" / "step_000010" / "model")
    rows = [rung(args.out, int(i), policy) for i in args.rungs.split(",")]
    rows.append(train_ratio(args.train_runs))
    with open(args.out / "account.jsonl", "w") as f:
        for r in rows:
            print(json.dumps(r), flush=True)
            f.write(json.dumps(r) + "\n")


if __name__ == "__main__":
    main()
