"""bf16 against fp32 on the default embedded task, side by side in one process, as JSON lines.

  - `rl`: the default `specrl train` step with the engine in fp32 or bf16 (rollout.dtype) and the trainer in
    fp32 or under bf16 autocast (optim.autocast), arms interleaved step by step from the same initial policy
    and seed, so that a change in machine load hits every arm alike. Per arm: mean rollout / train / step
    seconds (the first step left out) and logprob_diff (the trainer-vs-engine gap, mean and max over steps).
  - `decode`: engine decode throughput, SD off, fp32 vs bf16 alternating, at batch 1 and 64.

    OMP_NUM_THREADS=1 specrl bench bf16-step --steps 6 [--parts rl,decode] [key.sub=value ...]
    specrl bench bf16-step --device cuda device=cuda   # on a GPU
"""
from __future__ import annotations

import argparse
import copy
import json
import statistics
import time

import torch

from specrl import LLM, SamplingParams
from specrl.errors import UserError
from specrl.model import load_model
from specrl.pipeline.run import build_parts, model_dir
from specrl.pipeline.sync import rl_step
from specrl.tasks import default_policy_path, make_problems
from specrl.config import load_config
from specrl.config.files import argv_overrides
from specrl.config.run import TrainConfig
from specrl.trainer.data import build_sources

ARMS = {  # name: (rollout.dtype, optim.autocast)
    "fp32": ("float32", False),
    "bf16_engine": ("bfloat16", False),
    "bf16_train": ("float32", True),
    "bf16": ("bfloat16", True),
}


def emit(row: dict) -> None:
    print(json.dumps({k: round(v, 5) if isinstance(v, float) else v for k, v in row.items()}), flush=True)


def rl_arms(steps: int, arms: list[str], overrides: list[str]) -> None:
    runs = {}
    for name in arms:
        dtype, autocast = ARMS[name]
        cfg = load_config(TrainConfig, None, argv_overrides(overrides) + [
            f"rollout.dtype={dtype}", f"optim.autocast={autocast}", f"schedule.max_steps={steps}", "progress=false"])
        torch.manual_seed(cfg.seed)
        source, held_out = build_sources(cfg.data, cfg.seed)
        runs[name] = (cfg, build_parts(cfg, model_dir(cfg), source, held_out), [])
    for step in range(steps):
        for name, (cfg, parts, rows) in runs.items():
            rows.append(rl_step(step, parts, cfg))
            r = rows[-1]
            emit({"part": "rl_step", "arm": name, "step": step + 1, "rollout_s": r["rollout_s"],
                  "train_s": r["train_s"], "step_s": r["step_s"], "logprob_diff": r["logprob_diff"],
                  "logprob_diff_max": r["logprob_diff_max"], "reward_mean": r["reward_mean"]})
    base = None
    for name, (_, _, rows) in runs.items():
        timed = rows[1:] or rows
        mean = {k: statistics.fmean(r[k] for r in timed) for k in ("rollout_s", "train_s", "step_s")}
        base = base or mean
        emit({"part": "rl", "arm": name, "steps_timed": len(timed), **mean,
              **{f"{k}_vs_fp32": base[k] / mean[k] for k in mean},
              "logprob_diff_mean": statistics.fmean(r["logprob_diff"] for r in rows),
              "logprob_diff_max": max(r["logprob_diff_max"] for r in rows),
              "reward_mean": statistics.fmean(r["reward_mean"] for r in rows)})


def decode(repeats: int, max_tokens: int, device: str, model: str | None) -> None:
    policy = load_model(model or default_policy_path(), dtype=torch.float32, device=device)
    engines = {name: LLM(copy.deepcopy(policy).to(dt), max_num_seqs=64)
               for name, dt in (("fp32", torch.float32), ("bf16", torch.bfloat16))}
    tok = engines["fp32"].tokenizer
    prompts = [tok.encode(p.prompt).ids for p in make_problems(64, seed=7, split="test")] if model is None \
        else [list(range(3, 40))] * 64  # another checkpoint: any 37 tokens (ignore_eos, so any prompt times alike)
    params = SamplingParams(temperature=1.0, max_tokens=max_tokens, ignore_eos=True, seed=0)
    for batch in (1, 64):
        secs = {name: 0.0 for name in engines}
        for r in range(repeats):  # alternating, so load changes hit both
            for name, llm in engines.items():
                llm.generate(prompts[:1], SamplingParams(max_tokens=2))  # warm-up
                t0 = time.perf_counter()
                llm.generate(prompts[:batch], params)
                secs[name] += time.perf_counter() - t0
        tps = {name: repeats * batch * max_tokens / s for name, s in secs.items()}
        emit({"part": "decode", "model": model or "embedded", "device": device, "batch": batch, "max_tokens": max_tokens, "repeats": repeats,
              "fp32_tokens_per_s": tps["fp32"], "bf16_tokens_per_s": tps["bf16"],
              "bf16_speedup": tps["bf16"] / tps["fp32"]})


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="specrl bench bf16-step", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--parts", default="rl,decode", help="rl (the RL step's arms), decode (engine throughput), or both")
    ap.add_argument("--steps", type=int, default=6, help="RL steps per arm")
    ap.add_argument("--arms", default=",".join(ARMS), help=f"comma-separated RL arms, of {', '.join(ARMS)}")
    ap.add_argument("--repeats", type=int, default=3, help="decode: generate() calls per dtype and batch")
    ap.add_argument("--max-tokens", type=int, default=128, help="decode: tokens per sequence")
    ap.add_argument("--model", default=None, help="decode: an HF checkpoint dir (default: the embedded policy)")
    ap.add_argument("--device", default="cpu", help="decode's device (the RL arms take the override device=cuda)")
    ap.add_argument("overrides", nargs="*", help="run config overrides for every RL arm, full keys "
                    "(schedule.max_steps=6)")
    args = ap.parse_args(argv)
    bad = sorted(set(args.arms.split(",")) - set(ARMS))
    if bad:
        raise UserError(f"--arms: {bad} unknown; choose from {list(ARMS)}")
    emit({"threads": torch.get_num_threads(), "torch": torch.__version__})
    if "decode" in args.parts:
        decode(args.repeats, args.max_tokens, args.device, args.model)
    if "rl" in args.parts:
        rl_arms(args.steps, args.arms.split(","), args.overrides)
    return 0
