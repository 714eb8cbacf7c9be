"""`auto` in the simulator: the adaptive engine's own decision, made over the simulator's cost model.

The engine (engine/adaptive/) picks, each step, the arm (no draft; one drafter at one draft length; or a hybrid
where a model-free drafter's full-length matches go first and a model drafter fills in the other rows) with the
best predicted rate `rows x (1 + expected accepted drafts) / (target seconds + drafting seconds)`. Here that very
rule decides: an `AdaptiveStrategy` is built over `SimCost`, which prices the engine's two questions (a target
forward of `tokens_in` tokens over `batch` rows; a drafter proposing `tokens` tokens, `steps` the longest draft)
with the simulator's roofline and fitted overheads at the batch's current context, and over acceptance counts per
(drafter, kind) in the engine's own `AcceptanceStats` (a saved profile's, or counts made from an
`AcceptanceModel`). So the simulated `auto` is the engine's strategy once its cost fits are right: it decides per
running count and context whether drafting pays, with which drafter, at which k, and which rows a hybrid's lead
takes. What it leaves out: exploration (the counts are taken as known), the rate checks and per-row factors (they
correct the engine's own misfits, which a simulation has not), and a deferring drafter's catch-up.

The engine's strategy module imports torch, so it is imported when an `AutoPolicy` is built, not with the
simulator (which reads without torch).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from specrl.engine.adaptive.acceptance import AcceptanceStats
from specrl.engine.adaptive.arms import ALL, FILL, FULL, Arm
from specrl.sim import cost
from specrl.sim.acceptance import AcceptanceModel
from specrl.sim.hardware import HardwareSpec
from specrl.sim.models import ModelSpec

COUNTED_ROWS = 1e6  # rows behind the counts made from an AcceptanceModel: the engine's optimism then vanishes
CTX_BUCKETS = 4  # decisions are cached per running count and per quarter-octave of the mean context


@dataclass(frozen=True)
class PoolDrafter:
    """One drafter of auto's pool: its drafting cost (the hardware with its fitted drafter overheads, and its
    forward's share of a target decode forward) and whether it is model-free (a point drafter)."""
    hw: HardwareSpec
    draft_frac: float
    point: bool


class SimCost:
    """The engine's cost-model questions (`CostModel.target_s`, `draft_s`, `catch_up_s`) answered by the
    simulator's roofline at the context set in `ctx` (mean tokens per row): what a converged cost fit would say."""
    deterministic = True  # never reads a clock

    def __init__(self, hw: HardwareSpec, model: ModelSpec, tp: int, pool: dict[str, PoolDrafter]):
        self.hw, self.model, self.tp, self.pool = hw, model, tp, pool
        self.ctx = 1.0

    def target_s(self, tokens_in: int, batch: int, context: float = 0.0) -> float:
        """`context` is the engine's (its rows' mean length); the roofline reads the simulated rows' `ctx`."""
        ctx_sum = batch * self.ctx
        q = tokens_in / max(batch, 1)  # tokens fed per row
        return float(cost.target_step_s(self.hw, self.model, self.tp, batch, tokens_in, ctx_sum, ctx_sum * q,
                                        0.0, 1.0))  # auto takes the SD path on every step, drafts or none

    def draft_s(self, name: str, tokens: int, steps: int) -> float:
        if tokens <= 0:
            return 0.0
        d = self.pool[name]
        rows = tokens / max(steps, 1)
        return float(cost.draft_step_s(d.hw, self.model, self.tp, rows, rows * self.ctx, steps, d.draft_frac))

    def catch_up_s(self, name: str, inputs: float) -> float:
        return 0.0  # observing costs a model drafter a forward it already pays for in draft_s


def counts_from_model(acc: AcceptanceModel, k_max: int, share: float = 1.0, rows: float = COUNTED_ROWS) -> dict:
    """The `AcceptanceStats` state of a drafter that proposes a full-length draft on `share` of its rows and
    nothing on the rest (a model-free drafter's match, or none), its proposals accepted per position as `acc`
    (positions past `acc.k` repeat its last rate); every row asked for `k_max` tokens. A row without a proposal
    counts as reaching position 0 and failing there, as the engine counts it."""
    alphas = [acc.alphas[min(j, acc.k - 1)] for j in range(k_max)]
    reach = share * rows * np.concatenate([[1.0], np.cumprod(alphas)[:-1]])  # [k_max] proposals reaching j
    accepted = reach * alphas  # [k_max]
    reach[0] = rows  # every row reaches position 0
    return {"reached": reach.tolist(), "accepted": accepted.tolist(), "asked": [rows] * k_max,
            "proposed": [share * rows] * k_max}


def over_one(hw: HardwareSpec, acc: AcceptanceModel, draft_frac: float) -> "AutoPolicy":
    """auto over one drafter of acceptance `acc`: it then chooses only whether to draft, and how many tokens."""
    counts = counts_from_model(acc, acc.k)
    return AutoPolicy({"drafter": PoolDrafter(hw, draft_frac, point=False)},
                      {("drafter", ALL): counts, ("drafter", FILL): counts}, acc.k)


