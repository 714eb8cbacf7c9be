"""`AdaptiveStrategy`: the decision of the adaptive engine (engine/adaptive/__init__.py) and what it learns from
each step: the cost model's fits, the acceptance counts keyed (drafter, kind), each arm's rate check, and the
model-free drafters' shadow drafts (`ShadowDrafts`). The plan is reused until the number of running sequences
changes or PLAN_EVERY steps pass. Deciding touches no tensor: the plan names the arm's drafters, a hybrid's lead
and the shadow rows, and the engine's run drafts; what each step cost and proposed comes back in its
`StepResult`."""
from __future__ import annotations

import copy
from typing import Callable, Iterable

from ..drafting import Plan, Shadow
from ..pool import Strategy
from ..sequence import Sequence, Status, StepResult
from . import warmup_cache
from .acceptance import AcceptanceStats
from .arms import ALL, FILL, FULL, OFF, OLD_KEYS, Arm, arm_grid, count_keys, tally
from .constants import (ANCHOR_EVERY, PLAN_EVERY, PROFILE_BATCHES, PROFILE_CONTEXT, PROFILE_FIT_WEIGHT,
                        PROFILE_REPEATS, PROFILE_TOKENS, SHADOW_ROWS, TRY_ROWS)
from .cost_model import CostModel
from .ratecheck import RateChecks, RowRates


