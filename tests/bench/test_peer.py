"""`specrl bench peer`'s plan, flags and rows, on a tiny checkpoint with specrl's engine only (a vLLM engine
start costs a minute here; its rows come from the same `measure`)."""
from __future__ import annotations

import json
import re
from types import SimpleNamespace

import pytest

from specrl.bench.peer import measure, plan, summary
from specrl.cli.main import main
from tests.helpers import save_tiny

ROW_KEYS = ("engine", "method", "workload", "tokens", "makespan_s", "tokens_per_s")  # what every row carries


def _args(**kw) -> SimpleNamespace:
    base = dict(engines="specrl,vllm", methods="off", workloads="b1", vllm_modes="compile,eager", repeats=2,
                temperature=1.0, max_tokens=4, rl_max_tokens=None, k=2, threads=1, no_audit=False, ignore_eos=False, dtype="auto",
                draft_model=None)
    return SimpleNamespace(**{**base, **kw})


def test_the_engines_alternate_and_vllm_runs_in_both_modes():
    runs = plan(_args(workloads="b1,rl"))
    order = [(r["engine"], r.get("vllm_mode"), r["repeat"]) for r in runs]
    assert order == [("specrl", None, 0), ("vllm", "compile", 0), ("vllm", "eager", 0),
                     ("vllm", "compile", 1), ("vllm", "eager", 1), ("specrl", None, 1)]
    assert all(r["workloads"] == ["b1", "rl"] for r in runs)  # one engine process times every workload


@pytest.mark.parametrize("flag, value, match", [
    ("--engines", "sglang", r"--engines 'sglang': choose from \['specrl', 'vllm'\]"),
    ("--workloads", "b2", r"--workloads 'b2': choose from \['b1', 'b64', 'rl'\]"),
    ("--vllm-modes", "graph", r"--vllm-modes 'graph': choose from"),
    ("--methods", "ngrams", r"ngrams"),
])
def test_a_bad_flag_fails_before_any_engine_starts(flag, value, match, capsys):
    assert main(["bench", "peer", flag, value]) == 2
    assert re.search(match, capsys.readouterr().err)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return save_tiny(tmp_path_factory.mktemp("peer") / "policy", vocab=32, max_pos=96)


def test_one_engine_times_each_workload_and_a_sampled_sd_row_has_its_audit(tiny):
    run = {"engine": "specrl", "method": "off", "workloads": ["b1", "b64"], "repeat": 0}
    off, b64 = measure(run, tiny, _args())
    assert [off["workload"], b64["workload"]] == ["b1", "b64"] and off["build_s"] == b64["build_s"]
    assert set(ROW_KEYS) <= set(off) and "audit_p" not in off
    assert off["tokens"] == 4 and off["tokens_per_s"] == pytest.approx(off["tokens"] / off["makespan_s"])
    assert b64["tokens"] <= 64 * 4
    [fixed] = measure({**run, "workloads": ["b64"]}, tiny, _args(ignore_eos=True))
    assert fixed["tokens"] == 64 * 4 and fixed["ignore_eos"]  # --ignore-eos: every budget to its end
    [sd] = measure({"engine": "specrl", "method": "ngram", "workloads": ["b1"], "repeat": 0}, tiny, _args())
    assert 1e-3 < sd["audit_p"] <= 1.0  # an exact sampler passes
    [greedy] = measure({"engine": "specrl", "method": "ngram", "workloads": ["b1"], "repeat": 0}, tiny,
                       _args(temperature=0.0))
    assert "audit_p" not in greedy  # the audit tests sampled rows only
    [greedy_off] = measure({"engine": "specrl", "method": "off", "workloads": ["b1"], "repeat": 0}, tiny,
                           _args(temperature=0.0))
    assert greedy["digests"] == greedy_off["digests"] and len(greedy["digests"]) == 1  # greedy SD is exact
    assert len(b64["digests"]) == 64 and len(set(b64["digests"])) > 1


