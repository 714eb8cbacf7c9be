"""KV cache sizing from a memory budget, its errors, and the engine's dtype (bf16 weights/KV, fp32 sampling)."""
from __future__ import annotations

import copy
import os

import pytest
import torch

from specrl import LLM, SamplingParams
from specrl.engine.memory import check_dtype, kv_bytes_per_token, kv_zeros, parse_bytes, plan_kv_cache, release_kv
from specrl.engine.methods import MAX_SPEC_TOKENS
from tests.helpers import save_tiny, tiny_config, tiny_model

SPARE = MAX_SPEC_TOKENS + 1
# tiny model: 2 layers x 2 kv heads x head_dim 8, keys + values, fp32 = 2 * 2 * 2 * 8 * 4 bytes per position
PER_TOKEN = 256


def test_bytes_per_token_and_sizes():
    assert kv_bytes_per_token(tiny_config(), torch.float32) == PER_TOKEN
    assert kv_bytes_per_token(tiny_config(), torch.bfloat16) == PER_TOKEN // 2
    assert parse_bytes("2GiB") == 2 * 2 ** 30 and parse_bytes("1.5k") == 1500 and parse_bytes(4096) == 4096
    with pytest.raises(ValueError, match="kv_cache_memory='lots' is not a size"):
        parse_bytes("lots")


def test_budget_sets_max_model_len():
    # 4 slots x (30 + spare) positions fit exactly: the budget picks max_model_len 30 < the model's 64
    llm = LLM(tiny_model(max_pos=64), max_num_seqs=4, kv_cache_memory=4 * (30 + SPARE) * PER_TOKEN)
    assert (llm.max_num_seqs, llm.max_model_len) == (4, 30)
    assert llm.engine.runner.cache[0][0].shape == (4, 2, 30 + SPARE, 8)
    assert llm.kv_plan.bytes == 4 * (30 + SPARE) * PER_TOKEN and not llm.kv_plan.hard_limit


def test_budget_with_max_model_len_gives_fewer_slots():
    # room for 2.5 sequences of 40 positions: 2 slots, the context the user asked for
    plan = plan_kv_cache(tiny_config(), torch.float32, 8, 40, int(2.5 * (40 + SPARE) * PER_TOKEN), SPARE)
    assert (plan.num_slots, plan.max_model_len, plan.hard_limit) == (2, 40, True)


def test_large_budget_is_capped_by_the_model():
    plan = plan_kv_cache(tiny_config(max_pos=64), torch.float32, 8, None, 10 ** 9, SPARE)
    assert (plan.num_slots, plan.max_model_len, plan.hard_limit) == (8, 64, True)
    assert LLM(tiny_model(max_pos=64)).max_model_len == 64  # default: a fraction of the free memory


def test_budget_too_small_names_the_knobs():
    with pytest.raises(ValueError, match="too small for max_num_seqs=4.*raise kv_cache_memory"):
        LLM(tiny_model(), max_num_seqs=4, kv_cache_memory=4 * SPARE * PER_TOKEN)
    with pytest.raises(ValueError, match="cannot hold one sequence of max_model_len=40.*raise kv_cache_memory"):
        LLM(tiny_model(), max_model_len=40, kv_cache_memory=1000)
    with pytest.raises(ValueError, match="memory_utilization=1.5: expected a fraction"):
        LLM(tiny_model(), memory_utilization=1.5)


def test_request_beyond_budget_context_is_an_error():
    llm = LLM(tiny_model(max_pos=64), max_num_seqs=2, kv_cache_memory=2 * (30 + SPARE) * PER_TOKEN)
    with pytest.raises(ValueError, match=r"request 1 needs 32 positions \(prompt 6 \+ max_tokens 26\).*"
                                         r"max_model_len=30.*raise kv_cache_memory"):
        llm.generate([[3, 4], [3, 4, 5, 6, 7, 8]], SamplingParams(max_tokens=26))
    out = llm.generate([[3, 4]], SamplingParams(max_tokens=28, ignore_eos=True))
    assert len(out[0].outputs[0].token_ids) == 28


def test_explicit_max_model_len_still_stops_at_the_context_limit():
    out = LLM(tiny_model(), max_model_len=10).generate([[3, 4]], SamplingParams(max_tokens=30, ignore_eos=True))
    assert len(out[0].outputs[0].token_ids) == 8 and out[0].outputs[0].finish_reason == "length"


def test_bad_dtypes(tmp_path):
    path = save_tiny(tmp_path / "m", vocab=32)
    with pytest.raises(ValueError, match=r"dtype='float8' is unknown: use one of \['auto', 'float32'"):
        LLM(str(path), dtype="float8")
    with pytest.raises(ValueError, match="dtype='float16' is not supported on the CPU"):
        LLM(str(path), dtype="float16")
    with pytest.raises(ValueError, match="dtype=torch.int32 is not a floating-point dtype"):
        check_dtype("cpu", torch.int32)


