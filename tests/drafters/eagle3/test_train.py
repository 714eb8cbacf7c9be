"""Offline EAGLE-3 training: TTT pieces by hand, loss goes down on a tiny run, the CLI end to end."""
from __future__ import annotations

import json

import pytest
import torch

from specrl import LLM, SamplingParams, SpecConfig
from specrl.cli import train_drafter
from specrl.cli.main import main as specrl_main
from specrl.drafters.eagle3.head import Eagle3Config, init_head
from specrl.drafters.eagle3.train import Eagle3Options, shift_left, train_head, ttt_attention
from specrl.drafters.training.data import DrafterTrainArgs, collect_sequences, pad_batch, soft_cross_entropy
from specrl.optim import OptimSettings
from tests.helpers import save_tiny, tiny_model


def test_pad_batch_masks_response_predictions():
    # prompt [5, 6], response [7, 8, 9]: positions 1..3 predict 7, 8, 9
    b = pad_batch([([5, 6], [7, 8, 9]), ([5], [4])])
    assert b.ids.tolist() == [[5, 6, 7, 8, 9], [5, 4, 0, 0, 0]]
    assert b.loss_mask.int().tolist() == [[0, 1, 1, 1, 0], [1, 0, 0, 0, 0]]


def test_soft_cross_entropy_by_hand():
    # uniform logits over 2 tokens: -(0.3 log 0.5 + 0.7 log 0.5) = log 2 at the one masked position
    logits = torch.zeros(1, 2, 2)
    p = torch.tensor([[[0.3, 0.7], [1.0, 0.0]]])
    loss = soft_cross_entropy(logits, p, torch.tensor([[True, False]]))
    assert torch.allclose(loss, torch.tensor(0.6931), atol=1e-4)


def test_ttt_attention_diagonal():
    # one query per index; keys of step 0 equal zero so every causal score is 0; the step-1 key at index t
    # scores q.k = 0 too, so index 0 averages {v0[0], v1[0]} and index 1 averages {v0[0], v0[1], v1[1]}
    q = torch.ones(1, 1, 2, 1)
    k0, k1 = torch.zeros(1, 1, 2, 1), torch.zeros(1, 1, 2, 1)
    v0, v1 = torch.tensor([1.0, 2.0]).view(1, 1, 2, 1), torch.tensor([10.0, 20.0]).view(1, 1, 2, 1)
    out = ttt_attention(q, [k0, k1], [v0, v1]).flatten()
    assert torch.allclose(out, torch.tensor([(1 + 10) / 2, (1 + 2 + 20) / 3]))


def test_shift_left():
    x = torch.arange(4).view(1, 4)
    assert shift_left(x, 1).tolist() == [[1, 2, 3, 0]]


