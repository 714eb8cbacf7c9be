"""`specrl audit`: one JSON line with the e-value on exact samples, the e-process plot, a dump sampled at other
settings than the flags shown by its e-value (no error), greedy by identity, and one-line bad-input errors."""
from __future__ import annotations

import copy
import json
import math

import pytest

from specrl import LLM, SamplingParams
from specrl.cli.main import main
from specrl.model import save_model
from tests.helpers import tiny_model


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    """A model directory with config and weights only: no tokenizer (ids need none)."""
    path = tmp_path_factory.mktemp("audit") / "model"
    save_model(tiny_model(seed=4), path)
    assert not (path / "tokenizer.json").exists()
    return path


def _write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _samples(temperature=1.0, n=6, max_tokens=12):
    llm = LLM(copy.deepcopy(tiny_model(seed=4)), max_num_seqs=16, kv_cache_memory="8MiB")
    outs = llm.generate([[3, 4, 5], [6, 7]], SamplingParams(n=n, temperature=temperature, max_tokens=max_tokens,
                                                            seed=2))
    return [{"prompt_ids": r.prompt_token_ids, "completion_ids": c.token_ids} for r in outs for c in r.outputs]


def test_exact_samples_pass_with_one_json_line_and_a_plot(model_dir, tmp_path, capsys):
    rollouts = _write(tmp_path / "r.jsonl", _samples())
    assert main(["audit", "--model", str(model_dir), "--rollouts", str(rollouts), "--out", str(tmp_path / "p.png")]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 1
    out = json.loads(lines[0])
    assert out["tokens"] == sum(len(r["completion_ids"]) for r in _samples()) and out["p_value"] > 1e-3
    assert out["test"] == "e_process" and not out["rejected"] and out["alpha"] == 1e-3
    assert out["e_value"] == pytest.approx(math.exp(out["log_e"])) and out["p_value"] <= 1.0
    assert {"z", "weight", "pit_top5"} <= out.keys() and (tmp_path / "p.png").stat().st_size > 0


def test_a_dump_at_another_temperature_is_no_error_its_e_value_shows_it(model_dir, tmp_path, capsys):
    rollouts = _write(tmp_path / "hot.jsonl", _samples(temperature=2.0, n=32, max_tokens=40))
    assert main(["audit", "--model", str(model_dir), "--rollouts", str(rollouts), "--temperature", "1.0"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["rejected"] and out["p_value"] <= 1e-3 and out["log_e"] > math.log(1000)


@pytest.mark.parametrize("alpha", ["0", "1", "1.5", "-0.01"])
def test_alpha_outside_zero_one_is_one_line(model_dir, tmp_path, capsys, alpha):
    rollouts = _write(tmp_path / "r.jsonl", [{"prompt_ids": [3], "completion_ids": [4]}])
    assert main(["audit", "--model", str(model_dir), "--rollouts", str(rollouts), "--alpha", alpha]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "outside (0, 1)" in err and "--alpha 1e-3" in err


def test_temperature_zero_checks_greedy_by_identity(model_dir, tmp_path, capsys):
    rollouts = _write(tmp_path / "g.jsonl", _samples(temperature=0.0))
    assert main(["audit", "--model", str(model_dir), "--rollouts", str(rollouts), "--temperature", "0"]) == 0
    captured = capsys.readouterr()
    out = json.loads(captured.out)
    assert out["test"] == "greedy_identity" and out["mismatches"] == 0 and out["p_value"] == 1.0
    assert "identity" in captured.err


@pytest.mark.parametrize("row, words", [
    ({"prompt_ids": [3, 4], "completion_ids": [5, 999]}, "id 999, outside the model's vocabulary [0, 32)"),
    ({"prompt_ids": [3, 4]}, "no completion_ids"),
    ({"prompt_ids": [3, 4], "completion_ids": "5 6"}, "no completion_ids"),
])
def test_bad_rows_are_clear_errors(model_dir, tmp_path, capsys, row, words):
    rollouts = _write(tmp_path / "bad.jsonl", [{"prompt_ids": [3], "completion_ids": [4]}, row])
    assert main(["audit", "--model", str(model_dir), "--rollouts", str(rollouts)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("specrl audit: error:") and "bad.jsonl:2" in err and words in err


def test_help_says_a_dump_must_not_share_a_seed_across_prompts(capsys):
    from specrl.cli.audit import main as audit_main
    with pytest.raises(SystemExit):
        audit_main(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "must not share one seed across prompts" in text and "same uniforms" in text and "coupled" in text
