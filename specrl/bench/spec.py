"""`specrl bench spec`: speculative decoding against SD off on the same policy, in one process.

For each batch size (1, 4, 16, 64 concurrent sequences, and "rl": one rollout of `specrl train`'s default
config) SD off runs first, then every method, all at temperature 1 on task prompts, stopping at EOS, each
prompt with its own seed, the same for SD off and on. Every engine first warms up on other prompts
(--warmup-tokens), as the main job's engine has after its first step; left out, the threads, k and the RL
workload's budget are `specrl train`'s, so the RL row measures what the main job runs. A real checkpoint:
`--model DIR --prompts FILE` (a `specrl make-data` file) and `--draft-model DIR` for a model-based drafter.
`--config FILE [key=value ...]`: the rl workload is that `specrl train` config's rollout instead (its model,
data file, prompts x samples, temperature, response budget, k and drafter), --repeats rollouts of other prompts
each, warmed up on the rollout after them, so a real model's RL row measures the run it stands for:

    specrl bench spec --config configs/smollm2_steps.yaml --batch-sizes rl --methods eagle3,auto \
      model=models/smollm2 rollout.spec.draft_model=runs/rl/drafter

`--check-identity`: greedy decoding, and whether each method gives SD off's tokens (in fp32 it must;
`--dtype bfloat16` counts the sequences that rounding makes part).
"""
from __future__ import annotations

import argparse
import resource
from pathlib import Path

from specrl.engine import METHODS, get_method
from specrl.errors import UserError
from .common import (at_least_one, base_parser, emit, engine, file_prompts, measure, parse_args, policy_path,
                           prompt_sets)
from .real_rl import load_config


def identity(base: list[list[int]], other: list[list[int]]) -> dict:
    """Greedy SD against SD off: sequences whose tokens differ, and the share of tokens before each first
    difference (bf16 rounding can flip an argmax whose top two logits nearly tie)."""
    differ = sum(a != b for a, b in zip(base, other))
    same = sum(next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
               for a, b in zip(base, other))
    return {"same_tokens": differ == 0, "sequences_differ": differ,
            "tokens_before_first_difference_share": same / max(sum(map(len, base)), 1)}


def parse_batch_sizes(text: str) -> list[str]:
    sizes = [s for s in text.split(",") if s]
    if not sizes or any(s != "rl" and not (s.isdigit() and int(s) >= 1) for s in sizes):
        raise UserError(f"--batch-sizes {text!r} is invalid: expected positive integers or 'rl', comma-separated, "
                        "e.g. --batch-sizes 1,4,16,rl")
    return sizes