@dataclass
class AutoPolicy:
    """auto's pool and acceptance counts; `strategy()` the engine's AdaptiveStrategy over them."""
    pool: dict[str, PoolDrafter]
    stats: dict[tuple[str, str], dict]  # (drafter, kind) -> AcceptanceStats state (a profile's "stats" rows)
    k_max: int
    _cdf: dict = field(default_factory=dict, repr=False)  # (key, k) -> cdf of accepted drafts of a row
    _steps: dict = field(default_factory=dict, repr=False)  # (hw, model, tp) -> AutoStep, its decisions cached

    def __post_init__(self):
        if not self.pool:
            raise ValueError("auto needs at least one drafter in its pool: pass --auto-drafters, e.g. eagle3,suffix")
        missing = [n for n in self.pool if (n, ALL) not in self.stats]
        if missing:
            raise ValueError(f"auto's drafters {missing} have no acceptance counts: give them in the profile "
                             "(`specrl bench adaptive --save-profile`), or leave --auto-profile out to use "
                             "--acceptance for every drafter")

    def strategy(self, hw: HardwareSpec, model: ModelSpec, tp: int):
        from specrl.engine.adaptive.strategy import AdaptiveStrategy
        names = list(self.pool)
        s = AdaptiveStrategy(names, {n for n in names if self.pool[n].point}, self.k_max,
                             SimCost(hw, model, tp, self.pool))
        for key, state in self.stats.items():
            if key in s.stats:
                s.stats[key].load_state_dict(state)
        return s

    def stepper(self, hw: HardwareSpec, model: ModelSpec, tp: int) -> "AutoStep":
        """One AutoStep per engine shape, shared by its replicas (the decisions depend on no random draw)."""
        key = (hw, model, tp)
        if key not in self._steps:
            self._steps[key] = AutoStep(self, hw, model, tp)
        return self._steps[key]

    def cdf(self, stats: dict, key: tuple[str, str], k: int) -> np.ndarray:
        """cdf [k+1] of the accepted drafts of a row asked for k under counts `key` (no optimism)."""
        if (key, k) not in self._cdf:
            survive = np.concatenate([[1.0], np.cumprod(list(stats[key].alphas(k, optimistic=False)))])  # [k+1]
            self._cdf[key, k] = np.cumsum(survive - np.concatenate([survive[1:], [0.0]]))
        return self._cdf[key, k]


class AutoStep:
    """One replica's `auto`: for each iteration, the arm the engine's rule picks at the running count and
    context, the drafts each row gets accepted, the tokens fed per row and the drafting seconds."""

    def __init__(self, policy: AutoPolicy, hw: HardwareSpec, model: ModelSpec, tp: int):
        self.policy = policy
        self.strategy = policy.strategy(hw, model, tp)
        self.cost: SimCost = self.strategy.cost
        self._arms: dict[tuple[int, int], Arm] = {}

    def arm(self, rows: int, ctx: float) -> Arm:
        key = (rows, int(CTX_BUCKETS * math.log2(max(ctx, 1.0))))
        if key not in self._arms:
            self.cost.ctx = 2.0 ** (key[1] / CTX_BUCKETS)
            self._arms[key] = self.strategy.best_arm(rows)
        return self._arms[key]

    def step(self, n: int, rows: int, ctx: float, rng: np.random.Generator) -> tuple[np.ndarray, float, int, float]:
        """(accepted drafts [rows], tokens fed per row, k, drafting seconds) of one iteration over the `rows`
        decoding rows of a batch of n (the engine prefills the others in a step of their own, so the rows decide)."""
        arm = self.arm(rows, ctx)
        if arm.drafter is None or rows == 0:
            return np.zeros(rows, dtype=np.int64), 1.0, 0, 0.0
        stats, k = self.strategy.stats, arm.k
        self.cost.ctx = ctx
        if arm.lead is None:
            accepted = self._sample(stats, (arm.drafter, ALL), k, rows, rng)
            q = 1.0 + (self._longest(stats[arm.drafter, ALL], k, rows) if self.policy.pool[arm.drafter].point
                       else k)
            return accepted, q, k, self.cost.draft_s(arm.drafter, rows * k, k)
        led = rng.random(rows) < stats[arm.lead, ALL].full_share(k)  # [rows] the lead's match is full-length
        fill = (arm.drafter, FILL) if stats[arm.drafter, FILL].rows >= 1.0 else (arm.drafter, ALL)
        accepted = np.where(led, self._sample(stats, (arm.lead, FULL), k, rows, rng),
                            self._sample(stats, fill, k, rows, rng))  # [rows]
        rest = int(rows - led.sum())
        seconds = self.cost.draft_s(arm.lead, rows * k, k) + self.cost.draft_s(arm.drafter, rest * k, k)
        return accepted, 1.0 + k, k, seconds

    def _sample(self, stats, key, k: int, size: int, rng) -> np.ndarray:
        cdf = self.policy.cdf(stats, key, k)
        return np.minimum(np.searchsorted(cdf, rng.random(size), side="right"), k)  # [size]

    @staticmethod
    def _longest(s: AcceptanceStats, k: int, rows: int) -> float:
        """Expected longest proposal of a point drafter over `rows` rows (the engine pads the verify to it):
        position j is proposed by a row with the counted share proposed_j / asked_j."""
        share = [(p + 0.5) / (a + 1.0) for p, a in zip(s.proposed[:k], s.asked[:k])]
        return float(sum(1.0 - (1.0 - min(x, 1.0)) ** rows for x in share))
