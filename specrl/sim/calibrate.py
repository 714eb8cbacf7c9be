"""Fit "this machine" from engine traces: effective bandwidth and FLOP/s of the roofline plus the
per-iteration overheads, and each drafter's cost. Traces hold one JSONL row per engine step."""
from __future__ import annotations

import json
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np

from specrl.sim import cost
from specrl.sim.hardware import HardwareSpec, Overheads, hardware_from_dict, hardware_to_dict
from specrl.sim.models import ModelSpec

TRACE_KEYS = ("active", "tokens_in", "k", "verify_s", "other_s", "draft_s", "context_len_mean")
# column of the design matrix -> Overheads field (cost.overhead_s uses the same pairs)
OVERHEAD_COLUMNS = {"one": "iter_s", "active": "per_seq_s", "tokens_in": "per_token_s",
                    "ctx_sum": "per_kv_token_s", "prefill_tokens": "prefill_token_s",
                    "spec": "spec_iter_s", "spec_seqs": "spec_per_seq_s"}
BW_GRID = np.logspace(8, 13, 31)  # bytes/s, 6 points per decade
FLOPS_GRID = np.logspace(8, 15, 43)  # FLOP/s


def load_trace(path: str | Path) -> list[dict]:
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"trace file {str(p)!r} not found; record one with "
                                "LLM(path, trace_path=...) or `specrl bench sim-calibrate`")
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
    # the SD path (draft, verify, drafter bookkeeping), also where "auto" passes and verifies no drafts
    col["spec"] = np.array([r.get("phase") == "spec" for r in rows], dtype=float)  # [R]
    col["spec_seqs"] = col["spec"] * col["active"]  # [R]
    prefill = np.array([r.get("phase") == "prefill" for r in rows])
    col["ctx_sum"] = col["active"] * col["context_len_mean"]  # [R]
    q = col["tokens_in"] / np.maximum(col["active"], 1)  # [R] query tokens per sequence
    col["pairs"] = np.where(prefill, col["tokens_in"] * q / 2, col["ctx_sum"] * q)  # [R]
    col["prefill_tokens"] = np.where(prefill, col["tokens_in"], 0.0)  # [R]
    col["target_s"] = col["verify_s"] + col["other_s"]  # [R]
    col["method"] = np.array([str(r.get("method")) for r in rows])
    return col


def nnls(a: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Least squares with non-negative coefficients (drop the most negative column and refit)."""
    # the normal equations of the column-scaled problem: each refit is then a [C, C] solve, not a pass
    # over all R rows
    scale = np.linalg.norm(a, axis=0)  # [C]
    scale[scale == 0] = 1.0
    a = a / scale
    gram, rhs = a.T @ a, a.T @ y  # [C, C], [C]
    keep = list(range(a.shape[1]))
    coef = np.zeros(a.shape[1])
    while keep:
        sol = np.linalg.lstsq(gram[np.ix_(keep, keep)], rhs[keep], rcond=None)[0] / scale[keep]
        if (sol >= 0).all():
            coef[keep] = sol
            return coef
        keep.pop(int(np.argmin(sol)))
    return coef


def fit_target(model: ModelSpec, f: dict) -> tuple[float, float, np.ndarray, float]:
    """Grid search over (bw, flops); at each point a relative-error NNLS for the overheads
    OVERHEAD_COLUMNS. Returns bw, flops, overhead coefficients, relative RMSE."""
    y = f["target_s"]
    design = np.stack([np.ones_like(y) if c == "one" else f[c] for c in OVERHEAD_COLUMNS], 1)  # [R, C]
    nbytes = cost.forward_bytes(model, f["tokens_in"], f["ctx_sum"])  # [R]
    nflops = cost.forward_flops(model, f["tokens_in"], f["pairs"])  # [R]

    def score(bw, fl):
        # relative errors, so fast decode steps count as much as long prefills; relative to the fit, not to
        # the measurement, whose noise on a shared machine is one-sided (1/y would favour the fast rows
        # and fit the mode, under-predicting the mean time)
        roof = np.maximum(nbytes / bw, nflops / fl)  # [R]
        pred = y
        for _ in range(2):
            w = 1.0 / np.maximum(pred, 1e-6)  # [R]
            coef = nnls(design * w[:, None], (y - roof) * w)
            pred = roof + design @ coef  # [R]
        err = (pred - y) * w
        return float(np.sqrt(np.mean(err ** 2))), coef

    err, coef, bw, fl = _grid_best(BW_GRID, FLOPS_GRID, score)
    refine = np.logspace(-0.17, 0.17, 21)  # the coarse grid steps by 10^(1/6)
    err, coef, bw, fl = _grid_best(bw * refine, fl * refine, score)
    return bw, fl, coef, err


def _grid_best(grid_bw, grid_fl, score):
    best = (np.inf, None, 0.0, 0.0)
    for bw in grid_bw:
        for fl in grid_fl:
            err, coef = score(bw, fl)
            if err < best[0]:
                best = (err, coef, bw, fl)
    return best


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
    ov = Overheads(**{name: float(v) for name, v in zip(OVERHEAD_COLUMNS.values(), c)})
    hw = HardwareSpec(name, peak_flops=flops, peak_flops_fp8=flops, hbm_bw=bw, hbm_bytes=1e12,
                      nvlink_bw=bw, net_bw=bw, gpus_per_node=1, eff_bw=1.0, eff_flops=1.0,
                      comm_latency_s=0.0, overheads=ov)
    return {"hardware": hardware_to_dict(hw), "drafters": fit_drafters(model, f, bw, flops),
            "model": asdict(model), "fit": {"rows": len(rows), "target_rel_rmse": rmse}}


def with_drafter(hw: HardwareSpec, calib: dict, method: str | None) -> tuple[HardwareSpec, float]:
    """The hardware with `method`'s fitted drafter overheads, and its fitted draft_frac."""
    d = calib.get("drafters", {}).get(str(method))
    if d is None:
        return hw, 0.0
    ov = replace(hw.overheads, draft_iter_s=d["draft_iter_s"], draft_per_seq_s=d["draft_per_seq_s"])
    return replace(hw, overheads=ov), d["draft_frac"]


def recorded_steps_s(calib: dict, model: ModelSpec, rows: list[dict]) -> float:
    """Seconds the calibrated machine takes for recorded engine steps, each with its recorded batch,
    tokens and context: a held-out trace's measured time over this is the machine's drift since the fit
    runs (1.0: as fast), apart from any error of the iteration-level simulation."""
    f = features(rows)
    hw = hardware_from_dict(calib["hardware"])
    t = cost.target_step_s(hw, model, 1, f["active"], f["tokens_in"], f["ctx_sum"], f["pairs"],
                           f["prefill_tokens"], f["spec"])  # [R]
    for method in set(f["method"][f["spec"] > 0]):
        m = (f["spec"] > 0) & (f["method"] == method)
        hw_m, frac = with_drafter(hw, calib, method)
        t[m] += cost.draft_step_s(hw_m, model, 1, f["active"][m], f["ctx_sum"][m], f["k"][m], frac)
    return float(t.sum())
