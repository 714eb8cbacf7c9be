"""Where `auto` loses to the best static strategy on `specrl bench adaptive`'s RL row: realised tokens per second
by running-sequence band, per arm, from the engine's per-step trace, in one process.

Each arm (SD off, static drafter@k of --arms, then `auto` among train's drafters) runs the bench's RL workload
(the default run's rollout, with its warm-up) with a trace; the steps after the warm-up are bucketed by
running sequences, and each bucket reports tokens/s (emitted over step seconds) and the share of the rollout's
time spent there. For `auto`, the arms it ran in each bucket. JSON lines, then a table.

    python experiments/adaptive_rl_trace.py --out runs/rl_trace --arms suffix@2,suffix@4,eagle3@1,eagle3@4,ngram@2
"""
from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from specrl import LLM, SpecConfig  # noqa: E402
from benchmarks.common import RATE, measure, policy_path, task_prompts  # noqa: E402
from specrl.engine.stats import Choices  # noqa: E402
from specrl.train.config import TrainConfig  # noqa: E402

BANDS = ((1, 4), (5, 8), (9, 16), (17, 32), (33, 64))


def band(active: int) -> str:
    return next(f"{lo}-{hi}" for lo, hi in BANDS if active <= hi)


def by_band(trace: Path, after: int) -> dict:
    rows = [r for r in map(json.loads, trace.read_text().splitlines()) if r["step"] >= after and r["phase"] != "prefill"]
    total = sum(r["draft_s"] + r["verify_s"] + r["other_s"] for r in rows)
    out = {}
    for lo, hi in BANDS:
        rs = [r for r in rows if lo <= r["active"] <= hi]
        s = sum(r["draft_s"] + r["verify_s"] + r["other_s"] for r in rs)
        if rs:
            out[f"{lo}-{hi}"] = {"tokens_per_s": round(sum(r["emitted_tokens"] for r in rs) / s, 1),
                                 "time_share": round(s / total, 3), "steps": len(rs)}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("runs/rl_trace"))
    ap.add_argument("--arms", default="suffix@2,suffix@4,eagle3@1,eagle3@4,ngram@2,ngram@4")
    ap.add_argument("--model", default=None)
    ap.add_argument("--warmup-tokens", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-tokens", type=int, default=None, help="default: the default run's budget")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    rollout, budget = TrainConfig().rollout, args.max_tokens or TrainConfig().budget.max_tokens
    path = policy_path(args.model)
    probe = LLM(path, max_num_seqs=1)
    prompts = task_prompts(probe, rollout.prompts_per_step, seed=args.seed + 7, split="train")
    warmup = task_prompts(probe, rollout.prompts_per_step, seed=args.seed + 8, split="train")
    specs = [("off", None)] + [(a, SpecConfig(method=a.split("@")[0], num_speculative_tokens=int(a.split("@")[1])))
                               for a in args.arms.split(",")] + [("auto", SpecConfig(method="auto"))]
    results = {}
    for name, spec in specs:
        trace = args.out / f"{name}.trace.jsonl"
        trace.unlink(missing_ok=True)
        llm = LLM(path, max_num_seqs=rollout.max_num_seqs, spec=spec, trace_path=str(trace))
        mark, choices = {}, Choices()
        if name == "auto":
            llm.engine.choices, choices.history = choices, []

        def after_warmup():
            mark["step"] = llm.engine.tracer.step
            choices.reset()
        got, stats = measure(llm, prompts, rollout.n, rollout.max_num_seqs, budget, args.seed, 1, warmup,
                             args.warmup_tokens, after_warmup=after_warmup)
        llm.engine.tracer.close()
        row = {"arm": name, **{k: got[k] for k in RATE}, "acceptance_length": round(stats["acceptance_length"], 3),
               "bands": by_band(trace, mark["step"])}
        if name == "auto":
            arms: dict[str, Counter] = {}
            for h in choices.history:
                arms.setdefault(band(h["running"]), Counter())[h["arm"]] += 1
            row["auto_arms"] = {b: dict(c.most_common(4)) for b, c in arms.items()}
        results[name] = row
        print(json.dumps(row), flush=True)
    off = results["off"]["tokens_per_s"]
    print("\n| arm | tok/s (x off) | " + " | ".join(f"{lo}-{hi} running: tok/s (time share)" for lo, hi in BANDS) + " |")
    print("|---|---|" + "---|" * len(BANDS))
    for name, r in results.items():
        cells = [f"{r['bands'][b]['tokens_per_s']} ({r['bands'][b]['time_share']})" if b in r["bands"] else "-"
                 for b in (f"{lo}-{hi}" for lo, hi in BANDS)]
        print(f"| {name} | {r['tokens_per_s']:.0f} ({r['tokens_per_s'] / off:.2f}) | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
