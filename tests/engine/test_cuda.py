"""The engine and trainer on a CUDA GPU (skipped without one; CI has none).

The CPU suite proves exactness on the CPU; these tests repeat its checks where the kernels differ: every
speculative method's greedy tokens, logprobs and stopping lengths equal SD off's on the GPU, the sampled
distribution matches the exact enumeration (chi-square), the GPU's logprobs agree with the CPU's, bf16 runs,
and a GRPO step trains on the GPU.
"""
import copy

import pytest
import torch

from specrl import LLM, SamplingParams
from tests.drafters.test_exactness import (ALL, PROMPT, SETTINGS, _skip_unavailable, assert_same_as_sd_off, build,
                                       peaky_model, sample_first3)
from tests.helpers import tiny_model
from tests.stats import assert_matches, exact_distribution

pytestmark = pytest.mark.gpu
CUDA = "cuda"


def on_gpu(model):
    return copy.deepcopy(model).to(CUDA)


@pytest.fixture(autouse=True)
def no_tf32():
    # fp32 exactness checks need fp32 matmuls (TF32 rounds the mantissa to 10 bits)
    old = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = old


@pytest.mark.parametrize("method", ALL)
def test_greedy_tokens_logprobs_and_lengths_match_sd_off_on_gpu(method, tmp_path):
    _skip_unavailable(method)
    model = on_gpu(tiny_model(seed=3, vocab=32, hidden=48, layers=2, max_pos=40))
    prompts = [[0] + [(7 * i + j) % 30 + 2 for j in range(3 + 2 * i)] for i in range(7)]
    params = SamplingParams(temperature=0.0, max_tokens=25, stop_token_ids=[31, 16])
    base = LLM(model, max_num_seqs=4).generate(prompts, params)
    llm = build(method, model, tmp_path, max_num_seqs=4)
    assert next(llm.model.parameters()).device.type == CUDA
    assert assert_same_as_sd_off(base, llm.generate(prompts, params), 1e-4) == {"stop", "length"}


def test_gpu_logprobs_equal_the_cpu_engines():
    model = tiny_model(seed=3, vocab=32, hidden=48, layers=2, max_pos=64)
    prompts = [[0, 5, 7, 9], [0, 3]]
    params = SamplingParams(temperature=0.0, max_tokens=30, ignore_eos=True)
    cpu = LLM(model, max_num_seqs=4).generate(prompts, params)
    gpu = LLM(on_gpu(model), max_num_seqs=4).generate(prompts, params)
    for a, b in zip(cpu, gpu):
        assert a.outputs[0].token_ids == b.outputs[0].token_ids
        assert max(abs(x - y) for x, y in zip(a.outputs[0].logprobs, b.outputs[0].logprobs)) < 1e-4


@pytest.mark.parametrize("setting", list(SETTINGS))
@pytest.mark.parametrize("method", ["ngram", "suffix", "draft_model", "eagle3", "mtp", "uniform_q"])
def test_sampled_distribution_is_exact_on_gpu(method, setting, tmp_path):
    _skip_unavailable(method)
    model = peaky_model()
    dist = exact_distribution(model, PROMPT, 3, **{k: SETTINGS[setting][k] for k in ("temperature", "top_k", "top_p")})
    llm = build(method, on_gpu(model), tmp_path, max_num_seqs=1024)
    samples = sample_first3(llm, SETTINGS[setting])
    assert_matches(samples, dist)
    drafted, accepted = llm.stats["draft_tokens"], llm.stats["accepted_tokens"]
    assert 0 < accepted < drafted, f"{method}: {accepted} of {drafted} drafts accepted"


def test_bf16_engine_runs_and_tracks_fp32():
    model = tiny_model(seed=3, vocab=32, hidden=48, layers=2, max_pos=64)
    prompts = [[0, 5, 7, 9]] * 3
    params = SamplingParams(temperature=1.0, max_tokens=20, ignore_eos=True, seed=1)
    bf = LLM(on_gpu(model).to(torch.bfloat16), max_num_seqs=4).generate(prompts, params)
    for r in bf:
        o = r.outputs[0]
        assert len(o.token_ids) == 20
        ids = torch.tensor([r.prompt_token_ids + o.token_ids])
        with torch.no_grad():
            logp = torch.log_softmax(model(ids).logits[0, len(r.prompt_token_ids) - 1:-1].double(), -1)
        expected = logp.gather(-1, torch.tensor(o.token_ids)[:, None])[:, 0]
        # bf16 weights move logprobs by ~1e-2; a wrong token or position would move them by ~1
        assert (torch.tensor(o.logprobs, dtype=torch.float64) - expected).abs().max() < 0.1


@pytest.mark.parametrize("bf16", [False, True])
def test_grpo_steps_train_on_gpu(bf16, tmp_path):
    from specrl.cli.train import main
    from specrl.pipeline.run_dir import read_jsonl
    from tests.pipeline.fixtures import make_setup, overrides
    out = tmp_path / "run"
    args = overrides(*make_setup(tmp_path), out, **{"device": "cuda", "schedule.max_steps": 3,
                                                     "rollout.n": 8, "rollout.prompts_per_step": 4,
                                                     "rollout.dtype": "bfloat16" if bf16 else "float32",
                                                     "optim.autocast": bf16})
    assert main(args) == 0
    rows = read_jsonl(out / "metrics.jsonl")
    assert len(rows) == 3
    assert any(r["reward_std"] > 0 and r["grad_norm"] > 0 for r in rows)  # a learning signal, and it trained
    for r in rows:
        assert r["loss"] == r["loss"] and r["logprob_diff"] < (0.05 if bf16 else 1e-4)  # no NaN; on-policy
