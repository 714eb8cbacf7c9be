"""Sums torch-profiler op tables (what experiments/vllm_b64_phases.py writes, specrl's and vLLM's worker's)
into components: GEMM, attention, KV-cache writes, RMSNorm, SiLU*mul, rotary/element-wise, sampling,
copies/indexing, Python-side annotations, other ops. One JSON line per table, in seconds of self CPU time.

    python experiments/vllm_profile_table.py /tmp/ph/specrl_full_table.txt /tmp/ph/vllm_full_table.txt
"""
import json
import re
import sys

# first match wins: (component, name patterns)
COMPONENTS = (
    ("gemm", (r"^aten::(mm|addmm|bmm|matmul|linear)$", r"onednn_mm", r"mkldnn", r"_mkl_linear", r"gemm")),
    ("kv_cache_write", (r"index_put", r"reshape_and_cache", r"kv_cache_update")),
    ("attention", (r"scaled_dot_product", r"flash_attention", r"attn", r"attention")),
    ("rmsnorm", (r"rms_norm", r"rmsnorm", r"^aten::(pow|rsqrt|mean)$")),
    ("silu_mul", (r"silu",)),
    ("rotary", (r"rotary", r"^aten::(cos|sin|cat|neg)$")),
    ("elementwise", (r"^aten::(mul|add|add_|mul_|sub|div_|where|masked_fill|clamp)$",)),
    ("sampling", (r"softmax", r"cumsum", r"sort", r"topk", r"exponential", r"argmax", r"multinomial",
                  r"^aten::(div|sum|lt|gt|ge|le|eq|minimum|bitwise|__rshift__|__and__|__xor__|rshift|xor|log)",
                  r"sampl", r"logprob", r"gumbel")),
    ("copies_indexing", (r"copy", r"clone", r"contiguous", r"^aten::(to|_to_copy|index|index_select|gather|scatter|"
                         r"embedding|fill_|zero_|zeros|empty|empty_strided|full|arange|resize_|view|reshape|"
                         r"expand|transpose|slice|select|as_strided|t|unsqueeze|squeeze|stack|split|narrow|"
                         r"item|_local_scalar_dense|ones|ones_like|zeros_like|full_like|repeat_interleave|"
                         r"embedding_dense|_unsafe_view|permute|flatten|detach|lift_fresh)")),
)


def seconds(text: str) -> float:
    m = re.fullmatch(r"([\d.]+)(s|ms|us|ns)", text.strip())
    if not m:
        raise ValueError(f"not a profiler time: {text!r}")
    return float(m.group(1)) * {"s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}[m.group(2)]


def component(name: str) -> str:
    if not name.startswith(("aten::", "_C", "torch_", "vllm", "_vllm")) and "::" not in name:
        return "annotation"  # record_function ranges: their self time is Python between ops
    for comp, patterns in COMPONENTS:
        if any(re.search(p, name) for p in patterns):
            return comp
    return "other_ops"


def summarise(path: str) -> dict:
    lines = open(path).read().splitlines()
    wall = float(lines[0].split()[1]) if lines and lines[0].startswith("wall_s") else None
    out: dict = {"table": path, "wall_s": wall}
    header = next(i for i, l in enumerate(lines) if "Self CPU %" in l)
    cols = re.split(r"\s{2,}", lines[header].strip())
    self_col, calls_col = cols.index("Self CPU"), cols.index("# of Calls")
    listed, ops = 0.0, {}
    for line in lines[header + 2:]:
        if line.startswith("---") or line.startswith("Self CPU time total"):
            break
        parts = re.split(r"\s{2,}", line.strip())
        if len(parts) != len(cols):
            continue
        name, s = parts[0], seconds(parts[self_col])
        comp = component(name)
        out[comp] = out.get(comp, 0.0) + s
        ops[name] = (round(s, 3), int(parts[calls_col]))
        listed += s
    total = next(seconds(l.split(":")[1]) for l in lines if l.startswith("Self CPU time total"))
    out["unlisted_ops"] = total - listed
    out["self_cpu_total_s"] = total
    out["top_ops"] = dict(sorted(ops.items(), key=lambda kv: -kv[1][0])[:25])
    return {k: round(v, 3) if isinstance(v, float) else v for k, v in out.items()}


if __name__ == "__main__":
    for p in sys.argv[1:]:
        print(json.dumps(summarise(p)))
