"""The sampler audit's alarm in the pipeline: rollout.audit=on stops the run naming the backend, the SD method
and the evidence; fallback turns SD off once and goes on; the chosen rows never depend on rewards."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from specrl.pipeline.seam import RunStopped
from specrl.pipeline.steps import audit_rows, check_sampler
from specrl.rl.audit import SamplerAlarm
from specrl.train.config import TrainConfig


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
    return SimpleNamespace(sampler_alarm=SamplerAlarm(5), spec_disabled=False,
                           rollout=SimpleNamespace(backend=_Backend()))


def _row(step, z):
    return {"step": step, "sampler_z": z, "sampler_p": 0.5, "sampler_tokens": 900, "sampler_weight": 3.0}


def _cfg(mode):
    cfg = TrainConfig()
    cfg.rollout.audit = mode
    return cfg


def test_on_stops_the_run_and_names_backend_method_and_evidence(tmp_path):
    parts, bar, cfg = _parts(), _Bar(), _cfg("on")
    check_sampler(SimpleNamespace(path=tmp_path), parts, cfg, _row(1, 0.3), bar)  # a normal step
    with pytest.raises(RunStopped) as e:
        check_sampler(SimpleNamespace(path=tmp_path), parts, cfg, _row(2, -6.0), bar)
    msg = str(e.value)
    assert "step 2" in msg and "pipeline.backend=local" in msg and "rollout.spec.method=auto" in msg
    assert "z = -4.03" in msg and "last good checkpoint" in msg


def test_fallback_turns_speculation_off_once(tmp_path):
    parts, bar, cfg = _parts(), _Bar(), _cfg("fallback")
    row = _row(1, 7.0)
    check_sampler(SimpleNamespace(path=tmp_path), parts, cfg, row, bar)
    assert parts.rollout.backend.disabled == 1 and parts.spec_disabled and row["sampler_fallback"]
    assert "speculative decoding is off" in bar.lines[0]
    with pytest.raises(RunStopped):  # still failing with SD off: the plain sampler is wrong, so stop
        check_sampler(SimpleNamespace(path=tmp_path), parts, cfg, _row(2, 7.0), bar)
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
