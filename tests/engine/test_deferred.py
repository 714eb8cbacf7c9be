"""A model drafter that defers its observations (engine/pool.py `Deferred`) proposes exactly what one that observed
every forward proposes, after steps of several lengths, finished sequences and prefills in between."""
import pytest
import torch

from specrl import LLM, SamplingParams
from specrl.engine.pool import Deferred
from specrl.engine.methods import build_drafter, get_method
from specrl.engine.pool import DrafterPool
from specrl.engine.sequence import Scheduler
from specrl.engine.drafting import Plan
from specrl.engine.pool import Strategy
from tests.drafters.factories import make
from tests.helpers import tiny_model


class EveryOther(Strategy):
    """Drafts k=3 with the point drafter on even steps and nothing on odd ones: verify forwards of several
    lengths reach the model drafter, which never drafts."""

    def __init__(self):
        self.n = 0

    def schedule(self, seqs):
        self.n += 1
        return Plan(["ngram"] * len(seqs), [3] * len(seqs)) if self.n % 2 else None


def engine(model, spec, defer):
    drafter = build_drafter(spec, model, 8, 64)
    ngram = build_drafter(spec.__class__(method="ngram", ngram_min=1), model, 8, 64)
    if defer and get_method(spec.method).defers:
        drafter = Deferred(drafter)
    pool = DrafterPool({"ngram": ngram, spec.method: drafter}, (spec.method,))
    return LLM(model, drafter=pool, strategy=EveryOther(), max_num_seqs=8, max_model_len=64), pool


@pytest.mark.parametrize("method", ["eagle3", "draft_model", "mtp"])
def test_a_deferred_drafter_proposes_what_an_observing_one_does(method, tmp_path):
    model, spec = make(method, tiny_model(seed=3, vocab=32, hidden=48, layers=2, max_pos=64), tmp_path)
    prompts = [[0, 5, 6, 5, 6, 5], [0, 9, 9, 9], [0, 3, 4]]
    params = [SamplingParams(temperature=1.0, max_tokens=m, seed=i) for i, m in enumerate((30, 6, 30))]
    got = []
    for defer in (False, True):
        llm, pool = engine(model, spec, defer)
        seqs = llm._make_sequences(prompts, params)
        sched = Scheduler(len(prompts))
        sched.add(seqs)
        for _ in range(9):  # a prefill, then verify steps; the 6-token sequence finishes on the way
            llm.engine.step(sched)
        wrapped = pool.drafters[method]
        if defer:  # MTP's modules read the inputs after each one: it observes every step
            assert isinstance(wrapped, Deferred) == (method != "mtp")
        if isinstance(wrapped, Deferred):
            pending = wrapped.pending
            assert pending > 0
            caught = wrapped.catch_up()  # the inputs of the sequences still running (the cost model prices them)
            assert 0 < caught <= pending
        running = sched.running
        assert len(running) == 2
        prop = pool.drafters[method].propose(running, [4] * len(running))
        got.append((prop.tokens, prop.probs))
    assert torch.equal(got[0][0], got[1][0])
    if got[0][1] is not None:
        torch.testing.assert_close(got[0][1], got[1][1], atol=1e-5, rtol=1e-4)
