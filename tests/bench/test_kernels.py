"""`specrl bench kernels`: a row per dtype, linear shape and row count, and the packed kernel's outputs equal to
F.linear's (the engine's packed bf16 linears are bit-identical); attention rows per shape with each path's error."""
from __future__ import annotations

import json

import torch

from specrl.bench import kernels
from specrl.model.packed import can_pack
from tests.helpers import save_tiny


def test_a_row_per_dtype_shape_and_row_count(tmp_path, capsys):
    save_tiny(tmp_path / "m")
    kernels.main(["--model", str(tmp_path / "m"), "--rows", "1,3", "--repeats", "1", "--parts", "linears"])
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    shapes = {(r["k"], r["n"]) for r in rows}
    assert len(rows) == 2 * 2 * len(shapes) and {r["dtype"] for r in rows} == {"float32", "bfloat16"}
    assert {"gflops_plain", "gflops_packed", "packed_over_plain", "layer"} <= set(rows[0])
    bf16 = [r for r in rows if r["dtype"] == "bfloat16"]
    if can_pack(torch.zeros(1, dtype=torch.bfloat16)):
        assert all(r["max_abs_diff"] == 0.0 for r in bf16)
    else:  # an AVX2-only CPU: bf16 is timed plain, and the row says why there is no packed figure
        assert all(r["gflops_packed"] is None and r["gflops_plain"] > 0 and "AVX-512" in r["packed"] for r in bf16)


def test_a_bad_dtype_is_one_line(tmp_path):
    try:
        kernels.main(["--dtypes", "float16"])
    except SystemExit as e:
        assert "--dtypes float16 is not one of float32, bfloat16" in str(e)
    else:
        raise AssertionError("float16 was accepted")


def test_attention_rows_compare_the_kernel_with_sdpa_and_the_streaming_floor(capsys):
    kernels.main(["--parts", "attention", "--repeats", "1", "--quick", "--dtypes", "bfloat16"])
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert rows[0]["layer"] == "stream_read" and rows[0]["gbs"] > 0
    rows = rows[1:]
    assert {(r["model"], r["case"], r["queries"]) for r in rows} == {
        (m, c, t) for m in ("policy", "smollm2-135m") for c in ("b1 x 16", "b1 x 40", "b4 x 16", "b4 x 40", "ragged b4")
        for t in (1, 5)}
    assert all(r["ms_sdpa"] > 0 and r["gbs_rows"] > 0 for r in rows)
    for r in rows:  # each path as close to the fp32 reference as the dense SDPA is
        assert all(r[f"err_{p}"] <= 2 * r["err_sdpa"] + 1e-2 for p in ("rows", "kernel", "vllm") if f"err_{p}" in r)


def test_engine_rows_alternate_packed_and_plain_with_the_same_tokens(tmp_path, capsys):
    save_tiny(tmp_path / "m")
    kernels.main(["--model", str(tmp_path / "m"), "--parts", "engine", "--repeats", "2"])
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(r["repeat"], r["packed"], r["batch"]) for r in rows] == [
        (rep, packed, b) for rep in (0, 1) for packed in (False, True) for b in (1, 64)]
    for batch in (1, 64):  # packing changes no token
        assert len({tuple(r["digests"]) for r in rows if r["batch"] == batch}) == 1
    assert all(r["tokens_per_s"] > 0 for r in rows)
