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
from .run_dir import TIME_KEYS, TRACE_FILE, WORKLOAD_FILE, RunDir, read_jsonl


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


def rollout_llm(cfg: TrainConfig, policy: CausalLM, trace_path: Path | None = None) -> LLM:
    """An engine over its own copy of the policy, in rollout.dtype (default: the policy's), with rollout's
    KV budget."""
    ro = cfg.rollout
    model = engine_copy(policy, resolve_dtype(ro.dtype) if ro.dtype else None)
    return LLM(model, spec=ro.spec, max_num_seqs=ro.max_num_seqs, max_model_len=ro.max_model_len,
               kv_cache_memory=ro.kv_cache_memory, memory_utilization=ro.memory_utilization, seed=cfg.seed,
               trace_path=str(trace_path) if trace_path else None)


def build_parts(cfg: TrainConfig, policy: CausalLM, source: PromptSource, held_out: list[Example],
                trace_path: Path | None = None) -> Parts:
    encoder = PromptEncoder(model_dir(cfg), cfg.data.chat_template)
    llm = rollout_llm(cfg, policy, trace_path)
    trainer = PolicyTrainer(policy, cfg.algorithm, cfg.optim, cfg.schedule.max_steps, cfg.rollout.temperature,
                            cfg.rollout.max_tokens)
    pad = policy.config.pad_token_id
    return Parts(policy, llm, trainer, source, held_out, encoder, get_reward(cfg.reward.name),
                 0 if pad is None else pad)


@dataclass
class Rollout:
    """One step's samples and what generating them cost."""
    step: int  # the RL step they train (0-based)
    version: int  # the policy version (completed training steps) whose weights sampled them
    examples: list[Example]
    outputs: list  # RequestOutput per prompt, n completions each
    stats: dict  # the engine's counters over this generate() call
    wall_s: float
    cpu_s: float


def generate_rollouts(step: int, parts: Parts, cfg: TrainConfig, version: int,
                      cpu_clock: Callable[[], float] = time.process_time) -> Rollout:
    """Samples prompts and rolls out n per prompt; per-prompt seeds make the step reproducible."""
    ro, t0, c0 = cfg.rollout, time.perf_counter(), cpu_clock()
    examples = parts.source.batch(step, ro.prompts_per_step)
    prompts = [parts.encoder.encode(e.prompt) for e in examples]
    params = [SamplingParams(n=ro.n, temperature=ro.temperature, top_p=ro.top_p, top_k=ro.top_k,
                             max_tokens=ro.max_tokens, seed=step_seed(cfg.seed, step, salt=i + 1))
              for i in range(len(prompts))]
    parts.llm.reset_stats()
    parts.llm.tracer.tags = {"rl_step": step + 1, "call": "rollout"}
    outs = parts.llm.generate(prompts, params)
    return Rollout(step, version, examples, outs, dict(parts.llm.stats), time.perf_counter() - t0, cpu_clock() - c0)


def learn(rollout: Rollout, parts: Parts, cfg: TrainConfig,
          cpu_clock: Callable[[], float] = time.process_time) -> tuple[dict, dict]:
    """Rewards, group-relative advantages and the policy update on one step's rollouts. Samples from an
    older policy version are off-policy: their tokens' loss gets the truncated importance ratio.
    Returns the metrics row (without the step's timings) and the reward/train seconds on both clocks."""
    ro, examples, outs = cfg.rollout, rollout.examples, rollout.outputs
    t0, c0 = time.perf_counter(), cpu_clock()
    samples = [(r.prompt_token_ids, c) for r in outs for c in r.outputs]
    rewards = torch.tensor([parts.reward(parts.encoder.decode(c.token_ids), examples[r.request_id].answer,
                                         examples[r.request_id].prompt)
                            for r in outs for c in r.outputs], dtype=torch.float32)  # [N]
    advantages = compute_advantages(cfg.algorithm.advantage, rewards, group_size=ro.n)  # [N]
    t1, c1 = time.perf_counter(), cpu_clock()
    batch = collate([p for p, _ in samples], [c.token_ids for _, c in samples], [c.logprobs for _, c in samples],
                    advantages, parts.pad_id)
    off_policy = rollout.version < rollout.step
    train_metrics = parts.trainer.step(batch, is_cap=cfg.algorithm.is_cap if off_policy else None)
    t2, c2 = time.perf_counter(), cpu_clock()
    lens = np.array([len(c.token_ids) for _, c in samples])
    stats, gen_s = rollout.stats, rollout.wall_s
    row = {"step": rollout.step + 1, "reward_mean": float(rewards.mean()),
           "accuracy": float((rewards >= 1.0).float().mean()),
           "response_len_p50": float(np.percentile(lens, 50)), "response_len_p99": float(np.percentile(lens, 99)),
           "gen_tokens_per_s": stats["generated_tokens"] / max(gen_s, 1e-9),
           "acceptance_length": stats["acceptance_length"], "acceptance_rate": stats["acceptance_rate"],
           "target_forwards": stats["target_forwards"], "generated_tokens": stats["generated_tokens"],
           **train_metrics}
    times = {"rollout_s": gen_s, "rollout_cpu_s": rollout.cpu_s, "reward_s": t1 - t0, "reward_cpu_s": c1 - c0,
             "train_s": t2 - t1, "train_cpu_s": c2 - c1}
    return row, times


