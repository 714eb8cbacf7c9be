"""Replay recorded `specrl train` runs in the pipeline model.

A run recorded with `rollout.trace=true` holds the engine trace of every rollout (rollout_trace.jsonl,
rows tagged with their RL step) and each step's workload and timings (rollout_workload.jsonl: prompt
and response lengths, wall and process-CPU seconds of rollout, training and weight sync). Fit runs
supply engine-trace rows to `calibrate` and the training and sync terms of the step model; held-out
runs are then predicted from their workload alone (lengths, group size, slots, SD method and k, and
the acceptance measured on fit runs of the same method and k) through `pipeline.simulate_step`, the
function the cluster projections use.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from specrl.engine.methods import is_adaptive
from specrl.pipeline.run_dir import TRACE_FILE, WORKLOAD_FILE, read_jsonl
from specrl.sim import cost
from specrl.sim.acceptance import fit_batch_acceptance, from_acceptance_length, traced_k_rule
from specrl.sim.calibrate import nnls, recorded_steps_s, with_drafter
from specrl.sim.des import SDSetting
from specrl.sim.hardware import hardware_from_dict
from specrl.sim.models import ModelSpec
from specrl.sim.pipeline import SimConfig, simulate_step, train_tokens
from specrl.sim.validate import PREDICT_SEEDS, Run, pct, sd_for
from specrl.sim.workload import Empirical, Workload

CLOCKS = ("cpu", "wall")
PARTS = ("rollout", "train", "sync", "step")


@dataclass
class TrainStep:
    lengths: np.ndarray  # [N] response tokens per sequence
    prompt_len: float  # mean prompt tokens per sequence
    measured: dict[str, float]  # PARTS -> seconds on the run's clock
    rows: list[dict]  # engine-trace rows of this step's rollout, on the same clock
    wall_step: float  # the step's wall seconds (async speedups compare these)
    update_frac: float = 1.0  # share of rows the update ran (metrics.jsonl update_rows: zero advantages skipped)


@dataclass
class TrainRun:
    name: str
    method: str | None
    k: int
    prompts: int
    n: int
    max_num_seqs: int
    micro_batch: int | None
    steps: list[TrainStep]
    heldout: bool = True
    mode: str = "sync"
    lag: int = 0  # async: max_policy_lag

    @property
    def key(self) -> tuple:
        return (self.method, self.k)

    @property
    def shape(self) -> tuple:
        """What an SD-off run must share to be this run's baseline."""
        return (self.prompts, self.n, self.max_num_seqs, self.mode, self.lag)

    def as_run(self) -> Run:
        """The engine-level view (all rollout rows), for acceptance and verify length."""
        rows = [r for s in self.steps for r in s.rows]
        return Run(self.name, rows, {"method": self.method, "k": self.k}, self.heldout)

    def total(self, part: str) -> float:
        return float(sum(s.measured[part] for s in self.steps))


def load_train_run(path: str | Path, clock: str = "cpu", skip_steps: int = 1,
                   heldout: bool = True) -> TrainRun:
    """A traced run directory; the first `skip_steps` steps (warm-up: lazy init, first allocations) are
    dropped. clock="cpu" scales each step's trace to the process CPU time of its rollout, which other
    processes on a shared machine do not inflate (use it with num_threads=1)."""
    path = Path(path)
    if clock not in CLOCKS:
        raise ValueError(f"clock {clock!r}: expected one of {CLOCKS}")
    for name in (WORKLOAD_FILE, TRACE_FILE):
        if not (path / name).is_file():
            raise FileNotFoundError(f"{str(path / name)!r} not found: record the run with `specrl train "
                                    "rollout.trace=true ...`")
    work = read_jsonl(path / WORKLOAD_FILE)
    trace: dict[int, list[dict]] = {}
    for r in read_jsonl(path / TRACE_FILE):
        if r.get("call") == "rollout":
            trace.setdefault(int(r["rl_step"]), []).append(r)
    if len(work) <= skip_steps:
        raise ValueError(f"run {str(path)!r} has {len(work)} traced steps; need more than {skip_steps} "
                         "(the first is warm-up): raise max_steps")
    update = {int(m["step"]): float(m.get("update_rows", 1.0)) for m in read_jsonl(path / "metrics.jsonl")
              if "step" in m}
    steps = [_step(w, trace.get(int(w["step"]), []), clock, path, update.get(int(w["step"]), 1.0))
             for w in work[skip_steps:]]
    first = work[0]
    if first.get("mode", "sync") == "async" and (first.get("rollout_threads"), first.get("train_threads")) != (1, 1):
        raise ValueError(f"async run {str(path)!r} used {first.get('rollout_threads')} rollout and "
                         f"{first.get('train_threads')} training threads; the simulator replays async runs "
                         "with one core per stage: record them with pipeline.rollout_threads=1 "
                         "pipeline.train_threads=1")
    n = int(first["n"])
    return TrainRun(path.name, first["method"], int(first["k"]), len(first["response_lengths"]) // n, n,
                    int(first["max_num_seqs"]), first.get("micro_batch_size"), steps, heldout,
                    first.get("mode", "sync"), int(first.get("max_policy_lag", 0)))


