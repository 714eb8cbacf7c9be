"""The drift probe: expected accepted tokens by hand, the paired drafters on the same rows, KL to pi_0."""
from __future__ import annotations

import copy

import pytest
import torch

from specrl import SpecConfig
from specrl.config.rollout import DrafterConfig
from specrl.drafters.training.online import OnlineDrafterTrainer
from specrl.drafters.training.probe import chain, expected_accepted, kl_to
from specrl.optim import OptimSettings
from tests.helpers import tiny_model
from tests.trainer.test_trainer import _rollouts, _trainer

K = 3


def _online(method, model, module=None, pi0=None, **cfg):
    d = DrafterConfig(optim=OptimSettings(lr=1e-2), **{"sample_fraction": 0.5, "probe_fraction": 0.5, **cfg})
    if module is not None:
        return OnlineDrafterTrainer(module, model, d, k=K, pi0=pi0)
    return OnlineDrafterTrainer.from_spec(SpecConfig(method=method, draft_model="scratch", num_speculative_tokens=K),
                                          model, d, pi0=pi0)


def _capture(model, online):
    """One policy update's captured training and probe rows."""
    batch = _rollouts(model)
    pt = _trainer(copy.deepcopy(model), micro=4)  # the update must not move `model` (the probe's pi_0 tests)
    pt.forward_hook = capture = online.forward_hook()
    pt.step(batch)
    return capture, batch


def test_expected_accepted_by_hand():
    # chain a = [0.5, 0.5, 1.0]: 0.5 + 0.25 + 0.25 = 1.0; a = [1, 1, 1]: k = 3; a = [0, 1, 1]: nothing accepted
    alpha = torch.tensor([[[0.5, 0.5, 1.0], [1.0, 1.0, 1.0], [0.0, 1.0, 1.0]]])  # [1, 3, 3]
    valid = torch.tensor([[True, True, True]])
    assert expected_accepted(alpha, valid) == (pytest.approx(4.0), 3)
    assert expected_accepted(alpha, torch.tensor([[True, False, False]])) == (pytest.approx(1.0), 1)


def test_chain_teacher_forces_the_missing_depths():
    # one term (a draft model): depth i at index t is the term's mass at t + i; q = p everywhere but index 1
    p = torch.tensor([[[5.0, 0.0], [5.0, 0.0], [5.0, 0.0], [5.0, 0.0]]])  # [1, 4, 2]
    q = p.clone()
    q[0, 1] = torch.tensor([0.0, 5.0])
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0]])
    alpha, valid = chain([(1.0, q, p, mask)], 2, 1.0, None)
    assert valid.tolist() == [[True, True, False, False]]  # both drafted tokens inside the response
    a1 = torch.minimum(torch.softmax(p[0, 1], -1), torch.softmax(q[0, 1], -1)).sum()
    assert alpha[0, 0].tolist() == pytest.approx([1.0, float(a1)], abs=1e-6)
    assert alpha[0, 1].tolist() == pytest.approx([float(a1), 1.0], abs=1e-6)


@pytest.mark.parametrize("method", ["eagle3", "draft_model", "mtp"])
def test_a_drafter_equal_to_the_frozen_copy_scores_the_same(method):
    model = tiny_model(seed=1, layers=3)
    online = _online(method, model)
    capture, _ = _capture(model, online)
    assert capture.probe, "no probe rows captured"
    kept = {r for mb in capture.batches for r in mb.rows.tolist()}
    probed = {r for mb in capture.probe for r in mb.rows.tolist()}
    assert not kept & probed  # the probe never scores a drafter on rows it trains on
    before = online.probe.before(capture.probe)
    assert before["probe_accept_online"] == before["probe_accept_frozen"]  # exactly: the same module
    assert 0 <= before["probe_accept_online"] <= K
    metrics = online.step(capture.batches, None, capture.probe)
    assert metrics["probe_accept_frozen"] == before["probe_accept_frozen"]
    assert metrics["probe_accept_newest"] != metrics["probe_accept_online"]  # the update moved the drafter
    assert metrics["probe_lag"] == metrics["probe_accept_newest"] - metrics["probe_accept_online"]
    assert online.probe.accept(online.probe.frozen, capture.probe) == before["probe_accept_frozen"]  # still step 0


def test_a_drafter_equal_to_the_policy_accepts_all_k():
    model = tiny_model(seed=3, layers=2)
    online = _online("draft_model", model, module=copy.deepcopy(model))
    capture, _ = _capture(model, online)
    assert online.probe.accept(online.module, capture.probe) == pytest.approx(K, abs=1e-4)


def test_kl_of_the_policy_to_itself_is_zero_and_grows_as_it_moves():
    model = tiny_model(seed=4, layers=2)
    online = _online("draft_model", model, pi0=copy.deepcopy(model))
    capture, _ = _capture(model, online)
    assert online.probe.kl_pi0(capture.probe) == pytest.approx(0.0, abs=1e-5)
    moved = copy.deepcopy(model)
    with torch.no_grad():
        moved.lm_head.weight.add_(0.5 * torch.randn_like(moved.lm_head.weight))
    assert _online("draft_model", model, pi0=moved).probe.kl_pi0(capture.probe) > 1e-3
    # by hand: p = (1, 0) against p_ref = (1/2, 1/2) at the limit of large logits: KL = log 2
    logits, ref = torch.tensor([[[30.0, 0.0]]]), torch.tensor([[[0.0, 0.0]]])
    total, count = kl_to(logits, ref, torch.ones(1, 1), 1.0)
    assert (total, count) == (pytest.approx(0.693147, abs=1e-5), 1.0)


def test_probe_state_resumes_the_step0_drafter():
    model = tiny_model(seed=1, layers=3)
    online = _online("eagle3", model)
    capture, _ = _capture(model, online)
    online.step(capture.batches, None, capture.probe)
    state = online.state_dict()
    resumed = _online("eagle3", tiny_model(seed=9, layers=3))  # another start: the state carries the step-0 head
    resumed.load_state_dict(state)
    for (na, a), (nb, b) in zip(online.probe.frozen.state_dict().items(), resumed.probe.frozen.state_dict().items()):
        assert na == nb and torch.equal(a, b), na
