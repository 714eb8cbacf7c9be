"""specrl.engine.replaced_verify, the one seam for a broken verify: every engine step in the block verifies with
the replacement, and the engine's own verify is back afterwards, whether the block ends or raises."""
import pytest

from specrl import LLM, SamplingParams, SpecConfig
from specrl.engine import Verdict, replaced_verify, sample_from
from specrl.engine import sampler
from tests.helpers import tiny_model

PROMPTS = [[0, 5, 6, 5, 6, 5], [0, 3, 4, 3, 4]]  # repeats, so that n-gram drafts are proposed


def test_the_original_comes_back_after_the_block_and_after_an_error():
    real = sampler.verify
    fault = lambda *args: real(*args)  # noqa: E731
    with replaced_verify(fault) as before:
        assert sampler.verify is fault and before is real  # the real one, for a fault to call
    assert sampler.verify is real
    with pytest.raises(RuntimeError, match="boom"):
        with replaced_verify(fault):
            raise RuntimeError("boom")
    assert sampler.verify is real


def test_nested_replacements_unwind_one_at_a_time():
    real = sampler.verify
    outer, inner = (lambda *a: real(*a)), (lambda *a: real(*a))
    with replaced_verify(outer):
        with replaced_verify(inner) as before:
            assert sampler.verify is inner and before is outer
        assert sampler.verify is outer
    assert sampler.verify is real


def test_a_non_callable_is_refused_and_nothing_is_replaced():
    real = sampler.verify
    with pytest.raises(TypeError, match="expected a function with verify's signature"):
        with replaced_verify("accept_all"):
            pass
    assert sampler.verify is real


def test_the_engine_verifies_with_the_replacement_inside_the_block_only():
    llm = LLM(tiny_model(seed=3, vocab=32, hidden=48, layers=2, max_pos=64),
              spec=SpecConfig(method="ngram", ngram_min=1, num_speculative_tokens=3), max_num_seqs=4)
    params = SamplingParams(temperature=0.0, max_tokens=16)
    base = llm.generate(PROMPTS, params)
    calls = []

    def reject_all(p, draft_tokens, q, u_accept, u_sample):  # a fault: accept nothing, then sample from p
        calls.append(draft_tokens.shape)
        n = draft_tokens.new_zeros(draft_tokens.shape[0])  # [B]
        return Verdict(n, sample_from(p[:, 0], u_sample[:, 0])[:, None].repeat(1, draft_tokens.shape[1] + 1))

    llm.reset_stats()
    with replaced_verify(reject_all):
        got = llm.generate(PROMPTS, params)
    assert calls and llm.stats["draft_tokens"] > 0 and llm.stats["accepted_tokens"] == 0
    # greedy: rejecting every draft and emitting p's argmax is still plain decoding's output
    assert [o.outputs[0].token_ids for o in got] == [o.outputs[0].token_ids for o in base]
    seen = len(calls)
    llm.reset_stats()
    llm.generate(PROMPTS, params)
    assert len(calls) == seen and llm.stats["accepted_tokens"] > 0  # the engine's own verify again
