"""`specrl bench kernels`: a row per dtype, linear shape and row count, and the packed kernel's outputs equal to
F.linear's (the engine's packed bf16 linears are bit-identical)."""
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
    if can_pack(torch.zeros(1, dtype=torch.bfloat16)):
        assert all(r["max_abs_diff"] == 0.0 for r in rows if r["dtype"] == "bfloat16")


def test_a_bad_dtype_is_one_line(tmp_path):
    try:
        kernels.main(["--dtypes", "float16"])
    except SystemExit as e:
        assert "--dtypes float16 is not one of float32, bfloat16" in str(e)
    else:
        raise AssertionError("float16 was accepted")


def test_attention_rows_compare_the_fold_with_enable_gqa(tmp_path, capsys):
    save_tiny(tmp_path / "m")
    kernels.main(["--model", str(tmp_path / "m"), "--parts", "attention", "--repeats", "1", "--context", "16"])
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert {(r["dtype"], r["batch"], r["queries"]) for r in rows} == {
        (d, b, t) for d in ("float32", "bfloat16") for b in (1, 64) for t in (1, 5)}
    assert all(r["layer"] == "attention" and r["ms_gqa"] > 0 and r["ms_fold"] > 0 for r in rows)
    assert all(r["equal"] for r in rows if r["dtype"] == "float32")  # fp32 keeps enable_gqa
    assert all(r["err_fold"] <= 1.25 * r["err_gqa"] + 1e-6 for r in rows)  # as close to fp32 as enable_gqa


def test_engine_rows_alternate_packed_and_plain_with_the_same_tokens(tmp_path, capsys):
    save_tiny(tmp_path / "m")
    kernels.main(["--model", str(tmp_path / "m"), "--parts", "engine", "--repeats", "2"])
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(r["repeat"], r["packed"], r["batch"]) for r in rows] == [
        (rep, packed, b) for rep in (0, 1) for packed in (False, True) for b in (1, 64)]
    for batch in (1, 64):  # packing changes no token
        assert len({tuple(r["digests"]) for r in rows if r["batch"] == batch}) == 1
    assert all(r["tokens_per_s"] > 0 for r in rows)
