"""The vLLM backend's publish order, on a fake engine: a drafter update that arrives while a generate() runs
(the async driver's trainer thread) is queued and reloaded at the generation boundary, never refused and
never mid-call; the metrics name the drafter version that served each call."""
from __future__ import annotations

import threading
import types

import pytest
import torch

pytest.importorskip("vllm", exc_type=ImportError)

from specrl.engine import SamplingParams  # noqa: E402
from specrl.pipeline.vllm import backend as vb  # noqa: E402
from specrl.pipeline.vllm.refit import RefitDir  # noqa: E402


class _Engine:
    """Finishes each request after `steps` engine steps; `during(step)` runs inside the call's first step."""

    def __init__(self, log: list, steps: int = 3):
        self.log, self.steps, self.queued, self.done_steps = log, steps, [], 0
        self.during = None

    def add_request(self, rid, prompt, sp):
        self.queued.append(rid)

    def abort_request(self, ids):
        pass

    def has_unfinished_requests(self):
        return bool(self.queued)

    def step(self):
        self.log.append("step")
        self.done_steps += 1
        if self.during is not None:
            during, self.during = self.during, None
            during()
        if self.done_steps % self.steps:
            return []
        out = [types.SimpleNamespace(request_id=r, finished=True) for r in self.queued]
        self.queued = []
        return out


class _LLM:
    def __init__(self, log):
        self.log, self.llm_engine = log, _Engine(log)

    def collective_rpc(self, name, kwargs=None):
        self.log.append(name)

    def get_metrics(self):
        return []


def _backend(tmp_path, monkeypatch) -> tuple[vb.VllmBackend, list]:
    monkeypatch.setattr(vb, "to_vllm", lambda sp, eos: sp)
    monkeypatch.setattr(vb, "to_specrl", lambda out, i, sp, eos, version: types.SimpleNamespace(outputs=[]))
    log: list = []
    be = object.__new__(vb.VllmBackend)  # no engine process: the seam-side bookkeeping alone
    be.llm, be.eos, be._refusal, be._dead, be._cancelled, be._generating = _LLM(log), frozenset(), None, False, False, False
    be._lock, be._pending, be._pending_drafter, be._calls, be._served = threading.Lock(), None, None, 0, 0
    be.weights_version = be.drafter_version = 0
    be._transfer_s = 0.0
    be.drafter_refit = RefitDir(tmp_path, tmp_path)
    be._drafter_tensors = lambda weights: {k: v for k, v in weights}
    be.reset_stats()
    return be, log


def test_a_drafter_update_during_generate_is_applied_after_it_never_refused(tmp_path, monkeypatch):
    be, log = _backend(tmp_path, monkeypatch)
    head = [("fc.weight", torch.ones(2, 2))]
    be.llm.llm_engine.during = lambda: be.update_drafter(head, 1)  # published mid-call (async's trainer)
    be.generate([[1, 2]], [SamplingParams(temperature=0.0)])
    # step 1 received the update; the engine took no reload until the call's last step had run
    assert log == ["step", "step", "step", "reload_drafter"]
    assert be.drafter_version == 1 and be.stats()["drafter_served"] == 0  # the call was drafted by version 0
    be.reset_stats()
    be.generate([[1, 2]], [SamplingParams(temperature=0.0)])
    assert be.stats()["drafter_served"] == 1  # the next call serves the update: it arrived


def test_of_two_updates_queued_in_one_call_the_newest_lands_once(tmp_path, monkeypatch):
    be, log = _backend(tmp_path, monkeypatch)
    head = [("fc.weight", torch.ones(2, 2))]

    def two():
        be.update_drafter(head, 2)
        be.update_drafter(head, 1)  # an older one arriving late is ignored
    be.llm.llm_engine.during = two
    be.generate([[1]], [SamplingParams(temperature=0.0)])
    assert log.count("reload_drafter") == 1 and be.drafter_version == 2
    be.update_drafter(head, 3)  # idle: applied at once
    assert log[-1] == "reload_drafter" and be.drafter_version == 3


def test_an_engine_without_drafter_weights_refuses_with_the_fix(tmp_path, monkeypatch):
    be, _ = _backend(tmp_path, monkeypatch)
    be._drafter_tensors = None
    assert not be.refits_drafter
    with pytest.raises(ValueError, match="set rollout.spec.method to eagle3 or draft_model"):
        be.update_drafter([("fc.weight", torch.ones(1))], 1)
