"""EAGLE-3 heads on a real checkpoint: speedup and acceptance at batch 1 and 8, temperature 0 and 1, fp32 and
bf16, every head against SD off in the same `specrl bench spec` process, and a plot of them beside the
speedup ceiling that `experiments/verify_cost.py` measured.

    python experiments/real_sd_grid.py run --model DIR --prompts FILE --head NAME=DIR [--head ...]
        [--dtypes float32,bfloat16] [--k 4] [--max-tokens 96] --out GRID.jsonl
    python experiments/real_sd_grid.py plot --grid GRID.jsonl [--verify VERIFY.jsonl] --out PNG

`run` appends one row per (head, dtype, temperature, batch) to GRID.jsonl: batch 1 runs the prompt file's
first 8 prompts one after another (`--repeats 8`), batch 8 runs them at once; temperature 0 is
`--check-identity` (greedy, and whether the tokens equal SD off's).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path


def run(args: argparse.Namespace) -> None:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    for spec in args.head:
        name, head = spec.split("=", 1)
        for dtype in args.dtypes.split(","):
            for temperature in (0, 1):
                for batch, repeats in ((1, 8), (8, 1)):
                    cmd = [sys.executable, "-m", "specrl", "bench", "spec", "--model", args.model, "--prompts",
                           args.prompts, "--draft-model", head, "--methods", "eagle3", "--batch-sizes", str(batch),
                           "--repeats", str(repeats), "--max-tokens", str(args.max_tokens), "--k", str(args.k),
                           "--threads", "1", "--dtype", dtype]
                    cmd += ["--check-identity"] if temperature == 0 else ["--temperature", "1"]
                    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout
                    with open(args.out, "a") as f:
                        for line in out.splitlines():
                            if line.startswith("{"):
                                row = dict(json.loads(line), head=name, dtype=dtype, temperature=temperature)
                                print(json.dumps(row), flush=True)
                                f.write(json.dumps(row) + "\n")


def plot(args: argparse.Namespace) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [json.loads(line) for line in open(args.grid) if line.strip()]
    heads = sorted({r["head"] for r in rows})
    settings = sorted({(r["dtype"], r["temperature"], r["batch_size"]) for r in rows},
                      key=lambda s: (s[0] != "float32", s[1], s[2]))
    labels = [f"{'fp32' if d == 'float32' else 'bf16'}\nT={t} b{b}" for d, t, b in settings]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 4.5))
    width = 0.8 / max(len(heads), 1)
    for i, head in enumerate(heads):
        by = {(r["dtype"], r["temperature"], r["batch_size"]): r for r in rows if r["head"] == head}
        xs = [j + (i - (len(heads) - 1) / 2) * width for j in range(len(settings))]
        ax1.bar(xs, [by[s]["speedup"] if s in by else 0 for s in settings], width, label=f"head {head}")
        ax2.bar(xs, [by[s]["acceptance_length"] if s in by else 0 for s in settings], width, label=f"head {head}")
    ax1.axhline(1.0, color="k", lw=0.8)
    ax1.axhline(2.0, color="r", lw=0.8, ls="--", label="target 2.0x (b1, T=0, bf16)")
    if args.verify:
        for v in (json.loads(line) for line in open(args.verify) if line.strip()):
            k4 = v["ceiling_all_accepted_by_k"].get("4")
            if k4:
                ax1.axhline(k4, lw=0.8, ls=":", color="g" if v["dtype"] == "float32" else "m",
                            label=f"{v['dtype']} b1 ceiling, k=4, all accepted ({k4}x)")
    ax1.set_ylabel("speedup over SD off (same process)")
    ax2.set_ylabel("acceptance length (tokens per verify)")
    for ax in (ax1, ax2):
        ax.set_xticks(range(len(settings)), labels, fontsize=8)
        ax.legend(fontsize=7)
    fig.suptitle("SmolLM2-135M-Instruct, EAGLE-3 heads, k=4, one thread (2-core AVX2 CPU, no AMX)")
    fig.tight_layout()
    fig.savefig(args.out, dpi=110)
    print(args.out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--model", required=True)
    r.add_argument("--prompts", required=True)
    r.add_argument("--head", action="append", required=True, help="NAME=DIR, repeatable")
    r.add_argument("--dtypes", default="float32,bfloat16")
    r.add_argument("--k", type=int, default=4)
    r.add_argument("--max-tokens", type=int, default=96)
    r.add_argument("--out", required=True)
    p = sub.add_parser("plot")
    p.add_argument("--grid", required=True)
    p.add_argument("--verify", default=None)
    p.add_argument("--out", required=True)
    args = ap.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    run(args) if args.cmd == "run" else plot(args)


if __name__ == "__main__":
    main()
