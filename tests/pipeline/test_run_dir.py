"""Run directory: config + metrics files, truncation on resume, TensorBoard events and PNG plots."""
from __future__ import annotations

import pytest

from specrl.errors import UserError
from specrl.pipeline.run_dir import RunDir, is_run_dir, read_jsonl
from specrl.config.run import TrainConfig


def _row(step: int) -> dict:
    return {"step": step, "reward_mean": 0.1 * step, "acceptance_length": 1.5, "rollout_s": 1.0, "reward_s": 0.1,
            "train_s": 0.5, "sync_s": 0.01}


def test_create_log_truncate_plot(tmp_path):
    run = RunDir.create(tmp_path / "run", TrainConfig(), tensorboard=True)
    assert is_run_dir(run.path) and not is_run_dir(tmp_path)
    for s in (1, 2, 3):
        run.log(_row(s))
    run.log({"step": 0, "accuracy": 0.5, "eval_s": 1.0}, "eval.jsonl")
    run.log({"step": 3, "accuracy": 0.7, "eval_s": 1.0}, "eval.jsonl")
    run.truncate(2)  # a resume from the step-2 checkpoint drops what came after it
    assert [r["step"] for r in read_jsonl(run.path / "metrics.jsonl")] == [1, 2]
    assert [r["step"] for r in read_jsonl(run.path / "eval.jsonl")] == [0]
    files = run.plot()
    run.close()
    assert sorted(f.name for f in files) == ["acceptance_length.png", "reward.png", "step_time.png"]
    assert all(f.stat().st_size > 1000 for f in files)
    assert list((run.path / "tb").glob("events.out.tfevents.*"))


def test_create_over_a_killed_attempt_starts_with_empty_logs(tmp_path):
    # an attempt killed after its step-0 evaluation, before its first step: no metrics rows, stale logs
    first = RunDir.create(tmp_path / "run", TrainConfig(), tensorboard=True)
    first.log({"step": 0, "accuracy": 0.1, "eval_s": 1.0}, "eval.jsonl")
    first.close()
    for name in ("rollout_workload.jsonl", "rollout_trace.jsonl"):
        (first.path / name).write_text('{"step": 0, "rl_step": 0}\n')
    run = RunDir.create(tmp_path / "run", TrainConfig(), tensorboard=False)
    assert sorted(p.name for p in run.path.iterdir()) == ["config.yaml", "metrics.jsonl"]
    run.log({"step": 0, "accuracy": 0.2, "eval_s": 1.0}, "eval.jsonl")
    assert read_jsonl(run.path / "eval.jsonl") == [{"step": 0, "accuracy": 0.2, "eval_s": 1.0}]


def test_create_refuses_a_directory_with_steps(tmp_path):
    run = RunDir.create(tmp_path / "run", TrainConfig(), tensorboard=False)
    run.log(_row(1), tensorboard=False)
    with pytest.raises(FileExistsError, match="already holds a run"):
        RunDir.create(tmp_path / "run", TrainConfig(), tensorboard=False)
    assert [r["step"] for r in read_jsonl(run.path / "metrics.jsonl")] == [1]


def test_create_names_an_out_dir_that_cannot_be_made(tmp_path):
    (tmp_path / "a_file").write_text("")
    with pytest.raises(UserError, match=r"out_dir='.*a_file/run' cannot be created .*pick a directory"):
        RunDir.create(tmp_path / "a_file" / "run", TrainConfig(), tensorboard=False)


def test_open_refuses_a_directory_that_is_not_a_run(tmp_path):
    with pytest.raises(FileNotFoundError, match="is not a run directory"):
        RunDir.open(tmp_path)


def test_shipped_default_yaml_matches_the_dataclass_defaults():
    from pathlib import Path

    from specrl.cli.train import build_config
    path = Path(__file__).parents[2] / "configs" / "default.yaml"
    expected = TrainConfig()
    expected.validate()  # validation fills the null budget keys with the default task's
    assert build_config(str(path), []) == expected


def test_async_step_times_are_drawn_as_lines_not_stacked(tmp_path, monkeypatch):
    """Async stages overlap: stacking rollout on train would show a step twice as long as it was."""
    import specrl.pipeline.run_dir as run_dir_mod
    calls = []
    real = run_dir_mod._draw_step_time

    def spy(ax, steps, rows, evals):
        real(ax, steps, rows, evals)
        calls.append((len(ax.lines), len(ax.patches)))
    monkeypatch.setattr(run_dir_mod, "_draw_step_time", spy)
    run = RunDir.create(tmp_path / "run", TrainConfig(), tensorboard=False)
    for s in (1, 2, 3):
        run.log({**_row(s), "policy_lag": min(s - 1, 1)})
    assert len(run.plot()) == 3
    assert calls == [(3, 0)]  # step, rollout and train lines; no stacked bars
