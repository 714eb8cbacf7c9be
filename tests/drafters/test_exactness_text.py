"""Losslessness with the text options: stop strings, min_tokens and repetition_penalty give the same results
with SD as without.

Greedy: identical tokens, text, finish and stop reasons, including where a multi-token accept crosses the stop
string. Sampled: the sequences follow the exact enumerated distribution of plain decoding with the same
truncation / mask (chi-square over 20,000 samples); a verifier that skipped the min_tokens mask fails it.
"""
import pytest
import torch

from specrl import LLM, SamplingParams
from specrl.engine.sampler import target_probs
from tests.drafters.drafters import OracleDrafter
from tests.drafters.test_exactness import PROMPT, VOCAB, build, peaky_model
from tests.helpers import char_tokenizer_json, tiny_model
from tests.stats import assert_matches, chi_square, chi_square_critical

METHODS = ["ngram", "suffix", "oracle", "uniform_q", "uniform_point"]
# sampled tests are slow (20,000 samples): the drafters that reach every verification path (accept, residual
# with q a distribution and with q one-hot, bonus); the model-free ones are the same checks as test_exactness
SAMPLED = ["ngram", "uniform_q", "uniform_point"]
N_SAMPLES = 20_000


def _tokenizer_dir(tmp_path, vocab):
    d = tmp_path / "tok"
    d.mkdir(exist_ok=True)
    (d / "tokenizer.json").write_text(char_tokenizer_json(vocab))  # token i is "t{i}", decoded space-separated
    return d


def _greedy_model():
    return tiny_model(seed=3, vocab=32, hidden=48, layers=2, max_pos=64)


PROMPTS = [[0] + [(7 * i + j) % 30 + 2 for j in range(3 + 2 * i)] for i in range(5)]


def _stops_from(outputs):
    """For each prompt, stop strings completed mid-output: two words at tokens 6-7, and a single word 11."""
    return [[" ".join(o.text.split(" ")[6:8]), o.text.split(" ")[11]] for o in outputs]


@pytest.mark.parametrize("method", METHODS)
def test_greedy_stop_strings_match_sd_off(method, tmp_path):
    model, tok = _greedy_model(), _tokenizer_dir(tmp_path, 32)
    base = LLM(model, tokenizer=tok, max_num_seqs=4)
    free = [r.outputs[0] for r in base.generate(PROMPTS, SamplingParams(temperature=0.0, max_tokens=20,
                                                                        ignore_eos=True))]
    params = [SamplingParams(temperature=0.0, max_tokens=20, ignore_eos=True, stop=s) for s in _stops_from(free)]
    want = base.generate(PROMPTS, params)
    got = build(method, model, tmp_path, max_num_seqs=4, tokenizer=tok).generate(PROMPTS, params)
    for w, g, f in zip(want, got, free):
        a, b = w.outputs[0], g.outputs[0]
        assert (b.token_ids, b.text, b.finish_reason, b.stop_reason) == (a.token_ids, a.text, a.finish_reason,
                                                                         a.stop_reason)
        assert a.finish_reason == "stop" and len(a.token_ids) <= 12 < len(f.token_ids)  # the stop string cut it
        assert max(abs(x - y) for x, y in zip(a.logprobs, b.logprobs)) < 1e-5


def test_oracle_accepts_across_the_stop_string(tmp_path):
    """Every draft is accepted: steps emit 1 (prefill) then 5 tokens, so a stop completed by token 7 (index 6) or
    8 lies inside an accepted block; SD must cut there, not at the block's end."""
    model, tok = _greedy_model(), _tokenizer_dir(tmp_path, 32)
    params = SamplingParams(temperature=0.0, max_tokens=20, ignore_eos=True)
    free = LLM(model, tokenizer=tok).generate([PROMPTS[0]], params)[0].outputs[0]
    words = free.text.split(" ")
    stop = " ".join(words[6:8])
    cut = next(i for i in range(20) if stop in " ".join(words[:i + 1]))
    assert (cut - 1) % 5 != 4  # not the last token of a block
    llm = LLM(model, tokenizer=tok, drafter=OracleDrafter(model))
    out = llm.generate([PROMPTS[0]], SamplingParams(temperature=0.0, max_tokens=20, ignore_eos=True, stop=[stop]))
    assert out[0].outputs[0].token_ids == free.token_ids[:cut + 1]
    assert llm.stats["acceptance_rate"] == 1.0