class AdaptiveStrategy(Strategy):
    def __init__(self, names: list[str], point: set[str], k_max: int, cost: CostModel,
                 deferred: Iterable[str] = ()):
        self.names, self.point, self.k_max, self.cost = list(names), set(point), k_max, cost
        self.deterministic = cost.deterministic
        self.deferred = set(deferred)  # model drafters that catch up on their observations when asked
        self.stats = {key: AcceptanceStats(k_max) for key in count_keys(self.names, self.point)}
        self.arms = arm_grid(self.names, self.point, k_max)
        self.arm, self._planned_for, self._age, self._trying = OFF, -1, 0, False
        self._drafted = 0  # drafting steps since plain decoding last ran (ANCHOR_EVERY)
        self._context = 0.0  # the running rows' mean length when the step was scheduled (the target fit's context)
        self.checks = RateChecks()
        self._expect = 0.0  # the plan's predicted rate (without optimism), for the check
        self.shadows = ShadowDrafts([n for n in self.names if n in self.point], k_max)
        self.rows = RowRates()  # the running rows' own acceptance against the counts'
        self._row_factor: dict[str, float] = {}  # per drafter, over the rows the plan serves
        self._expected_now: dict[tuple, float] = {}  # (key, k) -> the counts' expectation before this step's rows

    def predicted_rate(self, arm: Arm, B: int, optimistic: bool = True, length: float = 0.0) -> float:
        """Tokens per second of a step of B rows of mean `length` tokens under `arm`, from the cost model and the
        acceptance counts."""
        if arm.drafter is None:
            return B / self.cost.target_s(B, B, length)
        k, draft = arm.k, self._expected((arm.drafter, ALL), arm.k, optimistic)
        if arm.lead is None:
            seconds = self.cost.draft_s(arm.drafter, B * k, k)
        else:
            f = self.stats[arm.lead, ALL].full_share(k)  # rows the lead drafts
            rest = self.stats[arm.drafter, FILL]
            if rest.rows >= 1.0:  # until the drafter has filled in, its rows at large stand in
                draft = self._expected((arm.drafter, FILL), k, optimistic)
            draft = f * self._expected((arm.lead, FULL), k, optimistic) + (1.0 - f) * draft
            fill = (1.0 - f ** B) * self.cost.draft_s(arm.drafter, max(1, round((1 - f) * B)) * k, k)  # runs
            seconds = self.cost.draft_s(arm.lead, B * k, k) + fill  # unless the lead drafts every row
        if arm.drafter in self.deferred:  # it observes every token the step appends, all rows, when next asked
            seconds += self.cost.catch_up_s(arm.drafter, B * (1.0 + draft))
        return B * (1.0 + draft) / (self.cost.target_s(B * (k + 1), B, length + k / 2) + seconds)

    def _expected(self, key: tuple[str, str], k: int, optimistic: bool) -> float:
        """Accepted drafts a row asked for k expects: the counts under `key`, scaled by how the rows this plan
        serves have accepted that drafter's drafts against the counts (RowRates)."""
        scaled = self.stats[key].expected(k, optimistic) * self._row_factor.get(key[0], 1.0)
        return min(scaled, AcceptanceStats.most(k))  # a factor above 1 must not reach k (MAX_ALPHA's reason)

    def best_arm(self, B: int, length: float = 0.0) -> Arm:
        """The arm of the highest predicted rate over B rows of mean `length` tokens, as its rate check scales it."""
        rates = {arm: self.predicted_rate(arm, B, length=length) * self.checks.factor(arm.label, B)
                 for arm in self.arms}
        return max(self.arms, key=lambda a: (rates[a], -a.k))  # ties: the shorter draft

    def schedule(self, seqs: list[Sequence]) -> Plan:
        B = len(seqs)
        self._context = sum(s.num_tokens for s in seqs) / max(B, 1)
        if B != self._planned_for or self._age >= PLAN_EVERY or self._trying:
            ids = [s.seq_id for s in seqs]
            self.rows.keep(ids)
            self._row_factor = {n: self.rows.factor(ids, n) for n in self.names}
            self.arm, self._planned_for, self._age = self.best_arm(B, self._context), B, 0
            # a plan that tries a drafter seen on few rows lasts one step: the next one looks again
            self._trying = any(self.stats[n].rows < TRY_ROWS for n in self.arm.reads)
            if self.arm.drafter is not None and self._drafted >= ANCHOR_EVERY and not self.deterministic:
                self.arm, self._trying = OFF, True  # one plain step re-measures what drafting is weighed against
            # what the RateCheck holds the plan's steps to (B is fixed while a plan lasts)
            self._expect = 0.0 if self.deterministic else self.predicted_rate(self.arm, B, False, self._context)
        self._age += 1
        arm = self.arm
        self._drafted = 0 if arm.drafter is None else self._drafted + 1
        shadows = self.shadows.plan(seqs)
        if arm.drafter is None:
            return Plan.off(B, shadows)
        # a hybrid: the model-free lead proposes for every row, its full drafts stay, the model drafter fills in
        return Plan([arm.drafter] * B, [arm.k] * B, lead=arm.lead, shadows=shadows, label=arm.label)

    def calibrate(self, time_forward: Callable[[int, int, int], float], max_batch: int, model=None,
                  max_len: int = 0) -> None:
        """The warm-up profile (measured mode only): the target forward timed over a grid of batch sizes and
        draft lengths over an empty cache, and the grid's shortest and longest forwards at a cached context
        (PROFILE_CONTEXT, within the engine's `max_len` tokens a row), becomes the cost model's prior, which
        the run's own timings refine. With `model` (the target) the grid's timings are cached per machine
        (warmup_cache.py): a later engine replays them."""
        if self.deterministic:
            return
        sizes = sorted({b for b in PROFILE_BATCHES if b <= max_batch} | {max_batch})
        lengths = tuple(t for t in PROFILE_TOKENS if t <= self.k_max + 1)
        context = max(min(PROFILE_CONTEXT, max_len - lengths[-1]), 0)
        grid = [(B, T, 0) for B in sizes for T in lengths]
        grid += [(B, T, context) for B in sizes for T in sorted({1, lengths[-1]})] if context else []
        key = warmup_cache.cache_key(model, max_batch, lengths, context) if model is not None else None
        points = warmup_cache.read(key) if key is not None else None
        if points is None:
            time_forward(1, 1, 0)  # a first forward pays one-off costs
            points = {p: min(time_forward(*p) for _ in range(PROFILE_REPEATS)) for p in grid}
            if key is not None:
                warmup_cache.write(key, points)
        for (B, T, C), seconds in sorted(points.items()):  # in the cache's order: a replay fits the same
            # T queries at positions C..C+T-1 read C + (T + 1) / 2 keys on average
            self.cost.observe_target(B * T, B, seconds, C + (T + 1) / 2)
        # the grid is fitted nearly unpulled (min-of-3 timings, no noise to damp) and becomes the fit's prior
        self.cost.target.set_prior(self.cost.target.solved(PROFILE_FIT_WEIGHT))

    def update(self, result: StepResult) -> None:
        if result.phase == "prefill":
            return
        asked_by = result.drafters_asked or [None] * result.active
        if not self.deterministic:
            self._learn_costs(result, asked_by)
        rows: dict[tuple, list[list[int]]] = {}  # stats key -> (asked, proposed, accepted) per row
        self._expected_now = {}
        self._count(result, asked_by, rows)
        self.shadows.pending.extend(result.shadows)
        self.shadows.score(rows, self._score_row)
        for key, (asked, lengths, accepted) in rows.items():
            self.stats[key].add(asked, lengths, accepted)

    def _learn_costs(self, result: StepResult, asked_by: list[str | None]) -> None:
        """The rate check of the plan's arm, and the cost model's fits, from the step's own clock."""
        B = result.active
        if self._expect > 0.0 and result.total_s > 0.0:
            self.checks.add(self.arm.label, B, result.emitted_tokens, result.total_s * self._expect)
        # all of the step but drafting (which the drafters' fits price): forward, sampling, verify, bookkeeping
        # a row of n tokens feeds T queries at positions n-1..n+T-2: n + (T - 1) / 2 keys each
        T = result.tokens_in / max(B, 1)
        self.cost.observe_target(result.tokens_in, B, result.verify_s + result.other_s, self._context + (T - 1) / 2)
        for name, dt in result.draft_s_by.items():
            # a hybrid's lead proposed for every row; any other drafter for the rows it was asked to draft
            asked = result.asked if name == self.arm.lead else [k for d, k in zip(asked_by, result.asked) if d == name]
            inputs, catch_up_s = result.catch_up.get(name, (0, 0.0))
            if inputs:  # priced apart: every token appended since it last drafted, all rows
                self.cost.observe_catch_up(name, inputs, catch_up_s)
            self.cost.observe_draft(name, sum(asked), max(asked, default=0), dt - catch_up_s)

    def _count(self, result: StepResult, asked_by: list[str | None], rows: dict) -> None:
        """The step's rows into `rows` per (drafter, kind) key (arms.py), each scored against the counts."""
        hybrid = self.arm.lead is not None
        for seq, d, k, n, a in zip(result.seqs, asked_by, result.asked, result.lengths, result.accepted):
            if d is None or k == 0:
                continue
            if d in self.point:
                keys = ((d, ALL), (d, FULL)) if n >= k else ((d, ALL),)
            else:
                keys = ((d, FILL),) if hybrid else ((d, ALL),)
            tally(rows, keys, k, n, min(a, n))
            # the counts this row was priced with: a hybrid's lead drafts the rows with a full-length proposal
            self._score_row(seq.seq_id, d, k, min(a, n), keys[-1] if hybrid else keys[0])

    def _score_row(self, seq_id: int, drafter: str, k: int, accepted: int, key: tuple | None = None) -> None:
        """One row's accepted drafts against what the counts (under `key`, default ALL) expected of it."""
        key = key or (drafter, ALL)
        expected = self._expected_now.get((key, k))
        if expected is None:  # once per (key, k) a step: the counts move only after the step's rows are in
            expected = self._expected_now[key, k] = self.stats[key].expected(k, optimistic=False)
        self.rows.add(seq_id, drafter, accepted, expected)

    def state_dict(self) -> dict:
        """The learned state a checkpoint keeps."""
        return copy.deepcopy({"cost": self.cost.state_dict(),
                              "stats": [[list(key), s.state_dict()] for key, s in self.stats.items()],
                              "checks": self.checks.state_dict(), "shadow_turn": self.shadows.turn})

    def load_state_dict(self, s: dict) -> None:
        self.cost.load_state_dict(s["cost"])
        stats = s["stats"]
        if isinstance(stats, dict):  # string keys, "eagle3~" style
            stats = [[(k[:-1], OLD_KEYS[k[-1]]) if k[-1:] in OLD_KEYS else (k, ALL), sub] for k, sub in stats.items()]
        for key, sub in stats:
            if tuple(key) in self.stats:
                self.stats[tuple(key)].load_state_dict(sub)
        self.checks.load_state_dict(s.get("checks", []))
        self.arm, self._planned_for, self._age, self._trying = OFF, -1, 0, False
        self._drafted = 0  # drafting steps since plain decoding last ran (ANCHOR_EVERY)
        self.rows, self._row_factor = RowRates(), {}
        self.shadows.turn = s.get("shadow_turn", 0)  # which rows shadow-draft next: a resumed run picks the same


