"""Fit "this machine" from engine traces: effective bandwidth and FLOP/s of the roofline plus the
per-iteration overheads, and each drafter's cost. Traces hold one JSONL row per engine step."""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np

from specrl.sim import cost
from specrl.sim.hardware import HardwareSpec, Overheads, hardware_to_dict
from specrl.sim.models import ModelSpec

TRACE_KEYS = ("active", "tokens_in", "k", "verify_s", "other_s", "draft_s", "context_len_mean")
BW_GRID = np.logspace(8, 13, 61)  # bytes/s
FLOPS_GRID = np.logspace(8, 15, 71)  # FLOP/s


def load_trace(path: str | Path) -> list[dict]:
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"trace file {str(p)!r} not found; record one with "
                                "LLM(path, trace_path=...) or benchmarks/sim_calibrate.py")
    rows = [json.loads(line) for line in p.read_text().splitlines() if line.strip()]
    if not rows:
        raise ValueError(f"trace {str(p)!r} is empty; expected one JSON row per engine step")
    missing = [k for k in TRACE_KEYS if k not in rows[0]]
    if missing:
        raise ValueError(f"trace {str(p)!r} rows lack {missing}; expected the engine trace schema "
                         f"with keys {TRACE_KEYS}")
    return rows


def features(rows: list[dict]) -> dict[str, np.ndarray]:
    """Columns the cost model needs, one entry per engine step [R]."""
    col = {k: np.array([float(r.get(k) or 0.0) for r in rows]) for k in TRACE_KEYS}
    col["spec"] = np.array([r.get("phase") == "spec" for r in rows], dtype=float)  # [R]
    prefill = np.array([r.get("phase") == "prefill" for r in rows])
    col["ctx_sum"] = col["active"] * col["context_len_mean"]  # [R]
    q = col["tokens_in"] / np.maximum(col["active"], 1)  # [R] query tokens per sequence
    col["pairs"] = np.where(prefill, col["tokens_in"] * q / 2, col["ctx_sum"] * q)  # [R]
    col["target_s"] = col["verify_s"] + col["other_s"]  # [R]
    col["method"] = np.array([str(r.get("method")) for r in rows])
    return col


def nnls(a: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Least squares with non-negative coefficients (drop the most negative column and refit)."""
    keep = list(range(a.shape[1]))
    coef = np.zeros(a.shape[1])
    while keep:
        sol = np.linalg.lstsq(a[:, keep], y, rcond=None)[0]
        if (sol >= 0).all():
            coef[keep] = sol
            return coef
        keep.pop(int(np.argmin(sol)))
    return coef


def fit_target(model: ModelSpec, f: dict) -> tuple[float, float, np.ndarray, float]:
    """Grid search over (bw, flops); at each point a relative-error NNLS for the overheads
    [iter_s, per_seq_s, per_token_s, spec_iter_s]. Returns bw, flops, overheads, rel. RMSE."""
    y = f["target_s"]
    design = np.stack([np.ones_like(y), f["active"], f["tokens_in"], f["spec"]], axis=1)  # [R, 4]
    w = 1.0 / y  # relative errors, so fast decode steps count as much as long prefills
    nbytes = cost.forward_bytes(model, f["tokens_in"], f["ctx_sum"])  # [R]
    nflops = cost.forward_flops(model, f["tokens_in"], f["pairs"])  # [R]

    def score(bw, fl):
        roof = np.maximum(nbytes / bw, nflops / fl)  # [R]
        coef = nnls(design * w[:, None], (y - roof) * w)
        err = (roof + design @ coef - y) * w
        return float(np.sqrt(np.mean(err ** 2))), coef

    best = (np.inf, None, 0.0, 0.0)
    for grid_bw, grid_fl in [(BW_GRID, FLOPS_GRID), None]:
        if grid_bw is None:  # refine around the coarse optimum
            grid_bw = best[2] * np.logspace(-0.1, 0.1, 21)
            grid_fl = best[3] * np.logspace(-0.1, 0.1, 21)
        for bw in grid_bw:
            for fl in grid_fl:
                err, coef = score(bw, fl)
                if err < best[0]:
                    best = (err, coef, bw, fl)
    return best[2], best[3], best[1], best[0]


def fit_drafters(model: ModelSpec, f: dict, bw: float, flops: float) -> dict[str, dict]:
    """Per method: draft_s = draft_iter_s + draft_per_seq_s * active + k * draft_frac * decode fwd."""
    out = {}
    spec = f["spec"] > 0
    for method in sorted(set(f["method"][spec])):
        m = spec & (f["method"] == method)
        act = f["active"][m]
        fwd = np.maximum(cost.forward_bytes(model, act, f["ctx_sum"][m]) / bw,
                         cost.forward_flops(model, act, f["ctx_sum"][m]) / flops)  # [R_m]
        design = np.stack([np.ones_like(act), act, f["k"][m] * fwd], axis=1)  # [R_m, 3]
        y = f["draft_s"][m]
        w = 1.0 / np.maximum(y, 1e-6)
        c = nnls(design * w[:, None], y * w)
        out[method] = {"draft_iter_s": c[0], "draft_per_seq_s": c[1], "draft_frac": c[2],
                       "rows": int(m.sum())}
    return out


def calibrate(rows: list[dict], model: ModelSpec, name: str = "cpu-local") -> dict:
    """Fit everything; returns the calibration dict that `get_hardware('cpu-local')` reads."""
    f = features(rows)
    bw, flops, c, rmse = fit_target(model, f)
    ov = Overheads(iter_s=c[0], per_seq_s=c[1], per_token_s=c[2], spec_iter_s=c[3])
    hw = HardwareSpec(name, peak_flops=flops, peak_flops_fp8=flops, hbm_bw=bw, hbm_bytes=1e12,
                      nvlink_bw=bw, net_bw=bw, gpus_per_node=1, eff_bw=1.0, eff_flops=1.0,
                      comm_latency_s=0.0, overheads=ov)
    return {"hardware": hardware_to_dict(hw), "drafters": fit_drafters(model, f, bw, flops),
            "model": model.summary(), "fit": {"rows": len(rows), "target_rel_rmse": rmse}}


def with_drafter(hw: HardwareSpec, calib: dict, method: str | None) -> tuple[HardwareSpec, float]:
    """The hardware with `method`'s fitted drafter overheads, and its fitted draft_frac."""
    d = calib.get("drafters", {}).get(str(method))
    if d is None:
        return hw, 0.0
    ov = replace(hw.overheads, draft_iter_s=d["draft_iter_s"], draft_per_seq_s=d["draft_per_seq_s"])
    return replace(hw, overheads=ov), d["draft_frac"]
