"""AdamW step on a 134M-parameter set (8 x 4096 x 4096 fp32, the size of SmolLM2-135M): the fused kernel
(what `build_optimizer` uses) against torch's default foreach one, each in its own process: peak RSS after
the second step and its CPU seconds, one thread.

    python experiments/adamw_fused.py
"""
from __future__ import annotations

import subprocess
import sys

CHILD = """
import json, resource, time, torch
from torch import nn
torch.set_num_threads(1)
ps = [nn.Parameter(torch.randn(4096, 4096)) for _ in range(8)]
for p in ps:
    p.grad = torch.randn_like(p)
opt = torch.optim.AdamW(ps, lr=1e-3, fused={fused})
opt.step()
t = time.process_time()
opt.step()
print(json.dumps({{"fused": {fused}, "step_cpu_s": round(time.process_time() - t, 3),
                  "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)}}))
"""


def main() -> None:
    for fused in (False, True):
        out = subprocess.run([sys.executable, "-c", CHILD.format(fused=fused)], capture_output=True, text=True,
                             check=True)
        print(out.stdout.strip(), flush=True)


if __name__ == "__main__":
    main()
