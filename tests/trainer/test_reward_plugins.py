"""Rewards as plug-ins: `reward.fn=package.module:function`, batched over (completions, rows), where each row
carries the data file's columns; the shipped rewards resolve to the same `Reward` type. Each bad input (a module
or function that does not exist, the wrong number of rewards, a data file without a column the reward reads)
is one line naming the fix."""
from __future__ import annotations

import json

import pytest

from specrl.config import ConfigError
from specrl.config.data import DataConfig, RewardConfig
from specrl.errors import InputFormatError
from specrl.trainer.data import Example, build_sources, read_rows
from specrl.trainer.rewards import REWARDS, Reward, RewardError, get_reward, resolve_reward

PLUGINS = "tests.trainer.plugin_rewards"


def _write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_a_plugin_reward_sees_the_rows_extra_columns(tmp_path):
    data = _write(tmp_path / "d.jsonl", [{"prompt": f"q{i}", "answer": str(i), "unit": "cm"} for i in range(10)])
    reward = resolve_reward("chain", f"{PLUGINS}:unit_match")
    assert isinstance(reward, Reward) and reward.columns == ("prompt", "answer", "unit")
    source, held_out = build_sources(DataConfig(source=str(data), eval_size=2), 0, reward.columns, reward.source)
    train = source.batch(0, 4)
    assert all(e.row["unit"] == "cm" and e.row["prompt"].startswith("q") for e in train + held_out)
    texts = [f"so {e.answer} cm" if i % 2 else f"so {e.answer} m" for i, e in enumerate(train)]
    assert reward(texts, [e.row for e in train]) == [0.0, 1.0, 0.0, 1.0]


def test_the_shipped_rewards_resolve_to_the_same_batched_type():
    boxed = resolve_reward("boxed")
    assert isinstance(boxed, Reward) and boxed.columns == ("prompt", "answer")
    rows = [{"prompt": "p", "answer": "7"}, {"prompt": "p", "answer": "8"}]
    assert boxed(["\\boxed{7}", "\\boxed{7}"], rows) == [1.0, 0.0]
    assert get_reward("boxed")("\\boxed{7}", "7") == 1.0  # one completion, through the same batched path
    assert set(REWARDS.get("steps").columns) == {"prompt", "answer", "start", "ops"}


def test_messages_rows_keep_their_other_columns(tmp_path):
    data = _write(tmp_path / "chat.jsonl", [{"messages": [{"role": "user", "content": "hi"}], "answer": "1",
                                            "unit": "kg"}])
    (e,) = read_rows(data, columns=("unit",))
    assert e.row == {"unit": "kg", "prompt": [{"role": "user", "content": "hi"}], "answer": "1"}


@pytest.mark.parametrize("target, says", [
    ("no_such_pkg.rewards:score", "module 'no_such_pkg.rewards' cannot be imported"),
    (f"{PLUGINS}:missing", "has no attribute of that name"),
    (f"{PLUGINS}:NOT_A_FUNCTION", "is not callable"),
    ("no_colon_here", "is not a 'module:function' path"),
])
def test_a_plugin_that_does_not_exist_is_one_line_naming_the_fix(target, says):
    with pytest.raises(ConfigError, match=says) as e:
        resolve_reward("chain", target)
    assert "\n" not in str(e.value) and "reward.fn=package.module:function" in str(e.value)


def test_an_unknown_reward_name_lists_the_valid_ones_and_the_plugin_form():
    with pytest.raises(ConfigError, match="'boxed'.*reward.fn=package.module:function"):
        resolve_reward("nope")


def test_a_plugin_returning_the_wrong_number_of_rewards_names_the_fix():
    rows = [{"prompt": "p", "answer": "1"}] * 3
    with pytest.raises(RewardError, match=r"returned 2 rewards for 3 completions; return one float per completion"):
        resolve_reward("chain", f"{PLUGINS}:one_short")(["a", "b", "c"], rows)
    with pytest.raises(RewardError, match="return a list of floats"):
        resolve_reward("chain", f"{PLUGINS}:not_numbers")(["a"], rows[:1])


def test_rows_without_a_column_the_reward_reads_fail_before_the_run(tmp_path):
    data = _write(tmp_path / "d.jsonl", [{"prompt": "q", "answer": "1", "unit": "cm"}, {"prompt": "q", "answer": "2"}])
    reward = resolve_reward("chain", f"{PLUGINS}:unit_match")
    with pytest.raises(InputFormatError, match=r"d.jsonl:2: row has no 'unit' column, which reward.fn=.*unit_match "
                                               r"reads .*add it to every row"):
        build_sources(DataConfig(source=str(data)), 0, reward.columns, reward.source)
    with pytest.raises(InputFormatError, match="data.source=arith.*no column 'start'.*reward.name=steps"):
        build_sources(DataConfig(source="arith", eval_size=2), 0, REWARDS.get("steps").columns, "reward.name=steps")
    assert Example("q", "1").row == {"prompt": "q", "answer": "1"}


def test_the_reward_config_takes_a_plugin_path_or_a_name_not_both():
    RewardConfig(fn=f"{PLUGINS}:unit_match").validate()
    with pytest.raises(ConfigError, match="'package.module:function'"):
        RewardConfig(fn="just_a_module").validate()
    with pytest.raises(ConfigError, match="not both"):
        RewardConfig(name="boxed", fn=f"{PLUGINS}:unit_match").validate()
