"""`specrl train`: builds the two sides of the pipeline through the seam and runs the driver the config picks."""
from __future__ import annotations

import random
from pathlib import Path

import torch

from ..audit import SamplerAlarm
from ..config import ConfigError, dump_yaml
from ..config.run import TrainConfig
from ..drafters.training.health import DrafterHealth
from ..engine.methods import trainable_methods
from ..model import resolve_dtype
from ..model.checkpoint import read_config
from ..registry import load
from ..trainer.checkpoint import FILE_ERRORS, READ_ERRORS, Checkpoint, latest_checkpoint, load_checkpoint, unreadable
from ..trainer.data import Example, PromptEncoder, PromptSource, build_sources
from ..trainer.precision import resolve_precision
from ..trainer.rewards import resolve_reward
from .progress import StepProgress
from .run_dir import TRACE_FILE, WORKLOAD_FILE, RunDir, read_jsonl
from .backends import IN_PROCESS_ENGINE, get_backend
from .seam import (DrafterRefit, IdleWork, OnlineDrafter, SharedPolicy, SpecFallback, lacks, require)
from .steps import SAMPLER_STATE, LearnerSide, Parts, RolloutSide

# pipeline.mode -> its driver, run(run_dir, parts, cfg, start, bar); the keys are config.choices.PIPELINE_MODES
DRIVERS = {"sync": "specrl.pipeline.sync:run_sync", "async": "specrl.pipeline.asynchronous:run_async"}


def model_dir(cfg: TrainConfig) -> Path:
    if cfg.model is not None:
        return Path(cfg.model)
    from ..tasks import default_policy_path
    return default_policy_path()


def build_parts(cfg: TrainConfig, weights_dir: Path, source: PromptSource, held_out: list[Example],
                version: int = 0, trace_path: Path | None = None) -> Parts:
    """Both sides over the weights in `weights_dir` (the base policy, or a checkpoint's model/)."""
    resolve_precision(cfg, read_config(model_dir(cfg)))  # direct callers; train() has resolved it already
    backend_row = get_backend(cfg.pipeline.backend)
    encoder = PromptEncoder(model_dir(cfg), cfg.data.chat_template)
    learner = load(backend_row.learner)(weights_dir, cfg, version, tokenizer_dir=model_dir(cfg))
    shared = {"policy": learner.policy} if _shares_policy(cfg) and not lacks(learner, SharedPolicy) else {}
    backend = load(backend_row.rollout)(weights_dir, cfg, trace_path, **shared)  # shared: no second copy
    backend.weights_version = version
    try:
        check_capabilities(cfg, learner, backend)
    except ConfigError:
        backend.close()  # e.g. Ray actors
        raise
    eval_backend = (load(get_backend(IN_PROCESS_ENGINE).rollout)(weights_dir, cfg) if cfg.pipeline.mode == "async"
                    else None)
    model_drafter = cfg.rollout.spec.method in trainable_methods() or cfg.rollout.drafter.online
    health = DrafterHealth(cfg.rollout.drafter.health) if model_drafter else None
    alarm = SamplerAlarm(cfg.rollout.audit_alpha) if cfg.rollout.audit != "off" else None
    return Parts(RolloutSide(backend, source, encoder),
                 LearnerSide(learner, resolve_reward(cfg.reward.name, cfg.reward.fn), encoder), held_out, eval_backend,
                 health=health, sampler_alarm=alarm)


def check_capabilities(cfg: TrainConfig, learner, backend) -> None:
    """The optional capabilities (seam.CAPABILITIES) this run's settings make the drivers use."""
    fix = f"use pipeline.backend=local, or drop the setting (pipeline.backend={cfg.pipeline.backend})"
    if cfg.rollout.drafter.online:
        require(learner, OnlineDrafter, "rollout.drafter.online=true", fix)
        if cfg.rollout.drafter.schedule == "long_tail":
            require(backend, IdleWork, "rollout.drafter.schedule=long_tail", fix)
        require(backend, DrafterRefit, "rollout.drafter.online=true", fix)
        if not backend.refits_drafter:
            raise ConfigError(f"rollout.drafter.online=true needs a drafter with weights in the rollout engine, but "
                              f"pipeline.backend={cfg.pipeline.backend} serves rollout.spec.method="
                              f"{cfg.rollout.spec.method} without one it can refit: set rollout.spec.method=eagle3 "
                              "(or draft_model), or drop rollout.drafter.online")
    if cfg.rollout.audit == "fallback" and cfg.rollout.spec.enabled:
        require(backend, SpecFallback, "rollout.audit=fallback", "or use rollout.audit=on (stop the run)")


def _shares_policy(cfg: TrainConfig) -> bool:
    """A sync run with an in-process engine in the trainer's dtype: rollout and training never overlap, so
    the engine can generate with the trainer's own model (weight syncs then copy nothing). Not with an online
    drafter: its weights are synced into the engine's drafter, which for MTP is the policy's own `mtp` stack
    (a shared model would have the trainer's MTP update overwritten)."""
    return (cfg.pipeline.mode == "sync" and get_backend(cfg.pipeline.backend).in_process
            and resolve_dtype(cfg.rollout.dtype or cfg.dtype) == resolve_dtype(cfg.dtype)
            and not cfg.rollout.drafter.online)


