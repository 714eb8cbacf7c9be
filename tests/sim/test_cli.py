import json
from pathlib import Path

import numpy as np
import pytest

from specrl.cli.main import main as specrl_main
from specrl.sim.cli import main
from specrl.sim.des import Engine
from specrl.sim.traces import meta_path, synthesize, write_jsonl
from tests.sim.helpers import SMALL, toy_hw

SMALL_WL = ["--prompts", "16", "--n", "4", "--prompt-len", "64", "--lengths", "lognormal:300,0.6",
            "--max-tokens", "2048"]


def _lines(capsys):
    return [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.strip()]


def test_step_prints_json_lines(capsys):
    assert main(["step", "--gpus", "16", *SMALL_WL]) == 0
    rows = _lines(capsys)
    assert [r["kind"] for r in rows] == ["step", "step", "speedup"]
    assert rows[2]["rollout_speedup"] > 1.0


def test_step_predicts_the_hand_computed_rollout_time(tmp_path, capsys):
    # A machine with only per-step costs: roofline terms vanish (bandwidth and FLOP/s 1e30), each engine step
    # costs iter_s + running x per_seq_s = 1 ms + 4 x 0.1 ms = 1.4 ms, the drafter costs nothing.
    # One prompt, n=4 samples of exactly 100 tokens (sigma 0), 4 running sequences throughout.
    overheads = {"iter_s": 1e-3, "per_seq_s": 1e-4, "spec_iter_s": 0.0, "sync_fixed_s": 0.0}
    hw = {"name": "hand", "peak_flops": 1e30, "peak_flops_fp8": 1e30, "hbm_bw": 1e30, "hbm_bytes": 1e15,
          "nvlink_bw": 1e30, "net_bw": 1e30, "gpus_per_node": 1, "eff_bw": 1.0, "eff_flops": 1.0,
          "comm_latency_s": 0.0, "overheads": overheads}
    free = {"draft_frac": 0.0, "draft_iter_s": 0.0, "draft_per_seq_s": 0.0}
    cal = tmp_path / "calibration.json"
    cal.write_text(json.dumps({"hardware": hw, "drafters": {"ngram": free}}))
    assert main(["step", "--hardware", "cpu-local", "--calibration", str(cal), "--gpus", "1", "--prompts", "1",
                 "--n", "4", "--lengths", "lognormal:100,0", "--sd-method", "ngram", "--k", "3",
                 "--acceptance", "1,1,1"]) == 0
    plain, sd, speedup = _lines(capsys)
    # without SD: the prefill step emits token 1, then 99 decode steps: 100 steps x 1.4 ms = 0.14 s
    assert plain["iterations"] == 100 and plain["rollout_s"] == pytest.approx(0.14)
    # every draft accepted: a verify step emits k + 1 = 4 tokens; 1 + ceil(99 / 4) = 26 steps x 1.4 ms = 0.0364 s
    assert sd["iterations"] == 26 and sd["rollout_s"] == pytest.approx(0.0364)
    assert speedup["rollout_speedup"] == pytest.approx(100 / 26)  # 3.85: a simulator 3x off fails here


def test_unknown_hardware_and_model_list_valid_names(capsys):
    assert specrl_main(["simulate", "step", "--hardware", "A100"]) == 2
    assert "H100" in capsys.readouterr().err
    assert specrl_main(["simulate", "step", "--model", "llama-9000"]) == 2
    assert "qwen3-8b" in capsys.readouterr().err


def test_missing_trace_is_named(tmp_path, capsys):
    missing = tmp_path / "absent_trace.jsonl"
    assert specrl_main(["simulate", "calibrate", "--traces", str(missing), "--model", "qwen3-8b"]) == 2
    assert "absent_trace.jsonl" in capsys.readouterr().err


def test_calibrate_validate_then_simulate_cpu_local(tmp_path, capsys):
    (tmp_path / "config.json").write_text(json.dumps(SMALL))
    engine = Engine(toy_hw(bw=2e10, flops=5e10, iter_s=2e-3, per_seq_s=1e-4), _small())
    paths = []
    for bs in (2, 8, 32):
        lengths = np.random.default_rng(bs).integers(20, 150, bs)
        p = tmp_path / f"bs{bs}.jsonl"
        write_jsonl(synthesize(engine, lengths, 16, 64, None, None, seed=bs), p)
        meta_path(p).write_text(json.dumps({"prompt_len": 16, "response_lens": lengths.tolist(),
                                            "max_num_seqs": 64, "k": 0, "workload": f"bs{bs}"}))
        paths.append(str(p))
    cal = str(tmp_path / "calibration.json")
    assert main(["calibrate", "--traces", *paths[:2], "--out", cal,
                 "--model", str(tmp_path / "config.json")]) == 0
    assert _lines(capsys)[0]["kind"] == "calibration"
    assert main(["validate", "--calibration", cal, "--traces", paths[2]]) == 0
    rows = _lines(capsys)
    assert abs(rows[0]["err_time_pct"]) < 5
    assert main(["step", "--hardware", "cpu-local", "--calibration", cal, "--model",
                 str(tmp_path / "config.json"), "--gpus", "2", "--sd-method", "ngram", *SMALL_WL]) == 0
    rows = _lines(capsys)
    assert rows[-1]["kind"] == "speedup"
    # a calibration fitted on `specrl train` runs carries the training MFU; `step` uses it unless --mfu is given
    calib = json.loads(Path(cal).read_text())
    calib["pipeline"] = {"mfu": 0.35 / 2}
    Path(cal).write_text(json.dumps(calib))
    args = ["step", "--hardware", "cpu-local", "--calibration", cal, "--model", str(tmp_path / "config.json"),
            "--gpus", "2", "--sd-method", "ngram", *SMALL_WL]
    assert main(args) == 0
    assert _lines(capsys)[0]["train_s"] == pytest.approx(2 * rows[0]["train_s"])
    assert main(args + ["--mfu", "0.35"]) == 0
    assert _lines(capsys)[0]["train_s"] == pytest.approx(rows[0]["train_s"])


def test_sweep_writes_plots(tmp_path, capsys):
    assert main(["sweep", "--gpus", "16", "--plot-dir", str(tmp_path), *SMALL_WL]) == 0
    kinds = [r.get("kind") for r in _lines(capsys)]
    assert kinds.count("plot") == 3
    assert sorted(p.name for p in tmp_path.glob("*.png")) == [
        "speedup_vs_acceptance.png", "speedup_vs_batch.png", "speedup_vs_gpus.png"]


def test_project_and_specs(capsys):
    assert main(["project", "--gpus", "64", "--format", "jsonl"]) == 0
    rows = _lines(capsys)
    assert len(rows) == 8  # 2 models x sync/async x SD off/on
    assert any("1.54-1.77x" in r["nemo_rl"] for r in rows)  # NeMo-RL 8B beside ours
    assert main(["specs"]) == 0
    assert {r["name"] for r in _lines(capsys)} >= {"H100", "H200", "B200", "GB200", "qwen3-8b"}


def _small():
    from specrl.sim.models import from_hf_config
    return from_hf_config(SMALL, "small")
