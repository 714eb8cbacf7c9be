"""dtype auto: the probe's choice, its cache (and a corrupt one), forced and bad dtypes, and the engine's use of it."""
from __future__ import annotations

import json

import pytest
import torch

from specrl import LLM
from specrl import io
from specrl.model import precision
from specrl.model.precision import PROBE_ROUNDS, Gemm, choose_dtype, engine_rows, model_gemms, parse_dtype, probe
from tests.helpers import save_tiny, tiny_config


@pytest.fixture
def probed(monkeypatch, tmp_path):
    """auto measures (the suite's SPECRL_AUTO_DTYPE unset), caching under tmp_path."""
    monkeypatch.delenv(precision.FIXED_ENV, raising=False)
    monkeypatch.setenv(io.CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.setattr(precision, "machine_load", lambda: 0.5)  # a quiet machine, whatever runs beside the tests
    return tmp_path / "cache" / precision.CACHE_FILE


def timer(fp32_s: float, bf16_s: float, calls: list | None = None):
    """A probe timer whose every GEMM takes fp32_s or bf16_s seconds; `calls` records what it timed."""
    def time(g: Gemm, dtype: torch.dtype, device) -> float:
        if calls is not None:
            calls.append((g, dtype))
        return fp32_s if dtype == torch.float32 else bf16_s
    return time


def test_model_gemms_cover_every_linear_at_each_row_count():
    cfg = tiny_config()  # hidden 16, 2 layers
    gemms = model_gemms(cfg, [1, 8])
    assert sorted({g.m for g in gemms}) == [1, 8]
    # per row count: q, k+v, o, gate+up, down, lm_head; calls per forward = the layers (x2 for the pairs), 1 head
    assert [g.count for g in gemms if g.m == 1] == [2, 4, 2, 4, 2, 1]
    assert Gemm(8, cfg.hidden_size, cfg.vocab_size, 1) in gemms
    assert engine_rows(64, 4) == [1, 64, 320] and engine_rows(1, 0) == [1]


def test_auto_picks_fp32_when_the_probe_says_fp32_is_faster(probed):
    # as on an AVX2-only CPU: bf16 matmuls emulated, 3x slower
    choice = choose_dtype("auto", "cpu", tiny_config(), [1, 64], timer(1e-6, 3e-6))
    assert choice.dtype == torch.float32 and choice.reason == "probe"
    assert choice.bf16_speedup == pytest.approx(1 / 3)
    assert "float32" in choice.describe() and "0.33x" in choice.describe()


def test_auto_picks_bf16_only_when_clearly_faster(probed):
    assert choose_dtype("auto", "cpu", tiny_config(), [1, 64], timer(4e-6, 1e-6)).dtype == torch.bfloat16
    # 1.1x is within the margin: fp32 stays (its logprobs match the trainer's)
    assert choose_dtype("auto", "cpu", tiny_config(), [1, 32], timer(1.1e-6, 1e-6)).dtype == torch.float32


def test_the_probe_alternates_the_dtypes_and_keeps_each_ones_best():
    """A burst of load on the first round (10x slower, whichever dtype it hits) does not decide the choice."""
    calls, slow = [], {"left": 2}

    def loaded(g: Gemm, dtype: torch.dtype, device) -> float:
        calls.append(dtype)
        base = 4e-6 if dtype == torch.float32 else 1e-6
        if slow["left"]:
            slow["left"] -= 1
            return 10 * base
        return base
    g = Gemm(4, 8, 8, 1)
    fp32, bf16 = probe([g], "cpu", loaded)
    assert calls == [torch.float32, torch.bfloat16] * PROBE_ROUNDS
    assert fp32[4] == pytest.approx(1e3 * 4e-6) and bf16[4] == pytest.approx(1e3 * 1e-6)


def test_the_probe_is_cached_per_shape_set(probed):
    calls = []
    first = choose_dtype("auto", "cpu", tiny_config(), [1, 64], timer(4e-6, 1e-6, calls))
    n = len(calls)
    assert n == PROBE_ROUNDS * 2 * len(model_gemms(tiny_config(), [1, 64]))  # each shape in both dtypes, rounds
    again = choose_dtype("auto", "cpu", tiny_config(), [1, 64], timer(1e-6, 4e-6, calls))
    assert len(calls) == n and again.reason == "cached probe"
    assert (again.dtype, again.fp32_ms, again.bf16_ms) == (first.dtype, first.fp32_ms, first.bf16_ms)
    choose_dtype("auto", "cpu", tiny_config(), [1, 8], timer(1e-6, 4e-6, calls))  # other rows: measured anew
    assert len(calls) > n and len(json.loads(probed.read_text())) == 2


@pytest.mark.parametrize("content", ["{not json", "[1, 2]", '{"k": {"fp32_ms": {"1": "fast"}, "bf16_ms": {}}}'])
def test_a_corrupt_cache_is_measured_again(probed, caplog, content):
    probed.parent.mkdir(parents=True)
    probed.write_text(content)
    choice = choose_dtype("auto", "cpu", tiny_config(), [1], timer(1e-6, 3e-6))
    assert choice.dtype == torch.float32 and choice.reason == "probe"
    assert "is corrupt" in caplog.text and "measuring again" in caplog.text
    assert len(json.loads(probed.read_text())) == 1  # rewritten whole


def test_forced_dtypes_skip_the_probe(probed):
    calls = []
    for name, dt in (("float32", torch.float32), ("bfloat16", torch.bfloat16), ("bf16", torch.bfloat16)):
        choice = choose_dtype(name, "cpu", tiny_config(), [1], timer(1, 1, calls))
        assert (choice.dtype, choice.reason) == (dt, "forced")
    assert calls == [] and not probed.exists()


def test_the_real_probe_times_both_dtypes(probed):
    choice = choose_dtype("auto", "cpu", tiny_config(), [1, 4])  # time_gemm on this CPU: whichever wins, both timed
    assert set(choice.fp32_ms) == set(choice.bf16_ms) == {1, 4}
    assert all(v > 0 for v in (*choice.fp32_ms.values(), *choice.bf16_ms.values()))
    assert json.loads(probed.read_text())


def test_bad_dtypes_name_the_fix():
    with pytest.raises(ValueError, match=r"dtype='float16' is not supported on the CPU.*use dtype=auto, bfloat16 "
                                         r"or float32"):
        parse_dtype("float16", "cpu")
    with pytest.raises(ValueError, match=r"dtype='float8' is unknown: use one of \['auto', 'float32'"):
        parse_dtype("float8", "cpu")
    assert parse_dtype("float16", "cuda") == torch.float16 and parse_dtype("auto", "cpu") is None


def test_engine_auto_follows_the_probe(probed, tmp_path):
    path = save_tiny(tmp_path / "m", vocab=32)
    precision_calls = []
    original = precision.time_gemm
    try:
        precision.time_gemm = timer(4e-6, 1e-6, precision_calls)
        llm = LLM(str(path), max_num_seqs=4)
    finally:
        precision.time_gemm = original
    assert llm.precision.dtype == torch.bfloat16 and next(llm.model.parameters()).dtype == torch.bfloat16
    assert {g.m for g, _ in precision_calls} == {1, 4}  # SD off: decode at batch 1 and 4
    assert llm.engine.runner.cache[0][0].dtype == torch.bfloat16
    forced = LLM(str(path), max_num_seqs=4, dtype="float32")
    assert forced.precision.reason == "forced" and next(forced.model.parameters()).dtype == torch.float32


def test_a_probe_on_a_busy_machine_answers_but_is_not_cached(probed, monkeypatch, caplog):
    monkeypatch.setattr(precision, "machine_load", lambda: 40.0)
    calls = []
    choice = choose_dtype("auto", "cpu", tiny_config(), [1, 64], timer(4e-6, 1e-6, calls))
    assert choice.dtype == torch.bfloat16 and choice.reason == "probe on a busy machine, not cached"
    assert "busy" in caplog.text and "measures again" in caplog.text
    assert not probed.exists()
    n = len(calls)
    choose_dtype("auto", "cpu", tiny_config(), [1, 64], timer(4e-6, 1e-6, calls))
    assert len(calls) == 2 * n  # measured again


@pytest.mark.parametrize("load", [None, 40.0])  # not recorded (an older cache), or taken on a busy machine
def test_a_cached_probe_from_a_busy_machine_is_measured_again(probed, caplog, load):
    calls = []
    choose_dtype("auto", "cpu", tiny_config(), [1, 64], timer(1e-6, 4e-6, calls))  # cached: fp32 faster
    cache = json.loads(probed.read_text())
    (entry,) = cache.values()
    assert entry["load"] == 0.5
    if load is None:
        del entry["load"]
    else:
        entry["load"] = load
    probed.write_text(json.dumps(cache))
    again = choose_dtype("auto", "cpu", tiny_config(), [1, 64], timer(4e-6, 1e-6, calls))
    assert again.reason == "probe" and again.dtype == torch.bfloat16  # the new figures, not the cached ones
    assert "taken on a busy machine" in caplog.text and "measuring again" in caplog.text
    assert json.loads(probed.read_text())[next(iter(cache))]["load"] == 0.5  # rewritten from the quiet probe