def test_rows_name_the_dtype_and_each_engines_default_sd(tiny):
    from specrl.bench.peer import sd_method
    [auto] = measure({"engine": "specrl", "method": "default", "workloads": ["b1"], "repeat": 0}, tiny, _args())
    assert (auto["dtype"], auto["sd"]) == ("float32", "auto")  # the suite pins auto to fp32 (tests/conftest.py)
    [bf16] = measure({"engine": "specrl", "method": "off", "workloads": ["b1"], "repeat": 0}, tiny,
                     _args(dtype="bfloat16"))
    assert (bf16["dtype"], bf16["sd"]) == ("bfloat16", "off")
    assert sd_method({"engine": "vllm", "method": "default"}) is None  # vLLM's default: no SD
    assert sd_method({"engine": "vllm", "method": "ngram"}) == "ngram"
    assert [r["method"] for r in plan(_args(methods="off,default", repeats=1, engines="specrl"))] == ["off", "default"]


def test_rl_takes_the_default_runs_budget_unless_told(tiny):
    from specrl.bench.peer import workload
    prompts, n, budget = workload("rl", tiny, _args())
    assert (len(prompts), n, budget) == (8, 8, 1100)
    assert workload("rl", tiny, _args(rl_max_tokens=64))[2] == 64


def test_each_measurement_runs_in_its_own_process_then_a_summary(tiny, capsys):
    assert main(["bench", "peer", "--model", str(tiny), "--engines", "specrl", "--workloads", "b1", "--repeats",
                 "2", "--max-tokens", "4", "--threads", "1", "--methods", "off"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r.get("summary", False) for r in rows] == [False, False, True]
    assert [r["repeat"] for r in rows[:2]] == [0, 1] and all(r["engine"] == "specrl" for r in rows)
    assert rows[2]["tokens_per_s"] == max(r["tokens_per_s"] for r in rows[:2])


def test_the_summary_keeps_the_faster_vllm_mode_and_skips_errors():
    rows = [{"engine": "vllm", "method": "off", "workload": "b1", "vllm_mode": "compile", "tokens_per_s": 5.0},
            {"engine": "vllm", "method": "off", "workload": "b1", "vllm_mode": "eager", "tokens_per_s": 7.0},
            {"engine": "vllm", "method": "off", "workload": "b64", "error": "exit 1: ..."}]
    assert summary(rows) == [{**rows[1], "summary": True}]


def test_reuse_draws_each_models_rows_over_vllms_sd_off(tmp_path, capsys):
    """--reuse --out: a PNG from printed rows of two models, each engine's best over vLLM's `default` (SD off)."""
    pytest.importorskip("matplotlib")
    from specrl.bench.peer import plot

    def row(model, engine, method, sd, workload, tps, mode=None):
        return {"model": model, "engine": engine, "method": method, "sd": sd, "workload": workload,
                "tokens_per_s": tps, "vllm_mode": mode}
    rows = [row(m, "vllm", "default", "off", w, 100.0, "compile") for m in ("a", "b") for w in ("b1", "rl")]
    rows += [row(m, "specrl", "off", "off", w, 50.0) for m in ("a", "b") for w in ("b1", "rl")]
    rows.append(row("a", "vllm", "default", "off", "b1", 80.0, "eager"))  # the slower mode: not the base
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert main(["bench", "peer", "--reuse", str(path), "--out", str(tmp_path / "p.png")]) == 0
    assert (tmp_path / "p.png").stat().st_size > 1000
    assert json.loads(capsys.readouterr().out.splitlines()[-1]) == {"plot": str(tmp_path / "p.png")}
    drawn = []  # (label, heights) of every bar series, both models
    import matplotlib.axes
    original = matplotlib.axes.Axes.bar

    def bar(self, x, heights, *args, **kw):
        drawn.append((kw.get("label"), list(heights)))
        return original(self, x, heights, *args, **kw)
    matplotlib.axes.Axes.bar = bar
    try:
        plot(rows, str(tmp_path / "q.png"))
    finally:
        matplotlib.axes.Axes.bar = original
    assert sorted(drawn) == sorted([("specrl off (off)", [0.5, 0.5]), ("vllm default (off)", [1.0, 1.0])] * 2)


def test_reuse_needs_out_and_an_existing_file(tmp_path, capsys):
    assert main(["bench", "peer", "--reuse", str(tmp_path / "x.jsonl")]) != 0
    assert "pass --out FILE.png" in capsys.readouterr().err
    assert main(["bench", "peer", "--reuse", str(tmp_path / "none.jsonl"), "--out", str(tmp_path / "p.png")]) != 0
    assert "no such file" in capsys.readouterr().err