def rl_step(step: int, parts: Parts, cfg: TrainConfig) -> dict:
    """One synchronous RL step; returns its metrics row. `step` counts completed steps before this one."""
    t0, c0 = time.perf_counter(), time.process_time()
    rollout = generate_rollouts(step, parts, cfg, version=step)
    row, times = learn(rollout, parts, cfg)
    t1, c1 = time.perf_counter(), time.process_time()
    sync_weights(parts.policy, parts.llm)  # the engine gets the new weights
    t2, c2 = time.perf_counter(), time.process_time()
    times.update(sync_s=t2 - t1, sync_cpu_s=c2 - c1, step_s=t2 - t0, step_cpu_s=c2 - c0)
    if parts.workload_log is not None:  # what the simulator needs to replay this step (cfg.rollout.trace)
        parts.workload_log(workload_row(rollout, cfg, times))
    return {**row, **row_times(times)}


def row_times(times: dict) -> dict:
    """The wall seconds a metrics row carries (the CPU times go to rollout_workload.jsonl only)."""
    return {k: times[k] for k in (*TIME_KEYS, "step_s")}


def workload_row(rollout: Rollout, cfg: TrainConfig, times: dict) -> dict:
    """One rollout_workload.jsonl row: the step's shape and lengths, and its wall and process-CPU seconds
    of rollout, reward, training, weight sync and the whole step."""
    ro = cfg.rollout
    samples = [(r.prompt_token_ids, c) for r in rollout.outputs for c in r.outputs]
    return {"step": rollout.step + 1, "prompt_lens": [len(p) for p, _ in samples],
            "response_lengths": [len(c.token_ids) for _, c in samples], "n": ro.n,
            "max_num_seqs": ro.max_num_seqs, "micro_batch_size": cfg.optim.micro_batch_size,
            "method": ro.spec.method if ro.spec.enabled else None,
            "k": ro.spec.num_speculative_tokens if ro.spec.enabled else 0,
            "mode": cfg.pipeline.mode, "max_policy_lag": cfg.pipeline.max_policy_lag if cfg.pipeline.mode == "async"
            else 0, "version": rollout.version, **times}


def evaluate(parts: Parts, max_tokens: int, llm: LLM) -> float:
    """Greedy accuracy on the held-out examples (greedy + lossless SD = the same tokens as without SD)."""
    if not parts.held_out:
        return float("nan")
    prompts = [parts.encoder.encode(e.prompt) for e in parts.held_out]
    outs = llm.generate(prompts, SamplingParams(temperature=0.0, max_tokens=max_tokens))
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
        if cfg.pipeline.mode == "async":
            from .asynchronous import run_async
            run_async(run, parts, cfg, start, bar)
        else:
            if start == 0:
                _eval(run, parts, cfg, 0, bar, parts.llm)
            for step in range(start, sched.max_steps):
                row = _checked(rl_step, run, step, parts, cfg)
                finish_step(run, parts, cfg, row, bar, parts.llm, _stateful_drafter(parts.llm))
    finally:
        bar.close()
        run.close()
        if cfg.plots:
            run.plot()
    return _summary(run)


def stopped(run: RunDir, step: int, cause: str, fix: str) -> RunStopped:
    """The error that ends a run at `step` (0-based), naming the last good checkpoint."""
    last = latest_checkpoint(run.path)
    return RunStopped(f"step {step + 1}: {cause}. The run stopped; the last good checkpoint is "
                      f"{str(last) if last else 'none (no step was saved yet)'}. {fix}")


def _checked(fn: Callable, run: RunDir, step: int, *args):
    """fn(step, *args), with a NaN loss turned into RunStopped."""
    try:
        return fn(step, *args)
    except NonFiniteLossError as e:
        raise stopped(run, step, str(e), "Lower optim.lr or optim.grad_clip and resume, or check the rewards "
                      "for NaN") from e


def finish_step(run: RunDir, parts: Parts, cfg: TrainConfig, row: dict, bar: StepProgress, eval_llm: LLM,
                drafter) -> None:
    """After a step's update: the held-out evaluation when due (an `eval_llm` other than the rollout
    engine gets the new weights first), the metrics row, and the checkpoint."""
    sched, done = cfg.schedule, row["step"]
    if done == sched.max_steps or (sched.eval_every and done % sched.eval_every == 0):
        if eval_llm is not parts.llm:
            sync_weights(parts.policy, eval_llm)
        row["eval_accuracy"] = _eval(run, parts, cfg, done, bar, eval_llm)
    run.log(row)
    bar.update(row)
    if done == sched.max_steps or done % sched.save_every == 0:
        save_checkpoint(run.path, done, parts.policy, parts.trainer.state_dict(), {"seed": cfg.seed},
                        sched.keep_last, tokenizer_dir=model_dir(cfg), drafter=drafter)


def _eval(run: RunDir, parts: Parts, cfg: TrainConfig, step: int, bar: StepProgress, llm: LLM) -> float:
    t0 = time.perf_counter()
    llm.tracer.tags = {"rl_step": step, "call": "eval"}  # after step `step`, so resume can truncate it
    acc = evaluate(parts, cfg.data.eval_max_tokens, llm)
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
