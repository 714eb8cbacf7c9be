"""Online drafter training inside `specrl train`: versions flow from the trainer into the engine every step,
a resume is exact, and the health alarm fires on a broken drafter but never on a clean run."""
from __future__ import annotations

import pytest
import torch

import specrl.pipeline.sync as sync
from specrl import SamplingParams
from specrl.cli.main import main
from specrl.drafters.weights import drafter_module
from specrl.model import load_model
from specrl.pipeline.run_dir import read_jsonl
from tests.helpers import weights_equal
from tests.pipeline.fixtures import make_setup, overrides, strip_timings
from tests.stats import assert_matches, exact_distribution

ONLINE = {"rollout.spec.method": "draft_model", "rollout.spec.draft_model": "scratch", "rollout.drafter.online": True,
          "rollout.drafter.optim.lr": 1e-3}


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    return make_setup(tmp_path_factory.mktemp("online"))


def _kill_at(monkeypatch, stop: int):
    real = sync.rl_step

    def killed(step, *a):
        if step == stop:
            raise KeyboardInterrupt
        return real(step, *a)
    monkeypatch.setattr(sync, "rl_step", killed)


@pytest.mark.parametrize("schedule", ["after_step", "long_tail"])
def test_online_drafter_versions_reach_the_engine_and_resume_is_exact(setup, tmp_path, monkeypatch, schedule):
    args = {**ONLINE, "rollout.drafter.schedule": schedule, "rollout.drafter.tail_max_running": 6}
    straight = tmp_path / "straight"
    assert main(["train", *overrides(*setup, straight, **args)]) == 0
    rows = read_jsonl(straight / "metrics.jsonl")
    # after_step: the step's update is in the engine when the step ends; long_tail: it is trained in the next
    # rollout's tail, so the engine holds the version of the step before
    lag = 0 if schedule == "after_step" else 1
    assert not any(r["drafter_alarm"] for r in rows)
    # a KL, so >= 0 up to float round-off (step 1 trains a drafter that starts as the policy: KL ~ 0)
    assert all(r["drafter_loss"] > -1e-6 for r in rows[lag:]), [r["drafter_loss"] for r in rows]
    assert rows[-1]["drafter_loss"] > 0  # the policy moved away from the drafter it started as
    assert [r["drafter_version"] for r in rows] == [s - lag for s in (1, 2, 3, 4)]
    out = tmp_path / "resumed"
    _kill_at(monkeypatch, 2)
    assert main(["train", *overrides(*setup, out, **args)]) == 130
    monkeypatch.undo()
    assert main(["train", f"resume={out}", "progress=false"]) == 0
    assert strip_timings(read_jsonl(out / "metrics.jsonl")) == strip_timings(rows)
    if schedule == "after_step":  # the run's online drafter exports as a plain HF checkpoint (draft_model)
        assert main(["export-drafter", str(straight), "--out", str(tmp_path / "exported")]) == 0
        exported = load_model(tmp_path / "exported")
        trained = load_model(straight / "checkpoints" / "step_000004" / "drafter")
        assert weights_equal(exported, trained)


def test_online_eagle3_keeps_the_rollouts_the_policys(setup, tmp_path, monkeypatch):
    """Still lossless: after 3 steps of online EAGLE-3 training (a scratch head, swapped into the engine every
    step), the engine's samples follow the trained policy's own distribution (chi-square over the first three
    tokens), its drafts are used (some accepted, some rejected), and the logprobs the run trained on are the
    policy's (as with SD off: the trainer's recompute matches them to float round-off)."""
    engines = []
    real = sync.rl_step

    def keep_engine(step, parts, cfg):
        engines.append(parts.rollout.backend.llm)
        return real(step, parts, cfg)
    monkeypatch.setattr(sync, "rl_step", keep_engine)
    args = {"rollout.spec.method": "eagle3", "rollout.spec.draft_model": "scratch", "rollout.drafter.online": True,
            "rollout.drafter.optim.lr": 1e-2, "schedule.max_steps": 3}
    assert main(["train", *overrides(*setup, tmp_path / "on", **args)]) == 0
    rows = read_jsonl(tmp_path / "on" / "metrics.jsonl")
    assert [r["drafter_version"] for r in rows] == [1, 2, 3]
    assert max(r["logprob_diff_max"] for r in rows) < 1e-4
    llm = engines[-1]
    prompt = [4, 5, 6]
    dist = exact_distribution(llm.model, prompt, 3, temperature=1.0, top_k=-1, top_p=1.0)
    before = dict(llm.stats)
    # the prefill emits token 1; tokens 2 and 3 come from one speculative step with one draft
    outs = llm.generate([prompt], SamplingParams(n=8000, max_tokens=3, ignore_eos=True, seed=11))[0].outputs
    assert_matches([tuple(o.token_ids) for o in outs], dist)
    drafted = llm.stats["draft_tokens"] - before["draft_tokens"]
    accepted = llm.stats["accepted_tokens"] - before["accepted_tokens"]
    assert 0 < accepted < drafted, (accepted, drafted)


