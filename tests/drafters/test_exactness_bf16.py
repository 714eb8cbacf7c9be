"""Losslessness of speculative decoding in bf16: SD on against the same bf16 engine with SD off.

A bf16 engine's verify forward (k + 1 rows per sequence) rounds differently from its decode forward (one row), so
this is not implied by the fp32 suite: greedy tokens and stopping lengths must still equal SD off's, logprobs
agree to bf16's rounding, and sampled sequences follow the bf16 model's enumerated distribution (chi-square). A
subset of the methods keeps it short: one per kind of draft (model-free, a model's q, point drafts, always right).
"""
import pytest
import torch

from specrl import LLM, SamplingParams
from tests.drafters.test_exactness import (N_SAMPLES, PROMPT, SETTINGS, _skip_unavailable, assert_same_as_sd_off,
                                           build, peaky_model, sample_first3)
from tests.helpers import tiny_model
from tests.stats import assert_matches, exact_distribution

METHODS = ["suffix", "eagle3", "draft_model", "uniform_q", "oracle"]
# bf16 rounds logits to ~3 significant digits and the verify forward's shapes round differently from decode's
BF16_LOGPROB_TOL = 0.05


@pytest.mark.parametrize("method", METHODS)
def test_bf16_greedy_tokens_and_lengths_match_bf16_sd_off(method, tmp_path):
    _skip_unavailable(method)
    model = tiny_model(seed=3, vocab=32, hidden=48, layers=2, max_pos=40).to(torch.bfloat16)
    prompts = [[0] + [(7 * i + j) % 30 + 2 for j in range(3 + 2 * i)] for i in range(7)]
    params = SamplingParams(temperature=0.0, max_tokens=25, stop_token_ids=[31, 16])
    base = LLM(model, max_num_seqs=4).generate(prompts, params)
    llm = build(method, model, tmp_path, max_num_seqs=4)
    assert next(llm.model.parameters()).dtype == torch.bfloat16
    reasons = assert_same_as_sd_off(base, llm.generate(prompts, params), BF16_LOGPROB_TOL)
    # a stop token, max_tokens and the 40-token context all end some row, at SD off's lengths
    assert reasons == {"stop", "length"} and len(base[6].outputs[0].token_ids) == 40 - 16
    assert llm.stats["draft_tokens"] > 0


@pytest.mark.parametrize("method", [None, *METHODS])
def test_bf16_sampled_distribution_is_the_bf16_models(method, tmp_path):
    """None: SD off, the reference the drafters must match."""
    if method is not None:
        _skip_unavailable(method)
    model = peaky_model().to(torch.bfloat16)
    setting = SETTINGS["t1"]
    dist = exact_distribution(model, PROMPT, 3, **setting)
    llm = LLM(model, max_num_seqs=1024) if method is None else build(method, model, tmp_path, max_num_seqs=1024)
    assert_matches(sample_first3(llm, setting), dist)
    if method is not None:
        drafted, accepted = llm.stats["draft_tokens"], llm.stats["accepted_tokens"]
        assert drafted >= N_SAMPLES // 10 and 0 < accepted <= drafted
