"""Generation on a real checkpoint (e.g. SmolLM2-135M-Instruct from `specrl fetch-model`), greedy or sampled,
batch 1 or more: tokens/s with SD off and with each requested method, and (greedy) whether every method's
tokens equal SD off's.

Prompts are a `specrl make-data` file, each row sent as one user turn through the checkpoint's chat
template, `--batch` requests at a time (default 1). At `--temperature` > 0 the tokens differ between
methods (rejection sampling keeps the distribution, not the draws), so only speed and acceptance compare.
Prints one JSON line per method: wall and process-CPU tokens/s (CPU time is what a loaded,
shared machine distorts least), acceptance length, and the peak RSS of the process so far.

    python -m specrl fetch-model smollm2 --out /tmp/smollm2
    python -m specrl make-data math --n 8 --difficulty mix --out /tmp/math.jsonl
    python benchmarks/real_model.py --model /tmp/smollm2 --prompts /tmp/math.jsonl --n 4 --spec none,ngram,suffix
"""
from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without install


def run_method(args, method: str, prompts: list[list[int]]) -> tuple[dict, list[list[int]]]:
    from specrl import LLM, SamplingParams, SpecConfig
    spec = SpecConfig(method=None if method == "none" else method, num_speculative_tokens=args.k,
                      draft_model=args.draft_model if method in ("eagle3", "draft_model", "mtp") else None)
    llm = LLM(args.model, spec=spec, max_num_seqs=args.batch, max_model_len=args.max_model_len, dtype=args.dtype)
    params = SamplingParams(temperature=args.temperature, max_tokens=args.max_tokens, seed=0)
    llm.generate([prompts[0][:8]], SamplingParams(temperature=0.0, max_tokens=4))  # warm-up, not timed
    tokens, wall, cpu = [], 0.0, 0.0
    for i in range(0, len(prompts), args.batch):
        w0, c0 = time.perf_counter(), time.process_time()
        outs = llm.generate(prompts[i:i + args.batch], params)
        wall, cpu = wall + time.perf_counter() - w0, cpu + time.process_time() - c0
        tokens += [list(o.outputs[0].token_ids) for o in outs]
    n_tok = sum(len(t) for t in tokens)
    row = {"method": method, "dtype": args.dtype, "batch": args.batch, "temperature": args.temperature,
           "k": args.k if method != "none" else 0, "prompts": len(prompts), "tokens": n_tok,
           "wall_s": round(wall, 2), "tok_per_s_wall": round(n_tok / wall, 2),
           "cpu_s": round(cpu, 2), "tok_per_s_cpu": round(n_tok / cpu, 2),
           "acceptance_length": round(llm.stats.get("acceptance_length", 0.0), 3),
           "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)}
    return row, tokens


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--prompts", required=True, help="JSONL of `prompt` or `messages` rows")
    ap.add_argument("--n", type=int, default=4, help="prompts (generated one at a time)")
    ap.add_argument("--spec", default="none,ngram,suffix", help="comma-separated methods; 'none' is SD off")
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--draft-model", default=None, help="drafter dir for eagle3 / draft_model / mtp")
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--max-model-len", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=1, help="requests generated together")
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--dtype", default="float32", help="the engine's weights and KV cache (bfloat16: AMX on this CPU)")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    import torch
    torch.set_num_threads(args.threads)
    from specrl.drafters.training.prompts import load_prompts
    prompts = load_prompts(args.prompts, args.model, args.n)  # as `specrl train` encodes them (chat template)
    base = None
    for method in args.spec.split(","):
        row, tokens = run_method(args, method, prompts)
        base = tokens if base is None else base
        row["same_tokens_as_first"] = tokens == base if args.temperature == 0 else None
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
