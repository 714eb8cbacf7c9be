"""The per-step pieces both drivers are made of: rollout, reward + learn, evaluate, finish, stop.

`Parts` is split the way a multi-process run splits: the rollout side (engine and prompts) and the learner
side (trainer and reward), reached only through the seam.
"""
from __future__ import annotations

import math
import time
from collections import Counter
from dataclasses import dataclass, replace
from typing import Callable

import numpy as np
import torch

from ..audit import AuditRows, SamplerAlarm, StepEvidence, choose_groups, group_rows
from ..drafters.training.health import DrafterHealth
from ..engine import SamplingParams
from ..rl import compute_advantages
from ..trainer.checkpoint import latest_checkpoint, save_checkpoint
from ..trainer.precision import importance_ratio_applies
from ..config.run import TrainConfig
from ..trainer.data import Example, PromptEncoder, PromptSource, step_seed
from ..trainer.rewards import Reward
from ..trainer.batch import collate
from ..trainer.trainer import NonFiniteLossError
from .progress import StepProgress
from .run_dir import SAMPLES_FILE, TIME_KEYS, RunDir
from .seam import ROW_STATS, Learner, RolloutBackend, RunStopped, group_version

SAMPLES_KEY = "samples"  # metrics-row key of the step's logged completions (popped before the row is written)
FLAT_REWARD_STEPS = 3  # steps of all-equal rewards before check_signal warns
EVAL_SALT = 0x5EED_E7A1  # the held-out samples' seed stream, apart from the rollouts' (salt = prompt index + 1)
AUDIT_SALT = 0xA0D17  # the sampler audit's choice of groups
SAMPLER_STATE = "sampler_audit"  # the checkpoint's state.json key of the audit's e-process


@dataclass
class RolloutSide:
    backend: RolloutBackend
    source: PromptSource
    encoder: PromptEncoder


@dataclass
class LearnerSide:
    learner: Learner
    reward: Reward  # batched: (completions, rows) -> rewards
    encoder: PromptEncoder


@dataclass
class Parts:
    rollout: RolloutSide
    learner: LearnerSide
    held_out: list[Example]
    eval_backend: RolloutBackend | None = None  # None: evaluate on the rollout backend
    workload_log: Callable[[dict], None] | None = None  # rollout.trace: rows of rollout_workload.jsonl
    health: DrafterHealth | None = None  # the drafter alarm, for runs with a model drafter
    flat_reward_steps: int = 0  # consecutive steps whose rewards were all equal (check_signal)
    sampler_alarm: SamplerAlarm | None = None  # the sampler audit's e-process; None with rollout.audit=off
    spec_disabled: bool = False  # rollout.audit=fallback turned speculative decoding off

    @property
    def evaluator(self) -> RolloutBackend:
        return self.eval_backend if self.eval_backend is not None else self.rollout.backend


@dataclass
class Rollout:
    """One step's samples and what generating them cost."""
    step: int  # the RL step they train (0-based)
    # the oldest policy version (completed training steps) whose weights sampled any of their tokens: with
    # updates in flight a sequence may continue on newer weights (newest_version), and staleness, the
    # importance-ratio switch and dropping go by the oldest
    version: int
    examples: list[Example]
    outputs: list  # RequestOutput per prompt, n completions each
    stats: dict  # the engine's counters over this generate() call
    wall_s: float
    cpu_s: float
    newest_version: int  # the newest version that sampled any of their tokens

    @property
    def token_lags(self) -> dict[int, int]:
        """How many tokens were sampled how many versions behind the policy they train."""
        lags = Counter(self.step - v for r in self.outputs for c in r.outputs
                       for v in (c.token_versions() if c.weight_versions else [self.version] * len(c.token_ids)))
        return dict(sorted(lags.items()))


def drop_stale(rollout: Rollout, max_lag: int) -> tuple[Rollout, int]:
    """The groups at most `max_lag` versions behind the step they train, and how many were dropped."""
    keep = [i for i, out in enumerate(rollout.outputs) if rollout.step - group_version(out, rollout.version) <= max_lag]
    dropped = len(rollout.outputs) - len(keep)
    if dropped == 0:
        return rollout, 0
    if not keep:
        raise RuntimeError(f"every group of step {rollout.step + 1} was sampled more than max_policy_lag={max_lag} "
                           "versions ago")
    outs = [rollout.outputs[i] for i in keep]
    for new_id, out in enumerate(outs):
        out.request_id = new_id
    version = min(group_version(o, rollout.version) for o in outs)
    return replace(rollout, version=version, examples=[rollout.examples[i] for i in keep], outputs=outs), dropped


