"""Draft-model drafter: lossless greedy decoding, a cache that tracks the accepted prefix, bad input."""
import pytest
import torch

from specrl import LLM, SamplingParams, SpecConfig
from specrl.model import load_model, save_model
from tests.drafters.factories import propose_after_steps
from tests.helpers import char_tokenizer_json, save_tiny, tiny_model

PARAMS = SamplingParams(temperature=0.0, max_tokens=25, stop_token_ids=[9])


def target():
    return tiny_model(seed=3, vocab=32, hidden=48, layers=2, max_pos=40)


def prompts(batch):
    return [[0] + [(7 * i + j) % 30 + 2 for j in range(3 + 2 * i)] for i in range(batch)]


def random_draft_spec(tmp_path, vocab=32, k=4):
    """A 1-layer random draft model with the target's vocabulary (used by the exactness suite too)."""
    path = save_tiny(tmp_path / "draft", seed=5, vocab=vocab, hidden=32, layers=1, max_pos=64)
    return SpecConfig(method="draft_model", draft_model=str(path), num_speculative_tokens=k)


@pytest.mark.parametrize("batch", [1, 7])
def test_greedy_tokens_match_sd_off(batch, tmp_path):
    model = target()
    base = LLM(model, max_num_seqs=4).generate(prompts(batch), PARAMS)
    got = LLM(model, max_num_seqs=4, spec=random_draft_spec(tmp_path)).generate(prompts(batch), PARAMS)
    for a, b in zip(base, got):
        assert b.outputs[0].token_ids == a.outputs[0].token_ids
        assert b.outputs[0].finish_reason == a.outputs[0].finish_reason
        assert max(abs(x - y) for x, y in zip(a.outputs[0].logprobs, b.outputs[0].logprobs)) < 1e-5


def test_target_as_its_own_draft_is_always_accepted(tmp_path):
    # the draft is the target itself, so with a correct cache every greedy draft equals the target's argmax;
    # any stale or misplaced cache entry after a rejection/continuation would show up as a rejection
    model = target()
    save_model(model, tmp_path / "self")
    spec = SpecConfig(method="draft_model", draft_model=str(tmp_path / "self"), num_speculative_tokens=3)
    llm = LLM(model, max_num_seqs=4, spec=spec)
    llm.generate(prompts(7), PARAMS)
    assert llm.stats["acceptance_rate"] == 1.0


def test_proposals_equal_cache_free_greedy_after_rejections(tmp_path):
    # a random draft is mostly rejected; after a few rounds its cached proposals must still equal greedy
    # decoding of the draft model run from scratch on each sequence's tokens
    model = target()
    llm = LLM(model, max_num_seqs=4, spec=random_draft_spec(tmp_path))
    running, prop = propose_after_steps(llm, prompts(4), seed=1)
    draft = llm.drafter.module
    for b, s in enumerate(running):
        toks = list(s.tokens)
        for _ in range(3):
            toks.append(int(draft(torch.tensor([toks])).logits[0, -1].argmax()))
        assert prop.tokens[b].tolist() == toks[-3:]


def test_vocab_mismatch_names_both_sizes(tmp_path):
    path = save_tiny(tmp_path / "draft", vocab=40, layers=1)
    with pytest.raises(ValueError, match="vocab_size 40 .* has 32"):
        LLM(target(), spec=SpecConfig(method="draft_model", draft_model=str(path)))


def test_tokenizer_mismatch_is_refused(tmp_path):
    policy = save_tiny(tmp_path / "policy", vocab=32)
    draft = save_tiny(tmp_path / "draft", vocab=32, layers=1)
    other = char_tokenizer_json(32).replace('"t3"', '"x3"')  # same size, token 3 spelled differently
    (draft / "tokenizer.json").write_text(other)
    with pytest.raises(ValueError, match="tokenizer .* differs"):
        LLM(load_model(policy), spec=SpecConfig(method="draft_model", draft_model=str(draft)))


def test_missing_checkpoint(tmp_path):
    with pytest.raises(FileNotFoundError, match="no draft model checkpoint .*train-drafter"):
        LLM(target(), spec=SpecConfig(method="draft_model", draft_model=str(tmp_path / "nope")))


def test_a_plugged_in_drafter_gives_its_kv_pages_back_between_generates(tmp_path):
    # a drafter passed as LLM(drafter=...) has no method table row, yet its cache is released like the target's
    from specrl.engine.methods import build_drafter
    model = target()
    spec = random_draft_spec(tmp_path)
    drafter = build_drafter(spec, model, 4, 40)
    llm = LLM(model, max_num_seqs=4, max_model_len=40, drafter=drafter)
    first = [o.outputs[0].token_ids for o in llm.generate(prompts(3), PARAMS)]
    assert llm.stats["draft_tokens"] > 0
    assert drafter.caches() and all(k.abs().sum().item() == 0 and v.abs().sum().item() == 0
                                    for k, v in drafter.caches())
    assert [o.outputs[0].token_ids for o in llm.generate(prompts(3), PARAMS)] == first  # re-prefilled, exact
