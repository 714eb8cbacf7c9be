"""The teacher-data cache of `specrl train-drafter --cache`, `--resume`, and the progress ETA."""
from __future__ import annotations

import json

import pytest
import torch

from specrl.optim import OptimSettings

from specrl.cli import train_drafter
from specrl.cli.main import main as specrl_main
from specrl.drafters.training.cache import fingerprint, load_or_collect
from specrl.drafters.training.data import DrafterTrainArgs, fit
from specrl.drafters.training.progress import eta_s
from tests.helpers import char_tokenizer_json, save_tiny

SETTINGS = {"data": "embedded task", "samples": 2, "seed": 0}


def test_eta_is_the_remaining_steps_at_the_mean_pace_capped_by_the_budget():
    # 10 of 40 steps in 20 s: 2 s a step, 30 steps left = 60 s; a 100 s budget leaves 80 s, so 60 s
    assert eta_s(10, 40, 20.0, 100.0) == 60.0
    # a 70 s budget leaves 50 s: the budget stops it first
    assert eta_s(10, 40, 20.0, 70.0) == 50.0
    assert eta_s(0, 40, 0.0, 70.0) == 70.0 and eta_s(40, 40, 80.0, 100.0) == 0.0


def test_the_cache_is_written_once_and_read_back(tmp_path):
    policy = save_tiny(tmp_path / "policy", layers=2)
    calls = []

    def collect():
        calls.append(1)
        return [([0, 4], [5, 6]), ([0, 7], [8])]

    first, cached = load_or_collect(tmp_path / "cache", str(policy), SETTINGS, collect)
    assert not cached and calls == [1]
    again, cached = load_or_collect(tmp_path / "cache", str(policy), SETTINGS, collect)
    assert cached and calls == [1] and [tuple(p) for p in again] == first


def test_a_cache_from_another_model_or_tokenizer_or_settings_is_refused(tmp_path):
    policy = save_tiny(tmp_path / "policy", layers=2)
    load_or_collect(tmp_path / "cache", str(policy), SETTINGS, lambda: [([0], [4])])
    other = save_tiny(tmp_path / "other", seed=1, layers=2)  # same shapes, other weights
    with pytest.raises(ValueError, match="collected from another model .* than the policy"):
        load_or_collect(tmp_path / "cache", str(other), SETTINGS, lambda: [])
    # the same weights with another tokenizer: ids would mean other strings
    (policy / "tokenizer.json").write_text(char_tokenizer_json(16))
    with pytest.raises(ValueError, match="another tokenizer"):
        load_or_collect(tmp_path / "cache", str(policy), SETTINGS, lambda: [])
    (policy / "tokenizer.json").write_text(char_tokenizer_json(32))
    with pytest.raises(ValueError, match=r"other settings \(samples: cached 2, asked 4\)"):
        load_or_collect(tmp_path / "cache", str(policy), {**SETTINGS, "samples": 4}, lambda: [])


def test_fingerprint_names_weights_and_tokenizer_apart(tmp_path):
    a = fingerprint(save_tiny(tmp_path / "a", layers=2))
    b = fingerprint(save_tiny(tmp_path / "b", seed=1, layers=2))
    assert a["model"] != b["model"] and a["tokenizer"] == b["tokenizer"]


class Interrupt(Exception):
    pass


def _fit(tmp_path, resume=False, stop_after=None):
    torch.manual_seed(0)
    module = torch.nn.Linear(4, 3)
    if resume:
        torch.nn.init.zeros_(module.weight)  # overwritten by the saved state
    x, y = torch.randn(16, 4, generator=torch.Generator().manual_seed(1)), torch.randn(16, 3)
    batches = ([i % 16, (i + 5) % 16] for i in range(10 ** 6))  # a pure function of the position, like index_batches
    args = DrafterTrainArgs(steps=8, optim=OptimSettings(lr=1e-2, warmup_steps=2), bf16_autocast=False, log_every=1, save_every=3,
                            cache_dir=str(tmp_path / "cache"), resume=resume, time_budget_s=1e6)

    def on_log(step, row):
        if stop_after is not None and step == stop_after:
            raise Interrupt

    m = fit(module, lambda idx: ((module(x[idx]) - y[idx]) ** 2).mean(), batches, args, on_log, {"method": "t"})
    return module, m