def _step(w: dict, rows: list[dict], clock: str, path: Path, update_frac: float) -> TrainStep:
    """An async step's `step` time is the wall interval between two policy updates on either clock (its
    stages overlap); its rollout and training CPU times are those of their own threads."""
    if not rows:
        raise ValueError(f"run {str(path)!r}: step {w['step']} has no engine-trace rows in {TRACE_FILE}")
    suffix = "_cpu_s" if clock == "cpu" else "_s"
    measured = {p: float(w.get(p + suffix, w[p + "_s"])) for p in PARTS}  # async rows have no step_cpu_s
    if clock == "cpu":
        total = sum(r["draft_s"] + r["verify_s"] + r["other_s"] for r in rows)
        scale = measured["rollout"] / max(total, 1e-12)
        rows = [{**r, **{k: r[k] * scale for k in ("draft_s", "verify_s", "other_s")}} for r in rows]
    return TrainStep(np.asarray(w["response_lengths"], dtype=np.int64), float(np.mean(w["prompt_lens"])),
                     measured, rows, float(w["step_s"]), update_frac)


def fit_pipeline(calib: dict, model: ModelSpec, runs: list[TrainRun]) -> dict:
    """Fits the step model's training and sync terms on the fit runs' steps, in place:
    train = train_step_s + 6 N tokens / (peak * mfu), sync = sync_fixed_s + weight bytes / bw."""
    hw = hardware_from_dict(calib["hardware"])
    overlapped = [r.name for r in runs if r.mode == "async"]
    if overlapped:
        raise ValueError(f"fit runs {overlapped} are async: their stages overlap and their sync time is a "
                         "snapshot copy, so fit on sync runs and hold async runs out")
    steps = [(s, r.micro_batch) for r in runs for s in r.steps]
    if not steps:
        raise ValueError("no fit train-run steps: pass at least one traced `specrl train` run to fit on")
    tokens = np.array([s.update_frac * train_tokens(s.lengths, s.prompt_len, mb) for s, mb in steps])  # [S]
    ideal = 6.0 * model.active_params * tokens / hw.peak_flops  # [S] seconds at MFU 1
    y = np.array([s.measured["train"] for s, _ in steps])  # [S]
    design = np.stack([np.ones_like(y), ideal], 1)  # [S, 2]
    pred = y
    for _ in range(2):  # relative errors, relative to the fit (as in calibrate.fit_target)
        w = 1.0 / np.maximum(pred, 1e-9)
        c = nnls(design * w[:, None], y * w)
        pred = design @ c
    mfu = 1.0 / c[1] if c[1] > 0 else 1.0
    shard = model.total_params * cost.DTYPE_BYTES / hw.nvlink_bw
    sync = max(0.0, float(np.mean([s.measured["sync"] for s, _ in steps])) - shard)
    calib["hardware"]["overheads"].update(train_step_s=float(c[0]), sync_fixed_s=sync)
    calib["pipeline"] = {"mfu": float(mfu), "train_step_s": float(c[0]), "sync_fixed_s": sync,
                         "steps": len(steps), "runs": [r.name for r in runs]}
    return calib


def predict_run(calib: dict, model: ModelSpec, run: TrainRun, fit_runs: list[TrainRun]) -> dict[str, float]:
    """Predicted seconds (rollout, train, sync, step) and engine iterations, summed over the run's steps."""
    hw, draft_frac = with_drafter(hardware_from_dict(calib["hardware"]), calib, run.method)
    sd = None
    if is_adaptive(run.method):
        sd = auto_sd_for(run, fit_runs, draft_frac)
    elif run.k > 0:
        sd, _ = sd_for(run.as_run(), [r.as_run() for r in same_method(run, fit_runs)], draft_frac)
    mfu = calib.get("pipeline", {}).get("mfu", 0.35)
    out = dict.fromkeys((*PARTS, "iterations"), 0.0)
    for s in run.steps:
        work = Workload(run.prompts, run.n, int(round(s.prompt_len)), Empirical(tuple(s.lengths.tolist())),
                        int(s.lengths.max()))
        for seed in range(PREDICT_SEEDS):
            cfg = SimConfig(hw, model, work, sd=sd, mfu=mfu, max_num_seqs=run.max_num_seqs, drafter_train=False,
                            seed=seed, train_micro_batch=run.micro_batch, update_frac=s.update_frac,
                            **placement(run))
            r = simulate_step(cfg, s.lengths)
            for p in PARTS:
                out[p] += r[p + "_s"] / PREDICT_SEEDS
            out["iterations"] += r["iterations"] / PREDICT_SEEDS
    return out


