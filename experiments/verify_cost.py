"""What a verify forward costs against a plain decode step, on a real checkpoint: the process CPU time of one
batch-1 forward of T tokens (T = 1..8, i.e. k = T-1 drafts) on top of a cached prompt, fp32 and bf16, each
in the same process, rounds interleaved (median of `--rounds`). One thread.

From the ratios c(T) = cost(T) / cost(1) it prints the speedup ceiling of chain speculative decoding at
batch 1: with k drafts accepting tau tokens per verify and a drafter costing d decode steps per draft,
speedup = tau / (c(k+1) + k d). `needed_tau_for_2x` is the acceptance length that 2.0x needs at each k
(None where even tau = k+1, every draft accepted, falls short).

Not `ModelRunner.time_forward` (the adaptive engine's warm-up profile): that one times wall clock from
position 0 with no cached context; here the forward sits on a cached prompt, as a verify does, and the
clock is the process's CPU time, which other jobs on a shared machine move less.

    python experiments/verify_cost.py --model DIR [--dtypes float32,bfloat16] [--draft-cost 0.06]
        [--out docs/results/verify_cost_smollm2.jsonl]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without install

import torch  # noqa: E402

from specrl.engine.runner import ModelRunner  # noqa: E402
from specrl.model.checkpoint import load_model  # noqa: E402

TOKENS = (1, 2, 3, 4, 5, 6, 8)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--dtypes", default="float32,bfloat16")
    ap.add_argument("--context", type=int, default=160, help="cached positions before the forward")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--calls", type=int, default=3, help="forwards per measurement")
    ap.add_argument("--draft-cost", type=float, default=0.06,
                    help="drafter cost per draft token in decode steps (EAGLE-3 on SmolLM2-135M: ~0.06)")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    torch.set_num_threads(1)
    rows = []
    for dtype in args.dtypes.split(","):
        model = load_model(args.model, dtype=dtype).eval()
        runner = ModelRunner(model, 1, args.context + 64)
        runner.prefill([[(7 * i) % 1000 + 10 for i in range(args.context)]], [0])

        def forward(T: int) -> None:
            runner.forward(torch.randint(10, 1000, (1, T)), torch.arange(args.context, args.context + T)[None], [0])

        ms: dict[int, list[float]] = {T: [] for T in TOKENS}
        for T in TOKENS:
            forward(T)  # warm-up
        for _ in range(args.rounds):
            for T in TOKENS:
                t = time.process_time()
                for _ in range(args.calls):
                    forward(T)
                ms[T].append((time.process_time() - t) / args.calls * 1e3)
        med = {T: statistics.median(v) for T, v in ms.items()}
        cost = {T: med[T] / med[1] for T in TOKENS}
        ceiling, needed = {}, {}
        for T in TOKENS[1:]:
            k = T - 1
            denom = cost[T] + k * args.draft_cost
            ceiling[k] = round(T / denom, 2)  # every draft accepted
            needed[k] = round(2.0 * denom, 2) if 2.0 * denom <= T else None
        row = {"model": args.model, "dtype": dtype, "context": args.context, "ms_by_tokens": {T: round(v, 1) for T, v in med.items()},
               "cost_over_one_token": {T: round(v, 2) for T, v in cost.items()}, "draft_cost": args.draft_cost,
               "ceiling_all_accepted_by_k": ceiling, "needed_tau_for_2x_by_k": needed}
        rows.append(row)
        print(json.dumps(row), flush=True)
        del model, runner
    if args.out:
        with open(args.out, "a") as f:
            for row in rows:
                f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
