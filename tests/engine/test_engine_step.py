"""Engine.step reads one way: schedule plans without drafting, run drafts and verifies without touching a
sequence, postprocess advances the sequences and makes the one StepResult the strategy learns from; turning
speculation off keeps the strategy's state; weight updates go through the engine."""
import time

import torch

from specrl import LLM, SamplingParams, SpecConfig
from specrl.engine.drafting import Plan
from specrl.engine.methods import build_drafter
from specrl.engine.pool import Deferred, DrafterPool, Strategy
from specrl.engine.sequence import Scheduler
from tests.drafters.factories import make
from tests.engine.test_adaptive import flat_profile
from tests.helpers import tiny_model

PROMPTS = [[0, 5, 6, 5, 6, 5], [0, 9, 9, 9]]


def counting(pool: DrafterPool) -> list[str]:
    """Every drafter of `pool` appends its name to the returned list when it proposes."""
    calls = []
    for name, d in pool.drafters.items():
        def propose(seqs, k, _inner=d.propose, _name=name):
            calls.append(_name)
            return _inner(seqs, k)
        d.propose = propose
    return calls


def auto_llm(tmp_path) -> LLM:
    spec = SpecConfig(method="auto", drafters=("suffix", "ngram"), ngram_min=1, adaptive_mode="deterministic",
                      cost_profile=flat_profile(tmp_path))
    return LLM(tiny_model(seed=3, vocab=32, hidden=48, layers=2, max_pos=64), spec=spec, max_num_seqs=8)


def test_schedule_drafts_nothing_run_changes_no_sequence_and_postprocess_advances_them(tmp_path):
    llm = auto_llm(tmp_path)
    seqs = llm._make_sequences(PROMPTS, [SamplingParams(n=2, temperature=1.0, max_tokens=30, seed=3)] * 2)
    sched = Scheduler(8)
    sched.add(seqs)
    engine, calls = llm.engine, counting(llm.engine.pool)
    engine.step(sched)  # the prefill
    spec_steps = 0
    while sched.running:
        t0 = time.perf_counter()
        before = [(list(s.output), s.status, list(s.versions)) for s in seqs]
        batch = engine.schedule(sched)
        assert calls == []  # a plan is bookkeeping: no drafter proposed
        ran = engine.run(batch)
        assert [(list(s.output), s.status, list(s.versions)) for s in seqs] == before  # run changed no sequence
        result = engine.postprocess(batch, ran, sched, t0)
        assert sum(len(s.output) for s in seqs) - sum(len(o) for o, _, _ in before) == result.emitted_tokens
        spec_steps += result.draft_tokens > 0
        assert len(calls) == len(result.draft_s_by) + len({d for d, _, _, _ in result.shadows})
        calls.clear()
    assert spec_steps > 0


class EveryOther(Strategy):
    """The model drafter drafts k=3 on every other step and nothing between: idle, it defers what it observes."""

    def __init__(self, name):
        self.name, self.n, self.results = name, 0, []

    def schedule(self, seqs):
        self.n += 1
        return Plan([self.name] * len(seqs), [3] * len(seqs)) if self.n % 2 == 0 else None

    def update(self, result):
        self.results.append(result)


def test_a_deferred_drafters_catch_up_reaches_the_strategy_in_the_step_result(tmp_path):
    model, spec = make("eagle3", tiny_model(seed=3, vocab=32, hidden=48, layers=2, max_pos=64), tmp_path)
    eagle = Deferred(build_drafter(spec, model, 4, 64))
    pool = DrafterPool({"eagle3": eagle, "other": build_drafter(SpecConfig(method="ngram"), model, 4, 64)},
                       ("eagle3",))
    strategy = EveryOther("eagle3")
    llm = LLM(model, drafter=pool, strategy=strategy, max_num_seqs=4, max_model_len=64)
    llm.generate(PROMPTS, SamplingParams(temperature=1.0, max_tokens=12, seed=1))
    drafting = [r for r in strategy.results if r.phase == "spec" and r.draft_s_by]
    assert drafting and all("eagle3" in r.catch_up for r in drafting)
    for r in drafting:  # the inputs it caught up on: what the rows took in the idle step before (and the prefill)
        inputs, seconds = r.catch_up["eagle3"]
        assert inputs >= len(r.seqs) and 0 < seconds <= r.draft_s_by["eagle3"]


def test_speculation_off_stops_the_plans_and_keeps_the_strategys_state(tmp_path):
    llm = auto_llm(tmp_path)
    params = SamplingParams(n=2, temperature=1.0, max_tokens=20, seed=5)
    llm.generate(PROMPTS, params)
    assert llm.stats["draft_tokens"] > 0
    state = llm.drafter_state()["strategy"]
    llm.engine.speculate = False  # rollout.audit=fallback
    llm.reset_stats()
    off = llm.generate(PROMPTS, params)
    assert llm.stats["draft_tokens"] == 0
    assert llm.drafter_state()["strategy"] == state  # nothing learnt while off, nothing lost for checkpoints
    plain = LLM(tiny_model(seed=3, vocab=32, hidden=48, layers=2, max_pos=64), max_num_seqs=8).generate(PROMPTS, params)
    assert [o.token_ids for r in off for o in r.outputs] == [o.token_ids for r in plain for o in r.outputs]


def test_a_weight_update_between_steps_goes_through_the_engine():
    new = tiny_model(seed=5, vocab=32, hidden=32)
    llm = LLM(tiny_model(seed=0, vocab=32, hidden=32), max_num_seqs=4)
    seqs = llm._make_sequences(PROMPTS, [SamplingParams(temperature=0.0, max_tokens=8, ignore_eos=True)] * 2)
    sched = Scheduler(4)
    sched.add(seqs)
    for _ in range(3):  # the prefill and two decode steps: 3 tokens each
        llm.engine.step(sched)
    llm.engine.update_weights(new.state_dict(), 4, sched.running)
    assert llm.weights_version == 4 and [s.versions for s in seqs] == [[(0, 0), (3, 4)]] * 2
    assert all(torch.equal(a, b) for a, b in zip(llm.model.state_dict().values(), new.state_dict().values()))
