"""`auto` at batch 1 as `specrl bench adaptive` runs it (8 held-out prompts, 256 tokens, a 64-token warm-up on
another prompt), printing every 60 steps the eight best arms' predicted rates (optimistic, plain), their rate
check factors and the counted acceptance of each drafter at k = 1, 2, 4: which arm it takes, and why.

    python experiments/adaptive_b1_rates.py 2> b1_rates.out"""
import sys

from specrl import LLM
from benchmarks.common import task_prompts, timed_generate, warm_up
from specrl.tasks import default_policy_path
from specrl.threads import set_threads
from specrl.train.config import TrainConfig


def dump(strategy, tag: str) -> None:
    rows = sorted(((round(strategy.predicted_rate(a, 1), 1), round(strategy.predicted_rate(a, 1, optimistic=False), 1),
                    round(strategy.checks.factor(a.label, 1), 2), a.label) for a in strategy.arms), reverse=True)
    cost = strategy.cost
    print(tag, "target s at 1/3/5 tokens", [round(cost.target_s(t, 1), 4) for t in (1, 3, 5)],
          {d: round(cost.draft_s(d, 4, 4), 4) for d in strategy.names}, file=sys.stderr)
    for r in rows[:8]:
        print("   ", r, file=sys.stderr)
    for key in [("suffix", "all"), ("ngram", "all"), ("eagle3", "all"), ("eagle3", "fill")]:
        s = strategy.stats[key]
        print("   ", key, f"rows {s.rows:.1f}", [round(s.expected(k, False), 2) for k in (1, 2, 4)], file=sys.stderr)


def main() -> None:
    set_threads(2)
    path = str(default_policy_path())
    probe = LLM(path, max_num_seqs=1)
    prompts, warmup = task_prompts(probe, 8, seed=1234 + 7), task_prompts(probe, 1, seed=1234 + 8)
    llm = LLM(path, max_num_seqs=1, spec=TrainConfig().rollout.spec)
    strategy, steps = llm.engine.strategy, [0]
    schedule = strategy.schedule

    def logged(seqs, pool):
        if steps[0] % 60 == 0:
            dump(strategy, f"step {steps[0]}")
        steps[0] += 1
        return schedule(seqs, pool)
    strategy.schedule = logged
    warm_up(llm, warmup, 1, 64, 1234)
    got = timed_generate(llm, prompts, 1, 1, 256, 1234, 8)
    print("tokens/s", round(got["tokens_per_s"], 1), file=sys.stderr)
    dump(strategy, "end")


if __name__ == "__main__":
    main()
