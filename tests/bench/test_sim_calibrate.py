"""`specrl bench sim-calibrate` on a tiny policy: every batch size and SD config once, then the simulator fit on
some of the traces and its predictions of the held-out SD runs, on both clocks."""
import json

from specrl.bench.sim_calibrate import BATCHES, FIT_BATCHES, SD_CONFIGS
from specrl.cli.main import main


def test_every_config_is_traced_then_the_held_out_ones_predicted(tiny_task_policy, tmp_path, capsys):
    out = tmp_path / "cal"
    assert main(["bench", "sim-calibrate", "--model", str(tiny_task_policy), "--out", str(out), "--repeats", "1",
                 "--max-tokens", "4", "--threads", "1"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    measured = [r for r in rows if r.get("kind") == "measured"]
    assert sorted((r["batch"], r["method"] or "", r["k"]) for r in measured) == sorted(
        (b, m or "", k) for b in BATCHES for m, k in SD_CONFIGS)
    # greedy: a batch's SD runs emit what its SD-off run does, so they generate the same token count
    for b in BATCHES:
        assert len({r["tokens"] for r in measured if r["batch"] == b}) == 1
    assert [r["clock"] for r in rows if r.get("kind") == "clock"] == ["cpu", "wall"]
    assert (out / "calibration_cpu.json").is_file() and (out / "calibration_wall.json").is_file()
    assert [r["kind"] for r in rows if r["kind"] == "calibration"] == ["calibration"] * 2  # one fit per clock
    # predicted: the SD runs at the batch sizes the SD fit never saw, once per clock
    held = sorted((b, m, k) for b in BATCHES if b not in FIT_BATCHES for m, k in SD_CONFIGS if m)
    validated = [r for r in rows if r["kind"] == "validation" and not r.get("summary")]
    assert sorted((r["batch"], r["method"], r["k"]) for r in validated) == sorted(held * 2)
    assert all({"measured_s", "predicted_s", "err_time_pct", "measured_speedup"} <= set(r) for r in validated)
    assert [r["heldout_runs"] for r in rows if r.get("summary")] == [len(held)] * 2
