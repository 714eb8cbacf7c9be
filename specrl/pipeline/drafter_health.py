"""The drafter health alarm: a drafter whose weights were lost or never synced keeps outputs correct
(verification is exact) while acceptance falls to ~1 token per step, so nothing else would say so.

Two signs, checked after every step:
- acceptance below half of its average over the last `window` steps before it, where acceptance is what
  the drafter adds: accepted drafts per target forward, acceptance length - 1 (the length itself never
  falls below 1, the bonus token every forward emits with or without a drafter);
- the engine's drafter older than the trainer's by more than `max_lag` versions (a sync that never came).
"""
from __future__ import annotations

from collections import deque
from typing import NamedTuple


class Verdict(NamedTuple):
    alarm: bool
    message: str


def check_drafter(history: list[float], acceptance: float, engine_version: int | None,
                  trainer_version: int | None, max_lag: int) -> Verdict:
    """Pure: `history` holds the previous steps' acceptance lengths (the window), `acceptance` this step's."""
    if engine_version is not None and trainer_version is not None and trainer_version - engine_version > max_lag:
        return Verdict(True, f"the engine's drafter is version {engine_version} but the trainer's is "
                             f"{trainer_version} (more than {max_lag} behind): drafter weights are not reaching "
                             "the engine")
    if history:
        recent = sum(history) / len(history)
        if acceptance - 1.0 < 0.5 * (recent - 1.0):
            return Verdict(True, f"acceptance length {acceptance:.2f} fell: {acceptance - 1:.2f} accepted drafts per "
                                 f"step against {recent - 1:.2f} on average over the last {len(history)} steps; "
                                 "check that the drafter's weights are loaded and synced")
    return Verdict(False, "")


class DrafterHealth:
    """Keeps the acceptance window between steps; `check` returns the step's verdict."""

    def __init__(self, window: int, max_lag: int):
        self.history: deque[float] = deque(maxlen=window)
        self.max_lag = max_lag

    def check(self, acceptance: float, engine_version: int | None, trainer_version: int | None) -> Verdict:
        verdict = check_drafter(list(self.history), acceptance, engine_version, trainer_version, self.max_lag)
        if not verdict.alarm:  # an alarming step does not drag the average down with it
            self.history.append(acceptance)
        return verdict
