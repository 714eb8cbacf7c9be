"""Where specrl's engine spends `specrl bench peer`'s b64 workload (64 chain prompts x 1 sample): prefill
against decode from the engine's own counters, the right-padding of the batched prefill, and a torch profile
of one prefill of the whole batch.

    OMP_NUM_THREADS=1 PYTHONPATH=. python experiments/vllm_peer_profile.py --model /work/models-vllm/smollm2 --max-tokens 32
"""
import argparse
import json
import time


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--max-tokens", type=int, default=32)
    args = ap.parse_args()
    from types import SimpleNamespace
    from specrl import LLM
    from benchmarks.peer import workload
    from specrl.engine import SamplingParams
    from specrl.threads import set_threads
    set_threads(1)
    prompts, n, max_tokens = workload("b64", args.model, SimpleNamespace(max_tokens=args.max_tokens, rl_max_tokens=None))
    lengths = [len(p) for p in prompts]
    llm = LLM(args.model, dtype="float32", max_num_seqs=64)
    llm.generate(prompts[:1], SamplingParams(max_tokens=8))  # warm-up, as the bench does
    llm.reset_stats()
    params = [SamplingParams(temperature=1.0, max_tokens=max_tokens, seed=1000 + i) for i in range(len(prompts))]
    t0 = time.perf_counter()
    outs = llm.generate(prompts, params)
    wall = time.perf_counter() - t0
    s = llm.stats
    print(json.dumps({"wall_s": wall, "tokens": sum(len(r.outputs[0].token_ids) for r in outs),
                      "prompt_len_mean": sum(lengths) / len(lengths), "prompt_len_max": max(lengths),
                      "padding_share": 1 - sum(lengths) / (len(lengths) * max(lengths)),
                      **{k: s[k] for k in ("prefill_tokens", "prefill_s", "verify_s", "other_s", "target_forwards")}}))
    llm.reset_stats()
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        llm.generate(prompts, [SamplingParams(temperature=1.0, max_tokens=1, seed=i) for i in range(len(prompts))])
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=12))


if __name__ == "__main__":
    main()
