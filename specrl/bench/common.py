"""Shared set-up for the benchmarks: the policy, task prompts, timing."""
from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import time

import torch

from specrl.errors import UserError
from specrl.runtime import AS_TRAIN, add_runtime_args, engine, parse_args, policy_path

__all__ = ["RATE", "at_least_one", "base_parser", "compare_runs", "digest", "emit", "encoded_task_prompts", "engine",
           "file_prompts", "measure", "parse_args", "parse_with_overrides", "policy_path", "prompt_sets",
           "short_prompts", "task_prompts", "timed", "timed_generate", "warm_up"]

RATE = ("tokens", "seconds", "tokens_per_s")  # of timed_generate's figures, those a bench adaptive row reports


def at_least_one(text: str) -> int:
    """argparse type of a count that must be 1 or more (--repeats)."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is below 1: give at least 1, or leave it out for the default")
    return value


def parse_with_overrides(ap: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    """`ap`'s flags, and in `args.overrides` every `key=value` word wherever it stands: a list flag such as
    `--seeds 0 1` would otherwise swallow the overrides after it."""
    argv = list(argv or [])
    overrides = [w for w in argv if "=" in w and not w.startswith("-")]
    args = ap.parse_args([w for w in argv if w not in overrides])
    args.overrides = args.overrides + overrides
    return args


def base_parser(prog: str, description: str, warmup: bool = False) -> argparse.ArgumentParser:
    """A bench's parser. Its --threads default is `specrl train`'s (torch's default, num_threads=0), not the
    free cores: a bench measures the main job, and a thread count that follows the machine's load would
    make the same command measure different things a minute apart."""
    ap = argparse.ArgumentParser(prog=prog, description=description)
    add_runtime_args(ap, threads_default="torch's default, as `specrl train`")
    ap.set_defaults(threads=AS_TRAIN)
    ap.add_argument("--quick", action="store_true", help="smaller workloads (smoke test)")
    if warmup:
        ap.add_argument("--warmup-tokens", type=int, default=64, help="a warm-up generate of the workload's shape "
                        "per engine, on other prompts (0: none)")
    return ap


def task_prompts(llm, count: int, seed: int = 1234, split: str = "test") -> list[list[int]]:
    """Token ids of the default task's prompts (held-out ones unless `split="train"`)."""
    from specrl.tasks import make_problems
    return [llm.tokenizer.encode(p.prompt).ids for p in make_problems(count, seed=seed, split=split)]


def encoded_task_prompts(model_dir, count: int, seed: int = 1234, split: str = "test") -> list[list[int]]:
    """The task's prompts encoded as `specrl train` encodes them for `model_dir` (its chat template, if any)."""
    from specrl.tasks import make_problems
    from specrl.trainer.data import PromptEncoder
    encoder = PromptEncoder(model_dir)
    return [encoder.encode(p.prompt) for p in make_problems(count, seed=seed, split=split)]


def short_prompts(count: int) -> list[list[int]]:
    """`count` prompts of 4-7 token ids that every tokenizer has: fixed work whose cost is the decode's."""
    return [list(range(1, 9))[: 4 + i % 4] for i in range(count)]


def digest(token_ids) -> str:
    """8 hex digits naming a completion's token ids (equal ids, equal digest)."""
    return hashlib.sha1(json.dumps([int(t) for t in token_ids]).encode()).hexdigest()[:8]


def prompt_sets(llm, rl: bool, batch: int, repeats: int, rollout, seed: int) -> tuple[list, list]:
    """A batch-size row's measured prompts and its warm-up prompts (other ones): for the RL row one rollout's
    (`rollout`) of the task's training prompts, else `repeats` batches of held-out ones."""
    split = "train" if rl else "test"
    measured, warm = (rollout.prompts_per_step,) * 2 if rl else (batch * repeats, batch)
    return (task_prompts(llm, measured, seed=seed + 7, split=split),
            task_prompts(llm, warm, seed=seed + 8, split=split))


def warm_up(llm, prompts: list[list[int]], n: int, max_tokens: int, seed: int, temperature: float = 1.0) -> None:
    """A generate of the workload's shape on other prompts, then fresh stats: what the main job's engine has
    learnt after its first step (the adaptive engine's cost model and acceptance counts, a suffix tree's
    responses), the same for every strategy."""
    from specrl import SamplingParams
    if max_tokens > 0:
        llm.generate(prompts, [SamplingParams(n=n, temperature=temperature, max_tokens=max_tokens, seed=seed + 99 + i)
                               for i in range(len(prompts))])
    llm.reset_stats()


def timed_generate(llm, prompts: list[list[int]], n: int, batch: int, max_tokens: int, seed: int, repeats: int,
                   temperature: float = 1.0) -> dict:
    """`repeats` generates of `batch` prompts each (with n > 1, of an equal share of `prompts` each: one RL
    rollout per repeat), every prompt with its own seed ->
    tokens, wall seconds, tokens_per_s, process-CPU seconds and every completion's token ids."""
    from specrl import SamplingParams
    from specrl.engine import per_prompt
    seconds, cpu, ids = 0.0, 0.0, []
    per_call = batch if n == 1 else len(prompts) // repeats  # n > 1: each repeat is one rollout of its prompts
    for r in range(repeats):
        chunk = prompts[r * per_call:(r + 1) * per_call]
        params = per_prompt(SamplingParams(n=n, temperature=temperature, max_tokens=max_tokens, seed=seed),
                            len(chunk), start=r * per_call)
        c0 = time.process_time()
        outs, dt = timed(lambda: llm.generate(chunk, params))
        cpu += time.process_time() - c0
        ids += [list(o.token_ids) for q in outs for o in q.outputs]
        seconds += dt
    tokens = sum(map(len, ids))
    return {"tokens": tokens, "seconds": seconds, "tokens_per_s": tokens / seconds, "cpu_s": cpu, "ids": ids}


def measure(llm, prompts: list[list[int]], n: int, batch: int, max_tokens: int, seed: int, repeats: int,
            warmup: list[list[int]], warmup_tokens: int, temperature: float = 1.0,
            after_warmup=None) -> tuple[dict, dict]:
    """`warm_up` on the `warmup` prompts, `after_warmup()` (e.g. an adaptive engine's choices counted afresh),
    then `timed_generate` -> (its dict, the engine's stats)."""
    warm_up(llm, warmup, n, warmup_tokens, seed, temperature)
    if after_warmup is not None:
        after_warmup()
    return timed_generate(llm, prompts, n, batch, max_tokens, seed, repeats, temperature), llm.stats


def file_prompts(path: str, model_dir: str, count: int) -> list[list[int]]:
    """The first `count` rows of a prompt file, encoded as `specrl train` encodes them (chat template)."""
    from specrl.errors import UserError
    from specrl.trainer.data import PromptEncoder, read_prompts
    rows = read_prompts(path, flag="--prompts")
    if len(rows) < count:
        raise UserError(f"--prompts {path!r} has {len(rows)} rows; this workload needs {count}: add rows or lower "
                        "--batch-sizes / --repeats")
    encoder = PromptEncoder(model_dir)
    return [encoder.encode(r) for r in rows[:count]]


def timed(fn):
    sync = torch.cuda.synchronize if torch.cuda.is_available() else lambda: None
    sync()
    t0 = time.perf_counter()
    out = fn()
    sync()
    return out, time.perf_counter() - t0


def emit(row: dict) -> None:
    print(json.dumps({k: (round(v, 4) if isinstance(v, float) else v) for k, v in row.items()}), flush=True)


def compare_runs(names: list[str], out) -> None:
    """`specrl compare NAME=DIR ... --out OUT` of a bench's runs, its table to stderr (stdout holds the bench's
    JSON lines); a failed compare ends the bench with one line naming its exit code."""
    done = subprocess.run([sys.executable, "-m", "specrl", "compare", *names, "--out", str(out)],
                          capture_output=True, text=True)
    print(done.stdout + done.stderr, end="", file=sys.stderr)
    if done.returncode != 0:
        raise UserError(f"`specrl compare` of the runs for {out} failed (exit {done.returncode})")
