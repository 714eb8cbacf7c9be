"""Why the sampler audit's z drifts below 0 on sharp policies (docs/results/sampler_audit.md, "The statistic's
null on sharp policies"): exact samples, but a non-mode token at a row's first position derails the rest of the
row into uncertain positions (weights `off_w` instead of `on_w`), so the realised normaliser sqrt(sum w^2) grows
exactly when the first term is positive. Prints z's mean, sd and two-sided tail at the alarm's 3.29.

    python experiments/audit_null_drift.py
"""
from __future__ import annotations

import json

import torch

from specrl.rl.audit import ALARM_Z


def batches(n: int, mode_p: float, rows: int = 16, length: int = 20, off_w: float = 0.3, on_w: float = 0.01,
            seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    u = torch.rand(n, rows, length, generator=g, dtype=torch.float64)  # exact PIT values: U(0, 1)
    derailed = u[:, :, :1] > mode_p  # [n, rows, 1]: the first token was not the mode
    w = torch.where(derailed, off_w, on_w).expand(-1, -1, length).clone()  # [n, rows, length]
    w[:, :, 0] = 1 - mode_p  # the audit's weight at the first position
    z = torch.special.ndtri(u)
    return (w * z).sum((1, 2)) / w.pow(2).sum((1, 2)).sqrt()  # [n]


if __name__ == "__main__":
    for mode_p in (0.6, 0.9, 0.97):
        z = batches(20_000, mode_p)
        print(json.dumps({"mode_p": mode_p, "z_mean": round(float(z.mean()), 3), "z_sd": round(float(z.std()), 3),
                          "p_tail": float((z.abs() > ALARM_Z).double().mean())}))
