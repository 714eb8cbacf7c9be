"""The data a run learns from (`data`) and how its completions are scored (`reward`): sections of the run's
config tree (specrl/config/run.py)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from .build import require


class Budget(NamedTuple):
    """What a data source's rollouts and held-out evaluation may spend, for the keys left null."""
    max_tokens: int  # rollout.max_tokens
    eval_size: int  # data.eval_size
    eval_max_tokens: int  # data.eval_max_tokens


# the embedded tasks' budgets: room for "chain"'s longest worked solution (125 hops, counted)
TASK_BUDGETS = {"chain": Budget(1100, 100, 1100), "arith": Budget(200, 200, 200)}
# a prompt/answer file: a real chat model's worked answer on one core, with an evaluation short enough to
# wait for (chain's budgets are not: docs/training.md, "Budgets")
FILE_BUDGET = Budget(256, 64, 256)


@dataclass
class DataConfig:
    source: str = "chain"  # an embedded task (specrl.tasks.TASKS: "chain", "arith") or a .jsonl / .parquet file
    eval_source: str | None = None  # held-out file; None: the task's test split, or the last eval_size rows
    eval_size: int | None = None  # held-out problems, one completion each; null: the source's (Budget)
    eval_max_tokens: int | None = None  # null: the source's (Budget)
    # null: the rollout's (accuracy of the policy RL trains); 0: greedy (a small policy may loop on long chains)
    eval_temperature: float | None = None
    prompt_key: str = "prompt"
    answer_key: str = "answer"
    chat_template: bool = True  # wrap prompts in the tokenizer's chat template when it has one
    # an embedded task's hop counts (a clipped lognormal); null keeps the task's own
    hops_median: float | None = None
    hops_sigma: float | None = None
    max_hops: int | None = None

    @property
    def is_task(self) -> bool:
        """The source names an embedded task rather than a file."""
        return Path(self.source).suffix == "" and "/" not in self.source

    @property
    def budget(self) -> Budget:
        """The source's budget (`TASK_BUDGETS`, or `FILE_BUDGET` for a file): what null keys become."""
        return TASK_BUDGETS.get(self.source, FILE_BUDGET)

    def validate(self) -> None:
        require(self.eval_size is None or self.eval_size >= 0, "eval_size", self.eval_size, ">= 0 or null",
                "use 0 to turn evaluation off")
        require(self.eval_max_tokens is None or self.eval_max_tokens >= 1, "eval_max_tokens", self.eval_max_tokens,
                ">= 1 or null")
        require(self.eval_temperature is None or self.eval_temperature >= 0, "eval_temperature",
                self.eval_temperature, ">= 0 or null", "null samples at the rollout temperature, 0 is greedy")
        if not self.is_task:
            for key in ("hops_median", "hops_sigma", "max_hops"):
                require(getattr(self, key) is None, key, getattr(self, key), "null with a file source",
                        "hop counts shape the embedded tasks only")
            return
        from ..tasks.arith import COUNTER_DIGITS, TASKS
        require(self.source in TASKS, "source", self.source, f"an embedded task, one of {list(TASKS)}, or a .jsonl / "
                ".parquet file", "e.g. data.source=chain (the default) or data.source=arith (the short one)")
        require(self.hops_median is None or self.hops_median > 0, "hops_median", self.hops_median, "> 0 or null")
        require(self.hops_sigma is None or self.hops_sigma >= 0, "hops_sigma", self.hops_sigma, ">= 0 or null",
                "0 gives every problem the median's hop count")
        most = 10 ** COUNTER_DIGITS - 1
        require(self.max_hops is None or 1 <= self.max_hops <= most, "max_hops", self.max_hops,
                f"in [1, {most}] or null", f"a counted worked solution numbers its lines with {COUNTER_DIGITS} digits")


@dataclass
class RewardConfig:
    # see specrl.trainer.rewards.REWARDS; the run checks the name when it starts (pipeline/run.py), since the
    # rewards sit above the config tree
    name: str = "chain"
    # a plug-in instead: "package.module:function", a batched fn(completions, rows) -> list[float] whose rows
    # carry the data file's columns (specrl.trainer.rewards); it replaces `name`
    fn: str | None = None

    def validate(self) -> None:
        require(self.fn is None or (":" in self.fn and self.fn.partition(":")[2] != ""), "fn", self.fn,
                "null or a 'package.module:function' path", "e.g. reward.fn=mypkg.rewards:score")
        require(self.fn is None or self.name == "chain", "name", self.name, "left at its default with reward.fn",
                "give reward.name or reward.fn, not both")
