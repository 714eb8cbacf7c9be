"""`specrl bench real-rl`: the arms' table from their run directories, resuming, and its bad input."""
import json
from pathlib import Path

import pytest

from specrl.bench import real_rl
from specrl.cli.main import main
from specrl.errors import UserError
from tests.bench.conftest import train_overrides

CONFIG = Path(__file__).resolve().parents[2] / "configs" / "default.yaml"


def _run_dir(path: Path, rows: list[dict], evals: list[dict]) -> Path:
    path.mkdir(parents=True)
    (path / "config.yaml").write_text("seed: 0\n")
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (path / "eval.jsonl").write_text("".join(json.dumps(e) + "\n" for e in evals))
    return path


def _rows(rollout_s: float, step_s: float, n: int = 3, **extra) -> list[dict]:
    return [{"step": i + 1, "rollout_s": rollout_s, "step_s": step_s, "response_len_p50": 100.0,
             "response_len_p99": 400.0, "acceptance_length": 2.0, "logprob_diff": 0.0,
             **{k: v[i] for k, v in extra.items()}} for i in range(n)]


def test_an_arm_row_measures_against_sd_off(tmp_path):
    off = real_rl.arm_row("off", 0, _run_dir(tmp_path / "off", _rows(6.0, 10.0), [{"step": 0, "reward_mean": 0.2}]),
                          None)
    assert off["R"] == 0.6 and off["eval_reward"] == {0: 0.2}
    probe = {"probe_accept_online": [2.0, 2.4, 3.0], "probe_accept_frozen": [2.0, 2.0, 2.0],
             "probe_kl_pi0": [0.0, 0.1, 0.2]}
    on = real_rl.arm_row("online", 0, _run_dir(tmp_path / "on", _rows(3.0, 7.0, **probe), []),
                         {"rollout_s": off["rollout_s"], "step_s": off["step_s"]})
    # rollout 6 s of a 10 s step, SD makes it 3 s: alpha 2, bound 1 / (0.3 + 0.4); the step is 10 / 7 faster
    assert on["alpha"] == 2.0 and abs(on["step_bound"] - 1 / 0.7) < 1e-12 and on["step_speedup"] == 10.0 / 7.0
    assert on["probe_online_over_frozen_last5"] == pytest.approx(2.466666 / 2.0, rel=1e-5)
    assert on["probe_kl_pi0"] == [0.0, 0.1, 0.2]
    assert real_rl.probe_plot([off, on], tmp_path / "probe.png") and (tmp_path / "probe.png").stat().st_size > 0
    assert not real_rl.probe_plot([off], tmp_path / "none.png")  # no arm ran the probe: no figure