class ShadowDrafts:
    """The model-free drafters propose k_max tokens for a few rows each step (microseconds; the plan names the
    rows, the engine's run drafts, the `StepResult` brings the drafts back), each scored against the tokens the
    row then emits. For a point draft that is an unbiased look at its acceptance
    (the verifier accepts x with probability p(x), the chance that the policy's own exact sample is x), so the
    schedule learns which model-free drafter pays at every draft length without spending steps on trying each."""

    def __init__(self, names: list[str], k_max: int):
        self.names, self.k_max = names, k_max  # the model-free drafters
        self.pending: list[tuple[str, Sequence, int, list[int]]] = []  # (drafter, row, its length, draft)
        self.turn = 0  # which rows shadow drafts next

    def plan(self, seqs: list[Sequence]) -> list[Shadow]:
        """This step's shadow rows per drafter: the next few rows in turn, less those whose earlier draft by the
        same drafter is still unscored or that cannot emit past one token."""
        if not self.names or not seqs:
            return []
        busy = {(name, seq.seq_id) for name, seq, _, _ in self.pending}
        n = min(SHADOW_ROWS, len(seqs))
        rows = [(self.turn + i) % len(seqs) for i in range(n)]
        self.turn += n
        shadows = []
        for name in self.names:
            free = [b for b in rows if (name, seqs[b].seq_id) not in busy and seqs[b].budget > 1]
            if free:
                shadows.append(Shadow(name, free, self.k_max))
        return shadows

    def score(self, rows: dict, per_row) -> None:
        """Counts into `rows` the drafts whose outcome is known: the row emitted past the draft (or past a
        rejection), or finished; and hands each to `per_row(seq_id, drafter, asked, accepted)`."""
        pending = []
        for name, seq, before, draft in self.pending:
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
            keys = ((name, ALL), (name, FULL)) if len(draft) >= asked else ((name, ALL),)
            tally(rows, keys, asked, min(len(draft), asked), min(a, asked))
            per_row(seq.seq_id, name, asked, min(a, asked))
        self.pending = pending
