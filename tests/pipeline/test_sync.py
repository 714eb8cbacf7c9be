"""End-to-end `specrl train` on a tiny random policy: run dir, exact resume, NaN stop, full disk."""
from __future__ import annotations

import errno
import json

import pytest
import torch

import specrl.pipeline.learner as learner_mod
import specrl.pipeline.sync as sync
from specrl.cli.main import main as specrl_main
from specrl.cli.train import build_config, main
from specrl.model import load_model
from specrl.pipeline.run import train
from specrl.pipeline.run_dir import read_jsonl
from specrl.rl import clipped_policy_loss
from specrl.state_files import load_state
from specrl.trainer.checkpoint import CheckpointError, checkpoint_paths, load_checkpoint
from specrl.config.run import TrainConfig
from tests.pipeline.fixtures import make_setup, overrides, strip_timings

REQUIRED = {"step", "reward_mean", "accuracy", "response_len_p50", "response_len_p99", "rollout_s", "reward_s",
            "train_s", "sync_s", "step_s", "gen_tokens_per_s", "acceptance_length", "logprob_diff", "loss", "kl",
            "entropy", "clip_frac", "grad_norm", "lr"}


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    return make_setup(tmp_path_factory.mktemp("tiny"))


@pytest.fixture(scope="module")
def straight_run(setup, tmp_path_factory):
    out = tmp_path_factory.mktemp("runs") / "straight"
    assert main(overrides(*setup, out)) == 0
    return out


def _stop_at(monkeypatch, stop_step: int):
    real = sync.rl_step

    def interrupted(step, parts, cfg):
        if step == stop_step:
            raise KeyboardInterrupt  # a killed job: nothing after the last checkpoint survives
        return real(step, parts, cfg)
    monkeypatch.setattr(sync, "rl_step", interrupted)


def test_run_dir_has_metrics_evals_and_last_k_checkpoints(straight_run):
    rows = read_jsonl(straight_run / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2, 3, 4]
    assert all(REQUIRED <= set(r) for r in rows)
    # fp32 engine and trainer compute the same logprobs up to float round-off: the rollouts were exact
    assert max(r["logprob_diff"] for r in rows) < 1e-5
    assert [e["step"] for e in read_jsonl(straight_run / "eval.jsonl")] == [0, 2, 4]
    assert [s for s, _ in checkpoint_paths(straight_run)] == [2, 4]  # keep_last=2, save_every=2
    cfg = build_config(str(straight_run / "config.yaml"), [])
    assert isinstance(cfg, TrainConfig) and cfg.schedule.max_steps == 4


def test_each_step_logs_sample_completions_with_their_rewards(straight_run):
    from specrl.trainer.rewards import get_reward
    samples = read_jsonl(straight_run / "samples.jsonl")
    assert [s["step"] for s in samples] == [1, 1, 1, 2, 2, 2, 3, 3, 3, 4, 4, 4]  # 3 prompts a step, log_samples=4
    for s in samples:
        assert set(s) == {"step", "prompt", "completion", "answer", "reward", "tokens"}
        assert s["reward"] == get_reward("has_t7")(s["completion"], s["answer"], s["prompt"])
    assert len({s["prompt"] for s in samples}) > 3  # new prompts each step


def test_all_equal_rewards_warn_that_there_is_no_learning_signal(setup, tmp_path, capsys):
    assert main(overrides(*setup, tmp_path / "flat", **{"reward.name": "constant_half", "schedule.max_steps": 3,
                                                      "log_samples": 0})) == 0
    out = capsys.readouterr().out
    assert "WARNING step 3: every sample's reward was 0.5 for the last 3 steps: no learning signal" in out
    assert "step 2: every" not in out
    assert not (tmp_path / "flat" / "samples.jsonl").exists()
    assert main(overrides(*setup, tmp_path / "varied", **{"schedule.max_steps": 3})) == 0
    assert "no learning signal" not in capsys.readouterr().out


