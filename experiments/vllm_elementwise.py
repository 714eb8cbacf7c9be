"""The element-wise ops of one SmolLM2 decoder layer at `specrl bench peer`'s b64 prefill shapes (64 prompts x
80 tokens), one thread: SwiGLU's silu * up and rotary embedding on q and k, as specrl's model runs them
(a new output tensor per op) against the same ops writing into tensors they already own (in place), and
silu on a fresh output against silu into a reused buffer: where the time goes when the op itself is cheap
and its output is a fresh 31 MB allocation. Results are checked bit for bit against the current form.

    OMP_NUM_THREADS=1 PYTHONPATH=$PWD python experiments/vllm_elementwise.py
    LD_PRELOAD=/path/to/libjemalloc.so OMP_NUM_THREADS=1 PYTHONPATH=$PWD python experiments/vllm_elementwise.py
"""
import json
import os
import time

import torch
import torch.nn.functional as F

B, T, H, HKV, D, INTER = 64, 80, 9, 3, 64, 1536


def best(f, repeats: int = 5) -> float:
    f()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        f()
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    torch.set_num_threads(1)
    from specrl.model.layers import apply_rope, rope_cos_sin
    torch.manual_seed(0)
    gate, up = torch.randn(B, T, INTER), torch.randn(B, T, INTER)  # [B, T, I]
    q = torch.randn(B, T, H, D).transpose(1, 2)  # [B, H, T, D] as the model's view
    k = torch.randn(B, T, HKV, D).transpose(1, 2)
    cos, sin = rope_cos_sin(torch.arange(T).expand(B, T), D, 100000.0, torch.float32)  # [B, 1, T, D]
    buf = torch.empty(B, T, INTER)
    rows = {
        "silu_fresh": lambda: F.silu(gate),
        "silu_into_buffer": lambda: torch.ops.aten.silu.out(gate, out=buf),
        "swiglu_current": lambda: F.silu(gate) * up,
        "swiglu_inplace": lambda: F.silu(gate).mul_(up),
        "rope_current_qk": lambda: (apply_rope(q, cos, sin), apply_rope(k, cos, sin)),
    }
    out = {"ld_preload": os.environ.get("LD_PRELOAD", "")}
    for name, f in rows.items():
        out[name + "_ms"] = round(best(f) * 1e3, 2)
    out["swiglu_inplace_equal"] = bool(torch.equal(F.silu(gate) * up, F.silu(gate).mul_(up)))
    print(json.dumps(out))


if __name__ == "__main__":
    main()
