"""The asynchronous GRPO pipeline: rollouts overlap training, with bounded staleness.

A rollout worker thread generates step s with the policy of version max(start, s - max_policy_lag) while
the trainer (the calling thread) trains on the steps before; off-policy tokens get the truncated importance
ratio. The step number, not timing, fixes which version samples which step, so a run is reproducible and
max_policy_lag=0 equals the sync run. A failure on either side stops both; the suffix drafter's pools are not
checkpointed (the worker is past that step), so a resume rebuilds them. Evaluation runs on the trainer's
side with a second engine, so generation never pauses for it. In-flight updates: docs/ray.md.
"""
from __future__ import annotations

import logging
import os
import queue
import threading
import time
import warnings

import torch

from ..engine.llm import GenerationCancelled
from ..config.run import TrainConfig
from .progress import StepProgress
from .run_dir import RunDir
from .seam import Learner, NamedTensors
from .steps import (Parts, Rollout, checked, drop_stale, finish_step, generate_rollouts, learn, row_times, run_eval,
                    stopped, sync_drafter, workload_row)

log = logging.getLogger(__name__)

POLL_S = 0.2  # how often a blocked side checks whether the other one stopped


class PolicyVersions:
    """Weight snapshots by version, handed from the trainer to the rollout worker (with updates in flight,
    None: only the news that the version reached the backend)."""

    def __init__(self):
        self._cond = threading.Condition()
        self._states: dict[int, dict[str, torch.Tensor] | None] = {}
        self.closed = False  # the trainer stopped

    def publish(self, version: int, weights: NamedTensors | None) -> None:
        state = None if weights is None else {k: v.detach().clone() for k, v in weights}
        with self._cond:
            self._states[version] = state
            self._cond.notify_all()

    def take(self, version: int) -> dict[str, torch.Tensor] | None:
        """Blocks until `version` is published and hands it over (the worker takes each version once, in
        order); None once closed."""
        with self._cond:
            self._cond.wait_for(lambda: version in self._states or self.closed)
            return None if self.closed else self._states.pop(version)

    def close(self) -> None:
        with self._cond:
            self.closed = True
            self._cond.notify_all()


class RolloutWorker(threading.Thread):
    """Generates the steps [start, max_steps) in order, each with the weights of its version."""

    def __init__(self, parts: Parts, cfg: TrainConfig, start: int, versions: PolicyVersions, threads: int):
        super().__init__(name="specrl-rollout", daemon=True)
        self.parts, self.cfg, self.first, self.versions, self.threads = parts, cfg, start, versions, threads
        self.out: queue.Queue = queue.Queue()  # (Rollout, load timings) or the exception that stopped the worker

    def run(self) -> None:
        torch.set_num_threads(self.threads)
        loaded = self.first  # the engine starts with the weights the run starts from
        try:
            for step in range(self.first, self.cfg.schedule.max_steps):
                version = max(self.first, step - self.cfg.pipeline.max_policy_lag)
                t0 = time.perf_counter()
                state = self.versions.take(version) if version != loaded else None
                if self.versions.closed:
                    return  # the trainer stopped
                t1 = time.perf_counter()
                if state is not None:  # None with updates in flight: the trainer loaded them into the backend
                    self.parts.rollout.backend.update_weights(state.items(), version)
                loaded = version
                load = {"wait_weights_s": t1 - t0, "load_s": time.perf_counter() - t1}
                self.out.put((generate_rollouts(step, self.parts.rollout, self.cfg, version, time.thread_time), load))
        except GenerationCancelled:
            return  # the trainer stopped mid-generation
        except BaseException as e:  # noqa: BLE001 - handed to the trainer, which raises it as RunStopped
            self.out.put(e)


