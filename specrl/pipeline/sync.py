"""The synchronous GRPO pipeline: rollout (with speculative decoding), reward, advantages, train, sync.

A short driver over the parts: the engine (`LLM`) generates with its own copy of the policy, the
`PolicyTrainer` updates the policy, and `sync_weights` copies the result into the engine.
"""
from __future__ import annotations

import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from ..config import dump_yaml
from ..engine import LLM, SamplingParams
from ..model import CausalLM, load_model, resolve_dtype
from ..rl import compute_advantages
from ..train.checkpoint import Checkpoint, latest_checkpoint, load_checkpoint, save_checkpoint
from ..train.config import TrainConfig
from ..train.data import Example, PromptEncoder, PromptSource, build_sources, step_seed
from ..train.rewards import RewardFn, get_reward
from ..train.trainer import NonFiniteLossError, PolicyTrainer, collate
from ..train.weight_sync import engine_copy, sync_weights
from .progress import StepProgress
from .run_dir import TRACE_FILE, WORKLOAD_FILE, RunDir, read_jsonl


class RunStopped(RuntimeError):
    """The run stopped early (e.g. a NaN loss); the run directory and last good checkpoint are intact."""


@dataclass
class Parts:
    policy: CausalLM
    llm: LLM
    trainer: PolicyTrainer
    source: PromptSource
    held_out: list[Example]
    encoder: PromptEncoder
    reward: RewardFn
    pad_id: int
    workload_log: Callable[[dict], None] | None = None


def model_dir(cfg: TrainConfig) -> Path:
    if cfg.model is not None:
        return Path(cfg.model)
    from ..tasks import default_policy_path
    return default_policy_path()


def build_parts(cfg: TrainConfig, policy: CausalLM, source: PromptSource, held_out: list[Example],
                trace_path: Path | None = None) -> Parts:
    encoder = PromptEncoder(model_dir(cfg), cfg.data.chat_template)
    llm = LLM(engine_copy(policy), spec=cfg.rollout.spec, max_num_seqs=cfg.rollout.max_num_seqs, seed=cfg.seed,
              trace_path=str(trace_path) if trace_path else None)
    trainer = PolicyTrainer(policy, cfg.algorithm, cfg.optim, cfg.schedule.max_steps, cfg.rollout.temperature,
                            cfg.rollout.max_tokens)
    pad = policy.config.pad_token_id
    return Parts(policy, llm, trainer, source, held_out, encoder, get_reward(cfg.reward.name),
                 0 if pad is None else pad)


def rl_step(step: int, parts: Parts, cfg: TrainConfig) -> dict:
    """One synchronous RL step; returns its metrics row. `step` counts completed steps before this one."""
    ro, t0, c0 = cfg.rollout, time.perf_counter(), time.process_time()
    # step 1: sample prompts and roll out n per prompt; per-prompt seeds make the step reproducible
    examples = parts.source.batch(step, ro.prompts_per_step)
    prompts = [parts.encoder.encode(e.prompt) for e in examples]
    params = [SamplingParams(n=ro.n, temperature=ro.temperature, top_p=ro.top_p, top_k=ro.top_k,
                             max_tokens=ro.max_tokens, seed=step_seed(cfg.seed, step, salt=i + 1))
              for i in range(len(prompts))]
    parts.llm.reset_stats()
    parts.llm.tracer.tags = {"rl_step": step + 1, "call": "rollout"}
    outs = parts.llm.generate(prompts, params)
    stats = parts.llm.stats
    t1, c1 = time.perf_counter(), time.process_time()
    # step 2: rewards and group-relative advantages
    samples = [(r.prompt_token_ids, c) for r in outs for c in r.outputs]
    rewards = torch.tensor([parts.reward(parts.encoder.decode(c.token_ids), examples[r.request_id].answer,
                                         examples[r.request_id].prompt)
                            for r in outs for c in r.outputs], dtype=torch.float32)  # [N]
    advantages = compute_advantages(cfg.algorithm.advantage, rewards, group_size=ro.n)  # [N]
    t2, c2 = time.perf_counter(), time.process_time()
    # step 3: train on the rollouts
    batch = collate([p for p, _ in samples], [c.token_ids for _, c in samples], [c.logprobs for _, c in samples],
                    advantages, parts.pad_id)
    train_metrics = parts.trainer.step(batch)
    t3, c3 = time.perf_counter(), time.process_time()
    # step 4: the engine gets the new weights
    sync_weights(parts.policy, parts.llm)
    t4, c4 = time.perf_counter(), time.process_time()
    lens = np.array([len(c.token_ids) for _, c in samples])
    if parts.workload_log is not None:  # what the simulator needs to replay this step (cfg.rollout.trace)
        parts.workload_log(_workload_row(step, cfg, [len(p) for p, _ in samples], lens.tolist(),
                                         (t0, t1, t2, t3, t4), (c0, c1, c2, c3, c4)))
    return {"step": step + 1, "reward_mean": float(rewards.mean()), "accuracy": float((rewards >= 1.0).float().mean()),
            "response_len_p50": float(np.percentile(lens, 50)), "response_len_p99": float(np.percentile(lens, 99)),
            "rollout_s": t1 - t0, "reward_s": t2 - t1, "train_s": t3 - t2, "sync_s": t4 - t3, "step_s": t4 - t0,
            "gen_tokens_per_s": stats["generated_tokens"] / max(t1 - t0, 1e-9),
            "acceptance_length": stats["acceptance_length"], "acceptance_rate": stats["acceptance_rate"],
            "target_forwards": stats["target_forwards"], "generated_tokens": stats["generated_tokens"],
            **train_metrics}


