"""Greedy SD on vs off token identity in fp32 and bf16 on the embedded policy, as JSON lines.

In fp32 greedy SD is token-identical to SD off (tests/drafters/test_exactness.py). In bf16 the verify forward
(k+1 positions per sequence) and a decode forward (1 position) may round differently, so an argmax whose
top two logits are within a bf16 rounding step can flip, and the two runs part from there. This counts how
often, per method: sequences that differ, and the share of tokens before the first difference. The row
`off_batch1` compares SD off at batch 64 with SD off at batch 1 (the same kind of rounding change, from
batching alone).

    OMP_NUM_THREADS=1 python benchmarks/bf16_sd_identity.py --prompts 200 --max-tokens 200
"""
from __future__ import annotations

import argparse
import copy
import json

import torch

from specrl import LLM, SamplingParams, SpecConfig
from specrl.model import load_model
from specrl.tasks import default_policy_path, make_problems


def compare(base: list, other: list) -> dict:
    diff, same_tokens, total = 0, 0, 0
    for a, b in zip(base, other):
        a, b = a.outputs[0].token_ids, b.outputs[0].token_ids
        first = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
        diff += a != b
        same_tokens += first
        total += len(a)
    return {"sequences": len(base), "sequences_differ": diff, "share_differ": diff / len(base),
            "tokens_before_first_difference_share": same_tokens / max(total, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prompts", type=int, default=200)
    ap.add_argument("--max-tokens", type=int, default=200)
    ap.add_argument("--methods", default="auto,suffix,eagle3,draft_model,mtp")
    ap.add_argument("--dtypes", default="float32,bfloat16")
    ap.add_argument("--k", type=int, default=4)
    args = ap.parse_args()
    policy = load_model(default_policy_path(), dtype=torch.float32)
    params = SamplingParams(temperature=0.0, max_tokens=args.max_tokens)
    for dtype_name in args.dtypes.split(","):
        dtype = getattr(torch, dtype_name)
        model = copy.deepcopy(policy).to(dtype)
        base_llm = LLM(model, max_num_seqs=64)
        prompts = [base_llm.tokenizer.encode(p.prompt).ids for p in make_problems(args.prompts, seed=0, split="test")]
        base = base_llm.generate(prompts, params)
        rows = {"off_batch1": LLM(model, max_num_seqs=1).generate(prompts, params)}
        for method in args.methods.split(","):
            spec = SpecConfig(method=method, num_speculative_tokens=args.k)
            rows[method] = LLM(model, max_num_seqs=64, spec=spec).generate(prompts, params)
        for name, outs in rows.items():
            print(json.dumps({"dtype": dtype_name, "vs_off_batch64": name, **compare(base, outs)}), flush=True)


if __name__ == "__main__":
    main()
