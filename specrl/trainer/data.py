"""Prompt sets for RL: an embedded task (specrl.tasks.TASKS), or a JSONL / Parquet file of `prompt` (or chat
`messages`) + `answer` rows. A `PromptSource` hands out each step's prompts as a pure function of (seed, step),
so a resumed run sees the same prompts as an uninterrupted one without any sampler state in the checkpoint."""
from __future__ import annotations

import json
import random
from pathlib import Path
from typing import NamedTuple, Protocol

from ..errors import InputFormatError, MissingDependency, MissingFileError
from ..engine.sampler import MASK64, SPLITMIX_GAMMA, SPLITMIX_MUL1, SPLITMIX_MUL2
from ..model.chat import ChatTemplateError, check_conversation
from ..config.data import DataConfig

MESSAGES_KEY = "messages"


class Example(NamedTuple):
    prompt: str | list[dict]  # text, or chat messages [{"role": ..., "content": ...}]
    answer: str
    columns: dict | None = None  # the row's other columns (a file's), for rewards that read them

    @property
    def row(self) -> dict:
        """What a reward sees of this example: its other columns, then `prompt` and `answer`."""
        return {**(self.columns or {}), "prompt": self.prompt, "answer": self.answer}


def check_columns(examples: list[Example], columns: tuple[str, ...], where: str, needed_by: str) -> None:
    """Every example has the columns `needed_by` (a reward) reads: a row without one is an error naming it."""
    for i, e in enumerate(examples):
        missing = [c for c in columns if c not in e.row]
        if missing:
            has = sorted(e.row)
            raise InputFormatError(f"{where}, row {i + 1}: has no column {missing[0]!r}, which {needed_by} reads "
                                   f"(the row has {has}); add it to every row, or use a reward that does not "
                                   "need it")


class PromptSource(Protocol):
    def batch(self, step: int, k: int) -> list[Example]: ...


def step_seed(seed: int, step: int, salt: int = 0) -> int:
    """A 62-bit seed for (run seed, step, use): independent streams without any stored RNG state."""
    x = (seed * SPLITMIX_GAMMA + step * SPLITMIX_MUL1 + salt * SPLITMIX_MUL2 + 1) & MASK64
    x ^= x >> 31
    return ((x * 0xD6E8FEB86659FD93) & MASK64) >> 2


class TaskSource(NamedTuple):
    """Fresh train-split problems of an embedded task every step (the generator never runs dry)."""
    spec: object  # specrl.tasks.arith.ArithSpec
    seed: int

    def batch(self, step: int, k: int) -> list[Example]:
        from ..tasks import make_problems
        problems = make_problems(k, seed=step_seed(self.seed, step), split="train", spec=self.spec)
        return [Example(p.prompt, p.answer) for p in problems]


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


def read_rows(path: str | Path, prompt_key: str = "prompt", answer_key: str = "answer",
              columns: tuple[str, ...] = (), needed_by: str = "the reward") -> list[Example]:
    """Examples of a .jsonl or .parquet file, each with its other columns; a row without the prompt field, or
    without one of `columns` (what `needed_by` reads), is an error naming its line."""
    return [Example(*row) for row in _prompt_rows(path, prompt_key, answer_key, "data file", columns, needed_by)]


def read_prompts(path: str | Path, flag: str = "data file") -> list[str | list[dict]]:
    """Every row's prompt (text, or chat `messages`) of a .jsonl or .parquet file; other fields are ignored.
    `flag` names the option the path came from in errors (e.g. "--data file")."""
    return [prompt for prompt, *_ in _prompt_rows(path, "prompt", None, flag)]


def _prompt_rows(path: str | Path, prompt_key: str, answer_key: str | None, flag: str,
                 columns: tuple[str, ...] = (), needed_by: str = ""):
    path = Path(path)
    if not path.is_file():
        raise MissingFileError(f"{flag} {str(path)!r} does not exist: pass a .jsonl or .parquet file of "
                               f"{{\"{prompt_key}\": \"...\"}} (or chat {MESSAGES_KEY!r}) rows, e.g. from "
                               "`specrl make-data math --out FILE` (data.source=chain is the embedded task)")
    readers = {".parquet": _parquet_records, ".jsonl": _jsonl_records, ".json": _jsonl_records}
    if path.suffix not in readers:
        raise InputFormatError(f"{flag} {str(path)!r} has suffix {path.suffix!r}; expected .jsonl or .parquet")
    for line, rec in readers[path.suffix](path):
        where = f"{path}:{line}"
        if not isinstance(rec, dict) or (prompt_key not in rec and MESSAGES_KEY not in rec):
            keys = sorted(rec) if isinstance(rec, dict) else type(rec).__name__
            needs = f" and {answer_key!r}" if answer_key else ""
            raise InputFormatError(f"{where}: row has no {prompt_key!r} field (has {keys}); every row needs "
                                   f"{prompt_key!r} (text) or {MESSAGES_KEY!r} (chat messages){needs}, e.g. "
                                   f'{{"{prompt_key}": "..."}}, or set data.prompt_key')
        if answer_key is not None and answer_key not in rec:
            raise InputFormatError(f"{where}: row has no {answer_key!r} field; every row needs one, or set "
                                   "data.answer_key")
        missing = [c for c in columns if c not in ("prompt", "answer") and c not in rec]
        if missing:
            raise InputFormatError(f"{where}: row has no {missing[0]!r} column, which {needed_by} reads (the row "
                                   f"has {sorted(rec)}); add it to every row, or use a reward that does not need it")
        if prompt_key in rec:
            prompt = str(rec[prompt_key])
        else:  # a conversation (list of {role, content}), rendered later by the chat template
            try:
                check_conversation(rec[MESSAGES_KEY], where=f"{MESSAGES_KEY!r}")
            except ChatTemplateError as e:
                raise InputFormatError(f"{where}: {e}") from None
            prompt = [dict(m) for m in rec[MESSAGES_KEY]]
        extra = {k: v for k, v in rec.items() if k not in (prompt_key, MESSAGES_KEY, answer_key)}
        yield prompt, None if answer_key is None else str(rec[answer_key]), extra


