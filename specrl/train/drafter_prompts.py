"""Prompts for offline drafter training from a JSONL file (`specrl train-drafter --data FILE`).

A row holds `prompt` (a string, tokenised as it is by the engine) or `messages` (a chat: a list of
{"role", "content"}), rendered with the policy's chat template and a generation prompt, so the drafter
learns on the text the policy will really see in rollouts. Other fields (`answer`, ...) are ignored.
"""
from __future__ import annotations

from pathlib import Path

from .data import _jsonl_records

Chat = list[dict]


def read_prompt_rows(path: str | Path) -> list[str | Chat]:
    """Each row's `prompt` string or `messages` list; a row with neither is an error naming its line."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"--data file {str(path)!r} does not exist: pass a .jsonl file of `prompt` or "
                                "`messages` rows (e.g. from `specrl make-data math --out FILE`)")
    rows = []
    for line, rec in _jsonl_records(path):
        where = f"{path}:{line}"
        if isinstance(rec, dict) and isinstance(rec.get("prompt"), str):
            rows.append(rec["prompt"])
        elif isinstance(rec, dict) and "messages" in rec:
            rows.append(check_chat(rec["messages"], where))
        else:
            keys = sorted(rec) if isinstance(rec, dict) else type(rec).__name__
            raise ValueError(f"{where}: row has neither a 'prompt' string nor 'messages' (has {keys}); write "
                             "{\"prompt\": \"...\"} or {\"messages\": [{\"role\": \"user\", \"content\": \"...\"}]}")
    if not rows:
        raise ValueError(f"--data file {str(path)!r} has no rows")
    return rows


def check_chat(messages, where: str) -> Chat:
    ok = isinstance(messages, list) and messages and all(
        isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
        for m in messages)
    if not ok:
        raise ValueError(f"{where}: 'messages' must be a non-empty list of {{\"role\": str, \"content\": str}}, "
                         f"got {str(messages)[:80]}")
    return messages


def render_chats(model_dir: str | Path, chats: list[Chat]) -> list[list[int]]:
    """Token ids of each chat through the tokenizer's chat template, ending with the assistant's turn opener.

    TODO(lead): use specrl's own chat renderer (chat_template.jinja, LLM.chat) once the text branch lands;
    until then this goes through transformers, as train/data.py's PromptEncoder does."""
    try:
        from transformers import AutoTokenizer
    except ImportError:
        raise ImportError("rendering `messages` rows needs transformers (`pip install transformers`), or give "
                          "`prompt` rows") from None
    tok = AutoTokenizer.from_pretrained(str(model_dir))
    if not tok.chat_template:
        raise ValueError(f"the --data rows have `messages` but {str(model_dir)!r} has no chat template "
                         "(chat_template.jinja or tokenizer_config.json's chat_template); give `prompt` rows")
    return [list(tok.apply_chat_template(c, add_generation_prompt=True, tokenize=True, return_dict=True)["input_ids"])
            for c in chats]


def load_prompts(path: str | Path, model_dir: str | Path, limit: int | None = None) -> list[str | list[int]]:
    """The file's first `limit` prompts (all when None): strings as they are, chats as token ids."""
    rows = read_prompt_rows(path)[:limit]
    chats = [i for i, r in enumerate(rows) if not isinstance(r, str)]
    if chats:
        for i, ids in zip(chats, render_chats(model_dir, [rows[i] for i in chats])):
            rows[i] = ids
    return rows
