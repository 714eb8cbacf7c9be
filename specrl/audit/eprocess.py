"""One e-process over a run's audited tokens, and the alarm on it.

The e-process is an equal-weight mixture of COMPONENTS test martingales, one per (alternative, lam) of
`bets.py`; its state is each component's log-wealth, so a step adds the sums of its tokens' log-bets and a
resumed run continues from a checkpoint's state. Under an exact sampler whose rows are independent draws (no
random stream shared across rows) it is a nonnegative martingale of mean 1, so P(it ever reaches 1/alpha) <=
alpha (Ville's inequality): the alarm may look after every step, for
the whole run, on any policy however sharp. An impossible token (p(x) = 0) makes it infinite.
"""
from __future__ import annotations

import math
from typing import NamedTuple

import torch

from .bets import COMPONENTS, log_bets, log_mixture
from .pit import pit_test

SCORES = 3  # token score columns before the log-ratios: u (PIT), w (PIT weight), impossible


class StepEvidence(NamedTuple):
    """What one step's audited tokens add: the e-process's increments and the PIT diagnostic."""
    log_bets: list[float]  # [COMPONENTS] the sum of each component's log-bets over the tokens
    tokens: int
    impossible: int  # tokens the sampler's distribution gives no mass: certain evidence
    z: float  # the PIT diagnostic (pit.py)
    pit_p: float
    weight: float

    def metrics(self) -> dict:
        """The metrics-row keys a learner returns (`sampler_bets` is popped by the alarm, `from_metrics`)."""
        return {"sampler_bets": self.log_bets, "sampler_tokens": self.tokens, "sampler_impossible": self.impossible,
                "sampler_z": self.z, "sampler_pit_p": self.pit_p, "sampler_weight": self.weight}

    @classmethod
    def from_metrics(cls, row: dict) -> "StepEvidence":
        return cls(row.pop("sampler_bets"), row["sampler_tokens"], row["sampler_impossible"], row["sampler_z"],
                   row["sampler_pit_p"], row["sampler_weight"])

    @property
    def log_e(self) -> float:
        """The log e-value of these tokens alone."""
        return math.inf if self.impossible else float(log_mixture(torch.tensor(self.log_bets, dtype=torch.float64)))


def step_evidence(scores: torch.Tensor) -> StepEvidence:
    """The evidence of token scores [n, SCORES + ALTERNATIVES] (`scorer.TokenScorer`)."""
    scores = scores.double()
    possible = scores[:, 2] == 0  # [n]
    bets = log_bets(scores[possible, SCORES:]).sum(0)  # [COMPONENTS]
    pit = pit_test(scores[:, 0], scores[:, 1])
    return StepEvidence(bets.tolist(), len(scores), int((~possible).sum()), pit.z, pit.p_value, pit.weight)


class EProcess:
    """The run's e-process: each component's log-wealth, the tokens audited, and the running maximum."""

    def __init__(self):
        self.log_wealth = torch.zeros(COMPONENTS, dtype=torch.float64)  # [COMPONENTS]
        self.tokens = 0
        self.impossible = 0
        self.max_log_e = 0.0

    @property
    def log_e(self) -> float:
        """log of the e-value so far (0 before any token; inf after an impossible one)."""
        return math.inf if self.impossible else float(log_mixture(self.log_wealth))

    @property
    def p_value(self) -> float:
        """The smallest alpha it has rejected at so far: 1 / its running maximum (an anytime-valid p-value)."""
        return math.exp(-self.max_log_e)

    def update(self, step: StepEvidence) -> float:
        """Adds a step's evidence -> the new log e-value."""
        self.log_wealth += torch.tensor(step.log_bets, dtype=torch.float64)
        self.tokens += step.tokens
        self.impossible += step.impossible
        self.max_log_e = max(self.max_log_e, self.log_e)
        return self.log_e

    def state_dict(self) -> dict:
        """JSON-ready (a checkpoint's state.json)."""
        return {"log_wealth": self.log_wealth.tolist(), "tokens": self.tokens, "impossible": self.impossible,
                "max_log_e": min(self.max_log_e, 1e300)}

    def load_state_dict(self, state: dict) -> None:
        wealth = state["log_wealth"]
        if len(wealth) != COMPONENTS:
            raise ValueError(f"the sampler audit's state has {len(wealth)} components, this specrl bets with "
                             f"{COMPONENTS}: resume with the specrl that wrote the checkpoint")
        self.log_wealth = torch.tensor(wealth, dtype=torch.float64)
        self.tokens, self.impossible = int(state["tokens"]), int(state["impossible"])
        self.max_log_e = math.inf if self.impossible else float(state["max_log_e"])


class SamplerAlarm:
    """The e-process of a run and its threshold log(1 / alpha): rings at most alpha of the time, over the whole
    run, under an exact sampler of independent rows."""

    def __init__(self, alpha: float):
        if not 0 < alpha < 1:
            raise ValueError(f"alpha={alpha} is outside (0, 1): pass the false-alarm probability, e.g. 1e-3")
        self.alpha = alpha
        self.process = EProcess()

    @property
    def threshold(self) -> float:
        return math.log(1 / self.alpha)

    def update(self, step: StepEvidence) -> bool:
        """Adds a step's evidence; True when the e-process has reached 1 / alpha."""
        return self.process.update(step) >= self.threshold

    def reset(self) -> None:
        """A new test (rollout.audit=fallback, after speculative decoding is turned off)."""
        self.process = EProcess()
