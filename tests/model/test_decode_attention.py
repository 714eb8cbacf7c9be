"""specrl.model.attention.decode_attention: the C++ kernel and the torch fallback against an fp64 reference, as close
to it as SDPA is, at ragged lengths from 1 to several thousand, GQA ratios 1, 3 and 4, head sizes 64 and 128,
decode (T = 1) and verify (T = 5) queries, fp32 and bf16; the forced paths; and the machine without a compiler and
the failed build, which both take the SDPA path with one note line."""
from __future__ import annotations

import logging
import math

import pytest
import torch
import torch.nn.functional as F

import specrl.model.kernels as K
from specrl.errors import ConfigError
from specrl import io
from specrl.model.kernels import build
from specrl.model.attention import decode_attention
from specrl.model.attention import sdpa_attention as decode_attention_sdpa


def reference(q, k_cache, v_cache, slots, positions, scale) -> torch.Tensor:
    """fp64 attention of each query over its own row's positions 0..p -> [B, H, T, D]."""
    B, H, T, D = q.shape
    G = H // k_cache.shape[1]
    out = torch.empty(B, H, T, D, dtype=torch.float64)
    for b in range(B):
        keys = k_cache[slots[b]].double().repeat_interleave(G, 0)  # [H, L, D]
        values = v_cache[slots[b]].double().repeat_interleave(G, 0)
        for t in range(T):
            p = int(positions[b, t]) + 1
            w = torch.softmax(torch.einsum("hd,hld->hl", q[b, :, t].double(), keys[:, :p]) * scale, -1)  # [H, p]
            out[b, :, t] = torch.einsum("hl,hld->hd", w, values[:, :p])
    return out


def plain_sdpa(q, k_cache, v_cache, slots, positions, scale) -> torch.Tensor:
    """torch's SDPA in the input dtype under a dense mask up to the longest row: the error to match."""
    L = int(positions.max()) + 1
    mask = (torch.arange(L)[None, None] <= positions[:, :, None])[:, None]  # [B, 1, T, L]
    return F.scaled_dot_product_attention(q, k_cache[slots, :, :L], v_cache[slots, :, :L], attn_mask=mask,
                                          scale=scale, enable_gqa=True)


