"""Text options of SamplingParams (stop strings, min_tokens, top-N logprobs, special tokens), tokenizer eos ids,
and LLM.chat / get_tokenizer, with SD off (tests/drafters/test_exactness_text.py checks SD gives the same)."""
from __future__ import annotations

import json

import pytest
import torch

from specrl import LLM, SamplingParams
from specrl.model import ChatTemplateError, TextTokenizer, save_model
from tests.helpers import save_tiny, tiny_model
from tests.model.chat_tokenizers import save_chat_tokenizer

GREEDY = dict(temperature=0.0, max_tokens=20, ignore_eos=True)


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return save_tiny(tmp_path_factory.mktemp("m") / "tiny", seed=3, vocab=32, hidden=48, max_pos=64)


def test_stop_string_cuts_text_and_tokens_where_it_is_completed(tiny_dir):
    llm = LLM(tiny_dir)
    full = llm.generate([[0, 4, 9]], SamplingParams(**GREEDY))[0].outputs[0]
    words = full.text.split(" ")
    assert len(words) == 20 and full.finish_reason == "length"
    stop = f"{words[6]} {words[7]}"  # completed by token 7, unless it already occurs earlier
    first = next(i for i in range(20) if stop in " ".join(words[:i + 1]))
    out = llm.generate([[0, 4, 9]], SamplingParams(**GREEDY, stop=[stop, "never"]))[0].outputs[0]
    assert out.token_ids == full.token_ids[:first + 1] and out.finish_reason == "stop" and out.stop_reason == stop
    assert out.text == full.text[:full.text.index(stop)]  # excluded by default, like vLLM
    assert len(out.logprobs) == len(out.token_ids)
    incl = llm.generate([[0, 4, 9]], SamplingParams(**GREEDY, stop=stop, include_stop_str_in_output=True))
    assert incl[0].outputs[0].text == full.text[:full.text.index(stop) + len(stop)]


def test_stop_strings_are_looked_for_only_after_min_tokens(tiny_dir):
    llm = LLM(tiny_dir)
    full = llm.generate([[0, 4, 9]], SamplingParams(**GREEDY))[0].outputs[0]
    first_word = full.text.split(" ")[0]
    out = llm.generate([[0, 4, 9]], SamplingParams(**GREEDY, stop=[first_word]))[0].outputs[0]
    assert out.token_ids == full.token_ids[:1] and out.text == ""
    later = llm.generate([[0, 4, 9]], SamplingParams(**GREEDY, stop=[first_word], min_tokens=3))[0].outputs[0]
    assert len(later.token_ids) > 1  # the first word no longer counts: only text after min_tokens is searched


@torch.no_grad()
def test_min_tokens_masks_stop_ids_in_the_distribution(tiny_dir):
    llm = LLM(tiny_dir)
    full = llm.generate([[0, 4, 9]], SamplingParams(**GREEDY))[0].outputs[0]
    stop_id = full.token_ids[1]  # greedy would stop after 2 tokens
    params = dict(temperature=0.0, max_tokens=20, stop_token_ids=[stop_id], ignore_eos=True)
    assert len(llm.generate([[0, 4, 9]], SamplingParams(**params))[0].outputs[0].token_ids) == 2
    out = llm.generate([[0, 4, 9]], SamplingParams(**params, min_tokens=6))[0].outputs[0]
    # reference: argmax with stop_id at -inf for the first 6 tokens, then stop at stop_id (or max_tokens)
    ids, ref = [0, 4, 9], []
    while len(ref) < 20:
        logits = llm.model(torch.tensor([ids])).logits[0, -1]
        if len(ref) < 6:
            logits[stop_id] = float("-inf")
        ref.append(int(logits.argmax()))
        ids.append(ref[-1])
        if ref[-1] == stop_id:
            break
    assert out.token_ids == ref and stop_id not in out.token_ids[:6] and len(ref) > 6
    assert out.stop_reason == (stop_id if ref[-1] == stop_id else None)


@torch.no_grad()
def test_repetition_penalty_divides_seen_positive_logits_and_multiplies_negative_ones(tiny_dir):
    llm = LLM(tiny_dir)
    plain = llm.generate([[0, 4, 9]], SamplingParams(**GREEDY))[0].outputs[0].token_ids
    out = llm.generate([[0, 4, 9]], SamplingParams(**GREEDY, repetition_penalty=1.8))[0].outputs[0]
    ids, ref = [0, 4, 9], []
    while len(ref) < 20:
        logits = llm.model(torch.tensor([ids])).logits[0, -1]
        seen = torch.tensor(sorted(set(ids)))
        logits[seen] = torch.where(logits[seen] > 0, logits[seen] / 1.8, logits[seen] * 1.8)
        ref.append(int(logits.argmax()))
        ids.append(ref[-1])
    assert out.token_ids == ref and ref != plain
    logp = torch.log_softmax(llm.model(torch.tensor([[0, 4, 9] + ref])).logits[0, 2:-1], -1)
    expected = logp.gather(-1, torch.tensor(ref)[:, None])[:, 0]  # returned logprobs stay the policy's
    assert torch.allclose(torch.tensor(out.logprobs), expected, atol=1e-5)