@pytest.mark.parametrize("method", METHODS)
def test_greedy_min_tokens_match_sd_off(method, tmp_path):
    model = _greedy_model()
    free = [r.outputs[0].token_ids for r in LLM(model).generate(
        PROMPTS, SamplingParams(temperature=0.0, max_tokens=20, ignore_eos=True))]
    # each prompt's own 2nd greedy token is a stop id, so without min_tokens it would stop after 2 tokens
    params = [SamplingParams(temperature=0.0, max_tokens=20, stop_token_ids=[f[1]], min_tokens=9) for f in free]
    want = LLM(model, max_num_seqs=4).generate(PROMPTS, params)
    got = build(method, model, tmp_path, max_num_seqs=4).generate(PROMPTS, params)
    for w, g, f in zip(want, got, free):
        a, b = w.outputs[0], g.outputs[0]
        assert (b.token_ids, b.finish_reason) == (a.token_ids, a.finish_reason)
        assert len(a.token_ids) >= 9 and f[1] not in a.token_ids[:9]  # the mask held the stop id back


@torch.no_grad()
def masked_distribution(model, prompt, steps, temperature, banned: list[int], min_tokens: int,
                        penalty: float = 1.0) -> dict:
    """Like tests.stats.exact_distribution, with `banned` ids at probability 0 for the first min_tokens tokens
    and a repetition penalty on every token already in the context."""
    dist = {(): 1.0}
    for t in range(steps):
        prefixes = list(dist)
        logits = model(torch.tensor([prompt + list(p) for p in prefixes])).logits[:, -1:]  # [N, 1, V]
        for i, p in enumerate(prefixes):
            seen = torch.tensor(sorted(set(prompt + list(p))))
            row = logits[i, 0, seen]
            logits[i, 0, seen] = torch.where(row > 0, row / penalty, row * penalty)
        if t < min_tokens:
            logits[..., banned] = float("-inf")
        n = len(prefixes)
        probs = target_probs(logits, torch.full((n,), temperature), torch.full((n,), -1, dtype=torch.long),
                             torch.ones(n))[:, 0].double()  # [N, V]
        dist = {p + (v,): dist[p] * float(probs[i, v]) for i, p in enumerate(prefixes) for v in range(VOCAB)
                if probs[i, v] > 0}
    return dist


def _min_tokens_samples(llm):
    # eos (1) and stop id 5 are banned for 2 tokens; the 3rd may be either (it ends the sequence at max_tokens)
    params = SamplingParams(n=N_SAMPLES, temperature=1.0, max_tokens=3, min_tokens=2, stop_token_ids=[5], seed=7)
    return [tuple(o.token_ids) for o in llm.generate([PROMPT], params)[0].outputs]


@pytest.mark.parametrize("method", SAMPLED)
def test_sampled_min_tokens_distribution_is_exact(method, tmp_path):
    model = peaky_model()
    dist = masked_distribution(model, PROMPT, 3, 1.0, banned=[1, 5], min_tokens=2)
    assert sum(p for s, p in dist.items() if s[2] in (1, 5)) > 0.05  # the mask matters at step 3 no more
    assert_matches(_min_tokens_samples(build(method, model, tmp_path, max_num_seqs=1024)), dist)


def test_chi_square_catches_verification_without_the_mask(monkeypatch, tmp_path):
    """The same test must fail when the mask reaches plain sampling but not the verified p."""
    from specrl.engine import sampler
    real = sampler.apply_min_tokens
    monkeypatch.setattr(sampler, "apply_min_tokens", lambda logits, seqs: real(logits, seqs) if logits.shape[1] == 1
                        else logits)
    model = peaky_model()
    dist = masked_distribution(model, PROMPT, 3, 1.0, banned=[1, 5], min_tokens=2)
    samples = _min_tokens_samples(build("uniform_q", model, tmp_path, max_num_seqs=1024))
    impossible = [s for s in samples if s not in dist]  # a banned id inside the first 2 tokens
    assert impossible or chi_square(samples, dist)[0] > chi_square_critical(chi_square(samples, dist)[1], 3.72)


