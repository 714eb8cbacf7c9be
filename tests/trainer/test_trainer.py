"""PolicyTrainer: batch layout, exact-rollout audit, gradient accumulation, NaN guard, MTP, weight sync."""
from __future__ import annotations

import copy

import pytest
import torch

from specrl import LLM, SamplingParams, SpecConfig
from specrl.config import ConfigError
from specrl.rl import POLICY_LOSSES, clipped_policy_loss
from specrl.config.run import AlgorithmConfig, OptimConfig
from specrl.trainer.trainer import NonFiniteLossError, PolicyTrainer, collate
from specrl.pipeline.local import LocalBackend
from tests.helpers import tiny_model, weights_equal


def _trainer(model, micro=32, updates=1, lr=1e-2, **algo):
    return PolicyTrainer(model, AlgorithmConfig(updates_per_step=updates, **algo),
                         OptimConfig(lr=lr, warmup_steps=0, micro_batch_size=micro), total_steps=10,
                         temperature=1.0, norm_len=8)


def _rollouts(model, spec=None, n=3):
    llm = LLM(copy.deepcopy(model), spec=spec, max_num_seqs=16)
    prompts = [[3, 4, 5], [6, 7], [8, 9, 10, 11]]
    outs = llm.generate(prompts, SamplingParams(n=n, temperature=1.0, max_tokens=8, seed=1))
    samples = [(r.prompt_token_ids, c) for r in outs for c in r.outputs]
    adv = torch.linspace(-1, 1, len(samples)) + 0.1  # [N] any advantages will do, none zero (no row skipped)
    return collate([p for p, _ in samples], [c.token_ids for _, c in samples], [c.logprobs for _, c in samples],
                   adv, pad_id=0)


def test_collate_layout():
    # prompt [5, 6] + response [7, 8, 1]: inputs 5 6 7 8 predict 6 7 8 1; the last three targets are the response
    b = collate([[5, 6], [9]], [[7, 8, 1], [2]], [[-0.1, -0.2, -0.3], [-0.5]], torch.tensor([1.0, -1.0]), pad_id=0)
    assert b.input_ids.tolist() == [[5, 6, 7, 8], [9, 0, 0, 0]]
    assert b.targets.tolist() == [[6, 7, 8, 1], [2, 0, 0, 0]]
    assert b.mask.tolist() == [[0, 1, 1, 1], [1, 0, 0, 0]]
    assert b.gen_logp[0].tolist() == pytest.approx([0, -0.1, -0.2, -0.3])
    assert b.lengths.tolist() == [4, 1]
    sub = b.rows(torch.tensor([1]))
    assert sub.input_ids.tolist() == [[9]]  # a sub-batch is cut to its own longest row


@pytest.mark.parametrize("spec", [None, SpecConfig(method="ngram", num_speculative_tokens=3)])
def test_logprob_diff_is_zero_in_fp32(spec):
    model = tiny_model(seed=1)
    m = _trainer(model).step(_rollouts(model, spec))
    assert m["logprob_diff"] < 1e-5 and m["logprob_diff_max"] < 1e-4
    assert m["grad_norm"] > 0 and m["clip_frac"] == 0.0  # a single update starts at ratio 1: nothing clipped


def test_micro_batches_accumulate_to_the_full_batch_update():
    model = tiny_model(seed=2)
    batch = _rollouts(model)
    a, b = copy.deepcopy(model), copy.deepcopy(model)
    ma, mb = _trainer(a, micro=2).step(batch), _trainer(b, micro=100).step(batch)
    assert ma["loss"] == pytest.approx(mb["loss"], abs=1e-6)
    assert ma["grad_norm"] == pytest.approx(mb["grad_norm"], rel=1e-5)
    for pa, pb in zip(a.parameters(), b.parameters()):  # the accumulated gradients (Adam would amplify noise)
        torch.testing.assert_close(pa.grad, pb.grad, atol=1e-6, rtol=1e-4)