def _jsonl_records(path: Path):
    with open(path, encoding="utf-8") as f:
        for line, text in enumerate(f, start=1):
            if not text.strip():
                continue
            try:
                yield line, json.loads(text)
            except json.JSONDecodeError as e:
                raise InputFormatError(f"{path}:{line}: not valid JSON ({e.msg}); write one JSON object per line, "
                                       'e.g. {"prompt": "..."}') from None


def _parquet_records(path: Path):
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise MissingDependency(f"reading {str(path)!r} needs pyarrow: `pip install pyarrow` "
                          "(or convert it to .jsonl)") from None
    yield from enumerate(pq.read_table(path).to_pylist(), start=1)


def build_sources(cfg: DataConfig, seed: int, columns: tuple[str, ...] = (), needed_by: str = "the reward"
                  ) -> tuple[PromptSource, list[Example]]:
    """The training source and the held-out examples (held-out accuracy is measured on these); a null
    `eval_size` (a config that was not validated) takes the source's budget. Every row must have `columns`
    (what `needed_by`, the run's reward, reads)."""
    size = cfg.eval_size if cfg.eval_size is not None else cfg.budget.eval_size
    if cfg.is_task:
        from ..tasks import make_problems
        from ..tasks.arith import task_spec
        spec = task_spec(cfg.source, cfg.hops_median, cfg.hops_sigma, cfg.max_hops)
        held_out = [Example(p.prompt, p.answer) for p in make_problems(size, seed=0, split="test", spec=spec)]
        check_columns(held_out[:1] or [Example("", "")], columns, f"data.source={cfg.source}", needed_by)
        return TaskSource(spec, seed), held_out
    rows = read_rows(cfg.source, cfg.prompt_key, cfg.answer_key, columns, needed_by)
    if cfg.eval_source is not None:
        held_out = read_rows(cfg.eval_source, cfg.prompt_key, cfg.answer_key, columns, needed_by)
        return ListSource(rows, seed), held_out[:size]
    n_eval = min(size, len(rows) // 5)  # hold out the tail, never more than a fifth of the data
    return ListSource(rows[:len(rows) - n_eval], seed), rows[len(rows) - n_eval:]


class PromptEncoder:
    """Prompt text or chat messages -> token ids, through the checkpoint's chat template when it has one
    (chat_template.jinja or tokenizer_config.json's key, rendered like `transformers`)."""

    def __init__(self, model_dir: str | Path, use_chat_template: bool = True):
        from ..model import load_text_tokenizer
        self.text = load_text_tokenizer(model_dir)
        if self.text is None:
            raise FileNotFoundError(f"no tokenizer.json in {str(model_dir)!r}: the policy needs its tokenizer "
                                    "to encode prompts and decode completions")
        self.use_chat_template = use_chat_template and self.text.chat_template is not None

    def encode(self, prompt: str | list[dict]) -> list[int]:
        if isinstance(prompt, str) and not self.use_chat_template:
            return self.text.encode(prompt)
        if isinstance(prompt, str):
            prompt = [{"role": "user", "content": prompt}]
        elif not self.use_chat_template:
            why = "data.chat_template=false" if self.text.chat_template is not None else \
                f"the tokenizer in {self.text.source!r} has no chat template"
            raise ValueError(f"a prompt is a list of chat messages but {why}: give 'prompt' text instead, or "
                             "use a checkpoint with chat_template.jinja and data.chat_template=true")
        return self.text.apply_chat_template(prompt, add_generation_prompt=True)  # the template has the specials

    def decode(self, ids: list[int]) -> str:
        return self.text.decode(ids, skip_special_tokens=True)
