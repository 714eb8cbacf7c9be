"""The synchronous GRPO driver: rollout (with speculative decoding), reward, advantages, train, weight sync.

Each step the rollout backend generates with the current weights, the learner updates the policy, and the
backend takes the new weights before the next step. It talks to both only through the seam (seam.py).
"""
from __future__ import annotations

import time

from ..config.run import TrainConfig
from .progress import StepProgress
from .run_dir import RunDir
from .steps import (Parts, checked, finish_step, generate_rollouts, learn, row_times, run_eval, sync_drafter,
                    sync_weights, workload_row)


def rl_step(step: int, parts: Parts, cfg: TrainConfig) -> dict:
    """One synchronous RL step; returns its metrics row. `step` counts completed steps before this one."""
    t0, c0 = time.perf_counter(), time.process_time()
    learner, backend = parts.learner.learner, parts.rollout.backend
    rollout = generate_rollouts(step, parts.rollout, cfg, version=step)
    if learner.drafter_version is not None and learner.train_drafter():  # long_tail: the tail was never reached
        sync_drafter(learner, backend)
    row, times = learn(rollout, parts.learner, cfg)
    t1, c1 = time.perf_counter(), time.process_time()
    sync_weights(learner, backend)  # the engine gets the new weights
    drafter_sync_s = sync_drafter(learner, backend)  # and the new drafter (after_step)
    t2, c2 = time.perf_counter(), time.process_time()
    times.update(sync_s=t2 - t1, sync_cpu_s=c2 - c1, step_s=t2 - t0, step_cpu_s=c2 - c0)
    if learner.drafter_version is not None:
        row["drafter_sync_s"] = drafter_sync_s
    if parts.workload_log is not None:  # what the simulator needs to replay this step (cfg.rollout.trace)
        parts.workload_log(workload_row(rollout, cfg, times))
    return {**row, **row_times(times)}


def run_sync(run: RunDir, parts: Parts, cfg: TrainConfig, start: int, bar: StepProgress) -> None:
    """Trains steps [start, max_steps): rollout, learn, sync, one after the other."""
    learner, backend = parts.learner.learner, parts.rollout.backend
    if learner.drafter_version is not None:
        sync_drafter(learner, backend, force=True)  # the engine starts from the trainer's drafter (scratch, resume)
        if cfg.rollout.drafter.schedule == "long_tail":
            backend.set_idle_work(lambda: learner.train_drafter() and sync_drafter(learner, backend),
                                  cfg.rollout.drafter.tail_max_running)
    if start == 0:
        run_eval(run, parts, cfg, 0, bar)
    for step in range(start, cfg.schedule.max_steps):
        row = checked(rl_step, run, step, parts, cfg)
        finish_step(run, parts, cfg, row, bar)