def test_several_updates_per_step_recompute_old_logprobs_and_clip():
    model = tiny_model(seed=3)
    m = _trainer(model, updates=3, lr=5e-2, clip_low=0.01, clip_high=0.01).step(_rollouts(model, n=4))
    assert m["logprob_diff"] < 1e-5  # pi_old came from the separate no-grad pass, before any update
    assert m["clip_frac"] > 0  # later mini-batches see a moved policy


def test_nan_loss_raises_and_leaves_the_weights_alone(monkeypatch):
    model = tiny_model(seed=4)
    before = copy.deepcopy(model)
    monkeypatch.setitem(POLICY_LOSSES._fns, "nan_test",
                        lambda *a, **k: (out := clipped_policy_loss(*a, **k))._replace(loss=out.loss * float("nan")))
    with pytest.raises(NonFiniteLossError, match="not finite"):
        _trainer(model, policy_loss="nan_test").step(_rollouts(model))
    assert weights_equal(model, before)


def test_policy_loss_is_looked_up_by_name(monkeypatch):
    """The default "clipped" is `clipped_policy_loss` itself: a registered spy that calls it gives the same
    step bit for bit, and it is the function the trainer calls (with the config's clip range)."""
    calls = []

    def spy(logp, logp_old, advantages, clip_low, clip_high, weights):
        calls.append((clip_low, clip_high))
        return clipped_policy_loss(logp, logp_old, advantages, clip_low, clip_high, weights)

    monkeypatch.setitem(POLICY_LOSSES._fns, "spy_test", spy)
    assert POLICY_LOSSES.get(AlgorithmConfig().policy_loss) is clipped_policy_loss
    models = [tiny_model(seed=6), tiny_model(seed=6)]
    batch = _rollouts(models[0])
    m_default = _trainer(models[0]).step(batch)
    m_spy = _trainer(models[1], policy_loss="spy_test").step(batch)
    assert calls and set(calls) == {(0.2, 0.28)}
    assert m_spy == m_default
    assert weights_equal(models[0], models[1])


def test_unknown_policy_loss_lists_the_valid_names():
    with pytest.raises(ConfigError, match=r"policy_loss.*'nope'.*clipped"):
        AlgorithmConfig(policy_loss="nope").validate()
    with pytest.raises(ValueError, match="unknown policy loss 'nope'; valid names: clipped"):
        _trainer(tiny_model(seed=1), policy_loss="nope")


def test_kl_penalty_uses_the_frozen_initial_policy():
    model = tiny_model(seed=5)
    tr = _trainer(model, kl_coef=0.1)
    batch = _rollouts(model)
    assert tr.step(batch)["kl"] == pytest.approx(0.0, abs=1e-6)  # policy == reference before the first update
    assert tr.step(batch)["kl"] > 0


def test_mtp_modules_train_with_the_policy_without_changing_it():
    model = tiny_model(seed=6, num_mtp_modules=1)
    batch = _rollouts(model)._replace(advantages=torch.zeros(9))  # zero advantages: no policy gradient
    before = copy.deepcopy(model)
    m = _trainer(model).step(batch)
    assert m["mtp_loss"] > 0
    changed = {k for k, v in model.state_dict().items() if not torch.equal(v, before.state_dict()[k])}
    assert changed and all(k.startswith("mtp.") for k in changed)


def test_weight_sync_copies_into_a_separate_engine_model():
    policy = tiny_model(seed=7, num_mtp_modules=1)
    llm = LLM(copy.deepcopy(policy), max_num_seqs=4)
    backend = LocalBackend(llm)
    with torch.no_grad():
        for p in policy.parameters():
            p.add_(0.01)
    assert not weights_equal(policy, llm.model)  # training never touches the engine's weights by itself
    backend.update_weights(policy.state_dict().items(), version=3)
    assert weights_equal(policy, llm.model)  # MTP modules included
    assert backend.weights_version == 3
    assert llm.model.model.embed_tokens.weight.data_ptr() != policy.model.embed_tokens.weight.data_ptr()


