"""Mixed drafters in one verify forward: each row carries drafts from its own drafter, at its own k.

Rows with point drafts (suffix, n-gram: q = one-hot), rows with q (a random EAGLE-3 head, sampling its
drafts), rows from deliberately bad drafters (uniform tokens, as points and with q = uniform) and rows
with no draft share every forward. The sampled sequences must follow the exact distribution (chi-square at
two temperatures), greedy tokens and logprobs must equal SD off's.
"""
import random

import pytest

from specrl import LLM, SamplingParams, SpecConfig
from specrl.drafters.ngram.drafter import NgramDrafter
from specrl.drafters.suffix.drafter import SuffixDrafter
from specrl.engine.pool import DrafterPool
from specrl.engine.methods import build_drafter
from specrl.engine.drafting import Plan
from specrl.engine.pool import Strategy
from tests.drafters.drafters import UniformDrafter
from tests.drafters.test_exactness import (PROMPT, SETTINGS, assert_same_as_sd_off,
                                           assert_sampled_logprobs_are_the_policys, peaky_model, sample_first3)
from tests.helpers import tiny_model
from tests.stats import assert_matches, exact_distribution

pytest.importorskip("specrl.drafters.eagle3.drafter")


class RandomMix(Strategy):
    """Each row, each step: a random drafter from the pool (or none) and a random k in 0..k_max, from its
    own RNG (never the sampling uniforms). Counts what the verify forwards held."""

    def __init__(self, names, k_max=4, seed=0):
        self.names, self.k_max, self.rng = list(names), k_max, random.Random(seed)
        self.mixed_steps = 0  # verify forwards with rows of at least three different drafters
        self.drafted = {n: 0 for n in names}
        self.accepted = {n: 0 for n in names}

    def schedule(self, seqs):
        which = [self.rng.choice(self.names + [None]) for _ in seqs]
        return Plan(which, [self.rng.randint(0, self.k_max) for _ in seqs])

    def update(self, result):
        if result.phase != "spec":
            return
        self.mixed_steps += len({d for d in result.drafters if d is not None}) >= 3
        for d, n, a in zip(result.drafters, result.lengths, result.accepted):
            if d is not None:
                self.drafted[d] += n
                self.accepted[d] += min(a, n)


def mixed_llm(model, tmp_path, max_num_seqs, seed=0):
    from tests.drafters.factories import _eagle3
    _, eagle = _eagle3(model, tmp_path)
    spec = SpecConfig(num_speculative_tokens=4, options={"ngram": {"min": 1}, "suffix": {"min": 1}})
    max_len = model.config.max_position_embeddings
    pool = DrafterPool({"suffix": SuffixDrafter(spec, "cpu"), "ngram": NgramDrafter(spec, "cpu"),
                        "eagle3": build_drafter(eagle, model, max_num_seqs, max_len),
                        "uniform_point": UniformDrafter(model.config.vocab_size, False, seed=1),
                        "uniform_q": UniformDrafter(model.config.vocab_size, True, seed=2)}, ("eagle3",))
    strategy = RandomMix(pool.drafters, seed=seed)
    return LLM(model, max_num_seqs=max_num_seqs, drafter=pool, strategy=strategy), strategy


@pytest.mark.parametrize("setting", list(SETTINGS))
def test_mixed_batches_sample_the_exact_distribution(setting, tmp_path):
    model = peaky_model()
    dist = exact_distribution(model, PROMPT, 3, **{k: SETTINGS[setting][k] for k in ("temperature", "top_k", "top_p")})
    llm, mix = mixed_llm(model, tmp_path, max_num_seqs=1024)
    assert_matches(sample_first3(llm, SETTINGS[setting]), dist)
    assert mix.mixed_steps > 0
    for name in mix.names:  # every drafter drafted, and saw both outcomes of verification
        assert mix.drafted[name] > 500, (name, mix.drafted)
        assert 0 < mix.accepted[name] < mix.drafted[name], (name, mix.accepted, mix.drafted)


@pytest.mark.parametrize("seed", [0, 1])
def test_mixed_batches_keep_greedy_tokens_and_logprobs(seed, tmp_path):
    model = tiny_model(seed=3, vocab=32, hidden=48, layers=2, max_pos=40)
    prompts = [[0] + [(7 * i + j) % 30 + 2 for j in range(3 + 2 * i)] for i in range(7)]
    params = SamplingParams(temperature=0.0, max_tokens=25, stop_token_ids=[31, 16])
    base = LLM(model, max_num_seqs=4).generate(prompts, params)
    llm, mix = mixed_llm(model, tmp_path, max_num_seqs=4, seed=seed)
    assert assert_same_as_sd_off(base, llm.generate(prompts, params), 1e-5) == {"stop", "length"}
    assert mix.mixed_steps > 0


def test_mixed_batches_return_the_policys_sampled_logprobs(tmp_path):
    model = peaky_model()
    llm, mix = mixed_llm(model, tmp_path, max_num_seqs=6)
    assert_sampled_logprobs_are_the_policys(llm, model)
    assert mix.mixed_steps > 0
