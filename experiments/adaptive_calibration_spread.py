"""How much `auto`'s warm-up profile (the calibrated target cost) varies between engine starts at batch 1: each
start fits the forward's fixed cost and its cost per token from timed forwards (engine/adaptive/strategy.py
`calibrate`). A slope that is too steep makes every plan ask short drafts.

    python experiments/adaptive_calibration_spread.py [STARTS]

Prints, per start, the fitted seconds of a 1-, 3- and 5-token forward and the slope per token, then the raw
fastest-of-5 forward times at 1, 2, 3, 5 and 9 tokens."""
import sys

from specrl import LLM
from specrl.tasks import default_policy_path
from specrl.train.config import TrainConfig


def main(starts: int = 6) -> None:
    path = str(default_policy_path())
    spec = TrainConfig().rollout.spec  # auto over the default drafters, k 4
    for _ in range(starts):
        llm = LLM(path, max_num_seqs=1, spec=spec)
        cost, runner = llm.engine.strategy.cost, llm.engine.runner
        t1, t3, t5 = (1e3 * cost.target_s(t, 1) for t in (1, 3, 5))
        print(f"t1 {t1:.2f} t3 {t3:.2f} t5 {t5:.2f} ms  slope/token {(t5 - t3) / 2:.3f} ms")
        print("   raw", [round(1e3 * min(runner.time_forward(1, T) for _ in range(5)), 2) for T in (1, 2, 3, 5, 9)])


if __name__ == "__main__":
    main(*map(int, sys.argv[1:]))
