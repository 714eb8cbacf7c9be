"""Online drafter training: capture in the policy trainer's forward, learning, exact resume, errors."""
from __future__ import annotations

import copy
import io

import pytest
import torch

from specrl import LLM, SpecConfig
from specrl.drafters.training.capture import Capture
from specrl.drafters.eagle3 import train as eagle3_train
from specrl.drafters.training.online import OnlineDrafterTrainer
from specrl.drafters.weights import drafter_module, drafter_version, load_drafter_weights
from specrl.optim import OptimSettings
from specrl.config.rollout import DrafterConfig
from tests.helpers import tiny_model
from tests.trainer.test_trainer import _rollouts, _trainer

METHODS = ["eagle3", "draft_model", "mtp"]


def _captured(method, seed=1, online=None, micro=4):
    """A policy, one RL step's captured micro-batches for `method`'s drafter, and the step's batch; with
    `online`, the rows it picks at capture time."""
    model = tiny_model(seed=seed, layers=3)
    batch = _rollouts(model)
    online = online or OnlineDrafterTrainer.from_spec(SpecConfig(method=method, draft_model="scratch"), model,
                                                      DrafterConfig(sample_fraction=1.0))
    pt = _trainer(model, micro=micro)
    pt.forward_hook = capture = online.forward_hook()
    pt.step(batch)
    return model, capture.batches, batch


def _fresh(method, model, seed=0, group_size=1, **cfg):
    return OnlineDrafterTrainer.from_spec(SpecConfig(method=method, draft_model="scratch"), model,
                                          DrafterConfig(optim=OptimSettings(lr=1e-2), **{"sample_fraction": 1.0, **cfg}),
                                          seed=seed, group_size=group_size)


def _step(online, captured, rewards=None):
    """One drafter step on the rows it would have kept at capture time (pick_rows draws from its generator)."""
    kept = [mb if (keep := online.pick_rows(len(mb.rows))) is None else mb.select(keep) for mb in captured]
    return online.step(kept, rewards)


def test_capture_leaves_the_policy_update_unchanged():
    model = tiny_model(seed=2, layers=3)
    batch = _rollouts(model)
    a, b = copy.deepcopy(model), copy.deepcopy(model)
    ta, tb = _trainer(a, micro=4), _trainer(b, micro=4)
    tb.forward_hook = capture = Capture((0, 2, -1))
    ma, mb = ta.step(batch), tb.step(batch)
    assert ma == mb and ta.forward_hook is None
    for pa, pb in zip(a.parameters(), b.parameters()):
        assert torch.equal(pa, pb)
    # one DrafterBatch per micro-batch, covering every row once, holding what a plain forward gives
    assert sorted(torch.cat([c.rows for c in capture.batches]).tolist()) == list(range(batch.num_rows))
    c = capture.batches[0]
    with torch.no_grad():
        out = model(c.input_ids, hidden_layers=(0, 2))  # the weights before the update
    # each row's own positions (a packed forward leaves zeros at padding, which no drafter loss reads)
    real = torch.arange(c.input_ids.shape[1])[None] < batch.lengths[c.rows][:, None]  # [b, T]
    assert torch.allclose(c.logits[real], out.logits[real], atol=1e-5)
    assert torch.allclose(c.hidden[2][real], out.hidden[1][real], atol=1e-5)
    assert torch.allclose(c.hidden[-1][real], out.last_hidden[real], atol=1e-5)
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
    # the row sample is part of the state
    cfg = dict(updates_per_step=2, reward_weighting=True, sample_fraction=0.5, window=2)  # the window too
    straight = _fresh(method, model, **cfg)
    for _ in range(3):
        _step(straight, captured, rewards)
    first = _fresh(method, model, **cfg)
    for _ in range(2):
        _step(first, captured, rewards)
    buf = io.BytesIO()
    torch.save(first.state_dict(), buf)
    resumed = _fresh(method, model, **{**cfg, "seed": 7})  # a different seed: the state must carry it
    resumed.load_state_dict(torch.load(io.BytesIO(buf.getvalue()), weights_only=True))
    _step(resumed, captured, rewards)
    assert resumed.version == straight.version == 3
    for (na, a), (nb, b) in zip(straight.named_weights(), resumed.named_weights()):
        assert na == nb and torch.equal(a, b), na


def _loss_and_grads(online, mb):
    online.module.zero_grad(set_to_none=True)
    loss, _, _ = online.loss(mb, None, mb.num_tokens)
    loss.backward()
    return loss.detach(), [p.grad.clone() for p in online.module.parameters()]


