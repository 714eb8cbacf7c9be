"""A train config's dtype auto: one choice for the engine, fp32 master weights under bf16 autocast when it is bf16."""
from __future__ import annotations

import json

import pytest
import torch

from specrl.config import ConfigError
from specrl import io
from specrl.model import precision
from specrl.config.run import TrainConfig
from specrl.trainer.precision import resolve_precision
from tests.helpers import tiny_config


@pytest.fixture
def probe_says(monkeypatch, tmp_path):
    """Makes the probe answer: bf16 `speedup` times faster than fp32 on every GEMM, on a quiet machine (the real
    load would make its reason depend on what else runs beside the test)."""
    monkeypatch.delenv(precision.FIXED_ENV, raising=False)
    monkeypatch.setenv(io.CACHE_ENV, str(tmp_path))
    monkeypatch.setattr(precision, "machine_load", lambda: 0.0)

    def set_speedup(speedup: float) -> None:
        monkeypatch.setattr(precision, "time_gemm", lambda g, dt, dev: 1e-6 if dt == torch.bfloat16 else speedup * 1e-6)
    return set_speedup


def test_auto_bf16_engine_and_fp32_master_weights_under_autocast(probe_says):
    probe_says(4.0)
    cfg = TrainConfig()
    choice = resolve_precision(cfg, tiny_config())
    assert choice.dtype == torch.bfloat16
    assert (cfg.rollout.dtype, cfg.dtype, cfg.optim.autocast) == ("bfloat16", "float32", True)
    # decode at 1 and 64 rows, verify 64 x (k + 1): the default spec is on with k = 4
    assert set(choice.fp32_ms) == {1, 64, 320}
    assert resolve_precision(cfg, tiny_config()) is None  # resolved once: nothing left to choose


def test_auto_picks_fp32_everywhere_when_fp32_is_faster(probe_says):
    probe_says(0.5)  # as on an AVX2-only CPU
    cfg = TrainConfig()
    assert resolve_precision(cfg, tiny_config()).dtype == torch.float32
    assert (cfg.rollout.dtype, cfg.dtype, cfg.optim.autocast) == ("float32", "float32", False)


def test_forced_dtypes_and_autocast_are_kept(probe_says):
    probe_says(4.0)
    cfg = TrainConfig(dtype="float32")
    assert resolve_precision(cfg, tiny_config()) is None
    assert (cfg.rollout.dtype, cfg.optim.autocast) == (None, False)
    cfg = TrainConfig()
    cfg.optim.autocast = False  # set by the user: an auto bf16 engine under an fp32 trainer
    resolve_precision(cfg, tiny_config())
    assert (cfg.rollout.dtype, cfg.optim.autocast) == ("bfloat16", False)


def test_bad_train_dtypes_name_the_fix():
    with pytest.raises(ConfigError, match="dtype='float16' is invalid: expected auto, float32 or bfloat16 on the CPU"):
        TrainConfig(dtype="float16").validate()
    with pytest.raises(ConfigError, match="dtype='fp8' is invalid: expected auto or one of"):
        TrainConfig(dtype="fp8").validate()


def _one_step_run(tmp_path):
    from specrl.cli.train import build_config
    from specrl.pipeline.run import train
    from tests.pipeline.fixtures import make_setup, overrides
    model, data = make_setup(tmp_path)
    out = tmp_path / "run"
    train(build_config(None, overrides(model, data, out, **{"schedule.max_steps": 1, "schedule.eval_every": 1,
                                                             "schedule.save_every": 1})))
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return json.loads((out / "precision.json").read_text()), (out / "config.yaml").read_text(), metrics


def test_a_run_records_its_precision(probe_says, tmp_path):
    probe_says(0.5)
    recorded, config, [row] = _one_step_run(tmp_path)
    assert recorded["dtype"] == "float32" and recorded["reason"] == "probe" and recorded["bf16_speedup"] == 0.5
    assert "dtype: float32" in config  # resolved before config.yaml is written
    assert row["logprob_diff"] < 1e-5  # fp32 engine, fp32 trainer


def test_an_auto_bf16_run_trains_with_fp32_master_weights(probe_says, tmp_path):
    probe_says(4.0)
    recorded, config, [row] = _one_step_run(tmp_path)
    assert recorded["dtype"] == "bfloat16" and "autocast: true" in config
    # the bf16 engine's logprobs against the fp32 trainer's under autocast: close, not equal
    assert 0 < row["logprob_diff"] < 0.05


@pytest.mark.parametrize("engine, master, autocast, mode, stale, applies", [
    ("float32", "float32", False, "mismatch", False, False),  # the same precision: pi_gen is pi_old
    ("bfloat16", "bfloat16", False, "mismatch", False, False),
    ("bfloat16", "float32", True, "mismatch", False, True),  # dtype auto's bf16 choice
    ("float32", "float32", True, "mismatch", False, True),  # autocast alone changes the trainer's numerics
    ("bfloat16", "float32", True, "stale", False, False),  # the old rule: stale rollouts only
    ("float32", "float32", False, "always", False, True),
    ("float32", "float32", False, "stale", True, True),  # a stale rollout, whatever the precision
])
def test_the_sync_importance_ratio_applies_where_the_precisions_differ(engine, master, autocast, mode, stale,
                                                                        applies):
    from specrl.trainer.precision import importance_ratio_applies
    cfg = TrainConfig()
    cfg.rollout.dtype, cfg.dtype, cfg.optim.autocast, cfg.algorithm.is_correction = engine, master, autocast, mode
    assert importance_ratio_applies(cfg, stale) is applies


def test_an_unknown_is_correction_names_the_choices():
    from specrl.config.run import AlgorithmConfig
    with pytest.raises(ConfigError, match=r"is_correction='sometimes'.*\['stale', 'mismatch', 'always'\]"):
        AlgorithmConfig(is_correction="sometimes").validate()
