"""specrl's engine against `transformers.generate` on a real checkpoint: speed and peak memory.

Three workloads, each run by both in the same dtype, each arm in a fresh child process so that its peak
resident memory (ru_maxrss) is its own:

    b1  one chat prompt at a time, greedy
    b8  8 chat prompts in one batch, greedy
    rl  the RL rollout: P prompts x n=8 samples at temperature 1, stop at EOS

specrl runs with its default memory settings (`LLM(dir)`: KV budget from the free memory); transformers
with its default dynamic cache, left padding for batches. Greedy tokens are compared (b1, b8): they must
be equal. Prints one JSON line per arm and a summary of ratios.

    python -m specrl fetch-model smollm2 --out /tmp/smollm2
    python -m specrl make-data math --n 64 --chat --out /tmp/math.jsonl
    python benchmarks/real_vs_hf.py --model /tmp/smollm2 --prompts /tmp/math.jsonl
"""
from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout without install


def rss_mb() -> float:
    return int(open("/proc/self/statm").read().split()[1]) * 4096 / 2 ** 20


def chats(path: str, n: int) -> list[list[dict]]:
    from specrl.drafters.training.prompts import read_prompt_rows
    rows = read_prompt_rows(path)[:n]
    return [r if isinstance(r, list) else [{"role": "user", "content": r}] for r in rows]


def workload(name: str, args) -> tuple[list[list[dict]], int, float, int]:
    """(conversations, batch size, temperature, samples per prompt)"""
    if name == "b1":
        return chats(args.prompts, args.b1_prompts), 1, 0.0, 1
    if name == "b8":
        return chats(args.prompts, 8), 8, 0.0, 1
    return chats(args.prompts, args.rl_prompts), args.rl_prompts, 1.0, 8


def run_specrl(args, convs, batch, temp, n) -> dict:
    from specrl import LLM, SamplingParams
    t0 = time.perf_counter()
    llm = LLM(args.model, dtype=args.dtype, device=args.device)
    load_s, after_load = time.perf_counter() - t0, rss_mb()
    tok = llm.get_tokenizer()
    ids = [tok.apply_chat_template(c, add_generation_prompt=True) for c in convs]
    params = SamplingParams(n=n, temperature=temp, max_tokens=args.max_tokens, seed=0)
    llm.generate([ids[0][:8]], SamplingParams(temperature=0.0, max_tokens=2))  # warm-up
    out_tokens, w, c = [], 0.0, 0.0
    for i in range(0, len(ids), batch):
        w0, c0 = time.perf_counter(), time.process_time()
        outs = llm.generate(ids[i:i + batch], params)
        w, c = w + time.perf_counter() - w0, c + time.process_time() - c0
        out_tokens += [list(s.token_ids) for o in outs for s in o.outputs]
    return {"load_s": load_s, "rss_after_load_mb": after_load, "wall_s": w, "cpu_s": c, "tokens": out_tokens}


def run_hf(args, convs, batch, temp, n) -> dict:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}[args.dtype]
    t0 = time.perf_counter()
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=dtype).to(args.device).eval()
    tok = AutoTokenizer.from_pretrained(args.model, padding_side="left")
    load_s, after_load = time.perf_counter() - t0, rss_mb()
    eos = model.generation_config.eos_token_id
    stops = {eos} if isinstance(eos, int) else set(eos)
    pad = tok.pad_token_id if tok.pad_token_id is not None else (eos if isinstance(eos, int) else eos[0])
    texts = [tok.apply_chat_template(c, add_generation_prompt=True, tokenize=False) for c in convs]
    gen = dict(max_new_tokens=args.max_tokens, pad_token_id=pad, num_return_sequences=n)
    gen.update(do_sample=True, temperature=temp, top_k=0, top_p=1.0) if temp > 0 else gen.update(do_sample=False)
    out_tokens, w, c = [], 0.0, 0.0
    torch.manual_seed(0)
    with torch.inference_mode():
        warm = tok(texts[:1], return_tensors="pt").to(args.device)
        model.generate(**warm, max_new_tokens=2, do_sample=False, pad_token_id=pad)
        for i in range(0, len(texts), batch):
            enc = tok(texts[i:i + batch], return_tensors="pt", padding=True, add_special_tokens=False).to(args.device)
            w0, c0 = time.perf_counter(), time.process_time()
            seqs = model.generate(**enc, **gen)
            w, c = w + time.perf_counter() - w0, c + time.process_time() - c0
            for row in seqs[:, enc["input_ids"].shape[1]:].tolist():
                stop = next((j + 1 for j, t in enumerate(row) if t == pad or t in stops), len(row))
                out_tokens.append(row[:stop])
    return {"load_s": load_s, "rss_after_load_mb": after_load, "wall_s": w, "cpu_s": c, "tokens": out_tokens}


