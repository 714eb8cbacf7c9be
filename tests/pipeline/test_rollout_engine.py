"""`specrl train`'s rollout engine takes rollout.dtype and the KV budget keys."""
from __future__ import annotations

import pytest
import torch

from specrl.config import ConfigError, load_config
from specrl.pipeline.local import local_backend
from specrl.config.run import TrainConfig
from tests.helpers import save_tiny


def test_rollout_keys_reach_the_engine(tmp_path):
    cfg = load_config(TrainConfig, None, ["rollout.dtype=bfloat16", "rollout.max_model_len=40",
                                          "rollout.kv_cache_memory=1MiB", "rollout.max_num_seqs=4"])
    llm = local_backend(save_tiny(tmp_path / "m", max_pos=64), cfg).llm
    assert (llm.max_model_len, llm.max_num_seqs) == (40, 4)
    assert llm.engine.runner.cache[0][0].dtype == torch.bfloat16
    assert next(llm.model.parameters()).dtype == torch.bfloat16


@pytest.mark.parametrize("override, match", [
    ("rollout.kv_cache_memory=lots", "kv_cache_memory='lots' is invalid"),
    ("rollout.memory_utilization=0", "memory_utilization=0.0 is invalid"),
    ("rollout.dtype=float64", "dtype='float64' is invalid"),
])
def test_bad_rollout_memory_keys(override, match):
    with pytest.raises(ConfigError, match=match):
        load_config(TrainConfig, None, [override])


def test_default_engine_dtype_is_the_policy_s(tmp_path):
    path = save_tiny(tmp_path / "m")
    for dtype in ("float32", "bfloat16"):
        cfg = load_config(TrainConfig, None, ["rollout.max_num_seqs=2", f"dtype={dtype}"])
        llm = local_backend(path, cfg).llm
        want = getattr(torch, dtype)
        assert llm.engine.runner.cache[0][0].dtype == want and next(llm.model.parameters()).dtype == want
