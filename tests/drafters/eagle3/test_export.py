"""Reduced EAGLE-3 draft vocabularies (exact verification), the public export layout, and its round trip."""
from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

from specrl import LLM, SamplingParams, SpecConfig
from specrl.cli.main import main as cli_main
from specrl.drafters.eagle3.export import draft_vocab, export_eagle3, token_counts, with_draft_vocab
from specrl.drafters.eagle3.head import Eagle3Config, init_head, layers_from_hf, load_head, save_head
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


def _head(model, layers, seed=1, ids=None, dtype=torch.float32):
    head = init_head(Eagle3Config.for_target(model.config, layers=layers), seed=seed, std=0.3)
    if ids is not None:
        head = with_draft_vocab(head, model.lm_head.weight.detach(), torch.tensor(ids))
    return head.to(dtype)


@pytest.mark.parametrize("layout", ["eagle3", "speculators"])
@pytest.mark.parametrize("reduced", [False, True])
def test_export_round_trip_gives_the_same_drafts(reduced, layout, tmp_path):
    model = tiny_model(layers=3)
    head = _head(model, (0, 1, 1), ids=list(range(4, 28)) if reduced else None)
    save_head(head, tmp_path / "ours")
    export_eagle3(head, tmp_path / "public", model.config, model.lm_head.weight.detach(), layout=layout,
                  verifier="policy")
    for temperature in (0.0, 1.0):
        before, after = _proposals(model, tmp_path / "ours", temperature), _proposals(model, tmp_path / "public",
                                                                                      temperature)
        assert len(before) == len(after) > 0
        for (ta, qa), (tb, qb) in zip(before, after):
            assert torch.equal(ta, tb)
            assert (qa is None and qb is None) or torch.equal(qa, qb)


def test_public_layout(tmp_path):
    model = tiny_model(layers=6)
    head = _head(model, (1, 2, 4), ids=[2, 3, 9, 30])
    export_eagle3(head, tmp_path / "out", model.config)
    hf = json.loads((tmp_path / "out" / "config.json").read_text())
    assert hf["architectures"] == ["LlamaForCausalLMEagle3"] and hf["num_hidden_layers"] == 1
    assert hf["draft_vocab_size"] == 4 and hf["vocab_size"] == 32 and hf["target_hidden_size"] == 32
    assert hf["tie_word_embeddings"] is False  # SGLang ties lm_head to embed_tokens otherwise
    assert hf["norm_before_residual"] is False  # the residual is taken before hidden_norm, as specrl's head does
    state = load_file(str(tmp_path / "out" / "model.safetensors"))
    assert state["d2t"].dtype == torch.int64 and state["d2t"].tolist() == [2, 2, 7, 27]
    assert state["t2d"].dtype == torch.bool and state["t2d"].nonzero().flatten().tolist() == [2, 3, 9, 30]
    assert state["lm_head.weight"].shape == (4, 32) and state["fc.weight"].shape == (32, 96)
    # vLLM maps midlayer. to layers.0.; SGLang's module is named midlayer; no embed_tokens: both share the target's
    assert {k.split(".")[0] for k in state} == {"fc", "midlayer", "norm", "lm_head", "d2t", "t2d"}
    assert load_head(tmp_path / "out").config.target_hidden_layers == (1, 2, 4)


