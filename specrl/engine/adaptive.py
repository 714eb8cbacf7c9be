"""The adaptive engine ("auto"): each step, which drafter drafts how many tokens (0: none) for each running
sequence, chosen to maximise the expected tokens per second of the step.

Why it adapts: SD trades verify work for fewer sequential forwards, which pays while a forward is bound by
reading weights (small batches) and stops paying once the batch alone fills the hardware; RL rollouts pass
through both regimes every step (a full batch, then a long tail). Which drafter pays differs by workload
and by sequence: one that repeats itself (or its GRPO siblings) is cheap to draft for with suffix matching,
the others need a model drafter.

The decision is a choice among arms, each a static strategy the engine could run: no draft; drafter d
drafts k tokens for every row; or a hybrid, where a model-free drafter's full-length matches (a long suffix
match: its own strong signal) keep its drafts and a model drafter drafts for the other rows. An arm's
predicted rate is

    rows x (1 + expected accepted drafts) / (target forward seconds + drafting seconds)

from the cost model (engine/cost_model.py: fit to this engine's own step timings after a warm-up profile of
the forward) and per-position acceptance counts (engine/acceptance.py), optimistic while a drafter has few
observations: that optimism is the exploration (UCB), so a drafter is tried where trying could pay and a
drafter that got better online is found again. What the model cannot see is read off the clock: each arm's
realised tokens per second against its prediction (`RateCheck`, per octave of the batch size) scales its
predicted rate, so an arm that runs slower than priced loses its place. No arm beats plain decoding -> no
draft: SD that proposes nothing costs nothing (every drafter still observes the forward, so switching back
needs no re-prefill).

The plan is reused until the number of running sequences changes or PLAN_EVERY steps pass, so deciding
costs a few microseconds a step. Any draft is verified exactly, so every choice is lossless; "measured"
choices follow the clock, "deterministic" ones never read it (see cost_model.py).
"""
from __future__ import annotations

import copy
import dataclasses
import logging
import math
import time
from dataclasses import dataclass
from typing import Callable

import torch

from .acceptance import AcceptanceStats
from .cost_model import CostModel
from .deferred import Deferred
from .pool import DrafterPool
from .methods import SCRATCH, SpecConfig, build_drafter, get_method, model_method
from .result import StepResult
from .sequence import Sequence, Status
from .strategy import Plan, Strategy, budget_cap

log = logging.getLogger(__name__)

PLAN_EVERY = 4  # steps a plan is reused while the batch keeps its size
# what a drafter's acceptance stats are keyed by, beside its name: all the rows it drafted for (ALL); a model-free
# drafter's full-length proposals (FULL); a model drafter filling in a hybrid's rows, those the lead had no full
# draft for, which are harder than a row taken at random (FILL: pooling them would price the drafter alone too low)
ALL, FULL, FILL = "all", "full", "fill"
OLD_KEYS = {"*": FULL, "~": FILL}  # string-keyed checkpoints: "suffix*", "eagle3~" (converted on load)
PROFILE_TOKENS = (1, 2, 3, 5, 9)  # draft lengths + 1 the warm-up profile times the forward at
TRY_ROWS = 8.0  # a drafter observed on fewer rows is being tried: its plan lasts one step
SHADOW_ROWS = 4  # rows per step on which the model-free drafters propose a draft to be scored (see _shadow)
CHECK_DECAY = 0.95  # weight of the past per step in an arm's realised / predicted rate (RateCheck)


def expected_accepted(rate: float, k: int) -> float:
    """Expected accepted drafts among k at independent per-token acceptance `rate`."""
    if k <= 0:
        return 0.0
    if rate >= 1.0:
        return float(k)
    return rate * (1.0 - rate ** k) / (1.0 - rate)


@dataclass(frozen=True)
class Arm:
    drafter: str | None  # who drafts (None: nobody; in a hybrid, the model drafter that fills in)
    k: int = 0
    lead: str | None = None  # hybrid: the model-free drafter whose full-length proposals go first

    @property
    def label(self) -> str:
        if self.drafter is None:
            return "off"
        return f"{self.lead}+{self.drafter}@{self.k}" if self.lead else f"{self.drafter}@{self.k}"