@pytest.fixture
def one_thread():
    """Tensors this small gain nothing from threads, and on a busy machine 2 threads spin-wait for ages."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def test_ttt_loss_decreases_on_tiny_run(one_thread):
    policy = tiny_model(layers=3, scale=3.0)  # a peaked target, so the CE floor (its entropy) sits low
    data = collect_sequences(policy, [[0, 2 + i, 5 + i] for i in range(16)], n=2, max_tokens=16, seed=0)
    assert len(data) > 0 and all(len(r) > 0 for _, r in data)
    head = init_head(Eagle3Config.for_target(policy.config), seed=0)
    args = DrafterTrainArgs(steps=40, optim=OptimSettings(lr=3e-3, warmup_steps=2, min_lr_ratio=0.05), batch_tokens=512,
                            bf16_autocast=False)
    m = train_head(head, policy, data, args, Eagle3Options(ttt_steps=3))
    assert m["steps_done"] == 40
    assert m["final_loss"] < 0.6 * m["first_loss"]  # measured: 17.6 -> 7.7


def test_cli_trains_and_the_head_loads(tmp_path, monkeypatch, one_thread):
    policy = save_tiny(tmp_path / "policy", layers=3)
    monkeypatch.setattr(train_drafter, "default_prompts", lambda n, seed: [f"t{i} t{i + 3}" for i in range(n)])
    out = tmp_path / "head"
    m = train_drafter.run(["--policy", str(policy), "--method", "eagle3", "--out", str(out), "--steps", "3",
                          "--prompts", "4", "--max-tokens", "8", "--threads", "1"])
    assert m["steps_done"] == 3 and json.loads((out / "config.json").read_text())["torch_dtype"] == "bfloat16"
    llm = LLM(str(policy), spec=SpecConfig(method="eagle3", draft_model=str(out)))
    llm.generate([[0, 4, 5]], SamplingParams(temperature=1.0, max_tokens=8, seed=0))
    assert llm.stats["draft_tokens"] > 0


def test_cli_unknown_method_lists_valid(capsys):
    with pytest.raises(ValueError, match=r"method='medusa' is invalid: expected one of \['draft_model', 'eagle3', 'mtp'\]"):
        train_drafter.run(["--method", "medusa", "--policy", "x"])
    assert specrl_main(["train-drafter", "method=medusa", "policy=x"]) == 2
    assert "method='medusa' is invalid" in capsys.readouterr().err


def test_ttt_unroll_matches_the_drafter_at_inference():
    # The drafter observes x_0..x_t (entry p = features of p + token p+1), then drafts d0, d1, d2 with its
    # own cache. Training's unroll on x_0..x_{t+1}, d0, d1 must predict the same chain at index t-1+1 = t:
    # step 0 -> d0, step 1 (token d0) -> d1, step 2 (token d1) -> d2.
    from types import SimpleNamespace

    from specrl.drafters.eagle3.drafter import Eagle3Drafter
    from specrl.drafters.eagle3.train import ttt_unroll
    from specrl.engine.drafting import TargetForward

    policy = tiny_model(layers=3)
    head = init_head(Eagle3Config.for_target(policy.config), seed=2, std=0.3).eval()
    layers = head.config.target_hidden_layers
    wanted = tuple(sorted(set(layers)))
    x = torch.tensor([[0, 5, 9, 3, 7, 11]])  # t = 4: the drafter sees inputs 0..4, next tokens 1..5
    out = policy(x, hidden_layers=wanted)
    drafter = Eagle3Drafter(head, policy, num_slots=2, max_len=32, sample_drafts=False)
    seq = SimpleNamespace(slot=1)
    T = x.shape[1] - 1
    drafter.observe(TargetForward([seq], torch.arange(T)[None], x[:, 1:], torch.tensor([T]),
                                  tuple(h[:, :T] for h in out.hidden), out.last_hidden[:, :T]))
    d = drafter.propose([seq], [3]).tokens[0].tolist()
    ext = torch.cat([x, torch.tensor([d[:2]])], dim=1)  # [1, 8]
    out2 = policy(ext, hidden_layers=wanted)
    with torch.no_grad():
        logits = ttt_unroll(head, policy, torch.cat([out2.hidden[wanted.index(i)] for i in layers], -1), ext,
                            torch.arange(ext.shape[1])[None], 3)
    t = T - 1
    assert [int(logits[j][0, t].argmax()) for j in range(3)] == d


def test_topk_cross_entropy_sends_tokens_outside_the_draft_vocabulary_to_the_rest_bucket():
    from specrl.drafters.eagle3.export import with_draft_vocab
    from specrl.drafters.training.data import TopK, topk_cross_entropy
    # target vocabulary of 4; the draft vocabulary is target ids {1, 3} (draft ids 0, 1)
    head = init_head(Eagle3Config(4, 8, 8, 1, 1, 8, (0, 0, 0)))
    head = with_draft_vocab(head, torch.zeros(4, 8), torch.tensor([1, 3]))
    full_to_draft = head.draft_id_of  # the map train_head applies to the teacher's ids
    assert full_to_draft.tolist() == [-1, 0, -1, 1]
    target = TopK(torch.tensor([[[0.5, 0.3]]]), torch.tensor([[[1, 2]]]))  # p(1)=0.5, p(2)=0.3, rest 0.2
    draft = TopK(target.probs, full_to_draft[target.ids])
    assert draft.ids.tolist() == [[[0, -1]]]
    logits = torch.log(torch.tensor([[[0.6, 0.4]]]))  # q over draft ids
    # token 2 cannot be drafted: its 0.3 joins the rest 0.2, and the rest is every draft id but 0 (q = 0.4)
    want = -(0.5 * torch.log(torch.tensor(0.6)) + 0.5 * torch.log(torch.tensor(0.4)))
    got = topk_cross_entropy(logits, draft, torch.tensor([[True]]))
    assert torch.allclose(got, want, atol=1e-6)


def test_cli_reduced_draft_vocabulary_head_is_exact_and_round_trips(tmp_path, monkeypatch, one_thread):
    from specrl.drafters.eagle3.head import load_head
    policy = save_tiny(tmp_path / "policy", layers=3)
    monkeypatch.setattr(train_drafter, "default_prompts", lambda n, seed: [f"t{i} t{i + 3}" for i in range(n)])
    out = tmp_path / "head"
    m = train_drafter.run(["--policy", str(policy), "--method", "eagle3", "--out", str(out), "--steps", "3",
                          "--prompts", "8", "--max-tokens", "8", "--threads", "1", "--draft-vocab-size", "12",
                          "--temperature", "0"])
    assert m["draft_vocab_size"] == 12
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["draft_vocab_size"] == 12
    head = load_head(out)
    assert head.lm_head.weight.shape[0] == 12 and len(set(head.target_ids.tolist())) == 12
    prompts = [[0, 4 + i, 5] for i in range(6)]
    params = SamplingParams(temperature=0.0, max_tokens=12)
    plain = LLM(str(policy)).generate(prompts, params)
    llm = LLM(str(policy), spec=SpecConfig(method="eagle3", draft_model=str(out)))
    spec = llm.generate(prompts, params)
    assert [o.outputs[0].token_ids for o in spec] == [o.outputs[0].token_ids for o in plain]
    assert llm.stats["draft_tokens"] > 0


def test_teacher_top_k_computed_in_chunks_equals_the_whole_logits(monkeypatch):
    """The teacher's top-k rows come from the lm-head a few tokens at a time, equal to the full logits'."""
    from specrl.drafters.eagle3.train import chunked_topk
    from specrl.drafters.training.data import topk_probs
    from specrl.trainer import trainer as trainer_mod
    from tests.helpers import tiny_model
    model = tiny_model(seed=4, vocab=40)
    hidden = torch.randn(3, 7, model.config.hidden_size)  # [B, T, D]
    monkeypatch.setattr(trainer_mod, "HEAD_CHUNK_ELEMENTS", 4 * model.config.vocab_size)  # 4 tokens a chunk
    got = chunked_topk(model.lm_head, hidden, 5)
    want = topk_probs(model.lm_head(hidden), 5)
    assert got.ids.shape == (3, 7, 5)
    assert torch.equal(got.ids, want.ids) and torch.allclose(got.probs, want.probs, atol=1e-6)


def test_train_head_remaps_the_teacher_ids_into_the_draft_vocabulary(monkeypatch, one_thread):
    from specrl.drafters.eagle3 import train as eagle3_train
    from specrl.drafters.eagle3.export import with_draft_vocab
    from specrl.drafters.training.data import TopK
    policy = tiny_model(layers=3)  # vocabulary of 32
    full = init_head(Eagle3Config.for_target(policy.config), seed=0)
    head = with_draft_vocab(full, policy.lm_head.weight.detach(), torch.tensor([2, 5, 9]))
    # draft ids 0, 1, 2 are target ids 2, 5, 9 (d2t = [2, 4, 7]: target = draft + d2t[draft]); a teacher token
    # must go the other way, target -> draft: 9 -> 2, 2 -> 0, and 4, outside the draft vocabulary, -> -1 (the rest)
    assert head.d2t.tolist() == [2, 4, 7]
    probs = torch.tensor([[0.5, 0.3, 0.1]] * 5, dtype=torch.bfloat16)  # [T, k]: the teacher's top 3 at each of 5
    ids = torch.tensor([[9, 2, 4]] * 5, dtype=torch.int32)  # [T, k]
    features = torch.zeros(5, 3 * policy.config.hidden_size, dtype=torch.bfloat16)  # [T, 3D]
    monkeypatch.setattr(eagle3_train, "cached_teacher", lambda *a: eagle3_train.Teacher([features], [TopK(probs, ids)]))
    seen, ttt_loss = [], eagle3_train.ttt_loss

    def spy(head, policy, batch, features, target, opts):
        seen.append(target)
        return ttt_loss(head, policy, batch, features, target, opts)

    monkeypatch.setattr(eagle3_train, "ttt_loss", spy)
    train_head(head, policy, [([0, 3], [4, 6, 7])], DrafterTrainArgs(steps=1, batch_tokens=512, bf16_autocast=False),
               Eagle3Options(ttt_steps=2))
    assert len(seen) == 1
    assert seen[0].ids.tolist() == [[[2, 0, -1]] * 5]  # [B, T, k]
    assert torch.equal(seen[0].probs, probs[None])  # the probabilities stay with their tokens
