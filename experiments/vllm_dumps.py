"""Samples from vLLM (through `pipeline.backend=vllm`'s backend) for the sampler audit: one engine per process.

    python experiments/vllm_dumps.py --model policy --method off --out DIR       # 8 chain prompts x 8, 1100
    python experiments/vllm_dumps.py --model /path/smollm2 --method ngram --out DIR   # 8 chat prompts x 8, 128
    python experiments/vllm_dumps.py --model policy --method eagle3 --temperatures 0,1 --audit --out DIR

Per temperature T writes DIR/<name>_<method>_T<T>.jsonl, one row per sample: {prompt_ids, completion_ids,
logprobs} (T=0: one greedy sample per prompt; T=1: 8), and prints one JSON line (tokens, seconds, vLLM's
acceptance counters; with --audit also `specrl audit`'s verdict on the file: greedy identity at T=0, the
weighted randomized PIT at T=1). A method this vLLM cannot run prints one line with its error.
eagle3 serves the shipped head as `specrl export-drafter` writes it (exported by the CLI first).
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import tempfile
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


def exported_head(policy: Path, out: Path) -> Path:
    """The shipped EAGLE-3 head as `specrl export-drafter` writes it."""
    from specrl.cli.main import main as cli_main
    from specrl.engine.methods import get_method
    assert cli_main(["export-drafter", str(get_method("eagle3").shipped_dir), "--policy", str(policy),
                     "--out", str(out)]) == 0
    return out


def audited(model_dir: Path, path: Path, temperature: float) -> dict:
    """`specrl audit --model DIR --rollouts FILE --temperature T`'s JSON line."""
    from specrl.cli.audit import main as audit_main
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        audit_main(["--model", str(model_dir), "--rollouts", str(path), "--temperature", str(temperature)])
    row = json.loads(buf.getvalue().strip().splitlines()[-1])
    return {f"audit_{k}": row[k] for k in ("test", "tokens", "p_value", "z", "mismatches") if k in row}


def dump(outs, path: Path) -> int:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as f:
        for r in outs:
            for c in r.outputs:
                f.write(json.dumps({"prompt_ids": r.prompt_token_ids, "completion_ids": c.token_ids,
                                    "logprobs": c.logprobs}) + "\n")
    return sum(len(c.token_ids) for r in outs for c in r.outputs)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="policy", help="'policy' (the shipped one) or a checkpoint dir")
    ap.add_argument("--method", default="off", help="off | ngram | draft_model | eagle3 | suffix | mtp")
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--temperatures", default="1", help="comma-separated, e.g. 0,1")
    ap.add_argument("--audit", action="store_true", help="run specrl audit on each dump")
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    from specrl.config import ConfigError, load_config
    from specrl.engine import SamplingParams
    from specrl.pipeline.vllm.build import vllm_backend
    from specrl.tasks import default_policy_path
    from specrl.train.config import TrainConfig
    shipped = args.model == "policy"
    model_dir = default_policy_path() if shipped else Path(args.model)
    name = "policy" if shipped else model_dir.name
    work = tempfile.TemporaryDirectory(prefix="vllm-dumps-")
    method = "null" if args.method == "off" else args.method
    extra = [f"rollout.spec.draft_model={exported_head(model_dir, Path(work.name) / 'eagle3')}"] \
        if args.method == "eagle3" else []
    cfg = load_config(TrainConfig, None, [f"rollout.spec.method={method}", f"rollout.spec.num_speculative_tokens="
                                          f"{args.k}", "rollout.max_num_seqs=64", f"seed={args.seed}", *extra])
    head = {"model": name, "method": args.method, "k": args.k}
    t0 = time.perf_counter()
    try:
        backend = vllm_backend(model_dir, cfg)
    except ConfigError as e:
        print(json.dumps({**head, "error": str(e)}))
        return
    build_s = time.perf_counter() - t0
    prompts = prompts_for(model_dir, shipped)
    files = []
    for temperature in (float(t) for t in args.temperatures.split(",")):
        n = 8 if temperature > 0 else 1
        params = [SamplingParams(n=n, temperature=temperature, max_tokens=1100 if shipped else 128,
                                 seed=args.seed * 1000 + i) for i in range(len(prompts))]
        backend.reset_stats()
        t0 = time.perf_counter()
        outs = backend.generate(prompts, params)
        seconds = time.perf_counter() - t0
        stats = backend.stats()
        out = Path(args.out) / f"{name}_{args.method}_T{temperature:g}.jsonl"
        tokens = dump(outs, out)
        files.append((out, temperature, {
            **head, "temperature": temperature, "samples": n * len(prompts), "tokens": tokens, "seconds": seconds,
            "tokens_per_s": tokens / seconds, "build_s": build_s, "mean_len": tokens / (n * len(prompts)),
            **{k: stats[k] for k in ("drafts", "draft_tokens", "accepted_tokens", "acceptance_length")},
            "acceptance_rate_per_pos": [round(a, 3) for a in stats["acceptance_rate_per_pos"]], "out": str(out)}))
    backend.close()
    for out, temperature, row in files:
        print(json.dumps({**row, **(audited(model_dir, out, temperature) if args.audit else {})}), flush=True)


if __name__ == "__main__":
    main()