def test_off_policy_tokens_are_weighted_by_the_truncated_importance_ratio():
    """Rollouts sampled by weights twice as likely (pi_gen = 2 pi_old) get half the loss and half the
    gradient; a cap below the ratio binds instead."""
    model = tiny_model(seed=6)
    on = _rollouts(model)
    exact = _trainer(copy.deepcopy(model)).score(model, on)  # [N, T] pi_old of every target
    half = on._replace(gen_logp=(exact + torch.log(torch.tensor(2.0))) * on.mask)
    double = on._replace(gen_logp=(exact - torch.log(torch.tensor(2.0))) * on.mask)
    base = _trainer(copy.deepcopy(model)).step(on._replace(gen_logp=exact * on.mask), is_cap=2.0)
    m_half = _trainer(copy.deepcopy(model)).step(half, is_cap=2.0)
    m_cap = _trainer(copy.deepcopy(model)).step(double, is_cap=1.5)
    assert base["is_ratio"] == pytest.approx(1.0, abs=1e-5)
    assert m_half["is_ratio"] == pytest.approx(0.5, rel=1e-5) and m_cap["is_ratio"] == pytest.approx(1.5, rel=1e-5)
    assert m_half["loss"] == pytest.approx(0.5 * base["loss"], rel=1e-4)
    assert m_half["grad_norm"] == pytest.approx(0.5 * base["grad_norm"], rel=1e-4)
    assert m_cap["loss"] == pytest.approx(1.5 * base["loss"], rel=1e-4)
    assert "is_ratio" not in _trainer(copy.deepcopy(model)).step(on)  # on-policy: no weights at all


def test_token_capped_micro_batches_and_activation_checkpointing_give_the_same_update():
    model = tiny_model(seed=2)
    batch = _rollouts(model)
    plain, capped = copy.deepcopy(model), copy.deepcopy(model)
    t = PolicyTrainer(capped, AlgorithmConfig(), OptimConfig(lr=1e-2, warmup_steps=0, micro_batch_size=100,
                                                           micro_batch_tokens=20, activation_checkpointing=True),
                      total_steps=10, temperature=1.0, norm_len=8)
    chunks = t.micro_batches(torch.arange(batch.num_rows), batch.lengths)
    assert sorted(torch.cat(chunks).tolist()) == list(range(batch.num_rows)) and len(chunks) > 1
    for mb in chunks:  # packed: within the token cap in real tokens
        assert int(batch.lengths[mb].sum()) <= 20
    calls = {"plain": 0, "capped": 0}
    for key, m in (("plain", plain), ("capped", capped)):  # runs of one decoder layer (hooks skip the recompute)
        layer = m.model.layers[0]

        def counted(*args, key=key, forward=layer.forward, **kw):
            calls[key] += 1
            return forward(*args, **kw)
        layer.forward = counted
    ma, mb = _trainer(plain, micro=100).step(batch), t.step(batch)
    # one forward per micro-batch, and with checkpointing one more in each backward (the recompute)
    assert calls["plain"] == 1 and calls["capped"] == 2 * len(chunks)
    assert ma["loss"] == pytest.approx(mb["loss"], abs=1e-6)
    assert ma["grad_norm"] == pytest.approx(mb["grad_norm"], rel=1e-5)
    for (name, a), b in zip(plain.named_parameters(), capped.parameters()):  # the gradients the update used
        assert torch.allclose(a.grad, b.grad, rtol=1e-4, atol=1e-7), name


