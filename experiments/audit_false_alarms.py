"""False alarms of the sampler audit on exact paths (issue 29): seeded step-sized batches (8 chain-task prompts
x 8 samples, `--max-tokens` per completion: a shorter budget than a run's, for time) generated on each path and
audited under the shipped policy. Resumable: one JSONL row per batch in OUT, batches already there are skipped;
paths take turns in chunks of `--chunk` batches so every path grows together.

    python experiments/audit_false_alarms.py --out docs/results/sampler_audit_false_alarms.jsonl --batches 200

A batch is a false alarm when its p-value is below ALARM_RATE; the windowed alarm (SamplerAlarm over
consecutive batches of a path, window 5) is replayed from the rows by `summarize`.

The async pipeline is measured on a real run's steps instead (its rule, rows scored under the version that
sampled them, lives in the learner), short chains so that 40 tokens finish and rewards move the policy:

    specrl train pipeline.mode=async max_steps=200 rollout.max_tokens=40 data.hops_median=3 data.max_hops=6 \
        rollout.audit_groups=null data.eval_size=0 eval_every=0 num_threads=1 schedule.save_every=50 \
        out_dir=runs/async_fa
    python experiments/audit_false_alarms.py --out docs/results/sampler_audit_false_alarms.jsonl --summary \
        --async-run runs/async_fa
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from audit_batches import PATHS, Prompts, audit_batch, make_llm, step_batch
from specrl.pipeline.run_dir import read_jsonl
from specrl.rl.audit import ALARM_RATE, SamplerAlarm



def run(out: Path, paths: list[str], batches: int, chunk: int, max_tokens: int) -> None:
    prompts = Prompts()
    while True:
        have: dict[str, set[int]] = {p: set() for p in paths}
        for r in read_jsonl(out):
            have.setdefault(r["path"], set()).add(r["batch"])
        todo = [p for p in paths if len(have[p]) < batches]
        if not todo:
            return
        path = min(todo, key=lambda p: len(have[p]))
        llm = make_llm(path)
        for b in [b for b in range(batches) if b not in have[path]][:chunk]:
            t0 = time.perf_counter()
            ps, cs = step_batch(llm, prompts(b), b, max_tokens=max_tokens)
            r = audit_batch(ps, cs, b)
            r.pop("scores")
            row = {"path": path, "batch": b, "max_tokens": max_tokens, **r, "s": time.perf_counter() - t0}
            with out.open("a") as f:
                f.write(json.dumps(row) + "\n")
        del llm


def async_rows(run_dir: Path) -> list[dict]:
    """A run's audited steps as batch rows (path "async")."""
    return [{"path": "async", "batch": r["step"], "z": r["sampler_z"], "p_value": r["sampler_p"],
             "tokens": r["sampler_tokens"], "weight": r["sampler_weight"], "policy_lag": r["policy_lag"]}
            for r in read_jsonl(run_dir / "metrics.jsonl") if "sampler_z" in r]


def summarize(out: Path, async_run: Path | None = None) -> list[dict]:
    by: dict[str, list[dict]] = {}
    for r in read_jsonl(out) + (async_rows(async_run) if async_run else []):
        by.setdefault(r["path"], []).append(r)
    table = []
    for path, rows in by.items():
        rows.sort(key=lambda r: r["batch"])
        alarm, fired = SamplerAlarm(5), 0
        for r in rows:
            fired += alarm.update(r["z"], r["weight"])
        zs = torch.tensor([r["z"] for r in rows])
        table.append({"path": path, "batches": len(rows), "p_below_1e-3": sum(r["p_value"] < ALARM_RATE for r in rows),
                      "window_alarms": fired, "z_mean": float(zs.mean()), "z_sd": float(zs.std()) if len(rows) > 1 else 0.0,
                      "tokens_mean": sum(r["tokens"] for r in rows) / len(rows)})
    return table


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--paths", nargs="+", default=list(PATHS))
    ap.add_argument("--batches", type=int, default=200)
    ap.add_argument("--chunk", type=int, default=10)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--summary", action="store_true")
    ap.add_argument("--async-run", type=Path, default=None, help="a pipeline.mode=async run dir to add (see above)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    if not args.summary:
        run(args.out, args.paths, args.batches, args.chunk, args.max_tokens)
    for row in summarize(args.out, args.async_run):
        print(json.dumps(row))
