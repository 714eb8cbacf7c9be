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
    kernels.main(["--model", str(tmp_path / "m"), "--rows", "1,3", "--repeats", "1"])
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
