"""The seam between the pipeline drivers and what they drive: rollout backends and learners.

The drivers reach a rollout engine and a trainer only through these protocols, so in-process, Ray or vLLM
backends and single-process or sharded trainers plug in without touching them. Weights cross as (name,
tensor) pairs with a version (the policy after `version` steps). Optional capabilities (`CAPABILITIES`) are
checked once when a run is wired (`require`), not inside a step. `BACKENDS` factories are "module:attribute"
paths, imported only when that backend is built.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable, Iterable, Iterator, Protocol

import torch

from ..audit import AuditRows
from ..config import ConfigError
from ..engine import RequestOutput, SamplingParams
from ..model import CausalLM
from ..trainer.batch import TrainBatch

NamedTensors = Iterable[tuple[str, torch.Tensor]]


class RunStopped(RuntimeError):
    """The run stopped early (a NaN loss, a dead actor); the run directory and last good checkpoint are intact."""


class RolloutBackend(Protocol):
    """Generates rollouts with its own copy of the policy (and drafter); the local backend of a sync run may
    generate with the trainer's own model instead (nothing to copy at a weight sync)."""
    weights_version: int  # the policy version its weights hold (settable: a resumed run tags its start)
    drafter_version: int  # how many drafter updates its drafter holds (0: as loaded)

    def generate(self, prompts: list[list[int]], params: list[SamplingParams]) -> list[RequestOutput]:
        """One request per prompt, n completions each; raises GenerationCancelled after `cancel()`."""

    def update_weights(self, weights: NamedTensors, version: int) -> None:
        """New policy weights (HF parameter names), applied between engine steps."""

    def update_drafter(self, weights: NamedTensors, version: int) -> None:
        """New drafter weights; refused (the old drafter keeps serving) when they do not fit."""

    def stats(self) -> dict:
        """The engine's counters since the last reset_stats()."""

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
    pad_id: int  # the token that pads a TrainBatch

    def step(self, batch: TrainBatch, is_cap: float | None = None,
             rewards: torch.Tensor | None = None, audit: AuditRows | None = None) -> dict[str, float]:
        """One RL update on a batch of rollouts (rewards [N] per trajectory, for reward-weighted drafter
        training); returns its metrics, with the sampler audit's evidence on `audit`'s rows
        (`specrl.audit.StepEvidence.metrics`) when the learner could score them."""

    def named_weights(self) -> Iterator[tuple[str, torch.Tensor]]:
        """The current policy weights (HF names), detached; consumers copy what they keep."""

    def save(self, directory: Path) -> None:
        """Writes the policy (an HF directory under `model/`) and the optimizer state into `directory`."""

    def load(self, directory: Path) -> None:
        """Restores what `save` wrote."""


# Optional capabilities: what a driver uses only under some settings.

class OnlineDrafter(Protocol):
    """A learner that trains the rollout drafter online (rollout.drafter.online)."""

    def drafter_weights(self) -> list[tuple[str, torch.Tensor]]:
        """The online drafter's weights, for `RolloutBackend.update_drafter`."""

    def train_drafter(self) -> bool:
        """Runs a deferred drafter update (schedule long_tail); True when it ran (its weights are new)."""


class DrafterRefit(Protocol):
    """A backend that can take an online drafter's weights (rollout.drafter.online)."""
    refits_drafter: bool  # False: its drafter has no weights to replace (SD off, ngram, suffix)


class IdleWork(Protocol):
    """A backend that runs work in its rollout's long tail (rollout.drafter.schedule=long_tail)."""

    def set_idle_work(self, work: Callable[[], None] | None, max_running: int = 8) -> None:
        """`work()` runs once per generate(), as soon as at most `max_running` sequences are unfinished."""


class SharedPolicy(Protocol):
    """A learner whose policy module an in-process engine may generate with (a sync run: no second copy)."""
    policy: CausalLM


class SpecFallback(Protocol):
    """A backend that can turn speculative decoding off mid-run (rollout.audit=fallback)."""

    def disable_speculation(self) -> None:
        """Every later step decodes without drafts (the sampler's plain path)."""


CAPABILITIES = {"learner": (OnlineDrafter, SharedPolicy), "backend": (DrafterRefit, IdleWork, SpecFallback)}


def members(protocol: type) -> set[str]:
    names = {n for n in vars(protocol) if not n.startswith("_")}
    return names | set(getattr(protocol, "__annotations__", {}))


def lacks(part, protocol: type) -> list[str]:
    return sorted(n for n in members(protocol) if not hasattr(part, n))


def require(part, protocol: type, setting: str, fix: str) -> None:
    """Refuses, when the run is wired, a backend or learner without a capability its settings use."""
    if missing := lacks(part, protocol):
        raise ConfigError(f"{setting} needs a {protocol.__name__} ({', '.join(missing)}), which "
                          f"{type(part).__name__} does not provide; {fix}")


# counters a backend's stats() may add that the metrics row carries: a Ray backend's weight broadcast time
# (of the weights that generated the step), its rollout-actor restarts and redrawn groups so far, and the drafter
# version that served the step's rollout
ROW_STATS = ("weight_transfer_s", "actor_restarts", "dropped_groups", "drafter_served")


def group_version(out: RequestOutput, default: int) -> int:
    """A GRPO group's version: the oldest version any of its tokens was sampled under (a group is kept or
    dropped whole). `default` for a backend that does not tag its outputs."""
    tags = [c.oldest_version for c in out.outputs if c.weight_versions]
    return min(tags) if tags else default
