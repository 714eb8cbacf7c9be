"""EAGLE-3 drafter: exact greedy output with an untrained head, checkpoint round trip, bad input."""
from __future__ import annotations

import json

import pytest
import torch

from specrl import LLM, SamplingParams, SpecConfig
from specrl.drafters.eagle3.head import Eagle3Config, default_layers, init_head, load_head, save_head
from specrl.model.attention import AttentionMetadata
from tests.helpers import tiny_model


def random_head_dir(model, path, seed=1, layers=None):
    head = init_head(Eagle3Config.for_target(model.config, layers), seed=seed, std=0.2)
    return save_head(head, path)


def greedy(llm, prompts, max_tokens=12):
    outs = llm.generate(prompts, SamplingParams(temperature=0.0, max_tokens=max_tokens, seed=0))
    return [o.outputs[0].token_ids for o in outs], [o.outputs[0].logprobs for o in outs]


def test_default_layers():
    # (1, L/2-1, L-4) made increasing and clamped: L=36 -> (1, 17, 32); L=6 -> (1, 2, 2) -> (1, 2, 3)
    assert default_layers(36) == (1, 17, 32)
    assert default_layers(6) == (1, 2, 3)
    assert default_layers(2) == (1, 1, 1)  # tiny targets: repeats are unavoidable


@pytest.mark.parametrize("batch", [1, 7])
def test_greedy_identical_to_sd_off(tmp_path, batch):
    model = tiny_model(layers=3)  # default_layers(3) = (1, 2, 2): a repeated layer is fused twice
    head_dir = random_head_dir(model, tmp_path / "head")
    prompts = [[0] + [(3 * b + i) % 30 + 2 for i in range(2 + b % 4)] for b in range(batch)]
    base_tokens, base_lps = greedy(LLM(model), prompts)
    spec = SpecConfig(method="eagle3", draft_model=str(head_dir), num_speculative_tokens=4)
    llm = LLM(model, spec=spec, max_num_seqs=4)  # batch 7 > 4 slots: slots are reused mid-run
    tokens, lps = greedy(llm, prompts)
    assert tokens == base_tokens
    for a, b in zip(lps, base_lps):
        assert torch.allclose(torch.tensor(a), torch.tensor(b), atol=1e-5)
    assert llm.stats["draft_tokens"] > 0


def test_save_load_round_trip(tmp_path):
    model = tiny_model()
    head = init_head(Eagle3Config.for_target(model.config, (0, 1, 1)), seed=3)
    save_head(head, tmp_path / "h")
    hf = json.loads((tmp_path / "h" / "config.json").read_text())
    assert hf["architectures"] == ["Eagle3Head"] and hf["target_hidden_layers"] == [0, 1, 1]
    assert hf["eagle_aux_hidden_state_layer_ids"] == [1, 2, 2]  # vLLM's top-level key counts layer inputs
    assert hf["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [0, 1, 1]  # SGLang/SpecForge: outputs
    back = load_head(tmp_path / "h")
    for (name, a), (_, b) in zip(head.state_dict().items(), back.state_dict().items()):
        assert torch.equal(a, b), name
    D = model.config.hidden_size
    assert back.fc.weight.shape == (D, 3 * D)
    assert back.midlayer.self_attn.q_proj.weight.shape[1] == 2 * D  # attention reads [embed; hidden]
    # one cached step: [B, T, D] in, [B, T, D] out
    kv = tuple(torch.zeros(2, 2, 8, model.config.head_dim) for _ in range(2))
    h = torch.randn(2, 3, D)
    positions = torch.arange(3).expand(2, 3)  # [B, T]
    out = back(h, torch.randn(2, 3, D), positions, kv, AttentionMetadata.build([0, 1], positions))
    assert out.shape == (2, 3, D)


def test_vocab_mismatch_names_both_sizes(tmp_path):
    head_dir = random_head_dir(tiny_model(vocab=40), tmp_path / "h")
    with pytest.raises(ValueError, match="vocab_size 40 but the policy has 32"):
        LLM(tiny_model(vocab=32), spec=SpecConfig(method="eagle3", draft_model=str(head_dir)))


def test_hidden_mismatch_names_both_sizes(tmp_path):
    head_dir = random_head_dir(tiny_model(hidden=48), tmp_path / "h")
    with pytest.raises(ValueError, match="hidden_size 48 but the policy has 32"):
        LLM(tiny_model(hidden=32), spec=SpecConfig(method="eagle3", draft_model=str(head_dir)))


def test_missing_checkpoint_tells_how_to_train(tmp_path):
    with pytest.raises(FileNotFoundError, match="specrl train-drafter --method eagle3"):
        LLM(tiny_model(), spec=SpecConfig(method="eagle3", draft_model=str(tmp_path / "nope")))


def test_missing_default_head(tmp_path, monkeypatch):
    monkeypatch.setattr("specrl.drafters.base.SHIPPED_DRAFTERS_DIR", tmp_path / "absent")
    with pytest.raises(FileNotFoundError, match="embedded default EAGLE-3 head is missing"):
        LLM(tiny_model(), spec=SpecConfig(method="eagle3"))
