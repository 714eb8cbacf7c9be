"""Drafter training inputs: top-k teacher targets (by hand, and equal to the full soft CE when k = V), JSONL
prompt/messages rows, and `train-drafter --data` end to end on a tiny policy."""
from __future__ import annotations

import json
import math

import pytest
import torch

from specrl import LLM, SamplingParams, SpecConfig
from specrl.cli import train_drafter
from specrl.drafters.eagle3.train import precompute_teacher
from specrl.drafters.training.data import TopK, load_prompts, soft_cross_entropy, topk_cross_entropy, topk_probs
from tests.helpers import save_tiny, tiny_model


def test_topk_cross_entropy_by_hand():
    # student uniform over 3 tokens; teacher keeps token 2 with p 0.6, so the rest bucket has 0.4 and q(rest) = 2/3:
    # -(0.6 log 1/3 + 0.4 log 2/3) = 0.6592 + 0.1622
    target = TopK(torch.tensor([[[0.6]]]), torch.tensor([[[2]]]))
    loss = topk_cross_entropy(torch.zeros(1, 1, 3), target, torch.tensor([[True]]))
    assert math.isclose(loss.item(), 0.6 * math.log(3) + 0.4 * math.log(1.5), rel_tol=1e-5)


def test_topk_cross_entropy_with_every_token_is_the_full_soft_cross_entropy():
    torch.manual_seed(0)
    teacher, student = torch.randn(2, 5, 7), torch.randn(2, 5, 7)
    mask = torch.rand(2, 5) > 0.3
    full = soft_cross_entropy(student, torch.softmax(teacher, -1), mask)
    assert torch.allclose(topk_cross_entropy(student, topk_probs(teacher, 0), mask), full, atol=1e-6)
    assert torch.allclose(topk_cross_entropy(student, topk_probs(teacher, 99), mask), full, atol=1e-6)


def test_topk_cross_entropy_is_minimal_where_the_student_matches_top_k_and_tail():
    # teacher top 2: token 1 (0.5), token 3 (0.3), tail 0.2; a student with q = [0.1, 0.5, 0.1, 0.3] matches the
    # coarse distribution, so the gradient vanishes (how the tail's 0.2 splits over tokens 0 and 2 is free)
    logits = torch.tensor([[[0.1, 0.5, 0.1, 0.3]]]).log().requires_grad_()
    target = TopK(torch.tensor([[[0.5, 0.3]]]), torch.tensor([[[1, 3]]]))
    topk_cross_entropy(logits, target, torch.tensor([[True]])).backward()
    assert logits.grad.abs().max() < 1e-6


def test_topk_probs_are_sorted_and_keep_the_mass():
    top = topk_probs(torch.tensor([[0.0, 2.0, 1.0]]), 2)
    assert top.ids.tolist() == [[1, 2]]
    p = torch.softmax(torch.tensor([0.0, 2.0, 1.0]), -1)
    assert torch.allclose(top.probs, p[[1, 2]].view(1, 2))


def test_eagle3_teacher_stores_k_entries_per_token():
    policy = tiny_model(layers=3)  # vocab 32
    data = [([0, 2, 3], [4, 5]), ([0, 6], [7, 8, 9])]
    teacher = precompute_teacher(policy, data, (0, 1, 2), 64, autocast=False, topk=4)
    assert [t.probs.shape for t in teacher.probs] == [(5, 4), (5, 4)]
    assert teacher.probs[0].probs.dtype == torch.bfloat16 and teacher.probs[0].ids.dtype == torch.int32
    full = torch.softmax(policy(torch.tensor([data[0][0] + data[0][1]])).logits[0], -1)  # [5, 32]
    assert torch.equal(teacher.probs[0].ids[:, 0].long(), full.argmax(-1))


@pytest.fixture
def chat_policy(tmp_path):
    """The tiny policy with a chat template: every turn's content, then t3 as the assistant's opener."""
    policy = save_tiny(tmp_path / "policy", layers=3)
    (policy / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast",
        "chat_template": "{% for m in messages %}{{ m['content'] }} {% endfor %}{% if add_generation_prompt %}t3"
                         "{% endif %}"}))
    return policy


def test_prompt_and_messages_rows(tmp_path, chat_policy):
    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps({"prompt": "t4 t5", "answer": "1"}) + "\n\n" +
                    json.dumps({"messages": [{"role": "user", "content": "t6 t7"}]}) + "\n")
    # a `prompt` row becomes a user turn too, as `specrl train` encodes it (data.PromptEncoder)
    assert load_prompts(data, chat_policy) == [[4, 5, 3], [6, 7, 3]]
    assert load_prompts(data, chat_policy, limit=1) == [[4, 5, 3]]


def test_bad_rows_name_their_line(tmp_path, chat_policy):
    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps({"prompt": "t4"}) + "\n" + json.dumps({"question": "x"}) + "\n")
    with pytest.raises(ValueError, match=r"d.jsonl:2: row has no 'prompt' field \(has \['question'\]\)"):
        load_prompts(data, chat_policy)
    data.write_text(json.dumps({"messages": [{"role": "user"}]}) + "\n")
    with pytest.raises(ValueError, match=r"d.jsonl:1: 'messages' message 0 is .*needs a 'role' and a 'content'"):
        load_prompts(data, chat_policy)
    with pytest.raises(FileNotFoundError, match="make-data"):
        load_prompts(tmp_path / "missing.jsonl", chat_policy)


def test_cli_trains_on_a_data_file(tmp_path, chat_policy):
    pytest.importorskip("transformers")
    torch.set_num_threads(1)
    data = tmp_path / "d.jsonl"
    rows = [{"prompt": f"t{4 + i} t{5 + i}"} for i in range(3)] + [{"messages": [{"role": "user", "content": "t9"}]}]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "head"
    m = train_drafter.run(["--policy", str(chat_policy), "--method", "eagle3", "--out", str(out), "--data", str(data),
                         "--steps", "2", "--max-tokens", "8", "--max-model-len", "16", "--max-num-seqs", "4",
                         "--teacher-topk", "8", "--threads", "1"])
    assert m["steps_done"] == 2 and m["sequences"] == 8  # 4 prompts x 2 samples
    llm = LLM(str(chat_policy), spec=SpecConfig(method="eagle3", draft_model=str(out)))
    llm.generate([[0, 4, 5]], SamplingParams(temperature=1.0, max_tokens=8, seed=0))
    assert llm.stats["draft_tokens"] > 0


def test_cli_refuses_to_overwrite_the_shipped_drafter_for_another_policy(tmp_path):
    with pytest.raises(ValueError, match="pass --out DIR for the new eagle3 drafter; to replace the shipped one"):
        train_drafter.run(["--policy", str(tmp_path), "--method", "eagle3"])