def test_micro_batch_tokens_default_comes_from_the_activation_budget(monkeypatch):
    from specrl.trainer import trainer as trainer_mod
    from specrl.trainer.trainer import activation_bytes_per_token
    model = tiny_model(seed=2)
    per_token = activation_bytes_per_token(model.config)
    assert activation_bytes_per_token(model.config, checkpointing=True) < per_token
    vocab_rows = 12 * model.config.vocab_size  # logits, log-softmax and gradient of a token, in fp32
    t = PolicyTrainer(model, AlgorithmConfig(), OptimConfig(activation_memory=40 * (per_token + vocab_rows)),
                      total_steps=1, temperature=1.0, norm_len=8)
    assert t.token_cap == 40  # one lm-head chunk: every token's vocabulary rows count
    # a chunked lm-head: its rows count once per chunk (10 tokens), the decoder's per token
    monkeypatch.setattr(trainer_mod, "HEAD_CHUNK_ELEMENTS", 10 * model.config.vocab_size)
    assert trainer_mod.micro_batch_token_cap(model.config, 10 * vocab_rows + 300 * per_token, False) == 300
    # the MTP loss's logits live for every token: 3 more rows per token and depth
    budget = 10 * vocab_rows + 300 * (per_token + 2 * vocab_rows)
    assert trainer_mod.micro_batch_token_cap(model.config, budget, False, mtp_depths=2) == 300
    batch = _rollouts(model)
    for mb in t.micro_batches(torch.arange(batch.num_rows), batch.lengths):
        assert int(batch.lengths[mb].sum()) <= 40
    with pytest.raises(ConfigError, match="activation_memory"):
        OptimConfig(activation_memory="lots").validate()


def test_the_default_activation_budget_follows_the_training_state():
    from specrl.trainer.trainer import activation_budget, training_state_bytes
    GiB, MiB = 2 ** 30, 2 ** 20
    model = tiny_model(seed=2)
    assert training_state_bytes(model) == 4 * 4 * sum(p.numel() for p in model.parameters())  # fp32, 4 copies
    assert activation_budget(None, 176 * MiB) == 2 * GiB - 176 * MiB  # the embedded policy: about 2 GiB
    assert activation_budget(None, int(2.2 * GiB)) == 512 * MiB  # a 135M model: the floor
    assert activation_budget("3GiB", int(2.2 * GiB)) == 3 * GiB  # an explicit budget is the user's


