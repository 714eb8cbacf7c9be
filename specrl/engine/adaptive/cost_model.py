"""The adaptive engine's cost model: how long the parts of one engine step take, on this machine.

    target forward  seconds = a + b * tokens_in + c * batch + d * tokens_in * context
                    (tokens_in = batch x (longest draft + 1); context: the keys a query reads, on average)
    drafter d       seconds = a_d + c_d * its longest draft + b_d * tokens asked of it
    catch-up of d   seconds = e_d * inputs observed (a deferring drafter pays it when next asked)

Each line is a decayed least-squares fit of the engine's own step timings, pulled toward a prior: the
target's warm-up profile, else counted work (multiply-adds plus one pass over the weights) scaled to the first
timed forward. The context term is attention's: each query reads its row's cached keys, so a decode step at a
context of 512 tokens costs about 1.4x one over an empty cache, and a 5-token verify 1.9x (SmolLM2-135M, bf16,
32 rows, 2 Zen 5 cores); without it a fit over verify forwards alone misprices plain decoding. "measured" keeps
fitting; "deterministic" never reads a clock (a saved profile, or counted work), so the engine's choices, and
the sampled tokens, are a pure function of the seeds.
"""
from __future__ import annotations

import json
from pathlib import Path

from .constants import (COST_DECAY, DRAFT_PRIOR_WEIGHT, PAIR_SCALE, PRIOR_WEIGHT, SCALE, STEP_SCALE,
                        WEIGHT_READ_TOKENS)

PROFILE_VERSION = 1
STRATEGY_PROFILE_VERSION = 2  # the adaptive engine's profile (adaptive/profile.py): this model under "cost"


class CostProfileError(ValueError):
    """A cost-model profile file is missing or malformed."""


class LinearFit:
    """Decayed ridge regression y ~ theta . x, pulled toward `prior` with weight `weight`."""

    def __init__(self, dim: int, prior: list[float] | None = None, weight: float = PRIOR_WEIGHT):
        self.dim, self.weight = dim, weight
        self.xx = [[0.0] * dim for _ in range(dim)]
        self.xy, self.n = [0.0] * dim, 0.0
        self.prior = list(prior) if prior is not None else [0.0] * dim
        self._theta: list[float] | None = None

    def add(self, x: list[float], y: float) -> None:
        self.xy = [COST_DECAY * v + xi * y for v, xi in zip(self.xy, x)]
        self.xx = [[COST_DECAY * v + xi * xj for v, xj in zip(row, x)] for row, xi in zip(self.xx, x)]
        self.n = COST_DECAY * self.n + 1.0
        self._theta = None

    @property
    def theta(self) -> list[float]:
        if self._theta is None:
            self._theta = self.solved(self.weight)
        return self._theta

    def set_prior(self, prior: list[float]) -> None:
        if len(prior) != self.dim:
            raise ValueError(f"a prior of {len(prior)} values for a fit of {self.dim} features")
        self.prior, self._theta = list(prior), None

    def solved(self, weight: float) -> list[float]:
        """The fit's theta with the prior weighing `weight` observations."""
        a = [[v + (weight if i == j else 0.0) for j, v in enumerate(row)] for i, row in enumerate(self.xx)]
        return solve(a, [v + weight * p for v, p in zip(self.xy, self.prior)])

    def predict(self, x: list[float]) -> float:
        return max(sum(t * v for t, v in zip(self.theta, x)), 1e-7)

    def shrink(self, n: float) -> None:
        """Scales the observations to weigh at most `n` (the same least-squares fit, less weight)."""
        f = min(1.0, n / max(self.n, 1e-9))
        self.xx = [[f * v for v in row] for row in self.xx]
        self.xy, self.n, self._theta = [f * v for v in self.xy], f * self.n, None

    def state_dict(self) -> dict:
        return {"xx": self.xx, "xy": self.xy, "n": self.n, "prior": self.prior}

    def load_state_dict(self, s: dict) -> None:
        """A fit of `dim` features, or of fewer (one saved before later features were appended): those load as
        never observed, with a zero prior."""
        n = len(s["xy"])
        if not 0 < n <= self.dim or len(s["xx"]) != n or len(s["prior"]) != n or any(len(r) != n for r in s["xx"]):
            raise ValueError(f"a fit of {n} features where this version has {self.dim}")
        pad = [0.0] * (self.dim - n)
        self.xx = [[float(v) for v in row] + pad for row in s["xx"]] + [[0.0] * self.dim for _ in pad]
        self.xy, self.n = [float(v) for v in s["xy"]] + pad, float(s["n"])
        self.prior = [float(v) for v in s["prior"]] + pad
        self._theta = None


