"""`pipeline.backend=vllm` on the shipped policy, SD off: one engine for the module (an engine start costs
tens of seconds). Tokens and logprobs against specrl's engine and the trainer's scoring, refits, refusals."""
from __future__ import annotations

import json

import pytest
import torch

pytest.importorskip("vllm", exc_type=ImportError)

from specrl.config import ConfigError, load_config  # noqa: E402
from specrl.engine import LLM, SamplingParams  # noqa: E402
from specrl.engine.llm import GenerationCancelled  # noqa: E402
from specrl.model import load_model  # noqa: E402
from specrl.pipeline.vllm.build import check_loadable, vllm_backend  # noqa: E402
from specrl.pipeline.vllm.refit import RefitError  # noqa: E402
from specrl.rl.logprobs import token_logprobs  # noqa: E402
from specrl.tasks import default_policy_path, make_problems  # noqa: E402
from specrl.config.run import TrainConfig  # noqa: E402
from specrl.trainer.data import PromptEncoder  # noqa: E402
from tests.pipeline.fixtures import in_process_vllm  # noqa: E402

GREEDY = SamplingParams(temperature=0.0, max_tokens=48)


@pytest.fixture(scope="module")
def policy():
    return load_model(str(default_policy_path()), dtype=torch.float32)


@pytest.fixture(scope="module")
def prompts():
    encoder = PromptEncoder(default_policy_path())
    return [encoder.encode(p.prompt) for p in make_problems(4, seed=7, split="test")]


@pytest.fixture(scope="module")
def backend():
    cfg = load_config(TrainConfig, None, ["rollout.spec.method=null", "rollout.max_num_seqs=16"])
    with in_process_vllm():
        be = vllm_backend(default_policy_path(), cfg)
    yield be
    be.close()


def _tokens(outs) -> list[list[int]]:
    return [c.token_ids for r in outs for c in r.outputs]


def _scored(model, prompt: list[int], tokens: list[int], temperature: float) -> torch.Tensor:
    """The trainer's view: log softmax(logits / T) of each completion token given its prefix -> [len]."""
    ids = torch.tensor([prompt + tokens])  # [1, P + T]
    with torch.no_grad():
        logits = model(ids).logits[:, len(prompt) - 1:-1]  # [1, T, V]
    return token_logprobs(logits, torch.tensor([tokens]), temperature)[0]  # [T]


def test_greedy_tokens_and_logprobs_equal_specrls_engine(backend, prompts, policy):
    ours = backend.generate(prompts, [GREEDY] * len(prompts))
    local = LLM(policy).generate(prompts, GREEDY)
    assert _tokens(ours) == _tokens(local)
    for a, b in zip(ours, local):
        assert a.outputs[0].finish_reason == b.outputs[0].finish_reason
        assert max(abs(x - y) for x, y in zip(a.outputs[0].logprobs, b.outputs[0].logprobs)) < 1e-4
        assert a.outputs[0].weight_versions == [(0, backend.weights_version)]
    stats = backend.stats()
    assert stats["generated_tokens"] == sum(map(len, _tokens(ours))) and stats["acceptance_length"] == 1.0


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_sampled_logprobs_are_the_trainers(backend, prompts, policy, temperature):
    params = SamplingParams(n=3, temperature=temperature, max_tokens=32, seed=11)
    outs = backend.generate(prompts[:2], [params] * 2)
    assert [len(r.outputs) for r in outs] == [3, 3] and [c.index for c in outs[0].outputs] == [0, 1, 2]
    for r in outs:
        for c in r.outputs:
            got = torch.tensor(c.logprobs)
            assert torch.allclose(got, _scored(policy, r.prompt_token_ids, c.token_ids, temperature), atol=1e-4)
    again = backend.generate(prompts[:2], [params] * 2)  # per-request seeds: the same samples
    assert _tokens(again) == _tokens(outs)