def stage_threads(cfg: TrainConfig, cores: int | None = None) -> tuple[int, int]:
    """Torch threads of the rollout worker and of the trainer: each stage gets its own half of the threads
    (2 cores: one each). Counts given past the machine's `cores` are used as given, with a warning."""
    cores = cores or len(os.sched_getaffinity(0))
    half = max(1, torch.get_num_threads() // 2)
    rollout, train = cfg.pipeline.rollout_threads or half, cfg.pipeline.train_threads or half
    if rollout + train > cores:
        warnings.warn(f"pipeline.rollout_threads={rollout} + pipeline.train_threads={train} > the {cores} cores "
                      "this process may use: the stages share cores and slow each other; used as given (set "
                      f"them to at most {cores} together, or 0 for half each)")
    log.info(f"async pipeline: rollout worker {rollout} thread(s), trainer {train} thread(s), on {cores} cores")
    return rollout, train


def run_async(run: RunDir, parts: Parts, cfg: TrainConfig, start: int, bar: StepProgress) -> None:
    """Trains steps [start, max_steps) on rollouts from a worker thread (see the module docstring)."""
    rollout_threads, train_threads = stage_threads(cfg)
    caller_threads = torch.get_num_threads()
    torch.set_num_threads(train_threads)
    if parts.eval_backend is None:
        raise ValueError("the async pipeline evaluates on its own backend (Parts.eval_backend), so the rollout "
                         "worker never pauses for it; build the parts with one")
    learner = parts.learner.learner
    if learner.drafter_version is not None:  # the engine starts from the trainer's drafter (scratch, resume)
        sync_drafter(learner, parts.rollout.backend, force=True)
    if start == 0:
        run_eval(run, parts, cfg, 0, bar)
    versions = PolicyVersions()
    worker = RolloutWorker(parts, cfg, start, versions, rollout_threads)
    worker.start()
    try:
        last = time.perf_counter()
        for step in range(start, cfg.schedule.max_steps):
            t0 = time.perf_counter()
            rollout, load = _next(worker, run, step)
            wait = time.perf_counter() - t0  # the trainer idles: rollout is the slower stage
            rollout, stale = drop_stale(rollout, cfg.pipeline.max_policy_lag)
            row, times = checked(learn_and_publish, run, step, rollout, parts, cfg, versions)
            # the stages overlap, so a step is the wall interval between two updates (no step_cpu_s)
            times.update(step_s=time.perf_counter() - last, wait_rollout_s=wait, rollout_threads=rollout_threads,
                         train_threads=train_threads, **load)
            row.update(row_times(times), wait_rollout_s=wait, policy_lag=step - rollout.version, stale_groups=stale)
            if cfg.pipeline.inflight_updates:
                lags = rollout.token_lags
                row.update(policy_lag_newest=step - rollout.newest_version, token_lags=lags,
                           token_lag_mean=sum(k * n for k, n in lags.items()) / max(sum(lags.values()), 1))
            if parts.workload_log is not None:
                parts.workload_log(workload_row(rollout, cfg, times))
            finish_step(run, parts, cfg, row, bar, save_drafter=False)
            last = time.perf_counter()  # evaluation and checkpoints are not part of the next step's time
    finally:
        versions.close()  # a worker blocked on weights stops; one mid-generation at its next engine step
        parts.rollout.backend.cancel()
        worker.join(timeout=60)
        torch.set_num_threads(caller_threads)
        if worker.is_alive():
            warnings.warn("the rollout worker did not stop within 60 s of the trainer; it is a daemon "
                          "thread and ends with the process")


def _next(worker: RolloutWorker, run: RunDir, step: int) -> tuple[Rollout, dict]:
    """The worker's rollouts for `step`, waiting for them; a worker failure stops the run."""
    item = None
    while item is None:
        try:
            item = worker.out.get(timeout=POLL_S)
        except queue.Empty:
            if not worker.is_alive() and worker.out.empty():  # not empty: its last item, put just before exiting
                item = RuntimeError("the rollout worker exited without producing this step")
    if isinstance(item, BaseException):
        raise stopped(run, step, f"the rollout worker failed: {type(item).__name__}: {item}",
                      "Fix the cause and resume from it") from item
    rollout, load = item
    if rollout.step != step:
        raise RuntimeError(f"internal error: the rollouts of step {rollout.step + 1} arrived for step {step + 1}")
    return rollout, load


def learn_and_publish(step: int, rollout: Rollout, parts: Parts, cfg: TrainConfig,
                      versions: PolicyVersions) -> tuple[dict, dict]:
    row, times = learn(rollout, parts.learner, cfg, time.thread_time)
    t1, c1 = time.perf_counter(), time.thread_time()
    learner: Learner = parts.learner.learner
    inflight = cfg.pipeline.inflight_updates
    if inflight and step + 1 < cfg.schedule.max_steps:  # a rollout still to come or running may sample from them
        parts.rollout.backend.update_weights(learner.named_weights(), step + 1)  # taken between engine steps
    if step + 1 + cfg.pipeline.max_policy_lag < cfg.schedule.max_steps:  # = that step's version
        versions.publish(step + 1, None if inflight else learner.named_weights())  # a later rollout's weights
    # beside_trainer: the drafter trained after the update on this side; the worker's engine swaps it in
    # between two engine steps of whatever it is generating
    if learner.drafter_version is not None:
        row["drafter_sync_s"] = sync_drafter(learner, parts.rollout.backend)
    times.update(sync_s=time.perf_counter() - t1, sync_cpu_s=time.thread_time() - c1)
    return row, times