def test_layer_ids_in_each_loaders_numbering(tmp_path):
    # A 6-layer policy; the head fuses the OUTPUTS of layers 1, 2 and 4.
    # vLLM (gpu_model_runner / eagle3_utils get_eagle3_aux_layers_from_config) reads only the top-level key, and
    # its LlamaModel.forward appends `hidden_states + residual` before running layer idx (newer code: id 0 = the
    # embedding, id i + 1 after layer i): id i is the output of layer i - 1, so [1, 2, 4] -> [2, 3, 5].
    # Without the top-level key vLLM takes its default (2, L//2, L-3) = (2, 3, 3) on 6 layers.
    # SGLang (ModelRunner reads eagle_config.eagle_aux_hidden_state_layer_ids; LlamaForCausalLM.
    # set_eagle3_layers_to_capture adds 1; LlamaModel.forward captures before layer i) needs [1, 2, 4]: +1 gives
    # [2, 3, 5], the inputs of layers 2, 3, 5 = the outputs of 1, 2, 4. SpecForge (set_aux_hidden_states_layers
    # on the same nested key, forward hooks on layers[i]) reads outputs directly: [1, 2, 4].
    model = tiny_model(layers=6)
    export_eagle3(_head(model, (1, 2, 4)), tmp_path / "out", model.config, model.lm_head.weight.detach())
    hf = json.loads((tmp_path / "out" / "config.json").read_text())
    assert hf["eagle_aux_hidden_state_layer_ids"] == [2, 3, 5]
    assert hf["eagle_config"] == {"eagle_aux_hidden_state_layer_ids": [1, 2, 4], "use_aux_hidden_state": True}
    assert hf["target_hidden_layers"] == [1, 2, 4]


