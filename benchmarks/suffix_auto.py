"""Acceptance length and wall-clock speedup of the suffix drafter and the auto strategy vs SD off.

    python benchmarks/suffix_auto.py --model tiny          # repetitive synthetic workload, tiny random model
    python benchmarks/suffix_auto.py --model embedded      # the embedded arithmetic policy at temperature 1

Workloads: "b1" (prompts one at a time, batch 1) and "rl" (64 prompts x n=8, up to 64 running: the RL rollout
workload; "rl2" repeats it on the same engine, as a later RL step on the same problems does). Prints one
JSON line per (workload, method, k) with tokens/s, SD-off tokens/s, their ratio and the acceptance length
(the best of --trials alternating runs of each: the CPU is shared, so single timings drift).
"""
from __future__ import annotations

import argparse
import json
import time

import torch

from specrl import LLM, SamplingParams, SpecConfig


def tiny_workload(num_prompts: int):
    from tests.helpers import tiny_model
    # peaky random weights whose greedy text falls into loops (run it with --temperature 0 --ignore-eos):
    # the repetitive text suffix drafting is made for. At temperature 1 random weights are not repetitive.
    model = tiny_model(seed=3, vocab=32, hidden=48, layers=2, max_pos=512, scale=2.0)
    g = torch.Generator().manual_seed(0)
    prompts = [[0] + torch.randint(2, 32, (24,), generator=g).tolist() for _ in range(num_prompts)]
    # lengths with a long right tail, as RL rollouts have: most short, a few many times the median
    lengths = [min(384, int(24 * 1.6 ** (i % 7))) for i in range(num_prompts)]  # 24 .. 384 tokens
    return model, prompts, lengths


def embedded_workload(num_prompts: int, path=None):
    from specrl.model import load_model
    from specrl.tasks import default_policy_path, load_tokenizer, make_problems
    path = path or default_policy_path()
    model = load_model(path)
    tok, _ = load_tokenizer(path)
    prompts = [tok.encode(p.prompt).ids for p in make_problems(num_prompts, seed=1, split="test")]
    return model, prompts, [384] * len(prompts)  # responses end on EOS well before this


def run(model, prompts, params, spec, max_num_seqs, repeats=1):
    llm = LLM(model, spec=spec, max_num_seqs=max_num_seqs)
    results = []
    for _ in range(repeats):  # repeats share the engine: later ones start from warm suffix pools
        llm.reset_stats()
        t0 = time.perf_counter()
        if max_num_seqs == 1:
            for p, sp in zip(prompts, params):
                llm.generate([p], sp)
        else:
            llm.generate(prompts, params)
        dt = time.perf_counter() - t0
        s = llm.stats
        results.append((s["generated_tokens"] / dt, s["acceptance_length"], s["generated_tokens"],
                        s["draft_s"] / dt))
    return results


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="tiny", choices=["tiny", "embedded"])
    ap.add_argument("--policy", default=None, help="policy dir for --model embedded (default: the shipped one)")
    ap.add_argument("--ks", default="4,8")
    ap.add_argument("--methods", default="suffix,auto")
    ap.add_argument("--workloads", default="b1,rl")
    ap.add_argument("--b1-prompts", type=int, default=4)
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--ignore-eos", action="store_true")
    ap.add_argument("--trials", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1)  # the CPU is shared: 2 threads contend
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    if args.model == "tiny":
        model, prompts, max_tokens = tiny_workload(64)  # max_tokens: one per prompt
    else:
        model, prompts, max_tokens = embedded_workload(64, args.policy)
    for wl in args.workloads.split(","):
        b1 = wl == "b1"
        ps = prompts[:args.b1_prompts] if b1 else prompts
        params = [SamplingParams(n=1 if b1 else 8, temperature=args.temperature, max_tokens=m, seed=0,
                                 ignore_eos=args.ignore_eos) for m in max_tokens[:len(ps)]]
        slots, repeats = (1, 1) if b1 else (64, 2)
        for method in args.methods.split(","):
            for k in map(int, args.ks.split(",")):
                spec = SpecConfig(method=method, num_speculative_tokens=k)
                # SD off and SD on alternate, best of `trials` each: the shared CPU's speed drifts a lot
                base, sd = [], []
                for _ in range(args.trials):
                    base.append(run(model, ps, params, None, slots)[0])
                    sd.append(run(model, ps, params, spec, slots, repeats))
                base_tps = max(b[0] for b in base)
                for i in range(repeats):
                    tps, acc_len, n, draft_share = max((r[i] for r in sd), key=lambda r: r[0])
                    print(json.dumps({"model": args.model, "workload": wl + ("" if i == 0 else "_warm"),
                                      "method": method, "k": k, "tokens": n, "tokens_per_s": round(tps, 1),
                                      "baseline_tokens_per_s": round(base_tps, 1), "speedup": round(tps / base_tps, 3),
                                      "acceptance_length": round(acc_len, 3),
                                      "draft_time_share": round(draft_share, 3)}), flush=True)


if __name__ == "__main__":
    main()
