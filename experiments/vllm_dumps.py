"""Samples from vLLM (through `pipeline.backend=vllm`'s backend) for the sampler audit: one engine per process.

    python experiments/vllm_dumps.py --model policy --method off --out DIR       # 8 chain prompts x 8, 1100
    python experiments/vllm_dumps.py --model /path/smollm2 --method ngram --out DIR   # 8 chat prompts x 8, 128

Writes DIR/<name>_<method>_T1.jsonl, one row per sample: {prompt_ids, completion_ids, logprobs}, and prints
one JSON line (tokens, seconds, vLLM's acceptance counters).
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

CHAT = ["What is the capital of France?", "Write a short poem about the sea.", "Explain photosynthesis simply.",
        "Give me three tips for learning to cook.", "What is 17 times 23?", "Describe a cat to someone who "
        "has never seen one.", "Why is the sky blue?", "Summarize the plot of Romeo and Juliet in two sentences."]


def prompts_for(model_dir: Path, chain: bool) -> list[list[int]]:
    from specrl.train.data import PromptEncoder
    encoder = PromptEncoder(model_dir)
    if chain:
        from specrl.tasks import make_problems
        return [encoder.encode(p.prompt) for p in make_problems(8, seed=1234, split="test")]
    return [encoder.encode([{"role": "user", "content": q}]) for q in CHAT]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="policy", help="'policy' (the shipped one) or a checkpoint dir")
    ap.add_argument("--method", default="off", help="off | ngram | draft_model | eagle3")
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    from specrl.config import load_config
    from specrl.engine import SamplingParams
    from specrl.pipeline.vllm.build import vllm_backend
    from specrl.tasks import default_policy_path
    from specrl.train.config import TrainConfig
    shipped = args.model == "policy"
    model_dir = default_policy_path() if shipped else Path(args.model)
    method = "null" if args.method == "off" else args.method
    cfg = load_config(TrainConfig, None, [f"rollout.spec.method={method}", f"rollout.spec.num_speculative_tokens="
                                          f"{args.k}", "rollout.max_num_seqs=64", f"seed={args.seed}"])
    t0 = time.perf_counter()
    backend = vllm_backend(model_dir, cfg)
    build_s = time.perf_counter() - t0
    prompts = prompts_for(model_dir, shipped)
    max_tokens = 1100 if shipped else 128
    params = [SamplingParams(n=8, temperature=1.0, max_tokens=max_tokens, seed=args.seed * 1000 + i)
              for i in range(len(prompts))]
    t0 = time.perf_counter()
    outs = backend.generate(prompts, params)
    seconds = time.perf_counter() - t0
    stats = backend.stats()
    backend.close()
    name = "policy" if shipped else model_dir.name
    out = Path(args.out) / f"{name}_{args.method}_T1.jsonl"
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w") as f:
        for r in outs:
            for c in r.outputs:
                f.write(json.dumps({"prompt_ids": r.prompt_token_ids, "completion_ids": c.token_ids,
                                    "logprobs": c.logprobs}) + "\n")
    tokens = sum(len(c.token_ids) for r in outs for c in r.outputs)
    print(json.dumps({"model": name, "method": args.method, "k": args.k, "tokens": tokens, "seconds": seconds,
                      "tokens_per_s": tokens / seconds, "build_s": build_s, "mean_len": tokens / (8 * len(outs)),
                      **{k: stats[k] for k in ("drafts", "draft_tokens", "accepted_tokens", "acceptance_length")},
                      "out": str(out)}))


if __name__ == "__main__":
    main()