def test_resume_reproduces_the_uninterrupted_run(setup, straight_run, tmp_path, monkeypatch):
    out = tmp_path / "resumed"
    _stop_at(monkeypatch, 2)
    with pytest.raises(KeyboardInterrupt):
        main(overrides(*setup, out))
    monkeypatch.undo()
    assert [r["step"] for r in read_jsonl(out / "metrics.jsonl")] == [1, 2]
    assert main([f"resume={out}", "progress=false"]) == 0
    assert strip_timings(read_jsonl(out / "metrics.jsonl")) == strip_timings(read_jsonl(straight_run / "metrics.jsonl"))
    assert strip_timings(read_jsonl(out / "eval.jsonl")) == strip_timings(read_jsonl(straight_run / "eval.jsonl"))
    assert read_jsonl(out / "samples.jsonl") == read_jsonl(straight_run / "samples.jsonl")  # no duplicated steps
    a = load_state(out / "checkpoints/step_000004", "trainer")["optimizer"]["state"]
    b = load_state(straight_run / "checkpoints/step_000004", "trainer")["optimizer"]["state"]
    assert all(torch.equal(a[k]["exp_avg"], b[k]["exp_avg"]) for k in a)


def test_nan_loss_stops_the_run_and_keeps_the_last_good_checkpoint(setup, tmp_path, monkeypatch, capsys):
    real_step, real_loss = sync.rl_step, clipped_policy_loss

    def nan_loss(*args, **kw):
        out = real_loss(*args, **kw)
        return out._replace(loss=out.loss * float("nan"))

    def step_with_nan_from_3(step, parts, cfg):
        if step == 2:
            monkeypatch.setattr(parts.learner.learner.trainer, "policy_loss", nan_loss)
        return real_step(step, parts, cfg)
    monkeypatch.setattr(sync, "rl_step", step_with_nan_from_3)
    out = tmp_path / "nan"
    assert main(overrides(*setup, out)) == 1
    assert "step 3" in capsys.readouterr().err
    assert [s for s, _ in checkpoint_paths(out)] == [2]
    assert [r["step"] for r in read_jsonl(out / "metrics.jsonl")] == [1, 2]
    ckpt = load_checkpoint(out / "checkpoints/step_000002")
    policy = load_model(ckpt.model_dir)
    assert ckpt.step == 2 and all(torch.isfinite(p).all() for p in policy.parameters())


def test_full_disk_while_checkpointing_keeps_the_previous_one(setup, tmp_path, monkeypatch):
    real_save, calls = learner_mod.save_state, []

    def save_then_disk_full(directory, name, tree):
        calls.append(directory)
        if len(calls) == 2:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_save(directory, name, tree)
    monkeypatch.setattr(learner_mod, "save_state", save_then_disk_full)
    out = tmp_path / "full"
    with pytest.raises(CheckpointError, match="No space left on device.*step_000001.*intact"):
        train(build_config(None, overrides(*setup, out, **{"schedule.save_every": 1})))
    monkeypatch.undo()
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["step_000001"]  # no temp dir left
    ckpt = load_checkpoint(out / "checkpoints/step_000001")
    assert ckpt.step == 1
    rows = read_jsonl(out / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2]
    # the run directory is still a run: resume continues from step 1 and drops the unsaved step-2 row
    assert main([f"resume={out}", "max_steps=2", "progress=false"]) == 0
    assert [r["step"] for r in read_jsonl(out / "metrics.jsonl")] == [1, 2]


@pytest.mark.parametrize("args, message", [
    (["rollout.nn=4"], "did you mean 'rollout.n'"),
    (["reward.name=nope"], "name='nope' is invalid: expected one of ['arith', 'boxed'"),
    (["resume=/nonexistent/run"], "is not a run directory"),
    (["pipeline.mode=asynchronous"], "mode='asynchronous' is invalid: expected one of ['sync', 'async']"),
    (["pipeline.max_policy_lag=-1"], "max_policy_lag=-1 is invalid: expected >= 0"),
])
def test_bad_input_gets_a_clear_error(args, message, capsys):
    assert specrl_main(["train", *args]) == 2
    assert message in capsys.readouterr().err


