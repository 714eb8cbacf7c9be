"""Drafter health alarm: clean series never alarm, a zeroed drafter alarms at once, a stale engine alarms."""
from __future__ import annotations

import random

import pytest

from specrl.drafters.training.health import HealthConfig, drafter_alarm


def first_alarm(series, **kw):
    for t in range(1, len(series) + 1):
        if drafter_alarm(series[:t], **kw)[0]:
            return t - 1
    return None


def test_clean_noisy_series_never_alarms():
    rng = random.Random(0)
    # acceptance drifting between 2.5 and 3.5 with noise, and a slow decay as the policy moves
    series = [3.0 + 0.4 * rng.uniform(-1, 1) - 0.01 * t for t in range(200)]
    assert first_alarm(series) is None


def test_zeroed_drafter_alarms_within_a_step():
    # a healthy ~3.2 for 10 steps, then the drafter is zeroed: only the bonus token is left, acceptance ~1.0
    series = [3.2, 3.1, 3.3, 3.2, 3.0, 3.2, 3.3, 3.1, 3.2, 3.2] + [1.0, 1.02, 1.0]
    assert first_alarm(series) == 10
    alarm, message = drafter_alarm(series[:11])
    # the mean of the 5 steps before is (3.2 + 3.3 + 3.1 + 3.2 + 3.2) / 5 = 3.2; half of it is 1.6 > 1.0
    assert alarm and "acceptance_length 1.00 fell below 0.5 x its mean of the last 5 steps (3.20)" in message


def test_short_history_is_not_judged():
    assert drafter_alarm([3.0, 1.0]) == (False, "ok")  # 1 earlier step < min_history 3


def test_version_lag_alarms():
    assert drafter_alarm([3.0], engine_version=4, trainer_version=5)[0] is False  # lag 1 is allowed
    alarm, message = drafter_alarm([3.0], engine_version=2, trainer_version=5)
    assert alarm and "lag 3 > 1" in message


def test_config_validates_itself():
    with pytest.raises(ValueError, match="drop_ratio=1.5"):
        HealthConfig(drop_ratio=1.5)
    with pytest.raises(ValueError, match="min_history=4"):
        HealthConfig(window=3, min_history=4)
