"""SmolLM2-135M's linear layers, one thread, in one process: the GEMM specrl's engine runs (F.linear on the
checkpoint's [N, K] weight) against packed-weight paths: vLLM's CPU kernel (oneDNN matmul with a handle
made once per weight, as vLLM builds its linear layers here), oneDNN's packed linear in torch
(`mkldnn._linear_pointwise` with `_reorder_linear_weight`) and MKL's packed sgemm (`mkl._mkl_linear`).

Shapes: the b64 prefill (64 prompts x 80 tokens = 5,120 rows) and a b64 decode step (64 rows), per layer
q, k, v, o, gate, up, down as specrl's model has them, and qkv / gate_up fused as vLLM's model has them.
Prints one JSON line per (rows, layer, path): best-of-repeats seconds, GFLOP/s, ratio to F.linear, and the
largest difference from a float64 product relative to the output's largest magnitude; then one line per
(rows, path) with a whole forward's 30 layers of GEMMs.

    OMP_NUM_THREADS=1 PYTHONPATH=$PWD python experiments/vllm_gemm_packed.py [--repeats 3]
"""
from __future__ import annotations

import argparse
import json
import time

import torch
import torch.nn.functional as F

HIDDEN, INTER, Q, KV, LAYERS = 576, 1536, 9 * 64, 3 * 64, 30
SPECRL = {"q": (Q, HIDDEN), "k": (KV, HIDDEN), "v": (KV, HIDDEN), "o": (HIDDEN, Q), "gate": (INTER, HIDDEN),
          "up": (INTER, HIDDEN), "down": (HIDDEN, INTER)}  # name: weight [N, K]
FUSED = {"qkv": (Q + 2 * KV, HIDDEN), "gate_up": (2 * INTER, HIDDEN)}  # vLLM's merged projections


def paths(w: torch.Tensor, rows: int) -> dict:
    """path name -> f(x) computing x @ w.T with that path's prepared weight; a path this build lacks is left out."""
    out = {"F.linear": lambda x: F.linear(x, w)}
    try:
        from vllm import _custom_ops as ops
        handle = ops.create_onednn_mm(w.t(), 32)
        out["vllm_onednn_mm"] = lambda x: ops.onednn_mm(handle, x, None)
    except (ImportError, RuntimeError, AttributeError) as e:
        print(json.dumps({"path": "vllm_onednn_mm", "error": str(e)[:200]}))
    try:
        packed = torch.ops.mkldnn._reorder_linear_weight(w, rows)
        out["mkldnn_packed"] = lambda x: torch.ops.mkldnn._linear_pointwise(x, packed, None, "none", [], "")
    except RuntimeError as e:
        print(json.dumps({"path": "mkldnn_packed", "error": str(e)[:200]}))
    try:
        mkl = torch.ops.mkl._mkl_reorder_linear_weight(w, rows)
        out["mkl_packed"] = lambda x: torch.ops.mkl._mkl_linear(x, mkl, w, None, rows)
    except RuntimeError as e:
        print(json.dumps({"path": "mkl_packed", "error": str(e)[:200]}))
    return out


def best_s(f, x: torch.Tensor, repeats: int) -> float:
    f(x)  # warm-up: primitive creation, first-touch of the output
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        f(x)
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--rows", default="5120,64", help="GEMM rows: b64 prefill, b64 decode")
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    for rows in [int(r) for r in args.rows.split(",")]:
        times: dict[tuple[str, str], float] = {}
        for name, (n, k) in {**SPECRL, **FUSED}.items():
            w = torch.randn(n, k) * k ** -0.5  # [N, K]
            x = torch.randn(rows, k)  # [M, K]
            exact = (x.double() @ w.double().t())  # [M, N]
            scale = exact.abs().max().item()
            base = None
            for path, f in paths(w, rows).items():
                err = (f(x).double() - exact).abs().max().item() / scale
                s = best_s(f, x, args.repeats)
                base = base or s
                gflops = 2 * rows * n * k / s / 1e9
                print(json.dumps({"rows": rows, "layer": name, "n": n, "k": k, "path": path, "s": round(s, 5),
                                  "gflop_s": round(gflops, 1), "vs_linear": round(base / s, 3),
                                  "max_rel_err": float(f"{err:.2e}")}), flush=True)
                times[name, path] = s
        layouts = {"specrl": list(SPECRL), "vllm": ["qkv", "o", "gate_up", "down"]}
        for layout, names in layouts.items():
            for path in {p for _, p in times}:
                if all((n, path) in times for n in names):
                    total = LAYERS * sum(times[n, path] for n in names)
                    print(json.dumps({"rows": rows, "forward_layout": layout, "path": path, "layers": LAYERS,
                                      "gemm_s": round(total, 3)}), flush=True)


if __name__ == "__main__":
    main()
