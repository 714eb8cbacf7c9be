"""`specrl train-drafter --policy PATH --method eagle3|draft_model|mtp --out DIR`: offline self-distillation.

step 1: sample the policy's own responses (SD off, `--temperature`, default 1) to embedded-task prompts, or with
        `--data FILE` to a JSONL file's `prompt` strings / chat `messages` (see drafters/training/prompts.py);
        with `--cache DIR` they are read from there when a run with this policy and these settings wrote them
        (drafters/training/cache.py), and the teacher outputs and the fit's state are kept there too;
step 2: hand them to the method's trainer, `train(policy_path, out_dir, data, args) -> dict` (`--resume`:
        continue the fit saved in the cache);
step 3: print the metrics as one JSON line (also written to DIR/train_metrics.json).
"""
from __future__ import annotations

import argparse
import importlib
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

from ..config import ConfigError
from ..drafters.training.cache import digest_files, load_or_collect
from ..drafters.training.data import DrafterTrainArgs, collect_sequences, default_prompts
from ..drafters.training.prompts import load_prompts
from ..engine.memory import DEFAULT_MEMORY_UTILIZATION
from ..engine.methods import TRAINABLE_METHODS, get_method
from ..errors import UserError


def trainer_module(method: str):
    """The method's train module (its recipe, drafters/scratch.py `recipe`)."""
    if method not in TRAINABLE_METHODS:
        raise ConfigError(f"unknown drafter method {method!r}; valid: {list(TRAINABLE_METHODS)} (the other "
                         f"speculative methods have no weights to train)")
    return importlib.import_module(get_method(method).trainer)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="specrl train-drafter", description=__doc__.splitlines()[0])
    ap.add_argument("--policy", default=None, help="policy checkpoint dir (default: the embedded policy)")
    ap.add_argument("--method", required=True, help=f"one of {list(TRAINABLE_METHODS)}")
    ap.add_argument("--out", default=None, help="output dir (default, only for the embedded policy and task: the "
                    "shipped drafter dir of the method)")
    ap.add_argument("--steps", type=int, default=DrafterTrainArgs.steps)
    ap.add_argument("--data", default=None, help="JSONL of `prompt` or `messages` rows (default: embedded task)")
    ap.add_argument("--prompts", type=int, default=None,
                    help="prompts to sample responses for (default: 512 embedded-task ones, or every --data row)")
    ap.add_argument("--samples", type=int, default=2, help="responses per prompt")
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--temperature", type=float, default=1.0,
                    help="sampling temperature of the training responses (0: greedy, for a drafter serving greedy "
                         "decoding); the teacher targets are the policy's distribution at temperature 1 either way")
    ap.add_argument("--max-model-len", type=int, default=None,
                    help="prompt + response cap and KV-cache length (default: the policy's; set it for long-context "
                         "models, e.g. 1024)")
    ap.add_argument("--max-num-seqs", type=int, default=64, help="sequences sampled at once")
    ap.add_argument("--teacher-topk", type=int, default=DrafterTrainArgs.teacher_topk,
                    help="eagle3: stored teacher tokens per position, tail mass kept (0: the whole vocabulary)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lr", type=float, default=DrafterTrainArgs().optim.lr,
                    help="peak learning rate (linear warmup, then cosine decay)")
    ap.add_argument("--batch-tokens", type=int, default=DrafterTrainArgs.batch_tokens)
    ap.add_argument("--eagle3-layers", default=None, help="eagle3: target layers to fuse, e.g. 1,3,5 "
                    "(default: 1, L/2-1, L-4 made increasing)")
    ap.add_argument("--eagle3-ttt-steps", type=int, default=7, help="eagle3: training-time-test unroll steps")
    ap.add_argument("--eagle3-intermediate", type=int, default=None, help="eagle3: head MLP width (default: policy's)")
    ap.add_argument("--draft-vocab-size", type=int, default=None,
                    help="eagle3: draft over the N tokens most frequent in the sampled responses, with the head's "
                         "own output layer and EAGLE-3's d2t map (default: the target's whole vocabulary)")
    ap.add_argument("--draft-layers", type=int, default=None,
                    help="draft_model: decoder layers of the student (default: a third of the policy's, at least 1)")
    ap.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: the free cores)")
    ap.add_argument("--time-budget", type=float, default=DrafterTrainArgs.time_budget_s, help="training seconds")
    ap.add_argument("--kv-cache-memory", default=None, help="sampling engine: KV cache budget, e.g. 2GiB "
                    "(default: --memory-utilization of the free memory)")
    ap.add_argument("--memory-utilization", type=float, default=DEFAULT_MEMORY_UTILIZATION)
    ap.add_argument("--cache", default=None, help="teacher-data cache dir: sampled responses (and eagle3's teacher "
                    "outputs) are written once and reused by runs with the same policy and sampling settings; the "
                    "fit's state is saved there for --resume")
    ap.add_argument("--resume", action="store_true", help="continue the fit saved in --cache DIR (same method, "
                    "draft vocabulary and --steps)")
    return ap.parse_args(argv)


