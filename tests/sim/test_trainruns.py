"""Traced `specrl train` runs: what they record, and the simulator's fit and prediction of RL steps."""
from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from specrl.pipeline.run_dir import RunDir, read_jsonl
from specrl.sim import cost
from specrl.sim.calibrate import calibrate
from specrl.sim.cli import main as sim_main
from specrl.sim.des import Engine, simulate_replica
from specrl.sim.hardware import hardware_to_dict
from specrl.sim.models import from_hf_config
from specrl.sim.pipeline import train_tokens
from specrl.sim.trainruns import (TrainRun, TrainStep, auto_sd_for, fit_pipeline, load_train_run, predict_run,
                                  validate_train)
from specrl.cli.train import main as train_main
from tests.pipeline.fixtures import make_setup, overrides
from tests.sim.helpers import TINY, toy_hw


@pytest.fixture(scope="module")
def traced_runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("traced")
    model, data = make_setup(tmp)
    runs = {}
    for name, method, extra in (("off", "null", {}), ("suffix", "suffix", {}),
                                ("suffix_fit", "suffix", {"seed": 1}),  # acceptance for predicting "suffix"
                                ("async_off", "null", {"pipeline.mode": "async", "pipeline.rollout_threads": 1, "pipeline.train_threads": 1})):
        out = tmp / name
        args = overrides(model, data, out, **{"rollout.trace": "true", "rollout.spec.method": method,
                                               "schedule.max_steps": 3, "num_threads": 1, **extra})
        assert train_main(args) == 0
        runs[name] = out
    return model, runs


def test_trace_rows_are_tagged_with_their_rl_step_and_match_the_logged_lengths(traced_runs):
    _, runs = traced_runs
    trace = read_jsonl(runs["suffix"] / "rollout_trace.jsonl")
    work = read_jsonl(runs["suffix"] / "rollout_workload.jsonl")
    assert [w["step"] for w in work] == [1, 2, 3]
    assert {r["call"] for r in trace} == {"rollout", "eval"}
    assert sorted({r["rl_step"] for r in trace if r["call"] == "eval"}) == [0, 2, 3]  # eval_every=2, and the end
    for w in work:
        rows = [r for r in trace if r.get("rl_step") == w["step"] and r["call"] == "rollout"]
        assert len(w["response_lengths"]) == 3 * 4 == len(w["prompt_lens"])  # prompts_per_step x n
        # every token the engine emitted in this step's rollout is one of the logged response tokens
        assert sum(r["emitted_tokens"] for r in rows) == sum(w["response_lengths"])
        assert w["method"] == "suffix" and w["k"] == 4 and w["n"] == 4 and w["micro_batch_size"] is None  # packed
        assert w["step_cpu_s"] >= w["rollout_cpu_s"] > 0


def test_load_train_run_drops_warmup_and_puts_the_trace_on_the_cpu_clock(traced_runs):
    _, runs = traced_runs
    run = load_train_run(runs["suffix"], "cpu")
    work = read_jsonl(runs["suffix"] / "rollout_workload.jsonl")
    assert len(run.steps) == 2 and (run.prompts, run.n, run.k, run.method) == (3, 4, 4, "suffix")
    for step, w in zip(run.steps, work[1:]):
        assert sum(r["draft_s"] + r["verify_s"] + r["other_s"] for r in step.rows) == \
            pytest.approx(w["rollout_cpu_s"])
        assert step.measured["train"] == w["train_cpu_s"]
    wall = load_train_run(runs["suffix"], "wall")
    assert wall.steps[0].measured["step"] == work[1]["step_s"]