OFF = Arm(None)


class RateCheck:
    """How far the model's predicted rate is off for one arm: a decayed mean of log(realised / predicted
    tokens per second) over the steps the arm ran, shrunk towards `prior` (log 1 = trust the model) while it
    has few steps. The predictions price the forward and the drafting from their fits and acceptance from
    the counts; what neither sees (a drafter's catch-up, merging drafts, per-token bookkeeping that grows
    with the draft, acceptance that differs between the rows an arm drafts for and those it was counted on)
    shows up here, from the step's own clock."""

    def __init__(self):
        self.sum, self.n = 0.0, 0.0

    def add(self, log_ratio: float) -> None:
        self.sum = CHECK_DECAY * self.sum + log_ratio
        self.n = CHECK_DECAY * self.n + 1.0

    def log_factor(self, prior: float = 0.0) -> float:
        return (self.sum + prior) / (self.n + 1.0)


class AdaptiveStrategy(Strategy):
    def __init__(self, names: list[str], point: set[str], k_max: int, cost: CostModel):
        self.names, self.point, self.k_max, self.cost = list(names), set(point), k_max, cost
        self.deterministic = cost.deterministic
        self.deferred: dict[str, Deferred] = {}  # model drafters that catch up on their observations when asked
        model = [n for n in self.names if n not in self.point]
        keys = [(n, ALL) for n in self.names] + [(n, FULL) for n in self.names if n in self.point] + \
            ([(m, FILL) for m in model] if self.point else [])
        self.stats = {key: AcceptanceStats(k_max) for key in keys}  # (drafter, kind) -> its acceptance
        ks = sorted({k_max, *(2 ** i for i in range(5) if 2 ** i <= k_max)})
        self.arms = [OFF] + [Arm(n, k) for n in self.names for k in ks] + \
            [Arm(m, k, s) for m in model for s in self.names if s in self.point for k in ks]
        self.arm, self._planned_for, self._age, self._trying = OFF, -1, 0, False
        self.checks: dict[tuple, RateCheck] = {}  # (arm label,) and (arm label, octave of B) -> RateCheck
        self._expect = 0.0  # the plan's predicted rate (without optimism), for the check
        self._shadows: list[tuple[str, Sequence, int, list[int]]] = []  # (drafter, row, its length, draft)
        self._turn = 0  # which rows shadow drafts next
        self.last: dict = {}  # the last decision, for the trace and the tests
        # rows per drafter ("none": no draft) over all steps, and "k_sum": the drafts asked
        self.chosen: dict[str, float] = {}
        self.history: list[dict] | None = None  # set to [] to log every step's choice (`specrl bench adaptive`)

    def reset_counts(self) -> None:
        """`chosen` and `history` (when logging) start afresh; what the strategy has learnt stays."""
        self.chosen = {}
        self.history = None if self.history is None else []

    # ---- predictions ---------------------------------------------------------------------------------
    def predicted_rate(self, arm: Arm, B: int, optimistic: bool = True) -> float:
        """Tokens per second of a step of B rows under `arm`, from the cost model and the acceptance counts."""
        if arm.drafter is None:
            return B / self.cost.target_s(B, B)
        k, draft = arm.k, self.stats[arm.drafter, ALL].expected(arm.k, optimistic)
        if arm.lead is None:
            seconds = self.cost.draft_s(arm.drafter, B * k, k)
        else:
            f = self.stats[arm.lead, ALL].full_share(k)  # rows the lead drafts
            rest = self.stats[arm.drafter, FILL]
            if rest.rows >= 1.0:  # until the drafter has filled in, its rows at large stand in
                draft = rest.expected(k, optimistic)
            draft = f * self.stats[arm.lead, FULL].expected(k, optimistic) + (1.0 - f) * draft
            fill = (1.0 - f ** B) * self.cost.draft_s(arm.drafter, max(1, round((1 - f) * B)) * k, k)  # runs
            seconds = self.cost.draft_s(arm.lead, B * k, k) + fill  # unless the lead drafts every row
        if arm.drafter in self.deferred:  # it observes every token the step appends, all rows, when next asked
            seconds += self.cost.catch_up_s(arm.drafter, B * (1.0 + draft))
        return B * (1.0 + draft) / (self.cost.target_s(B * (k + 1), B) + seconds)

    def reads(self, arm: Arm) -> tuple[tuple[str, str], ...]:
        """The acceptance stats that `arm`'s rows are counted in."""
        if arm.drafter is None:
            return ()
        return ((arm.drafter, ALL),) if arm.lead is None else ((arm.lead, ALL), (arm.drafter, FILL))

    def factor(self, arm: Arm, B: int) -> float:
        """Realised / predicted rate of `arm` at B rows (RateCheck): its own at this octave of B, shrunk
        towards its figure at any B, shrunk towards 1."""
        overall = self.checks.get((arm.label,))
        if overall is None:
            return 1.0
        prior = overall.log_factor()
        here = self.checks.get((arm.label, B.bit_length()))
        return math.exp(here.log_factor(prior) if here is not None else prior)

    def best_arm(self, B: int) -> Arm:
        rates = {arm: self.predicted_rate(arm, B) * self.factor(arm, B) for arm in self.arms}
        return max(self.arms, key=lambda a: (rates[a], -a.k))  # ties: the shorter draft

    # ---- schedule ----------------------------------------------------------------------------------------
    def schedule(self, seqs: list[Sequence], pool: DrafterPool) -> Plan | None:
        B = len(seqs)
        if B != self._planned_for or self._age >= PLAN_EVERY or self._trying:
            self.arm, self._planned_for, self._age = self.best_arm(B), B, 0
            # a plan that tries a drafter seen on few rows lasts one step: the next one looks again
            self._trying = any(self.stats[n].rows < TRY_ROWS for n in self.reads(self.arm))
            # what the RateCheck holds the plan's steps to (B is fixed while a plan lasts)
            self._expect = 0.0 if self.deterministic else self.predicted_rate(self.arm, B, optimistic=False)
        self._age += 1
        arm = self.arm
        self.last = {"arm": arm.label}
        self._shadow(seqs, pool)
        if arm.drafter is None:
            return None
        if arm.lead is None:
            return Plan([arm.drafter] * B, [arm.k] * B)
        # hybrid: the model-free drafter proposes for every row (microseconds); a row it drafts in full keeps
        # that draft, the model drafter drafts for the others
        caps = [budget_cap(arm.k, s) for s in seqs]
        t = time.perf_counter()
        prop = pool.drafters[arm.lead].propose(seqs, caps)
        dt = time.perf_counter() - t
        self.cost.observe_draft(arm.lead, sum(caps), max(caps, default=0), dt)
        which = [arm.lead if c > 0 and n >= c else arm.drafter for n, c in zip(prop.lengths.tolist(), caps)]
        return Plan(which, [arm.k] * B, {arm.lead: prop}, draft_s=dt)

    def _shadow(self, seqs: list[Sequence], pool: DrafterPool) -> None:
        """The model-free drafters propose k_max tokens for a few rows (microseconds), and `update` compares
        each draft with the tokens the row emits over the next steps. For a point draft that is an unbiased
        look at its acceptance: the verifier accepts draft x with probability p(x), which is the probability
        that the policy's own sample is x, and every emitted token is an exact policy sample. So the
        schedule learns which model-free drafter pays, at every draft length, without spending steps on
        trying each (a drafter drafting short never shows its long drafts otherwise)."""
        names = [n for n in self.names if n in self.point]
        if not names or not seqs:
            return
        busy = {(name, seq.seq_id) for name, seq, _, _ in self._shadows}
        n = min(SHADOW_ROWS, len(seqs))
        rows = [seqs[(self._turn + i) % len(seqs)] for i in range(n)]
        self._turn += n
        for name in names:
            free = [s for s in rows if (name, s.seq_id) not in busy and s.budget > 1]
            if not free:
                continue
            prop = pool.drafters[name].propose(free, [self.k_max] * len(free))
            for seq, toks, length in zip(free, prop.tokens.tolist(), prop.lengths.tolist()):
                self._shadows.append((name, seq, seq.num_tokens, toks[:length]))

    def _count_shadows(self, rows: dict) -> None:
        """Scores the shadow drafts whose outcome is known: the row emitted past the draft (or past a
        rejection), or finished."""
        pending = []
        for name, seq, before, draft in self._shadows:
            emitted = seq.tokens[before:]
            a = 0
            while a < min(len(draft), len(emitted)) and draft[a] == emitted[a]:
                a += 1
            known = a < min(len(draft), len(emitted)) or len(emitted) > len(draft)  # a rejection, or past it
            if not known and seq.status is not Status.FINISHED:
                pending.append((name, seq, before, draft))
                continue
            asked = self.k_max if known else len(emitted)  # a finished row reveals what it emitted only
            if asked == 0:
                continue
            for key in ((name, ALL), (name, FULL)) if len(draft) >= asked else ((name, ALL),):
                for lst, v in zip(rows.setdefault(key, [[], [], []]), (asked, min(len(draft), asked), min(a, asked))):
                    lst.append(v)
        self._shadows = pending

    def calibrate(self, time_forward: Callable[[int, int], float], max_batch: int) -> None:
        """The warm-up profile (measured mode only): time the target forward over a grid of batch sizes and
        draft lengths, so the cost model starts from this machine's figures rather than counted work, and
        keeps them as the prior that the run's own timings refine."""
        if self.deterministic:
            return
        sizes = sorted({b for b in (1, 2, 4, 8, 16, 32, 64, 128, 256) if b <= max_batch} | {max_batch})
        time_forward(1, 1)  # a first forward pays one-off costs
        for B in sizes:
            for T in (t for t in PROFILE_TOKENS if t <= self.k_max + 1):
                self.cost.observe_target(B * T, B, time_forward(B, T))
        self.cost.target.prior = list(self.cost.target.theta)

    # ---- feedback --------------------------------------------------------------------------------------
    def update(self, result: StepResult) -> None:
        if result.phase == "prefill":
            return
        B = result.active
        asked_by = result.drafters_asked or [None] * B
        mix: dict[str, int] = {}
        for d in asked_by:
            mix[d or "none"] = mix.get(d or "none", 0) + 1
        for name, n in mix.items():
            self.chosen[name] = self.chosen.get(name, 0) + n
        self.chosen["k_sum"] = self.chosen.get("k_sum", 0) + sum(result.asked)
        if self.history is not None:
            drafted = [k for k in result.asked if k > 0]
            self.history.append({"running": B, "mix": mix, "mean_k": sum(drafted) / max(len(drafted), 1),
                                 "arm": self.last.get("arm", "off")})
        lead = self.arm.lead
        if not self.deterministic and self._expect > 0.0 and result.total_s > 0.0:
            log_ratio = math.log(result.emitted_tokens / result.total_s / self._expect)
            for key in ((self.arm.label,), (self.arm.label, B.bit_length())):
                self.checks.setdefault(key, RateCheck()).add(log_ratio)
        if not self.deterministic:
            # the forward, sampling, verification and the bookkeeping that grows with the tokens appended: all
            # of the step but drafting, which the drafters' own fits price
            self.cost.observe_target(result.tokens_in, B, result.verify_s + result.other_s)
            caught_up = {name: d.take() for name, d in self.deferred.items()}
            for name, dt in result.draft_s_by.items():
                if name != lead:  # the lead's proposal was timed in the schedule
                    asked = [k for d, k in zip(asked_by, result.asked) if d == name]
                    inputs, catch_up_s = caught_up.get(name, (0, 0.0))
                    if inputs:  # priced apart: every token appended since it last drafted, all rows
                        self.cost.observe_catch_up(name, inputs, catch_up_s)
                    self.cost.observe_draft(name, sum(asked), max(asked, default=0), dt - catch_up_s)
        rows: dict[tuple, list[list[int]]] = {}  # stats key -> (asked, proposed, accepted) per row
        self._count(result, asked_by, rows)
        self._count_shadows(rows)
        for key, (asked, lengths, accepted) in rows.items():
            self.stats[key].add(asked, lengths, accepted)

    def _count(self, result: StepResult, asked_by: list[str | None], rows: dict) -> None:
        """Acceptance per drafter, per model-free drafter for its full-length proposals, and per model
        drafter filling in a hybrid's rows (FILL)."""
        for d, k, n, a in zip(asked_by, result.asked, result.lengths, result.accepted):
            if d is None or k == 0:
                continue
            if d in self.point:
                keys = ((d, ALL), (d, FULL)) if n >= k else ((d, ALL),)
            else:
                keys = ((d, FILL),) if self.arm.lead is not None else ((d, ALL),)
            for key in keys:
                for lst, v in zip(rows.setdefault(key, [[], [], []]), (k, n, min(a, n))):
                    lst.append(v)

    # ---- state -----------------------------------------------------------------------------------------
    def state_dict(self) -> dict:
        """The learned state a checkpoint keeps: the cost model and the acceptance counts."""
        return copy.deepcopy({"cost": self.cost.state_dict(),
                              "stats": [[list(key), s.state_dict()] for key, s in self.stats.items()],
                              "checks": [[list(key), c.sum, c.n] for key, c in self.checks.items()]})

    def load_state_dict(self, s: dict) -> None:
        self.cost.load_state_dict(s["cost"])
        stats = s["stats"]
        if isinstance(stats, dict):  # an older checkpoint's "eagle3~"-style keys
            stats = [[(k[:-1], OLD_KEYS[k[-1]]) if k[-1:] in OLD_KEYS else (k, ALL), sub] for k, sub in stats.items()]
        for key, sub in stats:
            if tuple(key) in self.stats:
                self.stats[tuple(key)].load_state_dict(sub)
        self.checks = {}
        for key, total, n in s.get("checks", []):
            self.checks[tuple(key)] = c = RateCheck()
            c.sum, c.n = float(total), float(n)
        self.arm, self._planned_for, self._age, self._trying = OFF, -1, 0, False


