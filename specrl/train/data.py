"""Prompt sets for RL: the embedded arithmetic task, or a JSONL / Parquet file of `prompt` + `answer` rows.

A `PromptSource` hands out each step's prompts as a pure function of (seed, step), so a resumed run sees the
same prompts as an uninterrupted one without any sampler state in the checkpoint.
"""
from __future__ import annotations

import json
import random
from pathlib import Path
from typing import NamedTuple, Protocol

from ..errors import MissingDependency
from ..engine.rng import MASK64, SPLITMIX_GAMMA, SPLITMIX_MUL1, SPLITMIX_MUL2
from .config import DataConfig


class Example(NamedTuple):
    prompt: str
    answer: str


class PromptSource(Protocol):
    def batch(self, step: int, k: int) -> list[Example]: ...


def step_seed(seed: int, step: int, salt: int = 0) -> int:
    """A 62-bit seed for (run seed, step, use): independent streams without any stored RNG state."""
    x = (seed * SPLITMIX_GAMMA + step * SPLITMIX_MUL1 + salt * SPLITMIX_MUL2 + 1) & MASK64
    x ^= x >> 31
    return ((x * 0xD6E8FEB86659FD93) & MASK64) >> 2


class ArithSource:
    """Fresh train-split problems every step (the generator never runs dry)."""

    def __init__(self, seed: int):
        self.seed = seed

    def batch(self, step: int, k: int) -> list[Example]:
        from ..tasks import make_problems
        return [Example(p.prompt, p.answer) for p in make_problems(k, seed=step_seed(self.seed, step), split="train")]


class ListSource:
    """Rows of a file, sampled without replacement within a step."""

    def __init__(self, rows: list[Example], seed: int):
        if not rows:
            raise ValueError("the training set is empty: give a file with at least one prompt/answer row")
        self.rows, self.seed = rows, seed

    def batch(self, step: int, k: int) -> list[Example]:
        rng = random.Random(step_seed(self.seed, step))
        picks = [i for _ in range(-(-k // len(self.rows))) for i in rng.sample(range(len(self.rows)), len(self.rows))]
        return [self.rows[i] for i in picks[:k]]


def read_rows(path: str | Path, prompt_key: str = "prompt", answer_key: str = "answer") -> list[Example]:
    """Examples of a .jsonl or .parquet file; a row without the prompt field is an error naming its line."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"data file {str(path)!r} does not exist: pass a .jsonl or .parquet file, or "
                                "data.source=arith for the embedded task")
    if path.suffix == ".parquet":
        records = _parquet_records(path)
    elif path.suffix in (".jsonl", ".json"):
        records = _jsonl_records(path)
    else:
        raise ValueError(f"data file {str(path)!r} has suffix {path.suffix!r}; expected .jsonl or .parquet")
    rows = []
    for line, rec in records:
        where = f"{path}:{line}"
        if not isinstance(rec, dict) or prompt_key not in rec:
            keys = sorted(rec) if isinstance(rec, dict) else type(rec).__name__
            raise ValueError(f"{where}: row has no {prompt_key!r} field (has {keys}); every row needs "
                             f"{prompt_key!r} and {answer_key!r}, or set data.prompt_key")
        if answer_key not in rec:
            raise ValueError(f"{where}: row has no {answer_key!r} field; every row needs one, or set data.answer_key")
        rows.append(Example(str(rec[prompt_key]), str(rec[answer_key])))
    return rows


def _jsonl_records(path: Path):
    with open(path, encoding="utf-8") as f:
        for line, text in enumerate(f, start=1):
            if not text.strip():
                continue
            try:
                yield line, json.loads(text)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{line}: not valid JSON ({e.msg}); write one JSON object per line") from None


def _parquet_records(path: Path):
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise MissingDependency(f"reading {str(path)!r} needs pyarrow: `pip install pyarrow` "
                          "(or convert it to .jsonl)") from None
    for i, rec in enumerate(pq.read_table(path).to_pylist(), start=1):
        yield i, rec


def build_sources(cfg: DataConfig, seed: int) -> tuple[PromptSource, list[Example]]:
    """The training source and the held-out examples (greedy accuracy is measured on these)."""
    if cfg.source == "arith":
        from ..tasks import make_problems
        held_out = [Example(p.prompt, p.answer) for p in make_problems(cfg.eval_size, seed=0, split="test")]
        return ArithSource(seed), held_out
    rows = read_rows(cfg.source, cfg.prompt_key, cfg.answer_key)
    if cfg.eval_source is not None:
        return ListSource(rows, seed), read_rows(cfg.eval_source, cfg.prompt_key, cfg.answer_key)[:cfg.eval_size]
    n_eval = min(cfg.eval_size, len(rows) // 5)  # hold out the tail, never more than a fifth of the data
    return ListSource(rows[:len(rows) - n_eval], seed), rows[len(rows) - n_eval:]


class PromptEncoder:
    """Prompt text -> token ids, through the tokenizer's chat template when it has one."""

    def __init__(self, model_dir: str | Path, use_chat_template: bool = True):
        from ..model import load_tokenizer
        model_dir = Path(model_dir)
        self.tokenizer = load_tokenizer(model_dir)
        if self.tokenizer is None:
            raise FileNotFoundError(f"no tokenizer.json in {str(model_dir)!r}: the policy needs its tokenizer "
                                    "to encode prompts and decode completions")
        self.chat = _chat_tokenizer(model_dir) if use_chat_template else None

    def encode(self, prompt: str) -> list[int]:
        if self.chat is not None:
            text = self.chat.apply_chat_template([{"role": "user", "content": prompt}],
                                                 add_generation_prompt=True, tokenize=False)
            return list(self.chat(text, add_special_tokens=False)["input_ids"])  # the template has the specials
        return self.tokenizer.encode(prompt).ids

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)


def _chat_tokenizer(model_dir: Path):
    """`transformers`' tokenizer, loaded only when tokenizer_config.json defines a chat template."""
    cfg_file = model_dir / "tokenizer_config.json"
    if not cfg_file.is_file() or not json.loads(cfg_file.read_text()).get("chat_template"):
        return None
    try:
        from transformers import AutoTokenizer
    except ImportError:
        raise MissingDependency(f"{cfg_file} has a chat_template, which needs `pip install transformers`; "
                          "or set data.chat_template=false to feed raw prompts") from None
    return AutoTokenizer.from_pretrained(str(model_dir))