def train(cfg: TrainConfig) -> dict:
    """Runs `specrl train`; returns a summary (initial/final held-out accuracy, steps, run dir)."""
    if cfg.num_threads:
        torch.set_num_threads(cfg.num_threads)
    random.seed(cfg.seed)
    torch.manual_seed(cfg.seed)
    # bad names and bad data fail before the run directory is touched
    reward = resolve_reward(cfg.reward.name, cfg.reward.fn)
    backend_row = get_backend(cfg.pipeline.backend)
    if backend_row.check is not None:
        load(backend_row.check)()  # e.g. without Ray: how to install it
    source, held_out = build_sources(cfg.data, cfg.seed, reward.columns, reward.source)
    check_context(cfg, held_out)
    precision = resolve_precision(cfg, read_config(model_dir(cfg)))  # before config.yaml records the config
    run, ckpt = _start(cfg)
    if precision is not None:
        run.record_precision(precision.to_json())
    start = 0 if ckpt is None else ckpt.step
    try:
        parts = build_parts(cfg, model_dir(cfg) if ckpt is None else ckpt.model_dir, source, held_out, start,
                            run.path / TRACE_FILE if cfg.rollout.trace else None)
    except FILE_ERRORS as e:
        if ckpt is None:
            raise
        raise unreadable(ckpt.path, e) from e
    if cfg.rollout.trace:
        parts.workload_log = lambda row: run.log(row, WORKLOAD_FILE, tensorboard=False)
    if ckpt is not None:
        _restore(parts, ckpt, run.path / "metrics.jsonl")
    bar = StepProgress(cfg.schedule.max_steps, start, cfg.progress)
    try:
        load(DRIVERS[cfg.pipeline.mode])(run, parts, cfg, start, bar)
    finally:
        bar.close()
        run.close()
        for backend in {id(b): b for b in (parts.rollout.backend, parts.evaluator)}.values():
            backend.close()
        if cfg.plots:
            run.plot()
    return _summary(run)


def check_context(cfg: TrainConfig, held_out: list[Example]) -> None:
    """Refuses, before the run directory is touched, a response budget the policy's context cannot hold (it
    would cut every long response short). The held-out prompts stand for the training ones."""
    context = read_config(model_dir(cfg)).max_position_embeddings
    encoder = PromptEncoder(model_dir(cfg), cfg.data.chat_template)
    prompt = max((len(encoder.encode(e.prompt)) for e in held_out[:64]), default=1)
    for key, value in (("rollout.max_tokens", cfg.rollout.max_tokens),
                       ("data.eval_max_tokens", cfg.data.eval_max_tokens)):
        if prompt + value > context:
            raise ConfigError(f"{key}={value} is invalid: with prompts of up to {prompt} tokens it needs "
                              f"{prompt + value} positions, but the policy's context is {context} "
                              f"(max_position_embeddings in {model_dir(cfg)}/config.json): lower {key} to at most "
                              f"{context - prompt}, or train a policy with a longer context")


def _start(cfg: TrainConfig) -> tuple[RunDir, Checkpoint | None]:
    """The run directory and the checkpoint to restore (None for a new run)."""
    if cfg.resume is None:
        return RunDir.create(cfg.out_dir, cfg, cfg.tensorboard), None
    run = RunDir.open(cfg.resume, cfg.tensorboard)
    path = latest_checkpoint(run.path)
    if path is None:
        raise FileNotFoundError(f"run {cfg.resume!r} has no complete checkpoint to resume from; start a new run "
                                "(or lower schedule.save_every next time)")
    ckpt = load_checkpoint(path)
    run.truncate(ckpt.step)
    dump_yaml(cfg, run.path / "config.yaml")  # e.g. a raised max_steps
    return run, ckpt


def _restore(parts: Parts, ckpt: Checkpoint, metrics: Path) -> None:
    """The optimizer state and torch RNG into the learner, the drafter's state into the rollout engine, the
    sampler audit's e-process from the checkpoint, and a fallback that turned SD off replayed from the run's
    `metrics` rows, so that a resumed run continues the uninterrupted run's test."""
    try:
        parts.learner.learner.load(ckpt.path)
    except READ_ERRORS as e:
        raise unreadable(ckpt.path, e) from e
    if ckpt.drafter is not None and parts.rollout.backend.drafter_state() is not None:
        parts.rollout.backend.load_drafter_state(ckpt.drafter)
    if parts.sampler_alarm is None:
        return
    if any(row.get("sampler_fallback") for row in read_jsonl(metrics)):
        parts.rollout.backend.disable_speculation()
        parts.spec_disabled = True
    if SAMPLER_STATE in ckpt.state:  # a checkpoint of a run with the audit off starts a new test
        parts.sampler_alarm.process.load_state_dict(ckpt.state[SAMPLER_STATE])


def _summary(run: RunDir) -> dict:
    rows, evals = read_jsonl(run.path / "metrics.jsonl"), read_jsonl(run.path / "eval.jsonl")
    return {"run_dir": str(run.path), "steps": rows[-1]["step"] if rows else 0,
            "eval_accuracy_initial": evals[0]["accuracy"] if evals else None,
            "eval_accuracy_final": evals[-1]["accuracy"] if evals else None,
            "train_s": sum(r["step_s"] for r in rows), "eval_s": sum(e["eval_s"] for e in evals)}
