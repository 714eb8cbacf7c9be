"""`pipeline.backend`'s values: each backend's rollout and learner factories, named by "module:attribute" and
imported only when a run picks it (specrl.registry.load). A table above its backends: none of them imports it,
so the names in it make no import circle with the seam they implement."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ..config import ConfigError


@dataclass(frozen=True)
class Backend:
    """One value of `pipeline.backend`: each factory as "module:attribute" (or a callable, for tests)."""
    rollout: str | Callable  # (model_dir, cfg, trace_path=None[, policy=]) -> RolloutBackend
    learner: str | Callable  # (model_dir, cfg, version, tokenizer_dir=) -> Learner
    in_process: bool = False  # both sides in this process: a sync run may share the policy (SharedPolicy)
    check: str | None = None  # "module:attribute" called before the run directory is touched (e.g. require_ray)


LOCAL_LEARNER = "specrl.pipeline.learner:LocalLearner.build"
BACKENDS: dict[str, Backend] = {
    "local": Backend("specrl.pipeline.local:local_backend", LOCAL_LEARNER, in_process=True),
    "ray": Backend("specrl.pipeline.cluster.rollout:ray_backend", "specrl.pipeline.cluster.learner:ray_learner",
                   check="specrl.pipeline.cluster.connect:require_ray"),
    "vllm": Backend("specrl.pipeline.vllm.build:vllm_backend", LOCAL_LEARNER,
                    check="specrl.pipeline.vllm.build:require_vllm"),
}
IN_PROCESS_ENGINE = "local"  # the rollout factory of engines a process builds for itself (async eval, Ray actors)


def register_backend(name: str, rollout: str | Callable, learner: str | Callable = LOCAL_LEARNER) -> None:
    """Adds a `pipeline.backend` value, e.g. a test's wrapped engine (trained by the in-process learner)."""
    BACKENDS[name] = Backend(rollout, learner)


def get_backend(name: str) -> Backend:
    if name not in BACKENDS:
        raise ConfigError(f"pipeline.backend={name!r} is not a backend; valid: {sorted(BACKENDS)}")
    return BACKENDS[name]
