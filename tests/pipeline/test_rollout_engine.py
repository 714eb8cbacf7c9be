"""`specrl train`'s rollout engine takes rollout.dtype and the KV budget keys."""
from __future__ import annotations

import pytest
import torch

from specrl.config import ConfigError, load_config
from specrl.pipeline.sync import rollout_llm
from specrl.train.config import TrainConfig
from tests.helpers import tiny_model


def test_rollout_keys_reach_the_engine():
    cfg = load_config(TrainConfig, None, ["rollout.dtype=bfloat16", "rollout.max_model_len=40",
                                          "rollout.kv_cache_memory=1MiB", "rollout.max_num_seqs=4"])
    policy = tiny_model(max_pos=64)
    llm = rollout_llm(cfg, policy)
    assert (llm.max_model_len, llm.max_num_seqs) == (40, 4)
    assert llm.runner.cache[0][0].dtype == torch.bfloat16
    assert next(policy.parameters()).dtype == torch.float32  # the trainer's policy is untouched


@pytest.mark.parametrize("override, match", [
    ("rollout.kv_cache_memory=lots", "kv_cache_memory='lots' is invalid"),
    ("rollout.memory_utilization=0", "memory_utilization=0.0 is invalid"),
    ("rollout.dtype=float64", "dtype='float64' is invalid"),
])
def test_bad_rollout_memory_keys(override, match):
    with pytest.raises(ConfigError, match=match):
        load_config(TrainConfig, None, [override])


def test_default_engine_dtype_is_the_policy_s():
    cfg = load_config(TrainConfig, None, ["rollout.max_num_seqs=2"])
    for dtype in (torch.float32, torch.bfloat16):
        llm = rollout_llm(cfg, tiny_model().to(dtype))
        assert llm.runner.cache[0][0].dtype == dtype and next(llm.model.parameters()).dtype == dtype