def same_method(run: TrainRun, fit_runs: list[TrainRun]) -> list[TrainRun]:
    """The fit runs of `run`'s method and k. None is an error: acceptance is fit on fit runs, never on the
    run being predicted (a held-out run would then be fit on itself)."""
    same = [r for r in fit_runs if r.key == run.key]
    if not same:
        have = sorted({f"{r.method}@{r.k}" for r in fit_runs if r.k > 0}) or ["none"]
        raise ValueError(f"run {run.name!r} ({run.method}@{run.k}) has no fit run of the same method and k to take "
                         f"its acceptance from (fit runs with SD: {', '.join(have)}): record one with "
                         f"`specrl train rollout.trace=true rollout.spec.method={run.method} "
                         f"rollout.spec.num_speculative_tokens={run.k}` and pass it as a fit run")
    return same


def auto_sd_for(run: TrainRun, fit_runs: list[TrainRun], draft_frac: float) -> SDSetting:
    """"auto" as the engine ran it: the draft length it chose per running count and the drafts and acceptance
    per running count, read off the traces of fit runs of the same method and k (`traced_k_rule`; the
    adaptive engine learns its choices on the machine, so a trace is what says them)."""
    rows = [row for r in same_method(run, fit_runs) for s in r.steps for row in s.rows]
    k_rule, n_max = traced_k_rule(rows)
    acc = fit_batch_acceptance(rows, k_rule, n_max)
    mean = from_acceptance_length(min(acc.mean_emitted, run.k + 1.0), run.k)
    return SDSetting(mean, draft_frac, by_batch=acc)


def placement(run: TrainRun) -> dict:
    """The fit's unit of hardware is what one sync run used (one CPU core at num_threads=1). An async
    run puts its rollout worker and its trainer on one such unit each, and generates step by step; at
    lag 0 its stages take turns, as in a sync run."""
    if run.mode == "async" and run.lag > 0:
        return {"gpus": 2, "mode": "async", "max_lag": run.lag, "colocated": False, "rollout_frac": 0.5,
                "stream": False}
    return {"gpus": 1}


def validate_train(calib: dict, model: ModelSpec, runs: list[TrainRun]) -> list[dict]:
    """One row per held-out run: step and rollout time, and the SD speedups against the SD-off run of
    the same prompts x n (fit or held out)."""
    fit = [r for r in runs if not r.heldout]
    pred = {r.name: predict_run(calib, model, r, fit) for r in runs}
    base = {r.shape: r for r in runs if r.k == 0}
    sync: dict[tuple, list[TrainRun]] = {}  # every sync run of a workload and method (repeats average)
    for r in runs:
        if r.mode == "sync":
            sync.setdefault((r.prompts, r.n, r.max_num_seqs, r.key), []).append(r)
    out = []
    for r in (r for r in runs if r.heldout):
        p, steps = pred[r.name], len(r.steps)
        row = {"run": r.name, "mode": r.mode, "lag": r.lag, "method": r.method, "k": r.k, "prompts": r.prompts,
               "n": r.n, "max_num_seqs": r.max_num_seqs, "steps": steps}
        # engine steps per RL step (the engine's prefill is a step of its own; the simulator's is not)
        row.update(measured_engine_steps=sum(len(x.rows) for x in r.steps) / steps,
                   predicted_engine_steps=p["iterations"] / steps,
                   machine_drift=r.total("rollout") / recorded_steps_s(calib, model, r.as_run().rows))
        for part in ("step", "rollout"):
            m = r.total(part)
            row.update({f"measured_{part}_s": m / steps, f"predicted_{part}_s": p[part] / steps,
                        f"err_{part}_pct": pct(p[part], m)})
        b = base.get(r.shape)
        if r.k > 0 and b is not None:
            for part in ("step", "rollout"):
                meas = (b.total(part) / len(b.steps)) / (r.total(part) / steps)
                prd = (pred[b.name][part] / len(b.steps)) / (p[part] / steps)
                row.update({f"measured_{part}_speedup": meas, f"predicted_{part}_speedup": prd,
                            f"err_{part}_speedup_pct": pct(prd, meas)})
        same = sync.get((r.prompts, r.n, r.max_num_seqs, r.key))
        if r.mode == "async" and same:  # async against the sync runs of the same workload and method
            meas = np.mean([x.wall_step for s in same for x in s.steps]) / np.mean([x.wall_step for x in r.steps])
            prd = (sum(pred[s.name]["step"] for s in same) / sum(len(s.steps) for s in same)) / (p["step"] / steps)
            row.update(measured_async_speedup=meas, predicted_async_speedup=prd,
                       err_async_speedup_pct=pct(prd, meas))
        out.append(row)
    return out


def summary_train(report: list[dict]) -> dict:
    def stat(key):
        v = np.abs([r[key] for r in report if key in r])
        return (float(v.mean()), float(v.max())) if v.size else (None, None)
    out = {"summary": True, "heldout_runs": len(report)}
    for key in ("err_step_pct", "err_rollout_pct", "err_step_speedup_pct", "err_rollout_speedup_pct",
                "err_async_speedup_pct"):
        out["mean_abs_" + key], out["max_abs_" + key] = stat(key)
    return out
