"""The adaptive engine ("auto"): each step, for each running sequence, which drafter drafts and how many
tokens (0: none), chosen to maximise the expected tokens per second of the step.

Why per step and per sequence: SD trades verify work for fewer sequential forwards, which pays while a
forward is bound by reading weights (small batches) and stops paying once the batch alone fills the
hardware; RL rollouts pass through both regimes every step (a full batch, then a long tail). Which drafter
pays differs by sequence too: one that repeats itself (or its GRPO siblings) is cheap to draft for with
suffix matching, the others need a model drafter.

The decision, in the schedule part of the engine step (engine/engine.py):
1. The model-free drafters (suffix, n-gram: microseconds) propose for every row first; how much each one
   proposes is its signal (the suffix match length sets its draft length, an n-gram draft exists only on a
   match), and rows keep a prefix of it.
2. For every longest draft K in 0..k_max (the verify forward pads every row to K + 1 inputs, so K sets the
   forward's cost) each row takes the drafter whose expected accepted tokens, minus the drafting time at
   the current rate, is largest: E = a (1 - a^k) / (1 - a) for k drafts at per-token acceptance a, where a
   is the row's own verify results for that drafter, shrunk toward the drafter's running average.
3. Predicted rate(K) = (rows + sum E) / (target_s(rows x (K + 1)) + drafting seconds), from the cost model
   (engine/cost_model.py), fit to this engine's own step timings.
4. A bandit over K, per batch-size bucket (epsilon-greedy, after TLT's BEG-MAB): the measured reward of an
   arm replaces its prediction once it has been pulled a few times, and with probability epsilon (decaying
   with pulls) the step explores among the arms whose scores are within TIE of the best, so a drafter that
   got better online is found again.

SD that proposes nothing costs nothing: a step with K = 0 is a plain decode forward (every drafter still
observes it, so switching back needs no re-prefill). Any draft is verified exactly, so every choice is
lossless; "measured" choices follow the clock, "deterministic" ones never read it (see cost_model.py).
"""
from __future__ import annotations

import copy
import dataclasses
import logging
import math
import random
import time

import torch

from .cost_model import CostModel
from .drafting import DrafterPool
from .methods import SCRATCH, SpecConfig, build_drafter, get_method, model_method
from .result import StepResult
from .sequence import Sequence, Status
from .strategy import Plan

log = logging.getLogger(__name__)

ACCEPT_DECAY = 0.9  # weight of the past in a drafter's running acceptance
PRIOR_ROWS = 2.0  # a row's own acceptance counts against this many drafts of its drafter's average
UNTRIED_RATE = 0.9  # acceptance assumed for a drafter that has not drafted yet: optimistic, so each is tried
MIN_PULLS = 3  # pulls after which an arm's measured reward replaces its predicted one
TIE = 0.10  # arms within this fraction of the best score are "not yet told apart"
EPS_MIN = 0.02  # exploration never stops entirely
REWARD_DECAY = 0.8  # weight of the past in an arm's measured reward


def expected_accepted(rate: float, k: int) -> float:
    """Expected accepted drafts among k at independent per-token acceptance `rate`."""
    if k <= 0:
        return 0.0
    if rate >= 1.0:
        return float(k)
    return rate * (1.0 - rate ** k) / (1.0 - rate)


