"""`specrl simulate ...`: step | choices | sweep | project | calibrate | validate | specs. JSON lines on stdout."""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path

from specrl.config.renamed import rename
from specrl.sim.build import add_system_args, config_from_args
from specrl.sim.calibrate import calibrate, load_trace
from specrl.sim.hardware import HARDWARE
from specrl.sim.models import MODELS, ModelSpec, get_model
from specrl.sim.pipeline import compare


def _emit(row: dict) -> None:
    print(json.dumps(row, default=float), flush=True)


def cmd_step(a) -> int:
    r = compare(config_from_args(a))
    _emit({"kind": "step", "sd": False, **r["no_sd"]})
    _emit({"kind": "step", "sd": True, **r["sd"]})
    _emit({"kind": "speedup", **{k: v for k, v in r.items() if not isinstance(v, dict)}})
    return 0


def cmd_choices(a) -> int:
    """What the adaptive engine's rule picks at each running count and context on the simulated machine."""
    cfg = config_from_args(a)
    if cfg.sd is None or cfg.sd.auto is None:
        raise ValueError("choices shows what 'auto' picks: pass --method auto (with --auto-drafters or --auto-profile)")
    step = cfg.sd.auto.stepper(cfg.hw, cfg.model, cfg.tp)
    for ctx in a.contexts:
        for rows in a.rows:
            arm = step.arm(rows, cfg.workload.prompt_len + ctx)
            _emit({"kind": "choice", "running": rows, "context": cfg.workload.prompt_len + ctx, "arm": arm.label,
                   "drafter": arm.drafter, "lead": arm.lead, "k": arm.k})
    return 0


def cmd_sweep(a) -> int:
    from specrl.sim import sweep
    cfg = config_from_args(a)
    if cfg.sd is None:
        raise ValueError("sweep compares SD against no SD; pass a --method other than 'none'")
    acc, batch, gpus = sweep.vs_acceptance(cfg), sweep.vs_batch(cfg), sweep.vs_gpus(cfg)
    for row in acc + batch + gpus:
        _emit(row)
    if a.out:
        from specrl.sim.plots import plot_sweeps
        label = f"{cfg.model.name}, {cfg.hw.name}, k={cfg.sd.acceptance.k}"
        for p in plot_sweeps(acc, batch, gpus, Path(a.out), label):
            _emit({"kind": "plot", "path": str(p)})
    return 0


def cmd_project(a) -> int:
    from specrl.sim.project import format_table, projection_table
    rows = projection_table(a.hardware, tuple(a.gpus))
    if a.format == "table":
        print(format_table(rows))
    else:
        for row in rows:
            _emit({"kind": "projection", **row})
    return 0


def _policy_model(arg: str | None) -> ModelSpec:
    if arg:
        return get_model(arg)
    try:
        from specrl.tasks import default_policy_path
        return get_model(str(default_policy_path()))
    except Exception as e:  # the embedded policy may not be built yet
        raise ValueError(f"no --arch given and the embedded policy is unavailable ({e}); pass "
                         "--arch path/to/config.json of the traced model") from None


def _train_runs(paths, clock: str, heldout: bool):
    from specrl.sim.trainruns import load_train_run
    return [load_train_run(p, clock, heldout=heldout) for p in paths or []]


def cmd_calibrate(a) -> int:
    if not a.traces and not a.train_runs:
        raise ValueError("nothing to fit: pass --traces T.jsonl ... and/or --train-runs RUN_DIR ...")
    runs = _train_runs(a.train_runs, a.clock, heldout=False)
    rows = [row for t in a.traces or [] for row in load_trace(t)]
    rows += [row for r in runs for s in r.steps for row in s.rows]
    model = _policy_model(a.model)
    calib = calibrate(rows, model)
    if runs:
        from specrl.sim.trainruns import fit_pipeline
        fit_pipeline(calib, model, runs)
    calib["traces"] = [str(t) for t in a.traces or []] + [str(t) for t in a.train_runs or []]
    Path(a.out).write_text(json.dumps(calib, indent=1, default=float))
    hw = calib["hardware"]
    _emit({"kind": "calibration", "out": a.out, "bw_GBps": hw["hbm_bw"] / 1e9,
           "flops_G": hw["peak_flops"] / 1e9, "overheads": hw["overheads"],
           "drafters": calib["drafters"], "pipeline": calib.get("pipeline"), **calib["fit"]})
    return 0


