"""`auto` over `bench adaptive`'s RL row (one default rollout, 64 slots, the default run's budget, after a
64-token warm-up of the workload's shape): for every step, the arm it ran, what the cost model priced the
step at (target forward and drafting) against what it took, and the tokens it expected against what it
emitted; at each new plan, the five best arms' predicted rates. Tells whether a wrong choice comes from the
cost side or the acceptance side.

    python experiments/adaptive_rl_rates.py --seed 0 > rl_rates.jsonl 2> rl_rates.out
    python experiments/adaptive_rl_rates.py --seed 0 --batch 64 > b64_rates.jsonl   # a batch-size row instead
"""
import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from specrl import LLM  # noqa: E402
from benchmarks.common import policy_path, timed_generate, warm_up  # noqa: E402
from specrl.train.config import TrainConfig  # noqa: E402

from adaptive_rounds import prompt_sets, workload  # noqa: E402  (experiments/: the bench's rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--model", default=None)
    ap.add_argument("--batch", type=int, default=None, help="the bench's batch-size row instead of the RL row")
    args = ap.parse_args()
    config = TrainConfig()
    rollout = config.rollout
    row = "rl" if args.batch is None else str(args.batch)
    slots, n, repeats, max_tokens, _ = workload(row, config)
    llm = LLM(policy_path(args.model), max_num_seqs=slots, spec=rollout.spec)
    prompts, warm = prompt_sets(llm, row, config, args.seed)
    strategy = llm.engine.strategy
    schedule, update = strategy.schedule, strategy.update
    live = {"on": False, "plan": None}

    def logged_schedule(seqs, pool):
        B, before = len(seqs), strategy.arm
        plan = schedule(seqs, pool)
        arm = strategy.arm
        if live["on"] and strategy._age == 1:  # a new plan this step
            top = sorted(((strategy.predicted_rate(a, B, optimistic=False) * strategy.checks.factor(a.label, B),
                           a.label) for a in strategy.arms), reverse=True)[:5]
            print(f"B={B:3d} plan {arm.label:18s} (was {before.label}); top "
                  + ", ".join(f"{label} {rate:.0f}" for rate, label in top), file=sys.stderr)
        k = arm.k if arm.drafter is not None else 0
        live["plan"] = {"B": B, "arm": arm.label, "k": k,
                        "pred_target_s": strategy.cost.target_s(B * (k + 1), B),
                        "pred_rate": strategy.predicted_rate(arm, B, optimistic=False),
                        "factor": strategy.checks.factor(arm.label, B)}
        return plan

    def logged_update(result):
        update(result)
        if live["on"] and result.phase != "prefill" and live["plan"] is not None:
            p = live["plan"]
            print(json.dumps({**{k: round(v, 6) if isinstance(v, float) else v for k, v in p.items()},
                              "target_s": round(result.verify_s + result.other_s, 6),
                              "draft_s": round(result.draft_s, 6), "total_s": round(result.total_s, 6),
                              "tokens_in": result.tokens_in, "emitted": result.emitted_tokens}), flush=True)

    strategy.schedule, strategy.update = logged_schedule, logged_update
    warm_up(llm, warm, n, 64, args.seed)
    live["on"] = True
    got = timed_generate(llm, prompts, n, slots, max_tokens, args.seed, repeats)
    print(f"tokens/s {got['tokens_per_s']:.1f} tokens {got['tokens']} seconds {got['seconds']:.2f}", file=sys.stderr)


if __name__ == "__main__":
    main()
