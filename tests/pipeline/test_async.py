"""The async pipeline: the version that samples each step, equality with sync at lag 0, bounded staleness,
reproducibility, failures on either side, resume."""
from __future__ import annotations

import threading

import pytest
import torch

import specrl.pipeline.asynchronous as asynchronous
from specrl.pipeline.run_dir import WORKLOAD_FILE, read_jsonl
import specrl.pipeline.steps as steps
from specrl.pipeline.run import build_parts
from specrl.pipeline.steps import generate_rollouts
from specrl.rl import POLICY_LOSSES
from specrl.trainer.checkpoint import checkpoint_paths
from specrl.trainer.data import build_sources
from specrl.cli.train import build_config, main
from specrl.model import load_model
from tests.helpers import weights_equal
from tests.pipeline.fixtures import make_setup, overrides, strip_timings

ASYNC = {"pipeline.mode": "async", "pipeline.rollout_threads": 1, "pipeline.train_threads": 1}


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    return make_setup(tmp_path_factory.mktemp("tiny"))


def _rows(out, drop=()):
    return [{k: v for k, v in r.items() if k not in drop} for r in strip_timings(read_jsonl(out / "metrics.jsonl"))]


def _worker_alive() -> bool:
    return any(t.name == "specrl-rollout" and t.is_alive() for t in threading.enumerate())


def test_lag_0_reproduces_the_sync_run_exactly(setup, tmp_path):
    assert main(overrides(*setup, tmp_path / "sync", num_threads=1)) == 0
    assert main(overrides(*setup, tmp_path / "a0", **ASYNC, **{"pipeline.max_policy_lag": 0})) == 0
    a0 = _rows(tmp_path / "a0", drop=("policy_lag", "stale_groups"))
    assert a0 == _rows(tmp_path / "sync")
    assert [r["policy_lag"] for r in read_jsonl(tmp_path / "a0" / "metrics.jsonl")] == [0, 0, 0, 0]


@pytest.mark.parametrize("lag, lags", [(1, [0, 1, 1, 1]), (2, [0, 1, 2, 2])])
def test_staleness_is_bounded_and_runs_are_reproducible(setup, tmp_path, lag, lags):
    kw = {**ASYNC, "pipeline.max_policy_lag": lag, "rollout.trace": "true"}
    assert main(overrides(*setup, tmp_path / "a", **kw)) == 0
    assert main(overrides(*setup, tmp_path / "b", **kw)) == 0
    rows = read_jsonl(tmp_path / "a" / "metrics.jsonl")
    assert [r["policy_lag"] for r in rows] == lags
    # off-policy steps are weighted; the trainer's logprobs have moved away from the generator's
    assert all(("is_ratio" in r) == (r["policy_lag"] > 0) for r in rows)
    assert all(r["logprob_diff"] > 1e-4 for r in rows if r["policy_lag"] > 0)
    assert _rows(tmp_path / "a") == _rows(tmp_path / "b")
    work = read_jsonl(tmp_path / "a" / WORKLOAD_FILE)
    assert [w["version"] for w in work] == [s - l for s, l in zip(range(4), lags)]
    assert all(w["mode"] == "async" and w["max_policy_lag"] == lag for w in work)
    assert not _worker_alive()


def test_the_worker_samples_each_step_with_its_versions_weights(setup, tmp_path):
    """Step 2 at lag 1 is sampled by version 1: the same tokens as an engine holding those weights,
    and not those of version 0 (which sampled steps 0 and 1)."""
    cfg = build_config(None, overrides(*setup, tmp_path / "unused", **ASYNC, **{"rollout.spec.method": "null"}))
    source, held_out = build_sources(cfg.data, cfg.seed)

    def parts_with(version_weights=None):
        parts = build_parts(cfg, setup[0], source, held_out)
        if version_weights is not None:
            parts.rollout.backend.update_weights(version_weights.items(), 1)
        return parts

    gen = torch.Generator().manual_seed(0)
    v1 = {k: v + 0.3 * torch.randn(v.shape, generator=gen) for k, v in load_model(setup[0]).state_dict().items()}
    versions = asynchronous.PolicyVersions()
    versions.publish(1, v1.items())
    worker = asynchronous.RolloutWorker(parts_with(), cfg, 0, versions, threads=1)
    worker.cfg.schedule.max_steps = 3
    threads = torch.get_num_threads()
    try:
        worker.run()  # in this thread: steps 0, 1, 2
    finally:
        torch.set_num_threads(threads)
    got = [worker.out.get_nowait() for _ in range(3)]
    assert [ro.version for ro, _ in got] == [0, 0, 1]

    def tokens(ro):
        return [c.token_ids for r in ro.outputs for c in r.outputs]
    assert tokens(got[2][0]) == tokens(generate_rollouts(2, parts_with(v1).rollout, cfg, 1))
    assert tokens(got[2][0]) != tokens(generate_rollouts(2, parts_with().rollout, cfg, 0))
    assert tokens(got[0][0]) == tokens(generate_rollouts(0, parts_with().rollout, cfg, 0))