def generate_rollouts(step: int, side: RolloutSide, cfg: TrainConfig, version: int,
                      cpu_clock: Callable[[], float] = time.process_time) -> Rollout:
    """Samples prompts and rolls out n per prompt; per-prompt seeds make the step reproducible."""
    ro, t0, c0 = cfg.rollout, time.perf_counter(), cpu_clock()
    examples = side.source.batch(step, ro.prompts_per_step)
    prompts = [side.encoder.encode(e.prompt) for e in examples]
    params = [SamplingParams(n=ro.n, temperature=ro.temperature, top_p=ro.top_p, top_k=ro.top_k,
                             max_tokens=ro.max_tokens, seed=step_seed(cfg.seed, step, salt=i + 1))
              for i in range(len(prompts))]
    side.backend.reset_stats()
    side.backend.set_trace_tags({"rl_step": step + 1, "call": "rollout"})
    outs = side.backend.generate(prompts, params)
    newest = max((c.newest_version for r in outs for c in r.outputs if c.weight_versions), default=version)
    return Rollout(step, min(group_version(r, version) for r in outs), examples, outs, side.backend.stats(),
                   time.perf_counter() - t0, cpu_clock() - c0, newest)


def learn(rollout: Rollout, side: LearnerSide, cfg: TrainConfig,
          cpu_clock: Callable[[], float] = time.process_time) -> tuple[dict, dict]:
    """Rewards, advantages and the policy update (off-policy samples, stale or sampled in another precision,
    get the truncated importance ratio) ->
    the metrics row (without the step's timings) and the reward/train seconds on both clocks."""
    examples, outs = rollout.examples, rollout.outputs
    t0, c0 = time.perf_counter(), cpu_clock()
    samples = [(r, c) for r in outs for c in r.outputs]  # each sample with its request
    texts = [side.encoder.decode(c.token_ids) for _, c in samples]
    rewards = torch.tensor(side.reward(texts, [examples[r.request_id].row for r, _ in samples]),
                           dtype=torch.float32)  # [N]
    advantages = compute_advantages(cfg.algorithm.advantage, rewards, group_size=cfg.rollout.n)  # [N]
    t1, c1 = time.perf_counter(), cpu_clock()
    batch = collate([r.prompt_token_ids for r, _ in samples], [c.token_ids for _, c in samples],
                    [c.logprobs for _, c in samples], advantages, side.learner.pad_id)
    corrected = importance_ratio_applies(cfg, stale=rollout.version < rollout.step)  # stale or mixed precision
    train_metrics = side.learner.step(batch, is_cap=cfg.algorithm.is_cap if corrected else None, rewards=rewards,
                                      audit=audit_rows(rollout, cfg, len(samples)))
    t2, c2 = time.perf_counter(), cpu_clock()
    lens = np.array([len(c.token_ids) for _, c in samples])
    stats, gen_s = rollout.stats, rollout.wall_s
    row = {"step": rollout.step + 1, "reward_mean": float(rewards.mean()),
           "reward_std": float(rewards.std(unbiased=False)), "accuracy": float((rewards >= 1.0).float().mean()),
           "response_len_p50": float(np.percentile(lens, 50)), "response_len_p99": float(np.percentile(lens, 99)),
           "gen_tokens_per_s": stats["generated_tokens"] / max(gen_s, 1e-9),
           "acceptance_length": stats["acceptance_length"], "acceptance_rate": stats["acceptance_rate"],
           "target_forwards": stats["target_forwards"], "generated_tokens": stats["generated_tokens"],
           **{k: stats[k] for k in ROW_STATS if k in stats}, **train_metrics}
    times = {"rollout_s": gen_s, "rollout_cpu_s": rollout.cpu_s, "reward_s": t1 - t0, "reward_cpu_s": c1 - c0,
             "train_s": t2 - t1, "train_cpu_s": c2 - c1}
    firsts = [j for j, (r, c) in enumerate(samples) if c is r.outputs[0]][:cfg.log_samples]  # a sample a request
    row[SAMPLES_KEY] = [{"step": rollout.step + 1, "prompt": examples[samples[j][0].request_id].prompt,
                         "completion": texts[j], "answer": examples[samples[j][0].request_id].answer,
                         "reward": float(rewards[j]), "tokens": len(samples[j][1].token_ids)} for j in firsts]
    return row, times


def audit_rows(rollout: Rollout, cfg: TrainConfig, num_rows: int) -> AuditRows | None:
    """The rows the sampler audit tests: every row, or `rollout.audit_groups` groups drawn from the run's seed and
    the step alone (never from rewards), with the one version that sampled them (None when several did)."""
    ro = cfg.rollout
    if ro.audit == "off":
        return None
    groups = choose_groups(len(rollout.outputs), ro.audit_groups, step_seed(cfg.seed, rollout.step, salt=AUDIT_SALT))
    one_version = rollout.newest_version == rollout.version
    return AuditRows(group_rows(groups, ro.n, num_rows), rollout.version if one_version else None)


