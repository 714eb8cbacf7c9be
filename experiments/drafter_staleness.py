"""Staleness without the workload confound: several EAGLE-3 heads on the same policy and the same prompts.

An RL run's per-step acceptance mixes two things: how well the head matches the policy, and how predictable
the policy's text is (its entropy, its lengths). This takes one policy checkpoint (e.g. a drift run's
`checkpoints/step_N/model`) and measures each head's acceptance length on the same held-out embedded-task
prompts at the same sampling settings, in one process, so only the head differs:

    python experiments/drafter_staleness.py --policy RUN/checkpoints/step_000050/model \\
        --head shipped --head RUN/checkpoints/step_000050/drafter [--prompts 64 --n 4]

`shipped` is the offline-trained head the run started from.
"""
from __future__ import annotations

import argparse
import json


def main() -> None:
    import torch

    from specrl import LLM, SamplingParams, SpecConfig
    from specrl.tasks import make_problems

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--policy", required=True)
    ap.add_argument("--head", action="append", required=True, help="'shipped' or an EAGLE-3 head dir; repeat")
    ap.add_argument("--prompts", type=int, default=64)
    ap.add_argument("--n", type=int, default=4)
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    torch.set_num_threads(1)
    prompts = [p.prompt for p in make_problems(args.prompts, seed=args.seed, split="test")]
    params = SamplingParams(n=args.n, temperature=args.temperature, max_tokens=200, seed=args.seed)
    for head in args.head:
        spec = SpecConfig(method="eagle3", num_speculative_tokens=args.k,
                          draft_model=None if head == "shipped" else head)
        llm = LLM(args.policy, max_num_seqs=64, spec=spec)
        outs = llm.generate(prompts, params)
        tokens = sum(len(c.token_ids) for o in outs for c in o.outputs)
        print(json.dumps({"policy": args.policy, "head": head, "acceptance_length": round(llm.stats["acceptance_length"], 3),
                          "tokens": tokens, "prompts": args.prompts, "n": args.n, "temperature": args.temperature}),
              flush=True)


if __name__ == "__main__":
    main()
