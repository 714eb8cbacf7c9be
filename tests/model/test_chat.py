"""Chat templates render exactly as `transformers`' apply_chat_template, on real public templates."""
from __future__ import annotations

import json

import pytest

from specrl.model import ChatTemplateError, load_text_tokenizer, save_model
from tests.helpers import tiny_model
from tests.model.chat_tokenizers import FAMILIES, save_chat_tokenizer

transformers = pytest.importorskip("transformers")

TOOL_CALL = {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Zürich", "unit": "<C>"}}}
CONVERSATIONS = [
    [{"role": "user", "content": "Hello!"}],
    [{"role": "system", "content": "Answer in French."}, {"role": "user", "content": "  What is 2+2?\n"}],
    [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello, how can I help?"},
     {"role": "user", "content": "Write <b>bold</b> \"quotes\" & ünïcode ✓"}],
    [{"role": "system", "content": "sys"}, {"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
     {"role": "user", "content": "c"}],
]
TOOL_CONVERSATION = [{"role": "user", "content": "Weather in Zürich?"},
                     {"role": "assistant", "content": "", "tool_calls": [TOOL_CALL]},
                     {"role": "tool", "content": "{\"temp\": 21}"}, {"role": "tool", "content": "sunny"}]


def _pair(tmp_path, family, template_in="file"):
    d = save_chat_tokenizer(tmp_path / family, family, template_in)
    return transformers.AutoTokenizer.from_pretrained(str(d)), load_text_tokenizer(d)


@pytest.mark.parametrize("template_in", ["file", "config"])
@pytest.mark.parametrize("family", list(FAMILIES))
def test_render_equals_transformers(family, template_in, tmp_path):
    hf, ours = _pair(tmp_path, family, template_in)
    convs = CONVERSATIONS + ([TOOL_CONVERSATION] if family == "qwen2_5" else [])
    for conv in convs:
        for gen in (False, True):
            expected = hf.apply_chat_template(conv, tokenize=False, add_generation_prompt=gen)
            assert ours.apply_chat_template(conv, add_generation_prompt=gen, tokenize=False) == expected
            ids = ours.apply_chat_template(conv, add_generation_prompt=gen)
            assert ids == hf.apply_chat_template(conv, add_generation_prompt=gen)["input_ids"]
            assert ours.decode(ids) == hf.decode(ids, skip_special_tokens=True)
            assert ours.decode(ids, skip_special_tokens=False) == hf.decode(ids, skip_special_tokens=False)


def test_special_tokens_come_from_tokenizer_config(tmp_path):
    hf, ours = _pair(tmp_path, "llama3")
    assert ours.bos_token == "<|begin_of_text|>" and ours.eos_token == "<|eot_id|>"
    assert ours.eos_token_id == hf.eos_token_id == 260 and ours.bos_token_id == hf.bos_token_id == 256
    assert ours.all_special_ids == frozenset(hf.all_special_ids) | {257, 258, 259}  # added tokens flagged special
    # the template starts with bos_token: the variable is passed, so the first id is <|begin_of_text|>
    assert ours.apply_chat_template(CONVERSATIONS[0])[0] == 256


def test_a_template_that_raises_names_its_file(tmp_path):
    _, ours = _pair(tmp_path, "llama2")
    bad = [{"role": "assistant", "content": "I speak first"}]
    with pytest.raises(ChatTemplateError, match=r"llama2/chat_template\.jinja failed to render .*roles must alternate"):
        ours.apply_chat_template(bad)


def test_syntax_error_and_missing_template_are_clear(tmp_path):
    d = save_chat_tokenizer(tmp_path / "s", "smollm2")
    (d / "chat_template.jinja").write_text("{% for m in messages %}{{ m.content }")
    with pytest.raises(ChatTemplateError, match=r"s/chat_template\.jinja is not valid jinja \(line 1"):
        load_text_tokenizer(d).apply_chat_template(CONVERSATIONS[0])
    d = save_chat_tokenizer(tmp_path / "n", "smollm2", template_in="none")
    with pytest.raises(ChatTemplateError, match="has no chat template .*chat_template.jinja"):
        load_text_tokenizer(d).apply_chat_template(CONVERSATIONS[0])


def test_bad_messages_name_the_message(tmp_path):
    _, ours = _pair(tmp_path, "smollm2")
    with pytest.raises(ChatTemplateError, match="message 1 is .*needs a 'role' and a 'content'"):
        ours.apply_chat_template([{"role": "user", "content": "a"}, {"text": "b"}])
    with pytest.raises(ChatTemplateError, match="expected a non-empty list"):
        ours.apply_chat_template([])


def test_jinja_file_wins_over_config_key_and_named_templates(tmp_path):
    d = save_chat_tokenizer(tmp_path / "q", "smollm2")
    cfg = json.loads((d / "tokenizer_config.json").read_text())
    cfg["chat_template"] = [{"name": "default", "template": "D{{ messages[0].content }}"},
                            {"name": "tool_use", "template": "T"}]
    (d / "tokenizer_config.json").write_text(json.dumps(cfg))
    assert load_text_tokenizer(d).apply_chat_template(CONVERSATIONS[0], tokenize=False).startswith("<|im_start|>")
    (d / "chat_template.jinja").unlink()
    assert load_text_tokenizer(d).apply_chat_template(CONVERSATIONS[0], tokenize=False) == "DHello!"


def test_checkpoints_carry_the_template_and_tokenizer_config(tmp_path):
    src = save_chat_tokenizer(tmp_path / "tok", "smollm2")
    out = save_model(tiny_model(vocab=300), tmp_path / "ckpt", tokenizer_dir=src)
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        assert (out / name).read_text() == (src / name).read_text()
    again = save_model(tiny_model(vocab=300), tmp_path / "ckpt2", tokenizer_dir=out)  # a checkpoint of a checkpoint
    assert load_text_tokenizer(again).apply_chat_template(CONVERSATIONS[0], tokenize=False) == \
        load_text_tokenizer(src).apply_chat_template(CONVERSATIONS[0], tokenize=False)