def _workload_row(step: int, cfg: TrainConfig, prompt_lens: list[int], response_lengths: list[int],
                  wall: tuple[float, ...], cpu: tuple[float, ...]) -> dict:
    """One rollout_workload.jsonl row: the step's shape and lengths, and its wall and process-CPU seconds
    from the clock readings at the start, after rollout, reward, training and weight sync."""
    ro = cfg.rollout
    row = {"step": step + 1, "prompt_lens": prompt_lens, "response_lengths": response_lengths, "n": ro.n,
           "max_num_seqs": ro.max_num_seqs, "micro_batch_size": cfg.optim.micro_batch_size,
           "method": ro.spec.method if ro.spec.enabled else None,
           "k": ro.spec.num_speculative_tokens if ro.spec.enabled else 0}
    for suffix, (t0, t1, t2, t3, t4) in (("_s", wall), ("_cpu_s", cpu)):
        row.update({"rollout" + suffix: t1 - t0, "reward" + suffix: t2 - t1, "train" + suffix: t3 - t2,
                    "sync" + suffix: t4 - t3, "step" + suffix: t4 - t0})
    return row


def evaluate(parts: Parts, max_tokens: int) -> float:
    """Greedy accuracy on the held-out examples (greedy + lossless SD = the same tokens as without SD)."""
    if not parts.held_out:
        return float("nan")
    prompts = [parts.encoder.encode(e.prompt) for e in parts.held_out]
    outs = parts.llm.generate(prompts, SamplingParams(temperature=0.0, max_tokens=max_tokens))
    scores = [parts.reward(parts.encoder.decode(o.outputs[0].token_ids), e.answer, e.prompt)
              for o, e in zip(outs, parts.held_out)]
    return sum(s >= 1.0 for s in scores) / len(scores)


def _start(cfg: TrainConfig) -> tuple[RunDir, CausalLM, Checkpoint | None]:
    """The run directory, the policy and the checkpoint to restore (None for a new run)."""
    dtype = resolve_dtype(cfg.dtype)
    if cfg.resume is None:
        policy = load_model(model_dir(cfg), device=cfg.device, dtype=dtype)
        return RunDir.create(cfg.out_dir, cfg, cfg.tensorboard), policy, None
    run = RunDir.open(cfg.resume, cfg.tensorboard)
    path = latest_checkpoint(run.path)
    if path is None:
        raise FileNotFoundError(f"run {cfg.resume!r} has no complete checkpoint to resume from; start a new run "
                                "(or lower schedule.save_every next time)")
    ckpt, policy = load_checkpoint(path, cfg.device, dtype)
    run.truncate(ckpt.step)
    dump_yaml(cfg, run.path / "config.yaml")  # e.g. a raised max_steps
    return run, policy, ckpt


