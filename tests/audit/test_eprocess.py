"""The run's e-process: a step's evidence adds to each component's log-wealth, its state round-trips through
JSON (a checkpoint), an impossible token is certain evidence, and the alarm rings at 1/alpha."""
from __future__ import annotations

import json
import math

import pytest
import torch

from specrl.audit import EProcess, SamplerAlarm, StepEvidence, step_evidence
from specrl.audit.bets import COMPONENTS, log_bets, log_ratios
from specrl.audit.scorer import token_scores


def _scores(p: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    return token_scores(p, x, torch.full((len(x),), 0.5, dtype=torch.float64))


def _step(bets: float, tokens: int = 10, impossible: int = 0) -> StepEvidence:
    return StepEvidence([bets] * COMPONENTS, tokens, impossible, 0.0, 1.0, 1.0)


def test_step_evidence_sums_each_components_log_bets():
    p = torch.tensor([[0.6, 0.35, 0.05]] * 3, dtype=torch.float64)
    x = torch.tensor([0, 2, 1])
    ev = step_evidence(_scores(p, x))
    expect = log_bets(log_ratios(p, x)).sum(0)  # [COMPONENTS]
    assert ev.tokens == 3 and ev.impossible == 0 and ev.log_bets == pytest.approx(expect.tolist())
    # one e-value: the mean of the components' wealth
    assert ev.log_e == pytest.approx(math.log(float(expect.exp().mean())))


def test_the_e_process_adds_steps_and_keeps_its_running_maximum():
    e = EProcess()
    assert e.log_e == 0.0 and e.p_value == 1.0  # e = 1 before any token
    assert e.update(_step(2.0)) == pytest.approx(2.0)  # every component at e^2: the mixture too
    assert e.update(_step(-3.0)) == pytest.approx(-1.0)
    assert e.tokens == 20 and e.max_log_e == pytest.approx(2.0) and e.p_value == pytest.approx(math.exp(-2.0))


def test_state_round_trips_through_json_and_continues():
    a, b = EProcess(), EProcess()
    a.update(_step(0.5))
    b.load_state_dict(json.loads(json.dumps(a.state_dict())))  # a checkpoint's state.json
    for e in (a, b):
        e.update(_step(0.25, tokens=4))
    assert b.log_e == a.log_e and b.tokens == a.tokens == 14 and b.max_log_e == a.max_log_e
    with pytest.raises(ValueError, match="components"):
        b.load_state_dict({"log_wealth": [0.0], "tokens": 0, "impossible": 0, "max_log_e": 0.0})


def test_an_impossible_token_is_certain_evidence():
    p = torch.tensor([[0.5, 0.5, 0.0]], dtype=torch.float64)
    ev = step_evidence(_scores(p, torch.tensor([2])))
    assert ev.impossible == 1 and ev.log_e == math.inf
    alarm = SamplerAlarm(1e-9)
    assert alarm.update(ev) and alarm.process.p_value == 0.0
    json.dumps(alarm.process.state_dict(), allow_nan=False)  # still plain JSON


def test_the_alarm_rings_at_one_over_alpha_and_resets():
    alarm = SamplerAlarm(1e-3)
    assert not alarm.update(_step(math.log(999)))
    assert alarm.update(_step(math.log(1000 / 999) + 1e-9))
    alarm.reset()
    assert alarm.process.log_e == 0.0 and alarm.process.tokens == 0


@pytest.mark.parametrize("alpha", [0.0, 1.0, -0.1, 2.0])
def test_alpha_outside_zero_one_is_refused(alpha):
    with pytest.raises(ValueError, match=r"outside \(0, 1\)"):
        SamplerAlarm(alpha)