def child(args) -> None:
    import torch
    torch.set_num_threads(args.threads)
    convs, batch, temp, n = workload(args.workload, args)
    res = (run_specrl if args.engine == "specrl" else run_hf)(args, convs, batch, temp, n)
    toks = res.pop("tokens")
    n_tok = sum(len(t) for t in toks)
    res.update(engine=args.engine, workload=args.workload, dtype=args.dtype, device=args.device, sequences=len(toks), tokens=n_tok,
               tok_per_s_wall=n_tok / res["wall_s"], tok_per_s_cpu=n_tok / res["cpu_s"],
               peak_rss_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
               peak_gpu_mb=torch.cuda.max_memory_allocated() / 2 ** 20 if args.device.startswith("cuda") else None,
               token_ids=toks if temp == 0 else None)
    print("RESULT " + json.dumps(res))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--prompts", required=True, help="JSONL of `prompt` or `messages` rows")
    ap.add_argument("--workloads", default="b1,b8,rl")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--b1-prompts", type=int, default=4)
    ap.add_argument("--rl-prompts", type=int, default=8)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--device", default="cpu", help="cpu or cuda (on a GPU, peak_gpu_mb is torch's allocator peak)")
    ap.add_argument("--out", default=None, help="append result rows to this JSONL")
    ap.add_argument("--engine", help=argparse.SUPPRESS)
    ap.add_argument("--workload", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.engine:
        return child(args)
    rows = {}
    for wl in args.workloads.split(","):
        for engine in ("transformers", "specrl"):
            cmd = [sys.executable, __file__, "--engine", engine, "--workload", wl] + sys.argv[1:]
            proc = subprocess.run(cmd, capture_output=True, text=True)
            line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
            if line is None:
                sys.exit(f"{engine} {wl} failed:\n{proc.stderr[-3000:]}")
            row = json.loads(line[len("RESULT "):])
            rows[engine, wl] = row
            shown = {k: (round(v, 2) if isinstance(v, float) else v) for k, v in row.items() if k != "token_ids"}
            print(json.dumps(shown), flush=True)
            if args.out:
                with open(args.out, "a") as f:
                    f.write(json.dumps(shown) + "\n")
        hf, sp = rows["transformers", wl], rows["specrl", wl]
        same = None if hf["token_ids"] is None else hf["token_ids"] == sp["token_ids"]
        summary = {"workload": wl, "dtype": args.dtype, "device": args.device,
                   "speed_wall_x": round(sp["tok_per_s_wall"] / hf["tok_per_s_wall"], 2),
                   "speed_cpu_x": round(sp["tok_per_s_cpu"] / hf["tok_per_s_cpu"], 2),
                   "peak_rss_ratio": round(sp["peak_rss_mb"] / hf["peak_rss_mb"], 2), "greedy_tokens_equal": same}
        if sp["peak_gpu_mb"]:
            summary["peak_gpu_ratio"] = round(sp["peak_gpu_mb"] / hf["peak_gpu_mb"], 2)
        print(json.dumps(summary), flush=True)
        if args.out:
            with open(args.out, "a") as f:
                f.write(json.dumps(summary) + "\n")


if __name__ == "__main__":
    main()