def test_chunked_lm_head_gives_the_same_update_and_metrics(monkeypatch):
    """With chunks of 5 tokens (the lm-head under checkpointing, never the whole [b, T, V] logits) the loss,
    entropy, logprob audit and gradients equal one plain chunk's."""
    from specrl.trainer import trainer as trainer_mod
    model = tiny_model(seed=2)
    batch = _rollouts(model)
    whole, chunked = copy.deepcopy(model), copy.deepcopy(model)
    calls = []
    real = trainer_mod.checkpoint
    monkeypatch.setattr(trainer_mod, "checkpoint", lambda *a, **kw: calls.append(1) or real(*a, **kw))
    ma = _trainer(whole, micro=100).step(batch)
    assert not calls  # the tiny vocabulary fits one chunk: the plain path
    monkeypatch.setattr(trainer_mod, "HEAD_CHUNK_ELEMENTS", 5 * model.config.vocab_size)
    mb = _trainer(chunked, micro=100).step(batch)
    # every chunk of the response tokens checkpointed: the head never runs at a prompt position
    assert len(calls) == -(-int(batch.mask.sum()) // 5)
    for key in ("loss", "entropy", "logprob_diff", "grad_norm"):
        assert mb[key] == pytest.approx(ma[key], rel=1e-5, abs=1e-7), key
    for (name, a), b in zip(whole.named_parameters(), chunked.parameters()):
        assert torch.allclose(a.grad, b.grad, rtol=1e-4, atol=1e-7), name


@pytest.mark.parametrize("chunk_tokens", [None, 3])
def test_the_lm_head_runs_only_where_the_loss_reads(monkeypatch, chunk_tokens):
    """head_logprobs at flat positions `at`: the same logprobs, entropies and gradients there as the head over
    every position, 0 elsewhere, and the head's matmul sees those rows alone (plain and chunked)."""
    import contextlib
    from specrl.trainer import trainer as trainer_mod
    torch.manual_seed(0)
    head = torch.nn.Linear(8, 50, bias=False)
    hidden = torch.randn(2, 6, 8, requires_grad=True)  # [b, T, D]
    targets = torch.randint(0, 50, (2, 6))
    at = torch.tensor([1, 2, 7, 10, 11])
    if chunk_tokens:
        monkeypatch.setattr(trainer_mod, "HEAD_CHUNK_ELEMENTS", chunk_tokens * 50)
    full, ent_full = trainer_mod.head_logprobs(head, hidden, targets, 0.7, contextlib.nullcontext)
    full.flatten()[at].sum().backward()
    want_h, want_w = hidden.grad.clone(), head.weight.grad.clone()
    hidden.grad, head.weight.grad = None, None
    rows = []
    head.register_forward_hook(lambda m, inp, out: rows.append(inp[0].shape[0]))
    part, ent_part = trainer_mod.head_logprobs(head, hidden, targets, 0.7, contextlib.nullcontext, at=at)
    assert sum(rows) == len(at)
    off = torch.ones(12, dtype=torch.bool)
    off[at] = False
    assert torch.equal(part.flatten()[off], torch.zeros(7)) and torch.equal(ent_part.flatten()[off], torch.zeros(7))
    assert torch.allclose(part.flatten()[at], full.flatten()[at], atol=1e-6)
    assert torch.allclose(ent_part.flatten()[at], ent_full.flatten()[at], atol=1e-6)
    part.sum().backward()
    assert torch.allclose(hidden.grad, want_h, atol=1e-6) and torch.allclose(head.weight.grad, want_w, atol=1e-6)


def _with_advantages(batch, adv):
    return batch._replace(advantages=torch.tensor(adv, dtype=torch.float32))


@pytest.mark.parametrize("loss_agg", ["token_mean", "seq_mean_token_mean"])
def test_rows_with_zero_advantage_are_skipped_without_changing_the_update(loss_agg):
    model = tiny_model(seed=5)
    # 9 rows in groups of 3: the first and last groups scored alike (advantage 0), the middle one did not
    batch = _with_advantages(_rollouts(model), [0, 0, 0, -1.0, 0.4, 0.9, 0, 0, 0])
    skip, full = copy.deepcopy(model), copy.deepcopy(model)
    calls = {"skip": [], "full": []}
    for key, m in (("skip", skip), ("full", full)):  # the rows each forward of the update ran
        def counted(input_ids, *args, key=key, forward=m.forward, **kw):
            calls[key].append(len(kw["segments"]) if kw.get("segments") else input_ids.shape[0])  # rows, packed too
            return forward(input_ids, *args, **kw)
        m.forward = counted
    ms = _trainer(skip, micro=2, loss_agg=loss_agg).step(batch)
    mf = _trainer(full, micro=2, loss_agg=loss_agg, skip_zero_advantage=False).step(batch)
    assert sum(calls["skip"]) == 3 and sum(calls["full"]) == 9
    assert ms["update_rows"] == pytest.approx(3 / 9) and mf["update_rows"] == 1.0
    # the loss keeps the whole batch's denominator: the same loss, gradient and step
    assert ms["loss"] == pytest.approx(mf["loss"], abs=1e-7) and ms["grad_norm"] > 0
    assert ms["grad_norm"] == pytest.approx(mf["grad_norm"], rel=1e-5)
    for (name, a), b in zip(skip.named_parameters(), full.parameters()):
        torch.testing.assert_close(a.grad, b.grad, atol=1e-7, rtol=1e-4, msg=name)
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5, msg=name)
    assert ms["logprob_diff"] < 1e-5  # the audit covers the rows the update scored, not the skipped zeros