class AdaptiveStrategy:
    def __init__(self, names: list[str], point: set[str], k_max: int, cost: CostModel, seed: int = 0):
        self.names, self.point, self.k_max, self.cost = list(names), set(point), k_max, cost
        self.deterministic = cost.deterministic
        self.acc = {n: [0.0, 0.0] for n in self.names}  # decayed (accepted, rejected) drafts per drafter
        self.row_acc: dict[tuple[int, str], list[float]] = {}  # (seq_id, drafter) -> (accepted, rejected)
        self.arms: dict[str, dict[str, list[float]]] = {}  # bucket -> {K: [pulls, mean reward]}
        self.rng = random.Random(seed)
        self.last: dict = {}  # the last decision, for the trace and the tests
        self.chosen: dict[str, float] = {}  # rows per drafter ("none": no draft) over all steps, "k_sum" of drafts asked
        self.history: list[dict] | None = None  # set to [] to log every step's choice (`specrl bench adaptive`)
        # the longest-draft arms: 0 (SD off) and powers of two up to k_max, and k_max itself
        self.choices = sorted({0, k_max, *(2 ** i for i in range(5) if 2 ** i <= k_max)})

    # ---- estimates -------------------------------------------------------------------------------------
    def drafter_rate(self, name: str) -> float:
        a, r = self.acc[name]
        return a / (a + r) if a + r > 0 else UNTRIED_RATE

    def row_rate(self, seq: Sequence, name: str) -> float:
        a, r = self.row_acc.get((seq.seq_id, name), (0.0, 0.0))
        return (a + PRIOR_ROWS * self.drafter_rate(name)) / (a + r + PRIOR_ROWS)

    # ---- schedule ----------------------------------------------------------------------------------------
    def schedule(self, seqs: list[Sequence], pool: DrafterPool) -> Plan | None:
        B = len(seqs)
        self.last = {}
        cap = [max(0, min(self.k_max, s.budget - 1)) for s in seqs]
        if max(cap, default=0) == 0:
            return None
        bucket = str(B.bit_length())
        arms = self.arms.setdefault(bucket, {})
        rates = torch.tensor([[self.row_rate(s, n) for s in seqs] for n in self.names], dtype=torch.float64)
        explore = self._explore_prob(arms)
        # a first look, as if every drafter drafted k for every row: when no K > 0 is near the best, skip
        # even the model-free proposals (microseconds per row, which a large batch would notice)
        coarse, _ = self._rates(B, rates, cap, None)
        if not self._may_draft(coarse, arms, explore):
            self.last = {"K": "0", "bucket": bucket, "explored": False}
            return None
        ready, lengths, probe_s = {}, {}, 0.0
        for name in self.names:
            if name in self.point:
                t = time.perf_counter()
                ready[name] = pool.drafters[name].propose(seqs, cap)
                dt = time.perf_counter() - t
                self.cost.observe_draft(name, sum(cap), max(cap), dt)
                probe_s += dt
                lengths[name] = ready[name].lengths.tolist()
        predicted, plans = self._rates(B, rates, cap, lengths)
        scores = {K: self._score(arms.setdefault(K, [0.0, 0.0]), predicted[K]) for K in predicted}
        best = max(scores, key=lambda K: (scores[K], -int(K.rstrip("p"))))
        explored = False
        if self.rng.random() < explore:
            tied = [K for K in scores if scores[K] >= (1.0 - TIE) * scores[best]]
            if len(tied) > 1:
                best, explored = self.rng.choice(tied), True
        self.last = {"K": best, "bucket": bucket, "explored": explored, "predicted": predicted[best]}
        if best == "0":
            return None
        which, ks = plans[best]
        return Plan(which, ks, {n: p for n, p in ready.items() if n in which}, draft_s=probe_s)

    def _may_draft(self, coarse: dict, arms: dict, explore: float) -> bool:
        scores = {K: self._score(arms.setdefault(K, [0.0, 0.0]), r) for K, r in coarse.items()}
        top = max(scores.values())
        if any(scores[K] >= (1.0 - TIE) * top for K in scores if K != "0"):
            return True
        untried = any(arms[K][0] < MIN_PULLS for K in scores if K != "0")
        return untried and self.rng.random() < explore

    def _explore_prob(self, arms: dict) -> float:
        pulls = sum(a[0] for a in arms.values())
        if not arms:
            return 1.0
        return max(EPS_MIN, 1.0 / (1.0 + pulls / 2.0))

    @staticmethod
    def _score(arm: list[float], predicted: float) -> float:
        return arm[1] if arm[0] >= MIN_PULLS else predicted

    def _rates(self, B: int, rates: torch.Tensor, cap: list[int], lengths: dict | None):
        """Each arm's predicted rate and plan: an arm is a longest draft K, and for K > 0 whether the model
        drafters take part ("K") or only the model-free ones ("Kp"): a model drafter's cost grows with
        the longest draft whichever rows it serves, which a per-row choice alone cannot weigh."""
        out, plans = self._rates_for(B, rates, cap, lengths, allow_model=True)
        if self.point and len(self.point) < len(self.names):
            more, more_plans = self._rates_for(B, rates, cap, lengths, allow_model=False)
            for K in self.choices:
                if K > 0:
                    out[f"{K}p"], plans[f"{K}p"] = more[K], more_plans[K]
        return {str(K): v for K, v in out.items()}, {str(K): v for K, v in plans.items()}

    def _rates_for(self, B: int, rates: torch.Tensor, cap: list[int], lengths: dict | None, allow_model: bool):
        """Predicted tokens per second per row for each longest draft K in `choices`, and each K's plan
        (drafter, k per row). `rates` [D, B]: per-row acceptance of each drafter. With `lengths` None every
        drafter is taken to draft k for every row (the coarse look); else a model-free drafter's row takes
        at most what it proposed, at no further cost."""
        D = len(self.names)
        Ks = torch.tensor(self.choices, dtype=torch.float64)  # [C]
        capt = torch.tensor(cap, dtype=torch.float64)  # [B]
        avail = torch.full((D, B), float(self.k_max), dtype=torch.float64)
        slope = torch.tensor([self.cost.draft_slope(n) for n in self.names], dtype=torch.float64)  # [D]
        if lengths is not None:
            for d, n in enumerate(self.names):
                if n in lengths:
                    avail[d] = torch.tensor(lengths[n], dtype=torch.float64)
                    slope[d] = 0.0
        k = torch.minimum(torch.minimum(Ks[:, None, None], capt[None, None, :]), avail[None])  # [C, D, B]
        r = rates.clamp(max=1.0 - 1e-6)[None]  # [1, D, B]
        e = r * (1.0 - r ** k) / (1.0 - r)  # [C, D, B] expected accepted drafts
        lam = 1.0 / self.cost.target_s(B, B)  # a plain decode step's tokens per second per row: a second's price
        v = torch.where(k > 0, e - lam * B * slope[None, :, None] * k, torch.zeros_like(e))
        if not allow_model:
            model = torch.tensor([n not in self.point for n in self.names])
            v[:, model] = -1.0
        best_v, best_d = v.max(dim=1)  # [C, B]
        use = best_v > 0  # [C, B]
        k_row = k.gather(1, best_d[:, None]).squeeze(1) * use  # [C, B]
        e_row = e.gather(1, best_d[:, None]).squeeze(1) * use  # [C, B]
        out, plans = {}, {}
        for c, K in enumerate(self.choices):
            kr = k_row[c].long().tolist()
            dr = best_d[c].tolist()
            which = [self.names[dr[b]] if kr[b] > 0 else None for b in range(B)]
            by: dict[str, list[int]] = {}
            for name, kb in zip(which, kr):
                if name is not None and (lengths is None or name not in lengths):
                    by.setdefault(name, []).append(kb)
            Kf = max(kr, default=0)
            seconds = self.cost.target_s(B * (Kf + 1), B) + sum(self.cost.draft_s(n, sum(ks), max(ks))
                                                                for n, ks in by.items())
            out[K] = (B + float(e_row[c].sum())) / seconds / B
            plans[K] = (which, kr)
        return out, plans

    # ---- feedback --------------------------------------------------------------------------------------
    def update(self, result: StepResult) -> None:
        if result.phase == "prefill":
            return
        B = result.active
        mix: dict[str, int] = {}
        for d in result.drafters_asked or [None] * B:
            mix[d or "none"] = mix.get(d or "none", 0) + 1
        for name, n in mix.items():
            self.chosen[name] = self.chosen.get(name, 0) + n
        self.chosen["k_sum"] = self.chosen.get("k_sum", 0) + sum(result.asked)
        if self.history is not None:
            drafted = [k for k in result.asked if k > 0]
            self.history.append({"running": B, "mix": mix, "mean_k": sum(drafted) / max(len(drafted), 1),
                                 "K": self.last.get("K", "0"), "explored": self.last.get("explored", False)})
        if not self.deterministic:
            self.cost.observe_target(result.tokens_in, B, result.verify_s)
            for name, dt in result.draft_s_by.items():
                asked = [k for d, k in zip(result.drafters_asked, result.asked) if d == name]
                if name not in self.point:
                    self.cost.observe_draft(name, sum(asked), max(asked, default=0), dt)
        for name, seq, length, acc in zip(result.drafters, result.seqs, result.lengths, result.accepted):
            if name is None or length == 0:
                continue
            acc = min(acc, length)
            rej = 1.0 if acc < length else 0.0
            g = self.acc[name]
            g[0], g[1] = ACCEPT_DECAY * g[0] + acc, ACCEPT_DECAY * g[1] + rej
            r = self.row_acc.setdefault((seq.seq_id, name), [0.0, 0.0])
            r[0] += acc
            r[1] += rej
        for seq in result.seqs:
            if seq.status is Status.FINISHED:
                for name in self.names:
                    self.row_acc.pop((seq.seq_id, name), None)
        # the arm pulled: reward = tokens per second per row, timed (measured) or predicted (deterministic)
        if not self.last or "bucket" not in self.last:
            return
        K = self.last["K"]
        if self.deterministic:
            by: dict[str, list[int]] = {}
            for d, k in zip(result.drafters_asked, result.asked):
                if d is not None and d not in self.point:
                    by.setdefault(d, []).append(k)
            seconds = self.cost.target_s(result.tokens_in, B) + sum(self.cost.draft_s(n, sum(ks), max(ks))
                                                                    for n, ks in by.items())
        else:
            seconds = result.total_s
        arm = self.arms[self.last["bucket"]][K]
        reward = result.emitted_tokens / max(seconds, 1e-9) / max(B, 1)
        arm[1] = reward if arm[0] == 0 else REWARD_DECAY * arm[1] + (1.0 - REWARD_DECAY) * reward
        arm[0] += 1
        self.last = {}

    # ---- state -----------------------------------------------------------------------------------------
    def state_dict(self) -> dict:
        """The learned state a checkpoint keeps: the cost model, running acceptance, the bandit's arms and
        its random state (per-sequence estimates end with their sequences)."""
        state = self.rng.getstate()
        return copy.deepcopy({"cost": self.cost.state_dict(), "acc": self.acc, "arms": self.arms,
                              "rng": [state[0], list(state[1]), state[2]]})

    def load_state_dict(self, s: dict) -> None:
        self.cost.load_state_dict(s["cost"])
        for n, v in s["acc"].items():
            if n in self.acc:
                self.acc[n] = [float(v[0]), float(v[1])]
        self.arms = {b: {K: [float(a[0]), float(a[1])] for K, a in arms.items()} for b, arms in s["arms"].items()}
        v, internal, g = s["rng"]
        self.rng.setstate((int(v), tuple(int(x) for x in internal), None if g is None else float(g)))
        self.row_acc.clear()


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
    pool = DrafterPool(drafters, model_based)
    cost = CostModel(target.config.num_params, {n: own_params(d, target) for n, d in drafters.items()},
                     deterministic=spec.adaptive_mode == "deterministic")
    if spec.cost_profile is not None:
        cost.load_profile(spec.cost_profile)
    point = {n for n in drafters if not get_method(n).model_based}
    return pool, AdaptiveStrategy(list(drafters), point, spec.num_speculative_tokens, cost)