def test_bf16_engine_close_to_fp32_with_fp32_logprobs(tmp_path):
    policy = tiny_model(seed=3, vocab=32)
    prompts = [[3, 4, 5], [6, 7]]
    params = SamplingParams(temperature=0.0, max_tokens=10, ignore_eos=True)
    ref = LLM(copy.deepcopy(policy)).generate(prompts, params)
    llm = LLM(copy.deepcopy(policy).to(torch.bfloat16))
    assert llm.engine.runner.cache[0][0].dtype == torch.bfloat16 and llm.kv_plan.bytes % (PER_TOKEN // 2) == 0
    out = llm.generate(prompts, params)
    for a, b in zip(ref, out):
        a, b = a.outputs[0], b.outputs[0]
        same = next((i for i, (x, y) in enumerate(zip(a.token_ids, b.token_ids)) if x != y), len(a.token_ids))
        assert same >= 1
        # logprobs are computed from fp32-upcast logits: close to the fp32 engine's, not rounded to bf16
        assert max(abs(x - y) for x, y in zip(a.logprobs[:same], b.logprobs[:same])) < 0.05
    # the path-loading front takes the dtype too
    assert next(LLM(str(save_tiny(tmp_path / "m", vocab=32)), dtype="bfloat16").model.parameters()).dtype \
        == torch.bfloat16


def test_bf16_engine_copy_and_weight_sync():
    policy = tiny_model(seed=1)
    engine = copy.deepcopy(policy).to(torch.bfloat16)
    assert {p.dtype for p in engine.parameters()} == {torch.bfloat16}
    assert engine.lm_head.weight is engine.model.embed_tokens.weight  # still tied
    llm = LLM(engine)
    with torch.no_grad():
        for p in policy.parameters():
            p.add_(0.01)
    llm.update_weights(policy.state_dict())  # fp32 trainer weights, cast as they are copied in
    want = {k: v.to(torch.bfloat16) for k, v in policy.state_dict().items()}
    assert all(torch.equal(v, want[k]) for k, v in llm.model.state_dict().items())


def _rss_bytes() -> int:
    return int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="needs /proc to read resident memory")
def test_cpu_kv_cache_is_resident_only_where_written():
    """A 512 MiB cache costs resident memory for the positions written, not for its whole size."""
    x = kv_zeros((64, 4, 8192, 64), "cpu", torch.float32)  # 512 MiB of address space
    assert x.shape == (64, 4, 8192, 64) and x.dtype == torch.float32
    before = _rss_bytes()
    x[:, :, :16] = 1.0  # one 4 KiB page per (slot, head) row: 1 MiB
    grown = _rss_bytes() - before
    assert 2 ** 20 <= grown < 32 * 2 ** 20, grown
    # read after measuring: a Linux kernel maps untouched pages to its shared zero page on a read, but a
    # sandbox kernel (CI's) may commit them; the engine reads no position past its longest running sequence
    assert x[:, :, :16].sum().item() == 64 * 4 * 16 * 64 and x[:, :, 16:].abs().sum().item() == 0.0
    assert kv_zeros((2, 3), "cpu", torch.bfloat16).dtype == torch.bfloat16


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="needs /proc to read resident memory")
def test_released_kv_pages_read_as_zeros_and_leave_resident_memory():
    x = kv_zeros((16, 4, 4096, 64), "cpu", torch.float32)  # 64 MiB
    x[:, :, :1024] = 2.0  # 16 MiB written
    before = _rss_bytes()
    assert release_kv(x)
    assert before - _rss_bytes() >= 8 * 2 ** 20  # the written pages went back
    assert x.abs().sum().item() == 0.0
    x[0, 0, 0, 0] = 3.0  # and the tensor is usable again
    assert x.sum().item() == 3.0
    assert not release_kv(torch.zeros(4, 4))  # only kv_zeros mappings are released


def test_generate_releases_the_cache_and_repeats_exactly():
    llm = LLM(tiny_model(seed=5, vocab=32, max_pos=64), max_num_seqs=4)
    params = SamplingParams(n=3, temperature=1.0, max_tokens=12, seed=7)
    first = [c.token_ids for o in llm.generate([[1, 2, 3], [4, 5]], params) for c in o.outputs]
    assert all(k.abs().sum().item() == 0 and v.abs().sum().item() == 0 for k, v in llm.engine.runner.cache)
    again = [c.token_ids for o in llm.generate([[1, 2, 3], [4, 5]], params) for c in o.outputs]
    assert again == first  # non-regression: every slot is prefilled again, nothing reads a released page