def test_a_worker_failure_stops_the_run_and_keeps_the_checkpoint(setup, tmp_path, monkeypatch, capsys):
    real = asynchronous.generate_rollouts

    def fail_at_3(step, *args, **kw):
        if step == 2:
            raise RuntimeError("engine exploded")
        return real(step, *args, **kw)
    monkeypatch.setattr(asynchronous, "generate_rollouts", fail_at_3)
    out = tmp_path / "failed"
    assert main(overrides(*setup, out, **ASYNC)) == 1
    err = capsys.readouterr().err
    assert "step 3: the rollout worker failed: RuntimeError: engine exploded" in err and "step_000002" in err
    assert [r["step"] for r in read_jsonl(out / "metrics.jsonl")] == [1, 2]
    assert [s for s, _ in checkpoint_paths(out)] == [2]
    assert not _worker_alive()


def test_a_trainer_failure_stops_the_worker(setup, tmp_path, monkeypatch, capsys):
    real_loss, calls = POLICY_LOSSES.get("clipped"), []

    def nan_from_step_2(*args, **kw):
        out = real_loss(*args, **kw)
        calls.append(1)
        return out._replace(loss=out.loss * float("nan")) if len(calls) > 3 else out
    monkeypatch.setitem(POLICY_LOSSES._fns, "clipped", nan_from_step_2)  # the trainer looks the loss up by name
    out = tmp_path / "nan"
    assert main(overrides(*setup, out, **ASYNC)) == 1
    assert "is not finite" in capsys.readouterr().err
    assert not _worker_alive()


def test_a_stopped_trainer_cancels_a_generation_in_flight(setup, tmp_path, monkeypatch):
    """The trainer fails while the worker is inside generate(): the worker stops at its next engine step
    instead of finishing the batch, and the torch thread count of the caller is restored."""
    started, real = threading.Event(), asynchronous.learn

    def slow_generate(self, *args, **kw):  # a generate() that only ends when cancelled
        started.set()
        while not (self.should_stop and self.should_stop()):
            threading.Event().wait(0.01)
        raise asynchronous.GenerationCancelled("cancelled")

    def failing_learn(rollout, *args, **kw):
        if rollout.step == 1:
            assert started.wait(10)  # the worker is generating step 2 (lag 1: it runs ahead)
            raise RuntimeError("trainer exploded")
        return real(rollout, *args, **kw)

    real_generate = asynchronous.generate_rollouts

    def generate(step, side, *args, **kw):
        if step == 2:
            monkeypatch.setattr(type(side.backend.llm), "generate", slow_generate)
        return real_generate(step, side, *args, **kw)
    monkeypatch.setattr(asynchronous, "generate_rollouts", generate)
    monkeypatch.setattr(asynchronous, "learn", failing_learn)
    threads = torch.get_num_threads()
    with pytest.raises(RuntimeError, match="trainer exploded"):
        main(overrides(*setup, tmp_path / "cancel", **{**ASYNC, "pipeline.train_threads": 2}))
    assert not _worker_alive()
    assert torch.get_num_threads() == threads


def test_resume_restarts_the_pipeline_from_the_checkpoint(setup, tmp_path):
    out = tmp_path / "resumed"
    assert main(overrides(*setup, out, **ASYNC, max_steps=2)) == 0
    assert main([f"resume={out}", "max_steps=4", "progress=false"]) == 0
    rows = read_jsonl(out / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2, 3, 4]
    assert [r["policy_lag"] for r in rows] == [0, 1, 0, 1]  # step 3 is sampled by the checkpoint's weights
    assert [e["step"] for e in read_jsonl(out / "eval.jsonl")] == [0, 2, 4]


def test_evaluation_sees_the_weights_of_the_step_it_reports(setup, tmp_path, monkeypatch):
    """Async evaluation runs on its own engine; it must hold the trainer's latest weights each time."""
    real, seen = steps.evaluate, []

    def spy(parts, max_tokens, backend):
        seen.append(backend is not parts.rollout.backend
                    and weights_equal(parts.learner.learner.policy, backend.llm.model))
        return real(parts, max_tokens, backend)
    monkeypatch.setattr(steps, "evaluate", spy)
    assert main(overrides(*setup, tmp_path / "eval", **ASYNC)) == 0
    assert seen == [True, True, True]  # steps 0, 2 and 4


def test_stage_threads_split_the_cores_and_warn_past_them(caplog):
    import logging

    from specrl.pipeline.asynchronous import stage_threads
    from specrl.config.run import TrainConfig
    cfg = TrainConfig()
    cfg.pipeline.rollout_threads, cfg.pipeline.train_threads = 1, 1
    with caplog.at_level(logging.INFO, logger="specrl.pipeline.asynchronous"):
        assert stage_threads(cfg, cores=2) == (1, 1)
    assert "rollout worker 1 thread(s), trainer 1 thread(s), on 2 cores" in caplog.text
    cfg.pipeline.rollout_threads, cfg.pipeline.train_threads = 3, 2
    with pytest.warns(UserWarning, match=r"rollout_threads=3 \+ pipeline.train_threads=2 > the 2 cores.*used as given"):
        assert stage_threads(cfg, cores=2) == (3, 2)
