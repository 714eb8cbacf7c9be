"""`RayRolloutBackend`: one rollout backend over N rollout actors, for the drivers it is one engine.

generate() splits a step's prompts into contiguous runs, one per actor, so a GRPO group never splits, and
gathers the outputs back in prompt order. Per-prompt seeds fix each group's samples whichever actor draws
them, so the run matches an in-process one. Each weight version goes into Ray's object store once; a rollout
actor that dies mid-step is restarted with the current weights and its prompts generated again, up to
`ray.max_restarts`. How and why: docs/ray.md. `RolloutActor` is a plain class, made remote (`connect.placed`)
only when Ray is in use: an actor owns one in-process engine (the "local" backend's) and its drafter.
"""
from __future__ import annotations

import contextlib
import threading
import time
from pathlib import Path

import torch

from ...config.run import TrainConfig
from ...engine import RequestOutput, SamplingParams
from ...engine.llm import GenerationCancelled
from ..local import local_backend
from ..seam import NamedTensors, RunStopped, group_version
from .connect import placed, release

POLL_S = 0.2  # how often a waiting generate() checks for cancel()


def merge_stats(parts: list[dict]) -> dict:
    """Engine counters of several actors as one engine's: the counters summed, the ratios recomputed from the
    summed counts (token-weighted, as one engine would)."""
    if not parts:
        return {}
    out = {k: sum(p[k] for p in parts) for k, v in parts[0].items() if isinstance(v, (int, float))}
    out["acceptance_length"] = out.get("decode_tokens", 0) / max(out.get("seq_forwards", 0), 1)
    out["acceptance_rate"] = out.get("accepted_tokens", 0) / max(out.get("draft_tokens", 0), 1)
    rates = [p.get("acceptance_rate_per_pos", []) for p in parts]
    columns = [[r[i] for r in rates if len(r) > i] for i in range(max(map(len, rates)))]
    out["acceptance_rate_per_pos"] = [sum(c) / len(c) for c in columns]  # a mean: the rates lack each actor's drafts
    return out


class WeightsRef:
    """Named tensors that live in Ray's object store: backends pass the reference on, others iterate it."""

    def __init__(self, ref):
        self.ref = ref

    def __iter__(self):
        import ray
        return iter(ray.get(self.ref).items())


class ActorFailed(RunStopped):
    """A rollout actor died more often than `ray.max_restarts` allows (the run stops; its directory is intact)."""


class RolloutActor:
    def __init__(self, model_dir: str | Path, cfg: TrainConfig, threads: int):
        torch.set_num_threads(threads)
        self.backend = local_backend(model_dir, cfg)  # the engine a Ray actor builds for itself
        self._busy = threading.Event()

    def generate(self, prompts: list[list[int]], params: list, tags: dict) -> tuple[list, dict, int]:
        """(outputs, the engine's counters over this call, the weights version that generated them)."""
        self._busy.set()
        try:
            self.backend.reset_stats()
            self.backend.set_trace_tags(tags)
            outs = self.backend.generate(prompts, params)
            return outs, self.backend.stats(), self.backend.weights_version
        finally:
            self._busy.clear()

    def busy(self) -> bool:
        return self._busy.is_set()

    def update_weights(self, weights: dict[str, torch.Tensor], version: int) -> None:
        self.backend.update_weights(weights.items(), version)

    def set_version(self, version: int) -> None:
        self.backend.weights_version = version

    def update_drafter(self, weights: dict[str, torch.Tensor], version: int) -> None:
        self.backend.update_drafter(weights.items(), version)

    def cancel(self) -> None:
        self.backend.cancel()

    def drafter_state(self) -> dict | None:
        return self.backend.drafter_state()

    def load_drafter_state(self, state: dict) -> None:
        self.backend.load_drafter_state(state)

    def close(self) -> None:
        self.backend.close()


