"""The drivers reach engines and trainers only through the seam: a backend written in a few lines runs sync
and async training, unknown names are refused, and checkpoints hold no pickles."""
from __future__ import annotations

import typing

import pytest

import specrl.pipeline.sync as sync
from specrl.cli.main import main as cli_main
from specrl.pipeline.local import LocalBackend
from specrl.pipeline.run_dir import read_jsonl
from specrl.pipeline.local import local_backend
from specrl.pipeline.backends import BACKENDS, register_backend
from specrl.pipeline.seam import RolloutBackend
from specrl.trainer.checkpoint import CheckpointError, load_checkpoint
from tests.pipeline.fixtures import make_setup, overrides, strip_timings

PROTOCOL = {n for n in vars(RolloutBackend) if not n.startswith("_")} | set(typing.get_type_hints(RolloutBackend))


class OnlyTheProtocol:
    """A backend that wraps the local engine and lets the driver use nothing but the protocol."""

    def __init__(self, inner: LocalBackend):
        object.__setattr__(self, "inner", inner)
        object.__setattr__(self, "calls", [])

    def __getattr__(self, name):
        if name not in PROTOCOL:
            raise AttributeError(f"the driver used {name!r}, which is not part of RolloutBackend")
        self.calls.append(name)
        return getattr(self.inner, name)

    def __setattr__(self, name, value):
        if name not in PROTOCOL:
            raise AttributeError(f"the driver set {name!r}, which is not part of RolloutBackend")
        setattr(self.inner, name, value)


MADE: list[OnlyTheProtocol] = []


def _only_protocol(model_dir, cfg, trace_path=None):
    MADE.append(OnlyTheProtocol(local_backend(model_dir, cfg, trace_path)))
    return MADE[-1]


if "only_protocol" not in BACKENDS:
    register_backend("only_protocol", _only_protocol)


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    return make_setup(tmp_path_factory.mktemp("seam"))


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_protocol_only_backend_trains_like_the_local_one(setup, tmp_path, mode):
    # async at max_policy_lag 1: step 3 is the first the rollout backend samples with new weights
    args = {"max_steps": 3, "schedule.eval_every": 1, "pipeline.mode": mode, "pipeline.train_threads": 1,
            "pipeline.rollout_threads": 1}
    MADE.clear()
    wrapped = {**args, "pipeline.backend": "only_protocol"}
    assert cli_main(["train", *overrides(*setup, tmp_path / "wrapped", **wrapped)]) == 0
    assert cli_main(["train", *overrides(*setup, tmp_path / "local", **args)]) == 0
    for f in ("metrics.jsonl", "eval.jsonl"):
        assert strip_timings(read_jsonl(tmp_path / "wrapped" / f)) == strip_timings(read_jsonl(tmp_path / "local" / f))
    calls = {c for b in MADE for c in b.calls}
    assert {"generate", "update_weights", "stats", "reset_stats", "set_trace_tags"} <= calls


def test_an_unknown_backend_lists_the_valid_ones(setup, tmp_path, capsys):
    assert cli_main(["train", *overrides(*setup, tmp_path / "x", **{"pipeline.backend": "vllm_please"})]) == 2
    err = capsys.readouterr().err
    assert "pipeline.backend='vllm_please'" in err and "'local'" in err and "'ray'" in err
    assert not (tmp_path / "x").exists()  # refused before the run directory was touched


def test_the_old_backend_key_names_the_new_one(setup, tmp_path, capsys):
    """`rollout.backend=ray` passed validation and then hung; the backend has one knob, pipeline.backend."""
    assert cli_main(["train", *overrides(*setup, tmp_path / "x", **{"rollout.backend": "ray"})]) == 2
    err = capsys.readouterr().err
    assert "'rollout.backend' was replaced by 'pipeline.backend'" in err and "pipeline.backend='ray'" in err
    assert not (tmp_path / "x").exists()


def test_a_draft_model_checkpoint_holds_no_drafter_copy_and_resume_keeps_the_engines(setup, tmp_path, monkeypatch):
    """Before the seam, a draft_model run pickled the whole draft model and its KV cache into every checkpoint
    (drafter.pkl), and a resume swapped that copy into the engine."""
    model, _ = setup
    args = {"rollout.spec.method": "draft_model", "rollout.spec.draft_model": model, "save_every": 2}
    straight = tmp_path / "straight"
    assert cli_main(["train", *overrides(*setup, straight, **args)]) == 0
    ckpt = straight / "checkpoints" / "step_000002"
    assert sorted(p.name for p in ckpt.iterdir() if p.is_file()) == ["state.json", "trainer.json", "trainer.safetensors"]
    assert load_checkpoint(ckpt).drafter is None
    out = tmp_path / "resumed"
    real = sync.rl_step

    def killed_at_3(step, *a):
        if step == 2:
            raise KeyboardInterrupt
        return real(step, *a)
    monkeypatch.setattr(sync, "rl_step", killed_at_3)
    assert cli_main(["train", *overrides(*setup, out, **args)]) == 130  # interrupted after step 2
    monkeypatch.undo()
    assert cli_main(["train", f"resume={out}", "progress=false"]) == 0
    assert strip_timings(read_jsonl(out / "metrics.jsonl")) == strip_timings(read_jsonl(straight / "metrics.jsonl"))


def test_a_pickled_drafter_is_refused_not_unpickled(setup, tmp_path, capsys):
    out = tmp_path / "old"
    assert cli_main(["train", *overrides(*setup, out, max_steps=2)]) == 0
    (out / "checkpoints" / "step_000002" / "drafter.pkl").write_bytes(b"cos\nsystem\n(S'echo pwned'\ntR.")
    with pytest.raises(CheckpointError, match="never unpickles"):
        load_checkpoint(out / "checkpoints" / "step_000002")
    assert cli_main(["train", f"resume={out}", "max_steps=3", "progress=false"]) != 0
    assert "never unpickles" in capsys.readouterr().err


def test_a_backend_without_a_capability_the_settings_use_is_refused(setup, tmp_path, capsys):
    """long_tail trains the drafter in the rollout's tail through IdleWork.set_idle_work, which this protocol-only
    backend (like the Ray backend) does not provide: one clear error when the run is wired, not mid-step."""
    args = {"rollout.spec.method": "draft_model", "rollout.spec.draft_model": "scratch", "rollout.drafter.online": True,
            "rollout.drafter.schedule": "long_tail", "pipeline.backend": "only_protocol"}
    assert cli_main(["train", *overrides(*setup, tmp_path / "x", **args)]) == 2
    err = capsys.readouterr().err
    assert "rollout.drafter.schedule=long_tail needs a IdleWork (set_idle_work)" in err
    assert "OnlyTheProtocol does not provide" in err and "pipeline.backend=local" in err
