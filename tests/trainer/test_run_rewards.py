"""`specrl train` end to end with a plug-in reward that reads a data column, and the sync importance ratio of a
mixed-precision run: with the engine's dtype the trainer's the loss is unchanged (no ratio), with a bf16 engine
and an fp32 trainer every sync step's loss gets min(pi_old / pi_gen, is_cap), and `is_correction=stale` keeps the
old rule (stale rollouts only)."""
from __future__ import annotations

import json

import pytest

from specrl.cli.train import main
from specrl.pipeline.run_dir import read_jsonl
from tests.pipeline.fixtures import make_setup, overrides

PLUGIN = "tests.trainer.plugin_rewards:has_row_token"


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("run_rewards")
    model, _ = make_setup(tmp)
    data = tmp / "tokens.jsonl"
    rows = [{"prompt": f"t{4 + i % 10} t{5 + i % 7}", "answer": "x", "token": f"t{7 + i % 3}"} for i in range(30)]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return model, data


def _run(setup, out, **kw):
    model, data = setup
    args = overrides(model, data, out, **{"reward.name": "chain", "reward.fn": PLUGIN, "schedule.max_steps": 2,
                                          "schedule.save_every": 2, **kw})
    assert main(args) == 0
    return read_jsonl(out / "metrics.jsonl"), read_jsonl(out / "eval.jsonl")


def test_a_plugin_reward_reads_its_column_in_a_run(setup, tmp_path):
    rows, evals = _run(setup, tmp_path / "plugin", dtype="float32", **{"rollout.dtype": "float32"})
    assert len(rows) == 2 and any(r["reward_mean"] > 0 for r in rows)  # the random policy writes t7-t9 now and then
    assert all(0 <= e["reward_mean"] <= 1 and "accuracy" in e for e in evals)
    token = {json.loads(line)["prompt"]: json.loads(line)["token"] for line in setup[1].read_text().splitlines()}
    samples = read_jsonl(tmp_path / "plugin" / "samples.jsonl")
    assert samples and all(s["reward"] == float(token[s["prompt"]] in s["completion"].split()) for s in samples)


def test_equal_precisions_leave_the_sync_loss_alone(setup, tmp_path):
    rows, _ = _run(setup, tmp_path / "same", dtype="float32", **{"rollout.dtype": "float32"})
    assert all("is_ratio" not in r for r in rows) and max(r["logprob_diff"] for r in rows) < 1e-5


def test_a_bf16_engine_gives_the_sync_loss_the_truncated_ratio(setup, tmp_path):
    rows, _ = _run(setup, tmp_path / "mixed", dtype="float32", **{"rollout.dtype": "bfloat16"})
    assert all(r["logprob_diff"] > 1e-4 for r in rows)  # the engine's logprobs are bf16's
    assert all("is_ratio" in r and r["is_ratio"] != 1.0 and abs(r["is_ratio"] - 1) < 0.5 for r in rows)
    assert all(0 <= r["is_truncated"] < 0.5 for r in rows)
    stale, _ = _run(setup, tmp_path / "stale", dtype="float32",
                    **{"rollout.dtype": "bfloat16", "algorithm.is_correction": "stale"})
    assert all("is_ratio" not in r for r in stale)
