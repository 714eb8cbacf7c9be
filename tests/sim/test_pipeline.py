from dataclasses import replace

import numpy as np
import pytest

from specrl.sim.acceptance import from_acceptance_length
from specrl.sim.des import SDSetting
from specrl.sim.hardware import HARDWARE
from specrl.sim.models import get_model
from specrl.sim.pipeline import SimConfig, compare, simulate_step
from specrl.sim.workload import Empirical, Lognormal, Workload, parse_lengths

WL = Workload(64, 8, 256, Lognormal(1000, 0.7), 4096)


def _cfg(**kw):
    sd = SDSetting(from_acceptance_length(3.0, 3), 0.05)
    return SimConfig(HARDWARE["H100"], get_model("qwen3-8b"), WL, 16, sd=sd, drafter_train=False, **kw)


def test_sync_step_is_sum_of_parts():
    r = simulate_step(_cfg())
    assert r["step_s"] == pytest.approx(r["rollout_s"] + r["train_s"] + r["sync_s"])


def test_async_overlaps_rollout_and_training():
    r = simulate_step(_cfg(mode="async", colocated=False))
    assert r["step_s"] == pytest.approx(max(r["rollout_s"] + r["sync_s"], r["train_s"]))
    assert r["rollout_gpus"] + r["train_gpus"] == 16


def test_e2e_speedup_equals_nemo_bound_when_only_rollout_changes():
    # S_step = 1 / (R_gen / a + 1 - R_gen): exact when SD changes nothing but rollout time
    r = compare(_cfg())
    share = r["no_sd"]["rollout_s"] / r["no_sd"]["step_s"]
    a = r["rollout_speedup"]
    assert r["e2e_speedup"] == pytest.approx(1 / (share / a + 1 - share))
    assert a > 1.5  # memory-bound decode with acceptance length 3


def test_sd_and_no_sd_see_identical_lengths():
    cfg = _cfg()
    rng_a, rng_b = np.random.default_rng(cfg.seed), np.random.default_rng(cfg.seed)
    np.testing.assert_array_equal(WL.sample_lengths(rng_a), WL.sample_lengths(rng_b))
    assert simulate_step(replace(cfg, sd=None))["rollout_s"] > simulate_step(cfg)["rollout_s"]


def test_bad_pipeline_configs():
    with pytest.raises(ValueError, match="split"):
        _cfg(mode="async")
    with pytest.raises(ValueError, match="mode"):
        _cfg(mode="lockstep")
    with pytest.raises(ValueError, match="multiple of tp"):
        _cfg(tp=3)


def test_length_specs(tmp_path):
    assert parse_lengths("lognormal:2000,0.5") == Lognormal(2000.0, 0.5)
    assert parse_lengths("list:3,4").lengths == (3, 4)
    f = tmp_path / "metrics.jsonl"
    f.write_text('{"step": 1, "response_lengths": [5, 6]}\n{"step": 2, "response_lengths": [7]}\n')
    assert parse_lengths(str(tmp_path)).lengths == (5, 6, 7)  # a run directory works too
    with pytest.raises(FileNotFoundError, match="missing.jsonl"):
        parse_lengths(str(tmp_path / "missing.jsonl"))
    with pytest.raises(ValueError, match="lognormal:MEDIAN,SIGMA"):
        parse_lengths("lognormal:2000")
    (tmp_path / "run").mkdir()  # a `specrl train` run dir logs only p50/p99 per step
    (tmp_path / "run" / "metrics.jsonl").write_text(
        '{"step": 1, "response_len_p50": 100, "response_len_p99": 1023.4}\n')
    dist = parse_lengths(str(tmp_path / "run"))
    assert dist.median == 100 and dist.sigma == pytest.approx(1.0, abs=1e-3)  # ln(10.234)/2.326
    wl = Workload(2, 2, 10, Empirical((1, 10_000)), 100)
    assert wl.sample_lengths(np.random.default_rng(0)).max() <= 100  # capped at max_tokens
