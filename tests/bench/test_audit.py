"""`specrl bench audit`: the faults it builds break the verify they replace, the alarms' replay (e-process and
the PIT's window) counts steps as a run would, and calibration rows feed the summary and its PNG."""
from __future__ import annotations

import json
import math

import pytest
import torch

from specrl.bench.audit import alarms, broken_verify
from specrl.audit.bets import COMPONENTS
from specrl.cli.main import main
from specrl.engine.sampler import verify


def _verify_args():
    # one row, k = 2 drafts of token 0; p puts 0.1 on it, q (one-hot, an n-gram draft) puts 1: accept u < 0.1
    p = torch.tensor([[[0.1, 0.9], [0.1, 0.9], [0.5, 0.5]]])  # [1, 3, 2]
    q = torch.tensor([[[1.0, 0.0], [1.0, 0.0]]])  # [1, 2, 2]
    return p, torch.tensor([[0, 0]]), q, torch.tensor([[0.5, 0.5]]), torch.tensor([[0.01, 0.01, 0.01]])


def test_the_faults_change_what_verify_decides():
    p, drafts, q, ua, us = _verify_args()
    exact = verify(p, drafts, q, ua, us)
    assert exact.num_accepted.tolist() == [0] and exact.tokens[0, 0] == 1  # rejected: the residual is token 1
    assert broken_verify("accept_all")(p, drafts, q, ua, us).num_accepted.tolist() == [2]  # both drafts taken
    # residual_p resamples from p: u = 0.01 < p(0) = 0.1 gives token 0, which the residual max(p - q, 0) never holds
    assert broken_verify("residual_p")(p, drafts, q, ua, us).tokens[0, 0] == 0


def _row(step, bets, z):
    return {"kind": "power", "fault": "x", "step": step, "tokens": 10, "impossible": 0, "z": z,
            "log_bets": [bets] * COMPONENTS}


def test_alarms_count_steps_as_a_run_would():
    # e-process: 3 + 4 = 7 > log(1000) = 6.91 at step 2; PIT window: (2 + 2 + 2) / sqrt(3) = 3.46 > 3.29 at step 3
    a = alarms([_row(0, 3.0, 2.0), _row(1, 4.0, 2.0), _row(2, 0.0, 2.0)])
    assert a["steps_e"] == 2 and a["steps_pit"] == 3 and a["tokens"] == 30
    assert a["max_log10_e"] == 7 / math.log(10)
    assert alarms([_row(0, -1.0, 0.0)]) == {**alarms([_row(0, -1.0, 0.0)]), "steps_e": None, "steps_pit": None}


def test_calibration_rows_feed_the_summary_and_its_plot(tmp_path, capsys):
    rows = tmp_path / "cal.jsonl"
    assert main(["bench", "audit", "calibration", "--out", str(rows), "--paths", "off", "--steps", "2",
                 "--max-tokens", "4", "--chunk", "2"]) == 0
    written = [json.loads(line) for line in rows.read_text().splitlines()]
    assert [r["step"] for r in written] == [0, 1] and all(len(r["log_bets"]) == COMPONENTS for r in written)
    assert all(0 < r["tokens"] <= 8 * 8 * 4 for r in written)  # every group (8 of 8 samples), 4 tokens at most
    assert all(r["groups"] == list(range(8)) and sum(r["group_tokens"]) == r["tokens"] for r in written)
    assert main(["bench", "audit", "calibration", "--out", str(rows), "--paths", "off", "--steps", "2"]) == 0
    assert len(rows.read_text().splitlines()) == 2  # resumable: done steps are skipped
    capsys.readouterr()
    assert main(["bench", "audit", "summary", "--rows", str(rows), "--out", str(tmp_path / "c.png")]) == 0
    out = json.loads(capsys.readouterr().out.splitlines()[0])
    assert out["name"] == "off" and out["steps"] == 2 and out["steps_e"] is None and out["steps_e_2_groups"] is None
    assert (tmp_path / "c.png").stat().st_size > 0


def test_the_two_group_replay_keeps_the_groups_a_run_of_two_would_audit():
    from specrl.audit import choose_groups
    from specrl.bench.audit import few_groups
    from specrl.pipeline.steps import AUDIT_SALT
    from specrl.trainer.data import step_seed
    # 8 groups, group g bets g on every component and has g + 1 tokens: the replay sums the two drawn ones
    row = {**_row(3, 0.0, 0.0), "groups": list(range(8)), "group_bets": [[float(g)] * COMPONENTS for g in range(8)],
           "group_tokens": [g + 1 for g in range(8)], "group_impossible": [0] * 8}
    drawn = choose_groups(8, 2, step_seed(0, 3, salt=AUDIT_SALT))
    few = few_groups(row)
    assert few["log_bets"] == [float(sum(drawn))] * COMPONENTS and few["tokens"] == sum(g + 1 for g in drawn)
    assert few_groups(_row(3, 1.0, 0.0)) == _row(3, 1.0, 0.0)  # rows of 2 groups already: as they are


def test_merged_rows_are_one_step_of_their_tokens():
    from specrl.bench.audit import merged
    # steps of 3 and 4 nats: alone, the alarm (6.91) rings at the second; merged two at a time, at the first
    rows = [_row(0, 3.0, 1.0), _row(1, 4.0, 1.0), _row(2, -1.0, 1.0)]
    m = merged(rows, 2)
    assert [r["step"] for r in m] == [0, 1] and m[0]["tokens"] == 20 and m[0]["log_bets"][0] == 7.0
    assert alarms(m)["steps_e"] == 1 and alarms(rows)["steps_e"] == 2
    assert m[0]["z"] == pytest.approx(2 / math.sqrt(2))


def test_cost_prints_the_scorings_share_of_an_update(capsys):
    assert main(["bench", "audit", "cost", "--rows", "1", "--tokens", "8"]) == 0
    out = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert out["vocab"] == 44 and out["tokens"] == 8 and out["score_us_a_token"] > 0
    assert out["score_over_update"] > 0 and out["skipped_forward_over_update"] > 0
