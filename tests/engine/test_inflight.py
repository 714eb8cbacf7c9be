"""Weight updates in flight: LLM.update_weights between two engine steps of a running generate()."""
import pytest
import torch

from specrl import LLM, SamplingParams, SpecConfig
from tests.helpers import tiny_model

PROMPTS = [[0, 4, 5], [0, 7, 2, 9]]
PARAMS = SamplingParams(n=2, temperature=1.0, max_tokens=14, ignore_eos=True, seed=11)


def swap_at(llm: LLM, call: int, state: dict, version: int) -> None:
    """Before engine step `call` (0: the prefill), the engine takes `state` as weights `version`."""
    calls = iter(range(1_000))

    def between(unfinished: int) -> None:
        if next(calls) == call:
            llm.update_weights(state, version)
    llm.between_steps = between


@pytest.mark.parametrize("method", [None, "ngram"])
def test_tokens_after_an_inflight_swap_are_the_new_weights_own(method):
    old, new = tiny_model(seed=0, vocab=32, hidden=32), tiny_model(seed=5, vocab=32, hidden=32)
    spec = SpecConfig(method=method, num_speculative_tokens=3)
    llm = LLM(tiny_model(seed=0, vocab=32, hidden=32), max_num_seqs=8, spec=spec)
    swap_at(llm, 4, new.state_dict(), version=1)
    outs = llm.generate(PROMPTS, PARAMS)
    before = LLM(old, max_num_seqs=8).generate(PROMPTS, PARAMS)  # the old weights all the way
    for r, prompt in enumerate(PROMPTS):
        for j, o in enumerate(outs[r].outputs):
            (zero, v0), (cut, v1) = o.weight_versions
            assert (zero, v0, v1) == (0, 0, 1) and 0 < cut < len(o.token_ids)
            assert o.token_versions() == [0] * cut + [1] * (len(o.token_ids) - cut)
            # before the swap: the old weights' tokens and logprobs
            ref_old = before[r].outputs[j]
            assert o.token_ids[:cut] == ref_old.token_ids[:cut]
            # atol 1e-4: fp32 round-off between a recomputed cache and a fresh prefill (1.3e-5 seen);
            # logprobs of the wrong weights version differ by more than 0.1
            torch.testing.assert_close(o.logprobs[:cut], ref_old.logprobs[:cut], rtol=0, atol=1e-4)
            # after it: what the new weights draw from that prefix (the same seed, the same positions), with
            # their logprobs; a stale cache (the old weights' keys and values) would not give these
            prefix = prompt + o.token_ids[:cut]
            ref_new = LLM(new, max_num_seqs=8).generate(
                [prefix], SamplingParams(n=2, temperature=1.0, max_tokens=len(o.token_ids) - cut, ignore_eos=True,
                                         seed=11))[0].outputs[j]
            assert o.token_ids[cut:] == ref_new.token_ids
            torch.testing.assert_close(o.logprobs[cut:], ref_new.logprobs, rtol=0, atol=1e-4)


def test_version_tags_of_sequences_admitted_before_and_after_a_swap():
    new = tiny_model(seed=5, vocab=32, hidden=32)
    llm = LLM(tiny_model(seed=0, vocab=32, hidden=32), max_num_seqs=2)  # the second prompt's pair waits
    swap_at(llm, 3, new.state_dict(), version=7)
    first, second = llm.generate(PROMPTS, PARAMS)
    assert [o.weight_versions for o in first.outputs] == [[(0, 0), (3, 7)]] * 2  # prefill + 2 decode steps
    assert [o.weight_versions for o in second.outputs] == [[(0, 7)]] * 2  # admitted after the swap
    assert (first.outputs[0].oldest_version, first.outputs[0].newest_version) == (0, 7)
    # the next call starts on version 7 throughout
    assert {tuple(o.weight_versions[0]) for r in llm.generate(PROMPTS, PARAMS) for o in r.outputs} == {(0, 7)}


def test_swap_between_steps_with_the_same_weights_changes_nothing():
    model = tiny_model(seed=0, vocab=32, hidden=32)
    plain = LLM(model, max_num_seqs=8).generate(PROMPTS, PARAMS)
    llm = LLM(tiny_model(seed=0, vocab=32, hidden=32), max_num_seqs=8)
    swap_at(llm, 5, model.state_dict(), version=1)  # the cache is recomputed from the same weights
    swapped = llm.generate(PROMPTS, PARAMS)
    for a, b in zip(plain, swapped):
        for x, y in zip(a.outputs, b.outputs):
            assert x.token_ids == y.token_ids
            torch.testing.assert_close(x.logprobs, y.logprobs, rtol=0, atol=1e-4)
