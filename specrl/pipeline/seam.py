"""The seam between the pipeline drivers and what they drive: rollout backends and learners.

The drivers (sync.py, asynchronous.py) talk to a rollout engine and to a trainer only through these two
protocols, so an in-process engine, a Ray actor or a vLLM/SGLang adapter, and a single-process or sharded
trainer, plug in without touching the drivers. Weights cross the seam as (name, tensor) pairs with a
version number (the policy after `version` training steps), the way verl's `update_weights` and
OpenRLHF's weight broadcasts carry them.

Backends are looked up by name (`rollout.backend`); `register_backend` adds one, e.g. in a test.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable, Iterable, Iterator, Protocol

import torch

from ..config import ConfigError
from ..engine import RequestOutput, SamplingParams
from ..train.trainer import TrainBatch

NamedTensors = Iterable[tuple[str, torch.Tensor]]


class RolloutBackend(Protocol):
    """Generates rollouts with its own copy of the policy (and drafter); the local backend of a sync run may
    generate with the trainer's own model instead (nothing to copy at a weight sync)."""
    weights_version: int  # the policy version its weights hold
    drafter_version: int  # how many drafter updates its drafter holds (0: as loaded)

    def generate(self, prompts: list[list[int]], params: list[SamplingParams]) -> list[RequestOutput]:
        """One request per prompt, n completions each; raises GenerationCancelled after `cancel()`."""

    def update_weights(self, weights: NamedTensors, version: int) -> None:
        """New policy weights (HF parameter names), applied between engine steps."""

    def update_drafter(self, weights: NamedTensors, version: int) -> None:
        """New drafter weights; refused (the old drafter keeps serving) when they do not fit."""

    def stats(self) -> dict:
        """The engine's counters since the last reset_stats() (generated_tokens, acceptance_length, ...)."""

    def reset_stats(self) -> None: ...

    def set_trace_tags(self, tags: dict) -> None:
        """Tags written on every engine-trace row from now on (e.g. the RL step)."""

    def cancel(self) -> None:
        """Stops a generate() in flight at its next engine step, and every later one (sticky)."""

    def drafter_state(self) -> dict | None:
        """The drafter's cross-step state for a checkpoint (a state tree), or None when it has none."""

    def load_drafter_state(self, state: dict) -> None: ...

    def close(self) -> None: ...


class Learner(Protocol):
    """Owns the policy being trained and its optimizer."""
    version: int  # training steps applied
    drafter_version: int | None  # online drafter updates applied; None without online drafter training

    def step(self, batch: TrainBatch, is_cap: float | None = None, rewards: torch.Tensor | None = None) -> dict[str, float]:
        """One RL update on a batch of rollouts (rewards [N] per trajectory, for reward-weighted drafter
        training); returns its metrics."""

    def drafter_weights(self) -> list[tuple[str, torch.Tensor]]:
        """The online drafter's weights, for `RolloutBackend.update_drafter`."""

    def named_weights(self) -> Iterator[tuple[str, torch.Tensor]]:
        """The current policy weights (HF names), detached; consumers copy what they keep."""

    def save(self, directory: Path) -> None:
        """Writes the policy (an HF directory under `model/`) and the optimizer state into `directory`."""

    def load(self, directory: Path) -> None:
        """Restores what `save` wrote (the policy weights and the optimizer state)."""


# counters a backend's stats() may add that the metrics row carries: a Ray backend's weight broadcast time
# (of the weights that generated the step), its rollout-actor restarts and redrawn groups so far
ROW_STATS = ("weight_transfer_s", "actor_restarts", "dropped_groups")

BackendFactory = Callable[..., RolloutBackend]
BACKENDS: dict[str, BackendFactory] = {}


def register_backend(name: str):
    def deco(factory: BackendFactory) -> BackendFactory:
        BACKENDS[name] = factory
        return factory
    return deco


def backend_factory(name: str) -> BackendFactory:
    if name not in BACKENDS:
        from . import local  # noqa: F401 - registers "local"
        from .cluster import rollout  # noqa: F401 - registers "ray" (imports Ray only when one is built)
    if name not in BACKENDS:
        raise ConfigError(f"rollout.backend={name!r} is not a rollout backend; valid: {sorted(BACKENDS)}")
    return BACKENDS[name]
