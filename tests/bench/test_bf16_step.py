"""`specrl bench bf16-step`: decode rows per batch, and the RL step's arms side by side on a tiny task."""
import json

import pytest

from specrl.cli.main import main
from tests.bench.conftest import train_overrides

DECODE_KEYS = {"part", "model", "device", "batch", "max_tokens", "repeats", "fp32_tokens_per_s", "bf16_tokens_per_s",
               "bf16_speedup"}
RL_KEYS = {"part", "arm", "steps_timed", "rollout_s", "train_s", "step_s", "step_s_vs_fp32", "logprob_diff_mean",
           "logprob_diff_max", "reward_mean"}


def _rows(capsys) -> list[dict]:
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


def test_decode_alternates_the_dtypes_at_batch_1_and_64(capsys):
    assert main(["bench", "bf16-step", "--parts", "decode", "--repeats", "1", "--max-tokens", "2"]) == 0
    env, *decode = _rows(capsys)
    assert {"threads", "torch"} <= set(env)
    assert [r["batch"] for r in decode] == [1, 64] and all(DECODE_KEYS <= set(r) for r in decode)
    assert all(r["bf16_speedup"] == pytest.approx(r["bf16_tokens_per_s"] / r["fp32_tokens_per_s"], rel=1e-3)
               for r in decode)  # rounded to 5 digits


def test_the_rl_arms_step_together_and_bf16_moves_the_logprobs(tiny_task, capsys):
    assert main(["bench", "bf16-step", "--parts", "rl", "--steps", "1", "--arms", "fp32,bf16_engine",
                 *train_overrides(*tiny_task)]) == 0
    rows = _rows(capsys)[1:]
    assert [(r["part"], r["arm"]) for r in rows] == [("rl_step", "fp32"), ("rl_step", "bf16_engine"),
                                                      ("rl", "fp32"), ("rl", "bf16_engine")]
    fp32, bf16 = rows[2:]
    assert RL_KEYS <= set(fp32) and fp32["step_s_vs_fp32"] == 1.0
    # the same policy and seed: a bf16 engine's logprobs differ from the fp32 trainer's far more than fp32's do
    assert bf16["logprob_diff_mean"] > 10 * fp32["logprob_diff_mean"]


def test_an_unknown_arm_is_one_line(capsys):
    assert main(["bench", "bf16-step", "--arms", "fp32,fp8"]) == 2
    assert capsys.readouterr().err.strip() == ("specrl bench: error: --arms: ['fp8'] unknown; choose from "
                                               "['fp32', 'bf16_engine', 'bf16_train', 'bf16']")