def sync_weights(learner: Learner, backend: RolloutBackend) -> None:
    backend.update_weights(learner.named_weights(), learner.version)


def sync_drafter(learner: Learner, backend: RolloutBackend, force: bool = False) -> float:
    """The backend takes the learner's online drafter when it is newer -> seconds."""
    version = learner.drafter_version
    if version is None or (version == backend.drafter_version and not force):
        return 0.0
    t0 = time.perf_counter()
    backend.update_drafter(learner.drafter_weights(), version)
    return time.perf_counter() - t0


def check_signal(parts: Parts, row: dict, bar: StepProgress) -> None:
    """Warns when every sample's reward was the same for FLAT_REWARD_STEPS steps in a row (then again every
    10): zero advantages, so the policy does not learn (a reward that never matches the policy's format)."""
    parts.flat_reward_steps = parts.flat_reward_steps + 1 if row["reward_std"] == 0 else 0
    n = parts.flat_reward_steps
    if n >= FLAT_REWARD_STEPS and (n - FLAT_REWARD_STEPS) % 10 == 0:
        bar.log(f"WARNING step {row['step']}: every sample's reward was {row['reward_mean']:g} for the last {n} "
                f"steps: no learning signal (zero advantages). Read {SAMPLES_FILE} in the run directory to see "
                "what the policy writes, and check reward.name against it")


def check_sampler(run: RunDir, parts: Parts, cfg: TrainConfig, row: dict, bar: StepProgress) -> None:
    """The sampler audit's alarm on this step's row: its evidence joins the run's e-process (sampler_e, its log
    e-value; sampler_p, 1 / its running maximum), and at 1/alpha rollout.audit=on stops the run (this step is
    not checkpointed), fallback turns speculative decoding off for the rest of the run."""
    alarm = parts.sampler_alarm
    if alarm is None or "sampler_bets" not in row:
        return
    fired = alarm.update(StepEvidence.from_metrics(row))
    process = alarm.process
    row.update(sampler_e=process.log_e, sampler_p=process.p_value)
    if row.get("step_s"):
        row["sampler_share"] = row["sampler_s"] / row["step_s"]  # the audit's share of the step's seconds
    if not fired:
        return
    ro, spec = cfg.rollout, cfg.rollout.spec
    method = spec.method if spec.enabled else "off (plain sampling)"
    why = (f"{process.impossible} sampled token(s) had no mass under the policy" if process.impossible else
           f"its e-value is {math.exp(min(process.log_e, 700)):.3g} >= 1/alpha = {1 / alarm.alpha:g}")
    cause = (f"the sampler audit failed: {why} after {process.tokens} audited tokens (an exact sampler of "
             f"independent rows reaches 1/alpha with probability at most rollout.audit_alpha={alarm.alpha:g} over "
             f"the whole run; this step's PIT z = {row['sampler_z']:+.2f}): the rollouts of pipeline.backend={cfg.pipeline.backend} with "
             f"rollout.spec.method={method} were not drawn from the policy at temperature={ro.temperature}, "
             f"top_p={ro.top_p}, top_k={ro.top_k}")
    if ro.audit == "fallback" and spec.enabled and not parts.spec_disabled:
        parts.rollout.backend.disable_speculation()
        parts.spec_disabled = True
        alarm.reset()
        row["sampler_fallback"] = True
        bar.log(f"WARNING step {row['step']}: {cause}. rollout.audit=fallback: speculative decoding is off for "
                "the rest of the run")
        return
    raise stopped(run, row["step"] - 1, cause, "Check the backend's speculative sampler (or run with "
                  "rollout.spec.method=off); `specrl audit` tests a file of its completions; rollout.audit=off "
                  "turns this check off")


def row_times(times: dict) -> dict:
    """The wall seconds a metrics row carries (the CPU times go to rollout_workload.jsonl only)."""
    return {k: times[k] for k in (*TIME_KEYS, "step_s")}


def workload_row(rollout: Rollout, cfg: TrainConfig, times: dict) -> dict:
    """One rollout_workload.jsonl row: the step's shape, lengths, and wall and CPU seconds per stage."""
    ro = cfg.rollout
    samples = [(r.prompt_token_ids, c) for r in rollout.outputs for c in r.outputs]
    return {"step": rollout.step + 1, "prompt_lens": [len(p) for p, _ in samples],
            "response_lengths": [len(c.token_ids) for _, c in samples], "n": ro.n,
            "max_num_seqs": ro.max_num_seqs,  # the simulator pads micro-batches of this many rows; null: packed
            "micro_batch_size": None if cfg.optim.packing else cfg.optim.micro_batch_size,
            "method": ro.spec.method if ro.spec.enabled else None,
            "k": ro.spec.num_speculative_tokens if ro.spec.enabled else 0,
            "mode": cfg.pipeline.mode, "max_policy_lag": cfg.pipeline.max_policy_lag if cfg.pipeline.mode == "async"
            else 0, "version": rollout.version, **times}


