"""Reduced EAGLE-3 draft vocabularies (exact verification), the public export layout, and its round trip."""
from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

from specrl import LLM, SamplingParams, SpecConfig
from specrl.cli.main import main as cli_main
from specrl.drafters.eagle3.export import draft_vocab, export_eagle3, token_counts, with_draft_vocab
from specrl.drafters.eagle3.head import Eagle3Config, init_head, load_head, save_head
from specrl.engine.methods import build_drafter
from specrl.model import save_model
from tests.drafters.test_exactness import PROMPT, SETTINGS, peaky_model, sample_first3
from tests.helpers import tiny_model
from tests.stats import assert_matches, exact_distribution


def test_draft_vocab_picks_the_most_frequent_ascending():
    counts = token_counts([[5, 5, 2, 7], [7, 5, 1]], vocab_size=8)
    assert counts.tolist() == [0, 1, 1, 0, 0, 3, 0, 2]
    # 5 (3x), 7 (2x), then 1 and 2 tie at 1x: the lower id wins
    assert draft_vocab(counts, 3).tolist() == [1, 5, 7]
    with pytest.raises(ValueError, match="draft_vocab_size=9: expected 1..8"):
        draft_vocab(counts, 9)


def _reduced_head(model, ids, seed=0):
    head = init_head(Eagle3Config.for_target(model.config), seed=seed, std=0.3)
    return with_draft_vocab(head, model.lm_head.weight.detach(), torch.tensor(ids))


def test_d2t_maps_draft_ids_to_target_ids_and_q_is_zero_elsewhere():
    model = tiny_model(layers=3)
    head = _reduced_head(model, [2, 3, 9, 30])
    assert head.d2t.tolist() == [2, 2, 7, 27]  # target id = draft id + d2t[draft id]
    h = torch.randn(2, 5, model.config.hidden_size)
    full = head.full_logits(h, model)  # [2, 5, 32]
    assert torch.isinf(full[..., [0, 1, 4, 31]]).all()
    assert torch.allclose(full[..., [2, 3, 9, 30]], model.lm_head_logits(head.norm(h))[..., [2, 3, 9, 30]], atol=1e-6)


def _reduced_spec(model, tmp_path, ids):
    save_head(_reduced_head(model, ids), tmp_path / "head")
    return SpecConfig(method="eagle3", draft_model=str(tmp_path / "head"), num_speculative_tokens=4)


def test_reduced_vocabulary_greedy_is_exact(tmp_path):
    model = tiny_model(seed=3, vocab=32, hidden=48, layers=3, max_pos=40)
    prompts = [[0] + [(7 * i + j) % 30 + 2 for j in range(3 + 2 * i)] for i in range(4)]
    params = SamplingParams(temperature=0.0, max_tokens=16, stop_token_ids=[31, 16])
    base = LLM(model, max_num_seqs=4).generate(prompts, params)
    llm = LLM(model, max_num_seqs=4, spec=_reduced_spec(model, tmp_path, list(range(2, 32, 2))))
    got = llm.generate(prompts, params)
    for r0, r1 in zip(base, got):
        assert r1.outputs[0].token_ids == r0.outputs[0].token_ids
        assert max(abs(a - b) for a, b in zip(r0.outputs[0].logprobs, r1.outputs[0].logprobs)) < 1e-5
    assert llm.stats["draft_tokens"] > 0


@pytest.mark.parametrize("setting", list(SETTINGS))
def test_reduced_vocabulary_sampling_is_exact(setting, tmp_path):
    # half the 12-token vocabulary is outside the draft vocabulary: q = 0 there, the residual covers it
    model = peaky_model()
    dist = exact_distribution(model, PROMPT, 3, **SETTINGS[setting])
    llm = LLM(model, max_num_seqs=1024, spec=_reduced_spec(model, tmp_path, [1, 3, 4, 5, 8, 11]))
    assert_matches(sample_first3(llm, SETTINGS[setting]), dist)
    assert llm.stats["accepted_tokens"] > 0


class Recorder:
    """Records every proposal (tokens and q) of the drafter it wraps."""

    def __init__(self, inner):
        self.inner, self.hidden_layers, self.seen = inner, inner.hidden_layers, []

    def observe(self, fwd):
        self.inner.observe(fwd)

    def propose(self, seqs, k):
        prop = self.inner.propose(seqs, k)
        self.seen.append((prop.tokens.clone(), None if prop.probs is None else prop.probs.clone()))
        return prop

    def release(self, seq):
        self.inner.release(seq)


