"""Static strategies over `bench adaptive`'s batch-64 and RL rows, with each step's tokens per row bucketed by
the number of running rows: does a drafter's acceptance hold up in the long tail (few rows left) or fall?

    python experiments/adaptive_tail_acceptance.py 64,rl suffix@2,suffix@4,ngram@4,eagle3@4 > tail.txt
"""
import collections
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from specrl import LLM, SpecConfig  # noqa: E402
from benchmarks.common import policy_path, timed_generate, warm_up  # noqa: E402
from specrl.train.config import TrainConfig  # noqa: E402

from adaptive_rounds import prompt_sets, workload  # noqa: E402  (experiments/: the bench's rows)


class StepRows:
    """Stands in for the engine's tracer: keeps every decode step's trace row once `on`."""
    file = None

    def __init__(self):
        self.rows, self.on = [], False

    def record(self, **row):
        if self.on and row["phase"] != "prefill":
            self.rows.append(row)

    def close(self):
        pass


def bucket(active: int) -> int:
    return 1 if active <= 2 else 4 if active <= 6 else 16 if active <= 20 else 64


def run(method: str, k: int, row: str) -> None:
    config = TrainConfig()
    slots, n, batches, max_tokens, _ = workload(row, config)
    llm = LLM(policy_path(None), max_num_seqs=slots, spec=SpecConfig(method=method, num_speculative_tokens=k))
    prompts, warm = prompt_sets(llm, row, config, 0)
    steps = llm.engine.tracer = StepRows()
    warm_up(llm, warm, n, 64, 0)
    steps.on = True
    got = timed_generate(llm, prompts, n, slots, max_tokens, 0, batches)
    sums = collections.defaultdict(lambda: [0, 0, 0, 0.0])  # bucket -> row-steps, tokens, steps, seconds
    for r in steps.rows:
        s = sums[bucket(r["active"])]
        s[0], s[1], s[2] = s[0] + r["active"], s[1] + r["emitted_tokens"], s[2] + 1
        s[3] += r["draft_s"] + r["verify_s"] + r["other_s"]
    out = {b: {"steps": s[2], "tok_per_row_step": round(s[1] / s[0], 3), "seconds": round(s[3], 3),
               "tok_s": round(s[1] / s[3])} for b, s in sorted(sums.items())}
    print(method, k, row, f"tok/s {got['tokens_per_s']:.0f}", json.dumps(out), flush=True)


if __name__ == "__main__":
    for row in sys.argv[1].split(","):  # not `workload`: that would rebind the function run() calls
        for arm in sys.argv[2].split(","):
            name, k = arm.split("@")
            run(name, int(k), row)
