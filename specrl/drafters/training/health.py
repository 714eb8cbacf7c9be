"""Drafter health alarm: a pure check over the run's history, for the run loop to log or stop on.

1. collapse: the latest acceptance_length is below `drop_ratio` of the mean of the `window` steps before it
   (after `min_history` steps), e.g. zeroed weights or a bad swap.
2. staleness: the engine's drafter version lags the online trainer's by more than `max_version_lag`, i.e.
   trained weights do not reach the engine.
"""
from __future__ import annotations

from ...config.rollout import HealthConfig  # `rollout.drafter.health`, in the run's config tree


def drafter_alarm(acceptance: list[float], engine_version: int | None = None, trainer_version: int | None = None,
                  cfg: HealthConfig | None = None) -> tuple[bool, str]:
    """(alarm, message) for the latest step; `acceptance` is acceptance_length per step, oldest first."""
    cfg = cfg or HealthConfig()
    problems = []
    if len(acceptance) > cfg.min_history:
        recent = acceptance[-1 - cfg.window:-1]
        mean = sum(recent) / len(recent)
        if acceptance[-1] < cfg.drop_ratio * mean:
            problems.append(f"acceptance_length {acceptance[-1]:.2f} fell below {cfg.drop_ratio:g} x its mean of "
                            f"the last {len(recent)} steps ({mean:.2f}): check the drafter's weights and the last swap")
    if engine_version is not None and trainer_version is not None:
        lag = trainer_version - engine_version
        if lag > cfg.max_version_lag:
            problems.append(f"the engine's drafter is version {engine_version}, the trainer's {trainer_version} "
                            f"(lag {lag} > {cfg.max_version_lag}): drafter weights are not reaching the engine; "
                            "check load_drafter_weights is called after each drafter update")
    return bool(problems), "; ".join(problems) or "ok"


class DrafterHealth:
    """The run loop's side: keeps the acceptance history between steps (alarming steps stay out of it, so
    a broken drafter keeps alarming instead of becoming the new normal)."""

    def __init__(self, cfg: HealthConfig):
        self.cfg, self.history = cfg, []

    def check(self, acceptance: float, engine_version: int | None, trainer_version: int | None) -> tuple[bool, str]:
        alarm, message = drafter_alarm(self.history[-self.cfg.window:] + [acceptance], engine_version,
                                       trainer_version, self.cfg)
        if not alarm:
            self.history.append(acceptance)
        return alarm, message