def solve(a: list[list[float]], b: list[float]) -> list[float]:
    """x with a x = b, by Gaussian elimination with partial pivoting, in plain Python: the schedule solves a
    4 x 4 system after every step's new timing, too small for a torch call to pay its overhead."""
    n = len(b)
    m = [list(map(float, row)) + [float(v)] for row, v in zip(a, b)]  # [n, n+1]
    for c in range(n):
        p = max(range(c, n), key=lambda r: abs(m[r][c]))
        if abs(m[p][c]) < 1e-300:
            raise ValueError(f"a singular cost-model fit (column {c})")
        m[c], m[p] = m[p], m[c]
        for r in range(c + 1, n):
            f = m[r][c] / m[c][c]
            m[r] = [x - f * y for x, y in zip(m[r], m[c])]
    x = [0.0] * n
    for r in reversed(range(n)):
        x[r] = (m[r][n] - sum(m[r][j] * x[j] for j in range(r + 1, n))) / m[r][r]
    return x


def _target_x(tokens_in: int, batch: int, context: float) -> list[float]:
    return [1.0, tokens_in / SCALE, batch / SCALE, tokens_in * context / PAIR_SCALE]


def _draft_x(tokens: int, steps: int) -> list[float]:
    return [1.0, tokens / SCALE, steps / STEP_SCALE]


class CostModel:
    def __init__(self, target_params: int, drafter_params: dict[str, int], deterministic: bool = False,
                 pair_work: float = 0.0):
        """`drafter_params`: each drafter's own weights (0 for a model-free one), for counted work; `pair_work`:
        the target's multiply-adds for one query reading one cached key (`pair_work(config)`), 0: unpriced."""
        self.target_params, self.drafter_params, self.deterministic = target_params, dict(drafter_params), deterministic
        self.pair_work = pair_work
        self.target = LinearFit(4, self._counted_target(1.0))
        self.drafters = {n: LinearFit(3, self._counted_draft(n, 1.0), DRAFT_PRIOR_WEIGHT) for n in drafter_params}
        self.catch_ups: dict[str, list[float]] = {}  # drafter -> decayed [seconds, inputs] of its catch-ups
        self.scaled = deterministic  # measured mode: the prior is rescaled to the first timed forward

    def _counted_target(self, seconds_per_unit: float) -> list[float]:
        # work in units of "one token through the target" (its weights' multiply-adds): WEIGHT_READ_TOKENS +
        # tokens_in + the query-key pairs at their share of a token
        pair = self.pair_work / max(self.target_params, 1)
        return [WEIGHT_READ_TOKENS * seconds_per_unit, SCALE * seconds_per_unit, 0.0,
                PAIR_SCALE * pair * seconds_per_unit]

    def _counted_draft(self, name: str, seconds_per_unit: float) -> list[float]:
        share = self.drafter_params[name] / max(self.target_params, 1)  # a model drafter's tokens cost its size
        return [0.0, SCALE * share * seconds_per_unit, 0.0]

    def target_s(self, tokens_in: int, batch: int, context: float = 0.0) -> float:
        """Seconds of a target forward of `tokens_in` inputs over `batch` rows whose queries read `context` keys
        on average (a row of n tokens feeding T queries: n + (T - 1) / 2)."""
        return self.target.predict(_target_x(tokens_in, batch, context))

    def draft_s(self, name: str, tokens: int, steps: int) -> float:
        """Seconds drafter `name` takes to propose `tokens` tokens, `steps` the longest draft (0: no call)."""
        return self.drafters[name].predict(_draft_x(tokens, steps)) if tokens > 0 else 0.0

    def catch_up_s(self, name: str, inputs: float) -> float:
        """Seconds drafter `name` takes to observe `inputs` deferred inputs: measured, else (before its first
        catch-up, and in deterministic mode without a profile) its marginal seconds per drafted token."""
        seen = self.catch_ups.get(name)
        per_input = seen[0] / seen[1] if seen and seen[1] > 0 else self.draft_slope(name)
        return per_input * inputs

    def draft_slope(self, name: str) -> float:
        """Marginal seconds per token asked of drafter `name` (never negative)."""
        return max(self.drafters[name].theta[1] / SCALE, 0.0)

    def observe_target(self, tokens_in: int, batch: int, seconds: float, context: float = 0.0) -> None:
        if self.deterministic:
            return
        if not self.scaled:  # the prior takes the first timed forward's scale: counted work -> seconds
            pair = self.pair_work / max(self.target_params, 1)
            per_unit = seconds / (WEIGHT_READ_TOKENS + tokens_in * (1.0 + context * pair))
            self.target.prior = self._counted_target(per_unit)
            for n, fit in self.drafters.items():
                fit.prior = self._counted_draft(n, per_unit)
            self.scaled = True
        self.target.add(_target_x(tokens_in, batch, context), seconds)

    def observe_catch_up(self, name: str, inputs: int, seconds: float) -> None:
        if self.deterministic or inputs <= 0:
            return
        seen = self.catch_ups.setdefault(name, [0.0, 0.0])
        seen[0], seen[1] = COST_DECAY * seen[0] + seconds, COST_DECAY * seen[1] + inputs

    def observe_draft(self, name: str, tokens: int, steps: int, seconds: float) -> None:
        if self.deterministic or tokens <= 0 or name not in self.drafters:
            return
        self.drafters[name].add(_draft_x(tokens, steps), seconds)

    def shrink(self, n: float) -> None:
        """Every fit weighs at most `n` observations: a saved profile as the prior of this machine's timings."""
        for name, seen in self.catch_ups.items():  # a catch-up weighs as much as its drafter's steps
            f = min(1.0, n / max(self.drafters[name].n, 1e-9))
            seen[0], seen[1] = f * seen[0], f * seen[1]
        for fit in (self.target, *self.drafters.values()):
            fit.shrink(n)

    def state_dict(self) -> dict:
        return {"version": PROFILE_VERSION, "scaled": self.scaled, "target": self.target.state_dict(),
                "drafters": {n: f.state_dict() for n, f in self.drafters.items()},
                "catch_ups": {n: list(v) for n, v in self.catch_ups.items()}}

    def load_state_dict(self, s: dict) -> None:
        self.target.load_state_dict(s["target"])
        for n, sub in s["drafters"].items():
            if n in self.drafters:
                self.drafters[n].load_state_dict(sub)
        self.catch_ups = {n: [float(v[0]), float(v[1])] for n, v in s.get("catch_ups", {}).items()
                          if n in self.drafters}  # optional: a profile need not price catch-ups
        self.scaled = bool(s["scaled"]) or self.deterministic

    def load_fits(self, s: dict) -> bool:
        """The cost fits of profile `s` (`read_profile`'s dict, either version), their version checked; False when
        it carries none (an adaptive-engine profile may carry only counts). A malformed state raises LOAD_ERRORS."""
        cost = s.get("cost") if s["version"] == STRATEGY_PROFILE_VERSION else s
        if cost is None:
            return False
        if cost.get("version") != PROFILE_VERSION:  # a strategy profile's cost fits carry their own version
            raise KeyError(f"version {cost.get('version')!r}, expected {PROFILE_VERSION}")
        self.load_state_dict(cost)
        self.target.theta  # noqa: B018 (a singular or ragged fit fails here, not mid-run)
        return True

    def load_profile(self, path: str | Path) -> None:
        s = read_profile(path)
        try:
            if not self.load_fits(s):
                raise KeyError("cost")
        except LOAD_ERRORS as e:
            raise bad_profile(path, e) from None


