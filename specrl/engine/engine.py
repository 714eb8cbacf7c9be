"""The engine under the `LLM` front end. One `step()` reads in one direction:

    schedule      bookkeeping only: admit waiting sequences (a prefill), or ask the strategy which drafter drafts
                  how many tokens for each running sequence (a `Plan`, capped to each row's budget)
    run           all of the step's tensor work (engine/steps.py): the prefill, or draft -> verify; it changes
                  no sequence
    postprocess   the sequences take their tokens and the drafters observe them (`advance`), the `StepResult` is
                  made, the counters, the tracer and the strategy learn from it, finished sequences retire

Weight updates reach the runner through the engine too (`update_weights`), between two steps."""
from __future__ import annotations

import time
from typing import NamedTuple

import torch

from .drafting import Plan, Stateful
from .pool import DrafterPool, Strategy
from .runner import ModelRunner
from .sequence import Scheduler, Sequence, StepResult
from .stats import Choices, EngineStats, Tracer
from .steps import Ran, advance, decode, prefill, speculate


class Batch(NamedTuple):
    """What one step runs, decided by bookkeeping alone."""
    seqs: list[Sequence]  # the forward's rows, in order
    groups: list[list[Sequence]]  # a prefill's sequences by prompt ([] for a decode or speculative step)
    plan: Plan | None  # the drafting, capped to each row's budget (None: the engine holds no drafter)


class Engine:
    def __init__(self, runner: ModelRunner, pool: DrafterPool | None, strategy: Strategy | None, tracer: Tracer):
        self.runner, self.pool, self.strategy, self.tracer = runner, pool, strategy, tracer
        if strategy is not None:  # before any sequence holds a slot (see ModelRunner.time_forward)
            strategy.calibrate(runner.time_forward, runner.num_slots, runner.model, runner.max_len)
        # False: no more drafts (rollout.audit=fallback); the drafters keep observing, the strategy its state
        self.speculate = True
        self.stats = EngineStats()
        # which drafters the strategy chose, over the steps; off unless a caller (`specrl bench adaptive`) sets it
        self.choices: Choices | None = None
        self.weights_version = 0  # a tag for the weights the engine holds, recorded on the tokens they sample

    @property
    def planning(self) -> Strategy | None:
        """The strategy that plans and learns this step (None once speculation is off)."""
        return self.strategy if self.speculate else None

    def step(self, scheduler: Scheduler) -> StepResult:
        t0 = time.perf_counter()
        batch = self.schedule(scheduler)
        ran = self.run(batch)
        return self.postprocess(batch, ran, scheduler, t0)

    def schedule(self, scheduler: Scheduler) -> Batch:
        groups = scheduler.admit()
        if groups:
            return Batch([s for g in groups for s in g], groups, None)
        running = list(scheduler.running)
        if self.pool is None:
            return Batch(running, [], None)
        # no plan: SD off this step, but the drafters still observe the forward (no re-prefill later)
        plan = self.planning.schedule(running) if self.planning is not None else None
        return Batch(running, [], (plan or Plan.off(len(running))).capped(running))

    def run(self, batch: Batch) -> Ran:
        if batch.groups:
            return prefill(self.runner, batch.groups, self.pool is not None)
        if batch.plan is None:
            return decode(self.runner, batch.seqs)
        return speculate(self.runner, self.pool.drafters, batch.seqs, batch.plan)

    def postprocess(self, batch: Batch, ran: Ran, scheduler: Scheduler, t0: float) -> StepResult:
        # step 1: the sequences take their tokens (the one change a step makes to them), the drafters observe them;
        # the trace's mean context is taken before the tokens, a prefill's rows with their first one
        ctx = _mean_len(scheduler.running) if self.tracer.file and not batch.groups else 0.0
        for seq in (s for g in batch.groups for s in g):  # admitted: their tokens come from the weights held now
            seq.mark_version(self.weights_version)
        kept = advance(self.pool, batch.seqs, ran)
        if self.tracer.file and batch.groups:
            ctx = _mean_len(scheduler.running)
        # step 2: the step's one StepResult, which the counters, the tracer and the strategy read
        result = step_result(batch, ran, kept, time.perf_counter() - t0, ctx)
        self.stats.add(result)
        if self.choices is not None:
            self.choices.add(result)
        self.tracer.record(**result.trace_row())
        if self.planning is not None:
            self.planning.update(result)
        # step 3: finished sequences give their slots back
        for seq in scheduler.retire_finished():
            if self.pool is not None:
                self.pool.release(seq)
        return result

    def update_weights(self, state_dict: dict[str, torch.Tensor], version: int | None,
                       running: list[Sequence]) -> None:
        """Weight sync between two steps: the runner copies the weights in place; the `running` sequences' KV
        cache is recomputed under them (every input but the last, which the next step feeds), so every later
        token comes from the new weights exactly. The drafters keep their (stale) state."""
        self.runner.load_weights(state_dict)
        if version is not None:
            self.weights_version = version
        if running:
            self.runner.prefill([s.tokens[:-1] for s in running], [s.slot for s in running], cache_only=True)
            for seq in running:
                seq.mark_version(self.weights_version)

    def drafting_state(self) -> dict:
        """The pool's drafters' state and the strategy's, as one checkpoint entry (its state stays after
        speculation is turned off, so a resumed run learns on from the same counts)."""
        s = self.strategy
        return {**self.pool.state_dict(), "strategy": s.state_dict() if isinstance(s, Stateful) else None}

    def load_drafting_state(self, state: dict) -> None:
        self.pool.load_state_dict(state)
        if state.get("strategy") is not None and isinstance(self.strategy, Stateful):
            self.strategy.load_state_dict(state["strategy"])


def step_result(batch: Batch, ran: Ran, kept: list[int], step_s: float, ctx: float) -> StepResult:
    """The one `StepResult` of a step, from its plan, what its run computed and what its rows kept."""
    if ran.phase != "spec":  # a prefill or plain decode step: the whole step counts as the forward
        return StepResult(ran.phase, batch.seqs, tokens_in=ran.tokens_in, emitted_tokens=sum(kept), verify_s=step_s,
                          context_len_mean=ctx)
    plan, d = batch.plan, ran.drafted
    lengths, n_acc = d.proposal.lengths.tolist(), ran.sampled.verdict.num_accepted.tolist()
    return StepResult("spec", batch.seqs, tokens_in=ran.tokens_in, emitted_tokens=sum(kept), k=max(plan.k, default=0),
                      draft_tokens=sum(lengths), accepted_tokens=sum(n_acc), draft_s=ran.draft_s,
                      verify_s=ran.verify_s, other_s=step_s - ran.draft_s - ran.verify_s, context_len_mean=ctx,
                      drafters=[w if n > 0 else None for w, n in zip(d.drafters, lengths)],
                      drafters_asked=[w if ki > 0 else None for w, ki in zip(d.drafters, plan.k)],
                      asked=plan.k, lengths=lengths, accepted=n_acc, draft_s_by=d.seconds, catch_up=d.catch_up,
                      shadows=d.shadows, plan=plan.label)


def _mean_len(seqs: list[Sequence]) -> float:
    return sum(s.num_tokens for s in seqs) / max(len(seqs), 1)
