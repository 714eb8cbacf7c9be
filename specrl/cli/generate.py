"""`specrl generate`: sample completions with the rollout engine and write them as JSONL (one row per
completion: text, token ids, the policy's logprobs, finish reason, and the prompt_ids / completion_ids that
`specrl audit --rollouts` checks). `--seed S` gives each prompt its own stream, derived from S
(`per_prompt`): equal prompts get independent samples, and the rows are the independent draws the audit
assumes."""
from __future__ import annotations

import argparse
import contextlib
import json
import sys
from pathlib import Path

from ..errors import MissingFileError
from ..engine.methods import METHODS
from ..config.renamed import rename

RENAMED = {"--spec": "--method"}


def read_prompts(args) -> list[str | list[dict]]:
    if args.prompt:
        return list(args.prompt)
    if args.prompts:
        path = Path(args.prompts)
        if path.suffix in (".jsonl", ".json", ".parquet"):
            from ..trainer.data import read_prompts as read_prompt_file
            return read_prompt_file(path, flag="--prompts file")
        if not path.is_file():
            raise MissingFileError(f"--prompts file {str(path)!r} does not exist; pass a .jsonl or text file")
        return [line for line in path.read_text().splitlines() if line.strip()]
    from ..tasks import make_problems
    return [p.prompt for p in make_problems(args.task_prompts, seed=args.seed, split="test")]


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="specrl generate", description=__doc__)
    ap.add_argument("--prompt", action="append", help="a prompt (repeatable)")
    ap.add_argument("--prompts", help="a .jsonl/.parquet file of 'prompt' (or chat 'messages') rows, or a text file "
                    "(one per line)")
    ap.add_argument("--task-prompts", type=int, default=8, help="held-out embedded-task prompts if none given")
    ap.add_argument("--out", default="-", help="output JSONL path ('-' for stdout)")
    ap.add_argument("--n", type=int, default=1, help="completions per prompt")
    ap.add_argument("--temperature", type=float, default=1.0, help="sampling temperature (0: greedy)")
    ap.add_argument("--top-p", type=float, default=1.0, help="nucleus sampling mass (1: off)")
    ap.add_argument("--top-k", type=int, default=-1, help="sample among the k likeliest tokens (-1: off)")
    ap.add_argument("--max-tokens", type=int, default=256, help="new tokens per completion at most")
    ap.add_argument("--method", default=None, help=f"speculative decoding method: {', '.join(METHODS)} "
                    "(default: none, plain decoding)")
    ap.add_argument("--k", type=int, default=4, help="draft tokens per step")
    ap.add_argument("--draft-model", default=None, help="drafter dir for eagle3 / draft_model / mtp (default: the "
                    "shipped drafter of the embedded policy)")
    ap.add_argument("--max-num-seqs", type=int, default=64, help="sequences decoded at once")
    ap.add_argument("--chat", action="store_true", help="wrap each prompt as a user message in the chat template")
    from ..runtime import add_runtime_args, engine, parse_args, policy_path
    add_runtime_args(ap)
    args = parse_args(ap, rename(argv, RENAMED, "specrl generate"))  # and torch's threads from --threads
    from .. import SamplingParams, SpecConfig
    from ..engine.sampler import per_prompt
    # bad values and files fail here, before the model loads
    spec = SpecConfig(method=args.method, num_speculative_tokens=args.k, draft_model=args.draft_model)
    prompts = read_prompts(args)
    params = per_prompt(SamplingParams(n=args.n, temperature=args.temperature, top_p=args.top_p, top_k=args.top_k,
                                       max_tokens=args.max_tokens, seed=args.seed), len(prompts))
    if args.out != "-" and not Path(args.out).parent.is_dir():
        raise MissingFileError(f"--out {args.out!r}: the directory {str(Path(args.out).parent)!r} does not "
                               "exist; create it or write elsewhere")
    llm = engine(args, policy_path(args.model), args.max_num_seqs, spec)
    if args.chat or any(isinstance(p, list) for p in prompts):  # `messages` rows are chats
        outs = llm.chat([p if isinstance(p, list) else [{"role": "user", "content": p}] for p in prompts], params,
                        progress=sys.stderr.isatty())
    else:
        outs = llm.generate(prompts, params, progress=sys.stderr.isatty())
    with open(args.out, "w") if args.out != "-" else contextlib.nullcontext(sys.stdout) as sink:
        for r in outs:
            for o in r.outputs:
                # prompt_ids and completion_ids: the rows `specrl audit --rollouts` reads
                sink.write(json.dumps({"prompt": r.prompt, "index": o.index, "text": o.text, "token_ids": o.token_ids,
                                       "logprobs": o.logprobs, "finish_reason": o.finish_reason,
                                       "prompt_ids": r.prompt_token_ids, "completion_ids": o.token_ids}) + "\n")
    stats = llm.stats
    print(json.dumps({k: stats[k] for k in ("generated_tokens", "acceptance_length", "total_s")}), file=sys.stderr)
    return 0