def test_layers_are_read_back_from_each_numbering():
    # a SpecForge config has only the nested key (outputs); a vLLM-only one the top-level key (inputs: minus 1)
    assert layers_from_hf({"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 15, 27]}}) == (1, 15, 27)
    assert layers_from_hf({"eagle_aux_hidden_state_layer_ids": [2, 16, 28],
                           "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 15, 27]}}) == (1, 15, 27)
    with pytest.raises(ValueError, match="names no fused target layers"):
        layers_from_hf({})


def test_a_head_on_the_last_layer_is_refused_or_exported_with_a_warning(tmp_path, caplog):
    # A head on layers (1, 3, 5) of 6 (the shipped one fuses 1, 3, 4). Layer 5's output is vLLM
    # id 6 = L, which only vLLM's EagleModelMixin capture reaches; SGLang captures before layers 0..5 only
    # (nested 5 + 1 = 6 is never hit).
    model = tiny_model(layers=6)
    head = _head(model, (1, 3, 5))
    with pytest.raises(ValueError, match=r"layer 5 is the policy's last .*--allow-last-layer"):
        export_eagle3(head, tmp_path / "out", model.config, model.lm_head.weight.detach())
    assert not (tmp_path / "out").exists()
    with caplog.at_level("WARNING", logger="specrl"):
        export_eagle3(head, tmp_path / "out", model.config, model.lm_head.weight.detach(), allow_last_layer=True)
    assert "exporting anyway" in caplog.text
    hf = json.loads((tmp_path / "out" / "config.json").read_text())
    assert hf["eagle_aux_hidden_state_layer_ids"] == [2, 4, 6]  # the old export wrote [2, 4, 6] nested too
    assert hf["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [1, 3, 5]


def test_speculators_layout(tmp_path):
    model = tiny_model(layers=6)
    export_eagle3(_head(model, (1, 2, 4), ids=[2, 3, 9, 30]), tmp_path / "out", model.config, layout="speculators",
                  verifier="org/policy", speculative_tokens=4)
    hf = json.loads((tmp_path / "out" / "config.json").read_text())
    # vLLM's SpeculatorsConfig: method from speculators_model_type, num_speculative_tokens from the first
    # proposal method, the verifier's name_or_path required; update_eagle3 reads the top-level keys
    assert hf["speculators_model_type"] == "eagle3" and hf["architectures"] == ["Eagle3Speculator"]
    spec = hf["speculators_config"]
    assert spec["proposal_methods"][0]["speculative_tokens"] == 4
    assert spec["verifier"] == {"name_or_path": "org/policy", "architectures": ["Qwen3ForCausalLM"]}
    assert hf["norm_before_residual"] is False  # update_eagle3 defaults a missing key to true
    assert hf["eagle_aux_hidden_state_layer_ids"] == [2, 3, 5]  # vLLM's numbering, as above
    assert hf["draft_vocab_size"] == 4 and hf["target_hidden_size"] == 32
    layer = hf["transformer_layer_config"]
    assert layer["model_type"] == "llama" and layer["num_hidden_layers"] == 1 and layer["vocab_size"] == 32
    state = load_file(str(tmp_path / "out" / "model.safetensors"))
    assert {k.split(".")[0] for k in state} == {"fc", "layers", "norm", "lm_head", "d2t", "t2d"}
    assert "layers.0.hidden_norm.weight" in state  # speculators' and vLLM's module name
    assert load_head(tmp_path / "out").config.target_hidden_layers == (1, 2, 4)
    with pytest.raises(ValueError, match="names its verifier"):
        export_eagle3(_head(model, (1, 2, 4)), tmp_path / "o2", model.config, model.lm_head.weight, layout="speculators")


def test_a_speculators_head_with_norm_before_residual_is_refused(tmp_path):
    model = tiny_model(layers=6)
    export_eagle3(_head(model, (1, 2, 4)), tmp_path / "out", model.config, model.lm_head.weight.detach(),
                  layout="speculators", verifier="p")
    hf = json.loads((tmp_path / "out" / "config.json").read_text())
    del hf["norm_before_residual"]  # unset means true in vLLM's update_eagle3
    (tmp_path / "out" / "config.json").write_text(json.dumps(hf))
    with pytest.raises(ValueError, match="norm_before_residual true"):
        load_head(tmp_path / "out")


def test_export_keeps_the_heads_dtype(tmp_path):
    model = tiny_model(layers=6)
    head = _head(model, (1, 2, 4), ids=[2, 3, 9, 30], dtype=torch.bfloat16)
    export_eagle3(head, tmp_path / "bf16", model.config)
    state = load_file(str(tmp_path / "bf16" / "model.safetensors"))
    assert state["fc.weight"].dtype == torch.bfloat16 and state["lm_head.weight"].dtype == torch.bfloat16
    assert state["d2t"].dtype == torch.int64  # offsets stay integers
    assert json.loads((tmp_path / "bf16" / "config.json").read_text())["torch_dtype"] == "bfloat16"
    export_eagle3(head, tmp_path / "fp32", model.config, model.lm_head.weight.detach(), dtype=torch.float32)
    assert load_file(str(tmp_path / "fp32" / "model.safetensors"))["fc.weight"].dtype == torch.float32


@pytest.mark.parametrize("layout", ["eagle3", "speculators"])
def test_a_full_vocabulary_export_writes_no_d2t(layout, tmp_path):
    # vLLM's Eagle3LlamaForCausalLM has a draft_id_to_target_id buffer only when draft_vocab_size < vocab_size
    # and refuses a d2t it has nowhere to put; SGLang, SpecForge and speculators read a missing d2t as identity
    model = tiny_model(layers=6)
    export_eagle3(_head(model, (1, 2, 4)), tmp_path / "out", model.config, model.lm_head.weight.detach(),
                  layout=layout, verifier="p")
    hf = json.loads((tmp_path / "out" / "config.json").read_text())
    assert hf["draft_vocab_size"] == hf.get("vocab_size", 32) == 32
    state = load_file(str(tmp_path / "out" / "model.safetensors"))
    assert "d2t" not in state and "t2d" not in state
    assert torch.equal(state["lm_head.weight"], model.lm_head.weight.detach())
    back = load_head(tmp_path / "out")  # specrl reads it back: draft id = target id
    assert back.target_ids.tolist() == list(range(32))


def test_a_head_over_every_id_in_another_order_exports_its_rows_in_target_order(tmp_path):
    # Vd = V = 32 with d2t a permutation: the export puts row d at target id d + d2t[d] and drops d2t
    model = tiny_model(layers=6)
    perm = list(range(31, -1, -1))
    head = _head(model, (1, 2, 4), ids=list(range(32)))
    with torch.no_grad():
        head.d2t.copy_(torch.tensor(perm) - torch.arange(32))
        head.lm_head.weight.copy_(model.lm_head.weight.detach()[perm])
    export_eagle3(head, tmp_path / "out", model.config)
    state = load_file(str(tmp_path / "out" / "model.safetensors"))
    assert "d2t" not in state
    assert torch.equal(state["lm_head.weight"], model.lm_head.weight.detach())


def test_full_vocabulary_export_needs_the_policy(tmp_path):
    model = tiny_model(layers=6)
    with pytest.raises(ValueError, match="pass the policy"):
        export_eagle3(_head(model, (1, 2, 4)), tmp_path / "out", model.config)


def test_a_draft_vocabulary_that_does_not_fit_the_target_is_refused(tmp_path):
    model = tiny_model(layers=6)
    other = tiny_model(layers=6, vocab=48)  # another tokenizer: 48 ids
    head = _head(other, (1, 2, 4), ids=[2, 40, 41, 47])
    with pytest.raises(ValueError, match="drafts over 4 tokens of a 48-token vocabulary, but the policy has 32"):
        export_eagle3(head, tmp_path / "out", model.config)
    corrupt = _head(model, (1, 2, 4), ids=[2, 3, 9, 30])
    corrupt.d2t[3] = 40  # draft id 3 -> target id 3 + 40 = 43, past the policy's 32 ids
    with pytest.raises(ValueError, match=r"target ids \[43\], outside the policy's vocabulary 0..31"):
        export_eagle3(corrupt, tmp_path / "out", model.config)
    assert not (tmp_path / "out").exists()


def test_cli_refuses_a_head_whose_draft_vocabulary_does_not_fit_the_policy(tmp_path, capsys):
    other = tiny_model(layers=6, vocab=48)
    save_head(_head(other, (1, 2, 4), ids=[2, 40, 41, 47]), tmp_path / "head")
    save_model(tiny_model(layers=6), tmp_path / "policy")
    assert cli_main(["export-drafter", str(tmp_path / "head"), "--model", str(tmp_path / "policy"),
                     "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "drafts over 4 tokens of a 48-token vocabulary, but the policy has 32" in err[0]
    assert not (tmp_path / "out").exists()


def test_cli_exports_in_the_heads_dtype_and_the_speculators_layout(tmp_path, capsys):
    model = tiny_model(layers=6)
    save_model(model, tmp_path / "policy")
    save_head(_head(model, (1, 2, 4)), tmp_path / "head", dtype=torch.bfloat16)
    assert cli_main(["export-drafter", str(tmp_path / "head"), "--model", str(tmp_path / "policy"),
                     "--out", str(tmp_path / "out"), "--layout", "speculators"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["dtype"] == "bfloat16" and out["layout"] == "speculators"
    hf = json.loads((tmp_path / "out" / "config.json").read_text())
    assert hf["speculators_config"]["verifier"]["name_or_path"] == str(tmp_path / "policy")
    assert load_file(str(tmp_path / "out" / "model.safetensors"))["layers.0.hidden_norm.weight"].dtype == torch.bfloat16


def test_cli_refuses_the_last_layer_unless_allowed(tmp_path, capsys):
    model = tiny_model(layers=6)
    save_model(model, tmp_path / "policy")
    save_head(_head(model, (1, 3, 5)), tmp_path / "head")
    args = ["export-drafter", str(tmp_path / "head"), "--model", str(tmp_path / "policy"), "--out",
            str(tmp_path / "out")]
    assert cli_main(args) == 2
    assert "--allow-last-layer" in capsys.readouterr().err
    assert cli_main(args + ["--allow-last-layer"]) == 0
    assert json.loads((tmp_path / "out" / "config.json").read_text())["eagle_aux_hidden_state_layer_ids"] == [2, 4, 6]


def test_cli_exports_a_run_with_a_reduced_vocabulary(tmp_path, capsys):
    model = tiny_model(layers=6)
    ckpt = tmp_path / "run" / "checkpoints" / "step_000002"
    save_model(model, ckpt / "model")
    save_head(_head(model, (1, 2, 4), seed=2), ckpt / "drafter")
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
