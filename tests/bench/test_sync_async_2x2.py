"""`specrl bench sync-async-2x2` on a tiny task: two cells of one seed, their rows and figure, then --reuse."""
import json

import pytest

from specrl.cli.main import main
from tests.bench.conftest import train_overrides

RUN_KEYS = {"kind", "cell", "seed", "steps", "step_s", "rollout_s", "train_s", "steps_total_s", "wall_s", "accuracy",
            "eval_steps", "logprob_diff_max", "sampler_p", "acceptance_length", "policy_lag_mean", "stage_threads"}


def test_two_cells_then_their_summary_again_without_training(tiny_task, tmp_path, capsys):
    out = tmp_path / "2x2"
    args = ["bench", "sync-async-2x2", "--out", str(out), "--seeds", "0", "--cells", "sync:off,sync:suffix",
            "--no-sim", *train_overrides(*tiny_task, steps=2, method=None)]
    assert main(args) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(r["kind"], r["cell"]) for r in rows] == [("done", "sync:off"), ("done", "sync:suffix"),
                                                      ("run", "sync:off"), ("run", "sync:suffix"),
                                                      ("cell", "sync:off"), ("cell", "sync:suffix")]
    off, suffix = rows[4:]
    assert all(RUN_KEYS <= set(r) for r in rows[2:4]) and rows[2]["steps"] == 2
    assert rows[2]["acceptance_length"] is None and rows[3]["acceptance_length"] >= 1.0  # SD off has none
    assert off["step_speedup"] == 1.0 and suffix["step_speedup"] == pytest.approx(off["step_s"] / suffix["step_s"])
    assert (out / "2x2.png").stat().st_size > 0
    assert [json.loads(line) for line in (out / "summary.jsonl").read_text().splitlines()] == rows[2:]
    assert main(args + ["--reuse"]) == 0  # the runs are there: summarised again, none trained
    assert [json.loads(line) for line in capsys.readouterr().out.splitlines()] == rows[2:]


def test_one_step_is_too_few(tmp_path):
    from specrl.bench.sync_async_2x2 import load
    from specrl.errors import UserError
    (tmp_path / "metrics.jsonl").write_text(json.dumps({"step": 1, "step_s": 1.0}) + "\n")
    with pytest.raises(UserError, match=r"1 step\(s\) and the first is left out as warm-up: run at least 2 steps"):
        load(tmp_path, "sync:off", 0)
