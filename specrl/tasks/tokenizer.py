"""Character-level tokenizer of the embedded task, in Hugging Face `tokenizer.json` format.

One token per character, `<bos>` prepended on encode, decode concatenates characters back without spaces.
`transformers.AutoTokenizer.from_pretrained(dir)` loads the saved directory as a `PreTrainedTokenizerFast`.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import NamedTuple

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors

PAD, BOS, EOS, UNK = "<pad>", "<bos>", "<eos>", "<unk>"
SPECIAL_TOKENS = (PAD, BOS, EOS, UNK)
# Everything the task writes, plus a few spare symbols for task variants.
CHARS = "0123456789+-*=?:\nQA abcdefghijklmnopqrst"


class SpecialIds(NamedTuple):
    pad: int
    bos: int
    eos: int
    unk: int


def build_tokenizer() -> Tokenizer:
    """ids: <pad>=0 <bos>=1 <eos>=2 <unk>=3, then one id per character of CHARS."""
    vocab = {tok: i for i, tok in enumerate(SPECIAL_TOKENS + tuple(CHARS))}
    tok = Tokenizer(models.WordLevel(vocab, unk_token=UNK))
    # "[\s\S]" matches any single character, newline included: one pre-token per character.
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    tok.decoder = decoders.Fuse()
    tok.post_processor = processors.TemplateProcessing(single=f"{BOS} $A", pair=f"{BOS} $A $B",
                                                       special_tokens=[(BOS, vocab[BOS])])
    tok.add_special_tokens(list(SPECIAL_TOKENS))
    return tok


def special_ids(tok: Tokenizer) -> SpecialIds:
    ids = [tok.token_to_id(t) for t in SPECIAL_TOKENS]
    if any(i is None for i in ids):
        raise ValueError(f"tokenizer lacks special tokens {SPECIAL_TOKENS} (got ids {ids}); rebuild it with "
                         "specrl.tasks.tokenizer.save_tokenizer")
    return SpecialIds(*ids)


def save_tokenizer(out_dir: str | Path, tok: Tokenizer | None = None, max_length: int = 2048) -> Path:
    """Write tokenizer.json, tokenizer_config.json, special_tokens_map.json and generation_config.json."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tok = tok or build_tokenizer()
    ids = special_ids(tok)
    tok.save(str(out / "tokenizer.json"))
    specials = {"pad_token": PAD, "bos_token": BOS, "eos_token": EOS, "unk_token": UNK}
    # decoder-only generation pads on the left in `transformers`
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": max_length, "padding_side": "left",
              "clean_up_tokenization_spaces": False, **specials}
    gen = {"bos_token_id": ids.bos, "eos_token_id": ids.eos, "pad_token_id": ids.pad}
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=2))
    (out / "special_tokens_map.json").write_text(json.dumps(specials, indent=2))
    (out / "generation_config.json").write_text(json.dumps(gen, indent=2))
    return out


def load_tokenizer(path: str | Path) -> tuple[Tokenizer, SpecialIds]:
    """Tokenizer from a directory holding tokenizer.json (or the file itself), and its special ids."""
    path = Path(path)
    file = path / "tokenizer.json" if path.is_dir() else path
    if not file.is_file():
        raise FileNotFoundError(f"no tokenizer.json at {str(path)!r}: pass a checkpoint directory that holds one, "
                                "or write one with specrl.tasks.tokenizer.save_tokenizer(dir)")
    tok = Tokenizer.from_file(str(file))
    return tok, special_ids(tok)
