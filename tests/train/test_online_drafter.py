"""Online drafter training: capture in the policy trainer's forward, learning, exact resume, errors."""
from __future__ import annotations

import copy
import io

import pytest
import torch

from specrl import LLM, SpecConfig
from specrl.spec.weights import drafter_module, drafter_version, load_drafter_weights
from specrl.train.online_drafter import OnlineDrafterConfig, OnlineDrafterTrainer, queries
from tests.helpers import tiny_model
from tests.train.test_trainer import _rollouts, _trainer

METHODS = ["eagle3", "draft_model", "mtp"]


def _captured(method, seed=1):
    """A policy, one RL step's captured micro-batches for `method`'s drafter, and the step's batch."""
    model = tiny_model(seed=seed, layers=3)
    batch = _rollouts(model)
    online = OnlineDrafterTrainer.from_spec(SpecConfig(method=method, draft_model="scratch"), model,
                                            OnlineDrafterConfig())
    pt = _trainer(model, micro=4)
    pt.capture_layers = online.capture_layers
    pt.step(batch)
    return model, pt.captured, batch


def _fresh(method, model, **cfg):
    return OnlineDrafterTrainer.from_spec(SpecConfig(method=method, draft_model="scratch"), model,
                                          OnlineDrafterConfig(lr=1e-2, **cfg))


def test_capture_leaves_the_policy_update_unchanged():
    model = tiny_model(seed=2, layers=3)
    batch = _rollouts(model)
    a, b = copy.deepcopy(model), copy.deepcopy(model)
    ta, tb = _trainer(a, micro=4), _trainer(b, micro=4)
    tb.capture_layers = (0, 2, -1)
    ma, mb = ta.step(batch), tb.step(batch)
    assert ma == mb and ta.captured == []
    for pa, pb in zip(a.parameters(), b.parameters()):
        assert torch.equal(pa, pb)
    # one DrafterBatch per micro-batch, covering every row once, holding what a plain forward gives
    assert sorted(torch.cat([c.rows for c in tb.captured]).tolist()) == list(range(batch.num_rows))
    c = tb.captured[0]
    with torch.no_grad():
        out = model(c.input_ids, hidden_layers=(0, 2))  # the weights before the update
    assert torch.allclose(c.logits, out.logits, atol=1e-6)
    assert torch.allclose(c.hidden[2], out.hidden[1], atol=1e-6)
    assert torch.allclose(c.hidden[-1], out.last_hidden, atol=1e-6)
    assert not c.logits.requires_grad and c.mask.shape == c.input_ids.shape


@pytest.mark.parametrize("method", METHODS)
def test_drafter_learns_the_policy_and_swaps_into_the_engine(method):
    model, captured, batch = _captured(method)
    online = _fresh(method, model, accept_coef=0.5)
    grads = [None if p.grad is None else p.grad.clone() for p in model.parameters()]  # the policy step's
    first = online.step(captured)
    for _ in range(6):
        last = online.step(captured)
    assert last["drafter_kl"] < 0.7 * first["drafter_kl"]
    assert last["drafter_accept_mass"] > first["drafter_accept_mass"]
    assert online.version == last["drafter_version"] == 7
    for p, g in zip(model.parameters(), grads):  # the policy is read, never trained
        assert (p.grad is None and g is None) or torch.equal(p.grad, g)
    llm = LLM(copy.deepcopy(model), spec=SpecConfig(method=method, draft_model="scratch"), max_num_seqs=4)
    load_drafter_weights(llm.drafter, online.named_weights(), online.version)
    assert drafter_version(llm.drafter) == 7
    engine = drafter_module(llm.drafter).state_dict()  # the weights landed, not only the version number
    assert all(torch.equal(engine[k], v.to(engine[k].dtype)) for k, v in online.named_weights())


@pytest.mark.parametrize("method", METHODS)
def test_resume_is_bitwise_exact(method):
    model, captured, batch = _captured(method)
    rewards = torch.linspace(0, 1, batch.num_rows)
    # the micro-batch shuffle and the row sample are part of the state
    cfg = dict(updates_per_step=2, reward_weighting=True, sample_fraction=0.5)
    straight = _fresh(method, model, **cfg)
    for _ in range(3):
        straight.step(captured, rewards)
    first = _fresh(method, model, **cfg)
    for _ in range(2):
        first.step(captured, rewards)
    buf = io.BytesIO()
    torch.save(first.state_dict(), buf)
    resumed = _fresh(method, model, **{**cfg, "seed": 7})  # a different seed: the state must carry it
    resumed.load_state_dict(torch.load(io.BytesIO(buf.getvalue()), weights_only=True))
    resumed.step(captured, rewards)
    assert resumed.version == straight.version == 3
    for (na, a), (nb, b) in zip(straight.named_weights(), resumed.named_weights()):
        assert na == nb and torch.equal(a, b), na


def _loss_and_grads(online, mb, q):
    online.module.zero_grad(set_to_none=True)
    loss, _, _ = online.loss(mb, None, mb.num_tokens, q)
    loss.backward()
    return loss.detach(), [p.grad.clone() for p in online.module.parameters()]


