"""The sampler audit's alarm in the pipeline: the run's e-process in every row, rollout.audit=on stops the run
naming the backend, the SD method and the evidence; fallback turns SD off once and starts a new test; the
chosen rows never depend on rewards; a resumed run continues the checkpoint's e-process."""
from __future__ import annotations

import json
import math
from types import SimpleNamespace

import pytest

import specrl.pipeline.sync as sync
from specrl.audit import SamplerAlarm
from specrl.audit.bets import COMPONENTS
from specrl.cli.train import main
from specrl.pipeline.run_dir import read_jsonl
from specrl.pipeline.seam import RunStopped
from specrl.pipeline.steps import SAMPLER_STATE, audit_rows, check_sampler
from specrl.config.run import TrainConfig
from tests.pipeline.fixtures import make_setup, overrides


class _Backend:
    def __init__(self):
        self.disabled = 0

    def disable_speculation(self):
        self.disabled += 1


class _Bar:
    def __init__(self):
        self.lines = []

    def log(self, line):
        self.lines.append(line)


def _parts():
    return SimpleNamespace(sampler_alarm=SamplerAlarm(1e-3), spec_disabled=False,
                           rollout=SimpleNamespace(backend=_Backend()))


def _row(step, log_e, impossible=0):
    """A learner's row whose tokens bring every component's wealth to e^log_e."""
    return {"step": step, "sampler_bets": [log_e] * COMPONENTS, "sampler_tokens": 900, "sampler_impossible": impossible,
            "sampler_z": 1.5, "sampler_pit_p": 0.13, "sampler_weight": 3.0}


def _cfg(mode):
    cfg = TrainConfig()
    cfg.rollout.audit = mode
    return cfg


def test_on_stops_the_run_and_names_backend_method_and_evidence(tmp_path):
    parts, bar, cfg = _parts(), _Bar(), _cfg("on")
    row = _row(1, 3.0)
    check_sampler(SimpleNamespace(path=tmp_path), parts, cfg, row, bar)  # e = 20 < 1000
    assert row["sampler_e"] == pytest.approx(3.0) and "sampler_bets" not in row  # the row keeps the log e-value
    with pytest.raises(RunStopped) as e:
        check_sampler(SimpleNamespace(path=tmp_path), parts, cfg, _row(2, 4.0), bar)  # e^7 = 1097 >= 1000
    msg = str(e.value)
    assert "step 2" in msg and "pipeline.backend=local" in msg and "rollout.spec.method=auto" in msg
    assert "e-value is 1.1e+03 >= 1/alpha = 1000" in msg and "1800 audited tokens" in msg
    assert "last good checkpoint" in msg


def test_an_impossible_token_stops_the_run_at_once(tmp_path):
    with pytest.raises(RunStopped, match="1 sampled token"):
        check_sampler(SimpleNamespace(path=tmp_path), _parts(), _cfg("on"), _row(1, -2.0, impossible=1), _Bar())


def test_fallback_turns_speculation_off_once_and_starts_a_new_test(tmp_path):
    parts, bar, cfg = _parts(), _Bar(), _cfg("fallback")
    row = _row(1, 8.0)
    check_sampler(SimpleNamespace(path=tmp_path), parts, cfg, row, bar)
    assert parts.rollout.backend.disabled == 1 and parts.spec_disabled and row["sampler_fallback"]
    assert "speculative decoding is off" in bar.lines[0] and parts.sampler_alarm.process.tokens == 0
    with pytest.raises(RunStopped):  # still failing with SD off: the plain sampler is wrong, so stop
        check_sampler(SimpleNamespace(path=tmp_path), parts, cfg, _row(2, 8.0), bar)
    assert parts.rollout.backend.disabled == 1


def test_audit_rows_depend_on_seed_and_step_only():
    cfg = _cfg("on")
    cfg.rollout.audit_groups, cfg.rollout.n = 2, 4
    rollout = SimpleNamespace(step=3, outputs=[None] * 8, version=3, newest_version=3)
    a, b = audit_rows(rollout, cfg, 32), audit_rows(rollout, cfg, 32)
    assert a.version == 3 and int(a.rows.sum()) == 8 and bool((a.rows == b.rows).all())
    assert audit_rows(SimpleNamespace(step=3, outputs=[None] * 8, version=2, newest_version=3), cfg, 32).version is None
    cfg.rollout.audit = "off"
    assert audit_rows(rollout, cfg, 32) is None


def test_a_resumed_run_continues_the_checkpoints_e_process(tmp_path, monkeypatch):
    setup = make_setup(tmp_path / "tiny")
    args = {"rollout.audit_groups": "null"}
    straight = tmp_path / "straight"
    assert main(overrides(*setup, straight, plots=True, **args)) == 0
    rows = read_jsonl(straight / "metrics.jsonl")
    assert all(math.isfinite(r["sampler_e"]) and r["sampler_e"] < math.log(1000) for r in rows)  # exact: no alarm
    assert (straight / "plots/sampler_audit.png").stat().st_size > 0
    state = json.loads((straight / "checkpoints/step_000002/state.json").read_text())[SAMPLER_STATE]
    assert state["tokens"] == sum(r["sampler_tokens"] for r in rows[:2]) and len(state["log_wealth"]) == COMPONENTS

    out = tmp_path / "resumed"
    real = sync.rl_step

    def interrupted(step, parts, cfg):
        if step == 2:
            raise KeyboardInterrupt  # a killed job: nothing after the last checkpoint survives
        return real(step, parts, cfg)
    monkeypatch.setattr(sync, "rl_step", interrupted)
    with pytest.raises(KeyboardInterrupt):
        main(overrides(*setup, out, **args))
    monkeypatch.undo()
    assert main([f"resume={out}", "progress=false"]) == 0
    again = read_jsonl(out / "metrics.jsonl")
    assert [r["sampler_e"] for r in again] == [r["sampler_e"] for r in rows]  # the same e-process, not a new one
    assert [r["sampler_p"] for r in again] == [r["sampler_p"] for r in rows]


def test_the_row_gets_the_audits_share_of_the_step(tmp_path):
    parts, bar, cfg = _parts(), _Bar(), _cfg("on")
    row = {**_row(1, 0.0), "sampler_s": 0.3, "step_s": 10.0}
    check_sampler(SimpleNamespace(path=tmp_path), parts, cfg, row, bar)
    assert row["sampler_share"] == pytest.approx(0.03)
