"""Discrete-event simulation of one rollout replica's continuous batching.

All sequences of a replica advance in lockstep, one engine iteration at a time, so the simulation is
indexed by iteration: (1) each sequence's number of iterations comes from its sampled length and,
with SD, from the acceptance model; (2) a slot schedule gives each its start iteration; (3) batch
size, KV context and tokens fed per iteration follow from difference arrays; (4) the cost model turns
those into iteration times. Every step is a vectorised numpy pass, so no per-token Python loop.
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Callable, NamedTuple

import numpy as np

from specrl.sim import cost
from specrl.sim.acceptance import AcceptanceModel, BatchAcceptance, LengthAcceptance
from specrl.sim.auto import AutoPolicy
from specrl.sim.hardware import HardwareSpec
from specrl.sim.models import ModelSpec


@dataclass(frozen=True)
class Engine:
    hw: HardwareSpec
    model: ModelSpec
    tp: int = 1


@dataclass(frozen=True)
class SDSetting:
    acceptance: AcceptanceModel
    draft_frac: float = 0.0  # drafter forward cost / target decode forward cost, per draft token
    verify_len: float | None = None  # tokens verified per sequence per SD step (None: k + 1; an
    # n-gram drafter without a match proposes fewer than k)
    by_length: LengthAcceptance | None = None  # acceptance per response length (None: `acceptance` for all)
    by_batch: BatchAcceptance | None = None  # k and acceptance per running count, read off a trace of "auto"
    auto: AutoPolicy | None = None  # "auto": the engine's rule picks drafter and k each iteration (sim/auto.py)

    @property
    def per_iteration(self) -> bool:
        """Drafter and k change from one iteration to the next ("auto"): simulated one iteration at a time."""
        return self.by_batch is not None or self.auto is not None

    def steps_needed(self, tokens, lengths, rng) -> np.ndarray:
        if self.by_length is not None:
            return self.by_length.steps_needed(tokens, lengths, rng)
        return self.acceptance.steps_needed(tokens, rng)

    @property
    def tokens_per_seq(self) -> float:
        return self.acceptance.k + 1.0 if self.verify_len is None else self.verify_len


class ReplicaTrace(NamedTuple):
    t: np.ndarray  # [J] seconds per iteration
    active: np.ndarray  # [J] sequences in the batch
    emitted: np.ndarray  # [J] tokens emitted (approximate within an SD phase)
    spec: np.ndarray  # [J] bool, iteration ran SD
    tokens_in: np.ndarray  # [J] tokens fed to the target forward
    ctx_sum: np.ndarray  # [J] summed context length of the batch
    draft_t: np.ndarray  # [J] part of t spent drafting

    @property
    def time_s(self) -> float:
        return float(self.t.sum())

    @property
    def busy_slot_s(self) -> float:
        return float((self.t * self.active).sum())  # np.dot here hits a slow BLAS path


def slot_starts(iters: np.ndarray, slots: int) -> np.ndarray:
    """FIFO continuous batching: a sequence starts when one of `slots` batch slots frees up."""
    if iters.size <= slots:
        return np.zeros_like(iters)
    free = [0] * slots  # heap of iterations at which each slot frees
    starts = np.empty_like(iters)
    for i, n in enumerate(iters.tolist()):
        s = heapq.heappop(free)
        starts[i] = s
        heapq.heappush(free, s + n)
    return starts


def _ramp_sum(starts, ends, c0, slope, length):
    """sum over segments i active at j (starts_i <= j < ends_i) of c0_i + slope_i (j - starts_i),
    and the sum of slopes, both [length], via difference arrays."""
    w = c0 - slope * starts  # value at j is w + slope * j
    d_w = np.bincount(starts, w, length + 1) - np.bincount(ends, w, length + 1)  # [J+1]
    d_s = np.bincount(starts, slope, length + 1) - np.bincount(ends, slope, length + 1)
    sum_w, sum_s = np.cumsum(d_w)[:length], np.cumsum(d_s)[:length]  # [J]
    return sum_w + np.arange(length) * sum_s, sum_s


def plan(lengths, slots: int, sd: SDSetting | None, rng):
    """Start iteration, iterations, and plain-decode iterations (the prefill's) of each sequence."""
    lengths = np.asarray(lengths, dtype=np.int64)  # [S]
    if sd is None:
        return slot_starts(lengths, slots), lengths, lengths
    plain = np.ones_like(lengths)  # the prefill iteration emits the first token
    iters = plain + sd.steps_needed(lengths - plain, lengths, rng)
    return slot_starts(iters, slots), iters, plain


def simulate_replica(engine: Engine, lengths, prompt_len: int, slots: int,
                     sd: SDSetting | None, rng: np.random.Generator, prompt_share: float = 1.0) -> ReplicaTrace:
    """Iteration-level timeline of one replica generating `lengths` [S] after prompts. Each prompt is
    prefilled once for `prompt_share` sequences (a GRPO group shares its prompt: prefix caching, or
    n samples of one request), so a new sequence costs prompt_len / prompt_share prefill tokens."""
    if sd is not None and sd.per_iteration:
        drafts = (sd.auto.stepper(engine.hw, engine.model, engine.tp).step if sd.auto is not None
                  else traced_drafts(sd.by_batch))
        it = lockstep(lengths, prompt_len, slots, drafts, rng)
    else:
        it = _planned(lengths, prompt_len, slots, sd, rng)
    return _timeline(engine, it, prompt_len, prompt_share, sd)


class Iterations(NamedTuple):
    active: np.ndarray  # [J] sequences in the batch
    new: np.ndarray  # [J] sequences prefilling
    ctx_sum: np.ndarray  # [J] summed context length of the batch
    emitted: np.ndarray  # [J] tokens emitted
    q: np.ndarray  # [J] tokens fed per decoding sequence
    k: np.ndarray  # [J] draft length (0: plain decode)
    draft_s: np.ndarray | None = None  # [J] drafting seconds, where the drafter changes per iteration ("auto")


def _planned(lengths, prompt_len: int, slots: int, sd: SDSetting | None, rng) -> Iterations:
    """Per-sequence iteration counts first (plan), then the batch per iteration from difference arrays."""
    starts, iters, plain = plan(lengths, slots, sd, rng)
    length = int((starts + iters).max())
    lengths = np.asarray(lengths, dtype=np.float64)
    # step 1: context per iteration, piecewise linear: 1 token/iter, then rate r in the SD phase
    rate = (lengths - plain) / np.maximum(iters - plain, 1)  # [S]
    ones = np.ones_like(rate)
    c1, e1 = _ramp_sum(starts, starts + plain, prompt_len + 0 * rate, ones, length)
    c2, e2 = _ramp_sum(starts + plain, starts + iters, prompt_len + plain.astype(float), rate, length)
    # step 2: batch composition per iteration
    active = np.cumsum(np.bincount(starts, minlength=length + 1)
                       - np.bincount(starts + iters, minlength=length + 1))[:length]  # [J]
    new = np.bincount(starts, minlength=length)[:length]  # [J]
    spec = (sd is not None) & (active - new > 0)  # [J] a prefill-only step drafts nothing
    q = np.where(spec, sd.tokens_per_seq if sd else 1, 1.0)  # [J]
    k = np.where(spec, sd.acceptance.k if sd else 0, 0)  # [J]
    return Iterations(active, new, c1 + c2, e1 + e2, q, k)


# one iteration's drafting over R running rows: (n in the batch, R, mean context of the R rows, rng) ->
# (accepted drafts [R], tokens fed per row, k, drafting seconds or None for the timeline to price)
Drafts = Callable[[int, int, float, np.random.Generator], tuple[np.ndarray, float, int, float | None]]


def traced_drafts(acc: BatchAcceptance) -> Drafts:
    """The draft length and acceptance an "auto" trace showed at each running count (`BatchAcceptance`)."""
    def drafts(n: int, running: int, ctx: float, rng) -> tuple:
        i = acc.index(n)
        if not acc.k[i]:
            return np.zeros(running, dtype=np.int64), 1.0, 0, None
        return acc.sample_accepted(n, running, rng), 1.0 + acc.drafts[i], acc.k[i], None
    return drafts


def lockstep(lengths, prompt_len: int, slots: int, drafts: Drafts, rng) -> Iterations:
    """One engine iteration at a time, for SD whose drafter, k and acceptance change per iteration ("auto"):
    FIFO admission into free slots (a new sequence's prefill emits its first token), then each decoding
    sequence emits 1 + accepted drafts, cut at its length as a lossless engine stops."""
    lengths = np.asarray(lengths, dtype=np.int64)  # [S]
    left, gen = lengths.copy(), np.zeros_like(lengths)  # [S] tokens still to emit, emitted so far
    running = np.zeros(0, dtype=np.int64)
    rows, admitted, priced = [], 0, False
    while running.size or admitted < lengths.size:
        new = np.arange(admitted, min(lengths.size, admitted + slots - running.size))
        admitted += new.size
        n = running.size + new.size
        ctx = n * prompt_len + int(gen[running].sum())
        step, q, k, draft_s = np.zeros(running.size, dtype=np.int64), 1.0, 0, None  # [R]
        if running.size:
            step, q, k, draft_s = drafts(n, running.size, prompt_len + gen[running].mean(), rng)
        priced = priced or draft_s is not None
        step = np.minimum(step + 1, left[running])
        left[running] -= step
        gen[running] += step
        left[new] -= 1
        gen[new] += 1
        rows.append((n, new.size, ctx, int(step.sum()) + new.size, q, k, draft_s or 0.0))
        both = np.concatenate([running, new])
        running = both[left[both] > 0]
    cols = np.array(rows, dtype=np.float64).T  # [7, J]
    return Iterations(cols[0], cols[1], cols[2], cols[3], cols[4], cols[5].astype(np.int64),
                      cols[6] if priced else None)


def _timeline(engine: Engine, it: Iterations, prompt_len: int, prompt_share: float,
              sd: SDSetting | None) -> ReplicaTrace:
    """The cost model turns each iteration's batch into seconds."""
    decoding = it.active - it.new  # [J]
    spec = it.k > 0  # [J] iteration verified drafts
    # "auto" takes the SD path (propose, verify, drafter bookkeeping) at every decoding step, even with k 0: its
    # drafters observe every forward (engine/engine.py run)
    path = (decoding > 0) if sd is not None and sd.per_iteration else spec  # [J]
    prefill = it.new * prompt_len / prompt_share  # [J] prompt tokens fed
    tokens_in = decoding * it.q + prefill  # [J]
    pairs = (it.ctx_sum - it.new * prompt_len) * it.q + prefill * (prompt_len + 1) / 2  # [J]
    t = cost.target_step_s(engine.hw, engine.model, engine.tp, it.active, tokens_in, it.ctx_sum, pairs,
                           prefill, path if sd is not None else 0.0)  # [J]
    draft_t = np.zeros_like(t)  # [J]
    if it.draft_s is not None:
        draft_t = it.draft_s
    elif sd is not None:
        draft_t = np.where(path, cost.draft_step_s(engine.hw, engine.model, engine.tp, decoding,
                                                       it.ctx_sum, it.k, sd.draft_frac), 0.0)
    return ReplicaTrace(t + draft_t, it.active, it.emitted, spec, tokens_in, it.ctx_sum, draft_t)
