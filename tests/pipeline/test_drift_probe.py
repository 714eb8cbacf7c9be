"""The drift probe inside `specrl train`: its metrics every step, paired with the drafter that served, its plot;
and an online drafter on a backend that cannot refit it refused at wiring with the fix."""
from __future__ import annotations

import types

import pytest

from specrl.cli.main import main
from specrl.config import ConfigError, load_config
from specrl.config.run import TrainConfig
from specrl.pipeline.run import check_capabilities
from specrl.pipeline.run_dir import read_jsonl
from tests.pipeline.fixtures import make_setup, overrides

ONLINE = {"rollout.spec.method": "eagle3", "rollout.spec.draft_model": "scratch", "rollout.drafter.online": True,
          "rollout.drafter.optim.lr": 1e-3, "rollout.drafter.sample_fraction": 0.4,
          "rollout.drafter.probe_fraction": 0.4, "rollout.spec.num_speculative_tokens": 2}
PROBE_KEYS = ("probe_accept_online", "probe_accept_newest", "probe_accept_frozen", "probe_kl_pi0", "probe_lag")


def test_the_probe_scores_the_served_and_the_frozen_drafter_every_step(tmp_path):
    setup = make_setup(tmp_path)
    run = tmp_path / "run"
    assert main(["train", *overrides(*setup, run, **ONLINE, **{"schedule.max_steps": 3, "plots": True})]) == 0
    rows = read_jsonl(run / "metrics.jsonl")
    assert all(all(k in r for k in PROBE_KEYS) for r in rows)
    # step 1 was served by the step-0 drafter: online and frozen are the same module on the same rows
    assert rows[0]["drafter_served"] == 0 and rows[0]["probe_accept_online"] == rows[0]["probe_accept_frozen"]
    assert rows[0]["probe_kl_pi0"] == pytest.approx(0.0, abs=1e-4)  # pi_1's rollouts are scored by pi_0 itself
    # sync: the drafter trained at step t serves step t + 1 (the one-version lag)
    assert [r["drafter_served"] for r in rows] == [0, 1, 2]
    assert all(0 <= r[k] <= 2 for r in rows for k in PROBE_KEYS[:3])
    assert rows[-1]["probe_kl_pi0"] > 0  # the policy moved
    assert (run / "plots" / "drift_probe.png").stat().st_size > 10_000


def test_an_online_drafter_on_a_backend_that_cannot_refit_it_is_one_line():
    cfg = load_config(TrainConfig, None, ["rollout.drafter.online=true", "pipeline.backend=vllm"])
    learner = types.SimpleNamespace(drafter_weights=lambda: [], train_drafter=lambda: False)
    backend = types.SimpleNamespace(refits_drafter=False)  # e.g. vLLM serving `auto` as one fixed drafter
    with pytest.raises(ConfigError) as e:
        check_capabilities(cfg, learner, backend)
    line = str(e.value)
    assert "\n" not in line and "pipeline.backend=vllm" in line and "set rollout.spec.method=eagle3" in line
