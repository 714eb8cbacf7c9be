"""Prompt sets: embedded task, JSONL rows (with line numbers in errors), chat templates, per-step sampling."""
from __future__ import annotations

import importlib.util
import json

import pytest

from specrl.config.data import DataConfig
from specrl.trainer.data import ListSource, TaskSource, PromptEncoder, build_sources, read_rows
from tests.helpers import save_tiny


def _write(path, rows):
    path.write_text("".join((json.dumps(r) if not isinstance(r, str) else r) + "\n" for r in rows))
    return path


def test_jsonl_rows(tmp_path):
    f = _write(tmp_path / "d.jsonl", [{"prompt": "1+1", "answer": 2}, "", {"prompt": "2+2", "answer": "4", "x": 1}])
    rows = read_rows(f)
    assert [(r.prompt, r.answer) for r in rows] == [("1+1", "2"), ("2+2", "4")]  # answers become strings


def test_row_without_prompt_names_its_line(tmp_path):
    f = _write(tmp_path / "d.jsonl", [{"prompt": "a", "answer": "b"}, "", {"question": "c", "answer": "d"}])
    with pytest.raises(ValueError, match=r"d\.jsonl:3: row has no 'prompt' field \(has \['answer', 'question'\]\); "
                                         r"every row needs 'prompt' \(text\) or 'messages' \(chat messages\)"):
        read_rows(f)


def test_rows_may_give_chat_messages(tmp_path):
    conv = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "1+1?"}]
    rows = read_rows(_write(tmp_path / "d.jsonl", [{"messages": conv, "answer": 2}, {"prompt": "x", "answer": 1}]))
    assert rows[0].prompt == conv and rows[1].prompt == "x"
    bad = _write(tmp_path / "b.jsonl", [{"messages": [{"role": "user"}], "answer": 2}])
    with pytest.raises(ValueError, match=r"b\.jsonl:1: 'messages' message 0 is .*needs a 'role' and a 'content'"):
        read_rows(bad)
    with pytest.raises(ValueError, match=r"b\.jsonl:1: 'messages' is str"):
        read_rows(_write(bad, [{"messages": "hi", "answer": 2}]))


def test_row_without_answer_and_bad_json_name_their_lines(tmp_path):
    with pytest.raises(ValueError, match=r":2: row has no 'answer' field"):
        read_rows(_write(tmp_path / "a.jsonl", [{"prompt": "a", "answer": "b"}, {"prompt": "c"}]))
    with pytest.raises(ValueError, match=r":1: not valid JSON"):
        read_rows(_write(tmp_path / "b.jsonl", ["{oops"]))
    with pytest.raises(ValueError, match="expected .jsonl or .parquet"):
        read_rows(_write(tmp_path / "c.csv", ["a,b"]))
    with pytest.raises(FileNotFoundError, match="data.source=chain"):
        read_rows(tmp_path / "missing.jsonl")


@pytest.mark.skipif(importlib.util.find_spec("pyarrow") is not None, reason="pyarrow is installed")
def test_parquet_without_pyarrow_says_how_to_install_it(tmp_path):
    (tmp_path / "d.parquet").write_bytes(b"PAR1")
    with pytest.raises(ImportError, match="pip install pyarrow"):
        read_rows(tmp_path / "d.parquet")


def test_task_source_is_a_pure_function_of_seed_and_step():
    from specrl.tasks import task_spec
    spec = task_spec("chain")
    a, b = TaskSource(spec, seed=0), TaskSource(spec, seed=0)
    assert a.batch(3, 5) == b.batch(3, 5)
    assert a.batch(3, 5) != a.batch(4, 5)
    assert TaskSource(spec, seed=1).batch(3, 5) != a.batch(3, 5)


def test_named_tasks_and_their_hop_knobs_shape_the_prompts():
    from specrl.config.data import DataConfig
    hops = lambda cfg: [int(e.prompt.split(" n")[1].split("=")[0]) for e in build_sources(cfg, 0)[0].batch(0, 400)]
    chain, short = hops(DataConfig()), hops(DataConfig(source="arith"))
    assert max(short) <= 20 < max(chain) <= 125  # the tasks' own caps
    assert sorted(chain)[200] > 3 * sorted(short)[200]  # medians 22 and 3 hops
    assert max(hops(DataConfig(max_hops=9))) == 9 and set(hops(DataConfig(hops_sigma=0.0))) == {22}
    held_out = build_sources(DataConfig(source="arith", eval_size=7), 0)[1]
    assert len(held_out) == 7 and all(" n" in e.prompt for e in held_out)


def test_list_source_covers_the_rows_before_repeating_them(tmp_path):
    rows = read_rows(_write(tmp_path / "d.jsonl", [{"prompt": str(i), "answer": "0"} for i in range(5)]))
    src = ListSource(rows, seed=0)
    assert sorted(e.prompt for e in src.batch(0, 5)) == ["0", "1", "2", "3", "4"]  # one permutation
    assert len(src.batch(0, 12)) == 12 and src.batch(7, 3) == ListSource(rows, 0).batch(7, 3)


def test_held_out_split(tmp_path):
    f = _write(tmp_path / "d.jsonl", [{"prompt": str(i), "answer": "0"} for i in range(20)])
    _, held = build_sources(DataConfig(source=str(f), eval_size=10), seed=0)
    assert [e.prompt for e in held] == ["16", "17", "18", "19"]  # at most a fifth of the data is held out
    _, held = build_sources(DataConfig(eval_size=7), seed=0)  # embedded task: its test split
    assert len(held) == 7 and all(e.prompt.startswith("Q:") for e in held)


def test_prompt_encoder_plain_and_chat_template(tmp_path):
    d = save_tiny(tmp_path / "m")
    assert PromptEncoder(d).encode("t4 t5") == [4, 5]
    (d / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "unk_token": "t2",
        "chat_template": "{% for m in messages %}t9 {{ m['content'] }} t10{% endfor %} t11"}))
    enc = PromptEncoder(d)
    assert enc.encode("t4 t5") == [9, 4, 5, 10, 11]  # template: t9 <content> t10, generation prompt t11
    assert PromptEncoder(d, use_chat_template=False).encode("t4 t5") == [4, 5]
    assert enc.decode([4, 5]) == "t4 t5"


def test_prompt_encoder_uses_chat_template_jinja(tmp_path):
    """A real checkpoint ships its template as chat_template.jinja; the encoder must not skip it."""
    from specrl.model import load_text_tokenizer
    from tests.model.chat_tokenizers import save_chat_tokenizer
    d = save_chat_tokenizer(tmp_path / "smol", "smollm2")
    enc = PromptEncoder(d)
    ids = enc.encode("What is 2+2?")
    text = load_text_tokenizer(d).backend.decode(ids, skip_special_tokens=False)
    assert text == ("<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face"
                    "<|im_end|>\n"
                    "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n")
    conv = [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}]
    assert enc.encode(conv) == load_text_tokenizer(d).apply_chat_template(conv, add_generation_prompt=True)
    assert enc.decode(ids).startswith("system\nYou are")  # special tokens skipped
    plain = PromptEncoder(d, use_chat_template=False)
    assert plain.encode("hi") == load_text_tokenizer(d).encode("hi")
    with pytest.raises(ValueError, match="list of chat messages but data.chat_template=false"):
        plain.encode(conv)
