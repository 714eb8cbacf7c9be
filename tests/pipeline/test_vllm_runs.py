"""`specrl train pipeline.backend=vllm` runs on a tiny policy: async, a refit that does not fit, a failing
async run (its rollout cancelled), and an engine process killed mid-rollout (the run stops with one line and
its last checkpoint resumes to the uninterrupted run's rows, and no process the engine started survives).
An engine start costs about a minute here, so the runs share one engine (`Shared`: each run's starting
weights are refitted into it, and a run's close() leaves it serving);
the killed run builds its own through the real `pipeline.backend=vllm` path."""
from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path

import psutil
import pytest

pytest.importorskip("vllm", exc_type=ImportError)

import specrl.pipeline.vllm.build as build  # noqa: E402
from specrl.cli.main import main  # noqa: E402
from specrl.config import load_config  # noqa: E402
from specrl.pipeline.learner import LocalLearner  # noqa: E402
from specrl.pipeline.run_dir import read_jsonl  # noqa: E402
from specrl.pipeline.vllm.procs import alive  # noqa: E402
from specrl.trainer.checkpoint import checkpoint_paths  # noqa: E402
from specrl.config.run import TrainConfig  # noqa: E402
from specrl.trainer.rewards import REWARDS, register_reward  # noqa: E402
from tests.helpers import save_tiny  # noqa: E402
from tests.pipeline.fixtures import make_setup, shared_backend, overrides, strip_timings  # noqa: E402

SHARED = "vllm_test_shared"
# seconds, like the timing keys; and what depends on the engine's float round-off (the same tokens scored by
# another engine process differ in the last bits): the engine-vs-trainer logprob gap and the audit built on it
VOLATILE = ("weight_transfer_s", "logprob_diff", "sampler_", "target_forwards")  # key prefixes (vLLM schedules
# the same requests in more or fewer engine steps)


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("vllm_runs")
    _, data = make_setup(tmp)
    # head_dim 32: vLLM's CPU attention has no kernel for the default tiny model's 8
    return save_tiny(tmp / "policy", vocab=32, max_pos=96, hidden=64, heads=2, kv_heads=2), data


@pytest.fixture(scope="module")
def engine(setup):
    cfg = load_config(TrainConfig, None, ["rollout.spec.method=null", "rollout.max_num_seqs=16",
                                          f"model={setup[0]}"])
    be = build.vllm_backend(setup[0], cfg)
    yield be
    be.close()


@pytest.fixture(scope="module")
def shared(engine):
    with shared_backend(SHARED, engine) as made:
        yield made


def _args(setup, out, **kw) -> list[str]:
    return ["train", *overrides(*setup, out, **{"pipeline.backend": SHARED, "rollout.spec.method": "null", **kw})]


@pytest.fixture(scope="module")
def straight_run(setup, shared, tmp_path_factory):
    out = tmp_path_factory.mktemp("runs") / "straight"
    assert main(_args(setup, out)) == 0
    return out


def _rows(path: Path) -> list[dict]:
    return [{k: v for k, v in r.items() if not k.startswith(VOLATILE)} for r in strip_timings(read_jsonl(path))]


def test_a_sync_run_refits_every_step_and_scores_its_own_logprobs(straight_run, shared):
    rows = read_jsonl(straight_run / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2, 3, 4]
    assert max(r["logprob_diff"] for r in rows) < 1e-4  # the trainer scores what vLLM sampled, refit each step
    assert all(r["weight_transfer_s"] > 0 for r in rows[1:])  # step 1 rolls out on the weights built in
    assert shared[-1].closed == 1


def test_an_async_run_trains_on_the_engine(setup, shared, tmp_path):
    out = tmp_path / "async"
    assert main(_args(setup, out, **{"pipeline.mode": "async", "pipeline.max_policy_lag": 1})) == 0
    rows = read_jsonl(out / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2, 3, 4] and [r["policy_lag"] for r in rows] == [0, 1, 1, 1]
    # the lagged steps were sampled by the previous version (vLLM's tags) and importance-weighted
    assert rows[0]["logprob_diff"] < 1e-4 and all(r["logprob_diff"] > 1e-4 and "is_ratio" in r for r in rows[1:])
    assert [s for s, _ in checkpoint_paths(out)] == [2, 4] and shared[-1].closed == 1


