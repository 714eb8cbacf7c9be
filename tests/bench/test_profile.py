"""`specrl bench profile`: one line whose groups account for the whole profiled time, with the attention and the
linears of a real forward in it, for SD off and a drafting method."""
from __future__ import annotations

import json

import pytest

from specrl.bench import profile
from tests.helpers import save_tiny


@pytest.mark.parametrize("method", [None, "ngram"])
def test_one_line_whose_groups_add_up(tmp_path, capsys, method):
    save_tiny(tmp_path / "m")
    argv = ["--model", str(tmp_path / "m"), "--batch", "3", "--max-tokens", "6", "--dtype", "float32"]
    profile.main(argv + (["--method", method] if method else []))
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1
    row = json.loads(lines[0])
    assert row["method"] == method and row["dtype"] == "float32" and row["batch"] == 3
    assert set(row["seconds"]) == {"attention", "linears", "kv_writes", "sampling", "other"}
    assert sum(row["seconds"].values()) == pytest.approx(row["profiled_s"], rel=1e-2, abs=1e-3)
    assert sum(row["shares"].values()) == pytest.approx(1.0, abs=1e-2)
    assert row["seconds"]["attention"] > 0 and row["seconds"]["linears"] > 0 and row["seconds"]["kv_writes"] > 0
    assert row["tokens"] == 3 * 6 and row["tokens_per_s"] == pytest.approx(18 / row["wall_s"], rel=0.05)  # wall_s is rounded


def test_task_prompts_stop_at_eos(capsys):
    """--task: bench peer's b64 workload on the embedded policy, whose samples end at EOS before the budget."""
    profile.main(["--task", "--batch", "4", "--max-tokens", "400", "--dtype", "float32"])
    row = json.loads(capsys.readouterr().out)
    assert row["task"] and 0 < row["tokens"] < 4 * 400


def test_ops_fall_in_their_group():
    assert profile.group_of("aten::_scaled_dot_product_flash_attention_for_cpu") == "attention"
    assert profile.group_of("mkldnn::_linear_pointwise") == "linears"
    assert profile.group_of("aten::_index_put_impl_") == "kv_writes"
    assert profile.group_of("aten::searchsorted") == "sampling"
    assert profile.group_of("aten::add") == "other"