def test_calibrate_and_validate_on_train_runs_through_the_cli(traced_runs, tmp_path, capsys):
    model, runs = traced_runs
    cal = tmp_path / "cal.json"
    assert sim_main(["calibrate", "--train-runs", str(runs["off"]), "--out", str(cal),
                     "--model", str(model / "config.json")]) == 0
    assert json.loads(cal.read_text())["pipeline"]["mfu"] > 0
    capsys.readouterr()
    assert sim_main(["validate", "--calibration", str(cal), "--fit-train-runs", str(runs["off"]),
                     str(runs["suffix_fit"]), "--train-runs", str(runs["suffix"])]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    row = rows[0]
    assert row["run"] == "suffix" and row["predicted_step_s"] > 0 and "err_step_speedup_pct" in row
    assert rows[-1]["summary"] and rows[-1]["heldout_runs"] == 1


def test_an_async_run_is_predicted_with_overlapped_stages(traced_runs, tmp_path):
    """The same workload as a sync step predicts rollout + train + sync; as an async step (one unit of
    the fit's hardware per stage), the slower stage alone; against the sync run it is an async speedup."""
    model, runs = traced_runs
    hw_model = from_hf_config(json.loads((model / "config.json").read_text()))
    off, a = load_train_run(runs["off"], "cpu", heldout=False), load_train_run(runs["async_off"], "cpu")
    cal = calibrate(off.as_run().rows, hw_model)
    assert (a.mode, a.lag, off.mode, off.lag) == ("async", 1, "sync", 0)
    fit_pipeline(cal, hw_model, [off])
    pred_async = predict_run(cal, hw_model, a, [off])
    pred_sync = predict_run(cal, hw_model, replace(a, mode="sync", lag=0), [off])
    assert pred_sync["step"] == pytest.approx(pred_sync["rollout"] + pred_sync["train"] + pred_sync["sync"])
    # summed over steps and seeds of max(rollout + sync, train) per step
    overlapped = pred_async["rollout"] + pred_async["sync"], pred_async["train"]
    assert max(overlapped) - 1e-12 <= pred_async["step"] <= sum(overlapped) * (1 - 1e-3)
    assert pred_async["step"] < pred_sync["step"]
    row = validate_train(cal, hw_model, [off, a])[0]
    assert row["mode"] == "async" and row["lag"] == 1
    sync_step = predict_run(cal, hw_model, off, [off])["step"] / len(off.steps)
    assert row["predicted_async_speedup"] == pytest.approx(sync_step / (pred_async["step"] / len(a.steps)))
    # measured on one clock, the wall (an async step has no process-CPU time of its own)
    assert row["measured_async_speedup"] == pytest.approx(np.mean([s.wall_step for s in off.steps]) /
                                                          np.mean([s.wall_step for s in a.steps]))
    assert a.steps[0].measured["step"] == a.steps[0].wall_step
    with pytest.raises(ValueError, match="fit on sync runs and hold async runs out"):
        fit_pipeline(cal, hw_model, [off, a])
    # at lag 0 the stages take turns: predicted like a sync run
    assert predict_run(cal, hw_model, replace(a, lag=0), [off]) == pred_sync


def test_an_async_run_with_other_stage_threads_is_refused(traced_runs, tmp_path):
    _, runs = traced_runs
    src = runs["async_off"]
    dst = tmp_path / "two_threads"
    dst.mkdir()
    rows = read_jsonl(src / "rollout_workload.jsonl")
    (dst / "rollout_workload.jsonl").write_text("".join(json.dumps({**r, "train_threads": 2}) + "\n" for r in rows))
    (dst / "rollout_trace.jsonl").write_text((src / "rollout_trace.jsonl").read_text())
    with pytest.raises(ValueError, match="pipeline.rollout_threads=1 pipeline.train_threads=1"):
        load_train_run(dst)


def test_an_untraced_run_gets_an_error_that_names_the_switch(tmp_path):
    (tmp_path / "metrics.jsonl").touch()
    with pytest.raises(FileNotFoundError, match="rollout.trace=true"):
        load_train_run(tmp_path)


def test_resume_truncates_the_trace_past_the_checkpoint(tmp_path):
    rows = [{"rl_step": s, "call": c} for s, c in ((0, "eval"), (1, "rollout"), (2, "rollout"), (2, "eval"),
                                                     (3, "rollout"), (3, "eval"))]
    (tmp_path / "rollout_trace.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "rollout_workload.jsonl").write_text("".join(json.dumps({"step": s}) + "\n" for s in (1, 2, 3)))
    (tmp_path / "metrics.jsonl").touch()
    RunDir(tmp_path, tensorboard=False).truncate(2)
    assert [(r["rl_step"], r["call"]) for r in read_jsonl(tmp_path / "rollout_trace.jsonl")] == rows_kept(rows, 2)
    assert [r["step"] for r in read_jsonl(tmp_path / "rollout_workload.jsonl")] == [1, 2]


def rows_kept(rows, step):
    return [(r["rl_step"], r["call"]) for r in rows if r["rl_step"] <= step]


def test_train_tokens_pads_length_sorted_micro_batches():
    # sequences of 2 + [10, 1, 3, 2] tokens sort to [3, 4, 5, 12]; micro-batches [3, 4] and [5, 12]
    assert train_tokens([10, 1, 3, 2], 2) == 24
    assert train_tokens([10, 1, 3, 2], 2, micro_batch=2) == 2 * 4 + 2 * 12
    assert train_tokens([10, 1, 3, 2], 2, micro_batch=4) == 4 * 12


def test_a_shared_prompt_is_prefilled_once_per_group():
    engine = Engine(toy_hw(), from_hf_config(TINY))
    lengths = np.full(8, 5)
    alone = simulate_replica(engine, lengths, 40, 8, None, np.random.default_rng(0))
    shared = simulate_replica(engine, lengths, 40, 8, None, np.random.default_rng(0), prompt_share=4)
    assert alone.tokens_in[0] == 8 * 40 and shared.tokens_in[0] == 2 * 40
    assert np.array_equal(alone.tokens_in[1:], shared.tokens_in[1:])  # decoding is unchanged
    assert np.array_equal(alone.ctx_sum, shared.ctx_sum)  # every sequence still attends its prompt


def test_fit_pipeline_recovers_a_known_training_rate_and_fixed_costs():
    model = from_hf_config(TINY)
    hw = toy_hw(bw=1e9, flops=1e9)
    calib = calibrate([{"active": 1, "tokens_in": 1, "k": 0, "verify_s": 0.01, "other_s": 0.0, "draft_s": 0.0,
                        "context_len_mean": 4.0, "phase": "decode"}] * 3, model)
    calib["hardware"] = hardware_to_dict(hw)
    mfu, fixed, sync = 0.25, 0.5, 0.02
    rng = np.random.default_rng(0)
    steps = []
    for i in range(6):
        lengths = rng.integers(5, 60, size=16)
        update = 1.0 - i / 10  # the share of rows the update ran (zero-advantage rows skipped)
        tokens = update * train_tokens(lengths, 7.0, 4)
        train = fixed + 6 * model.active_params * tokens / (hw.peak_flops * mfu)
        shard = model.total_params * cost.DTYPE_BYTES / hw.nvlink_bw
        step = 1.0 + train + sync + shard
        steps.append(TrainStep(lengths, 7.0, {"rollout": 1.0, "train": train, "sync": sync + shard, "step": step},
                               [], step, update))
    fit_pipeline(calib, model, [TrainRun("synthetic", None, 0, 4, 4, 16, 4, steps, heldout=False)])
    assert calib["pipeline"]["mfu"] == pytest.approx(mfu, rel=1e-6)
    assert calib["pipeline"]["train_step_s"] == pytest.approx(fixed, rel=1e-6)
    assert calib["hardware"]["overheads"]["sync_fixed_s"] == pytest.approx(sync, rel=1e-6)


def test_auto_is_replayed_with_the_draft_lengths_its_trace_shows_per_batch_size():
    # The fit run's trace: at 1 running the engine drafted 4 and 3 were accepted, at 8 running it drafted 1
    # (0.5 accepted), at 64 running it drafted nothing (decode steps). A count the trace never saw takes the
    # nearest seen one: 3 -> 1's k 4 (2 away vs 5), 5 -> 8's k 1 (3 away vs 4), 40 -> 64's 0 (24 vs 32).
    rows = ([{"phase": "spec", "active": 1, "k": 4, "tokens_in": 5, "accepted_tokens": 3}] * 4
            + [{"phase": "spec", "active": 8, "k": 1, "tokens_in": 16, "accepted_tokens": 4}] * 4
            + [{"phase": "decode", "active": 64, "k": 0, "tokens_in": 64, "accepted_tokens": 0}] * 4)
    step = TrainStep(np.array([10]), 5.0, {}, rows, 1.0)
    fit = TrainRun("fit", "auto", 4, 8, 8, 64, None, [step], heldout=False)
    held = replace(fit, name="held", steps=[replace(step, rows=[])], heldout=True)
    sd = auto_sd_for(held, [fit], 0.0)
    acc = sd.by_batch
    assert [acc.k[acc.index(n)] for n in (1, 3, 5, 8, 9, 40, 64, 100)] == [4, 4, 1, 1, 1, 0, 0, 0]
    assert acc.accepted[acc.index(1)] == 3.0 and acc.accepted[acc.index(8)] == 0.5
    assert acc.drafts[acc.index(1)] == 4.0 and acc.drafts[acc.index(8)] == 1.0
    # acceptance is never fit on the run being predicted: no fit run of its method and k is an error
    with pytest.raises(ValueError, match=r"no fit run of the same method and k.*rollout.spec.method=auto"):
        auto_sd_for(held, [replace(fit, k=2)], 0.0)