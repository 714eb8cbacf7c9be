"""TrainConfig: the response and held-out budgets a data source implies when their keys are left null."""
from __future__ import annotations

import pytest

from specrl.config import ConfigError, load_config
from specrl.config.data import FILE_BUDGET, TASK_BUDGETS
from specrl.config.run import TrainConfig


@pytest.mark.parametrize("source, budget", [("chain", TASK_BUDGETS["chain"]), ("arith", TASK_BUDGETS["arith"]),
                                            ("problems.jsonl", FILE_BUDGET), ("data/rows.parquet", FILE_BUDGET)])
def test_null_budgets_take_the_sources(source, budget):
    cfg = load_config(TrainConfig, overrides=[f"data.source={source}"])
    assert (cfg.rollout.max_tokens, cfg.data.eval_size, cfg.data.eval_max_tokens) == budget


def test_a_budget_set_by_the_user_is_kept():
    cfg = load_config(TrainConfig, overrides=["data.source=problems.jsonl", "rollout.max_tokens=700",
                                              "data.eval_size=0"])
    assert (cfg.rollout.max_tokens, cfg.data.eval_size, cfg.data.eval_max_tokens) == (700, 0, FILE_BUDGET.eval_max_tokens)


def test_a_bad_budget_names_the_key():
    with pytest.raises(ConfigError, match="max_tokens"):
        load_config(TrainConfig, overrides=["rollout.max_tokens=0"])
