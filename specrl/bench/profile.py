"""`specrl bench profile`: where one generate's time goes inside the engine, by kind of op (torch.profiler), as one
JSON line.

    specrl bench profile                                 # the embedded policy, 64 prompts x 128 tokens, SD off
    specrl bench profile --model DIR --batch 64 --max-tokens 128 --method suffix --dtype float32
    specrl bench profile --task --max-tokens 256          # `bench peer`'s b64: task prompts, stop at EOS

Fixed work (`ignore_eos`, short prompts) at temperature 1, after a short warm-up generate; with `--task`, the
embedded task's held-out prompts encoded as `specrl train` encodes them, each stopping at EOS. The line gives the
wall time and tokens per second under the profiler (it slows small ops down, so compare shares, not speeds, with
other benches), each group's self-CPU seconds and share of the profiled total, and the ops that cost most.
"""
from __future__ import annotations

import argparse
import json
import time

from .common import encoded_task_prompts, short_prompts

GROUPS = {  # group: substrings of the op names that belong to it, matched in this order
    "attention": ("attention", "sdpa"),
    "linears": ("linear", "addmm", "aten::mm", "mkldnn", "mkl_"),
    "kv_writes": ("index_put",),
    "sampling": ("cumsum", "searchsorted", "softmax", "argmax", "topk", "sort", "multinomial"),
}


def group_of(op: str) -> str:
    return next((g for g, keys in GROUPS.items() if any(k in op for k in keys)), "other")


def grouped(events) -> tuple[dict, list]:
    """(seconds by group, the ten costliest ops as [name, seconds, calls]) from profiler averages."""
    seconds = {g: 0.0 for g in (*GROUPS, "other")}
    for e in events:
        seconds[group_of(e.key)] += e.self_cpu_time_total / 1e6
    top = sorted(events, key=lambda e: -e.self_cpu_time_total)[:10]
    return seconds, [[e.key, round(e.self_cpu_time_total / 1e6, 4), e.count] for e in top]


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="specrl bench profile", description=__doc__.splitlines()[0])
    ap.add_argument("--model", help="HF checkpoint dir (default: the embedded policy)")
    ap.add_argument("--batch", type=int, default=64, help="prompts generated at once (default 64)")
    ap.add_argument("--max-tokens", type=int, default=128, help="tokens each prompt generates (default 128)")
    ap.add_argument("--method", help="an SD method (default: SD off)")
    ap.add_argument("--dtype", default="auto", help="auto (default), float32 or bfloat16")
    ap.add_argument("--threads", type=int, help="torch CPU threads (default: torch's)")
    ap.add_argument("--task", action="store_true",
                    help="the task's prompts, stopping at EOS, as bench peer's b64 (default: fixed work)")
    args = ap.parse_args(argv)
    import torch
    from torch.profiler import ProfilerActivity, profile

    from specrl.engine import LLM, SamplingParams, SpecConfig
    from specrl.tasks import default_policy_path
    if args.threads:
        torch.set_num_threads(args.threads)
    spec = SpecConfig(method=args.method) if args.method else None
    model = str(args.model or default_policy_path())
    llm = LLM(model, dtype=args.dtype, max_num_seqs=args.batch, spec=spec)
    work = encoded_task_prompts(model, args.batch) if args.task else short_prompts(args.batch)
    llm.generate(work, SamplingParams(max_tokens=8, seed=1))  # warm-up
    params = [SamplingParams(temperature=1.0, max_tokens=args.max_tokens, seed=1000 + i, ignore_eos=not args.task)
              for i in range(args.batch)]
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        t0 = time.perf_counter()
        outs = llm.generate(work, params)
        wall = time.perf_counter() - t0
    tokens = sum(len(c.token_ids) for r in outs for c in r.outputs)
    seconds, top = grouped(prof.key_averages())
    total = sum(seconds.values()) or 1.0
    print(json.dumps({"model": args.model or "embedded policy", "dtype": str(llm.precision.dtype).split(".")[-1],
                      "method": args.method, "batch": args.batch, "max_tokens": args.max_tokens, "task": args.task,
                      "tokens": tokens,
                      "threads": torch.get_num_threads(), "torch": torch.__version__, "wall_s": round(wall, 4),
                      "tokens_per_s": round(tokens / wall, 1),
                      "profiled_s": round(total, 3), "seconds": {g: round(s, 4) for g, s in seconds.items()},
                      "shares": {g: round(s / total, 4) for g, s in seconds.items()}, "top_ops": top}), flush=True)


if __name__ == "__main__":
    main()