def test_a_finished_arm_is_read_back_and_a_started_one_resumes(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(real_rl, "run", lambda args, log, what: calls.append(args))
    done = _run_dir(tmp_path / "off_seed0", _rows(1.0, 2.0, n=3), [])
    real_rl.train_arm(CONFIG, done, "off", 0, None, 3, [])
    assert calls == []  # all max_steps rows are there: nothing runs
    started = _run_dir(tmp_path / "online_seed0", _rows(1.0, 2.0, n=1), [])
    real_rl.train_arm(CONFIG, started, "online", 0, tmp_path / "head", 3, ["model=x"])
    assert calls[-1][-2:] == ["train", f"resume={started}"]  # its own config.yaml, unchanged
    fresh = tmp_path / "frozen_seed1"
    real_rl.train_arm(CONFIG, fresh, "frozen", 1, tmp_path / "head", 3, ["model=x"])
    args = calls[-1]
    assert "seed=1" in args and "model=x" in args and "rollout.drafter.online=false" in args
    assert args[-1] == f"rollout.spec.draft_model={tmp_path / 'head'}"


def test_alpha_tail_compares_arms_whose_lengths_differ(tmp_path):
    off = real_rl.arm_row("off", 0, _run_dir(tmp_path / "off", _rows(6.0, 10.0), []), None)
    assert off["rollout_s_per_tail_token"] == 6.0 / 400.0  # p99 400 tokens a step
    # SD on: twice as long a rollout, but its policy writes a longest row three times as long
    long = _run_dir(tmp_path / "on", [{**r, "response_len_p99": 1200.0} for r in _rows(12.0, 16.0)], [])
    on = real_rl.arm_row("online", 0, long, {k: off[k] for k in ("rollout_s", "step_s", "rollout_s_per_tail_token")})
    assert on["alpha"] == 0.5 and on["alpha_tail"] == pytest.approx(1.5)  # slower rollout, faster per tail token


def test_the_correction_arm_is_sd_off_without_the_bf16_ratio(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(real_rl, "run", lambda args, log, what: calls.append(args))
    real_rl.train_arm(CONFIG, tmp_path / "off_nocorr_seed0", "off_nocorr", 0, tmp_path / "head", 3, [])
    args = calls[-1]
    assert "rollout.spec.method=null" in args and "algorithm.is_correction=stale" in args
    assert not any(a.startswith("rollout.spec.draft_model=") for a in args)  # SD off: no head
    cfg = real_rl.load_config(CONFIG, real_rl.ARMS["off_nocorr"])  # the overrides are a config the trainer takes
    assert cfg.algorithm.is_correction == "stale" and cfg.rollout.spec.method is None
    row = real_rl.arm_row("off_nocorr", 0, _run_dir(tmp_path / "nc", _rows(6.0, 10.0), []),
                          {"rollout_s": 3.0, "step_s": 5.0})
    assert row["R"] == 0.6 and "alpha" not in row  # its own R; it is not measured against SD off


def test_the_replay_arm_is_online_with_a_window_and_a_lower_lr(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(real_rl, "run", lambda args, log, what: calls.append(args))
    real_rl.train_arm(CONFIG, tmp_path / "online_replay_seed0", "online_replay", 0, tmp_path / "head", 3, [])
    assert calls[-1][-1] == f"rollout.spec.draft_model={tmp_path / 'head'}"  # it drafts with the head
    cfg = real_rl.load_config(CONFIG, real_rl.ARMS["online_replay"])
    default = real_rl.load_config(CONFIG, real_rl.ARMS["online"])
    assert cfg.rollout.drafter.online and cfg.rollout.drafter.window == 4 > default.rollout.drafter.window
    assert cfg.rollout.drafter.optim.lr == 1e-4 < default.rollout.drafter.optim.lr
    assert "online_replay" not in {real_rl.parse_arm(a)[0] for a in real_rl.DEFAULT_ARMS}


def test_one_sd_off_arm_runs_on_the_tiny_task(tiny_task, tmp_path, capsys):
    out = tmp_path / "rr"
    assert main(["bench", "real-rl", "--config", str(CONFIG), "--out", str(out), "--arms", "off:0",
                 *train_overrides(*tiny_task)]) == 0
    (row,) = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert row["arm"] == "off" and row["steps"] == 1 and 0 < row["R"] <= 1
    assert (out / "compare.png").stat().st_size > 0 and not (out / "probe.png").exists()  # no arm ran the probe


@pytest.mark.parametrize("bad, named", [("bogus:0", "bogus:0"), ("online", "online"), ("off:x", "off:x")])
def test_a_bad_arm_names_itself_and_the_choices(bad, named):
    with pytest.raises(UserError, match=f"got '{named}'.*online_rw"):
        real_rl.parse_arm(bad)


def test_an_arm_that_ran_on_another_cpu_gets_no_speedup(tmp_path, monkeypatch):
    off_dir = _run_dir(tmp_path / "off_seed0", _rows(6.0, 10.0), [])
    on_dir = _run_dir(tmp_path / "online_seed0", _rows(3.0, 7.0), [])
    monkeypatch.setattr(real_rl, "run", lambda args, log, what: None)
    monkeypatch.setattr("specrl.model.precision.cpu_name", lambda: "CPU A")
    real_rl.train_arm(CONFIG, tmp_path / "off_seed0", "off", 0, None, 4, [])  # 3 of 4 steps: it launches
    real_rl.train_arm(CONFIG, on_dir, "online", 0, tmp_path / "head", 4, [])
    launches = [json.loads(line) for line in real_rl.machines_file(on_dir).read_text().splitlines()]
    assert launches[0]["cpu"] == "CPU A" and launches[0]["from_step"] == 3
    off = real_rl.arm_row("off", 0, off_dir, None)
    same = real_rl.arm_row("online", 0, on_dir, {"rollout_s": 6.0, "step_s": 10.0, "cpus": off["cpus"]})
    assert same["alpha"] == 2.0 and same["cpus"] == ["CPU A"]
    monkeypatch.setattr("specrl.model.precision.cpu_name", lambda: "CPU B")
    real_rl.train_arm(CONFIG, on_dir, "online", 0, tmp_path / "head", 4, [])  # resumed on another machine
    mixed = real_rl.arm_row("online", 0, on_dir, {"rollout_s": 6.0, "step_s": 10.0, "cpus": off["cpus"]})
    assert "alpha" not in mixed and "CPU B" in mixed["speed_skipped"] and mixed["cpus"] == ["CPU A", "CPU B"]


def test_the_head_resumes_only_a_fit_that_was_saved(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(real_rl, "run", lambda args, log, what: calls.append(args))
    cfg = real_rl.load_config(CONFIG, [])
    real_rl.train_drafter(cfg, tmp_path, 60, None)
    assert "resume=true" not in calls[-1]  # a first fit (its teacher data may be cached already) starts fresh
    fit = calls[-1]
    assert fit[fit.index("--draft-vocab-size") + 1] == "8192" and fit[fit.index("--prompts") + 1] == "256"
    (tmp_path / "drafter_cache").mkdir()
    (tmp_path / "drafter_cache" / "train_state.pt").write_bytes(b"")
    real_rl.train_drafter(cfg, tmp_path, 60, None)
    assert calls[-1][-1] == "resume=true"
    (tmp_path / "drafter").mkdir()
    (tmp_path / "drafter" / "train_metrics.json").write_text("{}")
    assert real_rl.train_drafter(cfg, tmp_path, 60, None) == tmp_path / "drafter" and len(calls) == 2  # kept