def test_eagle3_unrolls_only_where_a_loss_is_taken_with_the_same_loss_and_gradients(monkeypatch):
    model, captured, _ = _captured("eagle3")
    online = _fresh("eagle3", model)
    mb = captured[0]
    picked = eagle3_train.loss_queries(mb.mask, online.cfg.ttt_steps)
    # the loss positions are the response indices, a strict subset of the padded [b, T] grid
    assert picked.index.shape[1] < mb.mask.shape[1]
    loss_w, grads_w = _loss_and_grads(online, mb)
    # the same loss with every index's chain unrolled
    monkeypatch.setattr(eagle3_train, "loss_queries",
                        lambda mask, steps: eagle3_train.queries(torch.ones_like(mask, dtype=torch.bool)))
    loss_t, grads_t = _loss_and_grads(online, mb)
    assert torch.allclose(loss_w, loss_t, rtol=1e-5)
    for a, b in zip(grads_w, grads_t):
        assert torch.allclose(a, b, rtol=1e-4, atol=1e-7)


@pytest.mark.parametrize("method", METHODS)
def test_sample_fraction_keeps_a_share_of_the_rows_at_capture(method):
    model, full, _ = _captured(method)
    online = _fresh(method, model, sample_fraction=0.5)
    _, kept, _ = _captured(method, online=online)
    assert len(kept) == len(full)
    assert max(len(mb.rows) for mb in full) == 4
    for mb, half in zip(full, kept):  # micro-batches of up to 4 rows
        T = half.input_ids.shape[1]
        rows = [mb.rows.tolist().index(r) for r in half.rows.tolist()]  # the kept trajectories, in draw order
        assert len(rows) == len(set(rows)) == max(1, round(len(mb.rows) * 0.5))
        assert torch.equal(half.input_ids, mb.input_ids[rows, :T]) and torch.equal(half.mask, mb.mask[rows, :T])
        assert torch.allclose(half.logits, mb.logits[rows, :T], atol=1e-6)
        for i, h in half.hidden.items():
            assert torch.allclose(h, mb.hidden[i][rows, :T], atol=1e-6)
        assert mb.mask[rows, T:].sum() == 0  # cut only padding: every loss position of the kept rows stays
        assert half.logits.shape[0] == len(rows)  # only the kept rows' logits are held
    assert len({tuple(online.pick_rows(4).tolist()) for _ in range(8)}) > 1  # drawn anew each micro-batch
    assert online.step(kept)["drafter_loss"] > 0


def test_micro_batches_of_one_row_keep_the_share_not_every_row_and_leave_rows_to_probe():
    # long rows under a token cap come one to a micro-batch: the share is of the step's rows, carried over
    model = tiny_model(seed=1, layers=3)
    online = _fresh("eagle3", model, sample_fraction=0.25, probe_fraction=0.25)
    batch = _rollouts(model)
    pt = _trainer(model, micro=1)
    pt.forward_hook = capture = online.forward_hook()
    pt.step(batch)
    n, share = batch.num_rows, 0.25
    kept = torch.cat([mb.rows for mb in capture.batches]).tolist()
    probed = torch.cat([mb.rows for mb in capture.probe]).tolist()
    assert n >= 8 and all(len(mb.rows) == 1 for mb in capture.batches + capture.probe)
    assert abs(len(kept) - n * share) <= 1 and abs(len(probed) - n * share) <= 1  # not all n rows, and a probe
    assert not set(kept) & set(probed) and len(set(kept)) == len(kept)
    assert online.step(capture.batches, probe=capture.probe)["drafter_window_rows"] == len(kept)
    pt.forward_hook = again = online.forward_hook()  # the next step's shares start afresh
    pt.step(batch)
    assert abs(sum(len(mb.rows) for mb in again.batches) - n * share) <= 1


def test_updates_split_the_kept_rows():
    model, captured, _ = _captured("draft_model")
    one, two = _fresh("draft_model", model), _fresh("draft_model", model, updates_per_step=2)
    one.step(captured)
    two.step(captured)
    steps = lambda t: {int(s["step"]) for s in t.optimizer.state_dict()["state"].values()}  # noqa: E731
    assert steps(one) == {1} and steps(two) == {2}
    assert one.version == two.version == 1
    # each of the two updates trained on its own half of every micro-batch's rows
    seen = []
    two._update = lambda share, sums: seen.append(sorted(r for mb, _ in share for r in mb.rows.tolist()))
    two.step(captured)
    assert len(seen) == 2 and not set(seen[0]) & set(seen[1])
    assert sorted(seen[0] + seen[1]) == sorted(torch.cat([c.rows for c in captured]).tolist())