def test_dataset_row_without_prompt_names_its_line_and_writes_nothing(setup, tmp_path, capsys):
    model, _ = setup
    data = tmp_path / "bad.jsonl"
    data.write_text(json.dumps({"prompt": "t4", "answer": "t7"}) + "\n\n" + json.dumps({"question": "t5"}) + "\n")
    out = tmp_path / "out"
    assert specrl_main(["train", *overrides(model, data, out)]) == 2
    assert f"{data}:3: row has no 'prompt' field" in capsys.readouterr().err
    assert not out.exists()


def test_out_dir_with_a_run_is_not_overwritten(setup, straight_run, capsys):
    before = (straight_run / "metrics.jsonl").read_text()
    assert specrl_main(["train", *overrides(*setup, straight_run)]) == 2
    assert "already holds a run" in capsys.readouterr().err
    assert (straight_run / "metrics.jsonl").read_text() == before


def test_resume_with_the_adaptive_drafter_reproduces_the_uninterrupted_run(setup, tmp_path, monkeypatch):
    # "auto" (the default) keeps cross-step state in its suffix drafter and its strategy (acceptance, bandit):
    # the checkpoint must carry both; its deterministic mode makes the run a pure function of the seeds
    args = {"rollout.spec.method": "auto", "rollout.spec.auto.mode": "deterministic"}
    straight = tmp_path / "straight"
    assert main(overrides(*setup, straight, **args)) == 0
    out = tmp_path / "resumed"
    _stop_at(monkeypatch, 2)
    with pytest.raises(KeyboardInterrupt):
        main(overrides(*setup, out, **args))
    monkeypatch.undo()
    assert main([f"resume={out}", "progress=false"]) == 0
    assert strip_timings(read_jsonl(out / "metrics.jsonl")) == strip_timings(read_jsonl(straight / "metrics.jsonl"))
    ckpt = out / "checkpoints" / "step_000004"
    assert (ckpt / "engine_drafter.safetensors").is_file() and (ckpt / "engine_drafter.json").is_file()  # the suffix pools
    assert not list(ckpt.rglob("*.pkl")) and not list(ckpt.rglob("*.pt"))  # nothing to unpickle


ONLINE = {"rollout.spec.method": "draft_model", "rollout.spec.draft_model": "scratch", "rollout.drafter.online": True}


@pytest.mark.parametrize("extra, shared", [({}, True), ({"rollout.dtype": "bfloat16"}, False),
                                           ({"pipeline.mode": "async"}, False), (ONLINE, False)])
def test_sync_engine_generates_with_the_trainers_own_weights(setup, tmp_path, monkeypatch, extra, shared):
    """A sync run's engine holds no second copy of the policy (and a weight sync copies nothing); a bf16
    engine, an async run or an online drafter (synced into the engine's drafter) keeps its own."""
    from specrl.pipeline.run import build_parts
    from specrl.pipeline.steps import sync_weights
    from specrl.trainer.data import build_sources
    cfg = build_config(None, overrides(*setup, tmp_path / "run", **extra))
    parts = build_parts(cfg, setup[0], *build_sources(cfg.data, cfg.seed))
    policy, engine = parts.learner.learner.policy, parts.rollout.backend.llm.model
    assert (engine is policy) == shared
    copies = []
    real_copy = torch.Tensor.copy_
    monkeypatch.setattr(torch.Tensor, "copy_", lambda t, src, *a, **kw: copies.append(1) or real_copy(t, src, *a, **kw))
    parts.learner.learner.version = 1
    sync_weights(parts.learner.learner, parts.rollout.backend)
    assert parts.rollout.backend.weights_version == 1
    assert (len(copies) == 0) == shared  # a shared model: nothing to copy