def test_resume_continues_the_interrupted_fit_exactly(tmp_path):
    straight, m0 = _fit(tmp_path / "a")
    with pytest.raises(Interrupt):  # killed after step 4: the state saved at step 3 survives
        _fit(tmp_path / "b", stop_after=4)
    resumed, m1 = _fit(tmp_path / "b", resume=True)
    assert m1["steps_done"] == m0["steps_done"] == 8
    assert torch.equal(straight.weight, resumed.weight) and torch.equal(straight.bias, resumed.bias)
    assert m1["first_loss"] == m0["first_loss"]


def _cli(policy, out, cache, *extra):
    return ["train-drafter", "--policy", str(policy), "--out", str(out), "--steps", "2", "--prompts", "4",
            "--max-tokens", "6", "--threads", "1", "--cache", str(cache), *extra]


@pytest.fixture
def one_thread():
    n = torch.get_num_threads()  # --threads 1 sets it for the process; put it back
    yield
    torch.set_num_threads(n)


@pytest.fixture
def tiny_prompts(monkeypatch):
    monkeypatch.setattr(train_drafter, "default_prompts", lambda n, seed: [f"t{i} t{i + 3}" for i in range(n)])


def test_cli_collects_once_then_reads_the_cache_and_refuses_another_policy(tmp_path, capsys, tiny_prompts,
                                                                              one_thread):
    policy = save_tiny(tmp_path / "policy", layers=3)
    args = ["--method", "eagle3", "--eagle3-layers", "0,1,1"]
    assert specrl_main(_cli(policy, tmp_path / "h1", tmp_path / "cache", *args)) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["cached"] is False
    assert list((tmp_path / "cache").glob("teacher-L0-1-1-*.pt"))  # eagle3's teacher outputs kept too
    assert specrl_main(_cli(policy, tmp_path / "h2", tmp_path / "cache", *args)) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["cached"] is True
    other = save_tiny(tmp_path / "other", seed=5, layers=3)
    assert specrl_main(_cli(other, tmp_path / "h3", tmp_path / "cache", *args)) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "collected from another model" in err and "pass another --cache DIR" in err


def test_cli_resume_with_another_method_or_vocabulary_is_refused(tmp_path, capsys, tiny_prompts, one_thread):
    policy = save_tiny(tmp_path / "policy", layers=3)
    eagle3 = ["--method", "eagle3", "--eagle3-layers", "0,1,1"]
    assert specrl_main(_cli(policy, tmp_path / "h", tmp_path / "cache", *eagle3)) == 0
    capsys.readouterr()
    assert specrl_main(_cli(policy, tmp_path / "d", tmp_path / "cache", "--method", "draft_model", "--resume")) == 2
    err = capsys.readouterr().err
    assert "cannot resume" in err and "method 'eagle3' there, 'draft_model' now" in err
    assert specrl_main(_cli(policy, tmp_path / "h", tmp_path / "cache", *eagle3, "--draft-vocab-size", "8",
                            "--resume")) == 2
    assert "draft_vocab_size 32 there, 8 now" in capsys.readouterr().err
    # the same method and vocabulary resume (its 2 steps are done: nothing left to train)
    assert specrl_main(_cli(policy, tmp_path / "h", tmp_path / "cache", *eagle3, "--resume")) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["steps_done"] == 2


def test_resume_needs_a_cache(tmp_path, capsys):
    assert specrl_main(["train-drafter", "--policy", str(tmp_path), "--method", "eagle3", "--out",
                        str(tmp_path / "o"), "--resume"]) == 2
    assert "pass cache=DIR" in capsys.readouterr().err
