"""Plug-in rewards for tests/trainer/test_reward_plugins.py (`reward.fn=tests.trainer.plugin_rewards:NAME`)."""
from __future__ import annotations


def unit_match(completions: list[str], rows: list[dict]) -> list[float]:
    """1 when the completion ends with the row's answer followed by its `unit` column."""
    return [float(c.strip().endswith(f"{row['answer']} {row['unit']}")) for c, row in zip(completions, rows)]


unit_match.required_columns = ("unit",)


def one_short(completions: list[str], rows: list[dict]) -> list[float]:
    """A broken reward: one reward too few."""
    return [0.0] * (len(completions) - 1)


def not_numbers(completions: list[str], rows: list[dict]):
    return ["high"] * len(completions)


NOT_A_FUNCTION = 3


def has_row_token(completions: list[str], rows: list[dict]) -> list[float]:
    """1 when the completion contains the row's `token` column (a tiny-vocabulary run's reward)."""
    return [float(row["token"] in c.split()) for c, row in zip(completions, rows)]


has_row_token.required_columns = ("token",)