def own_params(drafter, target) -> int:
    """Parameters of a drafter's own modules (not the target's it may hold a reference to)."""
    seen, total = {id(p) for p in target.parameters()}, 0
    for value in vars(drafter).values():
        if isinstance(value, torch.nn.Module):
            for p in value.parameters():
                if id(p) not in seen:
                    seen.add(id(p))
                    total += p.numel()
    return total


def build(spec: SpecConfig, target, num_slots: int, max_len: int):
    """The DrafterPool of `spec.drafters` (those that can be built here) and the AdaptiveStrategy over it."""
    if spec.draft_model == SCRATCH:
        model_method(spec)  # scratch needs a model drafter among `drafters`: a clear error otherwise
    drafters, missing = {}, {}
    for name in dict.fromkeys(spec.drafters):
        try:
            own = dataclasses.replace(spec, method=name, draft_model=spec.draft_model if get_method(name).model_based
                                      else None)  # a checkpoint (or "scratch") is the model drafters'
            drafters[name] = build_drafter(own, target, num_slots, max_len)
        except (FileNotFoundError, ValueError) as e:
            missing[name] = str(e)
    if not drafters:
        detail = "; ".join(f"{n}: {msg}" for n, msg in missing.items())
        raise ValueError(f"method='auto' chooses among drafters={list(spec.drafters)}, but none of them can be "
                         f"built here: {detail}. Build one (e.g. `specrl train-drafter --method eagle3`), or add "
                         f"a model-free one (suffix, ngram) to drafters")
    for name, msg in missing.items():
        log.warning("auto: drafter %r left out (%s)", name, msg)
    model_based = tuple(n for n in drafters if get_method(n).model_based)
    deferred = {n: Deferred(drafters[n]) for n in model_based if get_method(n).defers}  # idle, it costs nothing
    pool = DrafterPool({**drafters, **deferred}, model_based)
    cost = CostModel(target.config.num_params, {n: own_params(d, target) for n, d in drafters.items()},
                     deterministic=spec.adaptive_mode == "deterministic")
    if spec.cost_profile is not None:
        cost.load_profile(spec.cost_profile)
    point = {n for n in drafters if not get_method(n).model_based}
    strategy = AdaptiveStrategy(list(drafters), point, spec.num_speculative_tokens, cost)
    strategy.deferred = deferred
    return pool, strategy