@torch.no_grad()
def test_top_logprobs_are_the_policys_top_n(tiny_dir):
    llm = LLM(tiny_dir)
    r = llm.generate([[0, 4, 9]], SamplingParams(temperature=0.7, max_tokens=6, seed=1, logprobs=3))[0]
    o = r.outputs[0]
    assert len(o.top_logprobs) == len(o.token_ids)
    logits = llm.model(torch.tensor([r.prompt_token_ids + o.token_ids])).logits[0, 2:-1]
    logp = torch.log_softmax(logits / 0.7, -1)  # [T, V]
    for t, (tok, row) in enumerate(zip(o.token_ids, o.top_logprobs)):
        top = logp[t].topk(3)
        expected = dict(zip(top.indices.tolist(), top.values.tolist())) | {tok: float(logp[t, tok])}
        assert row.keys() == expected.keys()
        assert all(abs(row[k] - expected[k]) < 1e-5 for k in row) and abs(row[tok] - o.logprobs[t]) < 1e-6
    assert llm.generate([[0, 4]], SamplingParams(max_tokens=2))[0].outputs[0].top_logprobs is None


def test_skip_special_tokens_uses_tokenizer_config_flags(tmp_path):
    d = save_tiny(tmp_path / "m", seed=3, vocab=32, hidden=48)
    params = dict(temperature=0.0, max_tokens=12, ignore_eos=True)
    plain = LLM(d).generate([[0, 4, 9]], SamplingParams(**params))[0].outputs[0]
    special = max(set(plain.token_ids), key=plain.token_ids.count)
    (d / "tokenizer_config.json").write_text(json.dumps(
        {"added_tokens_decoder": {str(special): {"content": f"t{special}", "special": True}}}))
    llm = LLM(d)
    skip = llm.generate([[0, 4, 9]], SamplingParams(**params))[0].outputs[0]
    keep = llm.generate([[0, 4, 9]], SamplingParams(**params, skip_special_tokens=False))[0].outputs[0]
    assert keep.text == plain.text and f"t{special}" in keep.text.split(" ")
    assert skip.text.split(" ") == [w for w in plain.text.split(" ") if w != f"t{special}"]


def test_eos_of_the_tokenizer_config_is_honoured(tmp_path):
    d = save_tiny(tmp_path / "m", seed=3, vocab=32, hidden=48)
    first = LLM(d).generate([[0, 4, 9]], SamplingParams(temperature=0.0, max_tokens=8))[0].outputs[0].token_ids
    assert len(first) == 8 and 1 not in first  # the config's eos (1) does not occur
    (d / "tokenizer_config.json").write_text(json.dumps({"eos_token": f"t{first[2]}"}))
    out = LLM(d).generate([[0, 4, 9]], SamplingParams(temperature=0.0, max_tokens=8))[0].outputs[0]
    assert out.token_ids == first[:first.index(first[2]) + 1]
    assert out.finish_reason == "stop" and out.stop_reason is None


def _chat_model(tmp_path, template_in="file"):
    d = save_model(tiny_model(seed=2, vocab=300, hidden=32, max_pos=256), tmp_path / "chat")
    save_chat_tokenizer(d, "smollm2", template_in)
    return d


def test_chat_renders_each_conversation_with_the_template(tmp_path):
    llm = LLM(_chat_model(tmp_path))
    tok = llm.get_tokenizer()
    assert isinstance(tok, TextTokenizer) and tok.eos_token == "<|im_end|>"
    convs = [[{"role": "user", "content": "Hi"}],
             [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2?"}]]
    params = SamplingParams(temperature=0.0, max_tokens=5)
    outs = llm.chat(convs, params)
    for conv, out in zip(convs, outs):
        assert out.prompt == tok.apply_chat_template(conv, add_generation_prompt=True, tokenize=False)
        assert out.prompt_token_ids == tok.apply_chat_template(conv, add_generation_prompt=True)
        assert out.prompt.endswith("<|im_start|>assistant\n")
        assert out.outputs[0].token_ids == llm.generate([out.prompt_token_ids], params)[0].outputs[0].token_ids
    one = llm.chat(convs[0], params, add_generation_prompt=False)  # a single conversation
    assert len(one) == 1 and not one[0].prompt.endswith("assistant\n")


def test_chat_messages_given_to_generate_point_at_chat(tmp_path):
    llm = LLM(_chat_model(tmp_path))
    conv = [{"role": "user", "content": "Hi"}]
    for prompts in (conv, [conv]):
        with pytest.raises(ValueError, match=r"chat messages .*use LLM\.chat\(messages, sampling_params\)"):
            llm.generate(prompts)


def test_chat_without_a_template_is_a_clear_error(tmp_path):
    llm = LLM(_chat_model(tmp_path, template_in="none"))
    with pytest.raises(ChatTemplateError, match="has no chat template"):
        llm.chat([{"role": "user", "content": "Hi"}])
    no_tok = LLM(tiny_model())
    with pytest.raises(ValueError, match="no tokenizer.json"):
        no_tok.chat([{"role": "user", "content": "Hi"}])
    with pytest.raises(ValueError, match=r"stop=\['x'\] needs a tokenizer"):
        no_tok.generate([[0, 4]], SamplingParams(stop=["x"]))


def test_sampling_params_check_text_options():
    assert SamplingParams(stop="END").stop == ["END"]
    with pytest.raises(ValueError, match=r"repetition_penalty=0 must be > 0 \(1.0 disables it"):
        SamplingParams(repetition_penalty=0)
    with pytest.raises(ValueError, match=r"min_tokens=20 must be in \[0, max_tokens=16\]"):
        SamplingParams(min_tokens=20)
    with pytest.raises(ValueError, match=r"logprobs=-1"):
        SamplingParams(logprobs=-1)
    with pytest.raises(ValueError, match="non-empty strings"):
        SamplingParams(stop=[""])