def test_eagle3_unrolls_only_where_a_loss_is_taken_with_the_same_loss_and_gradients():
    model, captured, _ = _captured("eagle3")
    online = _fresh("eagle3", model)
    mb = captured[0]
    picked = online.loss_queries(mb)
    # the loss positions are the response indices, a strict subset of the padded [b, T] grid
    assert picked.index.shape[1] < mb.mask.shape[1]
    everywhere = queries(torch.ones_like(mb.mask, dtype=torch.bool))
    loss_w, grads_w = _loss_and_grads(online, mb, picked)
    loss_t, grads_t = _loss_and_grads(online, mb, everywhere)
    assert torch.allclose(loss_w, loss_t, rtol=1e-5)
    for a, b in zip(grads_w, grads_t):
        assert torch.allclose(a, b, rtol=1e-4, atol=1e-7)


@pytest.mark.parametrize("method", METHODS)
def test_sample_fraction_trains_on_a_share_of_the_rows(method):
    model, captured, _ = _captured(method)
    mb = captured[0]  # 4 rows
    online = _fresh(method, model, sample_fraction=0.5)
    half = online.sample(mb)
    T = half.input_ids.shape[1]
    rows = [mb.rows.tolist().index(r) for r in half.rows.tolist()]  # the kept trajectories, in order
    assert len(rows) == 2 and rows == sorted(rows)
    assert torch.equal(half.input_ids, mb.input_ids[rows, :T]) and torch.equal(half.mask, mb.mask[rows, :T])
    assert mb.mask[rows, T:].sum() == 0  # cut only padding: every loss position of the kept rows stays
    assert len({tuple(online.sample(mb).rows.tolist()) for _ in range(8)}) > 1  # drawn anew each update
    assert online.step(captured)["drafter_loss"] > 0


def test_equal_rewards_weigh_like_no_rewards():
    model, captured, batch = _captured("draft_model")
    plain = _fresh("draft_model", model).step(captured)
    weighted = _fresh("draft_model", model, reward_weighting=True).step(captured, torch.full((batch.num_rows,), 0.3))
    assert weighted["drafter_loss"] == pytest.approx(plain["drafter_loss"], rel=1e-6)
    skewed = _fresh("draft_model", model, reward_weighting=True).step(captured, torch.linspace(0, 1, batch.num_rows))
    assert skewed["drafter_loss"] != pytest.approx(plain["drafter_loss"], rel=1e-3)


@pytest.mark.parametrize("spec", [SpecConfig(method="ngram"), SpecConfig(method="suffix"),
                                  SpecConfig(method="auto", auto_methods=("suffix",))])
def test_model_free_methods_cannot_train_online(spec):
    with pytest.raises(ValueError, match="online drafter training needs a model drafter.*has no weights"):
        OnlineDrafterTrainer.from_spec(spec, tiny_model(), OnlineDrafterConfig())


def test_scratch_needs_a_model_drafter():
    with pytest.raises(ValueError, match="draft_model='scratch' needs a model drafter, but method='ngram'"):
        LLM(tiny_model(), spec=SpecConfig(method="ngram", draft_model="scratch"))
    with pytest.raises(ValueError, match="auto over 'suffix'"):
        LLM(tiny_model(), spec=SpecConfig(method="auto", draft_model="scratch"))


def test_no_capture_is_a_clear_error():
    online = _fresh("eagle3", tiny_model(layers=3))
    with pytest.raises(ValueError, match="set PolicyTrainer.capture_layers"):
        online.step([])


def test_config_validates_itself():
    with pytest.raises(ValueError, match="kl_coef=0.0, accept_coef=0.0"):
        OnlineDrafterConfig(kl_coef=0.0)
    with pytest.raises(ValueError, match="temperature=0"):
        OnlineDrafterConfig(temperature=0)
    with pytest.raises(ValueError, match="sample_fraction=0"):
        OnlineDrafterConfig(sample_fraction=0)


def test_from_spec_loads_a_trained_head(tmp_path):
    from specrl.spec.eagle3_head import Eagle3Config, init_head, save_head
    model = tiny_model(layers=3)
    head = init_head(Eagle3Config.for_target(model.config), seed=4)
    save_head(head, tmp_path / "h")
    online = OnlineDrafterTrainer.from_spec(SpecConfig(method="eagle3", draft_model=str(tmp_path / "h")), model,
                                            OnlineDrafterConfig())
    assert online.capture_layers == (1, 2)  # default_layers(3) = (1, 2, 2), each captured once
    for (name, got), (_, want) in zip(online.named_weights(), head.state_dict().items()):
        assert torch.equal(got, want), name


@pytest.mark.parametrize("method", METHODS)
def test_saved_drafter_loads_into_an_engine(method, tmp_path):
    model = tiny_model(layers=3)
    online = _fresh(method, model)
    online.save_drafter(tmp_path / "drafter")
    llm = LLM(copy.deepcopy(model), spec=SpecConfig(method=method, draft_model=str(tmp_path / "drafter")))
    from specrl.spec.weights import drafter_module
    engine = drafter_module(llm.drafter).state_dict()
    for name, w in online.named_weights():
        assert torch.equal(engine[name], w), name
