"""Losslessness of speculative decoding: the product's promise.

For each drafter: greedy tokens equal SD-off tokens, logprobs equal within 1e-5, lengths at stop tokens /
max_tokens / the context limit are unchanged, and sampled sequences follow the exact enumerated
distribution (chi-square, >= 20,000 samples) while the drafter really drafts and verification both accepts
and rejects. A broken verifier must fail the same test.
"""
import pytest
import torch

from specrl import LLM, SamplingParams
from specrl.engine import replaced_verify, sampler
from tests.drafters.drafters import OracleDrafter, UniformDrafter
from tests.helpers import tiny_model
from tests.stats import assert_matches, chi_square, chi_square_critical, exact_distribution

VOCAB = 12
# The model continues this prompt's "3, 5" with 5 often enough that an n-gram draft is accepted at every
# setting below (with [0, 3, 5, 3, 5, 3] the n-gram draft "3" had probability 0 under top-k/top-p)
PROMPT = [0, 3, 3, 5, 5, 3]
MODEL_FREE = ["ngram", "suffix"]


def peaky_model(seed=1):
    # peaky enough that drafts are often accepted, flat enough for ~85-450 chi-square cells
    return tiny_model(seed=seed, vocab=VOCAB, hidden=32, layers=2, scale=1.5, max_pos=48)


def methods_available():
    from tests.drafters import factories
    return factories.available(MODEL_FREE + ["draft_model", "eagle3", "mtp"])


def build(method, model, tmp_path, max_num_seqs=8, **kw):
    """`auto` mixes suffix, n-gram and EAGLE-3 drafts in every verify forward (its factory's cost profile
    makes drafting always pay)."""
    if method in ("uniform_q", "uniform_point"):
        return LLM(model, max_num_seqs=max_num_seqs,
                   drafter=UniformDrafter(model.config.vocab_size, method == "uniform_q"), **kw)
    if method == "oracle":
        return LLM(model, max_num_seqs=max_num_seqs, drafter=OracleDrafter(model), **kw)
    from tests.drafters import factories
    model, spec = factories.make(method, model, tmp_path)
    return LLM(model, max_num_seqs=max_num_seqs, spec=spec, **kw)


ALL = ["ngram", "suffix", "auto", "draft_model", "eagle3", "mtp", "uniform_q", "uniform_point", "oracle"]


def _skip_unavailable(method):
    from tests.drafters import factories
    if method in factories.FACTORIES and not factories.available([method]):
        pytest.skip(f"drafter {method!r} is not built in this checkout")


def assert_same_as_sd_off(base, got, logprob_tol: float) -> set[str]:
    """Greedy outputs `got` equal SD off's `base`: tokens, finish reasons, logprobs within `logprob_tol`.
    Returns the finish reasons seen."""
    reasons = set()
    for r0, r1 in zip(base, got):
        a, b = r0.outputs[0], r1.outputs[0]
        assert b.token_ids == a.token_ids
        assert b.finish_reason == a.finish_reason
        assert max(abs(x - y) for x, y in zip(a.logprobs, b.logprobs)) < logprob_tol
        reasons.add(a.finish_reason)
    return reasons


@pytest.mark.parametrize("method", ALL)
@pytest.mark.parametrize("batch", [1, 7])
def test_greedy_tokens_logprobs_and_lengths_match_sd_off(method, batch, tmp_path):
    _skip_unavailable(method)
    model = tiny_model(seed=3, vocab=32, hidden=48, layers=2, max_pos=40)
    prompts = [[0] + [(7 * i + j) % 30 + 2 for j in range(3 + 2 * i)] for i in range(batch)]
    # SD off, rows 0, 2 and 4 end on stop token 31 or 16 (after 4, 17 and 5 tokens), rows 1, 3 and 5 on
    # max_tokens=25, and row 6 (16 prompt tokens) on the 40-token context after 24
    params = SamplingParams(temperature=0.0, max_tokens=25, stop_token_ids=[31, 16])
    base = LLM(model, max_num_seqs=4).generate(prompts, params)
    llm = build(method, model, tmp_path, max_num_seqs=4)
    reasons = assert_same_as_sd_off(base, llm.generate(prompts, params), 1e-5)
    assert "stop" in reasons
    if batch == 7:  # every way to stop is covered: a stop token, max_tokens and the context limit
        assert reasons == {"stop", "length"} and len(base[6].outputs[0].token_ids) == 40 - 16
    if method == "oracle":
        assert llm.stats["acceptance_rate"] == 1.0


