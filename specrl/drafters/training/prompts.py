"""Prompts for offline drafter training from a JSONL file (`specrl train-drafter --data FILE`).

A row holds `prompt` (a string, tokenised as it is by the engine) or `messages` (a chat: a list of
{"role", "content"}), rendered with the policy's chat template and a generation prompt, so the drafter
learns on the text the policy will really see in rollouts. Other fields (`answer`, ...) are ignored.
"""
from __future__ import annotations

from pathlib import Path

from ...train.data import read_prompts

Chat = list[dict]


def read_prompt_rows(path: str | Path) -> list[str | Chat]:
    """Each row's `prompt` string or `messages` list (data.read_prompts); a row with neither is an error
    naming its line."""
    rows = read_prompts(path, flag="--data file")
    if not rows:
        raise ValueError(f"--data file {str(path)!r} has no rows")
    return rows


def load_prompts(path: str | Path, model_dir: str | Path, limit: int | None = None) -> list[list[int]]:
    """The file's first `limit` prompts (all when None) as token ids, encoded exactly as `specrl train`
    encodes them by default (data.PromptEncoder: a `prompt` string becomes a user turn of the checkpoint's
    chat template when it has one), so the drafter learns on the text the policy sees in rollouts."""
    from ...train.data import PromptEncoder
    encoder = PromptEncoder(model_dir)
    return [encoder.encode(r) for r in read_prompt_rows(path)[:limit]]
