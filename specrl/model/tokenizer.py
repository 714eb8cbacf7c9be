"""Tokenizer loading (HF `tokenizer.json` through the `tokenizers` library, with `tokenizer_config.json` and
the chat template) and vocabulary checks."""
from __future__ import annotations

import json
from pathlib import Path

from tokenizers import Tokenizer

from .chat import ChatTemplateError, find_chat_template
from .checkpoint import ModelFileError


def load_tokenizer(path: str | Path) -> Tokenizer | None:
    file = Path(path) / "tokenizer.json"
    if not file.is_file():
        return None
    try:
        return Tokenizer.from_file(str(file))
    except Exception as e:  # noqa: BLE001 - the tokenizers library raises a bare Exception on a bad file
        raise ModelFileError(f"{str(file)!r} is not a readable tokenizer ({e})",
                             "copy the checkpoint's tokenizer.json again") from e


def check_tokenizer_matches(tokenizer: Tokenizer, vocab_size: int, where: str) -> None:
    size = tokenizer.get_vocab_size(with_added_tokens=True)
    if size > vocab_size:
        raise ValueError(f"the tokenizer in {where!r} has {size} tokens but the model's vocab_size is {vocab_size}: "
                         "they do not belong together. Use the tokenizer saved with this checkpoint.")


SPECIAL_KEYS = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")


class TextTokenizer:
    """A checkpoint's tokenizer as `transformers` sees it: tokenizer.json plus tokenizer_config.json (special
    tokens, added tokens' special flags) and the chat template. `backend` is the `tokenizers.Tokenizer`."""

    def __init__(self, backend: Tokenizer, config: dict | None = None, chat_template=None,
                 eos_token_ids: tuple[int, ...] = (), source: str = "<memory>"):
        self.backend, self.config, self.chat_template, self.source = backend, dict(config or {}), chat_template, source
        self.special_tokens_map = {k: _token_text(self.config.get(k)) for k in SPECIAL_KEYS
                                   if _token_text(self.config.get(k)) is not None}
        extra = [_token_text(t) for t in self.config.get("additional_special_tokens") or ()]
        if extra:
            self.special_tokens_map["additional_special_tokens"] = extra
        flagged = self.config.get("added_tokens_decoder") or {}  # may flag tokens that tokenizer.json does not
        texts = [t for v in self.special_tokens_map.values() for t in (v if isinstance(v, list) else [v])]
        self.all_special_ids = frozenset(
            {i for i, tok in self.backend.get_added_tokens_decoder().items() if tok.special}
            | {int(i) for i, entry in flagged.items() if isinstance(entry, dict) and entry.get("special")}
            | {i for i in map(self.backend.token_to_id, texts) if i is not None})
        self.eos_token_ids = tuple(dict.fromkeys(i for i in (self.eos_token_id, *eos_token_ids) if i is not None))

    # transformers' special-token attributes
    bos_token = property(lambda self: self.special_tokens_map.get("bos_token"))
    eos_token = property(lambda self: self.special_tokens_map.get("eos_token"))
    pad_token = property(lambda self: self.special_tokens_map.get("pad_token"))
    bos_token_id = property(lambda self: self.token_id(self.bos_token))
    eos_token_id = property(lambda self: self.token_id(self.eos_token))
    pad_token_id = property(lambda self: self.token_id(self.pad_token))

    @property
    def vocab_size(self) -> int:
        return self.backend.get_vocab_size(with_added_tokens=True)

    def token_id(self, token: str | None) -> int | None:
        return None if token is None else self.backend.token_to_id(token)

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return self.backend.encode(text, add_special_tokens=add_special_tokens).ids

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        if skip_special_tokens:  # tokenizer_config.json may flag tokens special that tokenizer.json does not
            ids = [i for i in ids if i not in self.all_special_ids]
        return self.backend.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def apply_chat_template(self, conversation: list[dict], add_generation_prompt: bool = False,
                            tokenize: bool = True, **variables) -> str | list[int]:
        """`transformers`-compatible: the rendered text, or its ids (the template writes the special tokens)."""
        if self.chat_template is None:
            raise ChatTemplateError(f"the tokenizer in {self.source!r} has no chat template (no chat_template.jinja, "
                                    "no 'chat_template' in tokenizer_config.json): add one to the checkpoint, or pass "
                                    "plain prompts")
        text = self.chat_template.render(conversation, add_generation_prompt,
                                         **{**self.special_tokens_map, **variables})
        return self.encode(text, add_special_tokens=False) if tokenize else text


def _token_text(value) -> str | None:
    """tokenizer_config.json writes a special token as text or as a serialised AddedToken dict."""
    if isinstance(value, dict):
        return value.get("content")
    return value if isinstance(value, str) else None


def load_text_tokenizer(path: str | Path) -> TextTokenizer | None:
    """A checkpoint directory's TextTokenizer (generation_config.json's eos ids too); None without tokenizer.json."""
    path = Path(path)
    backend = load_tokenizer(path)
    if backend is None:
        return None
    config = _read_json(path / "tokenizer_config.json")
    gen_eos = _read_json(path / "generation_config.json").get("eos_token_id")
    gen_eos = [gen_eos] if isinstance(gen_eos, int) else [int(i) for i in gen_eos or ()]
    return TextTokenizer(backend, config, find_chat_template(path, config), tuple(gen_eos), str(path))


def _read_json(file: Path) -> dict:
    if not file.is_file():
        return {}
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise ValueError(f"{file} is not valid JSON ({e.msg} at line {e.lineno}): fix or remove the file") from None
    return data if isinstance(data, dict) else {}