def cmd_validate(a) -> int:
    from specrl.sim.traces import load_meta
    from specrl.sim.validate import Run, summary, validate
    if not Path(a.calibration).exists():
        raise FileNotFoundError(f"calibration file {a.calibration!r} not found; create it with "
                                "`specrl simulate calibrate --traces ... --out calibration.json`")
    calib = json.loads(Path(a.calibration).read_text())
    model = get_model(a.model) if a.model else ModelSpec(**calib["model"])
    if not a.traces and not a.train_runs:
        raise ValueError("nothing to predict: pass --traces HELD.jsonl ... and/or --train-runs RUN_DIR ...")
    if a.train_runs:
        from specrl.sim.trainruns import summary_train, validate_train
        runs = _train_runs(a.fit_train_runs, a.clock, False) + _train_runs(a.train_runs, a.clock, True)
        report = validate_train(calib, model, runs)
        for row in report:
            _emit({"kind": "validation", "clock": a.clock, **row})
        _emit({"kind": "validation", "clock": a.clock, **summary_train(report)})
    if not a.traces:
        return 0
    runs = []
    for paths, heldout in ((a.fit_traces or [], False), (a.traces, True)):
        for t in paths:
            rows = load_trace(t)
            runs.append(Run(Path(t).stem, rows, load_meta(t, rows), heldout))
    report = validate(calib, model, runs)
    for row in report:
        _emit({"kind": "validation", **row})
    _emit({"kind": "validation", **summary(report)})
    return 0


def cmd_specs(a) -> int:
    for hw in HARDWARE.values():
        _emit({"kind": "hardware", **asdict(hw)})
    for name in MODELS:
        _emit({"kind": "model", **get_model(name).summary()})
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="specrl simulate", description=__doc__)
    sub = p.add_subparsers(dest="cmd", required=True)
    add_system_args(sub.add_parser("step", help="one RL step, SD on vs off"))
    ch = sub.add_parser("choices", help="what --method auto picks per running count and context")
    add_system_args(ch)
    ch.add_argument("--rows", type=int, nargs="+", default=[1, 2, 4, 8, 16, 32, 48, 64],
                    help="running sequences to show the choice at")
    ch.add_argument("--contexts", type=int, nargs="+", default=[100],
                    help="response tokens so far (added to --prompt-len) to show the choice at")
    sw = sub.add_parser("sweep", help="speedup vs acceptance length, batch size, GPU count")
    add_system_args(sw)
    sw.add_argument("--out", default=None, help="directory to write the PNG plots to (default: none)")
    pr = sub.add_parser("project", help="Qwen3-8B / 235B projections beside NeMo-RL")
    pr.add_argument("--hardware", default="H100", help="H100 | H200 | B200 | GB200")
    pr.add_argument("--gpus", type=int, nargs="+", default=[64, 512, 2048], help="cluster sizes to project")
    pr.add_argument("--format", default="table", choices=("table", "jsonl"), help="a table, or JSON lines")
    ca = sub.add_parser("calibrate", help="fit this machine from engine traces")
    ca.add_argument("--traces", nargs="+", default=None, help="engine traces (LLM(..., trace_path=))")
    ca.add_argument("--train-runs", nargs="+", default=None,
                    help="`specrl train rollout.trace=true` run dirs: also fit training and sync")
    ca.add_argument("--clock", default="cpu", choices=("cpu", "wall"),
                    help="train runs: process-CPU seconds (immune to other load; use num_threads=1) or wall")
    ca.add_argument("--out", default="calibration.json", help="the calibration file to write")
    ca.add_argument("--arch", dest="model", default=None,
                    help="config.json of the traced model (default: the embedded policy's)")
    va = sub.add_parser("validate", help="predict held-out traced runs and report the error")
    va.add_argument("--calibration", default="calibration.json", help="written by `specrl simulate calibrate`")
    va.add_argument("--traces", nargs="+", default=None, help="held-out traces")
    va.add_argument("--fit-traces", nargs="*", default=None,
                    help="traces used for fitting (SD-off baselines, acceptance)")
    va.add_argument("--train-runs", nargs="+", default=None, help="held-out traced `specrl train` run dirs")
    va.add_argument("--fit-train-runs", nargs="*", default=None,
                    help="train run dirs used for fitting (SD-off baselines, acceptance)")
    va.add_argument("--clock", default="cpu", choices=("cpu", "wall"), help="as calibrate's --clock")
    va.add_argument("--arch", dest="model", default=None,
                    help="config.json of the traced model (default: the embedded policy's)")
    sub.add_parser("specs", help="list built-in hardware and models")
    return p


RENAMED = {"--sd-method": "--method", "--prompts": "--num-prompts", "--model": "--arch", "--plot-dir": "--out"}
COMMANDS = {"step": cmd_step, "choices": cmd_choices, "sweep": cmd_sweep, "project": cmd_project,
            "calibrate": cmd_calibrate, "validate": cmd_validate, "specs": cmd_specs}


REMOVED = {"--adaptive-max-batch": "'auto' no longer turns SD off above a fixed batch size: pass --method auto "
                                   "(the adaptive engine's cost model decides per iteration; --auto-drafters, "
                                   "--auto-profile) and delete --adaptive-max-batch"}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    for word in argv:
        if word.split("=")[0] in REMOVED:
            raise ValueError(REMOVED[word.split("=")[0]])
    a = build_parser().parse_args(rename(argv, RENAMED, "specrl simulate"))
    return COMMANDS[a.cmd](a)  # a bad argument ends in specrl.cli.main's error boundary


if __name__ == "__main__":
    sys.exit(main())
