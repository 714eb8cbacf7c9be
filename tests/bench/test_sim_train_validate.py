"""`specrl bench sim-train-validate` on a tiny task: a few fit runs and one held-out run (the full bench trains 21),
then the simulator's calibration and its predictions on both clocks."""
import json

import specrl.bench.sim_train_validate as bench
from specrl.cli.main import main
from tests.bench.conftest import train_overrides

# (method, k, prompts per step, n[, engine slots]): shapes that differ in sequences per step, so that the
# training cost's fixed and per-token terms separate
FIT = {"off_4x2": (None, 0, 4, 2), "suffix4_4x2": ("suffix", 4, 4, 2), "off_2x4": (None, 0, 2, 4),
       "off_2x2_s2": (None, 0, 2, 2, 2)}
HELD = {"suffix4_2x4": ("suffix", 4, 2, 4)}
SHAPE = ("rollout.prompts_per_step", "rollout.n", "schedule.max_steps")  # the bench sets these per run


def test_fit_runs_and_a_held_out_run_are_predicted(tiny_task, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(bench, "FIT", FIT)
    monkeypatch.setattr(bench, "HELD", HELD)
    extra = [o for o in train_overrides(*tiny_task, method=None) if not o.startswith(SHAPE)]
    out = tmp_path / "v"
    assert main(["bench", "sim-train-validate", "--out", str(out), "--steps", "2", *extra]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    recorded = [r["run"] for r in rows if r.get("kind") == "recorded"]
    assert [p.rsplit("/", 1)[1] for p in recorded] == [*FIT, *HELD]
    assert (out / "calibration_cpu.json").is_file() and (out / "calibration_wall.json").is_file()
    # per clock: a calibration on the fit runs, then the held-out run predicted from its workload, then a summary
    validated = [r for r in rows if r["kind"] == "validation" and not r.get("summary")]
    assert [(r["clock"], r["run"], r["method"], r["prompts"], r["n"]) for r in validated] == [
        ("cpu", "suffix4_2x4", "suffix", 2, 4), ("wall", "suffix4_2x4", "suffix", 2, 4)]
    assert all(r["steps"] == 1 for r in validated)  # of 2 steps, the first is warm-up
    assert [r["heldout_runs"] for r in rows if r.get("summary")] == [1, 1]
    # a second call refits on the runs already recorded: nothing is trained again
    log = (out / "off_4x2" / "metrics.jsonl").stat().st_mtime_ns
    assert main(["bench", "sim-train-validate", "--out", str(out), "--steps", "2", *extra]) == 0
    assert (out / "off_4x2" / "metrics.jsonl").stat().st_mtime_ns == log