def main(argv: list[str]) -> int:
    ap = base_parser("specrl bench spec", __doc__, warmup=True)
    ap.add_argument("--methods", default=",".join(METHODS), help="the SD methods, comma-separated (default: all)")
    ap.add_argument("--batch-sizes", default=None, help="default 1,4,16,64,rl (--quick: 1,4)")
    ap.add_argument("--k", type=int, default=None, help="draft length (default: `specrl train`'s, "
                    "rollout.spec.num_speculative_tokens)")
    ap.add_argument("--max-tokens", type=int, default=None, help="default 512 (--quick: 64); the rl workload "
                    "takes rollout.max_tokens")
    ap.add_argument("--repeats", type=at_least_one, default=None,
                    help="batches per measurement (n=1 workloads); default 3 (--quick: 1)")
    ap.add_argument("--prompts", default=None, help="a JSONL of prompt or messages rows (`specrl make-data`), "
                    "encoded as `specrl train` does (chat template); default: the embedded task's")
    ap.add_argument("--temperature", type=float, default=None, help="sampling temperature (0: greedy; default 1, "
                    "or with --config its rollout's)")
    ap.add_argument("--config", default=None, help="a `specrl train` YAML, key=value overrides after it: the rl "
                    "workload is its rollout (model, data, prompts x n, temperature, budget, k, draft_model)")
    ap.add_argument("--check-identity", action="store_true",
                    help="greedy (temperature 0): does each method give SD off's tokens? (columns same_tokens, ...)")
    ap.add_argument("--draft-model", default=None, help="drafter dir for eagle3 / draft_model / mtp")
    argv = list(argv or [])
    overrides = [w for w in argv if "=" in w and not w.startswith("-")]
    args = parse_args(ap, [w for w in argv if w not in overrides])
    if overrides and not args.config:
        raise UserError(f"{overrides[0]!r}: key=value overrides set a --config's keys; pass --config FILE before them")
    if args.check_identity:
        args.temperature = 0.0
    for key, full, quick in (("batch_sizes", "1,4,16,64,rl", "1,4"), ("max_tokens", 512, 64), ("repeats", 3, 1)):
        if getattr(args, key) is None:
            setattr(args, key, quick if args.quick else full)
    from specrl import SpecConfig
    from specrl.config.run import TrainConfig
    default = TrainConfig() if args.config is None else load_config(Path(args.config), overrides)
    rollout = default.rollout  # the RL workload is the default run's rollout (or --config's)
    if args.config is not None:
        args.model = args.model or (str(default.model) if default.model else None)
        args.draft_model = args.draft_model or rollout.spec.draft_model
    if args.temperature is None:
        args.temperature = rollout.temperature if args.config is not None else 1.0
    args.k = args.k or rollout.spec.num_speculative_tokens
    methods = [m for m in args.methods.split(",") if m]
    def spec_for(method):
        draft_model = args.draft_model if get_method(method).trainable else None
        return SpecConfig(method=method, num_speculative_tokens=args.k, draft_model=draft_model)
    for method in methods:  # an unknown method or k fails here, before any measurement
        spec_for(method)
    batch_sizes = parse_batch_sizes(args.batch_sizes)
    path = policy_path(args.model)
    probe = engine(args, path, 1)
    for bs in batch_sizes:
        rl = bs == "rl"
        batch, n = (rollout.max_num_seqs, rollout.n) if rl else (int(bs), 1)
        repeats = 1 if rl and not args.config else args.repeats
        if rl and args.config and not default.data.is_task:
            prompts, warmup = config_prompts(default, path, repeats)
        else:
            # the warm-up runs on the embedded task's other prompts (a --prompts file may hold no spare rows)
            prompts, warmup = prompt_sets(probe, rl, batch, repeats, rollout, args.seed)
            if args.prompts:
                prompts = file_prompts(args.prompts, path, len(prompts))
        max_tokens = default.budget.max_tokens if rl and not args.quick else args.max_tokens
        # one dtype for SD off and on (auto: chosen once for this batch's decode and verify shapes)
        fixed = argparse.Namespace(**{**vars(args), "dtype": batch_dtype(args, probe, batch)})

        def run(spec=None):
            return measure(engine(fixed, path, batch, spec), prompts, n, batch, max_tokens, args.seed, repeats, warmup,
                           args.warmup_tokens, args.temperature)
        base, _ = run()
        for method in methods:
            try:
                got, stats = run(spec_for(method))
            except (FileNotFoundError, ValueError) as e:  # a drafter that is not built here
                emit({"method": method, "batch_size": bs, "k": args.k, "error": str(e)[:200]})
                continue
            tps, base_tps = got["tokens_per_s"], base["tokens_per_s"]
            emit({"method": method, "batch_size": bs if rl else batch, "k": args.k, "dtype": fixed.dtype,
                  "sequences": len(got["ids"]), "tokens": got["tokens"], "tokens_per_s": tps,
                  "baseline_tokens_per_s": base_tps, "speedup": tps / base_tps,
                  "cpu_tokens_per_s": got["tokens"] / max(got["cpu_s"], 1e-9),
                  "acceptance_length": stats["acceptance_length"],
                  "acceptance_rate_per_pos": [round(x, 3) for x in stats["acceptance_rate_per_pos"]],
                  "draft_s": stats["draft_s"], "verify_s": stats["verify_s"], "other_s": stats["other_s"],
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,  # KiB on Linux
                  **(identity(base["ids"], got["ids"]) if args.check_identity else {})})
    return 0


def config_prompts(cfg, model_dir: str, repeats: int) -> tuple[list, list]:
    """`repeats` rollouts' prompts from the config's data file (its first rows), and one more rollout's, after
    them, to warm up on."""
    per = cfg.rollout.prompts_per_step
    rows = file_prompts(str(cfg.data.source), model_dir, per * (repeats + 1))
    return rows[:per * repeats], rows[per * repeats:]


def batch_dtype(args, probe, batch: int) -> str:
    """`args.dtype`, or for auto the probe's choice at this batch's decode and verify shapes."""
    from specrl.model.precision import choose_dtype, engine_rows
    choice = choose_dtype(args.dtype, args.device, probe.model.config, engine_rows(batch, args.k))
    return choice.name
