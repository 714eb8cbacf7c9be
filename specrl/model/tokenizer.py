"""Tokenizer loading (HF `tokenizer.json` through the `tokenizers` library) and vocabulary checks."""
from __future__ import annotations

from pathlib import Path

from tokenizers import Tokenizer

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
        raise ValueError(
            f"the tokenizer in {where!r} has {size} tokens but the model's vocab_size is {vocab_size}: "
            "they do not belong together. Use the tokenizer saved with this checkpoint.")
