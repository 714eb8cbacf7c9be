"""`specrl bench default-run` on a tiny task: one seed's SD on / SD off pair, one step each, side by side."""
import json

import yaml

from specrl.bench.default_run import speed
from specrl.cli.main import main
from tests.bench.conftest import train_overrides

PAIR_KEYS = {"seed", "rollout_s_on", "rollout_s_off", "step_s_on", "step_s_off", "R", "alpha", "step_bound",
             "step_speedup", "accuracy_on", "accuracy_off", "logprob_diff_on", "logprob_diff_off", "acceptance_first",
             "acceptance_last", "steps", "eval_steps"}


def test_a_pair_runs_and_its_rows_name_the_speedups(tiny_task, tmp_path, capsys):
    out = tmp_path / "dr"
    # the overrides after the list flag --seeds still reach both runs
    assert main(["bench", "default-run", "--out", str(out), "--seeds", "0", *train_overrides(*tiny_task)]) == 0
    pair, overall = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert PAIR_KEYS <= set(pair) and pair["seed"] == 0 and pair["steps"] == 1
    assert overall["overall"]["step_bound"] == 1 / (pair["R"] / pair["alpha"] + 1 - pair["R"])  # one pair: its own
    assert overall["lengths"]["first step"]["samples"] == 2 * 2  # prompts x n of the SD-off run
    assert (out / "compare.png").stat().st_size > 0 and (out / "lengths.png").stat().st_size > 0
    methods = {arm: yaml.safe_load((out / f"{arm}_seed0" / "config.yaml").read_text())["rollout"]["spec"]["method"]
               for arm in ("sd_on", "sd_off")}
    assert methods == {"sd_on": "suffix", "sd_off": None}


def test_the_step_bound_is_nemo_rls():
    # rollout 6 s of a 10 s step (R = 0.6), SD makes it 3 s (alpha = 2): bound 1 / (0.3 + 0.4) = 1.43
    got = speed({"rollout_s": 3.0, "step_s": 7.0}, {"rollout_s": 6.0, "step_s": 10.0})
    assert (got["R"], got["alpha"]) == (0.6, 2.0) and abs(got["step_bound"] - 1 / 0.7) < 1e-12
    assert got["step_speedup"] == 10.0 / 7.0
