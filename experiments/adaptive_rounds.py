"""`bench adaptive`'s rows in rounds: each round draws the samples with another seed and runs the arms in a
rotated order, so the length draw, drift in the machine's speed and the choice of the best static strategy can
be told apart from what `auto` itself costs.

The bench as typed measures each arm once, in a fixed order (SD off, the static arms, `auto` last), and takes
the best static arm as the largest of 15 single measurements. Here each arm is measured once per round; the
summary pools each arm's tokens and seconds over the rounds, gives `auto` over the best static arm of each round
with its spread, and scores the best static arm of the other rounds on each round (the winner's curse).

Arms: `off`, `METHOD@K`, `auto@K` (the default drafters), `auto:suffix+ngram@K` (auto among those), and
`auto-norows@K`: auto with the running rows' own acceptance switched off (engine/adaptive/ratecheck.py
RowRates), as before it existed.

    python experiments/adaptive_rounds.py --rows rl,64 --seeds 0,1,2 --arms off,suffix@2,auto@4 > rounds.jsonl
    python experiments/adaptive_rounds.py --summary rounds.jsonl
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

ARMS = "off,suffix@2,ngram@2,suffix@4,ngram@4,eagle3@4,auto@4"


def workload(row: str, config):
    """(slots, samples per prompt, batches, max tokens, split) of a bench adaptive row."""
    if row == "rl":
        return config.rollout.max_num_seqs, config.rollout.n, 1, config.budget.max_tokens, "train"
    from benchmarks.adaptive import MIN_PROMPTS
    slots = int(row)
    return slots, 1, max(2, -(-MIN_PROMPTS // slots)), 256, "test"


def prompt_sets(llm, row: str, config, seed: int) -> tuple[list[list[int]], list[list[int]]]:
    """A row's measured prompts and its warm-up prompts (other ones), drawn as bench adaptive draws them."""
    from benchmarks.common import prompt_sets as row_prompt_sets
    slots, _, batches, _, _ = workload(row, config)
    return row_prompt_sets(llm, row == "rl", slots, batches, config.rollout, seed)


def pooled_rate(rows: list[dict], arm: str) -> float:
    """An arm's tokens per second over all its rows."""
    mine = [r for r in rows if r["arm"] == arm]
    return sum(r["tokens"] for r in mine) / sum(r["seconds"] for r in mine)


def measure(path: str, row: str, arm: str, seed: int, warmup_tokens: int) -> dict:
    from specrl import LLM, SpecConfig
    from benchmarks.common import measure as timed_measure
    from specrl.engine.adaptive import ratecheck as row_rates
    from specrl.engine.stats import Choices
    from specrl.train.config import TrainConfig
    config = TrainConfig()
    slots, n, batches, max_tokens, _ = workload(row, config)
    method, k = (arm.split("@")[0], int(arm.split("@")[1])) if "@" in arm else (arm, 0)
    extra = {"drafters": tuple(method.split(":")[1].split("+"))} if ":" in method else {}
    name = method.split(":")[0].removesuffix("-norows")
    spec = None if method == "off" else SpecConfig(method=name, num_speculative_tokens=k, **extra)
    factor = row_rates.RowRates.factor
    if method.endswith("-norows"):
        row_rates.RowRates.factor = lambda self, ids, drafter: 1.0
    try:
        llm = LLM(path, device="cpu", dtype="float32", max_num_seqs=slots, spec=spec)
        prompts, warm = prompt_sets(llm, row, config, seed)
        choices = None
        if method.startswith("auto"):
            choices = llm.engine.choices = Choices()
        got, s = timed_measure(llm, prompts, n, slots, max_tokens, seed, batches, warm, warmup_tokens,
                               after_warmup=choices.reset if choices is not None else None)
    finally:
        row_rates.RowRates.factor = factor
    out = {"row": row, "arm": arm, "seed": seed, "tokens": got["tokens"], "seconds": round(got["seconds"], 4),
           "tokens_per_s": round(got["tokens_per_s"], 2), "longest": max(map(len, got["ids"])),
           **{key: round(s[key], 4) for key in ("draft_s", "verify_s", "other_s", "prefill_s")},
           "seq_forwards": s["seq_forwards"], "acceptance_length": round(s["acceptance_length"], 4)}
    if choices is not None:
        steps = sum(v for d, v in choices.rows.items() if d != "k_sum")
        out["mix"] = {d: round(v / max(steps, 1), 3) for d, v in choices.rows.items() if d != "k_sum"}
    return out