class RayRolloutBackend:
    def __init__(self, make_actor, num_actors: int, max_restarts: int):
        self._make = make_actor  # slot -> a fresh actor handle
        self.actors = [make_actor(i) for i in range(num_actors)]
        self.max_restarts = max_restarts
        self.restarts = [0] * num_actors
        self._version, self.drafter_version = 0, 0
        self._weights = self._drafter = None  # (object ref, version) a restarted actor loads
        self._stats: dict = {}
        self._transfer_s = 0.0
        self._cancelled = False
        self._tags: dict = {}
        self._dropped = 0  # groups drawn by an older policy version than the backend's, and drawn again
        self._restart_lock = threading.Lock()  # a broadcast (trainer thread) and generate() may both restart

    @property
    def weights_version(self) -> int:
        return self._version

    @weights_version.setter
    def weights_version(self, version: int) -> None:
        import ray
        ray.get([a.set_version.remote(version) for a in self.actors])
        self._version = version

    def generate(self, prompts: list[list[int]], params: list[SamplingParams]) -> list[RequestOutput]:
        import ray
        if self._cancelled:
            raise GenerationCancelled("generate() was cancelled")
        results: list[RequestOutput | None] = [None] * len(prompts)
        floor = self._version  # newer weights may arrive during the call (in flight), never older ones
        stats = []
        pending = {}  # ref -> (slot, its prompts' indices, the actor asked)

        def submit(slot: int, idx: range) -> None:
            actor = self.actors[slot]
            ref = actor.generate.remote([prompts[i] for i in idx], [params[i] for i in idx], self._tags)
            pending[ref] = slot, idx, actor
        n, k = len(prompts), len(self.actors)
        for slot in range(k):  # step 1: contiguous runs of prompts, one per actor
            if len(idx := range(n * slot // k, n * (slot + 1) // k)):
                submit(slot, idx)
        while pending:  # step 2: gather as actors finish; a dead actor's prompts go to its replacement
            ready, _ = ray.wait(list(pending), num_returns=1, timeout=POLL_S)
            if self._cancelled:
                raise GenerationCancelled("generate() was cancelled")
            for ref in ready:
                slot, idx, actor = pending.pop(ref)
                try:
                    outs, st, version = ray.get(ref)
                except ray.exceptions.RayActorError as e:
                    self._restart(slot, e, actor)
                    submit(slot, idx)
                    continue
                except ray.exceptions.RayTaskError as e:
                    raise e.as_instanceof_cause() from None  # e.g. a bad prompt: the engine's own error
                version = min((group_version(o, version) for o in outs), default=version)
                if version < floor:  # sampled by weights older than the call's: draw these groups again
                    self._dropped += len(idx)
                    self._resync(slot, version)
                    submit(slot, idx)
                    continue
                for i, out in zip(idx, outs):
                    out.request_id = i  # the actor numbered its own prompts from 0
                    results[i] = out
                stats.append(st)
        self._stats = merge_stats(stats)
        return results

    def _resync(self, slot: int, version: int) -> None:
        """An actor whose groups came from another version than the backend's takes the backend's weights."""
        import ray
        if self._weights is None or self._weights[1] != self._version:
            raise RuntimeError(f"rollout actor {slot} generated with policy version {version}, the backend holds "
                               f"{self.weights_version} without its weights: set weights_version only through "
                               "update_weights")
        ray.get(self.actors[slot].update_weights.remote(*self._weights))

    def _restart(self, slot: int, error: Exception, dead) -> None:
        """A fresh actor in `slot` instead of `dead`, with the current weights; one that dies while loading
        them counts too. Nothing to do when another thread replaced `dead` already."""
        import ray
        with self._restart_lock:
            while self.actors[slot] is dead:
                self.restarts[slot] += 1
                if self.restarts[slot] > self.max_restarts:
                    raise ActorFailed(f"rollout actor {slot} died {self.restarts[slot]} times (ray.max_restarts="
                                      f"{self.max_restarts}); its last error: {type(error).__name__}: {error}. Fix "
                                      "the cause (e.g. memory: lower rollout.max_num_seqs) or raise ray.max_restarts, "
                                      "and resume the run from its last checkpoint (resume=RUN_DIR)")
                ray.kill(dead, no_restart=True)
                self.actors[slot] = actor = self._make(slot)
                # one call at a time: the actor is threaded, and a version tag must not overtake its weights
                loads = [(actor.update_weights, self._weights) if self._weights is not None else
                         (actor.set_version, (self._version,))]
                loads += [(actor.update_drafter, self._drafter)] if self._drafter is not None else []
                try:
                    for method, args in loads:
                        ray.get(method.remote(*args))
                except ray.exceptions.RayActorError as e:
                    error, dead = e, actor

    def _broadcast(self, method: str, ref) -> None:
        """Every actor loads the weights behind `ref` (a dead one is restarted, and loads them then)."""
        import ray
        actors = list(self.actors)
        for slot, done in enumerate([getattr(a, method).remote(*ref) for a in actors]):
            try:
                ray.get(done)
            except ray.exceptions.RayActorError as e:
                self._restart(slot, e, actors[slot])

    @staticmethod
    def _put(weights: NamedTensors):
        import ray
        return weights.ref if isinstance(weights, WeightsRef) else ray.put(dict(weights))

    def update_weights(self, weights: NamedTensors, version: int) -> None:
        t0 = time.perf_counter()
        self._weights = (self._put(weights), version)
        self._broadcast("update_weights", self._weights)
        self._transfer_s = time.perf_counter() - t0  # the object store's put and every actor's load
        self._version = version

    # the actors' in-process engines swap a model drafter between engine steps; a model-free one is refused
    # when the learner builds its online drafter (engine.methods.model_method)
    refits_drafter = True

    def update_drafter(self, weights: NamedTensors, version: int) -> None:
        self._drafter = (self._put(weights), version)
        self._broadcast("update_drafter", self._drafter)
        self.drafter_version = version

    def stats(self) -> dict:  # the last generate()'s merged counters, with seam.ROW_STATS
        return {**self._stats, "weight_transfer_s": self._transfer_s, "actor_restarts": sum(self.restarts),
                "dropped_groups": self._dropped}

    def reset_stats(self) -> None:
        self._stats = {}

    def set_trace_tags(self, tags: dict) -> None:
        self._tags = dict(tags)

    def cancel(self) -> None:
        self._cancelled = True
        for a in self.actors:
            a.cancel.remote()

    def drafter_state(self) -> dict | None:
        import ray
        return ray.get(self.actors[0].drafter_state.remote())  # the actors' states differ; one is enough

    def load_drafter_state(self, state: dict) -> None:
        import ray
        ray.get([a.load_drafter_state.remote(state) for a in self.actors])

    def close(self) -> None:
        import ray
        for a in self.actors:
            with contextlib.suppress(Exception):  # a dead actor has nothing left to close
                ray.get(a.close.remote(), timeout=30)
            ray.kill(a)
        release()


def ray_backend(model_dir: str | Path, cfg: TrainConfig, trace_path: Path | None = None) -> RayRolloutBackend:
    """`ray.rollout_actors` in-process engines over `model_dir` (their engine traces are not collected)."""
    rc = cfg.ray
    make = placed(rc, "rollout", RolloutActor, num_cpus=rc.rollout_cpus, num_gpus=rc.rollout_gpus, max_concurrency=4)
    threads = max(1, int(rc.rollout_cpus))
    return RayRolloutBackend(lambda slot: make(slot, str(model_dir), cfg, threads), rc.rollout_actors,
                             rc.max_restarts)