def test_the_replay_window_trains_on_the_last_steps_captures():
    model, captured, _ = _captured("draft_model")
    rows = sum(len(mb.rows) for mb in captured)
    online = _fresh("draft_model", model, window=2)
    seen = []
    update = online._update
    online._update = lambda share, sums: (seen.append(len(share)), update(share, sums))
    assert [online.step(captured)["drafter_window_rows"] for _ in range(3)] == [rows, 2 * rows, 2 * rows]
    assert seen == [len(captured), 2 * len(captured), 2 * len(captured)]  # the oldest step left the window


def test_equal_rewards_weigh_like_no_rewards():
    model, captured, batch = _captured("draft_model")
    plain = _fresh("draft_model", model).step(captured)
    weighted = _fresh("draft_model", model, reward_weighting=True).step(captured, torch.full((batch.num_rows,), 0.3))
    assert weighted["drafter_loss"] == pytest.approx(plain["drafter_loss"], rel=1e-6)
    skewed = _fresh("draft_model", model, group_size=batch.num_rows, reward_weighting=True).step(
        captured, torch.linspace(0, 1, batch.num_rows))
    assert skewed["drafter_loss"] != pytest.approx(plain["drafter_loss"], rel=1e-3)


@pytest.mark.parametrize("spec", [SpecConfig(method="ngram"), SpecConfig(method="suffix"),
                                  SpecConfig(method="auto", drafters=("suffix", "ngram"))])
def test_model_free_methods_cannot_train_online(spec):
    with pytest.raises(ValueError, match="online drafter training needs a model drafter.*has no weights"):
        OnlineDrafterTrainer.from_spec(spec, tiny_model(), DrafterConfig())


def test_scratch_needs_a_model_drafter():
    with pytest.raises(ValueError, match="draft_model='scratch' needs a model drafter, but method='ngram'"):
        LLM(tiny_model(), spec=SpecConfig(method="ngram", draft_model="scratch"))
    with pytest.raises(ValueError, match=r"auto over \['suffix'\]"):
        LLM(tiny_model(), spec=SpecConfig(method="auto", drafters=("suffix",), draft_model="scratch"))


def test_no_capture_is_a_clear_error():
    online = _fresh("eagle3", tiny_model(layers=3))
    with pytest.raises(ValueError, match="set PolicyTrainer.forward_hook"):
        online.step([])


def test_config_is_checked_by_the_trainer():
    spec, model = SpecConfig(method="eagle3", draft_model="scratch"), tiny_model(layers=3)
    with pytest.raises(ValueError, match="kl_coef=0.0 is invalid"):
        OnlineDrafterTrainer.from_spec(spec, model, DrafterConfig(kl_coef=0.0))
    with pytest.raises(ValueError, match="temperature=0"):
        OnlineDrafterTrainer.from_spec(spec, model, DrafterConfig(), temperature=0)
    with pytest.raises(ValueError, match="sample_fraction=0"):
        OnlineDrafterTrainer.from_spec(spec, model, DrafterConfig(sample_fraction=0))


def test_from_spec_loads_a_trained_head(tmp_path):
    from specrl.drafters.eagle3.head import Eagle3Config, init_head, save_head
    model = tiny_model(layers=3)
    head = init_head(Eagle3Config.for_target(model.config), seed=4)
    save_head(head, tmp_path / "h")
    online = OnlineDrafterTrainer.from_spec(SpecConfig(method="eagle3", draft_model=str(tmp_path / "h")), model,
                                            DrafterConfig())
    assert online.capture_layers == (1, 2)  # default_layers(3) = (1, 2, 2), each captured once
    for (name, got), (_, want) in zip(online.named_weights(), head.state_dict().items()):
        assert torch.equal(got, want), name


@pytest.mark.parametrize("method", METHODS)
def test_saved_drafter_loads_into_an_engine(method, tmp_path):
    model = tiny_model(layers=3)
    online = _fresh(method, model)
    online.save_drafter(tmp_path / "drafter")
    llm = LLM(copy.deepcopy(model), spec=SpecConfig(method=method, draft_model=str(tmp_path / "drafter")))
    from specrl.drafters.weights import drafter_module
    engine = drafter_module(llm.drafter).state_dict()
    for name, w in online.named_weights():
        assert torch.equal(engine[name], w), name
