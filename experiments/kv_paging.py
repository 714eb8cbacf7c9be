"""KV memory on the RL rollout: the engine's lazily resident cache against paged KV blocks, measured on one run.

The engine's CPU cache is a position-indexed [slots, heads, positions, dim] tensor in an anonymous mapping
(`specrl/engine/memory.py`): a 4 KiB page becomes resident when a position in it is first written, so what
a rollout costs is the pages its sequences reached, per slot (a slot reused by a later sequence keeps its
high-water mark until generate() ends). Paged blocks (vLLM, nano-vllm) hand out fixed blocks of positions
on demand and take a finished sequence's blocks back at once. This script runs one rollout and reports:

  - dense_zeroed_mib: slots x (max_model_len + spare) allocated up front (what a GPU commits, and what the
    CPU engine held before the lazy mapping);
  - dense_request_mib: slots x (longest prompt + max_tokens + spare), a dense cache sized to the request;
  - lazy_resident_mib: the pages actually resident when the rollout ends (mincore over every layer's K/V),
    the largest the lazy cache gets (pages are only released after generate());
  - paged_peak_mib: the peak over engine steps of sum over running sequences of ceil(tokens / block) blocks,
    a replay of a block allocator with the same block size on the same schedule (blocks freed when a
    sequence finishes), read before each step (so at most one block a sequence low, at the last step).

    python experiments/kv_paging.py                       # the default embedded task's rollout
    python experiments/kv_paging.py --model DIR --prompts FILE --n 8 --num-prompts 8 --max-tokens 128
"""
from __future__ import annotations

import argparse
import ctypes
import json
import math
import mmap
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without install

import torch  # noqa: E402

PAGE = mmap.PAGESIZE
_libc = ctypes.CDLL(None, use_errno=True)


def resident_bytes(tensor: torch.Tensor) -> int:
    """Bytes of a `kv_zeros` tensor's mapping resident in memory now (mincore)."""
    region = tensor._kv_region
    n_pages = (len(region) + PAGE - 1) // PAGE
    vec = (ctypes.c_ubyte * n_pages)()
    addr = ctypes.addressof(ctypes.c_char.from_buffer(region))
    if _libc.mincore(ctypes.c_void_p(addr), ctypes.c_size_t(len(region)), vec) != 0:
        raise OSError(ctypes.get_errno(), "mincore failed")
    return sum(v & 1 for v in vec) * PAGE


def prompts_for(args, llm) -> list[list[int]]:
    if args.model is None:
        from specrl.tasks import make_problems
        return [llm.tokenizer.encode(p.prompt).ids for p in make_problems(args.num_prompts, seed=7, split="test")]
    from specrl.drafters.training.data import load_prompts
    return load_prompts(args.prompts, args.model, args.num_prompts)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=None, help="HF checkpoint dir (default: the embedded policy)")
    ap.add_argument("--prompts", default=None, help="with --model: a `prompt`/`messages` JSONL file")
    ap.add_argument("--num-prompts", type=int, default=16)
    ap.add_argument("--n", type=int, default=8, help="samples per prompt")
    ap.add_argument("--max-tokens", type=int, default=200)
    ap.add_argument("--max-num-seqs", type=int, default=64)
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--block", type=int, default=16, help="paged: positions per block (vLLM's default is 16)")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    from specrl import LLM, SamplingParams
    from specrl.engine.memory import kv_bytes_per_token
    from specrl.engine.methods import MAX_SPEC_TOKENS
    from specrl.tasks import default_policy_path

    llm = LLM(args.model or default_policy_path(), dtype=args.dtype, max_num_seqs=args.max_num_seqs)
    per_token = kv_bytes_per_token(llm.model.config, next(llm.model.parameters()).dtype)
    prompts = prompts_for(args, llm)
    spare = MAX_SPEC_TOKENS + 1
    paged = {"peak_blocks": 0, "steps": 0}

    def between_steps(_unfinished: int) -> None:
        running = llm._scheduler.running
        paged["peak_blocks"] = max(paged["peak_blocks"], sum(math.ceil(s.num_tokens / args.block) for s in running))
        paged["steps"] += 1

    resident = {}
    release = llm.free_kv_pages

    def measure_then_release() -> None:  # generate() ends: read residency before the pages go back
        resident["bytes"] = sum(resident_bytes(k) + resident_bytes(v) for k, v in llm.engine.runner.cache)
        release()

    llm.between_steps, llm.free_kv_pages = between_steps, measure_then_release
    params = SamplingParams(n=args.n, temperature=1.0, max_tokens=args.max_tokens, seed=0)
    outs = llm.generate(prompts, params)
    lengths = [len(o.token_ids) for r in outs for o in r.outputs]
    longest_prompt = max(len(p) for p in prompts)
    mib = 2 ** 20
    row = {
        "model": args.model or "embedded", "dtype": args.dtype, "sequences": len(lengths), "slots": llm.max_num_seqs,
        "max_model_len": llm.max_model_len, "max_tokens": args.max_tokens, "engine_steps": paged["steps"],
        "response_tokens_p50": sorted(lengths)[len(lengths) // 2], "response_tokens_max": max(lengths),
        "kv_bytes_per_position": per_token,
        "dense_zeroed_mib": round(llm.kv_plan.bytes / mib, 1),
        "dense_request_mib": round(llm.max_num_seqs * (longest_prompt + args.max_tokens + spare) * per_token / mib, 1),
        "lazy_resident_mib": round(resident["bytes"] / mib, 1),
        "paged_peak_mib": round(paged["peak_blocks"] * args.block * per_token / mib, 1), "block": args.block,
    }
    row["lazy_over_paged"] = round(row["lazy_resident_mib"] / row["paged_peak_mib"], 2)
    print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
