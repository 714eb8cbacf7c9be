"""Why `auto` trails the best static strategy at small batches in `specrl bench adaptive`: what it predicts for
each arm against what that arm realises when run alone, in one process.

For one batch size (the bench's prompts, seeds and warm-up): SD off and each static arm of --arms, with its
tokens/s, acceptance length and seconds per step split into drafting and the rest (verify + bookkeeping);
then `auto` (train's drafters, k up to the largest of --arms), whose plans are logged (the arm chosen at each
plan, and at the end each --arms arm's predicted tokens/s and its terms: expected accepted drafts, the
target's seconds, the drafting seconds, the catch-up). One JSON line per row.

    python experiments/adaptive_small_batch.py --batch 4 --repeats 4 --arms eagle3@4,ngram@4,suffix@4
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
from specrl.engine.adaptive.arms import ALL, Arm  # noqa: E402


def per_step(stats: dict) -> dict:
    steps = max(stats["target_forwards"], 1)
    return {"acceptance_length": round(stats["acceptance_length"], 3), "steps": stats["target_forwards"],
            "draft_ms": round(1e3 * stats["draft_s"] / steps, 2),
            "rest_ms": round(1e3 * (stats["verify_s"] + stats["other_s"]) / steps, 2)}


def terms(strategy, arm: Arm, B: int) -> dict:
    """The prediction of `arm` at B rows and its parts (single-drafter arms)."""
    k, cost = arm.k, strategy.cost
    draft = strategy.stats[arm.drafter, ALL].expected(k, optimistic=False)
    catch_up = cost.catch_up_s(arm.drafter, B * (1.0 + draft)) if arm.drafter in strategy.deferred else 0.0
    return {"predicted_tokens_per_s": round(strategy.predicted_rate(arm, B, optimistic=False), 1),
            "expected_length": round(1.0 + draft, 3), "target_ms": round(1e3 * cost.target_s(B * (k + 1), B), 2),
            "draft_ms": round(1e3 * cost.draft_s(arm.drafter, B * k, k), 2), "catch_up_ms": round(1e3 * catch_up, 2),
            "check_factor": round(strategy.checks.factor(arm.label, B), 3)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--warmup-tokens", type=int, default=64)
    ap.add_argument("--arms", default="eagle3@4,ngram@4,suffix@4")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    arms = [Arm(a.split("@")[0], int(a.split("@")[1])) for a in args.arms.split(",")]
    path, B = policy_path(None), args.batch
    probe = LLM(path, max_num_seqs=1)
    prompts = task_prompts(probe, B * args.repeats, seed=args.seed + 7)
    warmup = task_prompts(probe, B, seed=args.seed + 8)

    def run(spec):
        llm = LLM(path, max_num_seqs=B, spec=spec)
        got, stats = measure(llm, prompts, 1, B, args.max_tokens, args.seed, args.repeats, warmup, args.warmup_tokens)
        return llm, {k: got[k] for k in RATE}, stats
    _, off, stats = run(None)
    print(json.dumps({"arm": "off", **off, **per_step(stats)}), flush=True)
    for arm in arms:
        _, got, stats = run(SpecConfig(method=arm.drafter, num_speculative_tokens=arm.k))
        print(json.dumps({"arm": arm.label, **got, "speedup": round(got["tokens_per_s"] / off["tokens_per_s"], 3),
                          **per_step(stats)}), flush=True)
    llm = LLM(path, max_num_seqs=B, spec=SpecConfig(method="auto", num_speculative_tokens=max(a.k for a in arms)))
    strategy, chosen = llm.engine.strategy, Counter()
    best_arm = strategy.best_arm

    def logged(b):
        arm = best_arm(b)
        chosen[f"{arm.label}|B={b}"] += 1
        return arm
    strategy.best_arm = logged
    got, stats = measure(llm, prompts, 1, B, args.max_tokens, args.seed, args.repeats, warmup, args.warmup_tokens,
                         after_warmup=chosen.clear)
    got = {k: got[k] for k in RATE}
    print(json.dumps({"arm": "auto", **got, "speedup": round(got["tokens_per_s"] / off["tokens_per_s"], 3),
                      **per_step(stats), "plans": dict(chosen.most_common())}), flush=True)
    every = {a.label: round(strategy.predicted_rate(a, B, optimistic=False) * strategy.checks.factor(a.label, B), 1)
             for a in strategy.arms}
    print(json.dumps({"predicted_at_end_every_arm": dict(sorted(every.items(), key=lambda x: -x[1]))}), flush=True)
    for arm in arms + [Arm(None)]:
        row = terms(strategy, arm, B) if arm.drafter else {
            "predicted_tokens_per_s": round(strategy.predicted_rate(arm, B), 1),
            "target_ms": round(1e3 * strategy.cost.target_s(B, B), 2)}
        print(json.dumps({"prediction_at_end": arm.label, "B": B, **row}), flush=True)


if __name__ == "__main__":
    main()
