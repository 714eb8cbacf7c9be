"""Tiny byte-level tokenizers with the special tokens of real chat models, saved as HF directories."""
from __future__ import annotations

import json
from pathlib import Path

from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

TEMPLATES = Path(__file__).parent / "templates"
# family -> (template file, special tokens, bos, eos, pad)
FAMILIES = {
    "smollm2": ("smollm2.jinja", ["<|endoftext|>", "<|im_start|>", "<|im_end|>"], None, "<|im_end|>", "<|im_end|>"),
    "qwen2_5": ("qwen2_5.jinja", ["<|endoftext|>", "<|im_start|>", "<|im_end|>"], None, "<|im_end|>", "<|endoftext|>"),
    "llama3": ("llama3.jinja", ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>",
                                "<|eot_id|>"], "<|begin_of_text|>", "<|eot_id|>", None),
    "llama2": ("llama2.jinja", ["<unk>", "<s>", "</s>"], "<s>", "</s>", None),
}


def byte_tokenizer(specials: list[str]) -> Tokenizer:
    """256 byte tokens (no merges) then the special tokens: encodes any text."""
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    tok = Tokenizer(models.BPE(vocab={c: i for i, c in enumerate(sorted(alphabet))}, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in specials])
    return tok


def save_chat_tokenizer(path: Path, family: str, template_in: str = "file") -> Path:
    """template_in: "file" (chat_template.jinja), "config" (tokenizer_config.json) or "none"."""
    file, specials, bos, eos, pad = FAMILIES[family]
    path.mkdir(parents=True, exist_ok=True)
    tok = byte_tokenizer(specials)
    tok.save(str(path / "tokenizer.json"))
    template = (TEMPLATES / file).read_text()
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": bos, "eos_token": eos, "pad_token": pad,
              "added_tokens_decoder": {str(tok.token_to_id(s)): {"content": s, "special": True, "lstrip": False,
                                       "rstrip": False, "normalized": False, "single_word": False} for s in specials},
              "clean_up_tokenization_spaces": False, "model_max_length": 4096}
    if family == "llama2":
        config["unk_token"] = "<unk>"
    if template_in == "config":
        config["chat_template"] = template
    elif template_in == "file":
        (path / "chat_template.jinja").write_text(template)
    (path / "tokenizer_config.json").write_text(json.dumps(config, indent=2))
    return path
