"""`specrl compare`: runs of `specrl train` in one table and one figure; a directory that is not a run is refused."""
from __future__ import annotations

import json

import pytest

from specrl.cli.main import main
from tests.cli.test_errors import one_error_line
from tests.pipeline.fixtures import make_setup, overrides


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("compare")
    setup = make_setup(tmp)
    for name, method in (("sd_on", "suffix"), ("sd_off", "null")):
        assert main(["train", *overrides(*setup, tmp / name, **{"max_steps": 2, "rollout.spec.method": method})]) == 0
    return tmp


def test_a_table_and_a_figure(runs, capsys, tmp_path):
    capsys.readouterr()
    assert main(["compare", str(runs / "sd_on"), f"SD off={runs / 'sd_off'}", "--out", str(tmp_path / "c.png")]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["run", "steps", "acc", "final", "acc", "peak", "step", "s", "rollout", "s", "train",
                              "s", "accept", "len", "probe", "online", "probe", "frozen", "KL", "pi0", "step", "x",
                              "rollout", "x"]
    first, second = out[2].split(), out[3].split()
    assert first[0] == "sd_on" and first[1] == "2" and first[-2:] == ["1.00", "1.00"]  # the first run is the base
    assert second[:3] == ["SD", "off", "2"]
    assert (tmp_path / "c.png").stat().st_size > 10_000


def test_json_rows(runs, capsys):
    capsys.readouterr()
    assert main(["compare", str(runs / "sd_on"), str(runs / "sd_off"), "--json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["run"] for r in rows] == ["sd_on", "sd_off"] and rows[0]["step_speedup"] == 1.0
    assert rows[1]["acceptance_length"] == 1.0  # SD off: one token per target forward
    assert rows[0]["final_accuracy"] is not None and rows[0]["steps"] == 2


@pytest.mark.parametrize("make, expected", [
    (lambda p: p, "has no config.yaml and metrics.jsonl"),
    (lambda p: p / "missing", "does not exist"),
])
def test_a_directory_that_is_not_a_run_is_one_line(tmp_path, capsys, make, expected):
    code = main(["compare", str(make(tmp_path))])
    line = one_error_line(capsys.readouterr().err, "compare")
    assert code == 2 and "is not a run directory" in line and expected in line and "specrl train" in line


def test_a_run_without_a_step_is_one_line(tmp_path, capsys):
    (tmp_path / "config.yaml").write_text("{}\n")
    (tmp_path / "metrics.jsonl").write_text("")
    assert main(["compare", str(tmp_path)]) == 2
    assert "has no finished step yet" in one_error_line(capsys.readouterr().err, "compare")


def _fake_run(path, rows, evals):
    path.mkdir()
    (path / "config.yaml").write_text("seed: 0\n")
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (path / "eval.jsonl").write_text("".join(json.dumps(r) + "\n" for r in evals))
    return str(path)


def test_same_ignores_timings_and_names_a_difference(tmp_path, capsys):
    evals = [{"step": 0, "accuracy": 0.5}]
    a = _fake_run(tmp_path / "a", [{"step": 1, "reward_mean": 0.25, "step_s": 3.0, "tokens_per_s": 9.0}], evals)
    b = _fake_run(tmp_path / "b", [{"step": 1, "reward_mean": 0.25, "step_s": 4.0, "tokens_per_s": 7.0}], evals)
    c = _fake_run(tmp_path / "c", [{"step": 1, "reward_mean": 0.5, "step_s": 3.0}], evals)
    assert main(["compare", a, b, "--same"]) == 0  # only the timings (*_s, *_per_s) differ
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(r["file"], r["equal"], r["keys_compared"]) for r in rows] == [("metrics.jsonl", True, 2),
                                                                           ("eval.jsonl", True, 2)]
    assert main(["compare", a, c, "--same"]) == 1
    first = json.loads(capsys.readouterr().out.splitlines()[0])
    assert first["differences"] == ["row 0 reward_mean: 0.25 != 0.5"]
    code, err = main(["compare", a, b, c, "--same"]), capsys.readouterr().err
    assert code == 2 and "--same compares two runs, got 3" in err


def test_the_drift_probe_is_drawn_and_tabled(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    evals = [{"step": 0, "accuracy": 0.5}]
    rows = [{"step": s, "reward_mean": 0.5, "step_s": 1.0, "rollout_s": 0.5, "train_s": 0.5, "acceptance_length": 2.0,
             "probe_accept_online": 2.0 + 0.1 * s, "probe_accept_newest": 2.1 + 0.1 * s,
             "probe_accept_frozen": 2.0 - 0.1 * s, "probe_kl_pi0": 0.01 * s} for s in (1, 2)]
    a = _fake_run(tmp_path / "a", rows, evals)
    b = _fake_run(tmp_path / "b", [{k: v for k, v in r.items() if not k.startswith("probe")} for r in rows], evals)
    assert main(["compare", a, b, "--json", "--out", str(tmp_path / "c.png")]) == 0
    got = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    # means over the steps: online (2.1 + 2.2) / 2, frozen (1.9 + 1.8) / 2, KL (0.01 + 0.02) / 2
    assert got[0]["probe_accept_online"] == pytest.approx(2.15) and got[0]["probe_accept_frozen"] == pytest.approx(1.85)
    assert got[0]["probe_kl_pi0"] == pytest.approx(0.015) and got[1]["probe_kl_pi0"] != got[1]["probe_kl_pi0"]  # nan
    assert (tmp_path / "c.png").stat().st_size > 10_000


@pytest.fixture
def titles(monkeypatch) -> dict:
    """Each saved figure's panels: {title: [each line's y values]}, filled as `compare.plot` saves."""
    pytest.importorskip("matplotlib")
    from matplotlib.figure import Figure
    got = {}
    real = Figure.savefig
    monkeypatch.setattr(Figure, "savefig", lambda fig, *a, **kw: got.update(
        {ax.get_title(): [ln.get_ydata().tolist() for ln in ax.get_lines()] for ax in fig.axes}) or real(fig, *a, **kw))
    return got


def test_a_graded_reward_draws_its_held_out_mean_beside_the_accuracy(tmp_path, titles):
    from specrl.cli import compare
    rows = [{"step": s, "reward_mean": 0.2, "step_s": 1.0, "rollout_s": 0.5, "train_s": 0.5} for s in (1, 2)]
    graded = _fake_run(tmp_path / "g", rows, [{"step": 0, "accuracy": 0.0, "reward_mean": 0.12},
                                              {"step": 2, "accuracy": 0.0, "reward_mean": 0.25}])
    exact = _fake_run(tmp_path / "e", rows, [{"step": 0, "accuracy": 0.5, "reward_mean": 0.5}])
    compare.plot([compare.load_run(graded), compare.load_run(exact)], tmp_path / "c.png")
    # the graded run's accuracy and its mean reward; the 0/1 run's accuracy alone (its mean is the same)
    assert titles["held-out accuracy (solid), mean reward (dashed)"] == [[0.0, 0.0], [0.12, 0.25], [0.5]]


def test_runs_without_sd_draw_the_logprob_mismatch_instead_of_acceptance(tmp_path, titles):
    from specrl.cli import compare
    rows = [{"step": s, "reward_mean": 0.2, "step_s": 1.0, "rollout_s": 0.5, "train_s": 0.5, "acceptance_length": 1.0,
             "logprob_diff": d} for s, d in ((1, 0.015), (2, 0.02))]
    off = compare.load_run(_fake_run(tmp_path / "off", rows, []))
    compare.plot([off], tmp_path / "c.png")
    assert titles[compare.NO_SD_PANEL[1]] == [[0.015, 0.02]]
    titles.clear()
    on = compare.load_run(_fake_run(tmp_path / "on", [{**r, "acceptance_length": 2.5} for r in rows], []))
    compare.plot([off, on], tmp_path / "c.png")  # one run drafted: acceptance stays
    assert compare.NO_SD_PANEL[1] not in titles and titles[compare.PANELS[-1][1]] == [[1.0, 1.0], [2.5, 2.5]]