def train(cfg: TrainConfig) -> dict:
    """Runs `specrl train`; returns a summary (initial/final held-out accuracy, steps, run dir)."""
    if cfg.num_threads:
        torch.set_num_threads(cfg.num_threads)
    random.seed(cfg.seed)
    torch.manual_seed(cfg.seed)
    get_reward(cfg.reward.name)  # bad names and bad data fail before the run directory is touched
    source, held_out = build_sources(cfg.data, cfg.seed)
    run, policy, ckpt = _start(cfg)
    parts = build_parts(cfg, policy, source, held_out, run.path / TRACE_FILE if cfg.rollout.trace else None)
    if cfg.rollout.trace:
        parts.workload_log = lambda row: run.log(row, WORKLOAD_FILE, tensorboard=False)
    start = 0 if ckpt is None else ckpt.step
    if ckpt is not None:
        parts.trainer.load_state_dict(ckpt.trainer)
        if ckpt.drafter is not None and _stateful_drafter(parts.llm) is not None:
            parts.llm.drafter = ckpt.drafter
    sched = cfg.schedule
    bar = StepProgress(sched.max_steps, start, cfg.progress)
    try:
        if start == 0:
            _eval(run, parts, cfg, 0, bar)
        for step in range(start, sched.max_steps):
            _one_step(run, parts, cfg, step, bar)
    finally:
        bar.close()
        run.close()
        if cfg.plots:
            run.plot()
    return _summary(run)


def _one_step(run: RunDir, parts: Parts, cfg: TrainConfig, step: int, bar: StepProgress) -> None:
    sched, done = cfg.schedule, step + 1
    try:
        row = rl_step(step, parts, cfg)
    except NonFiniteLossError as e:
        last = latest_checkpoint(run.path)
        raise RunStopped(f"step {done}: {e}. The run stopped; the last good checkpoint is "
                         f"{str(last) if last else 'none (no step was saved yet)'}. Lower optim.lr or "
                         "optim.grad_clip and resume, or check the rewards for NaN") from e
    if done == sched.max_steps or (sched.eval_every and done % sched.eval_every == 0):
        row["eval_accuracy"] = _eval(run, parts, cfg, done, bar)
    run.log(row)
    bar.update(row)
    if done == sched.max_steps or done % sched.save_every == 0:
        save_checkpoint(run.path, done, parts.policy, parts.trainer.state_dict(), {"seed": cfg.seed},
                        sched.keep_last, tokenizer_dir=model_dir(cfg), drafter=_stateful_drafter(parts.llm))


def _eval(run: RunDir, parts: Parts, cfg: TrainConfig, step: int, bar: StepProgress) -> float:
    t0 = time.perf_counter()
    parts.llm.tracer.tags = {"rl_step": step, "call": "eval"}  # after step `step`, so resume can truncate it
    acc = evaluate(parts, cfg.data.eval_max_tokens)
    run.log({"step": step, "accuracy": acc, "eval_s": time.perf_counter() - t0, "problems": len(parts.held_out)},
            "eval.jsonl")
    bar.log(f"step {step}: held-out greedy accuracy {acc:.3f} on {len(parts.held_out)} problems")
    return acc


def _stateful_drafter(llm: LLM):
    """The drafter to checkpoint: a model-free one (suffix/n-gram) keeps cross-step state such as the suffix
    pools of earlier rollouts, and the realised samples depend on the drafts. Model-based drafters keep
    only per-sequence caches that every generate() rebuilds, plus weights loaded from their own path."""
    d = llm.drafter
    return d if d is not None and not tuple(d.hidden_layers) else None


def _summary(run: RunDir) -> dict:
    evals = read_jsonl(run.path / "eval.jsonl")
    rows = read_jsonl(run.path / "metrics.jsonl")
    return {"run_dir": str(run.path), "steps": rows[-1]["step"] if rows else 0,
            "eval_accuracy_initial": evals[0]["accuracy"] if evals else None,
            "eval_accuracy_final": evals[-1]["accuracy"] if evals else None,
            "train_s": sum(r["step_s"] for r in rows), "eval_s": sum(e["eval_s"] for e in evals)}
