"""Prompts for offline drafter training from a JSONL file (`specrl train-drafter --data FILE`): each row's
`prompt` string or chat `messages`, encoded as `specrl train` encodes them, so the drafter learns on the
text the policy sees in rollouts."""
from __future__ import annotations

from pathlib import Path

from ...train.data import PromptEncoder, read_prompts


def load_prompts(path: str | Path, model_dir: str | Path, limit: int | None = None) -> list[list[int]]:
    """The file's first `limit` prompts (all when None) as token ids (data.PromptEncoder: a `prompt` string
    becomes a user turn of the checkpoint's chat template when it has one); a row with neither field is an
    error naming its line."""
    encoder = PromptEncoder(model_dir)
    rows = read_prompts(path, flag="--data file")
    if not rows:
        raise ValueError(f"--data file {str(path)!r} has no rows")
    return [encoder.encode(r) for r in rows[:limit]]
