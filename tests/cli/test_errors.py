"""The CLI's one error boundary: a user error ends any command with one line on stderr and a non-zero exit."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from specrl.model import save_model

from specrl.cli.main import main
from specrl.trainer.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from tests.helpers import save_tiny, tiny_model
from tests.pipeline.fixtures import make_setup, overrides


def run(argv, capsys) -> tuple[int, str]:
    code = main(argv)
    err = capsys.readouterr().err
    return code, err


def one_error_line(err: str, command: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"specrl {command}: error: "), err
    assert "Traceback" not in err
    return lines[0]


def truncate(path) -> None:
    size = path.stat().st_size
    with open(path, "r+b") as f:
        f.truncate(size // 2)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return save_tiny(tmp_path_factory.mktemp("tiny") / "model", vocab=32, max_pos=96)


@pytest.fixture
def no_cuda(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


# ---- generate ---------------------------------------------------------------------------------------------
def test_generate_missing_model_names_the_path(capsys):
    code, err = run(["generate", "--model", "/nonexistent", "--prompt", "hi"], capsys)
    assert code == 2
    assert "no Hugging Face checkpoint at '/nonexistent'" in one_error_line(err, "generate")


@pytest.mark.parametrize("text, expected", [
    ('{"prompt": "a"}\n{"prompt": "b"\n', "bad.jsonl:2: not valid JSON"),
    ('{"prompt": "a"}\n\n{"text": "b"}\n', "bad.jsonl:3: row has no 'prompt' field"),
    ('["a"]\n', "bad.jsonl:1: row has no 'prompt' field"),
])
def test_generate_malformed_prompts_file_names_the_line(tmp_path, capsys, text, expected):
    (tmp_path / "bad.jsonl").write_text(text)
    code, err = run(["generate", "--prompts", str(tmp_path / "bad.jsonl")], capsys)
    assert code == 2
    line = one_error_line(err, "generate")
    assert expected in line and '{"prompt": "..."}' in line


def test_generate_missing_prompts_file(tmp_path, capsys):
    code, err = run(["generate", "--prompts", str(tmp_path / "absent.jsonl")], capsys)
    assert code == 2 and "absent.jsonl' does not exist" in one_error_line(err, "generate")


def test_generate_negative_temperature(capsys):
    code, err = run(["generate", "--temperature", "-1"], capsys)
    assert code == 2 and "temperature=-1.0 must be >= 0" in one_error_line(err, "generate")


def test_generate_unknown_spec_method_lists_the_valid_ones(capsys):
    code, err = run(["generate", "--method", "bogus"], capsys)
    line = one_error_line(err, "generate")
    assert code == 2 and "'bogus'" in line
    assert all(m in line for m in ("ngram", "suffix", "draft_model", "eagle3", "mtp", "auto"))


def test_generate_on_cuda_without_cuda_says_how_to_fix(tiny, no_cuda, capsys):
    code, err = run(["generate", "--model", str(tiny), "--prompt", "t4", "--device", "cuda"], capsys)
    line = one_error_line(err, "generate")
    assert code == 2 and "device='cuda'" in line and "CUDA is not available" in line
    assert "device=cpu" in line and "CUDA build of torch" in line


def test_generate_truncated_weights_names_the_file(tiny, tmp_path, capsys):
    bad = save_tiny(tmp_path / "model", vocab=32, max_pos=96)
    truncate(bad / "model.safetensors")
    code, err = run(["generate", "--model", str(bad), "--prompt", "t4", "--max-tokens", "2"], capsys)
    line = one_error_line(err, "generate")
    assert code == 2 and f"{bad / 'model.safetensors'}" in line and "truncated or corrupt" in line
    assert "save or copy the checkpoint again" in line


def test_generate_config_without_vocab_size_names_the_file_and_key(tmp_path, capsys):
    import json
    bad = save_tiny(tmp_path / "model", vocab=32, max_pos=96)
    cfg = json.loads((bad / "config.json").read_text())
    del cfg["vocab_size"]
    (bad / "config.json").write_text(json.dumps(cfg))
    code, err = run(["generate", "--model", str(bad), "--prompt", "t4", "--max-tokens", "2"], capsys)
    line = one_error_line(err, "generate")  # was a KeyError traceback
    assert code == 2 and f"{bad / 'config.json'}" in line and "lacks the key 'vocab_size'" in line


# ---- train ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("args, expected", [
    (["bogus_key=1"], "unknown config key 'bogus_key'"),
    (["optim.lr=abc"], "optim.lr='abc' is invalid: expected a number"),
    (["--config", "/nonexistent.yaml"], "config file '/nonexistent.yaml' does not exist"),
    # the embedded task: a name that does not exist lists the valid ones; hop knobs out of range
    (["data.source=chian"], "in 'data': source='chian' is invalid: expected an embedded task, one of ['chain', 'arith']"),
    (["data.max_hops=0"], "in 'data': max_hops=0 is invalid: expected"),
    (["data.max_hops=1000"], "in 'data': max_hops=1000 is invalid: expected in [1, 999]"),
    (["data.hops_median=-3"], "in 'data': hops_median=-3.0 is invalid: expected > 0 or null"),
    (["data.hops_sigma=-1"], "in 'data': hops_sigma=-1.0 is invalid: expected >= 0 or null"),
])
def test_train_bad_config(args, expected, capsys):
    code, err = run(["train", *args], capsys)
    assert code == 2 and expected in one_error_line(err, "train")


def test_train_on_cuda_without_cuda(tmp_path, no_cuda, capsys):
    model, data = make_setup(tmp_path)
    code, err = run(["train", *overrides(model, data, tmp_path / "run", device="cuda")], capsys)
    line = one_error_line(err, "train")
    assert code == 2 and "CUDA is not available" in line and "device=cpu" in line


def test_truncated_checkpoint_state_raises_checkpoint_error(tmp_path):
    model = tiny_model(vocab=32, max_pos=96)
    ckpt = save_checkpoint(tmp_path, 1, lambda d: save_model(model, d / "model"), {"pools": [torch.arange(9)]}, {},
                           keep_last=2)
    truncate(ckpt / "engine_drafter.safetensors")
    with pytest.raises(CheckpointError, match=r"drafter.*unreadable.*delete it .* the one before"):
        load_checkpoint(ckpt)


def test_resume_from_a_truncated_checkpoint_is_one_line(tmp_path, capsys):
    model, data = make_setup(tmp_path)
    out = tmp_path / "run"
    assert main(["train", *overrides(model, data, out, **{"schedule.max_steps": 2, "schedule.save_every": 1})]) == 0
    last = out / "checkpoints" / "step_000002"
    truncate(last / "model" / "model.safetensors")
    capsys.readouterr()
    code, err = run(["train", f"resume={out}"], capsys)
    line = one_error_line(err, "train")
    assert code == 1 and str(last / "model" / "model.safetensors") in line and "truncated or corrupt" in line
    assert f"delete it (rm -r {last}) to resume from the one before" in line and "save or copy" not in line


def test_a_full_disk_at_a_checkpoint_is_one_line_and_keeps_the_earlier_one(tmp_path, capsys, monkeypatch):
    """A full disk at the second save was a SafetensorError traceback; the first checkpoint survives either way.
    The writer is made to fail as safetensors does on ENOSPC (no small file system needed)."""
    import specrl.state_files as state_files
    from safetensors import SafetensorError
    model, data = make_setup(tmp_path)
    out = tmp_path / "run"
    real, saves = state_files.save_file, []

    def full_after_first_checkpoint(tensors, filename, *a, **kw):
        saves.append(filename)
        if "step_000004" in filename:
            raise SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")
        return real(tensors, filename, *a, **kw)
    monkeypatch.setattr(state_files, "save_file", full_after_first_checkpoint)
    code, err = run(["train", *overrides(model, data, out, **{"schedule.save_every": 2})], capsys)
    line = one_error_line(err, "train")
    assert code == 1 and f"out_dir={str(out)!r}" in line and "No space left on device" in line
    assert "A checkpoint needs" in line and "MiB (the last one's size)" in line and "MiB is free there" in line
    assert "with keep_last=2 the run holds up to 3 at once" in line
    assert "schedule.save_every" in line and "schedule.keep_last" in line and f"resume={out}" in line
    assert f"{out / 'checkpoints' / 'step_000002'}' is intact" in line
    assert [p.name for p in (out / "checkpoints").iterdir()] == ["step_000002"]  # no partial directory left
    monkeypatch.undo()
    assert main(["train", f"resume={out}"]) == 0  # the space came back: the run continues from step 2
    assert load_checkpoint(out / "checkpoints" / "step_000004").step == 4


# ---- bench, simulate, train-drafter -----------------------------------------------------------------------
def test_bench_bad_batch_sizes(capsys):
    code, err = run(["bench", "spec", "--batch-sizes", "4,x"], capsys)
    assert code == 2 and "--batch-sizes '4,x' is invalid" in one_error_line(err, "bench")


def test_simulate_bad_argument(capsys):
    code, err = run(["simulate", "step", "--gpus", "0"], capsys)
    assert code == 2 and "gpus=0" in one_error_line(err, "simulate")


def test_train_drafter_missing_policy(tmp_path, capsys):
    argv = ["train-drafter", "--model", str(tmp_path / "absent"), "--method", "eagle3", "--out",
            str(tmp_path / "out"), "--threads", str(torch.get_num_threads())]
    code, err = run(argv, capsys)
    assert code == 2 and "no Hugging Face checkpoint" in one_error_line(err, "train-drafter")


def test_train_drafter_without_the_embedded_policy_asks_for_one(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr("specrl.tasks.POLICY_DIR", tmp_path)  # no config.json, no weights
    code, err = run(["train-drafter", "--method", "eagle3", "--out", str(tmp_path / "o"), "--threads",
                     str(torch.get_num_threads())], capsys)
    assert code == 2 and "the embedded base policy is missing" in one_error_line(err, "train-drafter")
    assert "specrl pretrain --out" in err and "or pass --model DIR" in err


def test_argparse_errors_are_returned_not_raised(capsys):
    assert main(["generate", "--n", "many"]) == 2
    assert "invalid int value: 'many'" in capsys.readouterr().err


# ---- the boundary itself ----------------------------------------------------------------------------------
def test_debug_env_shows_the_traceback_of_a_user_error(monkeypatch, capsys):
    monkeypatch.setenv("SPECRL_DEBUG", "1")
    code, err = run(["generate", "--temperature", "-1"], capsys)
    assert code == 2 and "Traceback" in err and "specrl generate: error: temperature=-1.0" in err


def test_an_internal_bug_keeps_its_traceback(monkeypatch):
    import specrl.cli.generate as generate

    def bug(argv):
        raise KeyError("internal")
    monkeypatch.setattr(generate, "main", bug)
    with pytest.raises(KeyError, match="internal"):
        main(["generate"])


@pytest.mark.parametrize("argv", [["generate", "--model", "/nonexistent"], ["train", "bogus_key=1"]])
def test_a_user_error_prints_no_traceback_from_the_shell(argv):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop("SPECRL_DEBUG", None)
    proc = subprocess.run([sys.executable, "-m", "specrl", *argv], capture_output=True, text=True, env=env)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert one_error_line(proc.stderr, argv[0])
    assert proc.stdout == ""  # no results on an error


def test_train_response_budget_beyond_the_context_names_the_knob(tmp_path, capsys):
    model, data = make_setup(tmp_path)  # a policy of max_position_embeddings 96
    out = tmp_path / "run"
    code, err = run(["train", *overrides(model, data, out, **{"rollout.max_tokens": 500})], capsys)
    line = one_error_line(err, "train")
    assert code == 2 and "rollout.max_tokens=500 is invalid" in line and "lower rollout.max_tokens to at most" in line
    assert not out.exists()  # refused before the run directory is written