def default_out(method: str) -> Path:
    return get_method(method).shipped_dir


def resolve_policy(policy: str | None) -> str:
    if policy is not None:
        return policy
    try:
        from ..tasks import default_policy_path
    except ImportError as e:
        raise UserError(f"no --policy given and the embedded policy is unavailable ({e}); pass --policy PATH") from e
    return str(default_policy_path())


def method_trainer(ns: argparse.Namespace):
    """The method's `train(policy_path, out_dir, data, args)`, with its own options bound where it has any."""
    return trainer_module(ns.method).cli_train(ns, on_log=_log)


def _log(step: int, row: dict) -> None:
    print(json.dumps({"step": step, **row}), file=sys.stderr, flush=True)


def sampling_settings(ns: argparse.Namespace) -> dict:
    """What the sampled responses depend on besides the policy (the cache's key)."""
    return {"data": digest_files([Path(ns.data)]) if ns.data else "embedded task", "prompts": ns.prompts,
            "samples": ns.samples, "max_tokens": ns.max_tokens, "temperature": ns.temperature, "seed": ns.seed,
            "max_model_len": ns.max_model_len}


def collect(ns: argparse.Namespace, policy: str) -> list:
    if ns.data:
        prompts = load_prompts(ns.data, policy, ns.prompts)
    else:
        prompts = default_prompts(512 if ns.prompts is None else ns.prompts, ns.seed)
    return collect_sequences(policy, prompts, n=ns.samples, max_tokens=ns.max_tokens, temperature=ns.temperature,
                             seed=ns.seed, max_num_seqs=ns.max_num_seqs, max_model_len=ns.max_model_len,
                             kv_cache_memory=ns.kv_cache_memory, memory_utilization=ns.memory_utilization)


def main(argv: list[str] | None = None) -> int:
    """Entry point of `specrl train-drafter`; bad input ends in specrl.cli.main's error boundary."""
    run(argv)
    return 0


def run(argv: list[str] | None = None) -> dict:
    """Collect, train, save; returns the metrics."""
    ns = parse_args(argv)
    train = method_trainer(ns)  # fail on a bad method before any sampling
    from ..threads import set_threads
    set_threads(ns.threads)
    policy = resolve_policy(ns.policy)
    if ns.out is None and (ns.policy is not None or ns.data is not None):
        raise ValueError(f"pass --out DIR: without it the {ns.method} drafter would replace the shipped one in "
                         f"{default_out(ns.method)}, which belongs to the embedded policy and its task")
    out = Path(ns.out) if ns.out else default_out(ns.method)
    args = DrafterTrainArgs(steps=ns.steps, batch_tokens=ns.batch_tokens, seed=ns.seed, time_budget_s=ns.time_budget,
                            teacher_topk=ns.teacher_topk, optim=replace(DrafterTrainArgs().optim, lr=ns.lr),
                            cache_dir=ns.cache, resume=ns.resume)
    t0 = time.monotonic()
    data, cached = load_or_collect(ns.cache, policy, sampling_settings(ns), lambda: collect(ns, policy))
    collect_s = time.monotonic() - t0
    print(f"{'read' if cached else 'collected'} {len(data)} responses ({sum(len(r) for _, r in data)} tokens) in "
          f"{collect_s:.1f}s", file=sys.stderr)
    metrics = {"collect_s": round(collect_s, 1), "cached": cached, **train(policy, out, data, args)}
    (out / "train_metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")
    print(json.dumps(metrics))
    return metrics


if __name__ == "__main__":
    sys.exit(main())
