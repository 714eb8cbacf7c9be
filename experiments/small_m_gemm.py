"""Why fp32 speculative decoding gains little on this CPU: the cost of `F.linear` at the few rows a verify
forward has (k+1 tokens per sequence) against one row (a plain decode step), fp32 against bf16, at the
shapes of SmolLM2-135M (576 -> 1536 MLP, 1536 -> 576, and the 49,152-row lm_head). One thread, CPU time,
each shape and dtype in the same process.

    python experiments/small_m_gemm.py [--rows 1,2,5,8]
"""
from __future__ import annotations

import argparse
import json
import time

import torch
import torch.nn.functional as F

SHAPES = [(1536, 576), (576, 1536), (49152, 576)]  # (out, in)


def cpu_us(fn, repeats: int) -> float:
    for _ in range(5):
        fn()
    t = time.process_time()
    for _ in range(repeats):
        fn()
    return (time.process_time() - t) / repeats * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", default="1,2,5,8")
    args = ap.parse_args()
    torch.set_num_threads(1)
    rows = [int(m) for m in args.rows.split(",")]
    for out_f, in_f in SHAPES:
        for dtype in (torch.float32, torch.bfloat16):
            w = torch.randn(out_f, in_f).to(dtype)
            repeats = 20 if out_f > 10000 else 200
            us = {m: cpu_us(lambda: F.linear(torch.randn(m, in_f).to(dtype), w), repeats) for m in rows}
            print(json.dumps({"shape": [out_f, in_f], "dtype": str(dtype).removeprefix("torch."),
                              "us_by_rows": {m: round(v) for m, v in us.items()},
                              "cost_over_one_row": {m: round(v / us[rows[0]], 2) for m, v in us.items()}}))


if __name__ == "__main__":
    main()