def evaluate(parts: Parts, cfg: TrainConfig, backend: RolloutBackend) -> tuple[float, float]:
    """(Accuracy, mean reward) on the held-out examples, one completion each at `data.eval_temperature`, with a seed per
    example, so that evaluations are repeatable and lossless SD gives the same distribution as without it."""
    enc, reward, data = parts.rollout.encoder, parts.learner.reward, cfg.data
    temperature = cfg.rollout.temperature if data.eval_temperature is None else data.eval_temperature
    prompts = [enc.encode(e.prompt) for e in parts.held_out]
    params = [SamplingParams(temperature=temperature, top_p=cfg.rollout.top_p, top_k=cfg.rollout.top_k,
                             max_tokens=data.eval_max_tokens, seed=step_seed(cfg.seed, i, salt=EVAL_SALT))
              for i in range(len(prompts))]
    outs = backend.generate(prompts, params)
    scores = reward([enc.decode(o.outputs[0].token_ids) for o in outs], [e.row for e in parts.held_out])
    return sum(s >= 1.0 for s in scores) / len(scores), sum(scores) / len(scores)


def run_eval(run: RunDir, parts: Parts, cfg: TrainConfig, step: int, bar: StepProgress) -> float:
    """Held-out evaluation after `step` steps, logged to eval.jsonl; NaN with no held-out set."""
    if not parts.held_out:
        return float("nan")
    t0 = time.perf_counter()
    backend = parts.evaluator
    backend.set_trace_tags({"rl_step": step, "call": "eval"})  # after step `step`, so resume can truncate it
    acc, mean = evaluate(parts, cfg, backend)
    run.log({"step": step, "accuracy": acc, "reward_mean": mean, "eval_s": time.perf_counter() - t0,
             "problems": len(parts.held_out)}, "eval.jsonl")
    bar.log(f"step {step}: held-out accuracy {acc:.3f}, mean reward {mean:.3f} on {len(parts.held_out)} problems")
    return acc


def finish_step(run: RunDir, parts: Parts, cfg: TrainConfig, row: dict, bar: StepProgress,
                save_drafter: bool = True) -> None:
    """After a step's update: the reward and drafter alarms, the held-out evaluation when due (a separate eval
    backend gets the new weights first), the metrics row, and the checkpoint (with the drafter's state when
    `save_drafter`)."""
    sched, done = cfg.schedule, row["step"]
    learner = parts.learner.learner
    for sample in row.pop(SAMPLES_KEY, []):
        run.log(sample, SAMPLES_FILE, tensorboard=False)
    check_signal(parts, row, bar)
    if parts.health is not None:
        engine = parts.rollout.backend.drafter_version
        alarm, message = parts.health.check(row["acceptance_length"], engine, learner.drafter_version)
        row.update(drafter_version=engine, drafter_alarm=alarm)
        if alarm:
            bar.log(f"WARNING step {done}: drafter alarm: {message}")
    if parts.held_out and (done == sched.max_steps or (sched.eval_every and done % sched.eval_every == 0)):
        if parts.eval_backend is not None:
            sync_weights(learner, parts.eval_backend)
        row["eval_accuracy"] = run_eval(run, parts, cfg, done, bar)
    try:
        check_sampler(run, parts, cfg, row, bar)
    finally:
        run.log(row)  # a stopped run's last row still says why
        bar.update(row)
    if done == sched.max_steps or done % sched.save_every == 0:
        drafter = parts.rollout.backend.drafter_state() if save_drafter else None
        state = {"seed": cfg.seed}
        if parts.sampler_alarm is not None:
            state[SAMPLER_STATE] = parts.sampler_alarm.process.state_dict()
        save_checkpoint(run.path, done, learner.save, drafter, state, sched.keep_last)


def stopped(run: RunDir, step: int, cause: str, fix: str) -> RunStopped:
    """The error that ends a run at `step` (0-based), naming the last good checkpoint."""
    last = latest_checkpoint(run.path)
    return RunStopped(f"step {step + 1}: {cause}. The run stopped; the last good checkpoint is "
                      f"{str(last) if last else 'none (no step was saved yet)'}. {fix}")


def checked(fn: Callable, run: RunDir, step: int, *args):
    """fn(step, *args), with a NaN loss turned into RunStopped."""
    try:
        return fn(step, *args)
    except NonFiniteLossError as e:
        raise stopped(run, step, str(e), "Lower optim.lr or optim.grad_clip and resume, or check the rewards "
                      "for NaN") from e
