"""`specrl bench spec`: speculative decoding against SD off on the same policy, in one process.

For each batch size (1, 4, 16, 64 concurrent sequences, and "rl": one `specrl train` rollout of the default
config, rollout.prompts_per_step training prompts x rollout.n samples through rollout.max_num_seqs slots, up to
rollout.max_tokens) the baseline runs first, then every method, all at temperature 1 on task prompts, stopping
at EOS. Every prompt has its own seed, the same for SD off and on.
`--quick`: batch sizes 1 and 4, 64 new tokens, one batch each (a smoke test, e.g. on a real checkpoint).
"""
from __future__ import annotations

from ..engine.methods import METHODS
from ..errors import UserError
from .bench_common import base_parser, emit, memory_kwargs, parse_args, policy_path, task_prompts, timed


def run(llm_factory, prompts, n, batch, max_tokens, seed, repeats):
    from .. import SamplingParams
    llm = llm_factory()
    llm.generate(prompts[:1], SamplingParams(max_tokens=4))  # warm-up
    llm.reset_stats()
    tokens, seconds = 0, 0.0
    for r in range(repeats):
        chunk = prompts[r * batch:(r + 1) * batch] if n == 1 else prompts
        # a seed per prompt: prompts that shared one would share their random draws
        params = [SamplingParams(n=n, temperature=1.0, max_tokens=max_tokens, seed=seed * 1_000_003 + r * batch + i)
                  for i in range(len(chunk))]
        outs, dt = timed(lambda: llm.generate(chunk, params))
        tokens += sum(len(o.token_ids) for q in outs for o in q.outputs)
        seconds += dt
    return tokens / seconds, llm.stats


def parse_batch_sizes(text: str) -> list[str]:
    sizes = [s for s in text.split(",") if s]
    if not sizes or any(s != "rl" and not (s.isdigit() and int(s) >= 1) for s in sizes):
        raise UserError(f"--batch-sizes {text!r} is invalid: expected positive integers or 'rl', comma-separated, "
                        "e.g. --batch-sizes 1,4,16,rl")
    return sizes


def main(argv: list[str]) -> int:
    ap = base_parser("specrl bench spec", __doc__)
    ap.add_argument("--methods", default=",".join(METHODS))
    ap.add_argument("--batch-sizes", default=None, help="default 1,4,16,64,rl (--quick: 1,4)")
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=None, help="default 512 (--quick: 64); the rl workload "
                    "takes rollout.max_tokens")
    ap.add_argument("--repeats", type=int, default=None,
                    help="batches per measurement (n=1 workloads); default 3 (--quick: 1)")
    args = parse_args(ap, argv)
    for key, full, quick in (("batch_sizes", "1,4,16,64,rl", "1,4"), ("max_tokens", 512, 64), ("repeats", 3, 1)):
        if getattr(args, key) is None:
            setattr(args, key, quick if args.quick else full)
    from .. import LLM, SpecConfig
    from ..train.config import TrainConfig
    methods = [m for m in args.methods.split(",") if m]
    for method in methods:  # an unknown method or k fails here, before any measurement
        SpecConfig(method=method, num_speculative_tokens=args.k)
    batch_sizes = parse_batch_sizes(args.batch_sizes)
    path = policy_path(args.model)
    probe = LLM(path, device=args.device, dtype=args.dtype, max_num_seqs=1, **memory_kwargs(args))
    rollout = TrainConfig().rollout  # the RL workload is the default run's rollout
    for bs in batch_sizes:
        rl = bs == "rl"
        batch, n = (rollout.max_num_seqs, rollout.n) if rl else (int(bs), 1)
        if rl:
            prompts = task_prompts(probe, rollout.prompts_per_step, seed=args.seed + 7, split="train")
        else:
            prompts = task_prompts(probe, batch * args.repeats, seed=args.seed + 7)
        repeats = 1 if rl else args.repeats
        max_tokens = rollout.max_tokens if rl and not args.quick else args.max_tokens

        def factory(spec=None):
            return lambda: LLM(path, device=args.device, dtype=args.dtype, max_num_seqs=batch, spec=spec,
                                **memory_kwargs(args))
        base_tps, _ = run(factory(), prompts, n, batch, max_tokens, args.seed, repeats)
        for method in methods:
            spec = SpecConfig(method=method, num_speculative_tokens=args.k)
            try:
                tps, stats = run(factory(spec), prompts, n, batch, max_tokens, args.seed, repeats)
            except (FileNotFoundError, ValueError) as e:  # a drafter that is not built here
                emit({"method": method, "batch_size": bs, "k": args.k, "error": str(e)[:200]})
                continue
            emit({"method": method, "batch_size": bs if rl else batch, "k": args.k, "tokens_per_s": tps,
                  "baseline_tokens_per_s": base_tps, "speedup": tps / base_tps,
                  "acceptance_length": stats["acceptance_length"],
                  "acceptance_rate_per_pos": [round(x, 3) for x in stats["acceptance_rate_per_pos"]],
                  "draft_s": stats["draft_s"], "verify_s": stats["verify_s"], "other_s": stats["other_s"]})
    return 0