def test_async_beside_trainer_swaps_drafters_into_the_running_worker(setup, tmp_path):
    args = {**ONLINE, "rollout.drafter.schedule": "beside_trainer", "pipeline.mode": "async",
            "pipeline.rollout_threads": 1, "pipeline.train_threads": 1}
    assert main(["train", *overrides(*setup, tmp_path / "a", **args)]) == 0
    rows = read_jsonl(tmp_path / "a" / "metrics.jsonl")
    # the worker's engine swaps a new drafter in at its next engine step: at most one version behind
    versions = [r["drafter_version"] for r in rows]
    assert versions == sorted(versions) and all(s - 1 <= v <= s for s, v in zip((1, 2, 3, 4), versions))
    assert versions[-1] == 4  # the idle worker (all steps generated) takes it at once
    assert not any(r["drafter_alarm"] for r in rows)


def test_zeroed_engine_drafter_raises_the_alarm(setup, tmp_path, monkeypatch, capsys):
    """A frozen draft model equal to the policy, at a low temperature, accepts most drafts; zeroing its weights
    in the engine after step 4 (a lost sync) collapses acceptance to ~1, which the alarm must report (it judges
    once 3 earlier steps are in its window)."""
    model, _ = setup
    args = {"rollout.spec.method": "draft_model", "rollout.spec.draft_model": model, "max_steps": 7,
            "rollout.drafter.health.window": 3, "optim.lr": 1e-4, "rollout.temperature": 0.3}
    clean = tmp_path / "clean"
    assert main(["train", *overrides(*setup, clean, **args)]) == 0
    assert not any(r["drafter_alarm"] for r in read_jsonl(clean / "metrics.jsonl"))
    real = sync.rl_step

    def zero_after_4(step, parts, cfg):
        if step == 4:
            with torch.no_grad():
                for p in drafter_module(parts.rollout.backend.llm.drafter).parameters():
                    p.zero_()
        return real(step, parts, cfg)
    monkeypatch.setattr(sync, "rl_step", zero_after_4)
    broken = tmp_path / "broken"
    assert main(["train", *overrides(*setup, broken, **args)]) == 0
    rows = read_jsonl(broken / "metrics.jsonl")
    assert not any(r["drafter_alarm"] for r in rows[:4])
    assert rows[4]["drafter_alarm"] and rows[4]["acceptance_length"] < 1.2  # at the first broken step
    assert "drafter alarm" in capsys.readouterr().out


@pytest.mark.parametrize("args, message", [
    ({"rollout.spec.method": "suffix", "rollout.drafter.online": True}, "needs a model drafter"),
    ({**ONLINE, "rollout.drafter.schedule": "beside_trainer"}, "set pipeline.mode=async"),
    ({**ONLINE, "rollout.drafter.schedule": "long_tail", "pipeline.mode": "async"}, "set pipeline.mode=sync"),
])
def test_online_drafter_bad_input(setup, tmp_path, capsys, args, message):
    assert main(["train", *overrides(*setup, tmp_path / "x", **args)]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


def test_the_run_loop_keeps_alarming_steps_out_of_the_history():
    from specrl.drafters.training.health import DrafterHealth, HealthConfig
    health = DrafterHealth(HealthConfig(window=3, min_history=2))
    # 3.0, 3.1, 2.9 build the history; 1.2 and 1.1 alarm (below half of ~3.0) and do not join it; 3.0 is fine
    assert [health.check(a, None, None)[0] for a in (3.0, 3.1, 2.9, 1.2, 1.1, 3.0)] == [
        False, False, False, True, True, False]
    assert health.check(3.0, engine_version=1, trainer_version=3)[0]  # the engine's drafter lags by 2