def pair_work(config) -> float:
    """Multiply-adds of one query reading one cached key through every layer: its score against the key and its
    share of the value, per attention head."""
    return 2.0 * config.num_layers * config.num_heads * config.head_dim


LOAD_ERRORS = (KeyError, TypeError, ValueError, IndexError, RuntimeError, AttributeError)  # of a malformed state


def bad_profile(path: str | Path, e: Exception) -> CostProfileError:
    return CostProfileError(f"cost_profile {str(path)!r} is not a cost-model profile ({type(e).__name__}: {e}): "
                            "write a fresh one with `specrl bench adaptive --save-profile PATH`")


def read_profile(path: str | Path) -> dict:
    """The profile at `path` (either version) as a dict; a clear error for a missing or malformed file."""
    p = Path(path)
    if not p.is_file():
        raise CostProfileError(f"cost_profile {str(p)!r} does not exist: write one with `specrl bench adaptive "
                               "--save-profile PATH`, or drop cost_profile (deterministic mode then uses "
                               "counted work)")
    try:
        s = json.loads(p.read_text())
        if s.get("version") not in (PROFILE_VERSION, STRATEGY_PROFILE_VERSION):
            raise KeyError(f"version {s.get('version')!r}, expected {PROFILE_VERSION} or {STRATEGY_PROFILE_VERSION}")
    except (json.JSONDecodeError, KeyError, AttributeError) as e:
        raise bad_profile(p, e) from None
    return s