def test_refit_changes_greedy_output_and_back(backend, prompts, policy):
    before = _tokens(backend.generate(prompts, [GREEDY] * len(prompts)))
    torch.manual_seed(0)
    moved = load_model(str(default_policy_path()), dtype=torch.float32)
    with torch.no_grad():
        for p in moved.parameters():  # once each: the tied lm_head is the embedding
            if p.dim() == 2:
                p.add_(0.05 * torch.randn_like(p))
    backend.update_weights(moved.state_dict().items(), 5)
    assert backend.weights_version == 5 and backend.stats()["weight_transfer_s"] > 0
    changed = backend.generate(prompts, [GREEDY] * len(prompts))
    assert _tokens(changed) == _tokens(LLM(moved).generate(prompts, GREEDY)) != before  # the new weights, all
    assert changed[0].outputs[0].weight_versions == [(0, 5)]
    backend.update_weights(policy.state_dict().items(), 6)
    assert _tokens(backend.generate(prompts, [GREEDY] * len(prompts))) == before


def test_a_refit_that_does_not_fit_is_refused_and_the_old_weights_serve(backend, prompts, policy):
    before = _tokens(backend.generate(prompts[:1], [GREEDY]))
    version = backend.weights_version
    wrong = {k: (v[:, :-1] if v.dim() == 2 else v) for k, v in policy.state_dict().items()}
    with pytest.raises(RefitError, match=r"does not fit the engine's model: .*keeps its current weights"):
        backend.update_weights(wrong.items(), version + 1)
    assert backend.weights_version == version
    assert _tokens(backend.generate(prompts[:1], [GREEDY])) == before


def test_cancel_stops_generate_and_every_later_call(backend, prompts):
    backend.cancel()
    with pytest.raises(GenerationCancelled):
        backend.generate(prompts, [GREEDY] * len(prompts))
    assert not backend.llm.llm_engine.has_unfinished_requests()  # its requests were aborted
    backend._cancelled = False  # the module's engine serves the remaining tests


def test_top_p_is_refused_with_the_reason(backend, prompts):
    with pytest.raises(ValueError, match=r"top_p=0.9, top_k=-1: with pipeline.backend=vllm only top_p=1.0"):
        backend.generate(prompts[:1], [SamplingParams(top_p=0.9)])


def test_a_checkpoint_vllm_cannot_load_is_one_clear_line(tmp_path):
    cfg = json.loads((default_policy_path() / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**cfg, "architectures": ["SpecrlMadeUpForCausalLM"]}))
    with pytest.raises(ValueError, match=r"architectures=\['SpecrlMadeUpForCausalLM'\] has no vLLM model class"):
        check_loadable(tmp_path)


def test_in_flight_updates_are_refused(tmp_path):
    cfg = load_config(TrainConfig, None, ["pipeline.mode=async", "pipeline.inflight_updates=true"])
    with pytest.raises(ConfigError, match="inflight_updates=true is invalid with pipeline.backend=vllm"):
        vllm_backend(default_policy_path(), cfg)


def test_a_missing_refit_dir_is_refused():
    cfg = load_config(TrainConfig, None, ["vllm.refit_dir=/nonexistent/specrl"])
    with pytest.raises(ConfigError, match=r"vllm.refit_dir='/nonexistent/specrl' is not a directory"):
        vllm_backend(default_policy_path(), cfg)


def test_an_in_process_engine_leaves_this_process_as_it_was(backend, keep_threads):
    """The other tests of the suite run in this process after it: threads settable, environment read anew."""
    import os

    import vllm.envs
    other = 1 if torch.get_num_threads() != 1 else 2
    torch.set_num_threads(other)
    assert torch.get_num_threads() == other  # vLLM's CPU worker had replaced set_num_threads by a no-op
    assert not vllm.envs._is_envs_cache_enabled() and "VLLM_ENABLE_V1_MULTIPROCESSING" not in os.environ
