"""Predict recorded engine runs from a calibration and report the error in time and SD speedup."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specrl.sim.acceptance import fit_geometric, fit_length_acceptance, sequence_steps
from specrl.sim.calibrate import features, with_drafter
from specrl.sim.des import Engine, SDSetting, simulate_replica
from specrl.sim.hardware import hardware_from_dict
from specrl.sim.models import ModelSpec

PREDICT_SEEDS = 5  # SD step counts are random; average a few draws


@dataclass
class Run:
    name: str
    rows: list[dict]
    meta: dict  # prompt_len, response_lens, max_num_seqs, k, method, workload
    heldout: bool

    @property
    def measured_s(self) -> float:
        f = features(self.rows)
        return float(np.sum(f["target_s"] + f["draft_s"]))

    @property
    def key(self) -> tuple:
        return (self.meta.get("method"), int(self.meta.get("k", 0)))


def sd_for(run: Run, fit_runs: list[Run], draft_frac: float) -> tuple[SDSetting, str]:
    """Acceptance and verified tokens per step of the same method and k, measured on fit runs (both
    are properties of drafter and workload, not of batch size); falls back to the run itself."""
    same = [r for r in fit_runs if r.key == run.key and r.meta.get("k", 0) > 0]
    source = "fit-runs" if same else "self"
    rows = [row for r in (same or [run]) for row in r.rows if row.get("phase") == "spec"]
    acc = np.array([row["accepted_tokens"] for row in rows], dtype=float)
    seqs = np.array([row["active"] for row in rows], dtype=float)
    verify_len = sum(row["tokens_in"] for row in rows) / max(seqs.sum(), 1)
    return SDSetting(fit_geometric(acc, seqs, run.key[1]), draft_frac, verify_len=verify_len,
                     by_length=_length_acceptance(same, run.key[1])), source


def _length_acceptance(runs: list[Run], k: int):
    """Acceptance per response length, from the fit runs that are one generate() call without
    queueing (every sequence in from the start), where per-sequence steps can be read off the trace."""
    lengths, steps = [], []
    for r in runs:
        lens = r.meta.get("response_lens") or []
        active = [row["active"] for row in r.rows if row.get("phase") == "spec"]
        if not lens or not active or max(row["active"] for row in r.rows) < len(lens):
            continue
        ls, st = sequence_steps(lens, active)
        lengths.append(ls)
        steps.append(st)
    if not lengths:
        return None
    return fit_length_acceptance(np.concatenate(lengths), np.concatenate(steps), k)


def predict_s(calib: dict, model: ModelSpec, run: Run, fit_runs: list[Run]) -> tuple[float, dict]:
    """Simulated generate() time of the run's workload on the calibrated machine."""
    hw, draft_frac = with_drafter(hardware_from_dict(calib["hardware"]), calib, run.key[0])
    info: dict = {}
    sd = None
    if run.key[1] > 0:
        sd, info["acceptance_source"] = sd_for(run, fit_runs, draft_frac)
        info["acceptance_length"] = sd.acceptance.mean_emitted
        info["verify_len"] = sd.tokens_per_seq
    lengths = np.asarray(run.meta["response_lens"], dtype=np.int64)  # [S]
    slots = int(run.meta.get("max_num_seqs", lengths.size))
    prompt_len = int(round(run.meta["prompt_len"]))
    times = [simulate_replica(Engine(hw, model), lengths, prompt_len, slots, sd,
                              np.random.default_rng(s)).time_s for s in range(PREDICT_SEEDS)]
    return float(np.mean(times)), info


def pct(pred: float, meas: float) -> float:
    return 100.0 * (pred - meas) / meas


def validate(calib: dict, model: ModelSpec, runs: list[Run]) -> list[dict]:
    """One report row per held-out run: total generation time, mean step time, SD speedup against
    the SD-off run of the same workload (which may be a fit run)."""
    fit_runs = [r for r in runs if not r.heldout]
    pred = {r.name: predict_s(calib, model, r, fit_runs) for r in runs}
    base = {r.meta.get("workload"): r for r in runs if r.key[1] == 0}
    out = []
    for r in (r for r in runs if r.heldout):
        p, info = pred[r.name]
        row = {"run": r.name, "method": r.key[0], "k": r.key[1], "batch": len(r.meta["response_lens"]),
               "measured_s": r.measured_s, "predicted_s": p, "err_time_pct": pct(p, r.measured_s),
               "measured_step_ms": 1e3 * r.measured_s / len(r.rows), **info}
        b = base.get(r.meta.get("workload"))
        if r.key[1] > 0 and b is not None:
            row["measured_speedup"] = b.measured_s / r.measured_s
            row["predicted_speedup"] = pred[b.name][0] / p
            row["err_speedup_pct"] = pct(row["predicted_speedup"], row["measured_speedup"])
        out.append(row)
    return out


def summary(report: list[dict]) -> dict:
    t = np.abs([r["err_time_pct"] for r in report])
    s = np.abs([r["err_speedup_pct"] for r in report if "err_speedup_pct" in r])
    return {"summary": True, "heldout_runs": len(report),
            "mean_abs_err_time_pct": float(t.mean()) if t.size else None,
            "max_abs_err_time_pct": float(t.max()) if t.size else None,
            "mean_abs_err_speedup_pct": float(s.mean()) if s.size else None,
            "max_abs_err_speedup_pct": float(s.max()) if s.size else None}