def test_context_limit_stops_at_the_same_length(tmp_path):
    model = tiny_model(seed=4, vocab=32, hidden=48, layers=2, max_pos=64)
    params = SamplingParams(temperature=0.0, max_tokens=100, ignore_eos=True)
    prompt = [[0, 2, 3, 4, 5]]
    base = LLM(model, max_model_len=23).generate(prompt, params)[0].outputs[0]
    for drafter in (OracleDrafter(model), UniformDrafter(32, False)):
        out = LLM(model, max_model_len=23, drafter=drafter).generate(prompt, params)[0].outputs[0]
        assert len(out.token_ids) == len(base.token_ids) == 23 - 5
        assert out.token_ids == base.token_ids and out.finish_reason == "length"


def test_max_tokens_not_clamped_by_k(tmp_path):
    # k + 1 = 5 does not divide 13: the last step must still stop at exactly 13
    model = tiny_model(seed=5, vocab=32, hidden=48, layers=2, max_pos=64)
    params = SamplingParams(temperature=0.0, max_tokens=13, ignore_eos=True)
    out = LLM(model, drafter=OracleDrafter(model)).generate([[0, 4]], params)[0].outputs[0]
    assert len(out.token_ids) == 13


SETTINGS = {"t1": dict(temperature=1.0, top_k=-1, top_p=1.0), "t07_p09_k8": dict(temperature=0.7, top_k=8, top_p=0.9)}
N_SAMPLES = 20_000


def sample_first3(llm, setting):
    params = SamplingParams(n=N_SAMPLES, max_tokens=3, ignore_eos=True, seed=123, **setting)
    outs = llm.generate([PROMPT], params)[0].outputs
    return [tuple(o.token_ids) for o in outs]


@pytest.mark.parametrize("setting", list(SETTINGS))
@pytest.mark.parametrize("method", ALL)
def test_sampled_distribution_is_exact(method, setting, tmp_path):
    _skip_unavailable(method)
    model = peaky_model()
    dist = exact_distribution(model, PROMPT, 3, **{k: SETTINGS[setting][k] for k in ("temperature", "top_k", "top_p")})
    llm = build(method, model, tmp_path, max_num_seqs=1024)
    samples = sample_first3(llm, SETTINGS[setting])
    assert_matches(samples, dist)
    # the test covers drafting, not only the no-draft path: drafts were proposed, some accepted, some rejected
    drafted, accepted = llm.stats["draft_tokens"], llm.stats["accepted_tokens"]
    assert drafted >= N_SAMPLES // 10, f"{method} proposed {drafted} drafts for {N_SAMPLES} samples"
    assert 0 < accepted < drafted, f"{method}: {accepted} of {drafted} drafts accepted"


def test_chi_square_catches_a_biased_verifier(tmp_path):
    """The same test must fail when verification is wrong: accept every draft of the uniform drafter."""
    model = peaky_model()
    setting = SETTINGS["t1"]
    dist = exact_distribution(model, PROMPT, 3, **setting)
    real = sampler.verify

    def accept_more(p, draft_tokens, q, u_accept, u_sample):
        return real(p, draft_tokens, q, u_accept * 0.5, u_sample)  # accepts with prob min(1, 2p/q)

    llm = build("uniform_q", model, tmp_path, max_num_seqs=1024)
    with replaced_verify(accept_more):
        stat, df = chi_square(sample_first3(llm, setting), dist)
    assert stat > chi_square_critical(df, 3.72)


def assert_sampled_logprobs_are_the_policys(llm, target) -> None:
    """Samples at temperature 0.8 from `llm`: each returned logprob equals log softmax(logits / 0.8) of a plain
    full forward of `target` over the prompt and the sampled tokens."""
    outs = llm.generate([PROMPT, PROMPT[:3]], SamplingParams(n=3, temperature=0.8, max_tokens=20, seed=5))
    for r in outs:
        for o in r.outputs:
            ids = torch.tensor([r.prompt_token_ids + o.token_ids])
            with torch.no_grad():
                logp = torch.log_softmax(target(ids).logits[0, len(r.prompt_token_ids) - 1:-1] / 0.8, -1)
            expected = logp.gather(-1, torch.tensor(o.token_ids)[:, None])[:, 0]
            assert torch.allclose(torch.tensor(o.logprobs), expected, atol=1e-5)


@pytest.mark.parametrize("method", ALL)
def test_sampled_logprobs_are_the_policys(method, tmp_path):
    _skip_unavailable(method)
    llm = build(method, peaky_model(), tmp_path, max_num_seqs=4)
    assert_sampled_logprobs_are_the_policys(llm, llm.model)  # mtp swaps in a target copy with MTP modules
