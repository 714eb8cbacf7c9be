"""`specrl bench engine`: this engine against `transformers` generate on the same checkpoint, in one run.

(a) 16 prompts x 128 new tokens, EOS ignored; (b) the RL rollout workload: 64 prompts x n=8 (at most 512
new tokens) on the embedded task, stopping at EOS (`--quick`: a quarter of the prompts and tokens). Both
sides sample at temperature 1 and count only tokens up to EOS. `--model DIR --prompts FILE`: a real
checkpoint on a `specrl make-data` file.
"""
from __future__ import annotations

import torch

from .common import base_parser, emit, engine, file_prompts, parse_args, policy_path, task_prompts, timed


def hf_generate(hf, prompts: list[list[int]], n: int, max_new: int, ignore_eos: bool, pad_id: int, eos: list[int],
                device) -> int:
    """Left-padded batch generate; returns the number of tokens generated up to and including EOS."""
    T = max(map(len, prompts))
    ids = torch.full((len(prompts), T), pad_id, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for b, p in enumerate(prompts):
        ids[b, T - len(p):] = torch.tensor(p)
        mask[b, T - len(p):] = 1
    stop = dict(min_new_tokens=max_new, eos_token_id=None) if ignore_eos else dict(eos_token_id=eos)
    with torch.inference_mode():
        out = hf.generate(input_ids=ids.to(device), attention_mask=mask.to(device), do_sample=True, temperature=1.0,
                          top_k=0, top_p=1.0, max_new_tokens=max_new, num_return_sequences=n, pad_token_id=pad_id,
                          **stop)[:, T:]
    if ignore_eos:
        return out.numel()
    is_eos = torch.isin(out, torch.tensor(eos, device=out.device))
    has = is_eos.any(-1)
    first = torch.where(has, is_eos.float().argmax(-1) + 1, torch.full_like(has, out.shape[1], dtype=torch.long))
    return int(first.sum())


def run_workload(name, llm, hf, prompts, n, max_tokens, ignore_eos, device, max_num_seqs) -> dict:
    from specrl import SamplingParams
    from specrl.engine import per_prompt
    cfg = llm.model.config
    params = per_prompt(SamplingParams(n=n, temperature=1.0, max_tokens=max_tokens, ignore_eos=ignore_eos, seed=0),
                        len(prompts))
    llm.generate(prompts[:2], SamplingParams(n=1, max_tokens=8))  # warm-up
    outs, ours_s = timed(lambda: llm.generate(prompts, params))
    ours_tokens = sum(len(o.token_ids) for r in outs for o in r.outputs)
    pad = cfg.pad_token_id if cfg.pad_token_id is not None else 0
    hf_generate(hf, prompts[:2], 1, 8, True, pad, cfg.eos_token_id, device)  # warm-up
    hf_tokens, hf_s = timed(lambda: hf_generate(hf, prompts, n, max_tokens, ignore_eos, pad, cfg.eos_token_id, device))
    ours_tps, hf_tps = ours_tokens / ours_s, hf_tokens / hf_s
    return {"workload": name, "specrl_tokens_per_s": ours_tps, "hf_tokens_per_s": hf_tps, "ratio": ours_tps / hf_tps,
            "specrl_tokens": ours_tokens, "hf_tokens": hf_tokens, "specrl_s": ours_s, "hf_s": hf_s,
            "max_num_seqs": max_num_seqs, "dtype": llm.precision.name}


def main(argv: list[str]) -> int:
    ap = base_parser("specrl bench engine", __doc__)
    ap.add_argument("--max-num-seqs", type=int, default=128, help="this engine's batch slots")
    ap.add_argument("--workloads", default="a,b", help="a (fixed-length batch), b (the RL rollout), or both")
    ap.add_argument("--prompts", default=None, help="a JSONL of prompt or messages rows (`specrl make-data`), "
                    "encoded as `specrl train` does (chat template); default: the embedded task's")
    args = parse_args(ap, argv)
    import transformers

    torch.manual_seed(args.seed)
    path = policy_path(args.model)
    llm = engine(args, path, args.max_num_seqs)
    hf = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=llm.precision.dtype)  # specrl's dtype.to(args.device).eval()
    scale = 4 if args.quick else 1
    def prompts_for(count: int, seed: int = 1234) -> list[list[int]]:
        return file_prompts(args.prompts, path, count) if args.prompts else task_prompts(llm, count, seed=seed)
    if "a" in args.workloads:
        emit(run_workload("a_16x128_ignore_eos", llm, hf, prompts_for(16 // scale), 1, 128 // scale, True,
                          args.device, args.max_num_seqs))
    if "b" in args.workloads:
        emit(run_workload("b_rl_64x8_eos", llm, hf, prompts_for(64 // scale, seed=99), 8, 512 // scale, False,
                          args.device, args.max_num_seqs))
    return 0