def summarize(rows: list[dict]) -> None:
    out = sys.stderr
    for row in dict.fromkeys(r["row"] for r in rows):
        mine = [r for r in rows if r["row"] == row]
        arms = list(dict.fromkeys(r["arm"] for r in mine))
        seeds = sorted({r["seed"] for r in mine})
        pooled = {a: pooled_rate(mine, a) for a in arms}
        static = [a for a in arms if a != "off" and not a.startswith("auto")]
        print(f"row {row}: {len(seeds)} rounds", file=out)
        for a in arms:
            rs = [r for r in mine if r["arm"] == a]
            per = [sum(r[k] for r in rs) / max(sum(r["seq_forwards"] for r in rs), 1) * 1e3
                   for k in ("draft_s", "verify_s", "other_s")]
            vs_off = pooled[a] / pooled["off"] if "off" in pooled else float("nan")
            print(f"  {a:22} {pooled[a]:8.1f} tok/s  x off {vs_off:5.2f}  ms per row-step: draft {per[0]:.3f}, "
                  f"verify {per[1]:.3f}, other {per[2]:.3f}; tokens {[r['tokens'] for r in rs]}", file=out)
        if not static:
            continue
        for a in (a for a in arms if a.startswith("auto")):
            ratios = []
            for s in seeds:
                one = {r["arm"]: r["tokens_per_s"] for r in mine if r["seed"] == s}
                ratios.append(one[a] / max(one[x] for x in static))
            logs = [math.log(x) for x in ratios]
            m = statistics.mean(logs)
            half = 2.0 * statistics.stdev(logs) / math.sqrt(len(logs)) if len(logs) > 1 else float("nan")
            best = max(static, key=pooled.get)
            print(f"  {a} / best static of each round: geometric mean {math.exp(m):.3f} (+-2 s.e. "
                  f"{math.exp(m - half):.3f}-{math.exp(m + half):.3f}), per round {[round(x, 3) for x in ratios]}; "
                  f"/ {best} pooled {pooled[a] / pooled[best]:.3f}", file=out)
        for s in seeds:  # the winner's curse: the best static arm of the other rounds, scored on this one
            rest = [r for r in mine if r["seed"] != s]
            if not rest:
                continue
            tps = {a: pooled_rate(rest, a) for a in static}
            one = {r["arm"]: r["tokens_per_s"] for r in mine if r["seed"] == s}
            b = max(static, key=tps.get)
            print(f"  round {s}: the other rounds' best static ({b}) scores {one[b] / max(one[a] for a in static):.3f}"
                  " of this round's best", file=out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", default="rl", help="bench adaptive rows: batch sizes and/or rl, e.g. 1,4,rl")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--arms", default=ARMS)
    ap.add_argument("--model", default=None, help="the policy (default: the embedded one)")
    ap.add_argument("--warmup-tokens", type=int, default=64)
    ap.add_argument("--summary", default=None, help="only summarise these rows (a JSON-lines file)")
    args = ap.parse_args()
    if args.summary:
        summarize([json.loads(line) for line in open(args.summary)])
        return 0
    from benchmarks.common import policy_path
    path = policy_path(args.model)
    arms, rows = args.arms.split(","), []
    for row in args.rows.split(","):
        for i, seed in enumerate(int(s) for s in args.seeds.split(",")):
            shift = i % len(arms)
            for arm in arms[shift:] + arms[:shift]:  # a rotated order each round
                rows.append(measure(path, row, arm, seed, args.warmup_tokens))
                print(json.dumps(rows[-1]), flush=True)
    summarize(rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
