"""Hot swap of drafter weights: all or nothing, lossless mid-generation, and it changes acceptance."""
from __future__ import annotations

import pytest
import torch

from specrl import LLM, SamplingParams, SpecConfig
from specrl.drafters.weights import drafter_module, drafter_version, load_drafter_weights
from specrl.engine.methods import build_drafter
from specrl.optim import OptimSettings
from tests.helpers import tiny_model

METHODS = ["eagle3", "draft_model", "mtp"]
PROMPTS = [[0] + [(7 * i + j) % 30 + 2 for j in range(3 + 2 * i)] for i in range(5)]


class SwapAt:
    """Wraps an engine drafter and swaps `named` into it at its `at`-th propose (mid-generation)."""

    def __init__(self, inner, at: int, named: dict, version: int = 1):
        self.inner, self.at, self.named, self.version, self.calls = inner, at, named, version, 0
        self.hidden_layers = inner.hidden_layers

    def observe(self, fwd):
        self.inner.observe(fwd)

    def propose(self, seqs, k):
        self.calls += 1
        if self.calls == self.at:
            load_drafter_weights(self.inner, self.named.items(), self.version)
            if hasattr(self.inner, "cached"):
                assert self.inner.cached == [0] * len(self.inner.cached)  # stale: re-prefilled right below
        return self.inner.propose(seqs, k)

    def release(self, seq):
        self.inner.release(seq)


def _engine_drafter(method, model, slots=4):
    spec = SpecConfig(method=method, draft_model="scratch", num_speculative_tokens=3)
    return build_drafter(spec, model, slots, model.config.max_position_embeddings)


def _noisy(drafter, scale, seed=0):
    gen = torch.Generator().manual_seed(seed)
    out, by_storage = {}, {}  # tied tensors (embedding = lm_head) get the same noise
    for k, v in drafter_module(drafter).state_dict().items():
        if v.data_ptr() not in by_storage:
            by_storage[v.data_ptr()] = v + scale * torch.randn(v.shape, generator=gen) if v.is_floating_point() \
                else v.clone()
        out[k] = by_storage[v.data_ptr()]
    return out


@pytest.mark.parametrize("method", METHODS)
def test_swap_mid_generation_is_lossless(method):
    model = tiny_model(seed=3, vocab=32, hidden=48, layers=3, max_pos=40)
    params = SamplingParams(temperature=0.0, max_tokens=16, stop_token_ids=[31, 16])
    base = LLM(model, max_num_seqs=4).generate(PROMPTS, params)
    inner = _engine_drafter(method, model)
    swap = SwapAt(inner, at=3, named=_noisy(inner, 0.3), version=5)
    llm = LLM(model, max_num_seqs=4, drafter=swap)
    got = llm.generate(PROMPTS, params)
    for r0, r1 in zip(base, got):
        assert r1.outputs[0].token_ids == r0.outputs[0].token_ids
        assert max(abs(a - b) for a, b in zip(r0.outputs[0].logprobs, r1.outputs[0].logprobs)) < 1e-5
    assert swap.calls > 3 and drafter_version(inner) == 5
    for k, v in drafter_module(inner).state_dict().items():
        assert torch.equal(v, swap.named[k]), k


def _captured(model, prompts, outs, layers):
    """The policy's forward over its own greedy outputs, as the policy trainer's forward hook would hand it over."""
    from specrl.drafters.training.capture import Capture
    from specrl.trainer.trainer import ForwardInfo, collate
    responses = [o.outputs[0].token_ids for o in outs]
    batch = collate(prompts, responses, [o.outputs[0].logprobs for o in outs], torch.zeros(len(prompts)), 0)
    hook = Capture(layers)
    with torch.no_grad():
        out = model(batch.input_ids, hidden_layers=hook.hidden_layers)
        hook(ForwardInfo(out, batch.input_ids, batch.mask, torch.arange(len(prompts)), model.lm_head))
    return hook.batches


@pytest.mark.parametrize("method", METHODS)
def test_online_trained_weights_swapped_in_raise_acceptance(method):
    from specrl.drafters.training.online import OnlineDrafterTrainer
    from specrl.config.rollout import DrafterConfig
    model = tiny_model(seed=3, vocab=32, hidden=48, layers=3, max_pos=40, scale=2.0)
    params = SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True)
    inner = _engine_drafter(method, model)
    llm = LLM(model, max_num_seqs=4, drafter=inner)
    outs = llm.generate(PROMPTS, params)
    before = llm.stats["acceptance_length"]
    online = OnlineDrafterTrainer.from_drafter(inner, model,
                                               DrafterConfig(optim=OptimSettings(lr=1e-2), accept_coef=1.0))
    data = _captured(model, PROMPTS, outs, online.capture_layers)
    for _ in range(25):
        online.step(data)
    load_drafter_weights(inner, online.named_weights(), online.version)
    llm.reset_stats()
    assert [o.outputs[0].token_ids for o in llm.generate(PROMPTS, params)] == [o.outputs[0].token_ids for o in outs]
    assert llm.stats["acceptance_length"] > before + 0.3


def test_mismatched_weights_are_refused_and_the_engine_keeps_its_own():
    model = tiny_model(layers=3)
    inner = _engine_drafter("eagle3", model)
    kept = {k: v.clone() for k, v in drafter_module(inner).state_dict().items()}
    bad_shape = _noisy(inner, 1.0)
    bad_shape["fc.weight"] = torch.zeros(3, 3)
    with pytest.raises(ValueError, match=r"shape mismatches \['fc.weight: got \(3, 3\), the engine has \(32, 96\)"):
        load_drafter_weights(inner, bad_shape.items(), 1)
    renamed = _noisy(inner, 1.0)
    renamed["extra.weight"] = renamed.pop("norm.weight")
    with pytest.raises(ValueError, match=r"missing \['norm.weight'\], unexpected \['extra.weight'\]"):
        load_drafter_weights(inner, renamed.items(), 1)
    for k, v in drafter_module(inner).state_dict().items():
        assert torch.equal(v, kept[k]), k  # nothing was copied before the check failed
    assert drafter_version(inner) == 0


def test_tied_weights_must_agree():
    model = tiny_model(layers=3)  # tied embeddings: the scratch draft model shares embedding and lm_head
    inner = _engine_drafter("draft_model", model)
    named = _noisy(inner, 0.1)
    named["lm_head.weight"] = named["lm_head.weight"] + 1.0
    with pytest.raises(ValueError, match="model.embed_tokens.weight: tied to lm_head.weight in the engine.s drafter"):
        load_drafter_weights(inner, named.items(), 1)


@pytest.mark.parametrize("method", ["ngram", "suffix"])
def test_model_free_drafters_have_no_weights(method):
    llm = LLM(tiny_model(), spec=SpecConfig(method=method))
    with pytest.raises(TypeError, match="has no weights to swap: only draft_model, eagle3, mtp drafters do"):
        load_drafter_weights(llm.drafter, [], 1)


def test_auto_swaps_its_model_drafter():
    model = tiny_model(layers=3)
    llm = LLM(model, spec=SpecConfig(method="auto", drafters=("suffix", "eagle3"), draft_model="scratch"))
    assert drafter_module(llm.drafter) is llm.drafter.inner.module and llm.drafter.inner.method == "eagle3"
    named = _noisy(llm.drafter.inner, 0.1)
    load_drafter_weights(llm.drafter, named.items(), 2)  # through the pool: the weights reach its EAGLE-3 head
    for k, v in llm.drafter.inner.module.state_dict().items():
        assert torch.equal(v, named[k]), k
    assert drafter_version(llm.drafter) == 2 and llm.drafter.inner.version == 2
