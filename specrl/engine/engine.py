"""The engine under the `LLM` front end. One `step()` is: admit waiting sequences (a prefill step) or ask the
strategy which drafter drafts how many tokens for each running sequence; run draft -> verify -> advance
(engine/steps.py); postprocess: hand the `StepResult` to the counters, the tracer and the strategy, and retire
finished sequences."""
from __future__ import annotations

import time

from .drafting import Plan
from .pool import DrafterPool, Strategy
from .runner import ModelRunner
from .sequence import Scheduler, Sequence, StepResult
from .stats import Choices, EngineStats, Tracer
from .steps import advance, decode_step, draft, prefill_step, verify_step


class Engine:
    def __init__(self, runner: ModelRunner, pool: DrafterPool | None, strategy: Strategy | None, tracer: Tracer):
        self.runner, self.pool, self.strategy, self.tracer = runner, pool, strategy, tracer
        if pool is not None:
            pool.strategy = strategy
        if strategy is not None:  # before any sequence holds a slot (see ModelRunner.time_forward)
            strategy.calibrate(runner.time_forward, runner.num_slots)
        self.stats = EngineStats()
        # which drafters the strategy chose, over the steps; off unless a caller (`specrl bench adaptive`) sets it
        self.choices: Choices | None = None
        self.weights_version = 0  # a tag for the weights the engine holds, recorded on the tokens they sample

    def step(self, scheduler: Scheduler) -> StepResult:
        t0 = time.perf_counter()
        groups = scheduler.admit()
        if groups:
            for seq in (s for g in groups for s in g):
                seq.mark_version(self.weights_version)
            result = prefill_step(self.runner, groups, self.pool)
            result.context_len_mean = _mean_len(scheduler.running) if self.tracer.file else 0.0
        else:
            ctx = _mean_len(scheduler.running) if self.tracer.file else 0.0
            result = self.run(scheduler.running, self.schedule(scheduler.running))
            result.context_len_mean = ctx
        self.postprocess(result, scheduler, time.perf_counter() - t0)
        return result

    def schedule(self, running: list[Sequence]) -> Plan | None:
        """None: no draft this step (no drafter, or the strategy asked for none)."""
        if self.pool is None or self.strategy is None:
            return None
        return self.strategy.schedule(running, self.pool)

    def run(self, running: list[Sequence], plan: Plan | None) -> StepResult:
        """A speculative step: draft -> verify -> advance, each part timed here."""
        if self.pool is None:
            return decode_step(self.runner, running)
        # no plan: SD off this step, but the drafters still observe the forward (no re-prefill later)
        plan = (plan or Plan([None] * len(running), [0] * len(running))).capped(running)
        t0 = time.perf_counter()
        prop, draft_s_by = draft(self.pool.drafters, running, plan, self.runner.model.config.vocab_size,
                                 self.runner.device)
        t1 = time.perf_counter()
        out, positions, sampled = verify_step(self.runner, running, prop)
        t2 = time.perf_counter()
        result = advance(self.pool, running, plan, prop, out, positions, sampled)
        result.draft_s, result.verify_s, result.draft_s_by = plan.draft_s + t1 - t0, t2 - t1, draft_s_by
        result.plan = plan.label
        return result

    def postprocess(self, result: StepResult, scheduler: Scheduler, step_s: float) -> None:
        if result.phase == "spec":
            result.other_s = step_s - result.draft_s - result.verify_s
        else:  # a prefill or plain decode step: the whole step counts as the forward
            result.verify_s = step_s
        self.stats.add(result)
        if self.choices is not None:
            self.choices.add(result)
        self.tracer.record(**result.trace_row())
        if self.strategy is not None:
            self.strategy.update(result)
        for seq in scheduler.retire_finished():
            if self.pool is not None:
                self.pool.release(seq)


def _mean_len(seqs: list[Sequence]) -> float:
    return sum(s.num_tokens for s in seqs) / max(len(seqs), 1)