FAIL_ONCE_SAVED: list[Path] = []  # the reward below raises once this checkpoint is on disk


if "vllm_test_fails_after_step_2" not in REWARDS:
    @register_reward("vllm_test_fails_after_step_2")
    def fails_after_step_2(completion: str, answer: str, prompt: str = "") -> float:
        """A reward server that goes away once checkpoint 2 is saved (so step 3 fails)."""
        if FAIL_ONCE_SAVED and FAIL_ONCE_SAVED[-1].is_dir():
            raise ValueError("reward server unreachable")
        return 0.0


def test_a_failing_async_run_cancels_its_rollout_and_closes(setup, shared, engine, tmp_path, capsys):
    out = tmp_path / "fails"
    FAIL_ONCE_SAVED.append(out / "checkpoints/step_000002")
    code = main(_args(setup, out, **{"pipeline.mode": "async", "reward.name": "vllm_test_fails_after_step_2"}))
    assert code != 0 and "reward server unreachable" in capsys.readouterr().err
    assert engine._cancelled and not engine.llm.llm_engine.has_unfinished_requests()  # the worker was stopped
    assert shared[-1].closed == 1
    assert [s for s, _ in checkpoint_paths(out)] == [2]


def test_a_refit_that_does_not_fit_stops_the_run_with_one_line(setup, shared, engine, tmp_path, monkeypatch,
                                                                capsys):
    real = LocalLearner.named_weights

    def missing_norm(self):
        return ((k, v) for k, v in real(self) if k != "model.norm.weight")
    monkeypatch.setattr(LocalLearner, "named_weights", missing_norm)
    assert main(_args(setup, tmp_path / "misfit")) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("specrl train")]
    assert len(err) == 1 and "missing ['model.norm.weight']" in err[0] and "keeps its current weights" in err[0]
    assert engine.weights_version == 0  # the engine kept the run's starting weights
    assert not list((tmp_path / "misfit").glob("checkpoints/step_*"))


def _killed_in_step_3(monkeypatch, out: Path) -> list:
    """`pipeline.backend=vllm` builds its engine as usual, and SIGKILLs the engine core process at the first
    engine step after checkpoint 2 is on disk: in step 3's rollout -> [the engine core, its workers]."""
    real, made = build.vllm_backend, []

    def building(model_dir, cfg, trace_path=None):
        be = real(model_dir, cfg, trace_path)
        engine = be.llm.llm_engine
        core = engine.engine_core.resources.engine_manager.processes[0]
        step = engine.step

        def killing_step():
            if (out / "checkpoints/step_000002").is_dir() and core.is_alive():
                with contextlib.suppress(ProcessLookupError):  # exited between the check and the kill
                    os.kill(core.pid, signal.SIGKILL)
                core.join(60)
            return step()
        engine.step = killing_step
        made.extend([core, psutil.Process(core.pid).children(recursive=True)])
        return be
    monkeypatch.setattr(build, "vllm_backend", building)
    return made


def test_an_engine_killed_mid_rollout_stops_the_run_and_the_checkpoint_resumes(setup, shared, straight_run,
                                                                                tmp_path, monkeypatch, capsys):
    out = tmp_path / "killed"
    cores = _killed_in_step_3(monkeypatch, out)
    assert main(_args(setup, out, **{"pipeline.backend": "vllm"})) == 1
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("specrl train")]
    assert len(err) == 1 and "the vLLM engine process died mid-rollout" in err[0] and "resume=RUN_DIR" in err[0]
    assert not cores[0].is_alive() and [s for s, _ in checkpoint_paths(out)] == [2]
    # the engine core's worker outlives it (re-parented, spinning on its queue) unless the backend stops it
    assert cores[1] and not any(alive(p) for p in cores[1])
    assert [r["step"] for r in read_jsonl(out / "metrics.jsonl")] == [1, 2]
    monkeypatch.undo()
    assert main(["train", f"resume={out}", f"pipeline.backend={SHARED}", "progress=false"]) == 0
    # per-request seeds: the resumed run samples what the uninterrupted one did, on the checkpoint's weights
    assert _rows(out / "metrics.jsonl") == _rows(straight_run / "metrics.jsonl")
    assert _rows(out / "eval.jsonl") == _rows(straight_run / "eval.jsonl")
    assert read_jsonl(out / "samples.jsonl") == read_jsonl(straight_run / "samples.jsonl")