def test_a_forward_hook_sees_the_skipped_rows_through_a_forward_without_gradients():
    model = tiny_model(seed=5)
    batch = _with_advantages(_rollouts(model), [0, 0, 0, -1.0, 0.4, 0.9, 0, 0, 0])
    hooked, plain = copy.deepcopy(model), copy.deepcopy(model)

    class Recorder:  # a ForwardHook (what online drafter training installs)
        hidden_layers = (0,)

        def __init__(self):
            self.seen = []  # (rows, whether the forward carries gradients, hidden layers returned)

        def __call__(self, info):
            self.seen.append((info.rows.tolist(), info.output.last_hidden.requires_grad, len(info.output.hidden)))

    trainer = _trainer(hooked, micro=2)
    trainer.forward_hook = recorder = Recorder()
    mh, mp = trainer.step(batch), _trainer(plain, micro=2).step(batch)
    assert sorted(r for rows, _, _ in recorder.seen for r in rows) == list(range(9))  # every row, once
    assert sorted(r for rows, grad, _ in recorder.seen if grad for r in rows) == [3, 4, 5]  # the learning rows
    assert all(n == 1 for _, _, n in recorder.seen)
    assert mh["update_rows"] == pytest.approx(3 / 9)  # the skip stays on with a hook installed
    assert mh["grad_norm"] == pytest.approx(mp["grad_norm"], rel=1e-6)
    for (name, a), b in zip(hooked.named_parameters(), plain.parameters()):  # the same update as without it
        torch.testing.assert_close(a, b, atol=0, rtol=0, msg=name)


def test_a_batch_where_no_row_learns_still_steps_the_optimizer_like_the_full_update():
    model = tiny_model(seed=6)
    batch = _rollouts(model)
    skip, full = copy.deepcopy(model), copy.deepcopy(model)
    metrics = []
    for t in (_trainer(skip), _trainer(full, skip_zero_advantage=False)):
        t.step(batch)  # a first step with advantages builds AdamW's moments; the second scores all alike
        metrics.append(t.step(_with_advantages(batch, [0.0] * batch.num_rows)))
    assert [m["grad_norm"] for m in metrics] == [0, 0] and [m["loss"] for m in metrics] == [0, 0]
    assert metrics[0]["update_rows"] == pytest.approx(1 / batch.num_rows) and metrics[1]["update_rows"] == 1
    for (name, a), b in zip(skip.named_parameters(), full.parameters()):  # momentum moved both alike
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5, msg=name)


def test_every_row_is_kept_when_a_term_reads_every_row():
    model = tiny_model(seed=7)
    batch = _with_advantages(_rollouts(model), [0.0] * 9)
    assert len(_trainer(model, kl_coef=0.1).learning_rows(batch, torch.arange(9))) == 9
    assert len(_trainer(model).learning_rows(batch, torch.arange(9))) == 1


def test_the_ratio_of_rollouts_whose_logprobs_are_the_trainers_changes_nothing():
    """The sync correction (algorithm.is_correction) where the engine's precision is the trainer's: pi_gen is
    pi_old, every ratio is 1, and the update is the uncorrected one to rounding."""
    model = tiny_model(seed=7)
    on = _rollouts(model)
    exact = _trainer(copy.deepcopy(model)).score(model, on)  # [N, T]
    same = on._replace(gen_logp=exact * on.mask)
    a, b = copy.deepcopy(model), copy.deepcopy(model)
    plain, corrected = _trainer(a).step(same), _trainer(b).step(same, is_cap=2.0)
    assert corrected["is_ratio"] == pytest.approx(1.0, abs=1e-6) and corrected["is_truncated"] == 0.0
    assert corrected["loss"] == pytest.approx(plain["loss"], rel=1e-6, abs=1e-9)
    assert corrected["grad_norm"] == pytest.approx(plain["grad_norm"], rel=1e-5)
    assert all(torch.allclose(p, q, atol=1e-7) for p, q in zip(a.parameters(), b.parameters()))