def _truncate(seq: tuple, stops: list[str]) -> tuple:
    """Plain decoding's rule: stop after the first token whose text completes a stop string."""
    for i in range(len(seq)):
        text = " ".join(f"t{t}" for t in seq[:i + 1])
        if any(s in text for s in stops):
            return seq[:i + 1]
    return seq


@pytest.mark.parametrize("method", ["uniform_q", "suffix"])
def test_sampled_stop_string_distribution_is_exact(method, tmp_path):
    model = peaky_model()
    full = masked_distribution(model, PROMPT, 3, 1.0, banned=[], min_tokens=0)
    by_pair: dict = {}
    for s, p in full.items():
        by_pair[s[:2]] = by_pair.get(s[:2], 0.0) + p
    a, b = max(by_pair, key=by_pair.get)
    stops = [f"t{a} t{b}", "t7"]  # the likeliest first pair, and a word that may end any position
    dist: dict = {}
    for s, p in full.items():
        dist[_truncate(s, stops)] = dist.get(_truncate(s, stops), 0.0) + p
    assert sum(p for s, p in dist.items() if len(s) < 3) > 0.2  # truncation happens often
    llm = build(method, model, tmp_path, max_num_seqs=1024, tokenizer=_tokenizer_dir(tmp_path, VOCAB))
    params = SamplingParams(n=N_SAMPLES, temperature=1.0, max_tokens=3, ignore_eos=True, stop=stops, seed=11)
    outs = llm.generate([PROMPT], params)[0].outputs
    assert_matches([tuple(o.token_ids) for o in outs], dist)
    assert all(o.finish_reason == "stop" for o in outs if len(o.token_ids) < 3)


@pytest.mark.parametrize("method", METHODS)
def test_greedy_repetition_penalty_matches_sd_off(method, tmp_path):
    model = _greedy_model()
    params = SamplingParams(temperature=0.0, max_tokens=20, ignore_eos=True, repetition_penalty=1.5)
    want = LLM(model, max_num_seqs=4).generate(PROMPTS, params)
    got = build(method, model, tmp_path, max_num_seqs=4).generate(PROMPTS, params)
    plain = LLM(model).generate(PROMPTS, SamplingParams(temperature=0.0, max_tokens=20, ignore_eos=True))
    assert [w.outputs[0].token_ids for w in want] != [p.outputs[0].token_ids for p in plain]  # it matters
    for w, g in zip(want, got):
        assert g.outputs[0].token_ids == w.outputs[0].token_ids


def _penalty_samples(llm):
    params = SamplingParams(n=N_SAMPLES, temperature=1.0, max_tokens=3, ignore_eos=True, repetition_penalty=3.0,
                            seed=13)
    return [tuple(o.token_ids) for o in llm.generate([PROMPT], params)[0].outputs]


@pytest.mark.parametrize("method", SAMPLED)
def test_sampled_repetition_penalty_distribution_is_exact(method, tmp_path):
    model = peaky_model()
    dist = masked_distribution(model, PROMPT, 3, 1.0, banned=[], min_tokens=0, penalty=3.0)
    assert_matches(_penalty_samples(build(method, model, tmp_path, max_num_seqs=1024)), dist)


def test_chi_square_catches_a_penalty_that_ignores_the_drafts(monkeypatch, tmp_path):
    """Position t of a verify forward must count drafts[:t] as context; a penalty that forgets them is caught."""
    from specrl.engine import sampler
    real = sampler.apply_repetition_penalty
    monkeypatch.setattr(sampler, "apply_repetition_penalty", lambda logits, seqs, drafts=None: real(logits, seqs))
    model = peaky_model()
    dist = masked_distribution(model, PROMPT, 3, 1.0, banned=[], min_tokens=0, penalty=3.0)
    stat, df = chi_square(_penalty_samples(build("uniform_q", model, tmp_path, max_num_seqs=1024)), dist)
    assert stat > chi_square_critical(df, 3.72)
