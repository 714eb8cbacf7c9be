"""MTP drafter and modules: lossless greedy decoding, exact depth-1 drafts, checkpoints, bad input."""
import json
from dataclasses import replace

import pytest
import torch

from specrl import LLM, SamplingParams, SpecConfig
from specrl.drafters.mtp.drafter import save_mtp_only
from specrl.model import load_model, save_model
from specrl.model.mtp import MTPStack
from tests.drafters.factories import propose_after_steps
from tests.helpers import tiny_model

PARAMS = SamplingParams(temperature=0.0, max_tokens=25, stop_token_ids=[9])


def target(modules=2, seed=3):
    return tiny_model(seed=seed, vocab=32, hidden=48, layers=2, max_pos=40, num_mtp_modules=modules)


def prompts(batch):
    return [[0] + [(7 * i + j) % 30 + 2 for j in range(3 + 2 * i)] for i in range(batch)]


def random_mtp_spec(k=4):
    """Random MTP modules that live in the target itself."""
    return SpecConfig(method="mtp", num_speculative_tokens=k)


def random_mtp_dir_spec(model, tmp_path, modules=2, k=4, seed=7):
    """Random MTP modules for any target, in an MTP-only directory (for the exactness suite's factories)."""
    torch.manual_seed(seed)
    cfg = replace(model.config, num_mtp_modules=modules)
    stack = MTPStack(cfg)
    with torch.no_grad():
        for p in stack.parameters():
            if p.dim() > 1:
                p.normal_(0, 1 / p.shape[-1] ** 0.5)
    save_mtp_only(stack, model.config, tmp_path / "mtp")
    return SpecConfig(method="mtp", draft_model=str(tmp_path / "mtp"), num_speculative_tokens=k)


@pytest.mark.parametrize("batch", [1, 7])
def test_greedy_tokens_match_sd_off(batch):
    model = target()
    base = LLM(model, max_num_seqs=4).generate(prompts(batch), PARAMS)
    # k=4 > D=2: depths 3 and 4 reuse the last module
    got = LLM(model, max_num_seqs=4, spec=random_mtp_spec(4)).generate(prompts(batch), PARAMS)
    for a, b in zip(base, got):
        assert b.outputs[0].token_ids == a.outputs[0].token_ids
        assert b.outputs[0].finish_reason == a.outputs[0].finish_reason
        assert max(abs(x - y) for x, y in zip(a.outputs[0].logprobs, b.outputs[0].logprobs)) < 1e-5


def test_first_draft_equals_cache_free_module_one():
    # module 1's cache is exact over the accepted prefix, so draft 1 must equal the teacher-forced
    # cache-free pass: module 1 at the last verified position p reads h^0_p and the last token t_{p+1}
    model = target()
    llm = LLM(model, max_num_seqs=4, spec=random_mtp_spec(3))
    running, prop = propose_after_steps(llm, prompts(4), seed=2)
    with torch.no_grad():
        for b, s in enumerate(running):
            ids = torch.tensor([s.tokens])  # [1, n]
            h0 = model(ids).last_hidden  # [1, n, D]
            logits = model.mtp.unroll(h0, ids, model.embed, model.lm_head, 1)[0]  # [1, n-1, V]
            assert int(prop.tokens[b, 0]) == int(logits[0, -1].argmax())


def test_save_load_round_trip(tmp_path):
    model = target()
    save_model(model, tmp_path / "ckpt")
    hf = json.loads((tmp_path / "ckpt" / "config.json").read_text())
    assert hf["num_nextn_predict_layers"] == 2
    loaded = load_model(tmp_path / "ckpt")
    assert loaded.mtp is not None and loaded.mtp.depth == 2
    for name, v in model.state_dict().items():
        assert torch.equal(loaded.state_dict()[name], v), name
    assert any(k.startswith("mtp.layers.1.eh_proj") for k in loaded.state_dict())


def test_transformers_ignores_mtp_weights(tmp_path):
    transformers = pytest.importorskip("transformers")
    model = target()
    save_model(model, tmp_path / "ckpt")
    hf = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "ckpt", torch_dtype=torch.float32)
    ids = torch.tensor([[0, 5, 7, 9, 11]])
    with torch.no_grad():
        ours = model(ids).logits
        theirs = hf(ids).logits
    assert (ours - theirs).abs().max() < 1e-4


def test_mtp_only_directory_attaches_to_a_plain_policy(tmp_path):
    plain = tiny_model(seed=3, vocab=32, hidden=48, layers=2, max_pos=40)
    spec = random_mtp_dir_spec(plain, tmp_path, modules=1, k=3)
    base = LLM(plain, max_num_seqs=4).generate(prompts(3), PARAMS)
    got = LLM(plain, max_num_seqs=4, spec=spec).generate(prompts(3), PARAMS)
    assert [r.outputs[0].token_ids for r in got] == [r.outputs[0].token_ids for r in base]


def test_policy_without_modules_says_how_to_get_them():
    plain = tiny_model(seed=3, vocab=32, hidden=48, layers=2, max_pos=40)
    with pytest.raises(ValueError, match="has none .*specrl train-drafter --method mtp"):
        LLM(plain, spec=SpecConfig(method="mtp"))


def test_modules_of_another_vocabulary_are_refused(tmp_path):
    other = tiny_model(seed=3, vocab=40, hidden=48, layers=2, max_pos=40, num_mtp_modules=1)
    save_mtp_only(other.mtp, other.config, tmp_path / "mtp")
    plain = tiny_model(seed=3, vocab=32, hidden=48, layers=2, max_pos=40)
    with pytest.raises(ValueError, match="do not fit the policy.*vocab_size.*40, 32"):
        LLM(plain, spec=SpecConfig(method="mtp", draft_model=str(tmp_path / "mtp")))


def test_missing_mtp_checkpoint(tmp_path):
    with pytest.raises(FileNotFoundError, match="no MTP checkpoint"):
        LLM(target(0), spec=SpecConfig(method="mtp", draft_model=str(tmp_path / "nope")))