def inputs(lengths, heads, kv_heads, hd, T, dtype, seed=0, repeat_last=False):
    """Caches with spare slots and positions (rows in shuffled slots); each row's T queries end at its length."""
    g = torch.Generator().manual_seed(seed)
    B, L = len(lengths), max(lengths) + 7
    k = torch.randn(B + 2, kv_heads, L, hd, generator=g).to(dtype)  # [S, Hkv, L, D]
    v = torch.randn(B + 2, kv_heads, L, hd, generator=g).to(dtype)
    q = torch.randn(B, heads, T, hd, generator=g).to(dtype)  # [B, H, T, D]
    slots = torch.randperm(B + 2, generator=g)[:B]  # [B]
    positions = (torch.tensor(lengths)[:, None] - T + torch.arange(T)).clamp(min=0)  # [B, T]
    if repeat_last:  # a padded verify: the last queries repeat the row's last position
        positions[:, T // 2:] = positions[:, -1:]
    return q, k, v, slots, positions, 1 / math.sqrt(hd)


@pytest.fixture(scope="module")
def kernel():
    if build.find_compiler() is None or build.find_ninja() is None:
        pytest.skip("no C++ compiler or ninja: the kernel cannot be built here (its SDPA path is tested below)")
    assert K.kernel_status() == "kernel", K.kernel_status()
    return torch.ops.specrl_kernels.decode_attention


SHAPES = [  # lengths, heads, kv heads (GQA 1, 3, 4), head size
    ([1], 9, 3, 64), ([3000], 9, 3, 64), ([5, 700, 130, 2, 1, 64], 9, 3, 64), ([1100] * 3 + [40], 4, 4, 128),
    ([2049, 66, 65, 1], 8, 2, 128), ([300, 17], 16, 4, 64), ([129, 128, 127], 12, 6, 32)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("T", [1, 5])
@pytest.mark.parametrize("lengths,heads,kv_heads,hd", SHAPES)
def test_kernel_and_fallback_are_as_close_to_fp64_as_sdpa(kernel, lengths, heads, kv_heads, hd, T, dtype):
    """bf16 runs the kernel twice: as it chooses (the dpbf16 scores where the build has them and a task has at most
    kNativeMaxRows = 8 query rows: every T = 1 shape here and GQA 1 at T = 5) and with native_bf16=False (the
    at::vec path every other CPU takes)."""
    args = inputs(lengths, heads, kv_heads, hd, T, dtype)
    ref = reference(*args)
    paths = [("sdpa", plain_sdpa), ("kernel", kernel), ("fallback", decode_attention_sdpa)]
    if dtype == torch.bfloat16:
        paths.append(("kernel_vec", lambda *a: kernel(*a, native_bf16=False)))
    err = {name: (fn(*args).double() - ref).abs().max().item() for name, fn in paths}
    floor = 1e-6 if dtype == torch.float32 else 1e-3  # SDPA may be exact to the output's rounding at a shape
    for name in err:
        assert err[name] <= 2 * err["sdpa"] + floor, (name, err)


def test_the_build_scores_bf16_keys_natively_where_the_cpu_can(kernel):
    """-march=native on a CPU with avx512_bf16 compiles the dpbf16 path, so the test above checks it here."""
    flags = build.cpu_flags()
    expected = "avx512_bf16" in flags and {"avx512f", "avx512bw", "avx512vl", "avx512dq"} <= flags
    assert torch.ops.specrl_kernels.has_native_bf16() == expected


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_padded_verify_queries_that_repeat_a_position(kernel, dtype):
    args = inputs([3000, 200, 5], 9, 3, 64, 5, dtype, repeat_last=True)
    ref = reference(*args)
    out = decode_attention(*args)
    assert out.dtype == dtype and out.shape == args[0].shape
    assert (out.double() - ref).abs().max() <= 2 * (plain_sdpa(*args).double() - ref).abs().max() + 1e-3


def test_each_row_reads_only_its_own_length(kernel):
    """Garbage (NaN) in the slots no row owns changes nothing on either path, and past every row's last position
    nothing for the kernel (the fallback pads the rows of a group to its longest, as the dense path did)."""
    q, k, v, slots, positions, scale = inputs([40, 7, 300], 9, 3, 64, 5, torch.float32)
    clean = decode_attention(q, k, v, slots, positions, scale)
    spare = [s for s in range(k.shape[0]) if s not in slots.tolist()]
    k[spare], v[spare] = float("nan"), float("nan")
    assert not decode_attention_sdpa(q, k, v, slots, positions, scale).isnan().any()
    for b, s in enumerate(slots.tolist()):
        k[s, :, int(positions[b].max()) + 1:] = float("nan")
        v[s, :, int(positions[b].max()) + 1:] = float("nan")
    assert torch.equal(decode_attention(q, k, v, slots, positions, scale), clean)


def test_a_bad_position_or_slot_is_an_error_not_a_read_out_of_bounds(kernel):
    q, k, v, slots, positions, scale = inputs([10, 20], 4, 4, 64, 1, torch.float32)
    with pytest.raises(RuntimeError, match="outside the cache"):
        kernel(q, k, v, slots, positions + k.shape[2], scale)
    with pytest.raises(RuntimeError, match="outside the cache"):
        kernel(q, k, v, slots + 100, positions, scale)


def test_inputs_the_kernel_does_not_take_use_the_fallback(kernel):
    for dtype, hd in ((torch.float16, 64), (torch.float32, 48)):
        args = inputs([30, 5], 4, 2, hd, 5, dtype)
        assert torch.equal(decode_attention(*args), decode_attention_sdpa(*args))


def test_forced_paths(kernel, monkeypatch):
    args = inputs([300, 20], 9, 3, 64, 5, torch.bfloat16)
    monkeypatch.setenv(K.ENV, "sdpa")
    assert K.kernel_status() == "sdpa: forced by SPECRL_ATTENTION=sdpa"
    assert torch.equal(decode_attention(*args), decode_attention_sdpa(*args))
    monkeypatch.setenv(K.ENV, "kernel")
    assert K.kernel_status() == "kernel"
    assert torch.equal(decode_attention(*args), kernel(*args))
    with pytest.raises(ConfigError, match="cannot run here: dtypes torch.float16"):
        decode_attention(*inputs([3], 4, 4, 64, 1, torch.float16))


def test_an_unknown_forced_path_is_one_line_naming_the_choices(monkeypatch):
    monkeypatch.setenv(K.ENV, "flash")
    with pytest.raises(ConfigError) as e:
        decode_attention(*inputs([3], 4, 4, 64, 1, torch.float32))
    assert "SPECRL_ATTENTION='flash'" in str(e.value) and "sdpa, kernel" in str(e.value)
    assert "\n" not in str(e.value)


@pytest.fixture
def fresh_build(monkeypatch, tmp_path):
    """A process that has not loaded the kernel, with an empty cache."""
    monkeypatch.setattr(K, "_state", {})
    monkeypatch.setattr(build, "op_loaded", lambda: False)
    monkeypatch.setenv(io.CACHE_ENV, str(tmp_path))
    monkeypatch.delenv(K.ENV, raising=False)
    return tmp_path / "kernels"


def test_no_compiler_is_one_note_and_the_sdpa_path(fresh_build, monkeypatch, caplog):
    monkeypatch.setattr(build, "find_compiler", lambda: None)
    with caplog.at_level(logging.WARNING, logger="specrl"):
        status = K.kernel_status()
        args = inputs([30, 5], 9, 3, 64, 5, torch.float32)
        out = decode_attention(*args)
    assert status.startswith("sdpa: no C++ compiler")
    assert torch.equal(out, decode_attention_sdpa(*args))
    notes = [r.getMessage() for r in caplog.records]
    assert len(notes) == 1 and "SDPA path" in notes[0] and "\n" not in notes[0]


def test_a_failed_build_names_its_log_takes_sdpa_and_leaves_no_module(fresh_build, monkeypatch, tmp_path, caplog):
    planted = tmp_path / "broken.cpp"
    planted.write_text("#error planted compile error\n")
    monkeypatch.setattr(build, "SOURCE", planted)
    with caplog.at_level(logging.WARNING, logger="specrl"):
        status = K.kernel_status()
        args = inputs([30, 5], 9, 3, 64, 5, torch.bfloat16)
        out = decode_attention(*args)
    logs = list(fresh_build.glob("*.log"))
    assert len(logs) == 1 and "planted compile error" in logs[0].read_text()
    assert status == f"sdpa: the decode attention kernel failed to build (log: {logs[0]})"
    assert torch.equal(out, decode_attention_sdpa(*args))
    assert [p.name for p in fresh_build.iterdir()] == [logs[0].name]  # no module, no half-built directory
    notes = [r.getMessage() for r in caplog.records]
    assert len(notes) == 1 and str(logs[0]) in notes[0]
    monkeypatch.setattr(K, "_state", {})  # the next process does not compile it again
    assert K.kernel_status() == (f"sdpa: the decode attention kernel failed to build before (log: {logs[0]}; "
                                 "delete it to retry)")


@pytest.mark.parametrize("threads", [1, 2])
def test_splits_over_positions_merge_exactly_where_a_split_lies_past_some_queries(kernel, threads):
    """One row of 290 positions, one KV head: at one thread the plan cuts splits of 96 positions, so the last split
    holds positions 288-289 only, past the first three verify queries (285-287), which see none of it."""
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        for dtype in (torch.float32, torch.bfloat16):
            args = inputs([290, 7], 4, 1, 64, 5, dtype)
            ref = reference(*args)
            for native in (True, False):
                err = (kernel(*args, native_bf16=native).double() - ref).abs().max().item()
                assert err <= 2 * (plain_sdpa(*args).double() - ref).abs().max().item() + 1e-6, (dtype, native, err)
    finally:
        torch.set_num_threads(before)