def _proposals(model, head_dir, temperature):
    spec = SpecConfig(method="eagle3", draft_model=str(head_dir), num_speculative_tokens=3)
    rec = Recorder(build_drafter(spec, model, 4, model.config.max_position_embeddings))
    LLM(model, max_num_seqs=4, drafter=rec).generate(
        [[0, 5, 6, 7], [0, 9, 3]], SamplingParams(n=2, temperature=temperature, max_tokens=10, seed=4))
    return rec.seen


@pytest.mark.parametrize("reduced", [False, True])
def test_export_round_trip_gives_the_same_drafts(reduced, tmp_path):
    model = tiny_model(layers=3)
    head = init_head(Eagle3Config.for_target(model.config), seed=1, std=0.3)
    if reduced:
        head = with_draft_vocab(head, model.lm_head.weight.detach(), torch.arange(4, 28))
    save_head(head, tmp_path / "ours")
    export_eagle3(head, tmp_path / "public", model.lm_head.weight.detach(), model.config)
    for temperature in (0.0, 1.0):
        before, after = _proposals(model, tmp_path / "ours", temperature), _proposals(model, tmp_path / "public",
                                                                                      temperature)
        assert len(before) == len(after) > 0
        for (ta, qa), (tb, qb) in zip(before, after):
            assert torch.equal(ta, tb)
            assert (qa is None and qb is None) or torch.equal(qa, qb)


def test_public_layout(tmp_path):
    model = tiny_model(layers=3)
    head = _reduced_head(model, [2, 3, 9, 30])
    export_eagle3(head, tmp_path / "out", target_cfg=model.config)
    hf = json.loads((tmp_path / "out" / "config.json").read_text())
    assert hf["architectures"] == ["LlamaForCausalLMEagle3"] and hf["num_hidden_layers"] == 1
    assert hf["draft_vocab_size"] == 4 and hf["vocab_size"] == 32 and hf["target_hidden_size"] == 32
    assert hf["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [2, 3, 3]  # default_layers(3) + 1
    state = load_file(str(tmp_path / "out" / "model.safetensors"))
    assert state["d2t"].dtype == torch.int64 and state["d2t"].tolist() == [2, 2, 7, 27]
    assert state["t2d"].dtype == torch.bool and state["t2d"].nonzero().flatten().tolist() == [2, 3, 9, 30]
    assert state["lm_head.weight"].shape == (4, 32) and state["fc.weight"].shape == (32, 96)
    assert {k.split(".")[0] for k in state} == {"fc", "midlayer", "norm", "lm_head", "d2t", "t2d"}
    assert load_head(tmp_path / "out").config.target_hidden_layers == (1, 2, 2)


def test_full_vocabulary_export_needs_the_policy(tmp_path):
    head = init_head(Eagle3Config.for_target(tiny_model(layers=3).config))
    with pytest.raises(ValueError, match="pass the policy"):
        export_eagle3(head, tmp_path / "out")


def test_cli_exports_a_run_with_a_reduced_vocabulary(tmp_path, capsys):
    model = tiny_model(layers=3)
    ckpt = tmp_path / "run" / "checkpoints" / "step_000002"
    save_model(model, ckpt / "model")
    save_head(init_head(Eagle3Config.for_target(model.config), seed=2), ckpt / "drafter")
    (ckpt / "state.json").write_text("{}")
    data = tmp_path / "samples.jsonl"
    data.write_text("\n".join(json.dumps({"token_ids": [i % 7 + 3] * 3}) for i in range(20)))
    assert cli_main(["export-drafter", str(tmp_path / "run"), "--out", str(tmp_path / "out"),
                     "--draft-vocab-size", "5", "--data", str(data)]) == 0
    assert json.loads(capsys.readouterr().out)["draft_vocab_size"] == 5
    state = load_file(str(tmp_path / "out" / "model.safetensors"))
    assert state["t2d"].nonzero().flatten().tolist() == [3, 4, 5, 6, 7]  # 3..9 occur; ties go to lower ids


def test_cli_run_without_a_model_drafter_is_a_clear_error(tmp_path, capsys):
    ckpt = tmp_path / "run" / "checkpoints" / "step_000001"
    save_model(tiny_model(), ckpt / "model")
    (ckpt / "state.json").write_text("{}")
    assert cli_main(["export-drafter", str(tmp_path / "run"), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("specrl export-drafter: error: the run")
    assert "has no model drafter in its latest checkpoint" in err[0] and not (tmp_path / "out").exists()


def test_cli_draft_model_exports_a_plain_checkpoint(tmp_path, capsys):
    model = tiny_model(layers=2)
    save_model(model, tmp_path / "draft")
    assert cli_main(["export-drafter", str(tmp_path / "draft"), "--out", str(tmp_path / "out")]) == 0
    hf = json.loads((tmp_path / "out" / "config.json").read_text())
    assert hf["num_hidden_layers"] == 2 and json.loads(capsys.readouterr().out)["layout"] == "huggingface"
