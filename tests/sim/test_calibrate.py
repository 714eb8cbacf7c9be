import numpy as np
import pytest

from specrl.sim.acceptance import geometric
from specrl.sim.calibrate import calibrate, load_trace, nnls, recorded_steps_s
from specrl.sim.des import Engine, SDSetting
from specrl.sim.hardware import hardware_to_dict
from specrl.sim.traces import meta_from_trace, synthesize
from specrl.sim.validate import Run, summary, validate
from tests.sim.helpers import toy_hw

TRUTH = {"iter_s": 2e-3, "per_seq_s": 1e-4, "spec_iter_s": 5e-4, "spec_per_seq_s": 4e-5, "draft_iter_s": 1e-3,
         "draft_per_seq_s": 5e-5}


def _runs(model, noise=0.0):
    """Synthetic engine traces of a known machine: batch 1/4/16/64 x (no SD, n-gram k=2, k=4)."""
    engine = Engine(toy_hw(bw=2e10, flops=5e10, **TRUTH), model)
    rng = np.random.default_rng(0)
    runs = []
    for bs in (1, 4, 16, 64):
        lengths = rng.integers(20, 200, bs)
        for k in (0, 2, 4):
            sd = SDSetting(geometric(0.7, k), 0.0) if k else None
            method = "ngram" if k else None
            rows = synthesize(engine, lengths, 32, 64, sd, method, seed=bs + k, noise=noise)
            meta = {"prompt_len": 32, "response_lens": lengths.tolist(), "max_num_seqs": 64, "k": k,
                    "method": method, "workload": f"bs{bs}"}
            heldout = bs == 64 or (bs == 16 and k > 0)
            runs.append(Run(f"bs{bs}_k{k}", rows, meta, heldout))
    return runs


def test_recovers_known_machine(small):
    runs = _runs(small)
    calib = calibrate([r for run in runs if not run.heldout for r in run.rows], small)
    hw = calib["hardware"]
    assert hw["hbm_bw"] == pytest.approx(2e10, rel=0.05)
    assert hw["peak_flops"] == pytest.approx(5e10, rel=0.05)
    ov = hw["overheads"]
    assert ov["iter_s"] == pytest.approx(2e-3, rel=0.05)
    assert ov["per_seq_s"] == pytest.approx(1e-4, rel=0.05)
    assert ov["spec_iter_s"] == pytest.approx(5e-4, rel=0.1)
    assert ov["spec_per_seq_s"] == pytest.approx(4e-5, rel=0.1)
    ngram = calib["drafters"]["ngram"]
    assert ngram["draft_iter_s"] == pytest.approx(1e-3, rel=0.05)
    assert ngram["draft_per_seq_s"] == pytest.approx(5e-5, rel=0.05)


def test_validate_predicts_heldout_within_target(small):
    runs = _runs(small, noise=0.05)  # 5% per-step timing jitter, as on a real machine
    calib = calibrate([r for run in runs if not run.heldout for r in run.rows], small)
    report = validate(calib, small, runs)
    assert len(report) == 5  # bs 64 x 3, bs 16 x 2
    s = summary(report)
    assert s["max_abs_err_time_pct"] < 10
    assert s["max_abs_err_speedup_pct"] < 10
    assert all(r["acceptance_source"] == "fit-runs" for r in report if r["k"])


def test_meta_from_trace_recovers_lengths(small):
    engine = Engine(toy_hw(bw=2e10, flops=5e10, iter_s=1e-3), small)
    rows = synthesize(engine, [5, 9, 9, 20], 12, 8, None, None)
    meta = meta_from_trace(rows)
    assert sorted(meta["response_lens"]) == [5, 9, 9, 20]
    assert meta["prompt_len"] == 12 and meta["k"] == 0


def test_nnls_keeps_coefficients_non_negative():
    a = np.array([[1.0, 0.0], [1.0, 1.0], [1.0, 2.0]])
    y = np.array([3.0, 2.0, 1.0])  # slope -1 is forbidden -> constant fit 2
    np.testing.assert_allclose(nnls(a, y), [2.0, 0.0])


def test_trace_errors_name_the_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.jsonl"):
        load_trace(tmp_path / "nope.jsonl")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"step": 0}\n')
    with pytest.raises(ValueError, match="bad.jsonl.*active"):
        load_trace(bad)


def test_recorded_steps_cost_what_the_calibrated_machine_would_take(small):
    # rows timed by a known machine (memory-bound: the attention pairs do not matter), then replayed through a
    # calibration of that same machine: the cost of the recorded steps is their measured time; on a machine
    # 1.3x slower (every time scaled), the measured time is 1.3x that cost: the drift validate reports
    hw = toy_hw(bw=2e10, flops=1e30, **TRUTH)
    sd = SDSetting(geometric(0.7, 4), 0.0)
    rows = synthesize(Engine(hw, small), np.arange(20, 220, 25), 32, 64, sd, "ngram", seed=3)
    calib = {"hardware": hardware_to_dict(hw),
             "drafters": {"ngram": {"draft_iter_s": 1e-3, "draft_per_seq_s": 5e-5, "draft_frac": 0.0}}}
    measured = sum(r["draft_s"] + r["verify_s"] for r in rows)
    assert recorded_steps_s(calib, small, rows) == pytest.approx(measured, rel=1e-9)
    slow = [{**r, "draft_s": 1.3 * r["draft_s"], "verify_s": 1.3 * r["verify_s"]} for r in rows]
    assert sum(r["draft_s"] + r["verify_s"] for r in slow) / recorded_steps_s(calib, small, slow) == pytest.approx(1.3)
